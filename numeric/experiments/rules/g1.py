"""G1 (ours): the EM-like benefit follows the proved routing structure: the rule, its thresholds and its controls."""
from __future__ import annotations

import numpy as np

from numeric.experiments import stats as st
from numeric.experiments.rules.base import Rule
from numeric.experiments.rules.synthetic import _paired_curves

# The conjecture on data (numeric.experiments.mechanism_grid): every routing mechanism trained on the sticky chain
# under SGD and under the EM-like schedule (same task, data and seeds), and the gain compared between the mechanisms
# whose keys compete (results.json `mechanisms`: the competition cell proved) and those whose keys do not.
# Per mechanism the gain is E1's: the speedup (st.speedup's definition) beyond what identical arms score (SGD against
# itself, as in E1), its interval the expanded percentile bootstrap over seeds (E1_LEVEL). Every mechanism
# trains on the same seeds, so one resample of seeds serves all of them (a paired design): the group difference
# D = mean excess of the competing mechanisms - mean excess of the others is resampled like one statistic.
# G1_MARGIN: the least D that counts, in speedup units (a tenth of a 1x speedup): a smaller difference has no
# practical size, and differences at rounding level (the shuffled-labels control averages to 0) never count.
# G1_PERM_P: the exact permutation test over mechanisms: the share of relabelings with the same group sizes whose D
# (point estimates) is at least the proved labels' D. With 4 competing mechanisms of 7 there are 35 relabelings, so
# p <= 0.05 means the proved partition is the one that separates the gains best (p = 1/35).
# The content-share control (when g1 gets `shares`, numeric.experiments.mechanism_grid.content_shares): the EM-like
# arm speeds up only the content parameters, and the mechanisms differ in how many of their parameters that is (the
# cells and the experts about two thirds or more, the attention layers about a third), so a gain could follow the
# share and not the routing structure. Over the mechanisms, each one's excess is regressed on its share (least
# squares with an intercept, at the point estimates and in every bootstrap replicate) and D is taken again on the
# residuals: the share-controlled difference, judged against the same G1_MARGIN (no new threshold). With shares, a
# reproduced G1 needs that difference's interval above G1_MARGIN too.
G1_RESAMPLES = 2000
G1_LEVEL = 0.95
G1_MARGIN = 0.1
G1_PERM_P = 0.05
G1_ARMS = ("sgd", "em_like")


def _g1_passage(curves, thresholds):
    """First step below each threshold; a non-finite loss (a diverged run) never is below."""
    c = np.asarray(curves, float)
    return st.first_passage(np.where(np.isfinite(c), c, np.inf), thresholds)


def _g1_speedups(sgd, arm, steps, idx):
    """Speedups of `arm` over `sgd` with E1's definition (steps / mean steps to the mean final SGD loss) on the
    resampled seeds idx (R, n): one value per resample. A mean of 0 steps (every resampled seed below the threshold
    from the start) counts as 1 step, so a speedup is at most `steps`."""
    thr = sgd[idx, -1].mean(1)
    hits = _g1_passage(arm, thr)[idx, np.arange(idx.shape[0])[:, None]].mean(1)
    return steps / np.maximum(hits, 1.0)


def _g1_groups(excess, labels):
    """D = mean over competing - mean over the others, per column of `excess` (mechanisms x replicates)."""
    on = np.array([labels[m] for m in excess], bool)
    X = np.stack(list(excess.values()))
    return X[on].mean(0) - X[~on].mean(0)


def g1_relabelings(labels):
    """Every labelling of the same mechanisms with the same number of competing ones, in a fixed order (the
    proved one among them)."""
    import itertools

    names = list(labels)
    k = sum(bool(v) for v in labels.values())
    return [{m: m in chosen for m in names} for chosen in itertools.combinations(names, k)]


