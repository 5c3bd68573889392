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


# -- intervals that are not too narrow for a handful of seeds ------------------------------------------
def expanded_alpha(n, level=0.95):
    """The two-sided miss rate alpha' of the expanded percentile bootstrap (Hesterberg 2015, "What
    teachers should know about the bootstrap", section 5.2).

    A percentile interval from n observations is too narrow for small n: it behaves like a z-interval
    that also uses the plug-in (divide-by-n) spread. Expanding it means reading the bootstrap
    distribution at alpha'/2 and 1 - alpha'/2 with

        alpha'/2 = Phi(-sqrt(n / (n - 1)) * t_{alpha/2, n-1}),    alpha = 1 - level,

    which restores the width of the t-interval (n - 1 degrees of freedom, ddof=1 spread). At n = 5
    and level 0.95, alpha'/2 = 0.00096 (percentiles 0.1 / 99.9 instead of 2.5 / 97.5); alpha' tends
    to alpha as n grows (n = 60: 0.0218 per side)."""
    if n < 2:
        return float("nan")
    t = stats.t.ppf(0.5 + level / 2, n - 1)
    return float(2 * stats.norm.cdf(-np.sqrt(n / (n - 1)) * t))


def expanded_percentiles(values, n, level=0.95):
    """(lo, hi): the bootstrap replicates `values` read at alpha'/2 and 1 - alpha'/2 (expanded_alpha)
    for a statistic of n resampled units; nan for n < 2."""
    a = expanded_alpha(n, level)
    if not np.isfinite(a):
        return float("nan"), float("nan")
    lo, hi = np.percentile(np.asarray(values, float), [100 * a / 2, 100 * (1 - a / 2)])
    return float(lo), float(hi)


def first_passage(curves, thresholds):
    """H[i, r]: first step at which curve i falls below thresholds[r] (len(curve) if never), the same
    numbers as steps_to_threshold, for many thresholds at once (a curve's first step below a threshold
    is its running minimum's, and the running minimum is monotone)."""
    curves = np.asarray(curves, float)
    neg = -np.minimum.accumulate(curves, axis=1)  # non-decreasing per row
    return np.stack([np.searchsorted(row, -np.asarray(thresholds, float), side="right") for row in neg])


def speedup_resamples(sgd, em, steps, resamples=2000, seed=0):
    """Bootstrap replicates over seeds (resampled with replacement, the same rows for both arms) of
    the speedup of `em` over `sgd` and of the identical-arms speedup of `sgd` over itself, each with
    its threshold recomputed from the resampled SGD rows. The draws are bootstrap_speedup's, so its
    percentile interval is np.percentile(replicates[0], [2.5, 97.5]). Returns (speedups, baselines)."""
    sgd, em = np.asarray(sgd, float), np.asarray(em, float)
    n = sgd.shape[0]
    idx = np.random.default_rng(seed).integers(0, n, (resamples, n))
    thr = sgd[idx, -1].mean(1)  # (R,)
    cols = np.arange(resamples)[:, None]
    with np.errstate(divide="ignore"):
        s_em = steps / first_passage(em, thr)[idx, cols].mean(1)
        s_sgd = steps / first_passage(sgd, thr)[idx, cols].mean(1)
    return s_em, s_sgd


def bootstrap_speedup_expanded(sgd, em, steps, resamples=2000, seed=0, level=0.95):
    """Expanded percentile interval (expanded_alpha) of the speedup over seeds: the draws of
    bootstrap_speedup, read further out in the tails. With 5 seeds there are only 126 distinct
    resamples and the plain 2.5/97.5 percentiles understate the spread; the expansion widens them as
    a t-interval would, and agrees with the plain interval as the number of seeds grows."""
    vals, _ = speedup_resamples(sgd, em, steps, resamples, seed)
    return expanded_percentiles(vals, np.asarray(sgd).shape[0], level)


