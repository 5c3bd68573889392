"""W1: E4 in a deep model, from the watcher's drifts: the rule, its thresholds, its negative and positive controls."""
from __future__ import annotations

import math

import numpy as np

from numeric.experiments.rules.base import Rule, _f, _tol

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


def _held(drift):
    """Every record's drift replaced by the series' largest: a drift that never falls."""
    x = np.asarray(drift, float)
    return np.broadcast_to(x.max(-1, keepdims=True), x.shape).copy()


# negative controls: control id (its claim before the /) -> the rule on the control derived from the claim's measurements
NEGATIVE = {
    # routing drifting at the values' rate (its drift replaced by the values' own): never strictly first
    "W1/attention-at-values-rate": (lambda k: w1({n: {**d, "routing": d["values"]}
                                                        for n, d in k["optimizers"].items()}, **_tol(k))),
    # routing that never stops drifting (each head's drift held at its largest value)
    "W1/routing-never-settles": (lambda k: w1({n: {**d, "routing": _held(d["routing"])}
                                                     for n, d in k["optimizers"].items()}, **_tol(k))),
}

# positive controls: control id -> (how it is built: derived, synthetic or run, the rule on it)
POSITIVE = {
    "W1/frozen-routing": ("run", lambda k: w1(**k)),
}
POSITIVE_DESCRIPTIONS = {
    "W1/frozen-routing": "the watched model with one layer whose Q/K in-projections, embeddings and pre-attention "
                         "LayerNorm stop after the first record while the values keep learning, its drifts (run)",
}

__all__ = ["W1_TOL", "W1_EARLY", "W1_HOLD", "W1_MOST", "W1_SOME", "settle_index", "w1_head", "w1"]
