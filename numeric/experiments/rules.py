"""The verdicts of the empirical claims E1–E7 (and W1, ours: E4 in a deep model) as pure functions of measurements.

Every rule takes numbers (numpy arrays, lists, dicts of them) and returns a `Rule`: a verdict in
VERDICTS, a reason naming the one branch that fired with its numbers, and the measurements it used.
There is exactly one route to each verdict, tested in order not-reproduced, reproduced, partly (or as
stated per rule); the thresholds are the module constants below, each with the reason for its value.
No rule trains, touches torch state or reads files.

Negative controls: for every claim there is an input on which its rule must say `not-reproduced`
(identical arms, a uniform predictor, arms swapped, attention converging at the values' rate,
features independent of the entropy, the opposite sign prediction, values that do not train; for W1
routing drifting at the values' rate, and routing that never stops drifting).
NEGATIVE_CONTROLS holds them on synthetic inputs; `negative_controls(measurements)` derives them from
the measurements of a real run. A rule that does not say `not-reproduced` on its control is not able
to tell the claim from its absence, whatever it says on the real run.

Positive controls: for every claim there is also an input where the phenomenon holds by construction, on
which its rule must say `reproduced` (`positive_controls`, described in POSITIVE_CONTROLS): derived from the
run's own numbers (E1, E2, E3, E7), measured on a constructed run (E4, W1: routing frozen after a few steps
while the values keep learning; E6: the score step under which the claimed sign is exact to first order), or
synthetic (E5). A rule that never says `reproduced` cannot tell the claim from its absence either.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from numeric.experiments import stats as st

VERDICTS = ("reproduced", "partly-reproduced", "not-reproduced")


@dataclass(frozen=True)
class Rule:
    verdict: str
    reason: str
    measured: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"Rule.verdict must be one of {VERDICTS}, got {self.verdict!r}")


def _f(x):
    return float(x)


def _ci(mean, half):
    """[lo, hi] of a mean and its t half-width; a single observation gives [mean, mean]."""
    half = 0.0 if not math.isfinite(half) else half
    return [float(mean - half), float(mean + half)]


# -- E1: speedup of EM-like over SGD ---------------------------------------------------------------------
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


# -- E2: predictive entropy reaches H_min ----------------------------------------------------------------
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


# -- E3: EM-like ends better than SGD ------------------------------------------------------------------
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


# -- E4: frame early, precision late ---------------------------------------------------------------------
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


# -- W1: E4 in a deep model, from the watcher's drifts ----------------------------------------------------
# Drift: the change between consecutive watcher records on a fixed probe batch (routing: the JS distance of
# attention rows; values: the relative change of V), per layer x head. A series "settles" at the first record
# after which it stays within W1_TOL of its early level (E4's 80% of the way, here on drift) for at least the
# last W1_HOLD records (one quiet interval is not a freeze). The early level is the largest drift in the first
# W1_EARLY of the records, not the first drift: routing gradients start small, and attention can begin to move
# only after the values have. An optimizer reproduces when most (more than W1_MOST) of its heads freeze
# routing strictly before their values settle, partly when at least W1_SOME do.
W1_TOL = 0.2
W1_EARLY = 0.25
W1_HOLD = 3
W1_MOST = 0.5
W1_SOME = 0.25


def settle_index(series, tol=W1_TOL, early=W1_EARLY, hold=W1_HOLD):
    """(index of the first record after which `series` stays <= tol x its early level, early level); the
    index is len(series) when fewer than `hold` final records stay there (it never settles). A series whose
    early level is 0 never moved: it is settled from the start (index 0), and w1_head does not count it as a
    freeze of routing."""
    x = np.asarray(series, float)
    if x.ndim != 1 or not x.size:
        raise ValueError(f"settle_index: a non-empty 1-D series is needed, got shape {x.shape}")
    level = float(x[: max(1, math.ceil(early * x.size))].max())
    if level == 0:
        return 0, level
    i = x.size
    while i > 0 and x[i - 1] <= tol * level:
        i -= 1
    return (i if x.size - i >= hold else x.size), level


def w1_head(steps, routing, values, tol=W1_TOL):
    """One head on one seed: routing's freeze step (None: never, or routing never moved), the values' settle
    step (None: never; the first step when they never moved), whether routing froze strictly first, each
    drift at the end over its early level (the mean of the last W1_HOLD records), and how much the values
    still moved after the freeze (summed relative change)."""
    r, r_level = settle_index(routing, tol)
    v, v_level = settle_index(values, tol)
    n = len(steps)
    if not r_level > 0:  # routing that never moved has nothing to freeze
        r = n
    end = lambda x, level: _f(np.mean(np.asarray(x, float)[-W1_HOLD:]) / level) if level > 0 else 0.0  # noqa: E731
    return {"freeze_step": int(steps[r]) if r < n else None, "values_settle_step": int(steps[v]) if v < n else None,
            "frame_first": bool(r < n and r < v), "routing_end_ratio": end(routing, r_level),
            "values_end_ratio": end(values, v_level),
            "value_change_after_freeze": _f(np.sum(np.asarray(values, float)[r:])) if r < n else None,
            "routing_drift_after_freeze": _f(np.sum(np.asarray(routing, float)[r:])) if r < n else None}


def _step(x):
    return "-" if x is None else f"{x:.0f}"


def _head_verdict(seeds):
    """One layer x head over seeds: reproduced if routing froze first on every seed, partly on some, else not."""
    first = sum(u["frame_first"] for u in seeds)
    return "reproduced" if first == len(seeds) else "partly-reproduced" if first else "not-reproduced"


def _w1_verdict(fraction):
    return ("reproduced" if fraction > W1_MOST else "partly-reproduced" if fraction >= W1_SOME else "not-reproduced")


def w1(optimizers, tol=W1_TOL):
    """W1 (ours): E4 in a deep model. optimizers: {name: {"steps": record steps (R,), "routing": drifts
    (seeds, layers, heads, R), "values": drifts (seeds, layers, heads, R)}} (deep_watch.rule_inputs).

    Per head and seed (w1_head): routing frozen first iff it settles (settle_index) strictly before the
    values do; each layer x head's verdict (reported, not voted) is reproduced if so on every seed,
    partly-reproduced on some. Per optimizer, over every (seed, layer, head): reproduced if more than W1_MOST
    of them freeze routing first; partly-reproduced if at least W1_SOME do; else not-reproduced. Claim:
    reproduced if every optimizer reproduces; not-reproduced if none reproduces even partly; else
    partly-reproduced."""
    if not optimizers:
        raise ValueError("w1: no optimizers")
    measured, per = {"tol": tol, "optimizers": {}}, {}
    for name, d in optimizers.items():
        R, V, steps = np.asarray(d["routing"], float), np.asarray(d["values"], float), list(d["steps"])
        if R.ndim != 4 or R.shape != V.shape or R.shape[-1] != len(steps):
            raise ValueError(f"w1: {name}: routing and values must be (seeds, layers, heads, {len(steps)}) arrays of "
                             f"one shape, got {R.shape}, {V.shape}")
        heads = [[[w1_head(steps, R[s, l, h], V[s, l, h], tol) for s in range(R.shape[0])] for h in range(R.shape[2])]
                 for l in range(R.shape[1])]
        units = [u for layer in heads for head in layer for u in head]
        first = sum(u["frame_first"] for u in units) / len(units)
        frozen = [u["freeze_step"] for u in units if u["freeze_step"] is not None]
        per[name] = _w1_verdict(first)
        measured["optimizers"][name] = {
            "verdict": per[name], "frame_first_fraction": _f(first), "heads_frozen": len(frozen), "units": len(units),
            "median_freeze_step": _f(np.median(frozen)) if frozen else None,
            "routing_end_ratio_median": _f(np.median([u["routing_end_ratio"] for u in units])),
            "values_end_ratio_median": _f(np.median([u["values_end_ratio"] for u in units])),
            "heads": [{"layer": l, "head": h, "verdict": _head_verdict(seeds), "frame_first": sum(u["frame_first"] for u in seeds),
                       "seeds": len(seeds), **{k: [u[k] for u in seeds] for k in seeds[0] if k != "frame_first"}}
                      for l, layer in enumerate(heads) for h, seeds in enumerate(layer)]}
    o = measured["optimizers"]
    head = "; ".join(f"{n}: routing froze first in {100 * o[n]['frame_first_fraction']:.0f}% of {o[n]['units']} "
                     f"seed x layer x head units (routing froze in {o[n]['heads_frozen']}, median step "
                     f"{_step(o[n]['median_freeze_step'])}; drift at the end over its early level, median: routing "
                     f"{o[n]['routing_end_ratio_median']:.2f}, values {o[n]['values_end_ratio_median']:.2f}) -> {per[n]}"
                     for n in o)
    head += f" (settled: drift within {tol:.0%} of its early level for the last {W1_HOLD}+ records)"
    if all(v == "reproduced" for v in per.values()):
        return Rule("reproduced", f"{head}: routing freezes before the values settle in most heads under every "
                                  f"optimizer", measured)
    if all(v == "not-reproduced" for v in per.values()):
        return Rule("not-reproduced", f"{head}: under no optimizer does routing freeze first in at least "
                                      f"{W1_SOME:.0%} of the heads", measured)
    return Rule("partly-reproduced", f"{head}: not under every optimizer", measured)


# -- E5: attention outputs organise along the Bayes entropy ----------------------------------------------
# Paper I reports PC1 at 84-90% of the variance: E5_EV is just below its range. |Spearman| 0.5 is a
# strong monotone association for thousands of points. Both are judged on the lower end of the 95%
# bootstrap interval over evaluation sequences.
E5_EV = 0.8
E5_RHO = 0.5


def _abs_lower(ci):
    """The lower end of |rho| given an interval [lo, hi] of rho: 0 if it straddles 0."""
    lo, hi = ci
    return 0.0 if lo <= 0 <= hi else float(min(abs(lo), abs(hi)))


def e5(arms):
    """E5: PC1 of the attention outputs carries most of the variance and orders positions by the Bayes
    posterior-predictive entropy. Every arm is judged.

    arms: {arm: windtunnel.evaluate output} (uses explained_variance, explained_variance_pc1_ci95,
    spearman_pc1_entropy, spearman_pc1_entropy_ci95, within_symbol.abs_spearman_pc1_entropy_mean).
    Per arm: reproduced if the CI's lower end of PC1's explained variance >= E5_EV and of |Spearman|
    >= E5_RHO; else partly-reproduced if the within-symbol mean |Spearman| >= E5_RHO (the current
    symbol, a discrete factor, dominates the global PCA; within each symbol's cluster PC1 still orders
    the positions by entropy, so the entropy axis exists locally but is not the leading global
    direction); else not-reproduced. Claim: reproduced if every arm is; partly-reproduced if any arm is
    reproduced or partly; else not-reproduced."""
    if not arms:
        raise ValueError("e5: no arms")
    measured, per = {"arms": {}}, {}
    for arm, ev in arms.items():
        for key in ("explained_variance_pc1_ci95", "spearman_pc1_entropy_ci95"):
            if key not in ev:
                raise ValueError(f"e5: arm {arm} has no {key} (windtunnel.evaluate's bootstrap interval)")
        ev_lo = float(ev["explained_variance_pc1_ci95"][0])
        rho_lo = _abs_lower(ev["spearman_pc1_entropy_ci95"])
        within = float(ev["within_symbol"]["abs_spearman_pc1_entropy_mean"])
        if ev_lo >= E5_EV and rho_lo >= E5_RHO:
            v = "reproduced"
        elif within >= E5_RHO:
            v = "partly-reproduced"
        else:
            v = "not-reproduced"
        per[arm] = v
        measured["arms"][arm] = {"verdict": v, "pc1_explained": _f(ev["explained_variance"][0]),
                                 "pc1_explained_ci95": [float(x) for x in ev["explained_variance_pc1_ci95"]],
                                 "spearman": _f(ev["spearman_pc1_entropy"]),
                                 "spearman_ci95": [float(x) for x in ev["spearman_pc1_entropy_ci95"]],
                                 "abs_spearman_lower": rho_lo, "within_symbol_abs_spearman": within}
    a = measured["arms"]
    head = "; ".join(f"{arm}: PC1 {100 * a[arm]['pc1_explained']:.0f}% (CI from {100 * a[arm]['pc1_explained_ci95'][0]:.0f}%), "
                     f"Spearman {a[arm]['spearman']:.2f} (|rho| CI from {a[arm]['abs_spearman_lower']:.2f}), within "
                     f"symbol |rho| {a[arm]['within_symbol_abs_spearman']:.2f} -> {per[arm]}" for arm in a)
    if all(v == "reproduced" for v in per.values()):
        return Rule("reproduced", f"{head}: every arm has PC1 >= {E5_EV:.0%} and |rho| >= {E5_RHO} "
                                  f"(interval lower ends)", measured)
    if any(v != "not-reproduced" for v in per.values()):
        return Rule("partly-reproduced", f"{head}: not every arm reproduces; "
                                         f"{', '.join(k for k, v in per.items() if v != 'not-reproduced')} "
                                         f"at least partly (globally, or within symbol)", measured)
    return Rule("not-reproduced", f"{head}: no arm, neither globally nor within symbol", measured)


# -- E6: the advantage predicts the routing change -------------------------------------------------------
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


# -- E7: values specialise toward the errors routed to them ---------------------------------------------
# A rise of 0.3 in mean cosine is far beyond initialisation noise (the initial cosine is ~0 +- 0.1);
# ending above 0.5 means the values point mostly along their own error signal.
E7_RISE = 0.3
E7_FINAL = 0.5


def e7(spec):
    """E7: cos(v_j, m_j) rises during training and beats the control cos(v_j, m_pi(j)) (another key's
    signal), dynamics.specialisation's output.

    Uses cos_value_signal_{initial,final}_per_instance and cos_value_control_final_per_instance
    (means over keys per instance); intervals are 95% t-intervals over instances. The margin is own
    minus control at the end. Verdict: reproduced if the own cosine rises by > E7_RISE, ends > E7_FINAL
    and the margin's interval lies above 0; else partly-reproduced if it rises by > E7_RISE (but does
    not end high or does not beat the control); else not-reproduced."""
    own0 = np.asarray(spec["cos_value_signal_initial_per_instance"], float)
    own1 = np.asarray(spec["cos_value_signal_final_per_instance"], float)
    ctl1 = np.asarray(spec["cos_value_control_final_per_instance"], float)
    ctl0 = np.asarray(spec.get("cos_value_control_initial_per_instance", np.full_like(ctl1, np.nan)), float)
    rise, rise_half = st.mean_ci(own1 - own0)
    margin, margin_half = st.mean_ci(own1 - ctl1)
    final = float(own1.mean())
    margin_ci = _ci(margin, margin_half)
    measured = {"own_initial": _f(own0.mean()), "own_final": final, "control_initial": _f(ctl0.mean()),
                "control_final": _f(ctl1.mean()), "rise": rise, "rise_ci95": _ci(rise, rise_half),
                "margin": margin, "margin_ci95": margin_ci, "instances": int(own1.size)}
    if "steps" in spec:
        measured["steps"] = int(spec["steps"][-1])
    head = (f"cos(v_j, own signal) {measured['own_initial']:.2f} -> {final:.2f} (rise {rise:+.2f}), control "
            f"cos(v_j, another key's signal) ends {measured['control_final']:.2f}, margin {margin:+.2f} "
            f"(CI {margin_ci[0]:+.2f} to {margin_ci[1]:+.2f}, {own1.size} instances)")
    if rise > E7_RISE and final > E7_FINAL and margin_ci[0] > 0:
        return Rule("reproduced", f"{head}: rises by > {E7_RISE}, ends > {E7_FINAL} and beats the control", measured)
    if rise > E7_RISE:
        failed = [w for w, ok in ((f"does not end > {E7_FINAL}", final > E7_FINAL),
                                  ("does not beat the control", margin_ci[0] > 0)) if not ok]
        return Rule("partly-reproduced", f"{head}: rises by > {E7_RISE} but {' and '.join(failed)}", measured)
    return Rule("not-reproduced", f"{head}: does not rise by > {E7_RISE}", measured)


# -- negative controls ----------------------------------------------------------------------------------
def tunnel_evaluation(points, entropy, current, resamples=200, seed=0):
    """An E5 input computed from raw arrays with windtunnel.evaluate's definitions (numpy only): points
    (B, L, d) attention outputs, entropy (B, L), current (B, L) symbol at each position."""
    P, E, C = np.asarray(points, float), np.asarray(entropy, float), np.asarray(current)
    d = P.shape[-1]
    ratios, rho, _ = st.pc1_spearman(P.reshape(-1, d), E.reshape(-1))
    boot = st.bootstrap_pc1_spearman(P, E, resamples=resamples, seed=seed)  # oriented as `rho`'s PC1
    pc1, rhos = [], []
    flatP, flatE, flatC = P.reshape(-1, d), E.reshape(-1), C.reshape(-1)
    for r in np.unique(flatC):
        sel = flatC == r
        if sel.sum() < 10:
            continue
        rr, s, _ = st.pc1_spearman(flatP[sel], flatE[sel])
        pc1.append(rr[0])
        rhos.append(abs(s))
    return {"explained_variance": [float(x) for x in ratios[:3]], "spearman_pc1_entropy": rho,
            "explained_variance_pc1_ci95": boot["explained_variance_pc1_ci95"],
            "spearman_pc1_entropy_ci95": boot["spearman_pc1_entropy_ci95"],
            "within_symbol": {"pc1_explained_mean": float(np.mean(pc1)),
                              "abs_spearman_pc1_entropy_mean": float(np.mean(rhos)), "symbols": len(pc1)}}


def _paired_curves(seeds, steps, tau_sgd, tau_em, rng, start=2.0794415416798357):  # ln 8
    """Loss curves of two arms on the same seeds: each seed's floor (its data) shared by both arms,
    the EM-like arm approaching it faster."""
    t = np.arange(steps + 1)
    floor = 1.9 + 0.02 * rng.standard_normal((seeds, 1))
    noise = lambda: 0.001 * rng.standard_normal((seeds, steps + 1))  # noqa: E731
    return (floor + (start - floor) * np.exp(-t / tau_sgd)[None] + noise(),
            floor + (start - floor) * np.exp(-t / tau_em)[None] + noise())


def synthetic_measurements(seed=0):
    """Inputs on which every rule says `reproduced` (keyed by claim, each the keyword arguments of its
    rule): small, seeded, for tests and for the synthetic negative controls built from them."""
    rng = np.random.default_rng(seed)
    steps, n = 100, 8
    # EM-like's curve reaches SGD's final loss near step 46 of 100: speedup ~2.2 (identical arms ~1.09)
    sgd, em = _paired_curves(n, steps, 40.0, 15.0, rng)
    h_min, m = 1.8292, 8
    loss = 2.0 + 0.01 * rng.standard_normal(n)
    ent = 1.95 + 0.01 * rng.standard_normal(n)
    acc = 0.33 + 0.005 * rng.standard_normal(n)
    t = np.linspace(0, 1000, 11)
    w = np.linspace(50, 1000, 20)  # W1: drifts recorded every 50 steps; routing settles at step 250, values at 700
    B, L, d = 48, 20, 6
    H = rng.uniform(0.5, 2.0, (B, L))
    pts = H[..., None] * np.eye(d)[0] + 0.05 * rng.standard_normal((B, L, d))
    cur = rng.integers(0, 4, (B, L))
    tunnel = tunnel_evaluation(pts, H, cur, seed=seed)
    inst = 16
    own0, ctl0 = 0.05 * rng.standard_normal(inst), 0.05 * rng.standard_normal(inst)
    own1, ctl1 = 0.85 + 0.03 * rng.standard_normal(inst), 0.06 + 0.03 * rng.standard_normal(inst)
    return {
        "E1": {"sgd": sgd, "em": em, "steps": steps, "paper_speedup": 2.3},
        "E2": {"entropy_sgd": h_min + 0.02 + 0.005 * rng.standard_normal(n),
               "entropy_em": h_min + 0.01 + 0.005 * rng.standard_normal(n), "h_min": h_min, "m": m},
        "E3": {"sgd": {"loss": loss, "entropy": ent, "accuracy": acc},
               "em": {"loss": loss - 0.08 + 0.005 * rng.standard_normal(n), "entropy": ent - 0.06 + 0.005 * rng.standard_normal(n),
                      "accuracy": acc + 0.02 + 0.003 * rng.standard_normal(n)}},
        "E4": {"arms": {a: {"steps": t.astype(int).tolist(), "attention": np.exp(-t / 100).tolist(),
                            "values": np.exp(-t / tv).tolist()} for a, tv in (("sgd", 400.0), ("em_like", 300.0))}},
        "E5": {"arms": {"sgd": tunnel, "em_like": tunnel}},
        "E6": {"agreement": 0.995, "control_agreement": 0.005},
        "W1": {"optimizers": {name: {"steps": w.astype(int).tolist(),
                                     "routing": np.broadcast_to(np.exp(-w / 100), (2, 2, 4, w.size)).copy(),
                                     "values": np.broadcast_to(np.exp(-w / 400), (2, 2, 4, w.size)).copy()}
                              for name in ("sgd", "em_like", "adamw")}},
        "E7": {"spec": {"steps": [0, 300], "cos_value_signal": [float(own0.mean()), float(own1.mean())],
                        "cos_value_control": [float(ctl0.mean()), float(ctl1.mean())],
                        "cos_value_signal_initial_per_instance": own0.tolist(),
                        "cos_value_control_initial_per_instance": ctl0.tolist(),
                        "cos_value_signal_final_per_instance": own1.tolist(),
                        "cos_value_control_final_per_instance": ctl1.tolist()}},
    }


def random_tunnel_evaluation(seed=0, sequences=64, length=24, dim=8, symbols=4):
    """E5's control input: isotropic random attention outputs, independent of a random entropy."""
    rng = np.random.default_rng(seed)
    return tunnel_evaluation(rng.standard_normal((sequences, length, dim)), rng.uniform(0.5, 2.0, (sequences, length)),
                             rng.integers(0, symbols, (sequences, length)), seed=seed)