def g1(curves, competition, steps, seed=0, resamples=G1_RESAMPLES, label_sets=None, group="competing", shares=None):
    """G1 (ours): the EM-like schedule's gain follows the proved structure: mechanisms whose keys compete gain more
    than mechanisms whose keys do not.

    curves: {mechanism: {"sgd", "em_like": (seeds, steps + 1) loss curves}}, row i of every arm and
    every mechanism from the same seed (same data; same initial weights where the mechanisms share them).
    competition: {mechanism: bool}, True where the mechanism's competition cell is proved (a mechanism without a
    label is left out). label_sets: labellings to judge instead of `competition`, one per bootstrap replicate in
    turn (the shuffled-labels control passes every relabelling with the same group sizes; D is then their mean).
    group: what the reason calls the mechanisms labelled True ("competing"; "content-routing" when the labels are
    the content_routing cell's). shares: {mechanism: share of its parameters under the content rate}
    (numeric.experiments.mechanism_grid.content_shares), one for every mechanism in the test; None leaves the
    content-share control out (measured and verdict as without it).

    Per mechanism: speedup of em_like over sgd and of sgd over itself (E1's definition), both on the same
    resampled seeds; the excess = speedup - identical-arms speedup, with its expanded percentile interval
    (st.expanded_percentiles, n seeds); a mechanism *gains* when the excess interval's lower end is > 0. A mechanism
    whose SGD arm ends non-finite is left out (named); a diverged EM-like run never reaches the threshold.
    The test: D = mean excess (competing) - mean excess (the others) on the same resamples, its expanded percentile
    interval [D_lo, D_hi]; the exact permutation p of D among all relabelings with the same group sizes; and whether
    the intervals separate (every competing mechanism's excess interval above every other's).
    With shares, the content-share control: each mechanism's share, the Spearman correlation over mechanisms of
    share and point excess (None where either is constant), the least-squares line excess = a + b * share over
    the mechanisms (a, b at the point estimates; b's interval from the fit in every replicate), and the
    share-controlled difference D_s: D on the residuals of that line (fitted afresh in every replicate, judged
    with the replicate's label set as D is), its interval [D_s_lo, D_s_hi].

    Verdict: not-reproduced if a group is empty or D_lo <= G1_MARGIN (the competing mechanisms do not gain more by
    a margin the seeds resolve); else reproduced if every competing mechanism gains, the permutation p <=
    G1_PERM_P (the proved partition separates the gains best of all relabelings) and, with shares, D_s_lo >
    G1_MARGIN (the difference outlasts the content share); else partly-reproduced (they gain more on average, but
    not each of them, or another partition separates the gains as well, or the gain is explained by the content
    share: D_s_lo <= G1_MARGIN)."""
    arrays = _g1_arrays(curves, competition, label_sets)
    n = next(iter(arrays.values()))["sgd"].shape[0]
    idx = np.random.default_rng(seed).integers(0, n, (resamples, n))
    measured = {"mechanisms": {}, "n_seeds": n, "steps": int(steps), "resamples": int(resamples), "margin": G1_MARGIN,
                "perm_p_at_most": G1_PERM_P, "left_out": {}}
    excess, excess_point = _g1_excess(arrays, competition, steps, idx, measured)
    kept = list(excess)
    sets = label_sets or [{m: bool(competition[m]) for m in kept}]
    sets = [{m: bool(s[m]) for m in kept} for s in sets]
    comp = [m for m in kept if sets[0][m]] if label_sets is None else []
    other = [m for m in kept if not sets[0][m]] if label_sets is None else []
    measured.update(competing=comp, others=other, labels="proved" if label_sets is None else f"{len(sets)} relabelings")
    if any(all(s.values()) or not any(s.values()) for s in sets):
        reason = "no comparison: every mechanism left in the test carries the same label" + (
            f" (left out: {', '.join(measured['left_out'])})" if measured["left_out"] else "")
        return Rule("not-reproduced", reason, measured)
    d_point, dlo, dhi = _g1_difference(excess, excess_point, sets, kept, resamples, n)
    measured.update(difference=d_point, difference_ci95=[dlo, dhi])
    controlled = None if shares is None else _g1_share_control(excess, excess_point, sets, kept, resamples, n,
                                                               _g1_shares(shares, kept), measured)
    if label_sets is None:
        relabel = [_g1_groups(excess_point, s) for s in g1_relabelings(sets[0])]
        p = float(np.mean([d >= d_point - 1e-12 for d in relabel]))
        separated = min(measured["mechanisms"][m]["excess_ci95"][0] for m in comp) > max(
            measured["mechanisms"][m]["excess_ci95"][1] for m in other)
        measured.update(permutation_p=p, relabelings=len(relabel), separated=bool(separated))
    else:
        p = float("nan")
        measured.update(permutation_p=None, relabelings=len(sets), separated=None)
    return _g1_verdict(measured, comp, other, sets, label_sets is None, d_point, dlo, dhi, p, n, group, controlled)


