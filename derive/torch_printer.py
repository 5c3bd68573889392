"""A torch printer for index-notation expressions, built on SymPy's `Printer` dispatch.

Every `_print_<Class>` returns a `Tensor`: Python code, the index symbols of its trailing axes
(batch/head dimensions ride in front as `...`) and the precedence of the code's outermost operator.
Operands are parenthesised by precedence, as `sympy.printing` does with `parenthesize`, and printed
code is never edited afterwards. A sum over dummies of a product becomes one contraction (`@`,
`torch.linalg.vecdot`, `.sum` or `torch.einsum("...ia,...ja->...ij")`); elementwise lines broadcast
by inserting `None` axes; the softmax pattern M e^x / sum_k M e^x becomes a fused, max-shifted
softmax (with one more logit e^y in the normaliser, an attention sink: `_softmax_extra`) and log(sum_c e^z)
a logsumexp; the logistic pattern e^x / (1 + e^x) becomes torch.sigmoid and
log(sum_a e^{x_ia} e^{y_ja}) a max-shifted log of a matrix product (`_log_matmul_exp`), so neither overflows
(`PATTERNS` lists the fused patterns and the helpers they call). Anything else raises `UnsupportedNode`
(strict: no silent fallback). SymPy's own `TorchPrinter` is not used: it prints square transposes wrongly and passes
scalars to einsum.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import NamedTuple

import sympy as sp
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.printer import Printer

from derive.general import SIZE_NAMES, GeneralBackend
from derive.sumform import UnsupportedNode

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Python's operators: + -, then * / @ (and a leading minus, printed as SymPy does), then **, then
# names, calls, subscripts and attributes.
ADD, MUL, POW, ATOM = PRECEDENCE["Add"], PRECEDENCE["Mul"], PRECEDENCE["Pow"], PRECEDENCE["Atom"]
# The fused patterns: what the printer recognises, what it prints, and the helper (defined in the generated
# module's header) the printed code calls, if any.
PATTERNS = (
    ("M_ij e^{x_ij} / sum_k M_ik e^{x_ik}", "_softmax(x, M, dim) (max-shifted; an empty row gives 0)", "_softmax"),
    ("M_ij e^{x_ij} / (e^y + sum_k M_ik e^{x_ik})", "_softmax_extra(x, M, dim, y) (one more logit: a sink)",
     "_softmax_extra"),
    ("log sum_k e^{x_k}", "torch.logsumexp(x, dim)", None),
    ("log sum_a e^{x_ia} e^{y_ja}", "_log_matmul_exp(x, y) (max-shifted per row of x and of y)", "_log_matmul_exp"),
    ("e^x / (1 + e^x)", "torch.sigmoid(x)", None),
    ("1 / (1 + e^x)", "torch.sigmoid(-x)", None),
)


class Tensor(NamedTuple):
    code: str
    axes: tuple  # index symbols of the trailing axes, in order
    prec: int = ATOM  # precedence of the code's outermost operator
    number: bool = False  # a Python number (sizes, c, eta, constants): no batch dims to broadcast


def paren(t: Tensor, level: int, strict: bool = False) -> str:
    """t's code, in parentheses when its operator binds looser than `level` (or as loose, if strict)."""
    return f"({t.code})" if t.prec < level or (strict and t.prec == level) else t.code


