"""E1: speedup of EM-like over SGD: the rule, its thresholds, its negative and positive controls."""
from __future__ import annotations

import math

import numpy as np

from numeric.experiments import stats as st
from numeric.experiments.rules.base import Rule, _f, _seed

# Resamples of the seed bootstrap: the percentiles read at 0.1/99.9 (5 seeds, expanded) need ~2 replicates
# beyond each end, so 2000 rather than the usual 1000.
E1_RESAMPLES = 2000
E1_LEVEL = 0.95


def e1(sgd, em, steps, paper_speedup, seed=0, resamples=E1_RESAMPLES):
    """E1: EM-like reaches SGD's final loss in fewer steps (paper: speedup `paper_speedup`).

    sgd, em: (seeds, steps + 1) loss curves, row i of both arms from the same seed (same data and
    initial weights). speedup = st.speedup (the authors' definition: steps / mean EM steps to the mean
    final SGD loss). Identical arms do not score 1 under that definition (a seed whose curve ends above
    the mean final loss never reaches it), so the rule compares with them: `baseline` =
    speedup(sgd, sgd), and `excess_ci95` is the interval of speedup(sgd*, em*) - speedup(sgd*, sgd*)
    over the same resampled seeds (like with like; exactly [0, 0] for identical arms). Intervals are
    expanded percentile bootstraps over seeds (st.expanded_alpha), not too narrow at 5 seeds.

    Verdict: not-reproduced if the excess interval's lower end <= 0 (no speedup beyond identical arms);
    else reproduced if the paper's speedup lies in the speedup's interval; else partly-reproduced
    (EM-like is faster, by a different factor)."""
    sgd, em = np.asarray(sgd, float), np.asarray(em, float)
    if sgd.ndim != 2 or sgd.shape != em.shape:
        raise ValueError(f"e1: sgd and em must be (seeds, steps + 1) arrays of one shape, got {sgd.shape}, {em.shape}")
    n = sgd.shape[0]
    if n < 2:
        raise ValueError(f"e1: an interval over seeds needs at least 2 seeds, got {n}")
    s, threshold, hits = st.speedup(sgd, em, steps)
    baseline = st.speedup(sgd, sgd, steps)[0]
    s_em, s_sgd = st.speedup_resamples(sgd, em, steps, resamples, seed)
    lo, hi = st.expanded_percentiles(s_em, n, E1_LEVEL)
    xlo, xhi = st.expanded_percentiles(s_em - s_sgd, n, E1_LEVEL)
    plain = [float(x) for x in np.percentile(s_em, [2.5, 97.5])]
    measured = {"speedup": _f(s), "ci95": [lo, hi], "ci95_plain_percentile": plain, "baseline": _f(baseline),
                "excess_over_baseline": _f(s - baseline), "excess_ci95": [xlo, xhi], "threshold": _f(threshold),
                "steps_to_threshold": [int(h) for h in hits], "em_steps_mean": _f(np.mean(hits)), "n_seeds": n,
                "steps": int(steps), "paper_speedup": _f(paper_speedup), "resamples": int(resamples),
                "percentiles": [100 * st.expanded_alpha(n, E1_LEVEL) / 2, 100 * (1 - st.expanded_alpha(n, E1_LEVEL) / 2)]}
    head = (f"speedup {s:.2f}x (95% expanded CI {lo:.2f}-{hi:.2f}, {n} seeds) vs identical arms {baseline:.2f}x; "
            f"excess {s - baseline:+.2f} (CI {xlo:+.2f} to {xhi:+.2f}); EM steps to SGD's final loss {np.mean(hits):.0f}")
    if not xlo > 0:
        return Rule("not-reproduced", f"{head}: the excess interval reaches 0, EM-like is not faster than "
                                      f"identical arms score", measured)
    if lo <= paper_speedup <= hi:
        return Rule("reproduced", f"{head}: the paper's {paper_speedup}x lies in the speedup interval", measured)
    return Rule("partly-reproduced", f"{head}: EM-like is faster, but the paper's {paper_speedup}x lies outside "
                                     f"the speedup interval", measured)


def printed_decimals(value):
    """Digits after the point of a figure as printed (2.03 -> 2, 2.3 -> 1, 430 -> 0)."""
    text = repr(float(value))
    return len(text.split(".")[1].rstrip("0")) if "." in text else 0