def _g1_arrays(curves, competition, label_sets):
    """{mechanism: {arm: (seeds, steps + 1) array}} of the mechanisms the test reads, checked: every arm present,
    one shape per mechanism, the same seeds for every mechanism, at least 2 of them."""
    names = [m for m in curves if m in competition or label_sets]
    if not names:
        raise ValueError("g1: no mechanism with both curves and a competition label")
    arrays = {}
    for m in names:
        missing = [a for a in G1_ARMS if a not in curves[m]]
        if missing:
            raise ValueError(f"g1: mechanism {m} lacks the arms {missing}")
        arrays[m] = {a: np.asarray(curves[m][a], float) for a in G1_ARMS}
        shapes = {arrays[m][a].shape for a in G1_ARMS}
        if len(shapes) != 1 or arrays[m]["sgd"].ndim != 2:
            raise ValueError(f"g1: mechanism {m}: every arm must be a (seeds, steps + 1) array of one shape, got {shapes}")
    n = arrays[names[0]]["sgd"].shape[0]
    if any(arrays[m]["sgd"].shape[0] != n for m in names):
        raise ValueError("g1: every mechanism must have the same seeds (one resample of seeds serves all)")
    if n < 2:
        raise ValueError(f"g1: an interval over seeds needs at least 2 seeds, got {n}")
    return arrays


def _g1_excess(arrays, competition, steps, idx, measured):
    """Per mechanism the speedup, the identical-arms baseline and their difference (the excess) on the resamples
    `idx` and at the point estimate, recorded in measured["mechanisms"]; a mechanism whose SGD arm ended non-finite
    is left out (measured["left_out"]). Returns ({mechanism: excess per resample}, {mechanism: point excess})."""
    n = idx.shape[1]
    point = np.arange(n)[None, :]
    excess, excess_point = {}, {}
    for m, c in arrays.items():
        if not np.isfinite(c["sgd"][:, -1]).all():
            measured["left_out"][m] = "the SGD arm ended non-finite (diverged): no threshold"
            continue
        s_em, s_rep = _g1_speedups(c["sgd"], c["em_like"], steps, idx), _g1_speedups(c["sgd"], c["sgd"], steps, idx)
        s0, b0 = (float(_g1_speedups(c["sgd"], c[a], steps, point)[0]) for a in ("em_like", "sgd"))
        lo, hi = st.expanded_percentiles(s_em, n, G1_LEVEL)
        xlo, xhi = st.expanded_percentiles(s_em - s_rep, n, G1_LEVEL)
        excess[m], excess_point[m] = s_em - s_rep, s0 - b0
        measured["mechanisms"][m] = {
            "competition": bool(competition[m]) if m in competition else None, "speedup": s0, "ci95": [lo, hi],
            "baseline": b0, "excess": s0 - b0, "excess_ci95": [xlo, xhi], "gains": bool(xlo > 0),
            "em_like_diverged_seeds": int((~np.isfinite(c["em_like"][:, -1])).sum())}
    return excess, excess_point


def _g1_difference(excess, excess_point, sets, kept, resamples, n):
    """D = mean excess (competing) - mean excess (the others): its point value (averaged over the label sets) and
    its expanded percentile interval over the resamples (resample r judged with label set r mod len(sets))."""
    X = np.stack([excess[m] for m in kept])  # (M, R)
    D = np.empty(resamples)
    for r in range(resamples):
        on = np.array([sets[r % len(sets)][m] for m in kept], bool)
        D[r] = X[on, r].mean() - X[~on, r].mean()
    d_point = float(np.mean([_g1_groups(excess_point, s) for s in sets]))
    dlo, dhi = st.expanded_percentiles(D, n, G1_LEVEL)
    return d_point, dlo, dhi


def _g1_shares(shares, kept):
    """The content shares of the mechanisms in the test, checked: one finite share in [0, 1] for each."""
    missing = [m for m in kept if m not in shares]
    if missing:
        raise ValueError(f"g1: no content share for the mechanisms {missing}")
    out = {m: float(shares[m]) for m in kept}
    bad = {m: v for m, v in out.items() if not (np.isfinite(v) and 0.0 <= v <= 1.0)}
    if bad:
        raise ValueError(f"g1: a content share is a fraction of the parameters in [0, 1], got {bad}")
    return out