class TorchPrinter(Printer):
    """Prints one right-hand side; `names` maps IndexedBase labels and scalar symbols to code."""

    printmethod = "_torch_einsum"

    def __init__(self, names: dict, sizes: dict, index_dims: dict):
        super().__init__()
        self.names = names  # str label / Symbol -> code name
        self.sizes = sizes  # dim -> code for its size
        self.index_dims = index_dims
        self.target = ()  # preferred axis order of the line being printed
        self.overwritable = set()  # labels of temporaries that die on this line (softmax may reuse them)
        # 1/x of an x positive by construction (a sum of products of exps) without the 1/0 := 0 guard of _recip
        # (the mechanism kernels; the committed attention kernels keep _recip everywhere).
        self.positive_reciprocal = False
        self.positive_labels = set()  # temporaries positive by construction (e^q computed once: derive.codegen)

    def _order(self, axes):
        """Axes in the order of the line's target where they occur there, the rest after."""
        axes = tuple(axes)
        rank = {a: i for i, a in enumerate(self.target)}
        return tuple(sorted(axes, key=lambda a: (rank.get(a, len(rank)), axes.index(a))))

    @contextmanager
    def _natural_order(self):
        """No preferred axis order: for the operands of a contraction, which reads any layout."""
        target, self.target = self.target, ()
        try:
            yield
        finally:
            self.target = target

    def emptyPrinter(self, expr):
        raise UnsupportedNode(f"the torch printer cannot print {type(expr).__name__}: {expr}")

    def tensor(self, expr) -> Tensor:
        return self._print(sp.sympify(expr))

    def _is_number(self, e):
        """No tensor entry and no index: a Python number at run time."""
        return not e.atoms(sp.Indexed) and not any(s in self.index_dims for s in e.free_symbols)

    def _size(self, dim):
        if dim not in self.sizes:
            raise UnsupportedNode(f"the size of {SIZE_NAMES[dim]} cannot be read off the kernel's arguments")
        return self.sizes[dim]

    # -- leaves ------------------------------------------------------------------------------
    def _print_Indexed(self, e):
        idx = tuple(e.indices)
        if len(set(idx)) != len(idx) or not all(isinstance(i, sp.Symbol) for i in idx):
            raise UnsupportedNode(f"diagonal or offset indexing is not supported: {e}")
        label = str(e.base.label)
        if label not in self.names:
            raise UnsupportedNode(f"no tensor bound to {label}")
        return Tensor(self.names[label], idx)

    def _print_Symbol(self, e):
        if e in self.index_dims:
            raise UnsupportedNode(f"a bare index {e} cannot be printed as a tensor")
        for dim, name in SIZE_NAMES.items():
            if e.name == name:
                return Tensor(self._size(dim), (), number=True)
        if e.name not in self.names:
            raise UnsupportedNode(f"no value bound to scalar {e}")
        return Tensor(self.names[e.name], (), number=True)

    def _print_Integer(self, e):
        return Tensor(str(int(e)), (), ATOM if e >= 0 else MUL, number=True)

    def _print_Rational(self, e):
        return Tensor(f"{e.p} / {e.q}", (), MUL, number=True)

    def _print_Float(self, e):
        return Tensor(repr(float(e)), (), ATOM if e >= 0 else MUL, number=True)

    def _print_KroneckerDelta(self, e):
        a, b = e.args[:2]
        # the identity matrix is symmetric: its axes may come in the line's order
        return Tensor(f"torch.eye({self._size(self.index_dims[a])}, **_like)", self._order((a, b)))

    # -- arithmetic ----------------------------------------------------------------------------
    def _print_Add(self, e):
        return self._terms([(neg, self.tensor(t)) for neg, t in map(split_sign, e.args)])

    def _terms(self, signed):
        """t1 + t2 - t3 from (negative, Tensor) pairs, broadcast to their common axes."""
        if len(signed) > 1 and signed[0][0] and not signed[1][0]:
            signed = [signed[1], signed[0], *signed[2:]]  # b - a rather than -a + b (the same rounding)
        axes = self._order(_union(t.axes for _, t in signed))
        (neg, first), rest = signed[0], signed[1:]
        code = negate(align(first, axes)).code if neg else paren(align(first, axes), ADD)
        for neg, t in rest:
            code += (" - " if neg else " + ") + paren(align(t, axes), ADD, strict=True)
        return Tensor(code, axes, ADD, all(t.number for _, t in signed))

    def _print_Mul(self, e):
        neg, e = split_sign(e)
        if neg:
            return negate(self.tensor(e))
        sums = [f for f in e.args if isinstance(f, sp.Sum)]
        rest = [f for f in e.args if not isinstance(f, sp.Sum)]
        if len(sums) == 1 and rest and all(self._is_number(f) for f in rest):
            # c * sum(...) -> sum(c * ...): the scalar then scales the smallest operand
            return self._print_Sum(sp.Sum(sp.Mul(*rest) * sums[0].function, *sums[0].limits))
        numbers, tensors = self._factors(e)
        axes = self._order(_union(t.axes for t in tensors))
        return self._scaled(numbers, [align(t, axes) for t in tensors], axes)

    def _scaled(self, numbers, tensors, axes):
        """The numbers' numerators, then the tensors, divided by the numbers' denominators."""
        num, den = [], []
        for f in numbers:
            if f.is_Rational:
                num += [sp.Integer(f.p)] if f.p != 1 else []
                den += [sp.Integer(f.q)] if f.q != 1 else []
            elif isinstance(f, sp.Pow) and f.exp.is_Integer and f.exp < 0:
                den.append(f.base ** -f.exp)
            else:
                num.append(f)
        return product([self.tensor(f) for f in num] + list(tensors), [self.tensor(f) for f in den], axes)

    def _print_Pow(self, e):
        if _logistic_argument(e) is not None:  # (1 + e^x)^-1 alone (in a product, _sigmoid sees it)
            return self._sigmoid([e])[0]
        if not e.exp.is_Integer:
            raise UnsupportedNode(f"power {e.exp} is not supported: {e}")
        base, k = self.tensor(e.base), int(e.exp)
        if base.number:  # Python arithmetic: 1 / n ** 2
            power = base if abs(k) == 1 else Tensor(f"{paren(base, POW, strict=True)} ** {abs(k)}", (), POW, True)
            return power if k > 0 else Tensor(f"1 / {paren(power, MUL, strict=True)}", (), MUL, True)
        if k < 0:  # 1/0 := 0 (a fully masked row)
            inv = (Tensor(f"torch.reciprocal({base.code})", base.axes)
                   if self.positive_reciprocal and _positive(e.base, self.positive_labels)
                   else Tensor(f"_recip({base.code})", base.axes))
            return inv if k == -1 else Tensor(f"{inv.code} ** {-k}", base.axes, POW)
        if k == 2:
            return Tensor(f"{paren(base, ATOM)}.square()", base.axes)
        return Tensor(f"{paren(base, POW, strict=True)} ** {k}", base.axes, POW)

    def _print_exp(self, e):
        arg = self._tensor_arg(e)
        return Tensor(f"torch.exp({arg.code})", arg.axes)

    def _print_log(self, e):
        inner = e.args[0]
        if isinstance(inner, sp.Sum) and len(inner.limits) == 1 and isinstance(inner.function, sp.exp):
            k = inner.limits[0][0]
            x = self.tensor(inner.function.args[0])
            axes = tuple(a for a in x.axes if a != k)
            return Tensor(f"torch.logsumexp({x.code}, dim={_dim(x.axes, k)})", axes)
        fused = self._log_matmul_exp(inner)
        if fused is not None:
            return fused
        arg = self._tensor_arg(e)
        return Tensor(f"torch.log({arg.code})", arg.axes)

    def _log_matmul_exp(self, inner):
        """log sum_a e^{x_ia} e^{y_ja} (two exp factors, each on its own free index and the summed one) as
        _log_matmul_exp(x, y): the log of a product of exp-feature matrices, max-shifted so that it is finite
        wherever the result is. None when `inner` is not of that shape."""
        if not (isinstance(inner, sp.Sum) and len(inner.limits) == 1):
            return None
        k = inner.limits[0][0]
        factors = sp.Mul.make_args(inner.function)
        if len(factors) != 2 or not all(isinstance(f, sp.exp) for f in factors):
            return None
        with self._natural_order():
            x, y = (self.tensor(f.args[0]) for f in factors)
        if len(x.axes) != 2 or len(y.axes) != 2 or k not in x.axes or k not in y.axes:
            return None
        (i,), (j,) = [a for a in x.axes if a != k], [a for a in y.axes if a != k]
        if i == j:
            return None
        if self._order((i, j)) != (i, j):
            (x, i), (y, j) = (y, j), (x, i)
        return Tensor(f"_log_matmul_exp({_matrix(x, (i, k)).code}, {_matrix(y, (j, k)).code})", (i, j))

    def _tensor_arg(self, e):
        arg = self.tensor(e.args[0])
        if arg.number:
            raise UnsupportedNode(f"{type(e).__name__} of a number (torch functions take tensors): {e}")
        return arg

    # -- contractions ----------------------------------------------------------------------------
    def _print_Sum(self, e):
        neg, e = split_sign(e)
        if neg:
            return negate(self.tensor(e))
        dummies, body = [], e
        while isinstance(body, sp.Sum):
            dummies += [lim[0] for lim in body.limits]
            body = body.function
        if isinstance(body, sp.Add):  # a sum of sums: one contraction per term
            return self._terms([(neg, self._contract(t, dummies)) for neg, t in map(split_sign, body.args)])
        return self._contract(body, dummies)

    def _factors(self, product):
        """A product's number factors (SymPy) and tensor factors (printed, the softmax pattern fused first)."""
        factors = list(sp.Mul.make_args(product))
        tensors = self._softmax(factors) + self._sigmoid(factors)
        numbers = [f for f in factors if self._is_number(f)]
        return numbers, tensors + [self.tensor(f) for f in factors if not self._is_number(f)]

    def _contract(self, summand, dummies):
        with self._natural_order():  # a transpose forced on an operand would be undone by the contraction
            numbers, tensors = self._factors(summand)
        if not tensors:
            raise UnsupportedNode(f"a sum of numbers over an index: {summand}")
        present = {a for t in tensors for a in t.axes}
        # summand constant in d: times the range
        numbers += [GeneralBackend.sizes[self.index_dims[d]] for d in dummies if d not in present]
        out = self._order(a for a in _union(t.axes for t in tensors) if a not in dummies)
        positions = [sum(self.index_dims[a] == "n" for a in t.axes) for t in tensors]
        if numbers:  # scale the operand with the fewest position axes (n x d rather than n x n)
            small = min(range(len(tensors)), key=lambda t: (positions[t], t))
            tensors[small] = self._scaled(numbers, [tensors[small]], tensors[small].axes)
        return _matmul(tensors, dummies, out, positions) or _reduce(tensors, dummies, out) or _einsum(tensors, out)

    # -- the softmax pattern ------------------------------------------------------------------------
    def _softmax(self, factors):
        """Find M_ij e^{x_ij} (sum_k M_ik e^{x_ik})^-1 among `factors`; replace it by a fused softmax."""
        for pw in factors:
            total, extra = _normaliser(pw)
            if total is None:
                continue
            k = total.limits[0][0]
            inner = sp.Mul.make_args(total.function)
            exps = [f for f in inner if isinstance(f, sp.exp)]
            masks = [f for f in inner if not isinstance(f, sp.exp)]
            if len(exps) != 1 or len(masks) > 1:
                continue
            for num in factors:
                if not isinstance(num, sp.exp) or num is pw:
                    continue
                for j in num.free_symbols & set(self.index_dims):
                    if exps[0].xreplace({k: j}) != num:
                        continue
                    mask = [f for f in factors if masks and f == masks[0].xreplace({k: j})]
                    if masks and not mask:
                        continue
                    for f in [pw, num] + mask:
                        factors.remove(f)
                    x = self.tensor(num.args[0])
                    m = align(self.tensor(mask[0]), x.axes).code if mask else "None"
                    arg = num.args[0]
                    if extra is not None:  # one more logit in the normaliser: an attention sink
                        y = align(self.tensor(extra), x.axes).code
                        return [Tensor(f"_softmax_extra({x.code}, {m}, dim={_dim(x.axes, j)}, extra={y})", x.axes)]
                    fn = "_softmax_" if isinstance(arg, sp.Indexed) and str(arg.base.label) in self.overwritable else "_softmax"
                    return [Tensor(f"{fn}({x.code}, {m}, dim={_dim(x.axes, j)})", x.axes)]
        return []

    # -- the logistic pattern -------------------------------------------------------------------------
    def _sigmoid(self, factors):
        """Replace e^x (1 + e^x)^-1 among `factors` by torch.sigmoid(x), and a remaining (1 + e^x)^-1 by
        torch.sigmoid(-x): printed as written, e^x / (1 + e^x) is inf / inf = NaN once e^x overflows."""
        out = []
        for pw in list(factors):
            x = _logistic_argument(pw)
            if x is None or pw not in factors:
                continue
            factors.remove(pw)
            arg = self.tensor(x)
            if sp.exp(x) in factors:
                factors.remove(sp.exp(x))
                out.append(Tensor(f"torch.sigmoid({arg.code})", arg.axes))
            else:
                out.append(Tensor(f"torch.sigmoid({negate(arg).code})", arg.axes))
        return out