def _frozen(spec):
    """What training with a value learning rate of 0 would measure: nothing moves, every checkpoint
    repeats the first."""
    out = dict(spec)
    out["cos_value_signal_final_per_instance"] = list(spec["cos_value_signal_initial_per_instance"])
    if "cos_value_control_initial_per_instance" in spec:
        out["cos_value_control_final_per_instance"] = list(spec["cos_value_control_initial_per_instance"])
    for key in ("cos_value_signal", "cos_value_control"):
        if key in spec:
            out[key] = [spec[key][0]] * len(spec[key])
    return out


def _swapped(spec):
    """The control cosine as 'own' and the own cosine as the control."""
    out = dict(spec)
    for a, b in (("cos_value_signal", "cos_value_control"),
                 ("cos_value_signal_initial_per_instance", "cos_value_control_initial_per_instance"),
                 ("cos_value_signal_final_per_instance", "cos_value_control_final_per_instance")):
        if a in spec and b in spec:
            out[a], out[b] = spec[b], spec[a]
    return out


# control id -> (claim, how it is derived from the claim's measurements, the rule on it)
_CONTROLS = {
    # identical arms: the speedup is the baseline in every resample (excess exactly 0)
    "E1/sgd-vs-itself": ("E1", lambda k: e1(k["sgd"], k["sgd"], k["steps"], k["paper_speedup"], **_seed(k))),
    # a uniform predictor on every seed: entropy ln m, none of the distance to H_min closed
    "E2/uniform-predictor": ("E2", lambda k: e2(np.full(np.size(k["entropy_sgd"]), math.log(k["m"])),
                                                np.full(np.size(k["entropy_em"]), math.log(k["m"])), k["h_min"], k["m"])),
    # SGD in EM-like's place and back: every direction reversed
    "E3/swapped": ("E3", lambda k: e3(k["em"], k["sgd"])),
    # SGD against itself: no difference at all
    "E3/identical": ("E3", lambda k: e3(k["sgd"], k["sgd"])),
    # attention converging at the values' rate (its series replaced by the values' own)
    "E4/attention-at-values-rate": ("E4", lambda k: e4({a: {**d, "attention": list(d["values"])}
                                                        for a, d in k["arms"].items()}, **_tol(k))),
    # attention outputs independent of the entropy (seeded random points; a summary cannot be decoupled)
    "E5/independent-features": ("E5", lambda k: e5({a: random_tunnel_evaluation(seed=i)
                                                    for i, a in enumerate(k["arms"])})),
    # the opposite prediction, sign(+A), judged as if it were the claim's
    "E6/plus-A": ("E6", lambda k: e6(k["control_agreement"], k["agreement"])),
    # values that do not train (a learning rate of 0): every checkpoint is the first
    "E7/frozen-values": ("E7", lambda k: e7(_frozen(k["spec"]))),
    # another key's error signal judged as the value's own
    "E7/control-as-own": ("E7", lambda k: e7(_swapped(k["spec"]))),
    # routing drifting at the values' rate (its drift replaced by the values' own): never strictly first
    "W1/attention-at-values-rate": ("W1", lambda k: w1({n: {**d, "routing": d["values"]}
                                                        for n, d in k["optimizers"].items()}, **_tol(k))),
    # routing that never stops drifting (each head's drift held at its largest value)
    "W1/routing-never-settles": ("W1", lambda k: w1({n: {**d, "routing": _held(d["routing"])}
                                                     for n, d in k["optimizers"].items()}, **_tol(k))),
}


