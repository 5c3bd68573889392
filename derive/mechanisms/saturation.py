"""The saturation question: does C9's bound hold for a mechanism's own routing gradient?

    sum_j |dL/ds_ij| <= 4 (1 - max_j w_ij) max_j |b_ij|        (C9: saturated rows stop routing)

Decided two ways, whichever applies:
- proved: the mechanism routes by advantage (its `advantage` cell proved) and C9's three identity steps hold
  for its weights (S1 the baseline as a mixture, S2 the self term vanishes, S3 the off-diagonal mass is
  1 - w_ij: normalisation), each proved at general size; C9's chain of inequalities then applies verbatim.
- disproved: a certified counterexample, searched over families that are natural for any mechanism (not tuned
  to one): every logit equal (0), or one logit high (2, 4, 8) and the rest 0, with compatibilities +-1
  alternating or all 1, beta = 0 and zero decays, for 2..12 options (a fixed option count as it is). The
  left side is evaluated from the mechanism's proved routing form, both sides in interval arithmetic with
  the real exp (200 bits); the point is recorded so anyone can re-evaluate it.
"""
from __future__ import annotations

from fractions import Fraction

from derive import graph, mechanisms
from derive.claim import Identity
from derive.model import Setting
from derive.rational import RationalBackend

OPTIONS = range(2, 13)
HIGH = (0, 2, 4, 8)  # the first logit's value; 0: every logit equal


def steps(mechanism: str):
    """C9's identity steps S1-S3 for the mechanism's weights over its options."""
    axis = mechanisms.get(mechanism).axis

    def mix(m, i, j, keep=lambda m, j, k: 1):
        return m.sum(axis, lambda k: m.alpha(i, k) * keep(m, j, k) * (m.b(i, j) - m.b(i, k)))

    def off(m, j, k):
        return 1 - m.delta(j, k)

    return {
        "S1 baseline as mixture": Identity("S1 baseline as mixture", ("n", axis), "scores",
                                           lambda m, i, j: m.b(i, j) - m.baseline(i), mix, "", mechanism=mechanism),
        "S2 self term vanishes": Identity("S2 self term vanishes", ("n", axis), "scores", mix,
                                          lambda m, i, j: mix(m, i, j, off), "", mechanism=mechanism),
        "S3 off-diagonal mass": Identity("S3 off-diagonal mass", ("n", axis), "scores",
                                         lambda m, i, j: m.sum(axis, lambda k: m.alpha(i, k) * off(m, j, k)),
                                         lambda m, i, j: 1 - m.alpha(i, j), "", mechanism=mechanism),
    }


class _Given(RationalBackend):
    """The model at exact values, with the compatibilities b_i. of the query row given (any vector is one
    query's u_i . content: the contents are free)."""

    def __init__(self, setting, sizes, values, b):
        super().__init__(setting, sizes, 0, values=values)
        self._given_b = b

    def b(self, i, j):
        return graph.const(self._given_b[j.value])


def _layouts(mech):
    """(sizes, options) to try: a fixed option count as it is, else 2..12 keys or experts, one query row."""
    base = {"n": 1, "dk": 1, "dv": 1, "m": 2, "dx": 1}
    size = mech.dims.get(mech.axis) if mech.axis != "n" else None
    counts = [size] if size else list(OPTIONS)
    for k in counts:
        yield ({**base, "n": k} if mech.axis == "n" else {**base, mech.axis: k}), k


def counterexample(mechanism: str, prec=200):
    """A certified point where the bound fails, as a dict (sizes, logits, b, both sides' bounds), or None."""
    from derive.fixed import Ix

    mech = mechanisms.get(mechanism)
    setting = Setting("scores", "linear", False, mechanism=mechanism)
    for sizes, k in _layouts(mech):
        for high in HIGH:
            for signs in ("alternating", "ones"):
                logits = [Fraction(high if j == 0 else 0) for j in range(k)]
                b = [Fraction(-1 if signs == "alternating" and j % 2 else 1) for j in range(k)]
                values = {f"{mech.logit_leaf}[0,{j}]": logits[j] for j in range(k)}
                values.update({"beta": Fraction(0), **{f"ell[{t}]": Fraction(0) for t in range(sizes["n"])}})
                m = _Given(setting, sizes, values, b)
                i, options = Ix("n", 0), [Ix(mech.axis, j) for j in range(k)]
                real = graph.RealEvaluator(prec)
                lhs = sum((abs(real(graph.lift(mech.routing(m, i, j)))) for j in options), real.ctx.mpf(0))
                top = max(real(graph.lift(m.alpha(i, j))).a for j in options)
                rhs = 4 * (1 - top) * int(max(abs(x) for x in b))  # b is +-1
                if lhs.a > rhs.b:
                    return {"sizes": {d: v for d, v in m.sizes.items()}, "options": k,
                            "logits": [str(x) for x in logits], "b": [str(x) for x in b], "beta": "0",
                            "lhs_at_least": _down(lhs), "rhs_at_most": _up(rhs)}
    return None


def _down(x, digits=12):
    """A decimal string at most the interval's lower end (rounded toward -inf): the left side is at least it."""
    import mpmath

    with mpmath.workprec(256):
        lo = mpmath.mpf(x.a._mpi_[0])
        text = mpmath.nstr(lo, digits)
        return text if mpmath.mpf(text) <= lo else mpmath.nstr(lo - abs(lo) * mpmath.mpf(10) ** (1 - digits), digits)


def _up(x, digits=12):
    """A decimal string at least the interval's upper end: the right side is at most it."""
    import mpmath

    with mpmath.workprec(256):
        hi = mpmath.mpf(x.b._mpi_[1])
        text = mpmath.nstr(hi, digits)
        return text if mpmath.mpf(text) >= hi else mpmath.nstr(hi + abs(hi) * mpmath.mpf(10) ** (1 - digits), digits)


def decide(mechanism: str, advantage_verdict: str, run):
    """The saturation cell: {verdict, witness, reason, steps: {name: verdict}}; run as questions.decide's."""
    from derive.mechanisms import questions

    cells = questions.decide(mechanism, run, which=steps(mechanism))
    verdicts = {name: c["verdict"] for name, c in cells.items()}
    seconds = sum(c["seconds"] for c in cells.values())
    if advantage_verdict == "proved" and all(v == "proved" for v in verdicts.values()):
        return {"verdict": "proved", "witness": None, "steps": verdicts, "seconds": round(seconds, 4),
                "reason": "routes by advantage and C9's steps S1-S3 hold for its weights: C9's chain applies"}
    witness = counterexample(mechanism)
    if witness is not None:
        return {"verdict": "disproved", "witness": witness, "steps": verdicts, "seconds": round(seconds, 4),
                "reason": f"the bound fails at {witness['options']} options, logits {witness['logits']}, b {witness['b']}: "
                          f"left side >= {witness['lhs_at_least']} > right side <= {witness['rhs_at_most']}"}
    return {"verdict": "undecided", "witness": None, "steps": verdicts, "seconds": round(seconds, 4),
            "reason": "C9's proof does not apply to these weights and no counterexample was found in the searched families"}
