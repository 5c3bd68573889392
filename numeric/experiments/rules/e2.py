"""E2: predictive entropy reaches H_min: the rule, its thresholds, its negative and positive controls."""
from __future__ import annotations

import math

import numpy as np

from numeric.experiments import stats as st
from numeric.experiments.rules.base import Rule, _ci, _f

# r = |H - H_min| / (ln m - H_min): the fraction of the uniform-to-H_min distance still to go, judged by
# the upper end of its 95% t-interval over seeds (the mean with one seed). An arm is "at H_min" when at
# most a fifth of the distance remains (E2_CLOSE), and "moved" when at least a fifth has been closed
# (r <= E2_FAR). The absolute scale is unusable: ln 8 - H_min = 0.2503 nats is the largest possible gap.
E2_CLOSE = 0.2
E2_FAR = 0.8


def e2(entropy_sgd, entropy_em, h_min, m):
    """E2: the trained predictors' entropy approaches H_min (the chain's conditional entropy, nats).

    entropy_sgd, entropy_em: per-seed mean predictive entropies (nats) of each arm; h_min < ln m.
    Verdict: reproduced if every arm's r (upper 95% end) <= E2_CLOSE; else partly-reproduced if some
    arm's r (upper end) <= E2_FAR; else not-reproduced."""
    span = math.log(m) - h_min
    if not span > 0:
        raise ValueError(f"e2: H_min must lie below ln m = {math.log(m):.4f}, got {h_min}")
    measured = {"h_min": _f(h_min), "ln_m": math.log(m), "span": span, "arms": {}}
    upper = {}
    for arm, ent in (("sgd", entropy_sgd), ("em_like", entropy_em)):
        H = np.asarray(ent, float).ravel()
        if H.size < 1:
            raise ValueError(f"e2: no entropies for arm {arm}")
        r_mean, r_half = st.mean_ci(np.abs(H - h_min) / span)
        c_mean, c_half = st.mean_ci(1 - (H - h_min) / span)
        r_ci = _ci(r_mean, r_half)
        upper[arm] = r_ci[1]
        measured["arms"][arm] = {"entropy": _f(H.mean()), "gap_signed": _f(np.mean(H - h_min)), "r": r_mean,
                                 "r_ci95": r_ci, "fraction_closed": c_mean, "fraction_closed_ci95": _ci(c_mean, c_half),
                                 "n_seeds": int(H.size)}
    a = measured["arms"]
    head = "; ".join(f"{arm}: H {a[arm]['entropy']:.3f} nats, gap {a[arm]['gap_signed']:+.3f}, "
                     f"{100 * a[arm]['fraction_closed']:.0f}% of ln {m} -> H_min closed, r {a[arm]['r']:.2f} "
                     f"(CI up to {upper[arm]:.2f})" for arm in a) + f" (H_min {h_min:.4f}, ln {m} - H_min {span:.4f})"
    if all(u <= E2_CLOSE for u in upper.values()):
        return Rule("reproduced", f"{head}: every arm within {E2_CLOSE} of the distance to H_min", measured)
    close = [arm for arm, u in upper.items() if u <= E2_FAR]
    if close:
        return Rule("partly-reproduced", f"{head}: {', '.join(close)} closed at least {1 - E2_FAR:.0%} of the "
                                         f"distance, not every arm is within {E2_CLOSE}", measured)
    return Rule("not-reproduced", f"{head}: no arm closed {1 - E2_FAR:.0%} of the distance", measured)


def _centred(entropy, h_min, groups=None):
    """Per-seed entropies moved so that their mean is H_min; the seed-to-seed spread is kept. With `groups` (a label
    per seed: the fresh seeds' draws of mu) each group's mean is moved, and the spread within a group kept: a draw
    of mu is a task of its own (how far apart its symbols' means lie against the noise), and the spread between
    draws is the tasks', not the seeds'."""
    H = np.asarray(entropy, float).ravel()
    if groups is None:
        return H - H.mean() + h_min
    labels = np.asarray(groups).ravel()
    if labels.shape != H.shape:
        raise ValueError(f"_centred: {labels.size} group labels for {H.size} entropies")
    out = H.copy()
    for label in np.unique(labels):
        sel = labels == label
        out[sel] = H[sel] - H[sel].mean() + h_min
    return out


# negative controls: control id (its claim before the /) -> the rule on the control derived from the claim's measurements
NEGATIVE = {
    # a uniform predictor on every seed: entropy ln m, none of the distance to H_min closed
    "E2/uniform-predictor": (lambda k: e2(np.full(np.size(k["entropy_sgd"]), math.log(k["m"])),
                                                np.full(np.size(k["entropy_em"]), math.log(k["m"])), k["h_min"], k["m"])),
}

# positive controls: control id -> (how it is built: derived, synthetic or run, the rule on it)
POSITIVE = {
    "E2/at-h-min": ("derived", lambda k: e2(_centred(k["entropy_sgd"], k["h_min"], k.get("groups")),
                                                  _centred(k["entropy_em"], k["h_min"], k.get("groups")), k["h_min"],
                                                  k["m"])),
}
POSITIVE_DESCRIPTIONS = {
    "E2/at-h-min": "each arm's per-seed entropies moved so that their mean is H_min in every draw of mu, the spread "
                   "of the seeds within a draw kept (derived)",
}

__all__ = ["E2_CLOSE", "E2_FAR", "e2"]
