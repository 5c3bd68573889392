"""The derive stage's mechanism table: every built-in mechanism x question, decided on every proof path,
and every mechanism mutant attacked by every path (results.json `mechanisms`, checks derive/mechanisms/...)."""
from __future__ import annotations

import time

from derive import mechanisms
from derive.mechanisms import questions, saturation
from derive.prove import PATHS, Outcome, run_path
from derive.results import Check, slug

GENERAL_BUDGET_S = 10.0  # the general-size proofs of every mechanism's table, together (recorded, not asserted)


def _run(options):
    """run(path, identity, masked, context, closed=None) -> Outcome, with the table's budgets: `budget_s` per
    attempt; on the fixed path `fixed_budget_s` (when given), and `holds` at the sizes it checked in full when
    that runs out (derive.prove.fixed's `partial`). A general-size attempt that ran out of time unmasked is not
    tried again under the mask (a larger model of the same identity): it reads undecided at once, with why."""
    timed_out = set()

    def run(path, identity, masked, context, closed=None):
        key = (context, id(identity), id(closed))
        if path == "general" and masked and key in timed_out:
            reason = "ProofTimeout: not tried under the mask, the unmasked normal form exceeded the budget"
            return Outcome("undecided", 0.0, f"undecided: {reason}", reason=reason)
        opts = options
        if path == "fixed":
            opts = dict(options, partial_fixed=True, budget_s=options.get("fixed_budget_s", options.get("budget_s")))
        try:
            out = run_path(path, identity, masked, context, opts, closed=closed)
        except ValueError as exc:  # an ill-formed mechanism or question: undecided, never a verdict
            return Outcome("undecided", 0.0, f"ill-formed: {exc}", reason=str(exc))
        if path == "general" and not masked and out.status == "undecided" and "ProofTimeout" in out.reason:
            timed_out.add(key)
        return out
    return run


DECIDED = ("proved", "disproved", "mask-dependent")  # a cell's check passes with one of these (routing: proved)


def build(results, options, log=print, names=None):
    """Decide every cell; record one check per cell (pass: decided, and for `routing` proved) and one
    negative control per mutant and path (pass: disproved). A cell whose decision raises is that cell's
    `error` (a failing check); every other cell and mechanism is still decided. Returns the table."""
    run, table, t0 = _run(options), {}, time.perf_counter()
    for mech in (mechanisms.get(n) for n in names) if names else mechanisms.registered():
        started = time.perf_counter()
        cells = _cells(mech, run, options.get("seed", 0))
        for q, cell in cells.items():
            ok = cell["verdict"] == "proved" if q == "routing" else cell["verdict"] in DECIDED
            results.record(Check(f"derive/mechanisms/{mech.name}/{q}", "derive", "proof", "", "pass" if ok else "fail",
                                 cell["seconds"], _measured(cell),
                                 "proved" if q == "routing" else "decided (proved, disproved or mask-dependent)",
                                 detail=f"{mech.title}: {questions.TITLES[q]}"), log, note=cell["verdict"])
        extra = _guarded(lambda mech=mech: questions.decide(mech.name, run, which=questions.extra_identities(mech.name)),
                         [n for n, *_ in mech.extra]) if mech.extra else {}
        for name, cell in extra.items():
            results.record(Check(f"derive/mechanisms/{mech.name}/extra/{slug(name)}", "derive", "proof", "",
                                 "pass" if cell["verdict"] == "proved" else "fail", cell["seconds"],
                                 {"verdict": cell["verdict"], "paths": cell.get("paths", {})}, "proved",
                                 detail=f"{mech.title}: {name}"), log, note=cell["verdict"])
        mutants = _guarded(lambda mech=mech: _attack(results, mech, run, log), [mu.id for mu in mech.mutants])
        table[mech.name] = {"extra": {n: {**c, "latex": latex} for (n, *_, latex), c in zip(mech.extra, extra.values())},
                            "title": mech.title, "latex": mech.latex, "routing_latex": mech.routing_latex,
                            "normalised": mech.normalised, "ref": mech.ref, "questions": cells,
                            "domains": {leaf: mech.domain(leaf) for leaf in mech.leaves},
                            "mutants": mutants, "seconds": round(time.perf_counter() - started, 3)}
    controls = _guarded(lambda: _content_routing_controls(results, run, log), ["error"])
    if "error" in controls:  # the controls could not be built: that is a failing check, never a silent gap
        results.record(Check("derive/mechanisms/content-routing-control", "derive", "proof", "", "fail",
                             0.0, controls["error"]["reason"], "every control as built"), log)
    table_s = round(time.perf_counter() - t0, 3)
    paths = {p: round(sum(c.get("path_seconds", {}).get(p, 0) for row in table.values()
                          for c in row["questions"].values()), 3) for p in PATHS}
    results.derive["mechanisms"] = {"questions": {q: {"title": questions.TITLES[q], "latex": questions.LATEX.get(q, "")}
                                                  for q in questions.COLUMNS},
                                    "table": table, "seconds": table_s, "path_seconds": paths,
                                    "content_routing_controls": controls}
    results.benchmarks.append({"name": "derive/mechanisms/general-path-total", "device": "cpu", "dtype": "exact",
                               "shape": "symbolic sizes", "ours_s": paths["general"], "reference": "budget 10 s",
                               "reference_s": GENERAL_BUDGET_S, "ratio": round(paths["general"] / GENERAL_BUDGET_S, 4)})
    for name, row in table.items():  # per mechanism: the whole row's time (questions, saturation, mutants)
        results.benchmarks.append({"name": f"derive/mechanisms/{name}/row", "device": "cpu", "dtype": "exact",
                                   "shape": "its table row", "ours_s": row["seconds"], "reference": "budget 10 s",
                                   "reference_s": ROW_BUDGET_S, "ratio": round(row["seconds"] / ROW_BUDGET_S, 4)})
    return table


