"""The saturation question: does C9's bound hold for a mechanism's true routing gradient?

    sum_j |dL/ds_ij| <= 4 (1 - max_j w_ij) max_j |b_ij|        (C9: saturated rows stop routing)

Every quantity is the model's own: dL/ds_ij is differentiated from the loss through the mechanism's `weight`
(never its declared `routing` form, which is a claim checked by the `routing` cell), w_ij is the weight and
b_ij = u_i . content_ij. Decided for each mask setting (none, causal), one of two ways:

- proved: the true gradient is the advantage form (the `advantage` cell proved in that setting), C9's three
  identity steps hold for the weights (S1 the baseline as a mixture, S2 the self term vanishes, S3 the
  off-diagonal mass is 1 - w_ij: normalisation), each proved at general size, and w_ij >= 0 follows from the
  declared domains (derive.mechanisms.signs). C9's chain of inequalities then applies verbatim; the verdict
  lists the assumptions it used.
- disproved: a certified counterexample. Points are searched over families natural for any mechanism (every
  logit equal, or one logit 2, 4 or 8 and the rest 0; compatibilities +-1 alternating or all 1; the
  mechanism's own leaves at values of their declared domains) and at random points inside the domains, for
  2, 3, 4 and 8 options; a point is screened in float64 and certified by interval arithmetic (200 bits) with
  the real exp and log at its exact rationals. Singular points (a vanishing denominator, a log of a
  non-positive number, an overflow) are skipped. The witness lists every entry the quantities read (every row,
  every leaf), so `replay` rebuilds it as printed.

The same search also runs where the bound is proved: a certified point there would be an inconsistency.
"""
from __future__ import annotations

import math
import random
from decimal import Decimal
from fractions import Fraction

from derive import graph, mechanisms
from derive.claim import Identity
from derive.fixed import Ix
from derive.model import Setting
from derive.rational import RationalBackend
from derive.witness import _floor_log10, certified_decimal

OPTIONS = (2, 3, 4, 8)
HIGH = (0, 2, 4, 8)  # the first logit's value; 0: every logit equal
PATTERNS = ("alternating", "ones")  # the compatibilities b_ij over the options
RANDOM_POINTS = 4  # per layout and mask setting, every leaf drawn inside its domain
OWN_LEAF_VALUES = {  # the values a mechanism's own leaves take in the families, per declared domain
    "real": (Fraction(1), Fraction(3), "alternating"), "positive": (Fraction(1), Fraction(3), Fraction(1, 3)),
    "nonnegative": (Fraction(0), Fraction(1), Fraction(3)), "unit": (Fraction(1, 2), Fraction(1, 10), Fraction(9, 10)),
    "negative": (Fraction(-1), Fraction(-3)), "nonpositive": (Fraction(0), Fraction(-1)),
}
ALTERNATING = {"real": (Fraction(2), Fraction(-1))}
SINGULAR = (ZeroDivisionError, OverflowError, graph.Uncertifiable)  # a point where the quantities are undefined
PREC = 200


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


# -- the bound at one exact point ----------------------------------------------------------------------
def _layouts(mech):
    """(sizes, options): a fixed option count as it is, else 2, 3, 4, 8 keys (n = options) or experts (n = 2)."""
    base = {"n": 2, "dk": 1, "dv": 1, "m": 2, "dx": 1}
    fixed = mech.dims.get(mech.axis) if mech.axis != "n" else None
    for k in [fixed] if fixed else OPTIONS:
        yield ({**base, "n": k} if mech.axis == "n" else {**base, mech.axis: k}), k


def _model(mech, sizes, masked, values, seed=0):
    setting = Setting("scores", "linear", masked, mechanism=mech.name)
    return RationalBackend(setting, sizes, seed, f"mechanism {mech.name} / saturation", values=values)


def _rows(m, k, rows=None):
    """Per query row (every row, or those listed): (gradient nodes dL/ds_ij, weight nodes, compatibility nodes)
    over the k options."""
    mech = m.mechanism
    out = []
    for r in range(m.sizes["n"]) if rows is None else rows:
        i, options = Ix("n", r), [Ix(mech.axis, j) for j in range(k)]
        out.append(([graph.lift(m.derived_grad(mech.logit_leaf, i, j)) for j in options],
                    [graph.lift(m.alpha(i, j)) for j in options], [graph.lift(m.b(i, j)) for j in options]))
    return out


def _float_margin(row, memo=None):
    """lhs - rhs of the bound in float64 (nan when undefined); memo: the point's float values so far."""
    memo = {} if memo is None else memo
    g, w, b = ([graph.float_value(x, memo) for x in xs] for xs in row)
    values = g + w + b
    if not all(math.isfinite(x) for x in values):
        return math.nan
    return sum(abs(x) for x in g) - 4 * (1 - max(w)) * max(abs(x) for x in b)