def _held(drift):
    """Every record's drift replaced by the series' largest: a drift that never falls."""
    x = np.asarray(drift, float)
    return np.broadcast_to(x.max(-1, keepdims=True), x.shape).copy()


def _seed(k):
    return {"seed": k["seed"]} if "seed" in k else {}


def _tol(k):
    return {"tol": k["tol"]} if "tol" in k else {}


def negative_controls(measurements):
    """{control id: Rule} for every control whose claim is in `measurements`; each must be
    `not-reproduced`. measurements: {claim: keyword arguments of its rule}, e.g.
    {"E1": {"sgd", "em", "steps", "paper_speedup"}, "E2": {"entropy_sgd", "entropy_em", "h_min", "m"},
     "E3": {"sgd", "em"}, "E4": {"arms"}, "E5": {"arms"}, "E6": {"agreement", "control_agreement"},
     "E7": {"spec"}, "W1": {"optimizers"}}. Derived from the run's own numbers: E1 its SGD curves against themselves; E2 a
    uniform predictor with its seed count, H_min and m; E3 its arms swapped, and SGD against itself; E4
    each arm's attention series replaced by its W_V series; E6 the +A agreement judged as the claim's;
    E7 its initial cosines held to the end (frozen values), and its control judged as the own cosine.
    W1 each head's routing drift replaced by its values' drift, and held at its largest value.
    E5 cannot be decoupled from a summary: seeded random features stand in, one evaluation per arm."""
    return {cid: fn(measurements[claim]) for cid, (claim, fn) in _CONTROLS.items() if claim in measurements}


