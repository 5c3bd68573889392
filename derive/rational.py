"""Proof path c: exact evaluation at random rational points (probabilistic).

Every leaf gets a random rational value and the loss is differentiated in forward mode with
dual numbers over `fractions.Fraction` (an implementation of the chain rule independent of
SymPy's `diff` and of the ring's derivation). exp(x) and log(x) are formal generators: each
distinct argument gets its own random positive rational value E with dE = E dx (resp.
dlog x = dx / x), so a zero difference at a random point is evidence for the formal identity
in the sense of Schwartz–Zippel, and a nonzero difference is a certain counterexample to it.
"""
from __future__ import annotations

import random
from fractions import Fraction

from derive.fixed import Ix, assignments
from derive.model import AttentionModel


class Dual:
    """value + sum_x grad[x] dx over the leaves x, exactly."""

    __slots__ = ("val", "grad")

    def __init__(self, val, grad=None):
        self.val = Fraction(val)
        self.grad = grad or {}

    @staticmethod
    def lift(x):
        return x if isinstance(x, Dual) else Dual(x)

    def __add__(self, other):
        other = Dual.lift(other)
        g = dict(self.grad)
        for k, v in other.grad.items():
            g[k] = g.get(k, 0) + v
        return Dual(self.val + other.val, g)

    __radd__ = __add__

    def __neg__(self):
        return Dual(-self.val, {k: -v for k, v in self.grad.items()})

    def __sub__(self, other):
        return self + (-Dual.lift(other))

    def __rsub__(self, other):
        return Dual.lift(other) - self

    def __mul__(self, other):
        other = Dual.lift(other)
        g = {k: v * other.val for k, v in self.grad.items()}
        for k, v in other.grad.items():
            g[k] = g.get(k, 0) + self.val * v
        return Dual(self.val * other.val, g)

    __rmul__ = __mul__

    def __truediv__(self, other):
        other = Dual.lift(other)
        if other.val == 0:
            raise ZeroDivisionError("division by zero at the sampled point")
        inv = 1 / other.val
        return self * Dual(inv, {k: -v * inv * inv for k, v in other.grad.items()})

    def __rtruediv__(self, other):
        return Dual.lift(other) / self

    def key(self):
        return (self.val, frozenset((k, v) for k, v in self.grad.items() if v))


class DualBackend(AttentionModel):
    """The model at fixed sizes evaluated at one random rational point."""

    def __init__(self, setting, sizes: dict, seed: int, context="", mask=None):
        super().__init__(setting, context)
        self.sizes = dict(sizes)
        self.rng = random.Random(seed)
        self._values = {}
        self._formal = {}
        self._mask = mask  # (i, j) -> 0/1; default causal

    def _rational(self, positive=False):
        num = self.rng.randint(1 if positive else -997, 997)
        return Fraction(num or 1, self.rng.randint(1, 991))

    def dim_of(self, ix):
        return ix.dim

    def entry(self, name, *ix):
        key = (name,) + tuple(i.value for i in ix)
        if key not in self._values:
            self._values[key] = self._rational(positive=name in ("eta",))
        return Dual(self._values[key], {key: Fraction(1)})

    def mask_entry(self, i, j):
        if self._mask is not None:
            return self._mask(i.value, j.value)
        return 1 if j.value <= i.value else 0

    def delta(self, i, j):
        return 1 if i.value == j.value else 0

    def scalar(self, name):
        key = (name,)
        if key not in self._values:
            self._values[key] = self._rational(positive=True)  # c and eta are positive
        return Dual(self._values[key], {key: Fraction(1)})

    def _size(self, dim):
        return self.sizes[dim]

    def _sum(self, dim, body):
        total = Dual(0)
        for r in range(self.sizes[dim]):
            total = total + body(Ix(dim, r))
        return total

    def _generator(self, kind, x):
        key = (kind, Dual.lift(x).key())
        if key not in self._formal:
            self._formal[key] = self._rational(positive=True)
        return self._formal[key]

    def exp(self, x):
        x = Dual.lift(x)
        e = self._generator("exp", x)
        return Dual(e, {k: e * v for k, v in x.grad.items()})

    def log(self, x):
        x = Dual.lift(x)
        return Dual(self._generator("log", x), {k: v / x.val for k, v in x.grad.items()})

    def _grad(self, f, name, ix):
        # The result is a constant: derivatives of derivatives are not supported here.
        return Dual(Dual.lift(f).grad.get((name,) + tuple(i.value for i in ix), 0))

    def assignments(self, dims):
        return assignments(self.sizes, dims)

    def equal(self, lhs, rhs):
        return Dual.lift(lhs).val == Dual.lift(rhs).val
