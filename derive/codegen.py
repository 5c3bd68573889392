"""Emit torch code from the proven closed forms: `python -m derive.codegen [--write | --check]`.

The claims' closed forms are interpreted by `CodegenBackend`, a `GeneralBackend` that
*materialises* the model's named quantities (alpha, b, dS, ...): each becomes one line
`name = <torch expression>` printed from the very SymPy expression the general-size proof uses,
and later lines refer to it by name. Derived gradients (dL/dx) become inputs `grad_x`, filled by
torch.autograd in the numeric checks. Which kernels are emitted, and which closed form computes
each output, is read off the registry (`derive.kernels`). The output is
`numeric/generated/attention.py`, with a MANIFEST naming the function that checks each identity
and mutant.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import sympy as sp

from derive import claims as registry
from derive.general import GeneralBackend
from derive.kernels import MATERIALISE, Kernel, api_kernels, check_kernels
from derive.model import LEAVES, Setting
from derive.sumform import UnsupportedNode
from derive.torch_printer import TorchPrinter, align

GENERATED = Path(__file__).resolve().parents[1] / "numeric" / "generated" / "attention.py"
COMMAND = "python -m derive.codegen --write"
# Leaf and scalar names in generated code.
ARG_NAMES = {"U": "u", "WO": "w_o", "Y": "y", "X": "x", "WQ": "w_q", "WK": "w_k", "WV": "w_v", "M": "mask",
             "Delta": "delta", "R": "other_logits", "c": "scale", "eta": "eta"}


class CodegenBackend(GeneralBackend):
    """Records one definition line per materialised quantity, in dependency order."""

    def __init__(self, setting, inputs=(), context="codegen", rewrites=None):
        super().__init__(setting, context)
        self.rewrites = rewrites or {}  # quantity -> the proven identity whose closed side computes it
        self.lines = []  # (name, free index symbols, expr)
        self.defined = set(inputs)
        self.inputs = tuple(inputs)
        self.dims = {}  # materialised name -> index ranges (inputs included), for sizes and comments

    def _quantity(self, name, ix, compute):
        if name not in MATERIALISE:
            return compute(*ix)
        self.dims.setdefault(name, tuple(self.dim_of(i) for i in ix))
        if name not in self.defined:
            self.defined.add(name)
            fresh = self.free_indices([self.dim_of(i) for i in ix])
            expr = self.rewrites[name].closed(self, *fresh) if name in self.rewrites else compute(*fresh)
            if not (isinstance(expr, sp.Indexed) and str(expr.base.label) == name and tuple(expr.indices) == tuple(fresh)):
                self.lines.append((name, tuple(fresh), expr))
        return sp.IndexedBase(name)[ix]

    def derived_grad(self, name, *ix):
        if not self._is_free(name):
            raise ValueError(f"{self.context}: {name} is not free at level {self.setting.level}")
        return sp.IndexedBase(f"grad_{name}")[ix]

    def _grad(self, f, name, ix):
        # dL/dx arrives as an autograd input (derived_grad); other derivatives have no kernel form yet.
        raise NotImplementedError(f"{self.context}: code generation of d/d{name} of an expression other than the loss")


def emit_kernel(kernel: Kernel) -> str:
    m = CodegenBackend(Setting(kernel.level, kernel.loss, kernel.masked, readout=kernel.readout), kernel.inputs, kernel.name,
                       kernel.rewrites)
    results = []
    for out in kernel.outputs:
        ix = m.free_indices(out.dims)
        results.append((out, tuple(ix), out.build(m, *ix)))
    names = _names(m, results)
    sizes = _sizes(names["__args__"], m.dims)
    printer = TorchPrinter({k: v for k, v in names.items() if k != "__args__"}, sizes["code"], m.index_dims)
    body = []
    last_use = _last_uses(m.lines, results)
    temporaries = {name for name, _, _ in m.lines}  # never an argument: inputs are not overwritten
    for t, (name, fresh, expr) in enumerate(m.lines):
        dead = {label for label, last in last_use.items() if last == t and label in temporaries}
        code = _inplace(printer, expr, fresh, dead)
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


def _inplace(printer, expr, axes, dead):
    """The line's code, reusing the buffer of a temporary that dies on it: (T + rest) * f becomes
    T.add_(rest).mul_(f), and the printer's softmax may overwrite a dead argument. Avoids allocating
    n x n buffers (on CPU a fresh large buffer costs page faults: the main cost of a naive line)."""
    candidates = sorted((x for x in sp.sympify(expr).atoms(sp.Indexed)
                         if str(x.base.label) in dead and tuple(x.indices) == tuple(axes) and expr.count(x) == 1),
                        key=sp.default_sort_key)
    for t in candidates:
        chain = _update_chain(expr, t)
        if chain is not None:
            return str(t.base.label) + "".join(f".{op}_({_line(printer, arg, axes).code})" for op, arg in chain)
    printer.overwritable = dead
    try:
        return _line(printer, expr, axes).code
    finally:
        printer.overwritable = set()


def _update_chain(expr, t):
    """[(op, operand), ...] turning t into expr by in-place add/mul, or None."""
    if isinstance(expr, sp.Add) and t in expr.args:
        return [_add_or_sub(sp.Add(*[a for a in expr.args if a != t]))]
    if isinstance(expr, sp.Mul):
        rest = [f for f in expr.args if f != t]
        if t in expr.args:
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
        scalars |= {s.name for s in e.free_symbols if s.name in ("c", "eta")}
    defined = {name for name, _, _ in m.lines}
    names = {label: label for label in defined}
    args = []
    for label in sorted(labels - defined, key=_arg_rank):
        code = ARG_NAMES.get(label, label)
        names[label] = code
        args.append((label, code))
    for s in sorted(scalars):
        names[s] = ARG_NAMES[s]
        args.append((s, ARG_NAMES[s]))
    names["__args__"] = args
    return names


def _sizes(args, quantity_dims):
    """Size variables read off the arguments' shapes (leaf ranges, or those of given quantities)."""
    code, lines = {}, []
    for label, name in args:
        dims = quantity_dims.get(label) or LEAVES.get(label.removeprefix("grad_"), ())
        for pos, dim in enumerate(dims):
            if dim not in code:
                code[dim] = f"{dim}_size"
                lines.append(f"    {dim}_size = {name}.shape[{pos - len(dims)}]")
    return {"code": code, "lines": lines}


