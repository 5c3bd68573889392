"""Proof path a: symbolic sizes n, d_k, d_v, m, d_x with SymPy `IndexedBase`/`Sum`.

The model's quantities become SymPy sums over full ranges; derived gradients come from the chain
rule (`Derivative`: what `sympy.diff` gives, Kronecker deltas, once per shared sub-expression), and
equality is decided by the sum normal form (`derive.sumform`). The scale c and the step size eta
are free positive symbols. The mask M is a free 0/1 matrix, and under `Setting.mask_algebra ==
"causal"` also reflexive, transitive and antisymmetric (the normal form's causal rules).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import sympy as sp

from derive.model import DIMS, AttentionModel, ShapeError
from derive.sumform import Normaliser

SIZE_NAMES = {"n": "n", "dk": "d_k", "dv": "d_v", "m": "m", "dx": "d_x"}
FREE_NAMES = {"n": "ijlr", "dk": "abe", "dv": "abe", "m": "cf", "dx": "xyw"}
MECHANISM_FREE_NAMES = "ghp"  # free indices of a mechanism's own dims (experts, a gate's options): g_e, h_e, ...


class GeneralBackend(AttentionModel):
    """The model at general (symbolic) size."""

    sizes = {dim: sp.Symbol(SIZE_NAMES[dim], integer=True, positive=True) for dim in DIMS}
    scalars = {"c": sp.Symbol("c", positive=True), "eta": sp.Symbol("eta", positive=True), "beta": sp.Symbol("beta", real=True)}

    def __init__(self, setting, context="", check=None):
        """`check`: the proof path's time budget, called as the normal form works (`derive.sumform.Normaliser`)."""
        super().__init__(setting, context)
        self.check = check
        self.index_dims = {}
        self._dummy = itertools.count()
        self._bases = {}
        self._used = {dim: 0 for dim in self.dims()}
        if self.mechanism.dims:  # its own ranges: a fixed size, or a symbol like n, d_k, ...
            self.sizes = {**self.sizes, **{d: sp.Integer(v) if v else sp.Symbol(d.upper(), integer=True, positive=True)
                                           for d, v in self.mechanism.dims.items()}}

    def free_indices(self, dims):
        """Free index symbols for a claim's declared index ranges."""
        used = self._used
        out = []
        for dim in dims:
            letters = FREE_NAMES.get(dim, MECHANISM_FREE_NAMES)
            name = f"{letters[used[dim] % len(letters)]}{used[dim] // len(letters) or ''}_{dim}"
            used[dim] += 1
            sym = sp.Symbol(name, integer=True)
            self.index_dims[sym] = dim
            out.append(sym)
        return out

    def dim_of(self, ix):
        if ix not in self.index_dims:
            raise ShapeError(f"{self.context}: {ix!r} is not an index of this model")
        return self.index_dims[ix]

    def entry(self, name, *ix):
        if name == "M" and not self.setting.masked:  # no mask: every entry is 1, as on the other paths
            return sp.S.One
        base = self._bases.setdefault(name, sp.IndexedBase(name))
        return base[ix]

    def mask_entry(self, i, j):
        return self.entry("M", i, j)

    def _delta(self, i, j):
        return sp.KroneckerDelta(i, j)

    def scalar(self, name):
        return self.scalars[name]

    def _size(self, dim):
        return self.sizes[dim]

    def _sum(self, dim, body):
        k = sp.Symbol(f"k{next(self._dummy)}_{dim}", integer=True)
        self.index_dims[k] = dim
        return sp.Sum(body(k), (k, 1, self.sizes[dim]))

    def exp(self, x):
        return sp.exp(x)

    def log(self, x):
        return sp.log(x)

    def _grad(self, f, name, ix):
        return Derivative(self.scalars[name] if name in self.scalars else self.entry(name, *ix))(sp.sympify(f))

    def normaliser(self):
        return Normaliser(self.index_dims, self.sizes, self.setting.mask_algebra, check=self.check)

    def check_free(self, expr, free, what):
        """Every index left free in `expr` must be one the claim declares."""
        stray = sorted((s for s in free_symbols(sp.sympify(expr)) if s in self.index_dims and s not in free), key=str)
        if stray:
            raise ShapeError(f"{self.context}: {what} has free index {stray[0]} that the claim does not declare")

    def equal(self, lhs, rhs):
        """Decide lhs == rhs at general size; returns (equal, normal form of the difference)."""
        diff, numerator = self.difference(lhs, rhs)
        return numerator == 0, diff

    def difference(self, lhs, rhs):
        """(normal form of lhs - rhs, the expanded numerator of it over a common denominator); 0 and 0 when equal."""
        norm = self.normaliser()
        diff = sp.expand(norm.nf(lhs) - norm.nf(rhs))
        if diff == 0:
            return diff, diff
        norm.check()
        return diff, sp.expand(sp.numer(sp.together(diff)))

    def size_polynomial(self, numerator):
        """The numerator of a difference read as sum_k P_k(sizes) * A_k (`SizePolynomial`), A_k distinct products of
        everything else (sums as atoms, entries, exp, log, c, eta); None when a size occurs other than as a
        polynomial factor (inside an exp, a log or a denominator), where there is nothing to read."""
        symbols = {sym: dim for dim, sym in self.sizes.items() if isinstance(sym, sp.Symbol)}
        groups = {}
        for term in sp.Add.make_args(numerator):
            coeff, rest = term.as_coeff_Mul()
            size_part, other = [coeff], []
            for factor in sp.Mul.make_args(rest):
                base, power = factor.as_base_exp()
                if base in symbols and power.is_Integer and power > 0:
                    size_part.append(factor)
                elif factor.free_symbols & symbols.keys():
                    return None
                else:
                    other.append(factor)
            key = sp.Mul(*other)
            groups[key] = groups.get(key, sp.S.Zero) + sp.Mul(*size_part)
        gens = list(symbols)
        coefficients = []
        for total in groups.values():
            poly = sp.Poly(total, *gens) if gens else None
            terms = poly.terms() if poly is not None else [((), sp.Rational(total))]
            terms = [(m, c) for m, c in terms if c != 0]
            if not terms:
                continue
            scale = math.lcm(*[int(sp.Rational(c).q) for _, c in terms])
            coefficients.append(tuple((tuple(m), int(sp.Rational(c) * scale)) for m, c in terms))
        if not coefficients:
            return None
        used = [k for k, sym in enumerate(gens) if any(m[k] for p in coefficients for m, _ in p)]
        dims = tuple(symbols[gens[k]] for k in used)
        coefficients = tuple(tuple((tuple(m[k] for k in used), c) for m, c in p) for p in coefficients)
        shown = next((total for total in groups.values() if total.free_symbols & symbols.keys()), sp.S.One)
        return SizePolynomial(dims, coefficients, shown)


