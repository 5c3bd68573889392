"""E4: frame early, precision late: the rule, its thresholds, its negative and positive controls."""
from __future__ import annotations

import numpy as np

from numeric.experiments.rules.base import Rule, _f, _tol

# Stable: within E4_TOL of the initial distance to the final state (80% of the way there), for both
# series on one kind of scale (a distance, linear in small changes: the JS distance for attention rows,
# the relative Frobenius change for W_V).
E4_TOL = 0.2


def stable_step(steps, series, tol):
    """The first step after which `series` stays within tol x its initial value (the last step if never)."""
    first = series[0] if series[0] > 0 else 1.0
    for s, i in zip(steps, range(len(series))):
        if all(x <= tol * first for x in series[i:]):
            return s
    return steps[-1]


def e4_inputs(frame_precision):
    """The E4 rule's input from frame.frame_precision's output: the JS distance of attention rows and the
    relative change of W_V, both to the final state."""
    return {arm: {"steps": list(fp["steps"]), "attention": list(fp["alpha_jsd_to_final"]),
                  "values": list(fp["values_rel_change_to_final"])} for arm, fp in frame_precision.items()}


def e4(arms, tol=E4_TOL):
    """E4: the attention frame stabilises before the values do.

    arms: {arm: {"steps": checkpoints, "attention": distances, "values": distances}}, both distances to
    the final state on the same kind of scale (e4_inputs). Each is normalised by its initial value.
    Verdict: reproduced if attention is stable strictly earlier than the values in every arm; else
    partly-reproduced if in some arm; else not-reproduced (a tie is not earlier)."""
    measured, early = {"tol": tol, "arms": {}}, []
    for arm, d in arms.items():
        steps = list(d["steps"])
        att, val = np.asarray(d["attention"], float), np.asarray(d["values"], float)
        if not len(steps) == att.size == val.size or not steps:
            raise ValueError(f"e4: arm {arm}: steps, attention and values must have one length")
        na = att / att[0] if att[0] > 0 else att
        nv = val / val[0] if val[0] > 0 else val
        sa, sv = stable_step(steps, na.tolist(), tol), stable_step(steps, nv.tolist(), tol)
        mid = len(steps) // 2
        early.append(sa < sv)
        measured["arms"][arm] = {"attention_stable_step": int(sa), "values_stable_step": int(sv),
                                 "middle_step": int(steps[mid]), "attention_normalised_middle": _f(na[mid]),
                                 "values_normalised_middle": _f(nv[mid]), "attention_earlier": bool(sa < sv)}
    a = measured["arms"]
    head = "; ".join(f"{arm}: attention stable at step {a[arm]['attention_stable_step']}, W_V at "
                     f"{a[arm]['values_stable_step']} (at step {a[arm]['middle_step']}: "
                     f"{a[arm]['attention_normalised_middle']:.2f} vs {a[arm]['values_normalised_middle']:.2f} of the "
                     f"initial distance)" for arm in a) + f" (stable: within {tol:.0%} of the initial distance)"
    if early and all(early):
        return Rule("reproduced", f"{head}: attention stabilises first in every arm", measured)
    if any(early):
        return Rule("partly-reproduced", f"{head}: attention stabilises first in "
                                         f"{', '.join(k for k, e in zip(a, early) if e)} only", measured)
    return Rule("not-reproduced", f"{head}: attention stabilises first in no arm", measured)


# negative controls: control id (its claim before the /) -> the rule on the control derived from the claim's measurements
NEGATIVE = {
    # attention converging at the values' rate (its series replaced by the values' own)
    "E4/attention-at-values-rate": (lambda k: e4({a: {**d, "attention": list(d["values"])}
                                                        for a, d in k["arms"].items()}, **_tol(k))),
}

# positive controls: control id -> (how it is built: derived, synthetic or run, the rule on it)
POSITIVE = {
    "E4/frozen-routing": ("run", lambda k: e4(**k)),
}
POSITIVE_DESCRIPTIONS = {
    "E4/frozen-routing": "a sticky-chain run whose W_Q, W_K stop after a tenth of the steps while W_V, W_O keep "
                         "learning, its frame-precision curves (run)",
}

__all__ = ["E4_TOL", "stable_step", "e4_inputs", "e4"]