def _shape(ix, m):
    from derive.general import SIZE_NAMES

    return "(..." + "".join(", " + SIZE_NAMES[m.dim_of(i)] for i in ix) + ")"  # ...: the batch dims


def _assemble(kernel, args, sizes, body, returned):
    tensors = [name for label, name in args if label not in ("c", "eta")]
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


def run_stage(results, log=print):
    """The `codegen` stage: the committed file must equal a fresh emission of the registry."""
    import time

    from derive.results import Check

    t0 = time.perf_counter()
    text = emit()
    committed = GENERATED.read_text() if GENERATED.exists() else ""
    fresh = committed == text
    functions = text.count("\ndef ")
    measured = {"fresh": fresh, "functions": functions, "lines": text.count("\n")}
    if not fresh:
        measured["reason"] = f"numeric/generated/attention.py differs from a fresh emission: run `{COMMAND}`"
    results.add(Check("codegen/fresh", "codegen", "proof", "", "pass" if fresh else "fail", round(time.perf_counter() - t0, 4),
                      measured, "committed generated file == fresh emission of the proven closed forms"))
    log(f"  {'PASS' if fresh else 'FAIL'} codegen/fresh  {functions} functions  {time.perf_counter() - t0:.3f}s")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m derive.codegen", description="emit numeric/generated/attention.py")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="write the generated file")
    g.add_argument("--check", action="store_true", help="exit 1 when the committed file is stale")
    args = p.parse_args(argv)
    text = emit()
    if args.write:
        GENERATED.parent.mkdir(parents=True, exist_ok=True)
        (GENERATED.parent / "__init__.py").touch()
        GENERATED.write_text(text)
        print(f"wrote {GENERATED}")
        return 0
    fresh = GENERATED.exists() and GENERATED.read_text() == text
    if args.check:
        print("fresh" if fresh else f"stale: run `{COMMAND}`")
        return 0 if fresh else 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