def _bound(row):
    """(lhs, rhs, w, b, g) of the bound, each side an exact (lo, hi) enclosure, w, b, g as intervals: evaluated at
    200 bits with the real exp and log at the exact point."""
    real = graph.RealEvaluator(PREC)
    g, w, b = ([real(x) for x in xs] for xs in row)
    lhs = graph.bounds(sum((abs(x) for x in g), real.ctx.mpf(0)))
    top = _max_bounds([graph.bounds(x) for x in w])
    big = _max_bounds([graph.bounds(abs(x)) for x in b])
    corners = [4 * (1 - t) * m for t in top for m in big]  # the product of two intervals lies within its corners
    return lhs, (min(corners), max(corners)), w, b, g


def _max_bounds(pairs):
    """An enclosure of the max of enclosures (lo, hi)."""
    return max(lo for lo, _ in pairs), max(hi for _, hi in pairs)


def _certify(row):
    """The enclosures of `_bound` when they separate (lhs > rhs certified), else None."""
    found = _bound(row)
    return found if found[0][0] > found[1][1] else None


def _decimal(iv):
    return certified_decimal(*graph.bounds(iv))


def _witness(m, r, k, row, certified, masked):
    lhs, rhs, w, b, g = certified
    roots = [x for xs in row for x in xs]
    point = {label: f"{q.numerator}/{q.denominator}" for label, q in sorted(graph.leaves_of(roots).items())}
    return {"sizes": dict(m.sizes), "masked": masked, "row": r, "options": k, "point": point,
            "weights": [_decimal(x) for x in w], "b": [_decimal(x) for x in b], "gradient": [_decimal(x) for x in g],
            "lhs_at_least": _down(lhs), "rhs_at_most": _up(rhs)}


def _down(pair):
    """A decimal at most the enclosure's lower end (the left side is at least it)."""
    return _rounded(pair[0], up=False)


def _up(pair):
    """A decimal at least the enclosure's upper end (the right side is at most it)."""
    return _rounded(pair[1], up=True)


def _rounded(q, up, digits=12):
    if q == 0:
        return "0"
    e = _floor_log10(abs(q)) - digits + 1
    unit = Fraction(10) ** e
    x = math.ceil(q / unit) if up else math.floor(q / unit)
    return str(Decimal(x).scaleb(e))


# -- the search ------------------------------------------------------------------------------------------
def _option_position(dims, axis):
    """Which index of a leaf's entry names the option (the first of the axis's range), or None."""
    return dims.index(axis) if axis in dims else None


def _family_values(m, k, high, pattern, t):
    """Every entry the scores-level model reads, set for one family: logits (high, 0, ...) per row, the content
    +-1 (or 1) by option, the mechanism's own leaves at the t-th value of their domain, everything else 1."""
    mech = m.mechanism
    sign = [Fraction(-1 if pattern == "alternating" and j % 2 else 1) for j in range(k)]
    values = {}
    for name, dims in m.leaves().items():
        at = _option_position(dims, mech.axis) if name != mech.logit_leaf else len(dims) - 1
        for ix in _entries(m.sizes, dims):
            label = f"{name}[{','.join(map(str, ix))}]"
            if name == mech.logit_leaf:
                values[label] = Fraction(high if ix[at] == 0 else 0)
            elif name == mech.content_spec.leaf:
                values[label] = sign[ix[at]] if at is not None and ix[at] < k else Fraction(1)
            elif name in mech.leaves:
                values[label] = _own_value(mech.domain(name), t, ix)
            else:
                values[label] = Fraction(1)
    values["beta"] = Fraction(0)
    return values


def _own_value(domain, t, ix):
    choices = OWN_LEAF_VALUES[domain]
    value = choices[t % len(choices)]
    if value == "alternating":
        pair = ALTERNATING[domain]
        return pair[ix[-1] % 2] if ix else pair[0]
    return value


def _entries(sizes, dims):
    out = [()]
    for d in dims:
        out = [ix + (v,) for ix in out for v in range(sizes[d])]
    return out


def _candidates(mech, sizes, k, seed):
    """The points to try at one layout: the families, then random points inside the domains."""
    probe = _model(mech, sizes, False, {})
    families = max(len(OWN_LEAF_VALUES[mech.domain(n)]) for n in mech.leaves) if mech.leaves else 1
    for t in range(families):
        for high in HIGH:
            for pattern in PATTERNS:
                yield _family_values(probe, k, Fraction(high), pattern, t)
    rng = random.Random(f"saturation/{mech.name}/{k}/{seed}")
    for _ in range(RANDOM_POINTS):
        yield {"seed": rng.getrandbits(64)}


def counterexample(mechanism: str, masked: bool, seed=0):
    """A certified point where the bound fails (a dict that `replay` rebuilds), or None.

    Raises what the mechanism's own code raises other than at a singular point (an unsupported function):
    the table makes that the cell's `error`."""
    mech = mechanisms.get(mechanism)
    for sizes, k in _layouts(mech):
        for values in _candidates(mech, sizes, k, seed):
            try:
                found = _try(mech, sizes, k, masked, values)
            except SINGULAR:
                continue
            except ValueError as exc:
                if "math domain error" not in str(exc):
                    raise
                continue
            if found is not None:
                return found
    return None


