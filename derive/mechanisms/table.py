"""The derive stage's mechanism table: every built-in mechanism x question, decided on every proof path,
and every mechanism mutant attacked by every path (results.json `mechanisms`, checks derive/mechanisms/...)."""
from __future__ import annotations

import time

from derive import mechanisms
from derive.mechanisms import questions
from derive.prove import PATHS, Outcome, run_path
from derive.results import Check


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
    for mech in (mechanisms.get(n) for n in names) if names else mechanisms.builtin():
        cells = questions.decide(mech.name, run)
        for q, cell in cells.items():
            ok = cell["verdict"] == "proved" if q == "routing" else cell["verdict"] in ("proved", "disproved")
            results.record(Check(f"derive/mechanisms/{mech.name}/{q}", "derive", "proof", "", "pass" if ok else "fail",
                                 cell["seconds"], {"verdict": cell["verdict"], "paths": cell["paths"]},
                                 "proved" if q == "routing" else "decided (proved or disproved)",
                                 detail=f"{mech.title}: {questions.TITLES[q]}"), log, note=cell["verdict"])
        table[mech.name] = {"title": mech.title, "latex": mech.latex, "routing_latex": mech.routing_latex,
                            "normalised": mech.normalised, "ref": mech.ref, "questions": cells,
                            "mutants": _attack(results, mech, run, log)}
    table_s = round(time.perf_counter() - t0, 3)
    results.derive["mechanisms"] = {"questions": {q: {"title": questions.TITLES[q], "latex": questions.LATEX.get(q, "")}
                                                  for q in questions.QUESTIONS},
                                    "table": table, "seconds": table_s}
    return table


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
