"""`python -m derive.all`: run the pipeline's stages, write results.json, exit 0 iff all checks pass.

    python -m derive.all [--quick] [--out DIR] [--device auto|cpu|cuda] [--only STAGE[,STAGE]]
                         [--seed N] [--claims FILE]... [--claim ID[,ID]]

Exit status: 0 every check passed (skipped stages do not fail a run), 1 a check failed, 2 bad usage.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from derive import claims as registry
from derive import verdict
from derive.claimfile import ClaimFileError
from derive.results import Results, environment
from derive.stage import PROFILES, DeriveStage

STAGES = ("derive", "codegen", "numeric", "experiments", "report")


class UsageError(Exception):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m derive.all", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="CPU-CI profile: small sizes, few points")
    p.add_argument("--out", default="out", help="output directory (default: out)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="torch device for numeric stages")
    p.add_argument("--only", default=",".join(STAGES), help=f"comma-separated stages among {','.join(STAGES)}")
    p.add_argument("--seed", type=int, default=0, help="seed for every random choice (default 0)")
    p.add_argument("--claims", action="append", default=[], metavar="FILE",
                   help="extra claim file (Python calling derive.claims.register); repeatable")
    p.add_argument("--claim", default="", help="restrict the derive stage to these claim ids (comma-separated)")
    p.add_argument("--typicality", action="store_true",
                   help="experiments stage: also train the typicality study (both arms on 50 further seeds under the "
                        "authors' random protocol and under ours; about 40 minutes on 2 CPU cores). Without it, the "
                        "study's cached results in OUT/cache are reported when present")
    args = p.parse_args(argv)
    args.stages = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in args.stages if s not in STAGES]
    if unknown or not args.stages:
        p.error(f"--only: unknown stage(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(STAGES)}")
    if args.seed < 0:
        p.error("--seed must be non-negative")
    return args


def load_claims(args):
    for path in args.claims:
        try:
            added = registry.load_extra(path)
        except (FileNotFoundError, ClaimFileError) as exc:
            raise UsageError(str(exc)) from exc
        print(f"loaded {len(added)} extra claim(s) from {path}: {', '.join(added) or '-'}")
    known = {c.id for c in registry.claims()}
    wanted = {c.strip() for c in args.claim.split(",") if c.strip()}
    if wanted - known:
        raise UsageError(f"--claim: unknown claim id(s) {', '.join(sorted(wanted - known))}")
    return wanted or None


def resolve_device(requested, stages):
    """The device torch stages will use; derive and report never touch torch."""
    if not set(stages) & {"numeric", "experiments"}:
        return "cpu" if requested == "auto" else requested
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise UsageError("torch is not installed; numeric stages need it (see README)")
    import torch

    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise UsageError("--device cuda was asked for but CUDA is not available on this machine")
    return "cuda" if requested == "cuda" or (requested == "auto" and has_cuda) else "cpu"


def run_stage(stage, results, args, profile, only_claims):
    t0 = time.perf_counter()
    print(f"== stage {stage}")
    if stage == "derive":
        DeriveStage(results, profile, args.seed, only_claims=only_claims).run()
    elif stage == "codegen":
        from derive.codegen import run_stage as codegen

        codegen(results)
    elif stage == "numeric":  # the torch side is loaded only when its stage runs
        from numeric.stage import PROFILES as NUMERIC
        from numeric.stage import NumericStage

        NumericStage(results, NUMERIC[profile.name], results.environment["device"], args.seed).run()
    elif stage == "experiments":
        from numeric.experiments.stage import ExperimentStage

        ExperimentStage(results, profile.name, results.environment["device"], args.seed, args.out,
                        typicality=args.typicality).run()
    else:
        from reports.render import run_stage as report

        report(results, args.out)
    seconds = time.perf_counter() - t0
    checks = [c for c in results.checks if c.stage == stage]
    status = "fail" if any(c.status == "fail" for c in checks) else (
        "skipped" if all(c.status == "skipped" for c in checks) else "pass")
    results.stages[stage] = {"status": status, "seconds": round(seconds, 3), "checks": len(checks)}


def selected_claims(only_claims):
    """The analytic claims this invocation is about: those named by --claim, else every registered one."""
    return [c for c in registry.claims() if not only_claims or c.id in only_claims]


def summary(results, shown):
    lines = ["", f"{'claim':6} {'verdict':18} evidence"]
    for c in results.to_json()["claims"]:
        if c["id"] in shown:
            lines.append(f"{c['id']:6} {c['verdict']:18} {c['evidence']}")
    lines.append("")
    for stage, info in results.stages.items():
        lines.append(f"stage {stage:12} {info['status']:8} {info['seconds']:8.2f}s  {info['checks']} checks")
    counts = {s: sum(1 for c in results.checks if c.status == s) for s in ("pass", "fail", "skipped")}
    lines.append(f"checks: {counts['pass']} passed, {counts['fail']} failed, {counts['skipped']} skipped")
    for c in results.failed():
        lines.append(f"FAILED {c.id} (claim {c.claim or '-'}): {c.measured}")
    for x in results.inconsistencies():
        lines.append(f"INTERNAL INCONSISTENCY in claim {x['claim']}, {x['part']} ({x['setting']}): "
                     f"{x['proved_by']} proved what {x['disproved_by']} disproved with a witness")
    return "\n".join(lines)


def open_verdicts(results, claims):
    """Selected analytic claims whose checks ran but did not end in a positive verdict."""
    return [c.id for c in claims if results.claims.get(c.id, {}).get("verdict") in ("disproved", "undecided", "failed")]


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if hasattr(sys.stdout, "reconfigure"):  # progress lines reach a log file as they are printed
        sys.stdout.reconfigure(line_buffering=True)
    try:
        only_claims = load_claims(args)
        device = resolve_device(args.device, args.stages)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    profile = PROFILES["quick" if args.quick else "default"]
    results = Results(environment(profile.name, device, args.seed))
    t0 = time.perf_counter()
    for stage in STAGES:
        if stage in args.stages:
            run_stage(stage, results, args, profile, only_claims)
    claims = selected_claims(only_claims)
    verdict.assign(results, claims)
    results.environment["wall_seconds"] = round(time.perf_counter() - t0, 3)
    path = results.write(Path(args.out))
    if "report" in results.stages:
        print(f"wrote {Path(args.out) / 'report.html'}, report.tex" + (", report.pdf" if (Path(args.out) / "report.pdf").exists() else ""))
    shown = {c.id for c in claims if c.id in results.claims} | {cid for cid in results.claims if cid.startswith("E")}
    print(summary(results, shown))
    print(f"wrote {path}")
    return 1 if results.failed() or results.inconsistencies() or open_verdicts(results, claims) else 0


if __name__ == "__main__":
    sys.exit(main())