def _g1_share_control(excess, excess_point, sets, kept, resamples, n, shares, measured):
    """The content-share control, recorded in `measured`: each mechanism's share, the Spearman correlation of share
    and point excess, the least-squares line excess = a + b * share over the mechanisms (at the point estimates and
    in every replicate) and D on its residuals (_g1_difference on the residuals). Returns (D_s, D_s_lo, D_s_hi)."""
    from scipy import stats

    s = np.array([shares[m] for m in kept])
    A = np.stack([np.ones_like(s), s], 1)  # (M, 2): intercept and share
    P = np.linalg.pinv(A)  # least squares (the minimum-norm fit when every share is equal: the mean)
    X, x0 = np.stack([excess[m] for m in kept]), np.array([excess_point[m] for m in kept])  # (M, R), (M,)
    coef, coef0 = P @ X, P @ x0
    resid, resid0 = X - A @ coef, x0 - A @ coef0
    ds, dslo, dshi = _g1_difference(dict(zip(kept, resid)), dict(zip(kept, resid0)), sets, kept, resamples, n)
    constant = np.ptp(s) == 0 or np.ptp(x0) == 0
    rho = None if constant else float(stats.spearmanr(s, x0).statistic)
    slo, shi = st.expanded_percentiles(coef[1], n, G1_LEVEL)
    for m, r in zip(kept, resid0):
        measured["mechanisms"][m].update(content_share=shares[m], excess_share_residual=float(r))
    measured.update(content_share_spearman=rho, share_intercept=float(coef0[0]), share_slope=float(coef0[1]),
                    share_slope_ci95=[slo, shi], difference_share_controlled=ds,
                    difference_share_controlled_ci95=[dslo, dshi])
    return ds, dslo, dshi


def _g1_verdict(measured, comp, other, sets, proved_labels, d_point, dlo, dhi, p, n, group="competing",
                controlled=None):
    """The one branch of G1's verdict that fires, with its reason; `controlled` (D_s, D_s_lo, D_s_hi) the
    content-share control's difference, None without shares."""
    gains = {m: measured["mechanisms"][m]["gains"] for m in comp + other}

    def fmt(m):
        x = measured["mechanisms"][m]
        return f"{m} {x['speedup']:.2f}x (excess {x['excess']:+.2f}, CI {x['excess_ci95'][0]:+.2f} to {x['excess_ci95'][1]:+.2f})"

    head = (f"{group} [{'; '.join(fmt(m) for m in comp)}] vs not [{'; '.join(fmt(m) for m in other)}]: "
            if proved_labels else f"labels: {len(sets)} relabelings averaged: ")
    head += (f"difference of mean excess speedups {d_point:+.2f} (95% expanded CI {dlo:+.2f} to {dhi:+.2f}, {n} seeds)"
             + (f", permutation p {p:.3f} over {measured['relabelings']} relabelings" if proved_labels else "")
             + (f"; left out: {', '.join(measured['left_out'])}" if measured["left_out"] else ""))
    if controlled is not None:
        rho = measured["content_share_spearman"]
        head += (f"; controlled for the content share (the share of parameters under the content rate; Spearman "
                 f"rho of share and excess {'undefined' if rho is None else f'{rho:+.2f}'}, slope "
                 f"{measured['share_slope']:+.2f} per unit share): difference of the residuals {controlled[0]:+.2f} "
                 f"(95% expanded CI {controlled[1]:+.2f} to {controlled[2]:+.2f})")
    share_ok = controlled is None or controlled[1] > G1_MARGIN
    if not dlo > G1_MARGIN:
        return Rule("not-reproduced", f"{head}: the interval reaches {G1_MARGIN} (G1_MARGIN), the {group} mechanisms "
                                      f"do not gain more than the others", measured)
    if all(gains[m] for m in comp) and p <= G1_PERM_P and share_ok:
        return Rule("reproduced", f"{head}: the {group} mechanisms gain more, every one of them gains, and no "
                                  f"other partition separates the gains as well"
                    + ("" if controlled is None else ", also beyond their share of content parameters"), measured)
    best = p <= 1.0 / measured["relabelings"] + 1e-12  # the proved partition separates best, yet p > G1_PERM_P
    perm = (f"with {measured['relabelings']} relabelings the permutation test cannot reach p <= {G1_PERM_P} "
            f"(p {p:.3f} is its least)" if best else
            f"another partition separates the gains as well or better (p {p:.3f} > {G1_PERM_P})")
    share = (f"the gain is explained by the content share: on the residuals of the share line the difference's "
             f"interval reaches {G1_MARGIN} (G1_MARGIN)")
    why = [w for w, bad in ((share, not share_ok),
                            (f"{', '.join(m for m in comp if not gains[m])} do(es) not gain beyond identical arms",
                             not all(gains[m] for m in comp)), (perm, p > G1_PERM_P)) if bad]
    return Rule("partly-reproduced", f"{head}: the {group} mechanisms gain more on average, but {' and '.join(why)}",
                measured)


