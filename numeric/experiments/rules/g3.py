"""G3 (ours, the paper's conjecture where it can fail): on tasks where a fixed state cannot hold what Bayes needs
(bijection recall; the enlarged wind tunnel), the mechanisms that route by content end closer to Bayes than any
predictor that sees less, and those that do not, do not.

One module holds the claim entirely: its rule, thresholds, controls, how it is measured from the experiments
stage's numbers (results.json experiments.conjecture.<task>, written by ExperimentStage.conjecture) and its report
section; numeric.experiments.registry.discover registers CLAIM.

The measure per model and task: the KL from the exact Bayes predictive to the model's at the task's query positions
(bits; held-out sequences), per seed, at the model's schedule and rate chosen on validation sequences (`schedule`:
each arm's rate is chosen there, then the arm whose chosen rate scored lower; the conjecture is about what
cross-entropy training reaches, so no model is judged at the schedule that suits it less). The partition: the
mechanisms table's content_routing cell (proved: routes by content; disproved: does not), read at run time; the
competition cell's partition is judged the same way beside it. The yardstick per task: the best (lowest KL) of the
task's floors, predictors that see less than Bayes (bijection: the counts of every token; the wind tunnel: the
current and previous token, or the token frequencies so far). The real LSTM (numeric.experiments.lstm) has no cell
in the table: it is judged beside the partition as the paper's named negative case.
"""
from __future__ import annotations

import numpy as np

from numeric.experiments import stats as st
from numeric.experiments.rules.base import EmpiricalClaim, Rule

G3_ARM = "em_like"  # the schedule judged when no validation KL is recorded (a single rate, no sweep)
G3_BEAT = 0.8  # beats the yardstick: its seed-mean KL at the queries below 0.8 x the best floor's (a margin, not a tie)
G3_FAIL = 1.0  # fails: its seed-mean KL at the queries at or above the best floor itself
VERDICTS = ("not-reproduced", "partly-reproduced", "reproduced")
SCHEDULES = {"sgd": "SGD", "em_like": "EM-like"}


def _entry(v, floor):
    v = np.asarray(v, float)
    mean, half = st.mean_ci(v) if v.size > 1 else (float(v.mean()), float("nan"))
    return {"kl_bits_queries": float(mean), "ci95": [float(mean - half), float(mean + half)],
            "beats_floor": bool(mean < G3_BEAT * floor), "fails": bool(mean >= G3_FAIL * floor)}


