"""The claim fuzzer's runner: random claims (derive.fuzz) through every proof path, labelled by the float64
oracle (numeric.oracle); summaries and the command line.

    python -m numeric.fuzz [--n N] [--seed S] [--paths general,fixed,rational] [--out FILE] [--jobs J] [--budget S]
"""
from __future__ import annotations

import argparse
import json
import os
import time

from derive.fuzz.generate import generate_one

# -- running the paths against the oracle --------------------------------------------------------

PATHS = ("general", "fixed", "rational")
# Small to large, dimensions pairwise distinct in each: most false claims fail fast at n = 2; what survives
# it meets n = 3 (the quick profile's distinct size), where the exact zero test of a false claim can be slow.
FIXED_GRID = ({"n": 2, "dk": 3, "dv": 4, "m": 5, "dx": 6}, {"n": 3, "dk": 4, "dv": 5, "m": 7, "dx": 6})
BUDGET_S = 8.0  # seconds per path per claim: over it the path is undecided (the fixed path's exact zero test is the slow one)
PROGRESS_EVERY = 50


def _status(out):
    return getattr(out, "status", None) or ("proved" if out.equal else "undecided")


def _verdict(status, true):
    return (status == "proved" and not true) or (status == "disproved" and true)


def run_one(claim, paths, seed, budget_s=BUDGET_S):
    """The oracle's labels and every selected path's outcome, masked and unmasked, for one claim."""
    from derive.model import ShapeError
    from derive.prove import run_path
    from numeric import oracle

    identity = claim.identity()
    options = {"grid": list(FIXED_GRID), "points": 2, "seed": seed * 100_003 + claim.index, "budget_s": budget_s}
    row = {"index": claim.index, "name": claim.name, "family": claim.family, "level": claim.level, "description": claim.description,
           "claim": claim.text(), "intended": claim.intended, "cases": []}
    for masked in (False, True):
        lab = oracle.label(claim, masked, seed * 100_003 + claim.index)
        case = {"masked": masked, "true": lab["true"], "gap": lab["gap"], "one_hot_only": lab["one_hot_only"], "paths": {}}
        for path in paths:
            try:
                out = run_path(path, identity, masked, claim.name, options)
                res = {"status": _status(out), "seconds": out.seconds, "measured": out.measured[:400]}
            except ShapeError as exc:  # the generator's bug, not the path's
                res = {"status": "ill-formed", "seconds": 0.0, "measured": str(exc)[:400]}
            res["false_verdict"] = _verdict(res["status"], lab["true"])
            case["paths"][path] = res
        row["cases"].append(case)
    return row


def _work(job):
    seed, index, paths, budget_s = job
    return run_one(generate_one(seed, index), paths, seed, budget_s)


def _rows(n, seed, paths, jobs, budget_s):
    work = [(seed, i, tuple(paths), budget_s) for i in range(n)]
    if jobs <= 1:
        yield from map(_work, work)
        return
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(jobs, initializer=_quiet_worker) as pool:
        yield from pool.imap_unordered(_work, work, chunksize=1)


def _quiet_worker():
    import torch

    torch.set_num_threads(1)  # one thread per worker: the pool's workers share the cores


def summarise(rows, paths, seconds):
    """The run's figures. A case is one claim in one setting (unmasked, masked): the unit a path decides
    and the oracle labels; `true` / `false` count claims (true: true in both settings)."""
    cases = [(r, c) for r in rows for c in r["cases"]]
    true_cases = [c for _, c in cases if c["true"]]
    closest = min(((c["gap"], r) for r, c in cases if not c["true"]), key=lambda x: x[0], default=(None, {}))
    n_true = sum(all(c["true"] for c in r["cases"]) for r in rows)
    return {
        "claims": len(rows), "true": n_true, "false": len(rows) - n_true, "cases": len(cases),
        "cases_true": len(true_cases), "cases_false": len(cases) - len(true_cases),
        "claims_intended_false": sum(not r["intended"] for r in rows),
        "one_hot_only": sum(c["one_hot_only"] for _, c in cases),
        "margin": _margin(), "closest_false_gap": closest[0],
        "closest_false_claim": f"{closest[1].get('name')}: {closest[1].get('description')}" if closest[1] else None,
        "largest_true_gap": max((c["gap"] for c in true_cases), default=None),
        "paths": {p: _path_summary(p, cases, len(rows)) for p in paths},
        "families": _families(rows, paths),
        "false_verdicts": [_false_verdict(r, c, p) for r, c in cases for p in paths if c["paths"][p]["false_verdict"]],
        "ill_formed": sum(c["paths"][p]["status"] == "ill-formed" for _, c in cases for p in paths),
        "seconds": round(seconds, 2), "claims_per_second": round(len(rows) / seconds, 3) if seconds else None}


def _margin():
    from numeric.oracle import MARGIN

    return MARGIN


def _rate(hits, total):
    return round(hits / total, 4) if total else None


