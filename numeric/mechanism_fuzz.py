"""The mechanism fuzzer: random user-style mechanisms (derive.fuzz.mechanisms) through the mechanisms table, every
cell's verdict checked against the independent torch oracle (numeric.mechanism_oracle).

Each mechanism is rendered, checked as a claims file's would be (derive.mechanisms.check), registered for the
moment it is decided, and its seven cells decided exactly as the derive stage decides a user's row
(derive.mechanisms.table: every proof path, both mask settings). A cell's verdict is FALSE when, in some mask
setting, it says proved where the oracle finds the identity false, or disproved where the oracle finds it true;
for the saturation bound, when a printed witness does not violate the bound rebuilt in torch, or a proved bound
is violated at a point the oracle's search finds. `undecided` and `error` are allowed and counted (an error is
also listed); `failed` (an inconsistency of the engine) counts as false.

    python -m numeric.mechanism_fuzz [--n N] [--seed S] [--workers N | --scheduler ADDRESS] [--cache DIR] [--out FILE]

runs N mechanisms as a Dask campaign (numeric.campaign) and exits 1 on a false verdict.
"""
from __future__ import annotations

import json
import sys
import time

QUESTIONS = ("routing", "advantage", "competition", "content", "em_step", "saturation", "content_routing")
CHUNK = 6  # mechanisms per campaign task
# the table's budgets of the default profile (derive.profile: mechanism_budget_s, mechanism_fixed_budget_s)
OPTIONS = {"grid": [{"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}], "points": 2, "budget_s": 4.0, "fixed_budget_s": 1.5}
ROWS_FORMAT = 2
SETTINGS = ("unmasked", "masked")


def _false_identity(cell, truth):
    wrong = []
    for setting in SETTINGS:
        verdict, true = cell.get("settings", {}).get(setting), truth.get(setting)
        if (verdict == "proved" and true is False) or (verdict == "disproved" and true is True):
            wrong.append(f"{setting}: {verdict}, the oracle finds it {'true' if true else 'false'}")
    return wrong


def _false_saturation(spec, cell, seed):
    from numeric import mechanism_oracle as oracle
    wrong = []
    for setting in SETTINGS:
        verdict = cell.get("settings", {}).get(setting)
        if verdict == "disproved":
            w = cell.get("witnesses", {}).get(setting)
            if w is None:
                wrong.append(f"{setting}: disproved without a witness")
                continue
            lhs, rhs = oracle.replay(spec, w)
            if not lhs > rhs:
                wrong.append(f"{setting}: the witness gives {lhs:.6g} <= {rhs:.6g} in torch")
        elif verdict == "proved":
            worst = oracle.search(spec, setting == "masked", seed)
            if worst > 1e-9:
                wrong.append(f"{setting}: proved, the oracle's search violates it by {worst:.3g}")
    return wrong


def run_one(spec, seed):
    """One mechanism: its cells, each with its verdict, per-setting verdicts, the oracle's truth and what is false."""
    from derive import mechanisms
    from derive.fuzz.mechanisms import render
    from derive.mechanisms import table
    from derive.mechanisms.check import MechanismError, check
    from numeric import mechanism_oracle as oracle

    t0 = time.perf_counter()
    mech = render(spec)
    mechanisms.REGISTRY[mech.name] = mech
    try:
        try:
            check(mech)
        except MechanismError as exc:  # a spec the loader would refuse: no cells to judge
            return {"spec": spec, "refused": str(exc)[:300], "cells": {}, "seconds": round(time.perf_counter() - t0, 3)}
        cells = table._cells(mech, table._run({**OPTIONS, "seed": seed}), seed)
    finally:
        del mechanisms.REGISTRY[mech.name]
    truth = oracle.truth(spec, seed)
    out = {}
    for q in QUESTIONS:
        cell = cells[q]
        if cell["verdict"] == "failed":
            wrong = [f"failed: {cell.get('reason', '')}"]
        elif cell["verdict"] == "error":
            wrong = []
        elif q == "saturation":
            wrong = _false_saturation(spec, cell, seed)
        elif q == "content_routing":  # proved: it routes by content; the oracle's truth says whether it does
            wrong = _false_identity(cell, truth.setdefault(q, oracle.content_routing(spec, seed)))
        else:
            wrong = _false_identity(cell, truth[q])
        out[q] = {"verdict": cell["verdict"], "settings": cell.get("settings", {}),
                  "truth": truth.get(q, {}), "false": wrong,
                  **({"reason": cell.get("reason", "")[:300]} if cell["verdict"] == "error" else {})}
    return {"spec": spec, "cells": out, "seconds": round(time.perf_counter() - t0, 3)}


def fuzz_chunk(seed, start, stop):
    """A campaign task: mechanisms start..stop-1 of the seed's stream (torch on one thread here)."""
    import torch

    from derive.fuzz.mechanisms import draw

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [run_one(draw(seed, i), seed) for i in range(start, stop)]
    finally:
        torch.set_num_threads(threads)


def tasks(n, seed, chunk=CHUNK):
    from derive import __version__
    from numeric import campaign

    return [campaign.Task(f"mechanism-fuzz/seed={seed}/{lo}-{min(lo + chunk, n) - 1}/v{__version__}/rows{ROWS_FORMAT}",
                          fuzz_chunk, (seed, lo, min(lo + chunk, n))) for lo in range(0, n, chunk)]


def summarise(rows, seconds):
    cells = [(r["spec"]["name"], q, c) for r in rows for q, c in r["cells"].items()]
    verdicts = {}
    for _, _, c in cells:
        verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
    false = [{"mechanism": name, "question": q, "why": c["false"], "spec": next(r["spec"] for r in rows
             if r["spec"]["name"] == name)} for name, q, c in cells if c["false"]]
    errors = [{"mechanism": name, "question": q, "reason": c.get("reason", "")} for name, q, c in cells
              if c["verdict"] == "error"]
    per_question = {q: {v: sum(1 for _, qq, c in cells if qq == q and c["verdict"] == v)
                        for v in sorted({c["verdict"] for _, qq, c in cells if qq == q})} for q in QUESTIONS}
    truth = {"true": 0, "false": 0, "singular": 0}
    for _, q, c in cells:
        for setting in SETTINGS:
            t = c["truth"].get(setting) if q != "saturation" else "n/a"
            if t != "n/a":
                truth["true" if t else ("singular" if t is None else "false")] += 1
    return {"mechanisms": len(rows), "refused": sum(1 for r in rows if r.get("refused")), "cells": len(cells),
            "verdicts": verdicts, "per_question": per_question, "oracle_settings": truth,
            "false_verdicts": false, "errors": errors[:20], "error_count": len(errors),
            "seconds": round(seconds, 3), "cells_per_second": round(len(cells) / seconds, 3) if seconds else None,
            "row_seconds_max": max((r["seconds"] for r in rows), default=0.0),
            "row_seconds_mean": round(sum(r["seconds"] for r in rows) / len(rows), 3) if rows else 0.0}


def run(n=170, seed=0, workers=None, log=print, scheduler=None, cache_dir=None, chunk=CHUNK):
    """n mechanisms of the seed's stream as a campaign; the summary (see `summarise`) with `failed_tasks`."""
    from numeric import campaign

    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    t0, seen = time.perf_counter(), []

    def arrived(_index, rows):
        seen.extend(rows)
        bad = sum(bool(c["false"]) for r in seen for c in r["cells"].values())
        log(f"mechanism fuzz: {len(seen)}/{n} mechanisms  {sum(len(r['cells']) for r in seen)} cells  "
            f"false verdicts {bad}  {time.perf_counter() - t0:.1f} s")

    outcome = campaign.run(tasks(n, seed, chunk), scheduler=scheduler, workers=workers, cache_dir=cache_dir, log=log,
                           label="mechanism fuzz", on_result=arrived)
    rows = sorted((row for part in outcome.results if part for row in part), key=lambda r: int(r["spec"]["name"].split("_")[1]))
    summary = summarise(rows, time.perf_counter() - t0)
    summary.update(seed=seed, workers=outcome.workers, scheduler=outcome.scheduler, failed_tasks=outcome.failed,
                   tasks={"total": len(outcome.results), "computed": outcome.computed, "cached": outcome.cached,
                          "chunk": chunk}, rows=rows)
    return summary


def main(argv=None, prog="python -m numeric.mechanism_fuzz"):
    from derive import options
    from numeric import campaign

    p = options.parser(prog, __doc__, parents=[
        options.seed(), options.json_file("write the summary with every mechanism's cells as JSON", old=["--out"]),
        options.campaign()])
    p.add_argument("--n", type=int, default=170, metavar="N", help="mechanisms to draw (6 cells each)")
    p.add_argument("--cache", default=None, metavar="DIR", help="cache each task's rows here: an interrupted run resumes")
    args = p.parse_args(argv)
    if args.n < 1:
        p.error("--n must be positive")
    try:
        summary = run(args.n, args.seed, workers=args.workers, scheduler=args.scheduler, cache_dir=args.cache)
    except campaign.CampaignError as exc:
        return campaign.refused(p.prog, exc)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=1)
    rows = summary.pop("rows")
    print(json.dumps({k: v for k, v in summary.items() if k != "false_verdicts"}, indent=1))
    for f in summary["false_verdicts"]:
        print(f"FALSE: {f['mechanism']} / {f['question']}: {'; '.join(f['why'])}  spec {f['spec']}")
    del rows
    return 1 if summary["false_verdicts"] or summary["failed_tasks"] else 0


if __name__ == "__main__":
    sys.exit(main())
