"""Run one identity (or one mutant of it) through each proof path, under a time budget.

Every path ends in one of four outcomes, and none says more than the path showed:

- `proved` (general path only): the normal form of derived - closed is 0, a proof at every size.
- `holds` (fixed and rational paths): true at the sizes the path tried, and only there (`Outcome.scope`
  lists them): the fixed path's difference is the zero polynomial at every size of its grid; the rational
  path's difference is 0 at every sampled point (probabilistic, Schwartz–Zippel). A claim can hold at
  every size a path tries and be false at another (a size trap: a factor (n - 1)...(n - 7)); it is not
  proved by these paths.
- `disproved`: only with a `derive.witness.Witness`: sizes, an exact rational point and both
  sides' values there, with real exp/log, certified by interval arithmetic. When the general path's
  normal form is not 0 it reads the difference as polynomials in the sizes times opaque sums
  (`derive.general.SizePolynomial`) and searches for a witness at sizes off their common roots.
- `undecided`: with the reason (an unsupported construct, the time budget, a normal form that did
  not close, a formal difference no real point confirmed).
"""
from __future__ import annotations

import random
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from derive import graph
from derive import rational as rational_points
from derive.fixed import RingBackend
from derive.general import GeneralBackend, sizes_off_roots
from derive.model import ShapeError
from derive.witness import find_witness

PATHS = ("general", "fixed", "rational")
OUTCOMES = ("proved", "holds", "disproved", "undecided")
POSITIVE = ("proved", "holds")  # a path found no difference: at every size (proved), at the sizes it tried (holds)
GENERAL_DRAWS = 3  # rational-path size draws the general path searches for a witness when its normal form is not 0


class ProofTimeout(Exception):
    pass


@dataclass
class Outcome:
    """What one path concluded, and why."""

    status: str  # one of OUTCOMES
    seconds: float
    measured: str
    witness: object = None  # derive.witness.Witness when disproved
    reason: str = ""  # why undecided
    per_size: list = field(default_factory=list)  # fixed path: [{sizes, masked, seconds}]
    scope: list = field(default_factory=list)  # holds: the sizes it holds at (the only ones it is about)

    def __post_init__(self):
        if self.status not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.status!r}")
        if self.status == "disproved" and self.witness is None:
            raise ValueError("a disproof needs a witness")
        if self.status == "holds" and not self.scope:
            raise ValueError("`holds` needs the sizes it was checked at")

    @property
    def equal(self):
        """No difference found: at every size (`proved`) or at the sizes tried (`holds`)."""
        return self.status in POSITIVE


_deadline = threading.local()  # .at: (time.monotonic() to stop at, the budget in s) of this thread's innermost budget


@contextmanager
def budget(seconds):
    """Raise ProofTimeout once `seconds` of wall time have passed, in two ways.

    - `check_budget`, which the paths' long loops call (the fixed path's ring at every operation and every few
      thousand term products, `derive.ring.DiffRing.check`): it works in any thread. A Dask worker runs its
      tasks in a thread of its own, where no signal arrives, so without it the fuzzer's budget did not hold
      (a fixed-path claim ran two minutes on an 8 s budget).
    - SIGALRM, in the main thread only: it interrupts what no check reaches (SymPy's own loops on the general
      path) between any two bytecodes.

    A budget inside another stops at the earlier of the two deadlines."""
    if not seconds:
        yield
        return
    outer = getattr(_deadline, "at", None)
    mine = (time.monotonic() + seconds, seconds)
    _deadline.at = mine if outer is None or mine[0] < outer[0] else outer
    try:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def expire(signum, frame):
            raise ProofTimeout(f"exceeded its time budget of {seconds:g} s")

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    finally:
        _deadline.at = outer


def check_budget():
    """Raise ProofTimeout if this thread's innermost `budget` has run out (nothing outside a budget)."""
    at = getattr(_deadline, "at", None)
    if at is not None and time.monotonic() > at[0]:
        raise ProofTimeout(f"exceeded its time budget of {at[1]:g} s")


def _sides(identity, model, ix, derived, closed):
    return (derived or identity.derived)(model, *ix), (closed or identity.closed)(model, *ix)


def _refute(identity, masked, context, sizes_list, seed, derived, closed, why):
    """disproved with a certified witness, or undecided with `why`."""
    witness = find_witness(identity, masked, sizes_list, seed, derived, closed, context=context)
    if witness is not None:
        return "disproved", f"{why}; witness: {witness.describe()}", witness
    return "undecided", f"{why}; no real point confirmed a difference", None