def _normaliser(pw):
    """(the sum, the extra logit y or None) when `pw` is (sum_k M_ik e^{x_ik})^-1 or (e^y + sum_k M_ik e^{x_ik})^-1;
    (None, None) otherwise."""
    if not (isinstance(pw, sp.Pow) and pw.exp == -1):
        return None, None
    if isinstance(pw.base, sp.Sum) and len(pw.base.limits) == 1:
        return pw.base, None
    if isinstance(pw.base, sp.Add) and len(pw.base.args) == 2:
        sums = [a for a in pw.base.args if isinstance(a, sp.Sum) and len(a.limits) == 1]
        exps = [a for a in pw.base.args if isinstance(a, sp.exp)]
        if len(sums) == 1 and len(exps) == 1:
            return sums[0], exps[0].args[0]
    return None, None


def _positive(e, labels=()):
    """Whether e > 0 by construction: exps, positive numbers, entries of `labels`, and sums and products of them
    (no mask, which may empty a sum)."""
    if isinstance(e, sp.exp) or (e.is_Number and e > 0):
        return True
    if isinstance(e, sp.Indexed):
        return str(e.base.label) in labels
    if isinstance(e, sp.Sum):
        return _positive(e.function, labels)
    if isinstance(e, (sp.Mul, sp.Add)):
        return all(_positive(a, labels) for a in e.args)
    return False


