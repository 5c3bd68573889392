"""Proof path a: symbolic sizes n, d_k, d_v, m, d_x with SymPy `IndexedBase`/`Sum`.

The model's quantities become SymPy sums over full ranges; derived gradients come from
`sympy.diff` (Kronecker deltas), and equality is decided by the sum normal form
(`derive.sumform`). The scale c and the step size eta are free positive symbols.
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
    scalars = {"c": sp.Symbol("c", positive=True), "eta": sp.Symbol("eta", positive=True)}

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
        base = self._bases.setdefault(name, sp.IndexedBase(name))
        return base[ix]

    def mask_entry(self, i, j):
        return self.entry("M", i, j)

    def delta(self, i, j):
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
        return sp.diff(f, self.scalars[name] if name in self.scalars else self.entry(name, *ix))

    def normaliser(self):
        return Normaliser(self.index_dims, self.sizes, self.setting.mask_algebra)

    def check_free(self, expr, free, what):
        """Every index left free in `expr` must be one the claim declares."""
        stray = sorted((s for s in sp.sympify(expr).free_symbols if s in self.index_dims and s not in free), key=str)
        if stray:
            raise ShapeError(f"{self.context}: {what} has free index {stray[0]} that the claim does not declare")

    def equal(self, lhs, rhs):
        """Decide lhs == rhs at general size; returns (equal, normal form of the difference)."""
        norm = self.normaliser()
        diff = sp.expand(norm.nf(lhs) - norm.nf(rhs))
        if diff == 0:
            return True, diff
        return sp.expand(sp.numer(sp.together(diff))) == 0, diff
