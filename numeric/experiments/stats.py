"""Speedup, bootstrap confidence intervals and the paired t-test of the sticky-chain experiment."""
from __future__ import annotations

import numpy as np
from scipy import stats


def steps_to_threshold(curves, threshold):
    """First step at which each curve falls below `threshold` (len(curve) - 1 + 1 if never)."""
    out = []
    for c in np.asarray(curves):
        below = np.nonzero(c < threshold)[0]
        out.append(int(below[0]) if below.size else len(c))
    return np.array(out)


def speedup(sgd, em, steps):
    """The authors' definition: steps / mean over seeds of the EM arm's steps to the mean final SGD loss."""
    threshold = float(np.mean(np.asarray(sgd)[:, -1]))
    hits = steps_to_threshold(em, threshold)
    return steps / float(np.mean(hits)), threshold, hits


def bootstrap_speedup(sgd, em, steps, resamples=2000, seed=0):
    """95% percentile interval over seeds resampled with replacement (threshold recomputed each time)."""
    rng = np.random.default_rng(seed)
    sgd, em = np.asarray(sgd), np.asarray(em)
    n = sgd.shape[0]
    vals = []
    for _ in range(resamples):
        idx = rng.integers(0, n, n)
        vals.append(speedup(sgd[idx], em[idx], steps)[0])
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return float(lo), float(hi)


def paired_t(a, b):
    """Paired t-test of final losses across seeds (a - b); nan when there are fewer than 2 seeds."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2:
        return float("nan"), float("nan")
    res = stats.ttest_rel(a, b)
    return float(res.statistic), float(res.pvalue)


def mean_ci(values, level=0.95):
    """Mean and t-interval half-width over seeds."""
    v = np.asarray(values, float)
    if v.size < 2:
        return float(v.mean()), float("nan")
    half = stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size)
    return float(v.mean()), float(half)
