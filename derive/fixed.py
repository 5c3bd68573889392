"""Proof path b: fixed sizes, every entry a symbol, exact, the full cross-entropy loss.

Each entry of q, k, v, W_O, Y, ... is a generator of a `derive.ring.DiffRing`; the claim's
derived side is differentiated end to end through softmax, the readout and the CE loss by the
ring's derivation, and compared with the closed form at every assignment of the free indices.
"Masked" here is the causal mask (j <= i, diagonal included) as concrete 0/1 entries.
"""
from __future__ import annotations

from typing import NamedTuple

from derive.model import AttentionModel
from derive.ring import DiffRing


class Ix(NamedTuple):
    """A concrete index with the range it runs over."""

    dim: str
    value: int

    def __repr__(self):
        return f"{self.dim}[{self.value}]"


class RingBackend(AttentionModel):
    """The model at fixed sizes over a differential ring."""

    def __init__(self, setting, sizes: dict, context=""):
        super().__init__(setting, context)
        self.sizes = dict(sizes)
        self.ring = DiffRing()

    def dim_of(self, ix):
        return ix.dim

    def entry(self, name, *ix):
        return self.ring.leaf((name,) + tuple(i.value for i in ix))

    def mask_entry(self, i, j):
        return 1 if j.value <= i.value else 0

    def delta(self, i, j):
        return 1 if i.value == j.value else 0

    def scalar(self, name):
        return self.ring.leaf((name,))

    def _size(self, dim):
        return self.sizes[dim]

    def _sum(self, dim, body):
        total = 0
        for r in range(self.sizes[dim]):
            total = body(Ix(dim, r)) + total
        return total

    def exp(self, x):
        return self.ring.exp(x)

    def log(self, x):
        return self.ring.log(x)

    def _grad(self, f, name, ix):
        x = self.ring.leaf_id((name,) + tuple(i.value for i in ix))
        return self.ring.d(f, x)

    def assignments(self, dims):
        return assignments(self.sizes, dims)

    def equal(self, lhs, rhs):
        return self.ring.is_zero(lhs - rhs)


def assignments(sizes, dims):
    """Every assignment of concrete indices to a claim's free index ranges."""
    out = [()]
    for dim in dims:
        out = [a + (Ix(dim, r),) for a in out for r in range(sizes[dim])]
    return out