def g3_task(kl, labels, floor, no_context, baselines=None, group="content-routing", floor_name="best"):
    """One task. kl: {mechanism: (seeds,) KL at the query positions, bits}; labels: {mechanism: True where it routes
    by content} (or competes: `group` names the partition); floor: the best floor's KL there (the yardstick, named
    floor_name); no_context: the no-context floor's (reported beside); baselines: {model: (seeds,) KL}, the paper's
    named negative case (the real LSTM), outside the partition.

    Verdict: not-reproduced if a group is empty, no mechanism of the group beats the floor, or a mechanism outside
    it beats it; reproduced if every mechanism of the group beats it (G3_BEAT) and every other fails (G3_FAIL);
    partly-reproduced otherwise (some of the group beat it, none of the others does). A baseline that beats the
    yardstick makes a reproduced verdict partly-reproduced (the paper names it as failing)."""
    measured = {"floor_best": float(floor), "floor_name": floor_name, "floor_no_context": float(no_context),
                "beat_below": G3_BEAT * floor, "fail_at_least": G3_FAIL * floor, "arm": "chosen on validation",
                "group": group,
                "mechanisms": {}, "baselines": {}}
    for m, v in kl.items():
        if m in labels:
            measured["mechanisms"][m] = {"in_group": bool(labels[m]), **_entry(v, floor)}
    measured["left_out"] = sorted(m for m in kl if m not in labels)  # its cell undecided: in neither group
    for m, v in (baselines or {}).items():
        measured["baselines"][m] = _entry(v, floor)
    ms, bs = measured["mechanisms"], measured["baselines"]
    inside = sorted(m for m in ms if ms[m]["in_group"])
    others = sorted(m for m in ms if not ms[m]["in_group"])
    fmt = lambda names, d=ms: "; ".join(f"{m} {d[m]['kl_bits_queries']:.3f}" for m in names)  # noqa: E731
    head = (f"KL at the queries (bits, each at its validated schedule): {group} [{fmt(inside)}] vs not [{fmt(others)}]"
            + (f", baselines [{fmt(sorted(bs), bs)}]" if bs else "")
            + (f", left out (cell undecided): {', '.join(measured['left_out'])}" if measured["left_out"] else "")
            + f"; {floor_name} floor {floor:.3f}, no-context floor {no_context:.3f}")
    measured.update(in_group=inside, others=others)
    if not inside or not others:
        return Rule("not-reproduced", f"{head}: no comparison, one group is empty", measured)
    beat = [m for m in inside if ms[m]["beats_floor"]]
    wrong = [m for m in others if not ms[m]["fails"]]
    loose = [m for m in sorted(bs) if bs[m]["beats_floor"]]
    if not beat:
        return Rule("not-reproduced", f"{head}: no {group} mechanism beats the {floor_name} floor "
                                      f"(below {G3_BEAT} x its KL)", measured)
    if wrong:
        return Rule("not-reproduced", f"{head}: {', '.join(wrong)}, outside the {group} group, end(s) below the "
                                      f"{floor_name} floor", measured)
    if len(beat) == len(inside) and not loose:
        return Rule("reproduced", f"{head}: every {group} mechanism beats the {floor_name} floor and no other does"
                                  + (", nor does a baseline" if bs else ""), measured)
    why = []
    if len(beat) < len(inside):
        why.append(f"{', '.join(sorted(set(inside) - set(beat)))} ({group}) do(es) not beat the {floor_name} floor")
    if loose:
        why.append(f"the baseline(s) {', '.join(loose)} beat(s) it, though the paper names the LSTM as failing")
    return Rule("partly-reproduced", f"{head}: {'; '.join(why)}; no mechanism outside the group beats it", measured)


def g3(tasks, labels, competition=None):
    """Across tasks. tasks: {task: {"kl", "floor", "floor_name", "no_context", "baselines"}} (g3_task's inputs per
    task); labels: the content_routing partition; competition: the competition partition, judged the same way
    beside it (reported, not the verdict).

    Verdict (the content_routing partition): reproduced if every task's is reproduced, not-reproduced if every
    task's is not-reproduced, partly-reproduced otherwise (it holds on some tasks, or in part)."""
    if not tasks:
        return Rule("not-reproduced", "no task was measured", {"tasks": {}})
    per, by_competition = {}, {}
    for name, x in tasks.items():
        args = (x["kl"], labels, x["floor"], x["no_context"], x.get("baselines"))
        per[name] = g3_task(*args, group="content-routing", floor_name=x.get("floor_name", "best"))
        if competition:
            by_competition[name] = g3_task(x["kl"], competition, x["floor"], x["no_context"], x.get("baselines"),
                                           group="competing", floor_name=x.get("floor_name", "best"))
    measured = {"tasks": {n: {"verdict": r.verdict, "reason": r.reason, **r.measured,
                              "details": tasks[n].get("details", {}), "floors": tasks[n].get("floors", {}),
                              "setting": tasks[n].get("setting", "")}
                          for n, r in per.items()},
                "thresholds": {"G3_BEAT": G3_BEAT, "G3_FAIL": G3_FAIL}}
    if by_competition:
        verdicts = [r.verdict for r in by_competition.values()]
        measured["competition"] = {"verdict": _combine(verdicts),
                                   "tasks": {n: {"verdict": r.verdict, "reason": r.reason}
                                             for n, r in by_competition.items()}}
    verdict = _combine([r.verdict for r in per.values()])
    reason = "; ".join(f"{n}: {r.verdict} ({r.reason})" for n, r in per.items())
    return Rule(verdict, reason, measured)


def _combine(verdicts):
    if all(v == "reproduced" for v in verdicts):
        return "reproduced"
    if all(v == "not-reproduced" for v in verdicts):
        return "not-reproduced"
    return "partly-reproduced"