def _path_summary(path, cases, n_claims):
    res = [(c["true"], c["paths"][path]) for _, c in cases]
    count = lambda status, truth=None: sum(r["status"] == status and (truth is None or t == truth) for t, r in res)  # noqa: E731
    seconds = sum(r["seconds"] for _, r in res)
    n_true = sum(t for t, _ in res)
    return {"proved": count("proved"), "disproved": count("disproved"), "undecided": count("undecided"),
            "ill_formed": count("ill-formed"), "timeouts": sum("budget" in r["measured"] for _, r in res),
            "true_decided_rate": _rate(count("proved", True), n_true),
            "false_decided_rate": _rate(count("disproved", False), len(res) - n_true),
            "false_verdicts": sum(r["false_verdict"] for _, r in res),
            "seconds": round(seconds, 2), "claims_per_second": round(n_claims / seconds, 3) if seconds else None}


def _families(rows, paths):
    """Per generator family: claims, true claims, and each path's share of cases decided correctly."""
    out = {}
    for family in dict.fromkeys(r["family"] for r in rows):
        mine = [r for r in rows if r["family"] == family]
        cases = [c for r in mine for c in r["cases"]]
        d = {"claims": len(mine), "true": sum(all(c["true"] for c in r["cases"]) for r in mine)}
        for p in paths:
            right = sum(c["paths"][p]["status"] == ("proved" if c["true"] else "disproved") for c in cases)
            d[f"{p}_decided_rate"] = _rate(right, len(cases))
        out[family] = d
    return out


def _false_verdict(row, case, path):
    res = case["paths"][path]
    return {"claim": row["name"], "path": path, "masked": case["masked"], "verdict": res["status"],
            "truth": "true" if case["true"] else "false", "gap": case["gap"], "level": row["level"], "family": row["family"],
            "description": f"{row['description']}: {row['claim']}", "measured": res["measured"]}


def run(n=2000, seed=0, paths=PATHS, jobs=1, log=print, budget_s=BUDGET_S):
    """Generate n claims, label them, run the paths; returns the summary dict (see `summarise`)."""
    paths = tuple(paths)
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise ValueError(f"unknown proof path(s) {unknown}; expected some of {PATHS}")
    t0, rows = time.perf_counter(), []
    for row in _rows(n, seed, paths, jobs, budget_s):
        rows.append(row)
        if len(rows) % PROGRESS_EVERY == 0 or len(rows) == n:
            _progress(rows, n, paths, time.perf_counter() - t0, log)
    rows.sort(key=lambda r: r["index"])
    summary = summarise(rows, paths, time.perf_counter() - t0)
    summary.update(seed=seed, selected_paths=list(paths), jobs=jobs, fixed_grid=list(FIXED_GRID), budget_s=budget_s, rows=rows)
    return summary


def _progress(rows, n, paths, seconds, log):
    cases = [c for r in rows for c in r["cases"]]
    bad = sum(c["paths"][p]["false_verdict"] for c in cases for p in paths)
    true = sum(c["true"] for c in cases)
    log(f"fuzz: {len(rows)}/{n} claims  {len(rows) / seconds:.2f} claims/s  cases true {true} false {len(cases) - true}  "
        f"false verdicts {bad}")


def report(summary, log=print):
    """The final summary, as text."""
    o = summary
    log(f"fuzz: {o['claims']} claims ({o['true']} true in both settings, {o['false']} false in one or both), "
        f"{o['cases']} unmasked/masked cases ({o['cases_true']} true, {o['cases_false']} false; {o['one_hot_only']} true "
        f"only for one-hot targets) in {o['seconds']} s, {o['claims_per_second']} claims/s")
    log(f"oracle: margin {o['margin']:g} relative; largest error on a true case {_g(o['largest_true_gap'])}; "
        f"closest false case {_g(o['closest_false_gap'])} ({o['closest_false_claim']})")
    for path, s in summary["paths"].items():
        log(f"  {path:8s} proved {s['proved']:5d}  disproved {s['disproved']:5d}  undecided {s['undecided']:5d} "
            f"(timeouts {s['timeouts']})  decided: true {_pct(s['true_decided_rate'])} false {_pct(s['false_decided_rate'])}  "
            f"false verdicts {s['false_verdicts']}  {s['claims_per_second']} claims/s")
    for v in summary["false_verdicts"]:
        log(f"FALSE VERDICT {v['path']} {v['verdict']} a {v['truth']} identity ({'masked' if v['masked'] else 'unmasked'}, "
            f"gap {v['gap']:.2g}): {v['claim']} {v['description'][:400]}")


def _g(x):
    return "n/a" if x is None else f"{x:.3g}"


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m numeric.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="number of claims (default 2000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ",".join(PATHS))
    ap.add_argument("--out", help="write the summary (and every claim's outcomes) as JSON here")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: one per CPU)")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help=f"seconds per path per claim (default {BUDGET_S:g}; over it: undecided)")
    args = ap.parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    if args.n < 1 or args.jobs < 1 or any(p not in PATHS for p in paths) or not paths:
        ap.error(f"--n and --jobs must be >= 1 and --paths a subset of {','.join(PATHS)}")
    summary = run(args.n, args.seed, paths, args.jobs, budget_s=args.budget)
    report(summary)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(summary, fh, indent=1)
    return 1 if summary["false_verdicts"] else 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