def g1_synthetic(seed=0, seeds=5, steps=100, competing=("softmax", "linear", "gate", "moe"),
                 others=("sigmoid", "ssd", "glr")):
    """The positive control's measurement: every mechanism's SGD curves (each seed its own floor), the competing
    mechanisms' EM-like arm approaching the floor faster (speedup ~2.2), the others' EM-like arm SGD's own curves
    (no gain). Returns the keyword arguments of g1."""
    rng = np.random.default_rng(seed)
    curves = {}
    for m in competing + others:
        sgd, em = _paired_curves(seeds, steps, 40.0, 15.0, rng)
        curves[m] = {"sgd": sgd, "em_like": em if m in competing else sgd.copy()}
    return {"curves": curves, "competition": {m: m in competing for m in curves}, "steps": steps}


def g1_identical_arms(k):
    """G1's control input: identical arms for every mechanism (EM-like replaced by the SGD run)."""
    return {**k, "curves": {m: {**c, "em_like": c["sgd"].copy()} for m, c in k["curves"].items()}}


def g1_shuffled_labels(k):
    """G1's control input: the competition labels replaced by every relabelling with the same group sizes, one per
    bootstrap replicate in turn (labels that carry no information: D averages to 0 over them)."""
    labels = {m: v for m, v in k["competition"].items() if m in k["curves"]}
    return {**k, "label_sets": g1_relabelings(labels)}


def proved_partition(names, labels):
    """(competing, others) as the run's labels give them, in the run's order of mechanisms: the constructed
    controls are built for the run's own mechanisms and partition, never a list written down here. {} when a
    group would be empty (a construction then takes its defaults)."""
    competing = tuple(m for m in names if labels.get(m) is True)
    others = tuple(m for m in names if labels.get(m) is False)
    return {"competing": competing, "others": others} if competing and others else {}


def g1_controls(measurement):
    """{control id: (kind, Rule)} on a G1 measurement (g1's keyword arguments): the negative controls (identical
    arms for every mechanism; the labels shuffled), which must be not-reproduced, and the positive control (the
    constructed measurement g1_synthetic, with as many seeds as the run and its mechanisms and labels), which must
    be reproduced. With the measurement's content shares, every control is judged with them (the positive
    control's mechanisms are the run's own, so its gain must outlast the run's shares too), unless the run's labels
    leave a group empty (the construction then takes its default mechanisms, which the shares need not name)."""
    n = len(next(iter(measurement["curves"].values()))["sgd"])
    extra = {k: measurement[k] for k in ("seed", "resamples") if k in measurement}
    partition = proved_partition(measurement["curves"], measurement["competition"])
    if partition and measurement.get("shares") is not None:
        extra["shares"] = measurement["shares"]
    return {"G1/identical-arms": ("negative", g1(**g1_identical_arms(measurement))),
            "G1/labels-shuffled": ("negative", g1(**g1_shuffled_labels(measurement))),
            "G1/structured-gain": ("positive", g1(**g1_synthetic(seeds=max(n, 2), **partition), **extra))}


# control id -> a callable returning the rule's Rule on the control derived from g1_synthetic(); the expected verdict
G1_CONTROLS = {cid: (lambda cid=cid: g1_controls(g1_synthetic())[cid][1]) for cid in
               ("G1/identical-arms", "G1/labels-shuffled", "G1/structured-gain")}
G1_EXPECTED = {"G1/identical-arms": "not-reproduced", "G1/labels-shuffled": "not-reproduced",
               "G1/structured-gain": "reproduced"}
G1_CONSTRUCTIONS = {
    "G1/identical-arms": "every mechanism's EM-like arm replaced by its SGD run (identical arms; derived)",
    "G1/labels-shuffled": "the competition labels replaced by every relabelling with the same group sizes, one per "
                          "bootstrap replicate in turn (derived)",
    "G1/structured-gain": "constructed curves, as many seeds as the run: the competing mechanisms' EM-like arm ~2.2x "
                          "faster, the others' EM-like arm their SGD curves, judged with the run's content shares "
                          "where it has them (synthetic)"}

__all__ = [
    "G1_RESAMPLES", "G1_LEVEL", "G1_MARGIN", "G1_PERM_P", "G1_ARMS", "g1_relabelings", "g1", "g1_synthetic",
    "g1_identical_arms", "g1_shuffled_labels", "proved_partition", "g1_controls", "G1_CONTROLS", "G1_EXPECTED",
    "G1_CONSTRUCTIONS"]