def _synthetic(cid):
    claim, fn = _CONTROLS[cid]
    return lambda: fn(synthetic_measurements()[claim])


# control id -> a callable returning the rule's Rule on the control derived from synthetic_measurements()
# (on which every rule says reproduced); the claim is the id's part before "/".
NEGATIVE_CONTROLS = {cid: _synthetic(cid) for cid in _CONTROLS}


# -- positive controls ----------------------------------------------------------------------------------
# Inputs where the phenomenon holds by construction (see the module docstring); the constants size the
# constructions, not the rules: each rule keeps its own thresholds.
E1_CONTROL_MARGIN = 0.05  # E1's control ends this fraction of SGD's mean decrease below SGD's worst seed
E3_CONTROL_MARGIN = 2.0  # E3's control is better by this multiple of the margin a paired test needs (t = 2 t_crit)
E5_CONTROL_NOISE = 0.1  # E5's control: isotropic noise, per direction, as a fraction of the entropy's spread


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


def tunnel_entropies(seed=0, sequences=64, length=24, symbols=5, prior=1.0, sticky=4.0):
    """Seeded wind-tunnel sequences (windtunnel.sample's chain: a transition matrix per sequence ~ Dirichlet(prior
    + sticky e_i)) and the exact Bayes posterior-predictive entropy (bits) at positions 0..length-2
    (windtunnel.bayes_predictive: Dirichlet counts of the current row), in numpy. Returns (entropy (S, L-1),
    sequences (S, L)); the current symbol at entropy position t is sequences[:, t]."""
    rng = np.random.default_rng(seed)
    K, S = symbols, sequences
    conc = np.full((K, K), prior) + sticky * np.eye(K)
    P = rng.gamma(np.broadcast_to(conc, (S, K, K)))
    P /= P.sum(-1, keepdims=True)
    y = np.empty((S, length), dtype=int)
    y[:, 0] = rng.integers(0, K, S)
    rows = np.arange(S)
    for t in range(1, length):
        cum = P[rows, y[:, t - 1]].cumsum(-1)
        y[:, t] = np.minimum((rng.random(S)[:, None] > cum).sum(-1), K - 1)
    counts = np.zeros((S, K, K))
    H = np.empty((S, length - 1))
    for t in range(length - 1):
        if t > 0:
            counts[rows, y[:, t - 1], y[:, t]] += 1
        row = conc[y[:, t]] + counts[rows, y[:, t]]
        p = row / row.sum(-1, keepdims=True)
        H[:, t] = -(p * np.log2(p)).sum(-1)
    return H, y