# -- path a: general size ----------------------------------------------------------------------
def _general_model(identity, masked, context, derived, closed):
    """Build both sides, at the loss linearised at o where that is exact, else at the full CE loss."""
    loss = "ce" if identity.loss == "ce" else "linear"
    while True:
        m = GeneralBackend(identity.setting(loss, masked), context, check=check_budget)
        ix = m.free_indices(identity.free)
        lhs, rhs = _sides(identity, m, ix, derived, closed)
        exact, why = m.linearisation_exact()
        if loss == "linear" and exact:
            return m, ix, lhs, rhs, ""
        if loss == "ce":
            return m, ix, lhs, rhs, f"full CE loss ({why or 'the claim asks for it'})"
        loss = "ce"


def general(identity, masked, context, seed=0, derived=None, closed=None):
    m, ix, lhs, rhs, note = _general_model(identity, masked, context, derived, closed)
    m.check_free(lhs, ix, "the derived side")
    m.check_free(rhs, ix, "the closed form")
    diff, numerator = m.difference(lhs, rhs)
    suffix = f" [{note}]" if note else ""
    if numerator == 0:
        return "proved", "normal form of derived - closed = 0" + suffix, [], None, []
    check_budget()  # no witness search past the budget (SymPy's normal form runs unchecked outside the main thread)
    rng = random.Random(seed)  # the rational path's draws, the five dimensions pairwise distinct
    drawn = [rational_points.draw_sizes(rng, distinct=True) for _ in range(GENERAL_DRAWS)]
    sizes, where = witness_sizes(m.size_polynomial(numerator), drawn)
    why = f"normal form not closed: {str(diff)[:160]}{suffix}{where}"
    if not sizes:
        return "undecided", why, [], None, []
    status, text, witness = _refute(identity, masked, context, sizes, seed, derived, closed, why)
    return status, text, [], witness, []


def witness_sizes(poly, drawn):
    """(sizes to search for a witness, a note): the draws at which the difference need not vanish, else sizes
    off the roots of its size polynomial (`derive.general.sizes_off_roots`) near the first draw.

    At a draw where every coefficient polynomial vanishes, the difference is 0 as a function of the entries
    (the normal form holds at every size), so no witness can exist there: such draws are dropped."""
    if poly is None:  # a size inside an exp, a log or an atom: no polynomial to read, search the draws
        return drawn, ""
    off = [s for s in drawn if not poly.vanishes(s)]
    if off:
        return off, ""
    found = sizes_off_roots(poly, drawn[0])
    head = (f"; its coefficients, polynomials in the sizes ({poly.text}), vanish at every drawn size "
            f"({'; '.join(_fmt(s) for s in drawn)})")
    if not found:
        return [], head + f", and at every size up to {_fmt(poly.limits())}: no witness searched"
    return found, head + "; witness searched off their roots at " + "; ".join(_fmt(s) for s in found)


# -- path b: fixed sizes, exact ------------------------------------------------------------------
def fixed(identity, masked, context, grid, seed=0, derived=None, closed=None, partial=False):
    """Exact equality at each size of `grid`, smallest first. `partial`: when the budget runs out after some sizes
    were checked in full, `holds` at those sizes (its scope) rather than undecided; a difference already found is
    never dropped (its witness search is not cut short into a `holds`)."""
    per_size, tried, done = [], [], []
    for sizes in grid:
        t0 = time.perf_counter()
        try:
            m = RingBackend(identity.setting("ce", masked), sizes, context, check=check_budget)
            completed = dict(m.sizes)  # as the backend completed them (a mechanism's own dims included)
            differs = None
            for ix in m.assignments(identity.free):
                check_budget()
                lhs, rhs = _sides(identity, m, ix, derived, closed)
                if not m.equal(lhs, rhs):
                    differs = ix
                    break
        except ProofTimeout:
            if not (partial and done):
                raise
            return ("holds", f"holds at the {len(done)} of {len(grid)} sizes checked within the budget (identical "
                    "there, exact): " + "; ".join(_fmt(s) for s in done) + f"; {_fmt(sizes)} ran out of time; not a "
                    "proof at other sizes", per_size, None, tried)
        tried.append(completed)
        if differs is not None:
            check_budget()  # no witness search past the budget
            where = f"nonzero difference at {_fmt(sizes)}, indices {tuple(i.value for i in differs)}"
            status, text, witness = _refute(identity, masked, context, [sizes], seed, derived, closed, where)
            return status, text, per_size, witness, []
        done.append(sizes)
        per_size.append({"sizes": dict(sizes), "masked": masked, "seconds": time.perf_counter() - t0})
    return ("holds", f"holds at the {len(grid)} sizes tried (identical there, exact): "
            + "; ".join(_fmt(s) for s in grid) + "; not a proof at other sizes", per_size, None, tried)


