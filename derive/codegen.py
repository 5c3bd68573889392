"""Emit torch code from the proven closed forms: `python -m derive.codegen [--write | --check]`.

The claims' closed forms are interpreted by `CodegenBackend`, a `GeneralBackend` that
*materialises* the model's named quantities (alpha, b, dS, ...): each becomes one line
`name = <torch expression>` printed from the very SymPy expression the general-size proof uses,
and later lines refer to it by name. Derived gradients (dL/dx) become inputs `grad_x`, filled by
torch.autograd in the numeric checks. Which kernels are emitted, and which closed form computes
each output, is read off the registry (`derive.kernels`). The output is
`numeric/generated/attention.py`, with a MANIFEST naming the function that checks each identity
and mutant.

Each routing mechanism (derive/mechanisms/) with a kernel shape (derive.kernels.kernel_shape) gets its own
kernels in `numeric/generated/mechanisms.py` (`emit_mechanisms`): the model at `Setting(level, ...,
mechanism=name)` at the level where its inputs are leaves (attention: q, k, v; a cell: its logits A and
contents H; a router: X, WR, WE), dS by the mechanism's proved routing form, its content leaf's gradient by
the content form (dV, dH, dWE), every other input's by the chain rule through its logits and content
(differentiated here, symbolically), and a dS kernel per routing mutant; MECHANISMS names them by mechanism,
kind and variant, RETURNS their outputs, so a new mechanism file gets kernels by regeneration alone (and one
registered at run time by `numeric.mechanisms.generated_module`). The codegen stage checks both files.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import sympy as sp

from derive import claims as registry
from derive.general import GeneralBackend, free_symbols
from derive.kernels import (
    MATERIALISE,
    MECHANISM_API,
    Kernel,
    api_kernels,
    check_kernels,
    kernel_shape,
    mechanism_kernels,
    mechanism_outputs,
)
from derive.model import LEAVES, Setting
from derive.sumform import UnsupportedNode
from derive.torch_printer import PATTERNS, TorchPrinter, align

GENERATED = Path(__file__).resolve().parents[1] / "numeric" / "generated" / "attention.py"
COMMAND = "python -m derive.codegen --write"
# Leaf and scalar names in generated code.
ARG_NAMES = {"U": "u", "WO": "w_o", "Y": "y", "X": "x", "WQ": "w_q", "WK": "w_k", "WV": "w_v", "M": "mask",
             "Delta": "delta", "R": "other_logits", "c": "scale", "eta": "eta", "beta": "beta"}
SCALAR_ARGS = ("c", "eta", "beta")  # scalars a kernel may take (beta: a mechanism's free bias)


def arg_name(label):
    """A leaf's name in generated code: ARG_NAMES, else an upper-case leaf in snake case as W_Q is (a mechanism's own
    WR -> w_r, A -> a), else the label itself (ell, grad_q)."""
    if label in ARG_NAMES:
        return ARG_NAMES[label]
    return "_".join(label.lower()) if label.isupper() else label


class CodegenBackend(GeneralBackend):
    """Records one definition line per materialised quantity, in dependency order.

    `symbolic` (the mechanism kernels): a derivative of an expression of the leaves (the chain rule through a
    mechanism's score) is taken symbolically, its Kronecker deltas resolved (`resolve_deltas`), and a contraction
    of more than two operands is planned (`_plan`): factors free of the summed index move out of the sum, and
    factors on the same indices are multiplied into one temporary line first, so the printer contracts two
    operands (a matrix product) instead of an einsum with an n x n x d intermediate."""

    def __init__(self, setting, inputs=(), context="codegen", rewrites=None, symbolic=False):
        super().__init__(setting, context)
        self.rewrites = rewrites or {}  # quantity -> the proven identity whose closed side computes it
        self.lines = []  # (name, free index symbols, expr)
        self.defined = set(inputs)
        self.inputs = tuple(inputs)
        self.quantity_dims = {}  # materialised name -> index ranges (inputs included), for sizes and comments
        self.symbolic = symbolic
        self._planned = {}  # canonical product -> its temporary's name (a product planned twice is computed once)

    def _quantity(self, name, ix, compute):
        if name not in MATERIALISE:
            return compute(*ix)
        self.quantity_dims.setdefault(name, tuple(self.dim_of(i) for i in ix))
        if name not in self.defined:
            self.defined.add(name)
            fresh = self.free_indices([self.dim_of(i) for i in ix])
            expr = self.rewrites[name].closed(self, *fresh) if name in self.rewrites else compute(*fresh)
            if self.symbolic:
                expr = self._plan(resolve_deltas(sp.sympify(expr)))
            if not (isinstance(expr, sp.Indexed) and str(expr.base.label) == name and tuple(expr.indices) == tuple(fresh)):
                self.lines.append((name, tuple(fresh), expr))
        return sp.IndexedBase(name)[ix]

    def derived_grad(self, name, *ix):
        if not self._is_free(name):
            raise ValueError(f"{self.context}: {name} is not free at level {self.setting.level}")
        return sp.IndexedBase(f"grad_{name}")[ix]

    def _grad(self, f, name, ix):
        # dL/dx arrives as an autograd input (derived_grad). In a symbolic kernel, the derivative of an expression
        # of the leaves alone (a mechanism's score) is taken here; a materialised line hides what it depends on.
        if not self.symbolic:
            raise NotImplementedError(f"{self.context}: code generation of d/d{name} of an expression other than the loss")
        hidden = sorted(_labels(f) & {line for line, _, _ in self.lines})
        if hidden:
            raise NotImplementedError(f"{self.context}: d/d{name} of an expression reading the computed quantities "
                                      f"{', '.join(hidden)} (only expressions of the leaves are differentiated)")
        return super()._grad(f, name, ix)

    # -- contraction planning (symbolic kernels) ---------------------------------------------------------
    def _is_number(self, e):
        return not e.atoms(sp.Indexed) and not any(s in self.index_dims for s in e.free_symbols)

    def _plan(self, e):
        """e with every single-index sum planned (see the class docstring)."""
        if isinstance(e, sp.Sum) and len(e.limits) == 1:
            limit = e.limits[0]
            body = self._plan(e.function)
            split = _distributed(body, limit[0], self.index_dims)
            if split is not None:
                return sp.Add(*[self._plan(sp.Sum(term, limit)) for term in split])
            return self._plan_sum(body, limit)
        if isinstance(e, (sp.Indexed, sp.Sum)) or not e.args:
            return e
        return e.func(*[self._plan(a) for a in e.args])

    def _plan_sum(self, body, limit):
        k = limit[0]
        factors = sp.Mul.make_args(body)
        outside = [f for f in factors if k not in free_symbols(f) and not self._is_number(f)]
        inside = [f for f in factors if f not in outside]
        tensors = [f for f in inside if not self._is_number(f)]
        if len(tensors) > 2:
            groups = {}
            for f in tensors:
                groups.setdefault(frozenset(x for x in free_symbols(f) if x in self.index_dims), []).append(f)
            inside = [f for f in inside if self._is_number(f)]
            for group in groups.values():
                inside.append(self._temporary(sp.Mul(*group)) if len(group) > 1 else group[0])
        elif (len(tensors) == 2 and self.index_dims.get(k) in self.mechanism.dims
              and all(isinstance(f, sp.Indexed) for f in tensors)):
            # a sum over a mechanism's own few options (a cell's 2, a router's E) of two entries, one reading every
            # index of the other (sum_o w_io H_ioa): their broadcast product, then a sum, rather than a batched
            # matrix product of one tiny matrix per position
            reads = [frozenset(x for x in free_symbols(f) if x in self.index_dims) for f in tensors]
            if reads[0] < reads[1] or reads[1] < reads[0]:
                inside = [f for f in inside if self._is_number(f)] + [self._temporary(sp.Mul(*tensors))]
        return sp.Mul(*outside) * sp.Sum(sp.Mul(*inside), limit)

    def _temporary(self, product):
        """A line computing `product` (once per kernel), referred to by its indices."""
        free = {x for x in free_symbols(product) if x in self.index_dims}
        order = []  # the indices in the order the product's entries read them: the same for every line using it
        for atom in sorted(product.atoms(sp.Indexed), key=sp.default_sort_key):
            order += [x for x in atom.indices if x in free and x not in order]
        order += sorted(free - set(order), key=sp.default_sort_key)
        slots = {x: sp.Symbol(f"_slot{p}_{self.index_dims[x]}", integer=True) for p, x in enumerate(order)}
        key = _bound_canonical(product.xreplace(slots), self.index_dims)
        if key not in self._planned:
            name = f"prod{len(self._planned)}"
            self._planned[key] = name
            fresh = self.free_indices([self.index_dims[x] for x in order])
            self.quantity_dims[name] = tuple(self.index_dims[x] for x in order)
            self.lines.append((name, tuple(fresh), product.xreplace(dict(zip(order, fresh)))))
        return sp.IndexedBase(self._planned[key])[tuple(order)]


def resolve_deltas(e):
    """e with every sum over a Kronecker delta of its index resolved, sum_k delta(k, x) f(k) = f(x) (all ranges full,
    as on the general path); a delta free of a sum's index moves out of it, to meet the sum over its own."""
    if isinstance(e, sp.Sum):  # SymPy merges nested sums into one with several limits, the innermost first
        body = resolve_deltas(e.function)
        for limit in e.limits:
            body = _resolve_sum(body, limit)
        return body
    if isinstance(e, sp.Indexed) or not e.args:
        return e
    return e.func(*[resolve_deltas(a) for a in e.args])


def _resolve_sum(body, limit):
    if body == 0:  # a term of the chain rule through what does not read the leaf (sympy keeps Sum(0))
        return sp.S.Zero
    if not body.atoms(sp.KroneckerDelta):
        return sp.Sum(body, limit)
    return sp.Add(*[_resolve_term(term, limit) for term in sp.Add.make_args(sp.expand_mul(body, deep=False))])


def _resolve_term(term, limit):
    k = limit[0]
    factors = sp.Mul.make_args(term)
    for d in factors:
        if isinstance(d, sp.KroneckerDelta) and k in d.args:
            (other,) = [x for x in d.args if x != k] or [k]
            return sp.Mul(*[f for f in factors if f is not d]).xreplace({k: other})
    out = [f for f in factors if isinstance(f, sp.KroneckerDelta) and k not in f.free_symbols]
    return sp.Mul(*out) * sp.Sum(sp.Mul(*[f for f in factors if f not in out]), limit)


def _distributed(body, k, index_dims):
    """The terms of sum_k (a + b) rest as a rest + b rest, when the terms of the sum factor read different indices
    (sum_t (M_it - M_jt) ell_t: two matrix-vector products, not an n x n x n broadcast); else None."""
    factors = sp.Mul.make_args(body)
    for f in factors:
        if isinstance(f, sp.Add) and k in free_symbols(f):
            reads = {frozenset(x for x in free_symbols(t) if x in index_dims) for t in f.args}
            if len(reads) > 1:
                rest = sp.Mul(*[g for g in factors if g is not f])
                return [t * rest for t in f.args]
    return None


def _bound_canonical(e, index_dims, depth=0):
    """e with each sum's index renamed by its nesting depth (equal up to the names of bound indices -> equal)."""
    if isinstance(e, sp.Sum) and len(e.limits) == 1:
        k, lo, hi = e.limits[0]
        bound = sp.Symbol(f"_bound{depth}_{index_dims.get(k, 'x')}", integer=True)
        return sp.Sum(_bound_canonical(e.function.xreplace({k: bound}), index_dims, depth + 1), (bound, lo, hi))
    if isinstance(e, sp.Indexed) or not e.args:
        return e
    return e.func(*[_bound_canonical(a, index_dims, depth) for a in e.args])


# The printer's helpers (derive.torch_printer.PATTERNS) each generated module defines in its header.
ATTENTION_HELPERS = ("_recip", "_softmax", "_softmax_")
MECHANISM_HELPERS = ATTENTION_HELPERS + ("_softmax_extra", "_log_matmul_exp")


def emit_kernel(kernel: Kernel, helpers=ATTENTION_HELPERS) -> str:
    """One kernel's source; UnsupportedNode when it would call a printer helper its module does not define."""
    code = _emit_kernel(kernel)
    missing = sorted({h for _, _, h in PATTERNS if h and h not in helpers and f"{h}(" in code})
    if missing:
        raise UnsupportedNode(f"{kernel.name} needs the helper(s) {', '.join(missing)}, which its module does not define")
    return code


def _emit_kernel(kernel: Kernel) -> str:
    setting = Setting(kernel.level, kernel.loss, kernel.masked, readout=kernel.readout, mechanism=kernel.mechanism)
    m = CodegenBackend(setting, kernel.inputs, kernel.name, kernel.rewrites, kernel.symbolic)
    results = []
    for out in kernel.outputs:
        ix = m.free_indices(out.dims)
        expr = out.build(m, *ix)
        if kernel.symbolic:  # a closed form returned as it is (an options mechanism's dX, dH): planned like a line
            expr = m._plan(resolve_deltas(sp.sympify(expr)))
        results.append((out, tuple(ix), expr))
    leaves = m.leaves() if hasattr(m, "leaves") else LEAVES
    if kernel.symbolic:
        results = _share_leaf_functions(m, results, leaves)
        leaves = {**leaves, "M": ("n", m.mechanism.axis)}  # the mask pattern reads (position, option)
    names = _names(m, results)
    sizes = _sizes(names["__args__"], m.quantity_dims, leaves)
    bound = {k: v for k, v in names.items() if k != "__args__"}
    own = {d: name for d, name in _size_names(m).items() if d in m.mechanism.dims}
    bound.update({name: sizes["code"][d] for d, name in own.items() if d in sizes["code"]})  # E -> e_size
    printer = TorchPrinter(bound, sizes["code"], m.index_dims)
    printer.positive_reciprocal = kernel.symbolic
    printer.positive_labels = {name for name, _, expr in m.lines if isinstance(expr, sp.exp)}
    body = []
    last_use = _last_uses(m.lines, results)
    # never an argument, nor a line that only renames one (a cell's logits s = A): inputs are not overwritten
    temporaries = {name for name, _, expr in m.lines if not (isinstance(expr, sp.Indexed) and str(expr.base.label) in leaves)}
    for t, (name, fresh, expr) in enumerate(m.lines):
        dead = {label for label, last in last_use.items() if last == t and label in temporaries}
        code = _inplace(printer, expr, fresh, dead, split=kernel.symbolic)
        if code != name:
            body.append(f"    {name} = {code}  # {_shape(fresh, m)}")
    returned = []
    for out, ix, expr in results:
        line = _line(printer, expr, ix)
        if line.code != out.name:
            shape = _shape(ix, m)
            body.append(f"    {out.name} = {line.code}  # {'a number, broadcast to ' + shape if line.number else shape}")
        returned.append(out.name)
    return _assemble(kernel, names["__args__"], sizes, body, returned)


def _share_leaf_functions(m, results, leaves):
    """exp of a whole leaf (e^q, e^k) read by more than one line becomes a line of its own, read by all (outside
    the log of a sum of exps, which the printer max-shifts itself). Returns `results` with the same replacement."""
    computed = {name for name, _, _ in m.lines}

    def key(node):
        if isinstance(node, sp.exp) and isinstance(node.args[0], sp.Indexed):
            x = node.args[0]
            label = str(x.base.label)
            if label in leaves and label not in computed and len(set(x.indices)) == len(x.indices):
                return label
        return None

    found = {}

    def visit(e):
        if isinstance(e, sp.log):
            return
        label = key(e)
        if label is not None:
            found.setdefault(label, []).append(e)
            return
        for a in e.args:
            visit(a)

    for expr in [e for _, _, e in m.lines] + [e for _, _, e in results]:
        visit(sp.sympify(expr))
    shared = sorted(label for label, nodes in found.items() if len(nodes) > 1)
    if not shared:
        return results
    head, mapping = [], {}
    for label in shared:
        name = f"exp_{label}"
        fresh = m.free_indices(leaves[label])
        head.append((name, tuple(fresh), sp.exp(sp.IndexedBase(label)[tuple(fresh)])))
        m.quantity_dims[name] = tuple(leaves[label])
        for node in found[label]:
            mapping[node] = sp.IndexedBase(name)[node.args[0].indices]

    def replace(e):
        if e in mapping:
            return mapping[e]
        if isinstance(e, (sp.log, sp.Indexed)) or not e.args:
            return e
        return e.func(*[replace(a) for a in e.args])

    m.lines[:] = head + [(name, fresh, replace(sp.sympify(e))) for name, fresh, e in m.lines]
    return [(out, ix, replace(sp.sympify(e))) for out, ix, e in results]


def _labels(expr):
    return {str(x.base.label) for x in sp.sympify(expr).atoms(sp.Indexed)}


def _last_uses(lines, results):
    """Index of the last line reading each materialised name (outputs count as reading last)."""
    last = {}
    for t, (_, _, expr) in enumerate(lines):
        for label in _labels(expr):
            last[label] = t
    for _, _, expr in results:
        for label in _labels(expr):
            last[label] = len(lines)
    return last


def _inplace(printer, expr, axes, dead, split=False):
    """The line's code, reusing the buffer of a temporary that dies on it: (T + rest) * f becomes
    T.add_(rest).mul_(f), and the printer's softmax may overwrite a dead argument. Avoids allocating
    n x n buffers (on CPU a fresh large buffer costs page faults: the main cost of a naive line)."""
    candidates = sorted((x for x in sp.sympify(expr).atoms(sp.Indexed)
                         if str(x.base.label) in dead and tuple(x.indices) == tuple(axes) and expr.count(x) == 1),
                        key=sp.default_sort_key)
    for t in candidates:
        chain = _update_chain(expr, t, split)
        if chain is not None:
            return str(t.base.label) + "".join(f".{op}_({_line(printer, arg, axes).code})" for op, arg in chain)
    printer.overwritable = dead
    try:
        return _line(printer, expr, axes).code
    finally:
        printer.overwritable = set()


def _update_chain(expr, t, split=False):
    """[(op, operand), ...] turning t into expr by in-place add/mul, or None. `split` (the mechanism kernels):
    t * f * g as t.mul_(f).mul_(g), one in-place product per tensor factor rather than a temporary f * g."""
    if isinstance(expr, sp.Add) and t in expr.args:
        return [_add_or_sub(sp.Add(*[a for a in expr.args if a != t]))]
    if isinstance(expr, sp.Mul):
        rest = [f for f in expr.args if f != t]
        if t in expr.args:
            tensors = [f for f in rest if f.atoms(sp.Indexed)]
            if split and len(tensors) > 1:
                numbers = [f for f in rest if f not in tensors]
                return [("mul", sp.Mul(*numbers, tensors[0]))] + [("mul", f) for f in tensors[1:]]
            return [("mul", sp.Mul(*rest))]
        for f in expr.args:
            if isinstance(f, sp.Add) and t in f.args:
                others = sp.Mul(*[g for g in expr.args if g is not f])
                return [_add_or_sub(sp.Add(*[a for a in f.args if a != t])), ("mul", others)]
    return None


def _add_or_sub(term):
    """t.sub_(x) rather than t.add_(-x): one allocation fewer."""
    if term.could_extract_minus_sign():
        return ("sub", -term)
    return ("add", term)


def _line(printer, expr, axes):
    printer.target = tuple(axes)
    return align(printer.tensor(expr), axes)


ARG_ORDER = ("q", "k", "v", "s", "alpha", "o", "U", "X", "WQ", "WK", "WV", "WO", "Y", "dQ", "dK", "dV", "Delta", "M")


def _arg_rank(label):
    base = label.removeprefix("grad_")
    rank = ARG_ORDER.index(base) if base in ARG_ORDER else len(ARG_ORDER)
    return (label.startswith("grad_"), rank, label)


def _names(m, results):
    """Bind every IndexedBase label and scalar to a code name; collect the function's arguments."""
    exprs = [e for _, _, e in m.lines] + [e for _, _, e in results]
    labels = set()
    scalars = set()
    for e in exprs:
        e = sp.sympify(e)
        labels |= {str(x.base.label) for x in e.atoms(sp.Indexed)}
        scalars |= {s.name for s in e.free_symbols if s.name in SCALAR_ARGS}
    defined = {name for name, _, _ in m.lines}
    names = {label: label for label in defined}
    args = []
    for label in sorted(labels - defined, key=_arg_rank):
        code = arg_name(label)
        names[label] = code
        args.append((label, code))
    for s in sorted(scalars):
        names[s] = ARG_NAMES[s]
        args.append((s, ARG_NAMES[s]))
    names["__args__"] = args
    return names


def _sizes(args, quantity_dims, leaves=LEAVES):
    """Size variables read off the arguments' shapes (leaf ranges, or those of given quantities)."""
    code, lines = {}, []
    for label, name in args:
        dims = quantity_dims.get(label) or leaves.get(label.removeprefix("grad_"), ())
        for pos, dim in enumerate(dims):
            if dim not in code:
                code[dim] = f"{dim}_size"
                lines.append(f"    {dim}_size = {name}.shape[{pos - len(dims)}]")
    return {"code": code, "lines": lines}


def _size_names(m):
    """dim -> the name of its size symbol: the model's (SIZE_NAMES) and a mechanism's own free dims (experts: E)."""
    from derive.general import SIZE_NAMES

    return {**SIZE_NAMES, **{d: str(v) for d, v in m.sizes.items() if isinstance(v, sp.Symbol) and d not in SIZE_NAMES}}


def _shape(ix, m):
    names = _size_names(m)
    return "(..." + "".join(", " + names.get(m.dim_of(i), str(m.sizes[m.dim_of(i)])) for i in ix) + ")"  # ...: batch dims


def _assemble(kernel, args, sizes, body, returned):
    tensors = [name for label, name in args if label not in SCALAR_ARGS]
    signature = ", ".join(name for _, name in args)
    head = [f"def {kernel.name}({signature}):", f'    """{kernel.doc}"""']
    used = "\n".join(body)
    prelude = [line for line in sizes["lines"] if line.split("=")[0].strip() in used]
    if "_like" in used:
        prelude.append(f"    _like = dict(dtype={tensors[0]}.dtype, device={tensors[0]}.device)")
    ret = f"    return {returned[0]}" if len(returned) == 1 else "    return " + ", ".join(returned)
    return "\n".join(head + prelude + body + [ret]) + "\n"


HEADER = f'''# GENERATED FILE: do not edit. Regenerate with `{COMMAND}`.
# Emitted by derive/codegen.py from the closed forms of the claim registry (derive/paper_claims.py, derive/head_claims.py),
# the same SymPy objects the derivation engine proves. The codegen stage fails when this file
# differs from a fresh emission.
"""Torch kernels generated from the proven closed forms of the claims (see derive/codegen.py)."""
import torch


def _recip(x):
    """1/x with 1/0 := 0, so a fully masked row has zero attention and zero gradients."""
    return torch.where(x == 0, torch.zeros_like(x), 1 / x)


def host_readable(t):
    """Whether t's values may be read on the host for free: a plain CPU tensor, outside torch.compile and
    torch.func transforms (where a read is a graph break or an error); the meta device has no values."""
    return (t.device.type == "cpu" and not torch.compiler.is_compiling()
            and not torch._C._functorch.is_functorch_wrapped_tensor(t))


def _softmax(x, mask, dim, inplace=False):
    """The softmax pattern M e^x / sum M e^x, max-shifted (torch.softmax); fully masked rows give 0."""
    if mask is None:
        return torch.softmax(x, dim)
    allowed = mask if mask.dtype == torch.bool else mask != 0  # ~ on a bool mask is ~30x cheaper than == 0
    x = x.masked_fill_(~allowed, float("-inf")) if inplace else x.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(x, dim)
    live = allowed.any(dim, keepdim=True)  # a row with nothing to attend to gives 0/0: set to 0 below
    if host_readable(live) and bool(live.all()):  # on the CPU a read is free and spares a pass
        return out
    return out.masked_fill_(~live, 0.0)  # elsewhere the mask alone decides: the data is never read


def _softmax_(x, mask, dim):
    """_softmax that may overwrite x (a temporary that dies on this line)."""
    return _softmax(x, mask, dim, inplace=True)
'''


# Why a claim's side may have no kernel form: a node the printer refuses, a derivative other than dL/dx.
NO_KERNEL_FORM = (UnsupportedNode, NotImplementedError, ValueError)

GENERATED_MECHANISMS = GENERATED.parent / "mechanisms.py"
MECHANISM_HEADER = f'''# GENERATED FILE: do not edit. Regenerate with `{COMMAND}`.
# Emitted by derive/codegen.py from the routing mechanisms (derive/mechanisms/: each one's score, weight, proved
# routing form and mutants; derive/kernels.py: which kernels), the same SymPy objects the derivation engine proves.
# The codegen stage fails when this file differs from a fresh emission.
"""Torch kernels of every routing mechanism with a kernel shape, generated from its closed forms (see derive/codegen.py):
attention's (weights over keys from logits of q and k, mixing v) and the options shape (weights over the mechanism's
own options from its logits, mixing each option's own content: a gate's or a cell's inputs, a router's experts).
MECHANISMS[name][kind][variant] names each kernel (kinds: derive.kernels.MECHANISM_API; variants: masked, unmasked),
RETURNS its outputs, MUTANTS each routing mutant's dS kernel, and UNEMITTED says why a mechanism or mutant has none.
The mask is a 0/1 float tensor broadcastable to (..., n, n), 1 where query i may attend to key j; for a router,
(..., n, E), 1 where token i selected expert e."""
import torch

from numeric.generated.attention import _recip, _softmax, _softmax_  # noqa: F401  (the helpers the kernels share)


def _softmax_extra(x, mask, dim, extra):
    """M e^x / (e^extra + sum M e^x): a softmax with one more logit in its normaliser (an attention sink),
    max-shifted over x and the extra logit; a fully masked row gives 0."""
    if mask is not None:
        x = x.masked_fill(~(mask if mask.dtype == torch.bool else mask != 0), float("-inf"))
    extra = torch.as_tensor(extra, dtype=x.dtype, device=x.device)
    top = torch.maximum(x.amax(dim, keepdim=True), extra)
    e = torch.exp(x - top)
    return e / (e.sum(dim, keepdim=True) + torch.exp(extra - top))


def _log_matmul_exp(x, y):
    """log(exp(x) @ exp(y)^T), each row of x and of y max-shifted: finite wherever the result is."""
    mx, my = x.amax(-1, keepdim=True), y.amax(-1, keepdim=True)
    return torch.log(torch.exp(x - mx) @ torch.exp(y - my).mT).add_(mx).add_(my.mT)  # in place: no n x n copies
'''
# What may go wrong emitting a mechanism's closed forms besides NO_KERNEL_FORM: a mechanism written for a model
# version with other quantities. Recorded in UNEMITTED with the reason, never a crash of the codegen stage.
MECHANISM_FAILURES = NO_KERNEL_FORM + (TypeError, KeyError, AttributeError)


def emit(include_extra=False) -> str:
    """The generated module: the API's kernels, a check kernel per identity and equality mutant, and
    MANIFEST naming each check kernel. The committed file holds the paper's claims only; with
    `include_extra`, a claim registered beyond them whose sides have no kernel form goes to UNEMITTED
    with the reason (a paper claim's must emit)."""
    builtin = registry.builtin_ids()
    claims = [c for c in registry.claims() if include_extra or c.id in builtin]
    parts = [emit_kernel(k) for k in api_kernels(claims)]
    manifest, unemitted = {}, {}
    for claim in claims:
        for kernel in check_kernels([claim]):
            try:
                parts.append(emit_kernel(kernel))
            except NO_KERNEL_FORM as exc:
                if claim.id in builtin:
                    raise
                unemitted[kernel.key] = f"{type(exc).__name__}: {exc}"
                continue
            manifest[kernel.key] = kernel.name
        for m in claim.mutants:
            if m.constant is not None:
                unemitted[m.id] = "a bound constant, not a closed form (the derive stage's saturation search attacks it)"
    return HEADER + _manifest(manifest, unemitted) + "".join("\n\n" + p for p in parts)


def _manifest(checks, unemitted):
    def literal(key):
        return json.dumps(key) if isinstance(key, str) else "(" + ", ".join(map(json.dumps, key)) + ")"

    def table(name, entries):
        rows = [f"    {literal(k)}: {json.dumps(v)}," for k, v in entries.items()]
        return [f"{name} = {{"] + rows + ["}"] if rows else [f"{name} = {{}}"]

    lines = ["# The function that checks each identity, keyed (claim id, identity name), and each mutant, keyed by its id."]
    lines += table("MANIFEST", checks)
    lines += ["# Identities and mutants with no check function, and why."] + table("UNEMITTED", unemitted)
    return "\n\n" + "\n".join(lines) + "\n"


def emit_mechanisms(names=None) -> str:
    """The mechanisms' module: every built-in mechanism (or those called `names`, registered ones included) with a
    kernel shape (derive.kernels.kernel_shape: attention's, or the options shape of a gate, a cell or a router) gets the
    kernels of derive.kernels.MECHANISM_API per variant of its shape, and each of its routing mutants a dS kernel;
    MECHANISMS and MUTANTS name them, RETURNS names each kind's outputs, UNEMITTED says why a mechanism (no kernel
    shape, a closed form the printer refuses) or a mutant (another question's, or its form refused) has none."""
    from derive import mechanisms

    mechs = mechanisms.builtin() if names is None else [mechanisms.get(n) for n in names]
    parts, table, returns, mutants, unemitted = [], {}, {}, {}, {}
    for mech in mechs:
        try:
            shape, why = kernel_shape(mech)
        except MECHANISM_FAILURES as exc:
            shape, why = None, f"its kernel shape: {type(exc).__name__}: {exc}"
        emitted = {}
        for kernel in () if why else mechanism_kernels(mech):
            try:
                emitted[kernel.key] = (kernel, emit_kernel(kernel, MECHANISM_HELPERS))
            except MECHANISM_FAILURES as exc:
                if len(kernel.key) == 3:  # one of the mechanism's own kernels: the mechanism has none
                    why = f"{kernel.name}: {type(exc).__name__}: {exc}"
                    break
                unemitted.setdefault(kernel.key[0], f"{kernel.name}: {type(exc).__name__}: {exc}")
        if why:
            unemitted[mech.name] = why
            for mutant in mech.mutants:
                unemitted[mutant.id] = f"its mechanism {mech.name} has no kernels"
            continue
        for key, (kernel, code) in emitted.items():
            parts.append(code)
            if len(key) == 3:
                table.setdefault(mech.name, {}).setdefault(key[1], {})[key[2]] = kernel.name
        returns[mech.name] = {api.kind: list(mechanism_outputs(shape, api)) for api in MECHANISM_API}
        for mutant in mech.mutants:
            if mutant.question != "routing":
                unemitted[mutant.id] = (f"a mutant of the {mutant.question} question: only routing mutants (a closed form "
                                        "of dS) have a kernel")
            elif mutant.id not in unemitted:
                mutants[mutant.id] = {"mechanism": mech.name, "question": mutant.question,
                                      **{v: emitted[mutant.id, v][0].name for v in shape.variants}}
    manifest = ["# Each mechanism's kernels: MECHANISMS[name][kind][variant] -> the function's name. A mechanism whose weights",
                "# read no mask (a cell's gates) has one variant, unmasked: its masked kernels would be the same functions.",
                "MECHANISMS = " + json.dumps(table, indent=4),
                "# What each kind of kernel returns, in order (dS: dL/d its logits; d<leaf>: the gradient of an input).",
                "RETURNS = " + json.dumps(returns, indent=4),
                "# Each routing mutant's dS kernel (a wrong closed form in place of the routing form), per variant.",
                "MUTANTS = " + json.dumps(mutants, indent=4),
                "# Mechanisms and mutants with no kernels, and why.",
                "UNEMITTED = " + json.dumps(unemitted, indent=4)]
    return MECHANISM_HEADER + "\n\n" + "\n".join(manifest) + "\n" + "".join("\n\n" + p for p in parts)


def _targets():
    """(path, fresh emission) of each generated file."""
    return [(GENERATED, emit()), (GENERATED_MECHANISMS, emit_mechanisms())]


def run_stage(results, log=print):
    """The `codegen` stage: each committed file must equal a fresh emission (the registry's claims; the mechanisms)."""
    import time

    from derive.results import Check

    t0 = time.perf_counter()
    files = {}
    for path, text in _targets():
        fresh = path.exists() and path.read_text() == text
        files[path.name] = {"fresh": fresh, "functions": text.count("\ndef "), "lines": text.count("\n")}
    fresh = all(f["fresh"] for f in files.values())
    attention = files[GENERATED.name]
    measured = {"fresh": fresh, "functions": attention["functions"], "lines": attention["lines"], "files": files}
    if not fresh:
        stale = ", ".join(f"numeric/generated/{name}" for name, f in files.items() if not f["fresh"])
        measured["reason"] = f"{stale} differs from a fresh emission: run `{COMMAND}`"
    results.add(Check("codegen/fresh", "codegen", "proof", "", "pass" if fresh else "fail", round(time.perf_counter() - t0, 4),
                      measured, "committed generated files == fresh emission of the proven closed forms"))
    functions = sum(f["functions"] for f in files.values())
    log(f"  {'PASS' if fresh else 'FAIL'} codegen/fresh  {functions} functions  {time.perf_counter() - t0:.3f}s")


def main(argv=None, prog="python -m derive.codegen"):
    from derive import options

    p = options.parser(prog, "emit numeric/generated/attention.py and numeric/generated/mechanisms.py (default: print "
                             "attention.py)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="write the generated files")
    g.add_argument("--check", action="store_true", help="exit 1 when a committed file is stale")
    p.add_argument("--mechanisms", action="store_true", help="print the mechanisms' module instead of attention.py")
    args = p.parse_args(argv)
    if args.write:
        GENERATED.parent.mkdir(parents=True, exist_ok=True)
        (GENERATED.parent / "__init__.py").touch()
        for path, text in _targets():
            path.write_text(text)
            print(f"wrote {path}")
        return 0
    if args.check:
        stale = [path.name for path, text in _targets() if not (path.exists() and path.read_text() == text)]
        print(f"stale: {', '.join(stale)}: run `{COMMAND}`" if stale else "fresh")
        return 1 if stale else 0
    sys.stdout.write(emit_mechanisms() if args.mechanisms else emit())
    return 0


if __name__ == "__main__":
    sys.exit(main())