def entropy_tunnel_evaluation(seed=0, dim=8, noise=E5_CONTROL_NOISE):
    """E5's positive control input: attention outputs whose leading direction is the Bayes entropy of seeded
    wind-tunnel sequences (tunnel_entropies), plus isotropic noise of `noise` x the entropy's spread in
    every direction, evaluated as windtunnel.evaluate does (tunnel_evaluation)."""
    H, y = tunnel_entropies(seed)
    rng = np.random.default_rng(seed + 1)
    points = H[..., None] * np.eye(dim)[0] + noise * H.std() * rng.standard_normal((*H.shape, dim))
    return tunnel_evaluation(points, H, y[:, :-1], seed=seed)


def _aligned(spec):
    """E7's positive control: every value ends on its own routed error signal (final own cosine 1); the control
    then reads cos(m_j, m_pi(j)) (dynamics.specialisation's cos_signal_control_final_per_instance; the run's
    own control cosine where that is not measured); the initial cosines are the run's."""
    out = dict(spec)
    n = len(spec["cos_value_signal_final_per_instance"])
    control = list(spec.get("cos_signal_control_final_per_instance", spec["cos_value_control_final_per_instance"]))
    out["cos_value_signal_final_per_instance"] = [1.0] * n
    out["cos_value_control_final_per_instance"] = control
    for key, last in (("cos_value_signal", 1.0), ("cos_value_control", float(np.mean(control)))):
        if key in spec:
            out[key] = [*list(spec[key])[:-1], last]
    return out