def e1_replay(replayed, paper):
    """E1 on the paper's own streams, where there is no sampling error left: do the printed figures come
    out? replayed/paper: {"sgd_final_loss", "em_like_final_loss", "speedup"} (means over the paper's
    seeds), replayed also "em_steps" (per seed) and paper "em_steps" (their mean). Each figure is compared
    at the precision the paper prints it. Reproduced: all three; partly: the two final losses but not the
    speedup; not reproduced: a final loss differs."""
    names = {"sgd_final_loss": "SGD final loss", "em_like_final_loss": "EM-like final loss", "speedup": "speedup"}
    digits = {k: printed_decimals(paper[k]) for k in names}
    match = {k: round(float(replayed[k]), digits[k]) == float(paper[k]) for k in names}
    text = ", ".join(f"{names[k]} {float(replayed[k]):.{digits[k] + 2}f} (paper {paper[k]})" for k in names)
    steps = f"EM-like steps to SGD's final loss {np.mean(replayed['em_steps']):.1f} (paper {paper['em_steps']})"
    measured = {"match_at_printed_precision": match, "digits": digits}
    if not (match["sgd_final_loss"] and match["em_like_final_loss"]):
        return Rule("not-reproduced", f"a final loss differs from the printed one: {text}; {steps}", measured)
    if match["speedup"]:
        return Rule("reproduced", f"{text}; {steps}", measured)
    return Rule("partly-reproduced", f"the final losses come out as printed but the speedup does not: {text}; {steps}",
                measured)


# Inputs where the phenomenon holds by construction (see the module docstring); the constants size the
# constructions, not the rules: each rule keeps its own thresholds.
E1_CONTROL_MARGIN = 0.05  # E1's control ends this fraction of SGD's mean decrease below SGD's worst seed


def paper_speed_curves(sgd, steps, speedup):
    """E1's positive control: an EM-like arm that is the run's own SGD arm, faster. Each seed's SGD curve as a
    function of its progress p in [0, 1] (the curve at step p x steps), lowered by delta x p, traversed q times
    faster (p = min(1, q t / steps)): both arms start equal, and by the end of its path every seed is delta
    below SGD's worst final loss, so every seed passes below the mean final SGD loss (the authors' threshold,
    which a seed ending above the mean never reaches). delta is the spread of SGD's final losses above their
    mean plus E1_CONTROL_MARGIN of SGD's mean decrease; q is the smallest clock (bisection on log q) at which
    the authors' speedup reaches `speedup`. Returns (curves (seeds, steps + 1), q, delta)."""
    sgd = np.asarray(sgd, float)
    grid = np.arange(steps + 1, dtype=float)
    final = sgd[:, -1]
    delta = float(final.max() - final.mean()) + E1_CONTROL_MARGIN * abs(float(np.mean(sgd[:, 0] - final))) + 1e-12

    def curves(q):
        p = np.minimum(1.0, q * grid / steps)
        return np.stack([np.interp(p * steps, grid, row) for row in sgd]) - delta * p

    def fast_enough(q):
        return st.speedup(sgd, curves(q), steps)[0] >= speedup

    lo, hi = math.log(1e-3), math.log(float(steps))  # at q = steps every seed is below threshold after one step
    if not fast_enough(math.exp(hi)):
        raise ValueError(f"paper_speed_curves: a speedup of {speedup} is beyond {steps} steps")
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fast_enough(math.exp(mid)) else (mid, hi)
    return curves(math.exp(hi)), math.exp(hi), delta


# negative controls: control id (its claim before the /) -> the rule on the control derived from the claim's measurements
NEGATIVE = {
    # identical arms: the speedup is the baseline in every resample (excess exactly 0)
    "E1/sgd-vs-itself": (lambda k: e1(k["sgd"], k["sgd"], k["steps"], k["paper_speedup"], **_seed(k))),
}

# positive controls: control id -> (how it is built: derived, synthetic or run, the rule on it)
POSITIVE = {
    "E1/paper-speed": ("derived", lambda k: e1(k["sgd"], paper_speed_curves(k["sgd"], k["steps"], k["paper_speedup"])[0],
                                                       k["steps"], k["paper_speedup"], **_seed(k))),
}
POSITIVE_DESCRIPTIONS = {
    "E1/paper-speed": "EM-like = the run's own SGD curves on a faster clock (equal at step 0, each ending below SGD's "
                      "worst final loss), the clock set so that the authors' speedup is the paper's (derived)",
}

__all__ = ["E1_RESAMPLES", "E1_LEVEL", "e1", "printed_decimals", "e1_replay", "E1_CONTROL_MARGIN", "paper_speed_curves"]