def schedule(model):
    """The arm a model (results.json experiments.conjecture.<task>.mechanisms[m]) is judged at: the one whose chosen
    rate has the lower validation KL (G3_ARM on a tie or without a sweep)."""
    best, score = G3_ARM, float("inf")
    arms = model.get("arms") or {}
    for a in (G3_ARM, *sorted(set(arms) - {G3_ARM})):
        e = arms.get(a) or {}
        v = [x["validation_kl_bits"] for x in e.get("lr_sweep", ()) if x.get("lr") == e.get("lr")]
        if v and np.isfinite(v[0]) and v[0] < score:
            best, score = a, float(v[0])
    return best


def task_inputs(entry):
    """One task's g3_task inputs from results.json experiments.conjecture.<task> (None without floors): the kl of
    every mechanism and baseline that trained, the yardstick (the lowest floor KL at the queries)."""
    if not entry or not entry.get("floors"):
        return None
    base = set(entry.get("baselines", ()))
    kl, baselines = {}, {}
    for m, x in entry["mechanisms"].items():
        arm = (x.get("arms") or {}).get(schedule(x), {})
        if x.get("failed") or "kl_bits_queries_per_seed" not in arm:
            continue
        (baselines if m in base else kl)[m] = arm["kl_bits_queries_per_seed"]
    floors = {n: f["kl_bits_queries"] for n, f in entry["floors"].items()}
    best = min(floors, key=floors.get)
    details = {}
    for m in (*kl, *baselines):
        x = entry["mechanisms"][m]
        a = schedule(x)
        arm, other = x["arms"][a], next((e for b, e in x["arms"].items() if b != a), {})
        details[m] = {"arm": a, "lr": arm.get("lr"), "lr_at_edge": arm.get("lr_at_edge"),
                      "extended_rates": x.get("extended_rates", []),
                      "kl_bits_queries_other": other.get("kl_bits_queries", float("nan")),
                      "entropy_mae_bits": arm.get("entropy_mae_bits", float("nan")),
                      "accuracy_seen": arm.get("accuracy_seen", float("nan")),
                      **{k: v for k, v in (entry.get("parameters") or {}).get(m, {}).items()}}
    sizes = (entry.get("config") or {}).get("tunnel", {})
    setting = ", ".join(f"{k} {sizes[k]}" for k in ("values", "pairs", "symbols", "length", "prior", "steps", "batch")
                        if k in sizes)
    return {"kl": kl, "baselines": baselines, "floor": floors[best], "floor_name": best, "setting": setting,
            "no_context": floors.get("no_context", float("nan")), "details": details,
            "floors": {n: dict(f) for n, f in entry["floors"].items()}}


def measure(experiments):
    """G3's inputs from results.json experiments.conjecture (None where it did not run)."""
    cj = experiments.get("conjecture") or {}
    tasks = {n: task_inputs(e) for n, e in cj.items() if isinstance(e, dict)}
    tasks = {n: x for n, x in tasks.items() if x is not None}
    if not tasks:
        return None
    first = next(e for n, e in cj.items() if n in tasks)
    return {"tasks": tasks, "labels": first["content_routing"], "competition": first.get("competition")}


def controls(m):
    """Negative: no split (every model at the no-context floor), the split reversed (each group given the other's
    numbers: the content-routing mechanisms at the no-context floor, the others well below the yardstick); positive:
    the split as predicted, constructed (the baselines failing with the others). Each on every measured task."""
    labels = m["labels"]

    def build(inside, outside):
        tasks = {}
        for name, x in m["tasks"].items():
            seeds = len(next(iter(x["kl"].values()))) if x["kl"] else 2
            low, high = 0.1 * x["floor"], max(x["no_context"], x["floor"]) if np.isfinite(x["no_context"]) else x["floor"]
            pick = {"low": low, "high": high}
            kl = {k: [float(pick[inside if labels.get(k) else outside])] * seeds for k in x["kl"]}
            base = {k: [float(pick[outside])] * seeds for k in x.get("baselines", {})}
            tasks[name] = {**x, "kl": kl, "baselines": base}
        return g3(tasks, labels)

    return {"G3/no-split": ("negative", build("high", "high")),
            "G3/split-reversed": ("negative", build("high", "low")),
            "G3/split": ("positive", build("low", "high"))}


