"""Proof path c: exact evaluation at random rational points (probabilistic, Schwartz–Zippel).

Each point draws sizes and a random rational value for every entry the claim touches; the model
is built as an expression DAG (`derive.graph`) whose nodes carry exact values in F_p,
p = 2**61 - 1, and derivatives of any order are new DAG nodes built in reverse mode, so
`m.grad(m.derived_grad("v", j, a), "v", l, b)` is an exact second derivative. exp(x) and log(x)
are formal generators: each distinct argument gets its own random nonzero value in F_p, with
d exp(x) = exp(x) dx and d log(x) = dx / x. The claim is always evaluated at the full
cross-entropy loss; "masked" is the causal mask (j <= i, diagonal included), which is also
what an explicit entry of M reads (all ones unmasked).

Soundness of "proved". At one point both sides are rational functions of the entries and of
the exp/log generators; their difference, over a common denominator, has a numerator N of
total degree deg. If N != 0 (and its coefficients, small integers from the model's sizes and
constants, are not all divisible by p), the point makes it vanish with probability at most
deg * 2**-29 (Schwartz–Zippel in the DeMillo–Lipton form, with the largest probability of any
one value: every entry is num/den with den uniform in [2**29, 2**30] and num uniform in
[-den, den] (c and eta: in [1, den]); for a given den at most one num maps to a given element of
F_p, so no element is hit with probability above 2**-29; the generators are uniform in F_p^*,
1 / (p - 1)), plus, for each pair of formally different exp/log arguments, the same bound for
the two to coincide at the point (they would then share a generator). (Leaves uniform in F_p would
give deg / p; rational leaves are what lets a difference be certified over the reals.) The
sampled points are independent, so at one set of sizes the bounds multiply.

Size coverage (an assumption, not a proof). A formal identity at one set of sizes says nothing
about the others: the path checks the sizes it draws. n is drawn from 2..7 and d_k, d_v, m, d_x
from 1..5. The first point has the five sizes pairwise distinct and all >= 2 (n in {6, 7}, the
others a permutation of 2..5), so a claim true only when two sizes coincide (d_k = d_v) or only
when one of them is 1 (d_v = 1) fails there whatever the seed; later points are pairwise
distinct with probability 0.8 and unconstrained otherwise. A claim that is true at exactly the
drawn sizes and false elsewhere is not caught.

Outcomes. "proved": equal mod p at every index assignment of every point (one assignment per
relabelling orbit, `derive.fixed.assignments`; every position under the mask). "disproved": only
with a `derive.witness.Witness`, a point where interval arithmetic with real exp and log
separates the two sides. "undecided": a difference mod p that no real point certified (for
example a claim that relies on exp(a + b) = exp(a) exp(b), which the formal generators do not
know), or a denominator that vanished mod p at every resample.

This module holds the backend and the draws; `derive.prove.rational` runs the path.
"""
from __future__ import annotations

import random
from fractions import Fraction

from derive import graph
from derive.fixed import Ix, assignments
from derive.model import DIMS, AttentionModel

BOUND = ("Schwartz–Zippel: at one point a false identity (a nonzero numerator of total degree deg in the entries and "
         "the exp/log generators) survives with probability at most deg * 2^-29 (entries num/den with den uniform in "
         "[2^29, 2^30]); points are independent, so the bounds multiply. Size coverage is an assumption: the first point "
         "has n in {6, 7} and d_k, d_v, m, d_x a permutation of 2..5 (pairwise distinct), later points n in 2..7 and the "
         "others in 1..5, pairwise distinct with probability 0.8; a claim true at exactly the drawn sizes and false "
         "elsewhere is not caught.")

RESAMPLES = 4  # redraws of a point whose denominator vanished mod p
DISTINCT_SHARE = 0.8  # share of points after the first whose five sizes are pairwise distinct


def label(name, ix=()):
    """The name of one entry: "v[0,1]"; a scalar is its own name ("c")."""
    return f"{name}[{','.join(str(i.value) for i in ix)}]" if ix else name


