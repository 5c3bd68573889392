"""Run one identity (or one mutant of it) through each proof path, under a time budget."""
from __future__ import annotations

import random
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from derive.fixed import RingBackend
from derive.general import GeneralBackend
from derive.model import DIMS, Setting, ShapeError
from derive.rational import DualBackend

PATHS = ("general", "fixed", "rational")
PATH_LABELS = {
    "general": "general size (symbolic n, d, m; sum normal form)",
    "fixed": "fixed size, exact (differential polynomial ring, full CE loss)",
    "rational": "exact evaluation at random rational points (probabilistic)",
}


class ProofTimeout(Exception):
    pass


@dataclass
class Outcome:
    """What one path concluded: equal (proved / mutant accepted) or not, and why."""

    equal: bool
    seconds: float
    measured: str
    error: str = ""
    per_size: list = field(default_factory=list)  # path b: [{sizes, masked, seconds}]


@contextmanager
def budget(seconds):
    """Raise ProofTimeout after `seconds` of wall time (main thread only; else unbounded)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
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


def _loss(identity, path):
    if identity.loss == "ce":
        return "ce"
    return "linear" if path == "general" else "ce"


def _sides(identity, model, ix, derived, closed):
    return (derived or identity.derived)(model, *ix), (closed or identity.closed)(model, *ix)


def general(identity, masked, context, derived=None, closed=None):
    m = GeneralBackend(Setting(identity.level, _loss(identity, "general"), masked), context)
    ix = m.free_indices(identity.free)
    lhs, rhs = _sides(identity, m, ix, derived, closed)
    m.check_free(lhs, ix, "the derived side")
    m.check_free(rhs, ix, "the closed form")
    ok, diff = m.equal(lhs, rhs)
    text = "normal form of derived - closed = 0" if ok else f"nonzero normal form: {str(diff)[:160]}"
    return ok, text, []


def fixed(identity, masked, context, grid, derived=None, closed=None):
    per_size = []
    for sizes in grid:
        t0 = time.perf_counter()
        m = RingBackend(Setting(identity.level, _loss(identity, "fixed"), masked), sizes, context)
        for ix in m.assignments(identity.free):
            lhs, rhs = _sides(identity, m, ix, derived, closed)
            if not m.equal(lhs, rhs):
                return False, f"differs at {_fmt(sizes)}, indices {ix}", per_size
        per_size.append({"sizes": dict(sizes), "masked": masked, "seconds": time.perf_counter() - t0})
    return True, f"identical at {len(grid)} sizes up to {_fmt(grid[-1])}", per_size


def rational(identity, masked, context, points, seed, derived=None, closed=None):
    rng = random.Random(seed)
    for point in range(points):
        sizes = {dim: rng.randint(2, 4) if dim == "n" else rng.randint(1, 3) for dim in DIMS}
        m = DualBackend(Setting(identity.level, _loss(identity, "rational"), masked), sizes, rng.randrange(2**31), context)
        for ix in m.assignments(identity.free):
            lhs, rhs = _sides(identity, m, ix, derived, closed)
            if not m.equal(lhs, rhs):
                return False, f"differs at point {point} ({_fmt(sizes)}), indices {ix}", []
    return True, f"equal at {points} random rational points (Schwartz–Zippel)", []


def _fmt(sizes):
    return ",".join(f"{d}={v}" for d, v in sizes.items())


def run_path(path, identity, masked, context, options, derived=None, closed=None):
    """Run one path; a shape error propagates, anything else (timeouts included) is a non-proof."""
    t0 = time.perf_counter()
    try:
        with budget(options.get("budget_s")):
            if path == "general":
                ok, text, per_size = general(identity, masked, context, derived, closed)
            elif path == "fixed":
                ok, text, per_size = fixed(identity, masked, context, options["grid"], derived, closed)
            else:
                ok, text, per_size = rational(identity, masked, context, options["points"], options["seed"], derived, closed)
        return Outcome(ok, time.perf_counter() - t0, text, per_size=per_size)
    except ShapeError:
        raise
    except Exception as exc:  # a path that cannot decide did not prove
        return Outcome(False, time.perf_counter() - t0, f"undecided: {type(exc).__name__}: {exc}", error=str(exc))
