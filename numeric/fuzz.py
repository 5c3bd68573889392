"""The claim fuzzer's runner: random claims (derive.fuzz) through every proof path, against a float64 oracle.

Each claim is labelled by the oracle (numeric.oracle); summaries and the command line.

    python -m numeric.fuzz [--n N] [--seed S] [--paths general,fixed,rational] [--out FILE] [--budget S]
                           [--workers N | --scheduler ADDRESS] [--cache DIR] [--chunk K]

A campaign on Dask (numeric.campaign): tasks of CHUNK claims each, on a local cluster started here (one worker per
CPU; --workers 0 runs them in this process) or on a running cluster (--scheduler tcp://host:8786); with --cache
an interrupted campaign resumes. Exit status 1 on a false verdict or a task that failed twice, 2 on bad usage.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from derive import mechanisms
from derive.fuzz.generate import generate_one

# -- running the paths against the oracle --------------------------------------------------------

PATHS = ("general", "fixed", "rational")
# Small to large in n, dimensions pairwise distinct in each and every one different between the two: most false
# claims fail fast at n = 2; what survives meets n = 3. The input width d_x is the costly one (second derivatives at
# the params level grow with d_x (d_k + d_v)): it is 3, then 2 (at d_x = 6 most of the fixed path's time went to its
# budget).
FIXED_GRID = ({"n": 2, "dk": 4, "dv": 5, "m": 6, "dx": 3}, {"n": 3, "dk": 5, "dv": 6, "m": 4, "dx": 2})
BUDGET_S = 8.0  # seconds per path, claim and mask setting: over it the path is undecided (the fixed path's exact zero test is the slow one)
PROGRESS_EVERY = 50
# In the cache key: 2 since the budget holds in a worker's thread (rows cached before it may record a path that ran
# far past its budget and decided; they are not read).
ROWS_FORMAT = 2


POSITIVE = ("proved", "holds")  # proved: at every size (general path); holds: at the sizes the path tried


def _status(out):
    return getattr(out, "status", None) or ("proved" if out.equal else "undecided")


def _verdict(status, true, false_where_held=False):
    """A false verdict: a false claim proved, a true one disproved, or a false one said to hold at sizes where the
    oracle finds it false (`holds` is about the path's own sizes: a claim false only elsewhere is no false verdict).
    A claim the oracle found undefined at both draws (true None: a side divides by 0 there) has no verdict to be
    false about."""
    if true is None:
        return False
    return (status == "proved" and not true) or (status == "disproved" and true) or (status == "holds" and false_where_held)


def _false_where_held(claim, masked, scope, seed):
    """Whether the oracle finds `claim` false at one of the sizes a `holds` covered (one-hot targets, as it labels);
    a `holds` that names no sizes is taken to claim every size."""
    import torch

    from derive import mechanisms
    from derive.model import MECHANISM_DIM_SIZE
    from numeric import oracle

    if not scope:
        return True
    own = {d: MECHANISM_DIM_SIZE for d in mechanisms.get(claim.mechanism).dims}  # as the paths complete sizes
    with torch.enable_grad():
        gaps = [oracle.gap(claim, masked, {**own, **sizes}, True, 3 * seed + k)[0] for k, sizes in enumerate(scope)]
    return any(g is not None and g > oracle.MARGIN for g in gaps)


def run_one(claim, paths, seed, budget_s=BUDGET_S):
    """The oracle's labels and every selected path's outcome, masked and unmasked, for one claim."""
    from derive.model import ShapeError
    from derive.prove import run_path
    from numeric import oracle

    identity = claim.identity()
    options = {"grid": list(FIXED_GRID), "points": 2, "seed": seed * 100_003 + claim.index, "budget_s": budget_s}
    row = {"index": claim.index, "name": claim.name, "mechanism": claim.mechanism, "family": claim.family,
           "level": claim.level, "description": claim.description, "claim": claim.text(), "intended": claim.intended,
           "cases": []}
    for masked in (False, True):
        label_seed = seed * 100_003 + claim.index
        cpu = time.process_time()
        lab = oracle.label(claim, masked, label_seed)
        case = {"masked": masked, "true": lab["true"], "gap": lab["gap"], "one_hot_only": lab["one_hot_only"],
                "oracle_cpu_seconds": round(time.process_time() - cpu, 4), "paths": {}}
        for path in paths:
            cpu = time.process_time()
            try:
                out = run_path(path, identity, masked, claim.name, options)
                res = {"status": _status(out), "seconds": out.seconds, "measured": out.measured[:400]}
            except ShapeError as exc:  # the generator's bug, not the path's
                out, res = None, {"status": "ill-formed", "seconds": 0.0, "measured": str(exc)[:400]}
            res["cpu_seconds"] = round(time.process_time() - cpu, 4)  # this process's CPU: what the load on the machine leaves out
            held_false = (res["status"] == "holds" and lab["true"] is False
                          and _false_where_held(claim, masked, getattr(out, "scope", None), label_seed))
            res["false_verdict"] = _verdict(res["status"], lab["true"], held_false)
            case["paths"][path] = res
        row["cases"].append(case)
    return row


CHUNK = 10  # claims per campaign task: a task's few seconds outweigh its scheduling (~10 ms a round trip)


def fuzz_chunk(seed, start, stop, paths, budget_s):
    """A campaign task: claims start..stop-1 of the seed's stream through `paths`, as rows. Pure: a claim is a
    function of (seed, index), its oracle draws and path options of the seed and the index (torch on one thread
    here, the caller's setting restored after)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [run_one(generate_one(seed, i), tuple(paths), seed, budget_s) for i in range(start, stop)]
    finally:
        torch.set_num_threads(threads)


def tasks(n, seed, paths, budget_s, chunk=CHUNK):
    """The campaign's tasks, named by everything their rows depend on (the cache key)."""
    from derive import __version__
    from numeric import campaign

    tag = f"paths={'+'.join(paths)}/budget={budget_s:g}/v{__version__}/rows{ROWS_FORMAT}"
    return [campaign.Task(f"fuzz/seed={seed}/claims={lo}-{min(lo + chunk, n) - 1}/{tag}", fuzz_chunk,
                          (seed, lo, min(lo + chunk, n), tuple(paths), budget_s)) for lo in range(0, n, chunk)]


def summarise(rows, paths, seconds):
    """The run's figures. A case is one claim in one setting (unmasked, masked): the unit a path decides
    and the oracle labels; `true` / `false` count claims (true: true in both settings, undefined settings aside).
    A case the oracle found undefined (`numeric.oracle.label`) is counted apart and judges no path."""
    cases = [(r, c) for r in rows for c in r["cases"]]
    true_cases = [c for _, c in cases if c["true"] is True]
    closest = min(((c["gap"], r) for r, c in cases if c["true"] is False), key=lambda x: x[0], default=(None, {}))
    n_true = sum(_claim_true(r) for r in rows)
    return {
        "claims": len(rows), "true": n_true, "false": len(rows) - n_true, "cases": len(cases),
        "cases_true": len(true_cases), "cases_false": sum(c["true"] is False for _, c in cases),
        "cases_undefined": sum(c["true"] is None for _, c in cases),
        "claims_intended_false": sum(not r["intended"] for r in rows),
        "one_hot_only": sum(c["one_hot_only"] for _, c in cases),
        "margin": _margin(), "closest_false_gap": closest[0],
        "closest_false_claim": f"{closest[1].get('name')}: {closest[1].get('description')}" if closest[1] else None,
        "largest_true_gap": max((c["gap"] for c in true_cases), default=None),
        "paths": {p: _path_summary(p, cases, len(rows)) for p in paths},
        "families": _families(rows, paths),
        "mechanisms": _mechanisms(rows, paths),
        "false_verdicts": [_false_verdict(r, c, p) for r, c in cases for p in paths if c["paths"][p]["false_verdict"]],
        "ill_formed": sum(c["paths"][p]["status"] == "ill-formed" for _, c in cases for p in paths),
        "seconds": round(seconds, 2), "claims_per_second": round(len(rows) / seconds, 3) if seconds else None,
        "cpu_seconds": round(sum(c.get("oracle_cpu_seconds", 0.0) + sum(r.get("cpu_seconds", 0.0) for r in c["paths"].values())
                                 for _, c in cases), 2)}


def _margin():
    from numeric.oracle import MARGIN

    return MARGIN


def _rate(hits, total):
    return round(hits / total, 4) if total else None


def _claim_true(row):
    """True in every setting where the oracle found it defined (and defined in one at least)."""
    defined = [c["true"] for c in row["cases"] if c["true"] is not None]
    return bool(defined) and all(defined)


def _path_summary(path, cases, n_claims):
    res = [(c["true"], c["paths"][path]) for _, c in cases]
    count = lambda status, truth=None: sum(r["status"] == status and (truth is None or t is truth) for t, r in res)  # noqa: E731
    seconds = sum(r["seconds"] for _, r in res)
    cpu_seconds = sum(r.get("cpu_seconds", 0.0) for _, r in res)
    n_true, n_false = sum(t is True for t, _ in res), sum(t is False for t, _ in res)
    return {"proved": count("proved"), "holds": count("holds"), "disproved": count("disproved"),
            "undecided": count("undecided"), "ill_formed": count("ill-formed"),
            "timeouts": sum("budget" in r["measured"] for _, r in res),
            "true_decided_rate": _rate(count("proved", True) + count("holds", True), n_true),
            "false_decided_rate": _rate(count("disproved", False), n_false),
            "false_verdicts": sum(r["false_verdict"] for _, r in res),
            "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
            "claims_per_second": round(n_claims / seconds, 3) if seconds else None}


def _families(rows, paths):
    """Per generator family: claims, true claims, and each path's share of cases decided correctly."""
    out = {}
    for family in dict.fromkeys(r["family"] for r in rows):
        mine = [r for r in rows if r["family"] == family]
        cases = [c for r in mine for c in r["cases"] if c["true"] is not None]
        d = {"claims": len(mine), "true": sum(_claim_true(r) for r in mine)}
        for p in paths:
            d[f"{p}_decided_rate"] = _rate(sum(_right(c, p) for c in cases), len(cases))
        out[family] = d
    return out


def _right(case, path):
    """The path decided the case as the oracle labels it (proved or holds a true one, disproved a false one)."""
    return case["paths"][path]["status"] in (POSITIVE if case["true"] else ("disproved",))


def _mechanisms(rows, paths):
    """Per mechanism: claims, true claims, cases by label, and per path the share of true cases proved (or held),
    of false cases disproved, of all defined cases decided as labelled, and its false verdicts."""
    out = {}
    for name in sorted(dict.fromkeys(r.get("mechanism", mechanisms.PAPER) for r in rows), key=_mechanism_order):
        mine = [r for r in rows if r.get("mechanism", mechanisms.PAPER) == name]
        cases = [c for r in mine for c in r["cases"]]
        true = [c for c in cases if c["true"] is True]
        false = [c for c in cases if c["true"] is False]
        d = {"claims": len(mine), "true": sum(_claim_true(r) for r in mine), "cases": len(cases),
             "cases_true": len(true), "cases_false": len(false), "cases_undefined": len(cases) - len(true) - len(false),
             "families": {f: sum(r["family"] == f for r in mine) for f in dict.fromkeys(r["family"] for r in mine)},
             "paths": {}}
        for p in paths:
            d["paths"][p] = {
                "true_decided_rate": _rate(sum(c["paths"][p]["status"] in POSITIVE for c in true), len(true)),
                "false_decided_rate": _rate(sum(c["paths"][p]["status"] == "disproved" for c in false), len(false)),
                "decided_rate": _rate(sum(_right(c, p) for c in true + false), len(true) + len(false)),
                "undecided": sum(c["paths"][p]["status"] == "undecided" for c in cases),
                "false_verdicts": sum(c["paths"][p]["false_verdict"] for c in cases),
                "cpu_seconds": round(sum(c["paths"][p].get("cpu_seconds", 0.0) for c in cases), 2)}
        out[name] = d
    return out


def _mechanism_order(name):
    from derive import mechanisms

    order = list(mechanisms.BUILTIN)
    return (order.index(name) if name in order else len(order), name)


def _false_verdict(row, case, path):
    res = case["paths"][path]
    return {"claim": row["name"], "mechanism": row.get("mechanism", mechanisms.PAPER), "path": path, "masked": case["masked"],
            "verdict": res["status"],
            "truth": "true" if case["true"] else "false", "gap": case["gap"], "level": row["level"], "family": row["family"],
            "description": f"{row['description']}: {row['claim']}", "measured": res["measured"]}


def run(n=2000, seed=0, paths=PATHS, workers=None, log=print, budget_s=BUDGET_S, scheduler=None, cache_dir=None,
        chunk=CHUNK, jobs=None):
    """Generate n claims, label them, run the paths, as a Dask campaign (numeric.campaign: a local cluster of
    `workers`, one per CPU by default; `workers=0` in this process; `scheduler` a running cluster; `cache_dir`
    resumes an interrupted run). Returns the summary dict (see `summarise`); a chunk that failed twice is named in
    summary["failed_tasks"] and its claims are missing from the counts. `jobs` is the older name of `workers`."""
    from numeric import campaign

    paths = tuple(paths)
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise ValueError(f"unknown proof path(s) {unknown}; expected some of {PATHS}")
    if not isinstance(n, int) or n < 1 or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"n and chunk must be positive integers, got n={n!r}, chunk={chunk!r}")
    workers = jobs if workers is None else workers
    t0, seen = time.perf_counter(), []

    def arrived(_index, rows):
        before = len(seen)
        seen.extend(rows)
        if len(seen) // PROGRESS_EVERY > before // PROGRESS_EVERY or len(seen) == n:
            _progress(seen, n, paths, time.perf_counter() - t0, log)

    outcome = campaign.run(tasks(n, seed, paths, budget_s, chunk), scheduler=scheduler, workers=workers,
                           cache_dir=cache_dir, log=log, label="fuzz", on_result=arrived)
    rows = sorted((row for part in outcome.results if part for row in part), key=lambda r: r["index"])
    summary = summarise(rows, paths, time.perf_counter() - t0)
    summary.update(seed=seed, selected_paths=list(paths), workers=outcome.workers, scheduler=outcome.scheduler,
                   tasks={"total": len(outcome.results), "computed": outcome.computed, "cached": outcome.cached,
                          "chunk": chunk},
                   failed_tasks=outcome.failed, fixed_grid=list(FIXED_GRID), budget_s=budget_s, rows=rows)
    return summary


def _progress(rows, n, paths, seconds, log):
    cases = [c for r in rows for c in r["cases"]]
    bad = sum(c["paths"][p]["false_verdict"] for c in cases for p in paths)
    true, false = sum(c["true"] is True for c in cases), sum(c["true"] is False for c in cases)
    log(f"fuzz: {len(rows)}/{n} claims  {len(rows) / seconds:.2f} claims/s  cases true {true} false {false}  "
        f"false verdicts {bad}")


def report(summary, log=print):
    """The final summary, as text."""
    o = summary
    log(f"fuzz: {o['claims']} claims ({o['true']} true in both settings, {o['false']} false in one or both), "
        f"{o['cases']} unmasked/masked cases ({o['cases_true']} true, {o['cases_false']} false, "
        f"{o.get('cases_undefined', 0)} undefined; {o['one_hot_only']} true "
        f"only for one-hot targets) in {o['seconds']} s, {o['claims_per_second']} claims/s "
        f"({o.get('cpu_seconds', 0)} CPU s in labelling and the paths, all workers)")
    log(f"oracle: margin {o['margin']:g} relative; largest error on a true case {_g(o['largest_true_gap'])}; "
        f"closest false case {_g(o['closest_false_gap'])} ({o['closest_false_claim']})")
    for path, s in summary["paths"].items():
        log(f"  {path:8s} proved {s['proved']:5d}  holds {s.get('holds', 0):5d}  disproved {s['disproved']:5d}  "
            f"undecided {s['undecided']:5d} "
            f"(timeouts {s['timeouts']})  decided: true {_pct(s['true_decided_rate'])} false {_pct(s['false_decided_rate'])}  "
            f"false verdicts {s['false_verdicts']}  {s['claims_per_second']} claims/s")
    if summary.get("mechanisms"):
        paths = list(summary["paths"])
        log("  per mechanism: claims (true), then per path the share of cases decided as the oracle labels them "
            "[true proved/held, false disproved], false verdicts")
        for name, m in summary["mechanisms"].items():
            cells = "  ".join(f"{p} {_pct(s['decided_rate'])} [{_pct(s['true_decided_rate'])}, "
                              f"{_pct(s['false_decided_rate'])}] {s['false_verdicts']}"
                              for p, s in m["paths"].items() if p in paths)
            log(f"  {name:8s} {m['claims']:5d} ({m['true']:4d})  {cells}")
    for name, why in summary.get("failed_tasks", {}).items():
        log(f"FAILED TASK {name} (its claims are not counted): {why}")
    for v in summary["false_verdicts"]:
        log(f"FALSE VERDICT {v['path']} {v['verdict']} a {v['truth']} identity ({'masked' if v['masked'] else 'unmasked'}, "
            f"gap {v['gap']:.2g}): {v['claim']} {v['description'][:400]}")


def _g(x):
    return "n/a" if x is None else f"{x:.3g}"


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main(argv=None, prog="python -m numeric.fuzz"):
    from derive import options
    from numeric import campaign

    ap = options.parser(prog, __doc__, parents=[
        options.seed(), options.json_file("write the summary (and every claim's outcomes) as JSON here", old=["--out"]),
        options.campaign()])
    ap.add_argument("--n", type=int, default=2000, metavar="N", help="number of claims")
    ap.add_argument("--paths", default=",".join(PATHS), metavar="PATH[,PATH]",
                    help="comma-separated subset of " + ",".join(PATHS))
    ap.add_argument("--budget", type=float, default=BUDGET_S, metavar="S",
                    help="seconds per path, claim and mask setting; over it: undecided")
    ap.add_argument("--chunk", type=int, default=CHUNK, metavar="N", help="claims per Dask task")
    ap.add_argument("--cache", default=None, metavar="DIR",
                    help="keep each finished task's rows here: an interrupted campaign resumes from them")
    ap.add_argument("--jobs", type=options.workers_type, dest="workers", help=argparse.SUPPRESS)  # --workers' older name
    args = ap.parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    if args.n < 1 or args.chunk < 1 or any(p not in PATHS for p in paths) or not paths:
        ap.error(f"--n and --chunk must be >= 1 and --paths a subset of {','.join(PATHS)}")
    if not args.budget > 0:
        ap.error("--budget must be a positive number of seconds")
    try:
        summary = run(args.n, args.seed, paths, args.workers, budget_s=args.budget, scheduler=args.scheduler,
                      cache_dir=args.cache, chunk=args.chunk)
    except campaign.CampaignError as exc:
        return campaign.refused(ap.prog, exc)
    report(summary)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=1)
    return 1 if summary["false_verdicts"] or summary["failed_tasks"] else 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
