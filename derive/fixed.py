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


def sizes(n, d, m, dx=2) -> dict:
    """One set of fixed sizes with d_k = d_v = d."""
    return {"n": n, "dk": d, "dv": d, "m": m, "dx": dx}


class Ix(NamedTuple):
    """A concrete index with the range it runs over."""

    dim: str
    value: int

    def __repr__(self):
        return f"{self.dim}[{self.value}]"


class RingBackend(AttentionModel):
    """The model at fixed sizes over a differential ring."""

    def __init__(self, setting, sizes: dict, context="", check=None):
        """`check`: the proof path's time budget, called by the ring as it works (`derive.ring.DiffRing`)."""
        super().__init__(setting, context)
        self.sizes = self.mechanism_sizes(sizes)
        self.ring = DiffRing(check)

    def dim_of(self, ix):
        return ix.dim

    def entry(self, name, *ix):
        if name == "M":  # an explicit mask entry is the causal mask itself (all ones unmasked), as on every path
            return self.mask_entry(*ix) if self.setting.masked else 1
        return self.ring.leaf((name,) + tuple(i.value for i in ix))

    def mask_entry(self, i, j):
        return 1 if j.value <= i.value else 0

    def _delta(self, i, j):
        return 1 if i.value == j.value else 0

    def scalar(self, name):
        return self.ring.leaf((name,))

    def _size(self, dim):
        return self.ring.const(self.sizes[dim])  # a ring element: 1 / m.size("n") stays exact (an int would give a float)

    def _sum(self, dim, body):
        return self.ring.add_all(body(Ix(dim, r)) for r in range(self.sizes[dim]))

    def exp(self, x):
        return self.ring.exp(x)

    def log(self, x):
        return self.ring.log(x)

    def _grad(self, f, name, ix):
        x = self.ring.leaf_id((name,) + tuple(i.value for i in ix))
        return self.ring.d(f, x)

    def assignments(self, dims):
        return assignments(self.sizes, dims, self.setting.masked, self.mechanism.ordered)

    def equal(self, lhs, rhs):
        return self.ring.is_zero(lhs - rhs)


def assignments(sizes, dims, masked=True, ordered=("n",)):
    """The assignments of concrete indices to a claim's free index ranges that need checking.

    Relabelling the values of one range (a permutation of 0..size-1) is an automorphism of the model:
    every quantity is built from sums over full ranges, so an identity holds at an assignment iff it
    holds at its relabelled images. One representative per orbit suffices: for each range, only which
    free indices are equal matters (values 0, 1, 2, ... in order of first use). Positions (n) under
    the causal mask are not relabelling-invariant and get every value, as do the mechanism's dims the mask
    reads (`ordered`: a mixture of experts' selection)."""
    out = [()]
    for dim in dims:
        if masked and dim in ordered:
            out = [a + (Ix(dim, r),) for a in out for r in range(sizes[dim])]
            continue
        grown = []
        for a in out:
            used = sorted({ix.value for ix in a if ix.dim == dim})
            fresh = len(used)  # the representative of "different from every earlier one"
            grown += [a + (Ix(dim, r),) for r in used + ([fresh] if fresh < sizes[dim] else [])]
        out = grown
    return out