def _logistic_argument(pw):
    """x when `pw` is (1 + e^x)^-1, else None."""
    if not (isinstance(pw, sp.Pow) and pw.exp == -1 and isinstance(pw.base, sp.Add) and len(pw.base.args) == 2):
        return None
    one = [t for t in pw.base.args if t == 1]
    exps = [t for t in pw.base.args if isinstance(t, sp.exp)]
    return exps[0].args[0] if one and exps else None


def split_sign(e):
    """(negative, e without its sign): the signs of a number, of a sum's summand and of a product's factors."""
    if e.is_Number:
        return bool(e.is_negative), abs(e)
    if isinstance(e, sp.Sum):
        neg, body = split_sign(e.function)
        return neg, (sp.Sum(body, *e.limits) if neg else e)
    if not isinstance(e, sp.Mul):
        return False, e
    signs, factors = zip(*map(split_sign, e.args))
    return sum(signs) % 2 == 1, (sp.Mul(*factors) if any(signs) else e)


def negate(t: Tensor) -> Tensor:
    """-t (as SymPy prints it: -a * b is -(a * b), the same number)."""
    return Tensor(f"-{paren(t, MUL)}", t.axes, MUL, t.number)


def product(factors, den=(), axes=()) -> Tensor:
    """f1 * f2 * ... / (d1 * d2 * ...), parenthesised by precedence (evaluated left to right)."""
    if len(factors) == 1 and not den:
        return factors[0]
    code = " * ".join(paren(f, MUL, strict=k > 0) for k, f in enumerate(factors)) if factors else "1"
    if den:
        code += " / " + paren(product(den), MUL, strict=True)
    return Tensor(code, tuple(axes), MUL, all(f.number for f in (*factors, *den)))


