"""E6: the advantage predicts the routing change: the rule, its thresholds, its negative and positive controls."""
from __future__ import annotations

from numeric.experiments.rules.base import Rule

# The sign of -A predicts sign(delta alpha) for (nearly) every entry: E6_ALL allows 1 in 100 exceptions
# (entries with tiny |A| flip through the row's baseline). E6_MOST is halfway between chance (0.5) and 1.
E6_ALL = 0.99
E6_MOST = 0.75


def e6(agreement, control_agreement):
    """E6: sign(delta alpha_ij) = sign(-A_ij) after a small score step.

    agreement: the fraction of live entries that agree at the smallest step size
    (dynamics.advantage_sign_agreement "scores"[0]); control_agreement: the same for the opposite
    prediction sign(+A) ("scores_control"[0]), reported beside. Verdict: reproduced if agreement >=
    E6_ALL; else partly-reproduced if >= E6_MOST; else not-reproduced."""
    a, c = float(agreement), float(control_agreement)
    measured = {"agreement": a, "control_agreement": c}
    head = f"sign(delta alpha) = sign(-A) for {100 * a:.1f}% of live entries (control sign(+A): {100 * c:.1f}%)"
    if a >= E6_ALL:
        return Rule("reproduced", f"{head}: at least {E6_ALL:.0%}", measured)
    if a >= E6_MOST:
        return Rule("partly-reproduced", f"{head}: at least {E6_MOST:.0%}, below {E6_ALL:.0%}", measured)
    return Rule("not-reproduced", f"{head}: below {E6_MOST:.0%}", measured)


# negative controls: control id (its claim before the /) -> the rule on the control derived from the claim's measurements
NEGATIVE = {
    # the opposite prediction, sign(+A), judged as if it were the claim's
    "E6/plus-A": (lambda k: e6(k["control_agreement"], k["agreement"])),
}

# positive controls: control id -> (how it is built: derived, synthetic or run, the rule on it)
POSITIVE = {
    "E6/natural-step": ("run", lambda k: e6(**k)),
}
POSITIVE_DESCRIPTIONS = {
    "E6/natural-step": "the same simulation with the score step -h A / alpha, under which delta alpha = -h A to "
                       "first order (run)",
}

__all__ = ["E6_ALL", "E6_MOST", "e6"]