def tables(measured):
    """Per task: every model's KL at the queries (at its validated schedule, 95% interval over seeds; the other
    schedule's beside), its group, its parameters and content share, the chosen schedule and rate (* where the rate is
    still the sweep's edge after one extension past it), the entropy error and the accuracy where the answer was
    shown; then the floors."""
    out = []
    for name, x in measured.get("tasks", {}).items():
        rows = []
        models = [(m, "routes by content" if e["in_group"] else "does not", e) for m, e in x["mechanisms"].items()]
        models += [(m, "baseline (no cell)", e) for m, e in x.get("baselines", {}).items()]
        for m, group, e in sorted(models, key=lambda r: r[2]["kl_bits_queries"]):
            d = x.get("details", {}).get(m, {})
            mark = "beats" if e["beats_floor"] else ("fails" if e["fails"] else "between")
            lr = d.get("lr", "")
            rate = f"{SCHEDULES.get(d.get('arm'), d.get('arm', ''))} {lr:g}{'*' if d.get('lr_at_edge') else ''}" \
                if isinstance(lr, (int, float)) else ""
            rows.append([m, group, d.get("all", ""), d.get("content_share", float("nan")), rate,
                         e["kl_bits_queries"], f"{e['ci95'][0]:.3g} to {e['ci95'][1]:.3g}",
                         d.get("kl_bits_queries_other", float("nan")), d.get("entropy_mae_bits", float("nan")),
                         d.get("accuracy_seen", float("nan")), mark])
        for f, vals in x.get("floors", {}).items():
            rows.append([f"floor: {f}", "predictor", "", float("nan"), "", vals.get("kl_bits_queries", float("nan")),
                         "", float("nan"), vals.get("entropy_mae_bits", float("nan")),
                         vals.get("accuracy_seen", float("nan")), "yardstick" if f == x["floor_name"] else ""])
        out.append({"caption": f"{name}{' (' + x['setting'] + ')' if x.get('setting') else ''}: {x['verdict']} (beats: below {G3_BEAT} x the {x['floor_name']} floor, "
                               f"{x['beat_below']:.3g} bits; fails: at or above it)",
                    "header": ["model", "group", "parameters", "content share", "schedule, lr",
                               "KL at queries (bits)", "95% interval", "KL, other schedule", "entropy error (bits)",
                               "accuracy where shown", "against the floor"],
                    "rows": rows})
    return out


CLAIM = EmpiricalClaim(
    "G3", "content-routing-splits",
    "the paper's conjecture where it predicts a split: on bijection recall and on the enlarged wind tunnel, the "
    "mechanisms that route by content (proved content_routing cell) end below the best floor of the predictors that "
    "see less, and those that do not, and the real LSTM, stay at or above it",
    "ours: numeric.experiments.bijection (keys drawn with replacement) and numeric.experiments.transitions (no "
    "stickiness), every mechanism and the real LSTM at two sizes, the partition from the mechanisms table; each "
    "task's sizes in its table", {},
    ("KL to the exact Bayes predictive at the query positions per model and seed, at the schedule and rate chosen "
     "on validation sequences (a rate at the sweep's edge extended once past it), held-out sequences",
     "the floors (predictors that see less) on the same sequences",
     "each mechanism's content_routing and competition cells from the mechanisms table"),
    g3, {"G3_BEAT": G3_BEAT, "G3_FAIL": G3_FAIL}, measure=measure, controls=controls,
    constructions={"G3/no-split": "every model's KL set to the no-context floor on every task (derived)",
                   "G3/split-reversed": "content-routing mechanisms at the no-context floor, the others and the "
                                        "baselines at 0.1 x the best floor (derived)",
                   "G3/split": "content-routing mechanisms at 0.1 x the best floor, the others and the baselines at "
                               "the no-context floor (derived)"},
    section="Every mechanism and the real LSTM (at attention's parameter count and about 3x it) trained on the "
            "conjecture's tasks (Adam, both schedules, a learning-rate sweep with each arm's rate chosen on "
            "validation sequences, the same sequences and seeds for all); per model the KL to Bayes at the query "
            "positions, at the schedule and rate chosen on validation sequences, against the floors of predictors that see less (results.json "
            "experiments.conjecture.<task> holds both arms, every rate, the floors, the entropy per position and the "
            "accuracy where the answer was shown).",
    headline=lambda m: "; ".join(f"{n}: {x['verdict']}" for n, x in m["tasks"].items()),
    tables=tables, figures=("conjecture_bijection", "conjecture_transitions"))