def _matmul(tensors, dummies, out, positions):
    """A product of two matrices over one shared index as `@` with `.mT` views (BLAS reads
    transposes in place; einsum may copy them). None when the contraction is not of that shape.

    `positions` counts each operand's position (n) axes. When the larger operand (n x n) would be
    read transposed on the left, A.mT @ B, the product is printed transposed, (B.mT @ A).mT: the
    same numbers with the large operand read in storage order (faster on CPU: no strided read of the large one)."""
    if len(tensors) != 2 or len(dummies) != 1 or len(out) != 2:
        return None
    (a, pa), (b, pb) = zip(tensors, positions)
    k = dummies[0]
    if len(a.axes) != 2 or len(b.axes) != 2 or k not in a.axes or k not in b.axes:
        return None
    (ra,) = [x for x in a.axes if x != k]
    (rb,) = [x for x in b.axes if x != k]
    if (ra, rb) != tuple(out):
        (a, ra, pa), (b, rb, pb) = (b, rb, pb), (a, ra, pa)
    if (ra, rb) != tuple(out) or ra == rb:
        return None
    if a.axes == (k, ra) and pa > pb:  # out = (b^T a)^T
        return Tensor(f"({paren(_matrix(b, (rb, k)), MUL, strict=True)} @ {paren(a, MUL, strict=True)}).mT", out)
    left, right = _matrix(a, (ra, k)), _matrix(b, (k, rb))
    return Tensor(f"{paren(left, MUL, strict=True)} @ {paren(right, MUL, strict=True)}", out, MUL)


