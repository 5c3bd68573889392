"""Proof path a: symbolic sizes n, d_k, d_v, m, d_x with SymPy `IndexedBase`/`Sum`.

The model's quantities become SymPy sums over full ranges; derived gradients come from the chain
rule (`Derivative`: what `sympy.diff` gives, Kronecker deltas, once per shared sub-expression), and
equality is decided by the sum normal form (`derive.sumform`). The scale c and the step size eta
are free positive symbols. The mask M is a free 0/1 matrix, and under `Setting.mask_algebra ==
"causal"` also reflexive, transitive and antisymmetric (the normal form's causal rules).
"""
from __future__ import annotations

import itertools

import sympy as sp

from derive.model import DIMS, AttentionModel, ShapeError
from derive.sumform import Normaliser

SIZE_NAMES = {"n": "n", "dk": "d_k", "dv": "d_v", "m": "m", "dx": "d_x"}
FREE_NAMES = {"n": "ijlr", "dk": "abe", "dv": "abe", "m": "cf", "dx": "xyw"}


class GeneralBackend(AttentionModel):
    """The model at general (symbolic) size."""

    sizes = {dim: sp.Symbol(SIZE_NAMES[dim], integer=True, positive=True) for dim in DIMS}
    scalars = {"c": sp.Symbol("c", positive=True), "eta": sp.Symbol("eta", positive=True), "beta": sp.Symbol("beta", real=True)}

    def __init__(self, setting, context=""):
        super().__init__(setting, context)
        self.index_dims = {}
        self._dummy = itertools.count()
        self._bases = {}
        self._used = {dim: 0 for dim in DIMS}

    def free_indices(self, dims):
        """Free index symbols for a claim's declared index ranges."""
        used = self._used
        out = []
        for dim in dims:
            letters = FREE_NAMES[dim]
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
        return Normaliser(self.index_dims, self.sizes, self.setting.mask_algebra)

    def check_free(self, expr, free, what):
        """Every index left free in `expr` must be one the claim declares."""
        stray = sorted((s for s in free_symbols(sp.sympify(expr)) if s in self.index_dims and s not in free), key=str)
        if stray:
            raise ShapeError(f"{self.context}: {what} has free index {stray[0]} that the claim does not declare")

    def equal(self, lhs, rhs):
        """Decide lhs == rhs at general size; returns (equal, normal form of the difference)."""
        norm = self.normaliser()
        diff = sp.expand(norm.nf(lhs) - norm.nf(rhs))
        if diff == 0:
            return True, diff
        return sp.expand(sp.numer(sp.together(diff))) == 0, diff


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