class RationalBackend(AttentionModel):
    """The model at fixed sizes as an exact DAG at one random rational point.

    `values` fixes entries in advance (label -> rational, e.g. a witness's point); the others are
    drawn from `seed`. `targets`: "one-hot" (Y as the model defines it: a witness must be a model
    input) or "free" (random rationals: the Schwartz–Zippel check then covers every Y, one-hot rows
    included, so a difference in one entry of Y is not missed because the sampled rows are cold
    there). "Masked" is the causal mask."""

    def __init__(self, setting, sizes: dict, seed=0, context="", values=None, targets="one-hot"):
        super().__init__(setting, context)
        self.sizes = self.mechanism_sizes(sizes)
        if values is None and targets == "one-hot":
            values = one_hot_targets(sizes, seed)
        self.graph = graph.Graph(random.Random(seed), values)
        self._real = {}

    def dim_of(self, ix):
        return ix.dim

    def entry(self, name, *ix):
        if name == "M":  # the mask as a 0/1 multiplier: the causal mask itself (all ones unmasked)
            return self.mask_entry(*ix) if self.setting.masked else 1
        return self.graph.leaf(label(name, ix), domain=self.mechanism.domain(name))

    def scalar(self, name):
        return self.graph.leaf(name, positive=name != "beta")  # c and eta are positive; a mechanism's bias beta is any real

    def mask_entry(self, i, j):
        return 1 if j.value <= i.value else 0

    def _delta(self, i, j):
        return 1 if i.value == j.value else 0

    def _size(self, dim):
        return graph.const(self.sizes[dim])  # a node: 1 / m.size("n") stays exact (an int would give a float)

    def _sum(self, dim, body):
        total = graph.ZERO
        for r in range(self.sizes[dim]):
            total = total + body(Ix(dim, r))
        return total

    def exp(self, x):
        return self.graph.exp(x)

    def log(self, x):
        return self.graph.log(x)

    def _grad(self, f, name, ix):
        if name == "M":
            raise NotImplementedError("the rational path fixes M to the causal mask; it cannot differentiate by M")
        if not isinstance(f, graph.Node):
            return graph.ZERO
        return self.graph.grad(f, label(name, ix))

    def assignments(self, dims):
        return assignments(self.sizes, dims, self.setting.masked, self.mechanism.ordered)

    def real(self, prec=200):
        """The interval evaluator of this point at `prec` bits (memoised across calls)."""
        if prec not in self._real:
            self._real[prec] = graph.RealEvaluator(prec)
        return self._real[prec]


def one_hot_targets(sizes, seed):
    """Y as the model defines it, one-hot rows (a random class per position): a point with other Y
    would not be an input of the model, so a difference there would be no counterexample."""
    rng = random.Random(f"targets/{seed}")
    out = {}
    for i in range(sizes["n"]):
        hot = rng.randrange(sizes["m"])
        out.update({f"Y[{i},{c}]": Fraction(int(c == hot)) for c in range(sizes["m"])})
    return out


def draw_sizes(rng, first=False, distinct=True):
    """Sizes of one point: n in 2..7, the others in 1..5 (see the module docstring)."""
    if first:
        n = rng.choice((6, 7))
        rest = rng.sample(range(2, 6), 4)
    elif distinct:
        n = rng.randint(2, 7)
        rest = rng.sample([v for v in range(1, 6) if v != n], 4)
    else:
        n = rng.randint(2, 7)
        rest = [rng.randint(1, 5) for _ in range(4)]
    return dict(zip(DIMS, [n, *rest]))


def differing(identity, m, derived, closed):
    """(number of assignments checked, [(indices, lhs, rhs)] where the sides differ mod p)."""
    derived = derived or identity.derived
    closed = closed or identity.closed
    found = []
    checked = 0
    for ix in m.assignments(identity.free):
        lhs, rhs = graph.lift(derived(m, *ix)), graph.lift(closed(m, *ix))
        checked += 1
        if lhs.val != rhs.val:
            found.append((ix, lhs, rhs))
    return checked, found