def _matrix(t, axes):
    """t as a matrix on `axes`: itself, or its transpose view."""
    return t if t.axes == axes else Tensor(f"{paren(t, ATOM)}.mT", axes)


def _reduce(tensors, dummies, out):
    """Operands on identical axes, multiplied and summed over the dummies: vecdot or (a * b).sum(dim)
    (einsum's parse overhead dominates at small sizes). None when the operands' axes differ."""
    axes = tensors[0].axes
    if any(t.axes != axes for t in tensors) or tuple(a for a in axes if a not in dummies) != tuple(out):
        return None
    dims = [_dim(axes, d) for d in axes if d in dummies]
    if not dims:  # nothing left to sum (a dummy the summand does not depend on is a factor of its range)
        return product(tensors, axes=out)
    if len(tensors) == 2 and dims == [-1]:
        return Tensor(f"torch.linalg.vecdot({tensors[0].code}, {tensors[1].code})", out)
    dim = str(dims[0]) if len(dims) == 1 else "(" + ", ".join(map(str, dims)) + ")"
    return Tensor(f"{paren(product(tensors), ATOM)}.sum(dim={dim})", out)


def _einsum(tensors, out):
    letters = {a: LETTERS[i] for i, a in enumerate(_union(t.axes for t in tensors))}
    spec = ",".join("..." + "".join(letters[a] for a in t.axes) for t in tensors)
    spec += "->..." + "".join(letters[a] for a in out)
    return Tensor(f'torch.einsum("{spec}", {", ".join(t.code for t in tensors)})', out)


def _union(groups):
    out = []
    for g in groups:
        for a in g:
            if a not in out:
                out.append(a)
    return tuple(out)


def _dim(axes, index):
    return list(axes).index(index) - len(axes)


def align(t: Tensor, target) -> Tensor:
    """`t` broadcast to the trailing axes `target`: permuted (`.mT` or einsum), then None axes inserted."""
    if t.number:
        return t
    order = tuple(a for a in target if a in t.axes)
    if t.axes != order:
        if order == t.axes[:-2] + t.axes[:-3:-1]:
            t = Tensor(f"{paren(t, ATOM)}.mT", order)
        else:
            letters = {a: LETTERS[i] for i, a in enumerate(t.axes)}
            spec = f'"...{"".join(letters[a] for a in t.axes)}->...{"".join(letters[a] for a in order)}"'
            t = Tensor(f"torch.einsum({spec}, {t.code})", order)
    if len(order) == len(target):
        return t
    idx = ", ".join(":" if a in t.axes else "None" for a in target)
    return Tensor(f"{paren(t, ATOM)}[..., {idx}]", tuple(target))