# control id -> (claim, how it is built, the rule on it); "derived": from the claim's measurements,
# "synthetic": independent of them, "run": from a constructed run (positive_controls' `runs`)
_POSITIVE = {
    "E1/paper-speed": ("E1", "derived", lambda k: e1(k["sgd"], paper_speed_curves(k["sgd"], k["steps"], k["paper_speedup"])[0],
                                                       k["steps"], k["paper_speedup"], **_seed(k))),
    "E2/at-h-min": ("E2", "derived", lambda k: e2(_centred(k["entropy_sgd"], k["h_min"], k.get("groups")),
                                                  _centred(k["entropy_em"], k["h_min"], k.get("groups")), k["h_min"],
                                                  k["m"])),
    "E3/clear-margin": ("E3", "derived", lambda k: e3(k["sgd"], _clear_margin(k["sgd"], k["em"]))),
    "E4/frozen-routing": ("E4", "run", lambda k: e4(**k)),
    "E5/entropy-features": ("E5", "synthetic", lambda k: e5({a: entropy_tunnel_evaluation(seed=i)
                                                             for i, a in enumerate(k["arms"])})),
    "E6/natural-step": ("E6", "run", lambda k: e6(**k)),
    "E7/aligned-values": ("E7", "derived", lambda k: e7(_aligned(k["spec"]))),
    "W1/frozen-routing": ("W1", "run", lambda k: w1(**k)),
}

# control id -> what it is (results.json, the report's controls table)
POSITIVE_CONTROLS = {
    "E1/paper-speed": "EM-like = the run's own SGD curves on a faster clock (equal at step 0, each ending below SGD's "
                      "worst final loss), the clock set so that the authors' speedup is the paper's (derived)",
    "E2/at-h-min": "each arm's per-seed entropies moved so that their mean is H_min in every draw of mu, the spread "
                   "of the seeds within a draw kept (derived)",
    "E3/clear-margin": "EM-like = SGD plus the run's paired differences re-centred on the claimed side of loss, "
                       "entropy and accuracy, at twice the margin a paired t-test at p = 0.05 needs (derived)",
    "E4/frozen-routing": "a sticky-chain run whose W_Q, W_K stop after a tenth of the steps while W_V, W_O keep "
                         "learning, its frame-precision curves (run)",
    "E5/entropy-features": "outputs whose leading direction is the Bayes entropy of seeded wind-tunnel sequences, "
                           "plus 10% isotropic noise (synthetic)",
    "E6/natural-step": "the same simulation with the score step -h A / alpha, under which delta alpha = -h A to "
                       "first order (run)",
    "E7/aligned-values": "every value ending on its own routed error signal, the control reading another key's "
                         "signal; initial cosines the run's (derived)",
    "W1/frozen-routing": "the watched model with one layer whose Q/K in-projections, embeddings and pre-attention "
                         "LayerNorm stop after the first record while the values keep learning, its drifts (run)",
}


def positive_controls(measurements, runs=None):
    """{control id: Rule} for every positive control that can be built; each must be `reproduced`.
    measurements: {claim: keyword arguments of its rule} as for negative_controls; the derived controls (E1,
    E2, E3, E7) are built from them and E5's synthetic one when "E5" is present. runs: {claim: keyword
    arguments of its rule measured on a constructed run where the phenomenon holds} for E4 (e4_inputs of a
    sticky-chain run with W_Q, W_K frozen), E6 (dynamics' scores_natural agreement and its control) and W1
    (deep_watch.rule_inputs of the watched model with its routing frozen)."""
    runs = runs or {}
    out = {}
    for cid, (claim, source, fn) in _POSITIVE.items():
        given = runs if source == "run" else measurements
        if claim in given:
            out[cid] = fn(given[claim])
    return out


def evaluate_all(measurements):
    """{claim: Rule} for every claim present in `measurements` (keyed as in negative_controls)."""
    rules = {"E1": e1, "E2": e2, "E3": e3, "E4": e4, "E5": e5, "E6": e6, "E7": e7, "W1": w1}
    return {claim: rules[claim](**kw) for claim, kw in measurements.items() if claim in rules}


__all__ = ["Rule", "VERDICTS", "e1", "e2", "e3", "e4", "e4_inputs", "e5", "e6", "e7", "w1", "w1_head", "settle_index",
           "stable_step",
           "negative_controls", "NEGATIVE_CONTROLS", "synthetic_measurements", "tunnel_evaluation",
           "random_tunnel_evaluation", "evaluate_all", "positive_controls", "POSITIVE_CONTROLS", "paper_speed_curves",
           "tunnel_entropies", "entropy_tunnel_evaluation"]


# -- G1 (ours): the EM-like benefit follows the proved routing structure --------------------------------------------
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


