"""G3 (ours, the paper's conjecture where it can fail): on bijection recall the mechanisms that route by content end
closer to Bayes than any predictor of counts can, and those that do not, do not.

One module holds the claim entirely: its rule, thresholds, controls, how it is measured from the experiments
stage's numbers (results.json experiments.conjecture, written by ExperimentStage.conjecture) and its report
section; numeric.experiments.registry.discover registers CLAIM.

The measure per mechanism: the KL from the exact Bayes predictive to the model's at the key positions (bits; held-out
sequences), EM-like arm, per seed. The partition: the mechanisms table's content_routing cell (proved: routes by
content; disproved: does not), read at run time. The yardstick: the counts-only floor's KL on the same sequences
(what a state holding the counts of every token achieves at best).
"""
from __future__ import annotations

import numpy as np

from numeric.experiments import stats as st
from numeric.experiments.rules.base import EmpiricalClaim, Rule

G3_ARM = "em_like"
G3_BEAT = 0.8  # beats the counts floor: its seed-mean KL at the queries below 0.8 x the floor's (a margin, not a tie)
G3_FAIL = 1.0  # fails: its seed-mean KL at the queries at or above the floor itself


def g3(kl, labels, floor, no_context):
    """kl: {mechanism: (seeds,) KL at the key positions, bits}; labels: {mechanism: True where it routes by content};
    floor: the counts-only floor's KL there; no_context: the no-context floor's (reported beside).

    Verdict: not-reproduced if a group is empty, no content-routing mechanism beats the floor, or a mechanism that
    does not route by content beats it; reproduced if every content-routing mechanism beats it (G3_BEAT) and every
    other fails (G3_FAIL); partly-reproduced otherwise (some content-routing mechanisms beat it, none of the others
    does)."""
    measured = {"floor_counts": float(floor), "floor_no_context": float(no_context), "beat_below": G3_BEAT * floor,
                "fail_at_least": G3_FAIL * floor, "arm": G3_ARM, "mechanisms": {}}
    for m, v in kl.items():
        if m not in labels:
            continue
        v = np.asarray(v, float)
        mean, half = st.mean_ci(v) if v.size > 1 else (float(v.mean()), float("nan"))
        measured["mechanisms"][m] = {"routes_by_content": bool(labels[m]), "kl_bits_queries": float(mean),
                                     "ci95": [float(mean - half), float(mean + half)],
                                     "beats_floor": bool(mean < G3_BEAT * floor), "fails": bool(mean >= G3_FAIL * floor)}
    ms = measured["mechanisms"]
    routes = sorted(m for m in ms if ms[m]["routes_by_content"])
    others = sorted(m for m in ms if not ms[m]["routes_by_content"])
    fmt = lambda names: "; ".join(f"{m} {ms[m]['kl_bits_queries']:.3f}" for m in names)  # noqa: E731
    head = (f"KL at the queries (bits, {G3_ARM}): content-routing [{fmt(routes)}] vs not [{fmt(others)}]; counts floor "
            f"{floor:.3f}, no-context floor {no_context:.3f}")
    measured.update(content_routing=routes, others=others)
    if not routes or not others:
        return Rule("not-reproduced", f"{head}: no comparison, one group is empty", measured)
    beat = [m for m in routes if ms[m]["beats_floor"]]
    wrong = [m for m in others if not ms[m]["fails"]]
    if not beat:
        return Rule("not-reproduced", f"{head}: no content-routing mechanism beats the counts floor "
                                      f"(below {G3_BEAT} x its KL)", measured)
    if wrong:
        return Rule("not-reproduced", f"{head}: {', '.join(wrong)}, which do(es) not route by content, end(s) below "
                                      f"the counts floor", measured)
    if len(beat) == len(routes):
        return Rule("reproduced", f"{head}: every content-routing mechanism beats the counts floor and no other does",
                    measured)
    return Rule("partly-reproduced", f"{head}: {', '.join(sorted(set(routes) - set(beat)))} route(s) by content but "
                                     f"do(es) not beat the counts floor; no other does", measured)


def measure(experiments):
    """G3's inputs from results.json experiments.conjecture.bijection (None where it did not run)."""
    bj = (experiments.get("conjecture") or {}).get("bijection")
    if not bj or not bj.get("floors"):
        return None
    kl = {m: x["arms"][G3_ARM]["kl_bits_queries_per_seed"] for m, x in bj["mechanisms"].items()
          if not x.get("failed") and "kl_bits_queries_per_seed" in x["arms"][G3_ARM]}
    return {"kl": kl, "labels": bj["content_routing"], "floor": bj["floors"]["counts"]["kl_bits_queries"],
            "no_context": bj["floors"]["no_context"]["kl_bits_queries"]}


def controls(m):
    """Negative: no split (every mechanism at the no-context floor), the split reversed (each group given the other's
    numbers: the routing mechanisms at the no-context floor, the others well below the counts floor); positive: the
    split as predicted, constructed."""
    seeds = len(next(iter(m["kl"].values()))) if m["kl"] else 2
    at = lambda x: [float(x)] * seeds  # noqa: E731
    low, high = 0.1 * m["floor"], m["no_context"]
    labels = m["labels"]
    split = {k: at(low if labels.get(k) else high) for k in m["kl"]}
    reverse = {k: at(high if labels.get(k) else low) for k in m["kl"]}
    flat = {k: at(high) for k in m["kl"]}
    return {"G3/no-split": ("negative", g3(flat, labels, m["floor"], m["no_context"])),
            "G3/split-reversed": ("negative", g3(reverse, labels, m["floor"], m["no_context"])),
            "G3/split": ("positive", g3(split, labels, m["floor"], m["no_context"]))}


CLAIM = EmpiricalClaim(
    "G3", "content-routing-splits",
    "the paper's conjecture where it predicts a split: on bijection recall, the mechanisms that route by content "
    "(proved content_routing cell) end below the counts-only floor and those that do not stay at or above it",
    "ours: numeric.experiments.bijection (V = 16, 24 pairs with replacement), every mechanism, the partition from "
    "the mechanisms table", {},
    ("KL to the exact Bayes predictive at the key positions per mechanism and seed, EM-like arm, held-out sequences",
     "the counts-only and no-context floors on the same sequences",
     "each mechanism's content_routing cell from the mechanisms table"),
    g3, {"G3_BEAT": G3_BEAT, "G3_FAIL": G3_FAIL}, measure=measure, controls=controls,
    constructions={"G3/no-split": "every mechanism's KL set to the no-context floor (derived)",
                   "G3/split-reversed": "content-routing mechanisms at the no-context floor, the others at 0.1 x the "
                                        "counts floor (derived)",
                   "G3/split": "content-routing mechanisms at 0.1 x the counts floor, the others at the no-context "
                               "floor (derived)"},
    section="Every mechanism trained on bijection recall (Adam, both schedules, the same sequences and seeds); per "
            "mechanism the EM-like arm's KL to Bayes at the key positions, against the floors of predictors that see "
            "less (results.json experiments.conjecture.bijection holds both arms, the floors and the accuracy where "
            "the answer was shown).",
    headline=lambda m: (f"content-routing {', '.join(m['content_routing'])} vs counts floor {m['floor_counts']:.3f} "
                        "bits"))