# -- path c: random rational points --------------------------------------------------------------
def _rational_point(identity, setting, sizes, rng, context, derived, closed):
    """(assignments checked, [(indices, lhs, rhs)] that differ, the sizes as the backend completed them) at one
    random point; None when the denominator vanished mod p at every redraw."""
    for _ in range(rational_points.RESAMPLES):
        m = rational_points.RationalBackend(setting, sizes, rng.getrandbits(64), context, targets="free")
        try:
            return (*rational_points.differing(identity, m, derived, closed), dict(m.sizes))
        except graph.DenominatorVanishes:
            continue
    return None


def rational(identity, masked, context, points, seed, derived=None, closed=None):
    """Random rational points; soundness, size coverage and outcomes in `derive.rational`."""
    rng = random.Random(seed)
    setting = identity.setting("ce", masked)
    checked, drawn, tried, uncertified = 0, [], [], []
    for k in range(max(1, points)):
        check_budget()
        sizes = rational_points.draw_sizes(rng, first=k == 0, distinct=rng.random() < rational_points.DISTINCT_SHARE)
        found = _rational_point(identity, setting, sizes, rng, context, derived, closed)
        if found is None:
            return ("undecided", f"a denominator vanished mod p at {rational_points.RESAMPLES} draws at {_fmt(sizes)}",
                    [], None, [])
        count, diffs, used = found
        drawn.append(sizes)
        if used not in tried:
            tried.append(used)
        checked += count
        if not diffs:
            continue
        # Y is free at this point, so it is no model input: the witness is searched at one-hot targets.
        witness = find_witness(identity, masked, [sizes], rng.getrandbits(64), derived, closed, context=context)
        if witness is not None:
            return "disproved", f"differs at a certified real point: {witness.describe()}", [], witness, []
        ix = tuple(i.value for i in diffs[0][0])
        uncertified.append(f"{_fmt(sizes)} indices {ix} ({len(diffs)} of {count} assignments)")
    if uncertified:
        return ("undecided",
                "the sides differ formally (mod p, exp/log as free generators) at " + "; ".join(uncertified)
                + ", but interval arithmetic with real exp/log separated them at no point: the claim may rely on a "
                  "relation the formal generators do not know (e.g. exp(a + b) = exp(a) exp(b))",
                [], None, [])
    return ("holds",
            f"holds at the sizes tried: equal mod p = 2^61 - 1 at {len(drawn)} random rational points ({checked} index "
            "assignments; sizes " + "; ".join(_fmt(s) for s in drawn)
            + "); probabilistic (Schwartz–Zippel): a false identity survives a point with probability <= deg * 2^-29; "
              "not a proof at other sizes",
            [], None, tried)


def _fmt(sizes):
    return ",".join(f"{d}={v}" for d, v in sizes.items())


def run_path(path, identity, masked, context, options, derived=None, closed=None):
    """Run one path; a shape error propagates (an ill-formed claim), anything else is `undecided`."""
    if path not in PATHS:
        raise ValueError(f"unknown proof path {path!r}; expected one of {PATHS}")
    t0 = time.perf_counter()
    seed = options.get("seed", 0)
    try:
        with budget(options.get("budget_s")):
            if path == "general":
                status, text, per_size, witness, scope = general(identity, masked, context, seed, derived, closed)
            elif path == "fixed":
                status, text, per_size, witness, scope = fixed(identity, masked, context, options["grid"], seed, derived,
                                                               closed, partial=options.get("partial_fixed", False))
            else:
                status, text, per_size, witness, scope = rational(identity, masked, context, options["points"], seed,
                                                                  derived, closed)
    except ShapeError:
        raise
    except Exception as exc:  # a path that cannot decide has not proved, nor disproved
        reason = f"{type(exc).__name__}: {exc}"
        return Outcome("undecided", time.perf_counter() - t0, f"undecided: {reason}", reason=reason)
    reason = text if status == "undecided" else ""
    return Outcome(status, time.perf_counter() - t0, text, witness=witness, reason=reason, per_size=per_size, scope=scope)
