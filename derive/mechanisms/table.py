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
    def run(path, identity, masked, context, closed=None):
        try:
            return run_path(path, identity, masked, context, options, closed=closed)
        except ValueError as exc:  # an ill-formed mechanism or question: undecided, never a verdict
            return Outcome("undecided", 0.0, f"ill-formed: {exc}", reason=str(exc))
    return run


def build(results, options, log=print, names=None):
    """Decide every cell; record one check per cell (pass: decided, and for `routing` proved) and one
    negative control per mutant and path (pass: disproved). Returns the table written to results."""
    run, table, t0 = _run(options), {}, time.perf_counter()
    for mech in (mechanisms.get(n) for n in names) if names else mechanisms.registered():
        cells = questions.decide(mech.name, run)
        cells["saturation"] = saturation.decide(mech.name, cells["advantage"]["verdict"], run)
        for q, cell in cells.items():
            ok = cell["verdict"] == "proved" if q == "routing" else cell["verdict"] in ("proved", "disproved")
            results.record(Check(f"derive/mechanisms/{mech.name}/{q}", "derive", "proof", "", "pass" if ok else "fail",
                                 cell["seconds"], _measured(cell),
                                 "proved" if q == "routing" else "decided (proved or disproved)",
                                 detail=f"{mech.title}: {questions.TITLES[q]}"), log, note=cell["verdict"])
        extra = questions.decide(mech.name, run, which=questions.extra_identities(mech.name)) if mech.extra else {}
        for name, cell in extra.items():
            results.record(Check(f"derive/mechanisms/{mech.name}/extra/{slug(name)}", "derive", "proof", "",
                                 "pass" if cell["verdict"] == "proved" else "fail", cell["seconds"],
                                 {"verdict": cell["verdict"], "paths": cell["paths"]}, "proved",
                                 detail=f"{mech.title}: {name}"), log, note=cell["verdict"])
        table[mech.name] = {"extra": {n: {**c, "latex": latex} for (n, *_, latex), c in zip(mech.extra, extra.values())},
                            "title": mech.title, "latex": mech.latex, "routing_latex": mech.routing_latex,
                            "normalised": mech.normalised, "ref": mech.ref, "questions": cells,
                            "mutants": _attack(results, mech, run, log)}
    table_s = round(time.perf_counter() - t0, 3)
    paths = {p: round(sum(c["path_seconds"][p] for row in table.values() for c in row["questions"].values()
                          if "path_seconds" in c), 3) for p in PATHS}
    results.derive["mechanisms"] = {"questions": {q: {"title": questions.TITLES[q], "latex": questions.LATEX.get(q, "")}
                                                  for q in questions.COLUMNS},
                                    "table": table, "seconds": table_s, "path_seconds": paths}
    results.benchmarks.append({"name": "derive/mechanisms/general-path-total", "device": "cpu", "dtype": "exact",
                               "shape": "symbolic sizes", "ours_s": paths["general"], "reference": "budget 10 s",
                               "reference_s": GENERAL_BUDGET_S, "ratio": round(paths["general"] / GENERAL_BUDGET_S, 4)})
    return table


def _measured(cell):
    """What a cell's check records: its verdict and each path's outcomes (saturation: C9's steps, the witness)."""
    if "paths" in cell:
        return {"verdict": cell["verdict"], "paths": cell["paths"]}
    return {"verdict": cell["verdict"], "steps": cell["steps"], "witness": cell["witness"]}


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