# The largest sizes the general path tries when it looks for sizes off the roots of a size polynomial (a witness
# search there is cheap: the rational evaluator at two random points per size, well under a second per size for the
# paper's gradients and Hessians at these sizes; see `sizes_off_roots`). A polynomial that vanishes at every size up
# to these leaves the path undecided.
SEARCH_LIMITS = {"n": 10, "dk": 8, "dv": 8, "m": 8, "dx": 8}
SEARCH_LIMIT_OTHER = 8  # a mechanism's own dims (experts, ...)
# The ranges the rational path draws from (`derive.rational.draw_sizes`): a dim the polynomial does not read keeps
# its drawn value, or moves within this range to stay distinct from the others.
DRAW_RANGES = {"n": range(2, 8), "dk": range(1, 6), "dv": range(1, 6), "m": range(1, 6), "dx": range(1, 6)}


@dataclass(frozen=True)
class SizePolynomial:
    """A nonzero normal form's numerator as sum_k P_k(sizes) * A_k: the P_k, integer polynomials in the sizes of
    `dims` (each a tuple of (exponents over dims, coefficient)), the A_k distinct products of opaque atoms.

    The normal form holds at every size, so at sizes where every P_k vanishes the difference is 0 whatever the
    entries (no witness can exist there); elsewhere it is a nonzero combination of the atoms, which a random
    point separates unless the atoms themselves are related at those sizes (the certified witness decides)."""

    dims: tuple
    coefficients: tuple
    shown: object = sp.S.One  # one coefficient that reads a size (SymPy), for messages

    @property
    def text(self):
        """That coefficient, factored (only when a message needs it)."""
        return _short(sp.factor(self.shown))

    def vanishes(self, sizes) -> bool:
        """Whether every coefficient is 0 at `sizes` (False when `sizes` lacks one of the dims)."""
        if any(d not in sizes for d in self.dims):
            return False
        values = [sizes[d] for d in self.dims]
        return all(_evaluate(p, values) == 0 for p in self.coefficients)

    def limits(self):
        return {d: SEARCH_LIMITS.get(d, SEARCH_LIMIT_OTHER) for d in self.dims}


