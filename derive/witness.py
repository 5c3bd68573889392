"""Certified counterexamples: sizes, an exact rational point and both sides' values there.

A `Witness` is only ever built when interval arithmetic (mpmath, 200 bits, then 800) with the
real exp and log, run over the claim's expression DAG (`derive.graph`, so derivatives of any
order are included), gives an enclosure of lhs - rhs that excludes 0. Its printed values are
certified: the true value lies within half a unit of the last printed digit. A user re-checks it
by evaluating both sides at `point` (every entry the two sides depend on, 0-based, e.g.
"v[0,1]"; `c` and `eta` the scalars; targets Y are free entries like the others, as on every
path) at `sizes`, at the full cross-entropy loss, with the causal mask (j <= i) when `masked`;
`replay` rebuilds both sides there for `derive.graph.float_value` or `RealEvaluator`.

`find_witness` is what every proof path calls when its check says "not equal": it draws random
rational points at the given sizes (the rational path's scheme), locates the index assignments
whose sides differ mod p (cheap), and certifies those over the reals.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from derive import graph
from derive.fixed import Ix
from derive.model import ShapeError
from derive.rational import RationalBackend, differing

PRECISIONS = (200, 800)  # bits; the second only when the first could not separate the sides
DIGITS = 12  # significant digits printed (more only when needed to tell lhs and rhs apart)
CERTIFY_PER_POINT = 4
# What a claim's evaluation may raise; find_witness answers None for these (not for a time budget's alarm).
NO_WITNESS = (ArithmeticError, LookupError, TypeError, ValueError, AttributeError, RuntimeError)


@dataclass(frozen=True)
class Witness:
    """A certified counterexample: lhs != rhs at `point`, at `sizes`, free indices `indices`."""

    sizes: dict
    masked: bool
    indices: tuple  # 0-based values of the claim's free indices, in its declared order
    point: dict  # entry label ("v[0,1]", "c") -> exact rational "p/q"
    lhs: str  # certified decimal
    rhs: str

    def __hash__(self):
        return hash(json.dumps(self.to_json(), sort_keys=True))

    def to_json(self) -> dict:
        return {"sizes": dict(self.sizes), "masked": self.masked, "indices": list(self.indices),
                "point": dict(self.point), "lhs": self.lhs, "rhs": self.rhs}

    def describe(self) -> str:
        sizes = ",".join(f"{d}={v}" for d, v in self.sizes.items())
        return (f"at {sizes} ({'causal mask' if self.masked else 'unmasked'}), indices {tuple(self.indices)}: "
                f"lhs = {self.lhs}, rhs = {self.rhs} (exact rational point of {len(self.point)} entries)")


def _floor_log10(q: Fraction) -> int:
    """floor(log10 q) for a positive rational, exactly."""
    k = len(str(q.numerator)) - len(str(q.denominator))
    while Fraction(10) ** k > q:
        k -= 1
    while Fraction(10) ** (k + 1) <= q:
        k += 1
    return k


def certified_decimal(lo: Fraction, hi: Fraction, digits=DIGITS) -> str:
    """A decimal x with at most `digits` significant digits and [lo, hi] within half a unit of its last digit."""
    if lo == 0 and hi == 0:
        return "0"
    e = _floor_log10(max(abs(lo), abs(hi))) - digits + 1
    mid = (lo + hi) / 2
    while True:
        unit = Fraction(10) ** e
        x = round(mid / unit)
        if (x - Fraction(1, 2)) * unit <= lo and hi <= (x + Fraction(1, 2)) * unit:
            return str(Decimal((int(x < 0), tuple(int(d) for d in str(abs(x))), e)))
        e += 1


def _values(lo_hi_l, lo_hi_r):
    """Both sides printed, with more digits where the first DIGITS do not tell them apart."""
    for digits in (DIGITS, 20, 30, 45, 60):
        lhs, rhs = certified_decimal(*lo_hi_l, digits), certified_decimal(*lo_hi_r, digits)
        if Decimal(lhs) != Decimal(rhs):
            return lhs, rhs
    return certified_decimal(*lo_hi_l), certified_decimal(*lo_hi_r)


def _rational_str(q: Fraction) -> str:
    return f"{q.numerator}/{q.denominator}"


def certify(m: RationalBackend, ix, lhs, rhs):
    """A Witness if real interval arithmetic at m's point separates lhs and rhs, else None."""
    lhs, rhs = graph.lift(lhs), graph.lift(rhs)
    for prec in PRECISIONS:
        ev = m.real(prec)
        try:
            left, right = ev(lhs), ev(rhs)
        except graph.Uncertifiable:
            continue
        lo, hi = graph.bounds(left - right)
        if lo is None or not (lo > 0 or hi < 0):
            continue
        point = {label: _rational_str(q) for label, q in sorted(graph.leaves_of([lhs, rhs]).items())}
        l_str, r_str = _values(graph.bounds(left), graph.bounds(right))
        return Witness(dict(m.sizes), m.setting.masked, tuple(i.value for i in ix), point, l_str, r_str)
    return None


def _search(identity, masked, sizes_list, seed, derived, closed, context, points):
    rng = random.Random(f"witness/{seed}")
    setting = identity.setting("ce", masked)
    for sizes in sizes_list:
        for _ in range(points):
            m = RationalBackend(setting, sizes, rng.getrandbits(64), context)
            try:
                _, diffs = differing(identity, m, derived, closed)
            except graph.DenominatorVanishes:
                continue
            for ix, lhs, rhs in diffs[:CERTIFY_PER_POINT]:
                witness = certify(m, ix, lhs, rhs)
                if witness is not None:
                    return witness
    return None


def find_witness(identity, masked, sizes_list, seed, derived=None, closed=None, context="", points=2):
    """A certified counterexample to identity (derived/closed overriding its sides), or None.

    Tries `points` random rational points at each of `sizes_list`. A ShapeError (an ill-formed
    claim) propagates; any error a claim's own code can raise (an unsupported construct, a pole at
    every point) returns None, so the caller reports undecided. Anything else (the caller's time
    budget expiring, KeyboardInterrupt, MemoryError) propagates."""
    try:
        return _search(identity, masked, list(sizes_list), seed, derived, closed, context, max(1, points))
    except ShapeError:
        raise
    except NO_WITNESS:
        return None


def replay(identity, witness: Witness, derived=None, closed=None, level=None):
    """Both sides of the claim rebuilt at the witness's sizes, point and indices: (m, lhs node, rhs node).

    Evaluate them with `derive.graph.float_value` (float64) or `RealEvaluator` (intervals)."""
    setting = identity.setting("ce", witness.masked, level)
    values = {k: Fraction(v) for k, v in witness.point.items()}
    m = RationalBackend(setting, witness.sizes, 0, values=values)
    ix = tuple(Ix(d, v) for d, v in zip(identity.free, witness.indices))
    lhs = graph.lift((derived or identity.derived)(m, *ix))
    rhs = graph.lift((closed or identity.closed)(m, *ix))
    return m, lhs, rhs