ROW_BUDGET_S = 10.0  # one mechanism's whole row (recorded, not asserted)


def _error(exc, t0):
    """A cell whose decision raised: its verdict `error`, with the exception's message."""
    return {"verdict": "error", "witness": None, "reason": f"{type(exc).__name__}: {exc}"[:500], "paths": {},
            "seconds": round(time.perf_counter() - t0, 4), "path_seconds": {}}


def _guarded(decide, names):
    """decide() or, when it raises, an `error` entry for each of `names`."""
    t0 = time.perf_counter()
    try:
        return decide()
    except Exception as exc:  # one bad mechanism never takes the table down
        return {n: _error(exc, t0) for n in names}


def _cells(mech, run, seed):
    """Every question's cell, each decided on its own: one that raises is `error`, the others stand."""
    ids, cells = questions.identities(mech.name), {}
    for q in questions.QUESTIONS:
        cells.update(_guarded(lambda q=q: questions.decide(mech.name, run, which={q: ids[q]}), [q]))
    t0 = time.perf_counter()
    try:
        cells["saturation"] = saturation.decide(mech.name, cells["advantage"], run, seed)
    except Exception as exc:
        cells["saturation"] = _error(exc, t0)
    t0 = time.perf_counter()
    try:
        cells["content_routing"] = questions.content_routing_cell(mech.name, run)
    except Exception as exc:
        cells["content_routing"] = _error(exc, t0)
    return cells


def _content_routing_controls(results, run, log):
    """The content_routing cell on mechanisms built to answer it one way (questions.CONTENT_ROUTING_CONTROLS), each
    a check that passes when it comes out as built (kind proof: it can pass with any verdict, unlike a mutant's)."""
    t0 = time.perf_counter()
    controls = questions.content_routing_controls(run)
    seconds = round((time.perf_counter() - t0) / max(1, len(controls)), 4)
    for name, c in controls.items():
        results.record(Check(f"derive/mechanisms/content-routing-control/{name}", "derive", "proof", "",
                             "pass" if c["verdict"] == c["expected"] else "fail", seconds,
                             {"verdict": c["verdict"], "reason": c["reason"]}, c["expected"], detail=c["description"],
                             part="content_routing", outcome=c["verdict"]), log, note=c["verdict"])
    return controls


def _measured(cell):
    """What a cell's check records: its verdict and each path's outcomes (saturation: C9's steps, the witness)."""
    if "steps" in cell:
        return {"verdict": cell["verdict"], "settings": cell["settings"], "steps": cell["steps"],
                "assumptions": cell["assumptions"], "witness": cell["witness"]}
    return {"verdict": cell["verdict"], "paths": cell["paths"], **({"reason": cell["reason"]} if cell["verdict"] == "error" else {})}


def _attack(results, mech, run, log):
    ids = questions.identities(mech.name)
    out = {}
    for mutant in mech.mutants:
        outcomes = {p: run(p, ids[mutant.question], True, f"mechanism {mech.name} mutant {mutant.id}", mutant.closed)
                    for p in PATHS}
        for p, o in outcomes.items():
            results.record(Check(f"derive/mechanisms/{mutant.id}/{p}", "derive", "negative-control", "",
                                 "pass" if o.status == "disproved" else "fail", round(o.seconds, 4), o.measured[:300],
                                 "rejected", detail=mutant.description, path=p, part=mutant.question, outcome=o.status,
                                 witness=o.witness.to_json() if o.witness else None), log, note=o.status)
        out[mutant.id] = {"question": mutant.question, "description": mutant.description,
                          "paths": {p: o.status for p, o in outcomes.items()}}
    return out