def _evaluate(poly, values):
    total = 0
    for exponents, c in poly:
        term = c
        for v, e in zip(values, exponents):
            term *= v**e
        total += term
    return total


def _short(expr, limit=120):
    text = str(expr)
    return text if len(text) <= limit else text[:limit] + "..."


def sizes_off_roots(poly: SizePolynomial, base: dict, count=2):
    """Up to `count` sets of sizes at which some coefficient of `poly` is nonzero (off its roots), for a witness.

    The dims `poly` reads take the smallest such values (pairwise distinct where possible, 1 only when nothing
    larger works) within `SEARCH_LIMITS`; every other dim keeps its value in `base` (a rational-path draw),
    moved within its draw range where it would equal one of the chosen values. [] when `poly` vanishes at
    every size of the search grid."""
    dims = poly.dims
    if not dims:
        return [] if poly.vanishes(base) else [dict(base)]
    limits = poly.limits()
    grid = itertools.product(*[range(1, limits[d] + 1) for d in dims])
    order = sorted(grid, key=lambda vals: (len(set(vals)) < len(vals), 1 in vals, sum(vals), vals))
    found = []
    for vals in order:
        chosen = dict(zip(dims, vals))
        if not poly.vanishes(chosen):
            found.append(_fill(base, chosen))
            if len(found) == count:
                break
    return found


def _fill(base, chosen):
    """`base` with `chosen` set, every other dim moved (within its draw range) off the values already taken."""
    out = dict(base)
    out.update(chosen)
    taken = set(chosen.values())
    for d in base:
        if d in chosen:
            continue
        if out[d] in taken:
            free = [v for v in DRAW_RANGES.get(d, ()) if v not in taken]
            if free:
                out[d] = min(free, key=lambda v: (v == 1, abs(v - base[d]), v))
        taken.add(out[d])
    return out


class Derivative:
    """d/dx by the chain rule over the model's node types, each shared sub-expression once.

    What `sympy.diff` computes, but SymPy recomputes the free symbols of nested Sums at every level
    (quadratic in the depth), while the model's quantities are shared (`derive.model.memo`)."""

    def __init__(self, x):
        self.x = x
        self._done = {}
        self._depends = {}

    def __call__(self, e):
        if not self.depends(e):
            return sp.S.Zero
        if e not in self._done:
            self._done[e] = self._rule(e)
        return self._done[e]

    def depends(self, e):
        """Whether e may vary with x (an entry depends on every entry of its own quantity)."""
        if e not in self._depends:
            if isinstance(e, sp.Indexed):
                self._depends[e] = isinstance(self.x, sp.Indexed) and e.base == self.x.base
            else:
                self._depends[e] = e == self.x if e.is_Atom else any(self.depends(a) for a in e.args)
        return self._depends[e]

    def _rule(self, e):
        if isinstance(e, sp.Add):
            return sp.Add(*[self(a) for a in e.args])
        if isinstance(e, sp.Mul):
            return sp.Add(*[sp.Mul(*e.args[:k], self(a), *e.args[k + 1:]) for k, a in enumerate(e.args) if self.depends(a)])
        if isinstance(e, sp.Pow) and not self.depends(e.exp):
            return e.exp * e.base ** (e.exp - 1) * self(e.base)
        if isinstance(e, sp.exp):
            return e * self(e.args[0])
        if isinstance(e, sp.log):
            return self(e.args[0]) / e.args[0]
        if isinstance(e, sp.Sum) and not any(self.depends(limit) for limit in e.limits):
            return sp.Sum(self(e.function), *e.limits)
        if isinstance(e, sp.Indexed):  # the same quantity: d A[i, j] / d A[r, l] = delta_ir delta_jl
            return sp.Mul(*[sp.KroneckerDelta(i, j) for i, j in zip(e.indices, self.x.indices)])
        if e == self.x:
            return sp.S.One
        return sp.diff(e, self.x)  # any other node: SymPy's own rule


def free_symbols(e, _seen=None):
    """The free symbols of e, each shared sub-expression visited once (a Sum binds its dummy)."""
    seen = {} if _seen is None else _seen
    if e not in seen:
        if isinstance(e, sp.Symbol):
            seen[e] = {e}
        elif isinstance(e, sp.Sum):
            inner = free_symbols(e.function, seen).union(*[free_symbols(b, seen) for _, *bounds in e.limits for b in bounds])
            seen[e] = inner - {k for k, *_ in e.limits}
        else:
            seen[e] = set().union(*[free_symbols(a, seen) for a in e.args])
    return seen[e]