def g1(curves, competition, steps, seed=0, resamples=G1_RESAMPLES, label_sets=None):
    """G1 (ours): the EM-like schedule's gain follows the proved structure: mechanisms whose keys compete gain more
    than mechanisms whose keys do not.

    curves: {mechanism: {"sgd", "em_like": (seeds, steps + 1) loss curves}}, row i of every arm and
    every mechanism from the same seed (same data; same initial weights where the mechanisms share them).
    competition: {mechanism: bool}, True where the mechanism's competition cell is proved (a mechanism without a
    label is left out). label_sets: labellings to judge instead of `competition`, one per bootstrap replicate in
    turn (the shuffled-labels control passes every relabelling with the same group sizes; D is then their mean).

    Per mechanism: speedup of em_like over sgd and of sgd over itself (E1's definition), both on the same
    resampled seeds; the excess = speedup - identical-arms speedup, with its expanded percentile interval
    (st.expanded_percentiles, n seeds); a mechanism *gains* when the excess interval's lower end is > 0. A mechanism
    whose SGD arm ends non-finite is left out (named); a diverged EM-like run never reaches the threshold.
    The test: D = mean excess (competing) - mean excess (the others) on the same resamples, its expanded percentile
    interval [D_lo, D_hi]; the exact permutation p of D among all relabelings with the same group sizes; and whether
    the intervals separate (every competing mechanism's excess interval above every other's).

    Verdict: not-reproduced if a group is empty or D_lo <= G1_MARGIN (the competing mechanisms do not gain more by
    a margin the seeds resolve); else reproduced if every competing mechanism gains and the permutation p <=
    G1_PERM_P (the proved partition separates the gains best of all relabelings); else partly-reproduced (they gain
    more on average, but not each of them, or another partition separates the gains as well)."""
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
    idx = np.random.default_rng(seed).integers(0, n, (resamples, n))
    point = np.arange(n)[None, :]
    measured = {"mechanisms": {}, "n_seeds": n, "steps": int(steps), "resamples": int(resamples), "margin": G1_MARGIN,
                "perm_p_at_most": G1_PERM_P, "left_out": {}}
    excess, excess_point = {}, {}
    for m in names:
        c = arrays[m]
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
    X = np.stack([excess[m] for m in kept])  # (M, R)
    D = np.empty(resamples)
    for r in range(resamples):
        on = np.array([sets[r % len(sets)][m] for m in kept], bool)
        D[r] = X[on, r].mean() - X[~on, r].mean()
    d_point = float(np.mean([_g1_groups(excess_point, s) for s in sets]))
    dlo, dhi = st.expanded_percentiles(D, n, G1_LEVEL)
    measured.update(difference=d_point, difference_ci95=[dlo, dhi])
    gains = {m: measured["mechanisms"][m]["gains"] for m in kept}
    if label_sets is None:
        relabel = [_g1_groups(excess_point, s) for s in g1_relabelings(sets[0])]
        p = float(np.mean([d >= d_point - 1e-12 for d in relabel]))
        separated = min(measured["mechanisms"][m]["excess_ci95"][0] for m in comp) > max(
            measured["mechanisms"][m]["excess_ci95"][1] for m in other)
        measured.update(permutation_p=p, relabelings=len(relabel), separated=bool(separated))
    else:
        p, separated = float("nan"), False
        measured.update(permutation_p=None, relabelings=len(sets), separated=None)

    def fmt(m):
        x = measured["mechanisms"][m]
        return f"{m} {x['speedup']:.2f}x (excess {x['excess']:+.2f}, CI {x['excess_ci95'][0]:+.2f} to {x['excess_ci95'][1]:+.2f})"

    head = (f"competing [{'; '.join(fmt(m) for m in comp)}] vs not [{'; '.join(fmt(m) for m in other)}]: "
            if label_sets is None else f"labels: {len(sets)} relabelings averaged: ")
    head += (f"difference of mean excess speedups {d_point:+.2f} (95% expanded CI {dlo:+.2f} to {dhi:+.2f}, {n} seeds)"
             + (f", permutation p {p:.3f} over {measured['relabelings']} relabelings" if label_sets is None else "")
             + (f"; left out: {', '.join(measured['left_out'])}" if measured["left_out"] else ""))
    if not dlo > G1_MARGIN:
        return Rule("not-reproduced", f"{head}: the interval reaches {G1_MARGIN} (G1_MARGIN), the competing mechanisms "
                                      f"do not gain more than the others", measured)
    if all(gains[m] for m in comp) and p <= G1_PERM_P:
        return Rule("reproduced", f"{head}: the competing mechanisms gain more, every one of them gains, and no "
                                  f"other partition separates the gains as well", measured)
    best = p <= 1.0 / measured["relabelings"] + 1e-12  # the proved partition separates best, yet p > G1_PERM_P
    perm = (f"with {measured['relabelings']} relabelings the permutation test cannot reach p <= {G1_PERM_P} "
            f"(p {p:.3f} is its least)" if best else
            f"another partition separates the gains as well or better (p {p:.3f} > {G1_PERM_P})")
    why = [w for w, bad in ((f"{', '.join(m for m in comp if not gains[m])} do(es) not gain beyond identical arms",
                             not all(gains[m] for m in comp)), (perm, p > G1_PERM_P)) if bad]
    return Rule("partly-reproduced", f"{head}: the competing mechanisms gain more on average, but {' and '.join(why)}",
                measured)


def g1_synthetic(seed=0, seeds=5, steps=100, competing=("softmax", "linear", "gate", "moe"),
                 others=("sigmoid", "ssd", "lstm")):
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


def g1_controls(measurement):
    """{control id: (kind, Rule)} on a G1 measurement (g1's keyword arguments): the negative controls (identical
    arms for every mechanism; the labels shuffled), which must be not-reproduced, and the positive control (the
    constructed measurement g1_synthetic, with as many seeds as the run), which must be reproduced."""
    n = len(next(iter(measurement["curves"].values()))["sgd"])
    extra = {k: measurement[k] for k in ("seed", "resamples") if k in measurement}
    return {"G1/identical-arms": ("negative", g1(**g1_identical_arms(measurement))),
            "G1/labels-shuffled": ("negative", g1(**g1_shuffled_labels(measurement))),
            "G1/structured-gain": ("positive", g1(**g1_synthetic(seeds=max(n, 2)), **extra))}


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
                          "faster, the others' EM-like arm their SGD curves (synthetic)"}

__all__ += ["g1", "g1_synthetic", "g1_controls", "g1_relabelings", "G1_CONTROLS", "G1_EXPECTED", "G1_CONSTRUCTIONS"]


# -- G2 (ours): the Bayes gap follows the proved structure ------------------------------------------------------------
# Per mechanism, the KL (bits) from the exact Bayes predictive to the trained model's on fresh wind-tunnel sequences
# (numeric.experiments.mechanism_tunnel), EM-like arm, one value per seed (the same seeds, data and evaluation
# sequences for every mechanism). D = mean over the others of log2 KL - mean over the competing ones of log2 KL: how
# many times closer to Bayes (in bits of ratio) the competing mechanisms end. Reproduced when D's expanded percentile
# interval over resampled seeds lies above log2(G2_RATIO) and the exact permutation p of D among all relabelings with
# the same group sizes is <= G2_PERM_P; partly when the interval lies above log2(G2_RATIO) only; else not reproduced.
G2_RESAMPLES = 2000
G2_LEVEL = 0.95
G2_RATIO = 1.25  # the competing mechanisms at least 25% closer to the Bayes predictive (KL ratio)
G2_PERM_P = 0.05
G2_ARM = "em_like"