def _try(mech, sizes, k, masked, values):
    seed = values.get("seed")
    m = _model(mech, sizes, masked, None if seed is not None else values, seed or 0)
    memo = {}
    for r, row in enumerate(_rows(m, k)):
        margin = _float_margin(row, memo)
        if margin > 0 or math.isnan(margin):
            certified = _certify(row)
            if certified is not None:
                return _witness(m, r, k, row, certified, masked)
    return None


def replay(mechanism: str, witness: dict):
    """(lhs, rhs): the bound's two sides as exact (lo, hi) enclosures, rebuilt from the witness as printed (its
    sizes, mask, row and point). Raises ValueError when the point does not give every entry the quantities read."""
    mech = mechanisms.get(mechanism)
    values = {label: Fraction(v) for label, v in witness["point"].items()}
    m = _model(mech, witness["sizes"], witness["masked"], values)
    row = _rows(m, witness["options"], [witness["row"]])[0]
    missing = sorted(set(graph.leaves_of([x for xs in row for x in xs])) - set(values))
    if missing:
        raise ValueError(f"the witness of {mechanism} does not give {', '.join(missing[:5])}: it is incomplete")
    lhs, rhs, *_ = _bound(row)
    return lhs, rhs


# -- the cell ------------------------------------------------------------------------------------------------
def _proof(advantage, step_cells, sign, masked, names):
    """The assumptions C9's chain used, when it applies in this mask setting; else (None, why not). names: C9's
    steps, each of which must be among step_cells and proved in this setting."""
    key = "masked" if masked else "unmasked"
    if advantage.get("settings", {}).get(key) != "proved":
        return None, f"the true gradient is not shown to be the advantage form ({advantage.get('verdict', 'not decided')})"
    open_steps = [n for n in names if step_cells.get(n, {}).get("settings", {}).get(key) != "proved"]
    if open_steps:
        return None, f"C9's step(s) {', '.join(open_steps)} not proved for these weights"
    if sign.sign is None:
        return None, f"w >= 0 does not follow from the declared domains (no sign for {sign.stuck})"
    return sorted({"w_ij >= 0 (sign analysis of the weight)", *sign.uses, *sign.assumes}), ""


def decide(mechanism: str, advantage: dict, run, seed=0):
    """The saturation cell: {verdict, witness, reason, steps, settings, assumptions, witnesses (per mask setting),
    seconds}; advantage is the
    mechanism's `advantage` cell, run as questions.decide's."""
    import time

    from derive.mechanisms import questions, signs

    t0 = time.perf_counter()
    sign = signs.weight_sign(mechanism)
    names = list(steps(mechanism))
    # C9's steps serve only its proof: decided where the proof could apply (advantage proved in some setting, a sign)
    needed = sign.sign is not None and "proved" in advantage.get("settings", {}).values()
    step_cells = questions.decide(mechanism, run, which=steps(mechanism)) if needed else {}
    per, assumptions = {}, []
    for masked in (False, True):
        used, why = _proof(advantage, step_cells, sign, masked, names)
        witness = counterexample(mechanism, masked, seed)
        if used is not None and witness is not None:
            per[masked] = ("failed", witness, "inconsistent: C9's chain applies, yet a certified point violates the bound")
        elif used is not None:
            assumptions = sorted(set(assumptions) | set(used))
            per[masked] = ("proved", None, "")
        elif witness is not None:
            per[masked] = ("disproved", witness, describe(witness))
        else:
            per[masked] = ("undecided", None, f"C9's proof does not apply ({why}) and no certified counterexample was "
                                              f"found in the searched families and random points")
    verdict, witness, reason = questions.combine(per)
    if verdict == "proved":
        reason = "the true gradient routes by advantage and C9's steps S1-S3 hold: C9's chain applies, assuming " + \
                 "; ".join(assumptions)
    return {"verdict": verdict, "witness": witness, "reason": reason, "assumptions": assumptions,
            "witnesses": {("masked" if k else "unmasked"): w for k, (_, w, _) in per.items() if w is not None},
            "steps": {n: step_cells[n]["verdict"] if n in step_cells else "not run (no proof to serve)" for n in names},
            "settings": {("masked" if k else "unmasked"): v for k, (v, _, _) in per.items()},
            "seconds": round(time.perf_counter() - t0, 4)}


def describe(w):
    """One line: where the bound fails."""
    return (f"the bound fails at {w['options']} options, row {w['row']} ({'causal mask' if w['masked'] else 'unmasked'}):"
            f" weights ({', '.join(w['weights'])}), b ({', '.join(w['b'])}): left side >= {w['lhs_at_least']} > right "
            f"side <= {w['rhs_at_most']} (the point's {len(w['point'])} entries in the witness)")