# -- PCA of attention outputs against an entropy (E5) ----------------------------------------------------
def pc1_spearman(points, entropy, direction=None):
    """Explained-variance ratios of the principal components of `points` (N, d) and the Spearman
    correlation of the PC1 scores with `entropy` (N,). PC1's sign is arbitrary; with `direction` (d,)
    it is oriented to have a non-negative dot product with it, so replicates share one sign.
    Returns (variance ratios (d,), rho, pc1 direction (d,))."""
    X = np.asarray(points, float)
    X = X - X.mean(0)
    evals, evecs = np.linalg.eigh(X.T @ X)
    order = np.argsort(evals)[::-1]
    evals, evecs = np.clip(evals[order], 0, None), evecs[:, order]
    total = evals.sum()
    ratios = evals / total if total > 0 else np.zeros_like(evals)
    pc1 = evecs[:, 0]
    if direction is not None and float(pc1 @ direction) < 0:
        pc1 = -pc1
    rho = stats.spearmanr(X @ pc1, np.asarray(entropy, float)).statistic
    return ratios, float(rho), pc1


def bootstrap_pc1_spearman(points, entropy, resamples=500, seed=0, level=0.95):
    """Percentile intervals for PC1's explained variance and Spearman(PC1, entropy), resampling whole
    sequences with replacement (positions of a sequence are dependent, sequences are independent).

    points (B, L, d), entropy (B, L). PC1 is re-estimated in every replicate and oriented along the
    full sample's PC1 (otherwise the sign of rho flips at random between replicates). Hundreds of
    sequences are resampled, so the plain percentile interval is used (expanded_alpha ~ alpha there).
    Returns {"explained_variance_pc1_ci95": [lo, hi], "spearman_pc1_entropy_ci95": [lo, hi],
    "resamples": R, "units": B}."""
    P = np.asarray(points, float)
    E = np.asarray(entropy, float)
    B, d = P.shape[0], P.shape[-1]
    _, _, direction = pc1_spearman(P.reshape(-1, d), E.reshape(-1))
    rng = np.random.default_rng(seed)
    ev, rho = [], []
    for _ in range(resamples):
        idx = rng.integers(0, B, B)
        r, s, _ = pc1_spearman(P[idx].reshape(-1, d), E[idx].reshape(-1), direction)
        ev.append(r[0])
        rho.append(s)
    q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
    return {"explained_variance_pc1_ci95": [float(x) for x in np.percentile(ev, q)],
            "spearman_pc1_entropy_ci95": [float(x) for x in np.nanpercentile(rho, q)],
            "resamples": int(resamples), "units": int(B)}


def arm_comparison(sgd, em, steps, seed=0):
    """Speedup (expanded bootstrap CI over seeds), steps to SGD's mean final loss, paired t of final losses.
    sgd, em: (seeds, steps + 1) loss curves, row i of both from the same seed."""
    s, threshold, hits = speedup(sgd, em, steps)
    t, p = paired_t(sgd[:, -1], em[:, -1])
    return {"speedup": s, "speedup_ci95": list(bootstrap_speedup_expanded(sgd, em, steps, seed=seed)),
            "steps_to_threshold": hits.tolist(), "threshold": threshold, "paired_t": t, "p_value": p}


def curve(losses, points=200):
    """Mean and 95% t-interval over seeds of (seeds, steps + 1) loss curves, downsampled for the report."""
    L = np.asarray(losses)
    idx = np.unique(np.linspace(0, L.shape[1] - 1, min(points, L.shape[1])).round().astype(int))
    mean = L[:, idx].mean(0)
    half = [mean_ci(L[:, i])[1] for i in idx] if L.shape[0] > 1 else [float("nan")] * len(idx)
    return {"step": idx.tolist(), "mean": mean.tolist(), "ci95": [float(h) for h in half]}


def bootstrap_mean_ci(values, resamples=1000, seed=0, level=0.95):
    """Percentile interval of the grand mean of `values` (rows, units), resampling the units (last axis)
    with replacement, the same draw for every row (rows: seeds scored on the same evaluation sequences)."""
    v = np.asarray(values, float)
    v = v.reshape(-1, v.shape[-1])
    idx = np.random.default_rng(seed).integers(0, v.shape[1], (resamples, v.shape[1]))
    means = v[:, idx].mean((0, 2))  # (resamples,)
    lo, hi = np.percentile(means, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return [float(lo), float(hi)]