def g2(kl, competition, seed=0, resamples=G2_RESAMPLES):
    """G2 (ours): the mechanisms whose keys compete end closer to the Bayes posterior than those whose keys do not.

    kl: {mechanism: (seeds,) KL to the Bayes predictive in bits, EM-like arm}, entry i of every mechanism from the
    same seed. competition: {mechanism: bool} (a mechanism without a label is left out; a non-finite or
    non-positive KL leaves the mechanism out, named)."""
    measured = {"mechanisms": {}, "left_out": {}, "ratio_at_least": G2_RATIO, "perm_p_at_most": G2_PERM_P,
                "arm": G2_ARM, "resamples": int(resamples)}
    logs = {}
    for m, v in kl.items():
        if m not in competition:
            continue
        v = np.asarray(v, float)
        if v.ndim != 1 or v.size < 2:
            raise ValueError(f"g2: mechanism {m}: a (seeds,) array of at least 2 seeds is needed, got shape {v.shape}")
        if not (np.isfinite(v).all() and (v > 0).all()):
            measured["left_out"][m] = "a non-finite or non-positive KL (a diverged run)"
            continue
        logs[m] = np.log2(v)
        mean, half = st.mean_ci(v)
        measured["mechanisms"][m] = {"competition": bool(competition[m]), "kl_bits": float(mean),
                                     "kl_bits_ci95": [float(mean - half), float(mean + half)]}
    sizes = {v.size for v in logs.values()}
    if len(sizes) > 1:
        raise ValueError("g2: every mechanism must have the same seeds")
    comp = [m for m in logs if competition[m]]
    other = [m for m in logs if not competition[m]]
    measured.update(competing=comp, others=other)
    if not comp or not other:
        return Rule("not-reproduced", "no comparison: every mechanism left in the test carries the same label", measured)
    n = sizes.pop()
    X = np.stack([logs[m] for m in logs])  # (M, n)
    on = np.array([competition[m] for m in logs], bool)
    idx = np.random.default_rng(seed).integers(0, n, (resamples, n))
    R = X[:, idx].mean(-1)  # (M, resamples): each mechanism's mean log KL on the same resampled seeds
    D = R[~on].mean(0) - R[on].mean(0)
    point = X.mean(1)
    d = float(point[~on].mean() - point[on].mean())
    lo, hi = st.expanded_percentiles(D, n, G2_LEVEL)
    relabel = [point[~np.array(s, bool)].mean() - point[np.array(s, bool)].mean()
               for s in ([lab[m] for m in logs] for lab in g1_relabelings({m: competition[m] for m in logs}))]
    p = float(np.mean([r >= d - 1e-12 for r in relabel]))
    measured.update(log2_ratio=d, ratio=float(2 ** d), log2_ratio_ci95=[lo, hi], ratio_ci95=[float(2 ** lo), float(2 ** hi)],
                    n_seeds=n, permutation_p=p, relabelings=len(relabel))
    fmt = lambda ms: "; ".join(f"{m} {measured['mechanisms'][m]['kl_bits']:.4f}" for m in ms)  # noqa: E731
    head = (f"KL to Bayes (bits, {G2_ARM}): competing [{fmt(comp)}] vs not [{fmt(other)}]: the others' KL is "
            f"{2 ** d:.2f}x the competing ones' (geometric means; 95% expanded CI {2 ** lo:.2f}x to {2 ** hi:.2f}x, "
            f"{n} seeds), permutation p {p:.3f} over {len(relabel)} relabelings"
            + (f"; left out: {', '.join(measured['left_out'])}" if measured["left_out"] else ""))
    if not lo > math.log2(G2_RATIO):
        return Rule("not-reproduced", f"{head}: the interval reaches {G2_RATIO}x (G2_RATIO), the competing mechanisms "
                                      f"do not end closer to Bayes by that margin", measured)
    if p <= G2_PERM_P:
        return Rule("reproduced", f"{head}: the competing mechanisms end closer to Bayes, and no other partition "
                                  f"separates them as well", measured)
    return Rule("partly-reproduced", f"{head}: closer on average, but another partition separates the KLs as well "
                                     f"or better (p {p:.3f} > {G2_PERM_P})", measured)


def g2_synthetic(seed=0, seeds=4, competing=("softmax", "linear", "gate", "moe"), others=("sigmoid", "ssd", "lstm"),
                 other_kl=0.2):
    """A constructed measurement: the competing mechanisms' KL about 0.05 bits, the others' about `other_kl` (0.2:
    4x, the positive control; 0.05: no structure, a negative one), each with 10% seed-to-seed spread. Returns the
    keyword arguments of g2."""
    rng = np.random.default_rng(seed)
    kl = {m: (0.05 if m in competing else other_kl) * np.exp(0.1 * rng.standard_normal(seeds)) for m in competing + others}
    return {"kl": kl, "competition": {m: m in competing for m in kl}}


def g2_controls(measurement):
    """{control id: (kind, Rule)} on a G2 measurement: the negative controls (every mechanism given the seed-wise
    mean KL over all mechanisms, so no group differs; constructed KLs with no structure), which must be
    not-reproduced, and the positive control (constructed KLs 4x apart), which must be reproduced; the constructed
    ones with as many seeds as the run."""
    kl, comp = measurement["kl"], measurement["competition"]
    n = max(len(next(iter(kl.values()))), 2)
    pooled = np.mean([np.asarray(v, float) for v in kl.values()], 0)
    extra = {k: measurement[k] for k in ("seed", "resamples") if k in measurement}
    return {"G2/equal-gaps": ("negative", g2({m: pooled.copy() for m in kl}, comp, **extra)),
            "G2/no-structure": ("negative", g2(**g2_synthetic(seeds=n, other_kl=0.05), **extra)),
            "G2/structured-gap": ("positive", g2(**g2_synthetic(seeds=n), **extra))}


G2_CONSTRUCTIONS = {
    "G2/equal-gaps": "every mechanism's KL replaced by the seed-wise mean over all mechanisms (no group differs; "
                     "derived)",
    "G2/no-structure": "constructed KLs, as many seeds as the run: every mechanism about 0.05 bits, 10% spread "
                       "(synthetic)",
    "G2/structured-gap": "constructed KLs, as many seeds as the run: the competing mechanisms 0.05 bits, the others "
                         "0.2 bits, 10% spread (synthetic)"}
G2_EXPECTED = {"G2/equal-gaps": "not-reproduced", "G2/no-structure": "not-reproduced",
               "G2/structured-gap": "reproduced"}

__all__ += ["g2", "g2_synthetic", "g2_controls", "G2_CONSTRUCTIONS", "G2_EXPECTED"]
