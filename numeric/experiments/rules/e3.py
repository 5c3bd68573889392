"""E3: EM-like ends better than SGD: the rule, its thresholds, its negative and positive controls."""
from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats as sps

from numeric.experiments import stats as st
from numeric.experiments.rules.base import Rule, _f

# Each direction needs the right sign and a two-sided paired-t p below E3_P (a one-sided test at
# E3_P / 2: conservative). Seeds are the pairs (same data and initial weights in both arms).
E3_P = 0.05
E3_METRICS = (("loss", -1), ("entropy", -1), ("accuracy", +1))  # EM-like's side: lower, lower, higher


def e3(sgd, em):
    """E3: EM-like ends at lower loss, lower entropy and higher accuracy than SGD.

    sgd, em: mappings {"loss", "entropy", "accuracy"} -> per-seed values, seeds in the same order in
    both. Verdict: reproduced if all three directions hold (paired t across seeds, p < E3_P); else
    partly-reproduced if at least one holds; else not-reproduced (identical arms: t undefined, none holds)."""
    measured, holds = {}, []
    for metric, side in E3_METRICS:
        a, b = np.asarray(sgd[metric], float), np.asarray(em[metric], float)
        if a.shape != b.shape or a.size < 2:
            raise ValueError(f"e3: {metric} needs the same >= 2 seeds in both arms, got {a.shape}, {b.shape}")
        with np.errstate(all="ignore"), warnings.catch_warnings():  # identical arms: t undefined, by design
            warnings.simplefilter("ignore", RuntimeWarning)
            t, p = st.paired_t(b, a) if side > 0 else st.paired_t(a, b)  # t > 0: EM-like on its side
        ok = bool(t > 0 and p < E3_P)
        holds.append(ok)
        measured[metric] = {"sgd": _f(a.mean()), "em_like": _f(b.mean()), "t": _f(t), "p": _f(p), "holds": ok}
    measured["n_seeds"] = int(np.asarray(sgd["loss"]).size)
    head = "; ".join(f"{k} EM-like {measured[k]['em_like']:.4f} vs SGD {measured[k]['sgd']:.4f} "
                     f"(t {measured[k]['t']:.2f}, p {measured[k]['p']:.2g})" for k, _ in E3_METRICS)
    which = [k for (k, _), ok in zip(E3_METRICS, holds) if ok]
    if all(holds):
        return Rule("reproduced", f"{head}: all three directions hold at p < {E3_P}", measured)
    if which:
        return Rule("partly-reproduced", f"{head}: only {', '.join(which)} holds at p < {E3_P}", measured)
    return Rule("not-reproduced", f"{head}: no direction holds at p < {E3_P}", measured)


E3_CONTROL_MARGIN = 2.0  # E3's control is better by this multiple of the margin a paired test needs (t = 2 t_crit)


def _clear_margin(sgd, em, margin=E3_CONTROL_MARGIN):
    """E3's positive control: EM-like per seed = SGD's value plus the run's own paired difference, re-centred
    on the claimed side of every metric (loss and entropy lower, accuracy higher) at `margin` times the
    smallest mean difference a two-sided paired t-test at E3_P detects with these seeds (t_crit x sd / sqrt(n),
    sd of the run's paired differences): its t statistic is margin x t_crit whatever the data."""
    out = {}
    for metric, side in E3_METRICS:
        a, b = np.asarray(sgd[metric], float), np.asarray(em[metric], float)
        d, n = b - a, a.size
        s = float(d.std(ddof=1)) if n > 1 else 0.0
        if not s > 0:  # arms that differ by a constant (or not at all): SGD's own spread sets the scale
            s = float(a.std(ddof=1)) if n > 1 and a.std() > 0 else 1e-3 * max(1.0, abs(float(a.mean())))
        shift = margin * float(sps.t.ppf(1 - E3_P / 2, max(1, n - 1))) * s / math.sqrt(max(1, n))
        out[metric] = a + side * shift + (d - d.mean())
    return out


# negative controls: control id (its claim before the /) -> the rule on the control derived from the claim's measurements
NEGATIVE = {
    # SGD in EM-like's place and back: every direction reversed
    "E3/swapped": (lambda k: e3(k["em"], k["sgd"])),
    # SGD against itself: no difference at all
    "E3/identical": (lambda k: e3(k["sgd"], k["sgd"])),
}

# positive controls: control id -> (how it is built: derived, synthetic or run, the rule on it)
POSITIVE = {
    "E3/clear-margin": ("derived", lambda k: e3(k["sgd"], _clear_margin(k["sgd"], k["em"]))),
}
POSITIVE_DESCRIPTIONS = {
    "E3/clear-margin": "EM-like = SGD plus the run's paired differences re-centred on the claimed side of loss, "
                       "entropy and accuracy, at twice the margin a paired t-test at p = 0.05 needs (derived)",
}

__all__ = ["E3_P", "E3_METRICS", "e3", "E3_CONTROL_MARGIN"]
