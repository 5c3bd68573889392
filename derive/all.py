"""`python -m derive.all`: run the pipeline's stages, write results.json, exit 0 iff all checks pass.

    python -m derive.all [--profile quick|default] [--quick] [--out DIR] [--device auto|cpu|cuda[:N]]
                         [--only STAGE[,STAGE]] [--seed N] [--claims FILE]... [--claim ID[,ID]] [--threads N]
                         [--extended]
    agv run ...          the same, through the project's console command

A run merges into an existing DIR/results.json: the checks of the stages it runs replace theirs, every
other stage's checks are kept, and each analytic claim's verdict is recomputed from the merged checks.
`--only report` re-renders the report from DIR/results.json and leaves that file as it is.

This module is the only one that imports across packages upward (derive -> numeric, reports): it runs every
stage and joins the two claim registries; below it, numeric and reports import derive, never the reverse.

Exit status: 0 every check in DIR/results.json passed (skipped stages do not fail a run), 1 a check
failed, 2 bad usage (including an --out that cannot be written and a results.json that cannot be read).
"""
from __future__ import annotations

import os
import re
import signal
import sys
import time
import traceback
from pathlib import Path

from derive import claimfile, mechanisms, options, verdict
from derive import claims as registry
from derive import profile as profiles
from derive.results import THREAD_ENV, Results, ResultsError, default_threads, environment
from derive.stage import DeriveStage

STAGES = ("derive", "codegen", "numeric", "experiments", "report")
# results.json `derive` entries written by a stage other than derive (the kill matrix is computed from checks)
DERIVE_KEYS = {"fuzz": "numeric"}


class UsageError(Exception):
    pass


def parse_args(argv, prog="python -m derive.all"):
    p = options.parser(prog, __doc__, parents=[
        options.profile(("quick", "default"), help="the sizes of every stage (quick: the CPU-CI profile, about a "
                                                   "minute on 2 cores; default: 17-25 minutes)"),
        options.out_dir(help="directory of results.json, the report and the experiments' cache"),
        options.device(help="torch device of the numeric and experiments stages (auto: CUDA when torch sees one)"),
        options.seed()],
        epilog="exit status: " + "; ".join(f"{k} {v}" for k, v in verdict.EXIT_MEANING.items()))
    p.add_argument("--only", default=",".join(STAGES), metavar="STAGE[,STAGE]",
                   help=f"the stages to run, among {','.join(STAGES)}")
    p.add_argument("--claims", action="append", default=[], metavar="FILE",
                   help="extra claim file (Python calling derive.claims.register); repeatable")
    p.add_argument("--traceback", action="store_true",
                   help="with an error in a --claims file, print the Python traceback of the user's code too")
    p.add_argument("--claim", default="", metavar="ID[,ID]",
                   help="restrict the derive stage to these claim ids (default: all)")
    p.add_argument("--threads", type=options.positive_int, default=None, metavar="N",
                   help="torch threads for the experiments stage (default: OMP_NUM_THREADS or MKL_NUM_THREADS when "
                        "set, else min(2, CPU count)); the numeric stage's benchmarks stay pinned to 1")
    p.add_argument("--extended", "--typicality", dest="extended", action="store_true",
                   help="experiments stage: also train the opt-in studies of the default profile: the typicality "
                        "study (both arms on 50 further seeds under the authors' random protocol and under ours; about "
                        "45 minutes on 2 CPU cores) and the value/routing LR-ratio sweep (about 4 minutes). Without it, "
                        "their cached results in OUT/cache are reported when present")
    args = p.parse_args(argv)
    args.stages = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in args.stages if s not in STAGES]
    if unknown or not args.stages:
        p.error(f"--only: unknown stage(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(STAGES)}")
    return args


def check_out(out):
    """Refuse, before any work, an --out that is a file or whose directory cannot be created or written."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    if path.is_symlink() and not path.exists():
        raise UsageError(f"--out {out}: a symbolic link to nothing")
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise UsageError(f"--out {out}: directory is not writable")
        return path
    parent = path.absolute().parent
    if not parent.exists():
        raise UsageError(f"--out {out}: parent directory {parent} does not exist")
    if not parent.is_dir():
        raise UsageError(f"--out {out}: parent {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: parent directory {parent} is not writable")
    return path


def load_previous(out, stages):
    """The Results of an earlier run in DIR, or None; a results.json that cannot be used is bad usage."""
    path = Path(out) / "results.json"
    if not path.exists() and not path.is_symlink():
        if stages == ["report"]:
            raise UsageError(f"--only report: {path} not found: run the other stages first")
        return None
    try:
        return Results.read(path)
    except ResultsError as exc:
        raise UsageError(f"{exc}; nothing was run or overwritten (move the file away or choose another --out)") from exc


def resolve_threads(requested):
    """--threads N, else the count set in the environment, else min(2, CPU count). With --threads the
    environment is set too, so torch (imported later) and worker processes see the same count."""
    if requested is not None:
        for name in THREAD_ENV:
            os.environ[name] = str(requested)
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(requested)
        return requested
    return default_threads()


def load_claims(args):
    for path in args.claims:
        from numeric.experiments import registry as empirical  # a file may register empirical claims too
        from numeric.reference_check import check_reference  # a mechanism's torch reference, checked at load

        mechanisms.builtin()
        before, before_mechanisms = set(empirical.REGISTRY), set(mechanisms.REGISTRY)
        try:
            added = claimfile.load(path, mechanism_checks=(check_reference,))
        except (FileNotFoundError, claimfile.ClaimFileError) as exc:
            if args.traceback and exc.__cause__ is not None:
                traceback.print_exception(exc.__cause__, file=sys.stderr)
            raise UsageError(str(exc)) from exc
        taken = sorted(set(added) & set(empirical_ids()))
        if taken:
            for cid in added:
                registry.REGISTRY.pop(cid, None)
            raise UsageError(f"{path}: claim id {', '.join(taken)} is an empirical claim of this project; choose another id")
        measured = [cid for cid in empirical.REGISTRY if cid not in before]
        clash = sorted(set(measured) & {c.id for c in registry.claims()})
        if clash:
            for cid in measured:
                empirical.REGISTRY.pop(cid, None)
            raise UsageError(f"{path}: empirical claim id {', '.join(clash)} is an analytic claim's; choose another id")
        added = added + measured
        new = [m for m in mechanisms.REGISTRY if m not in before_mechanisms]
        print(f"loaded {len(added)} extra claim(s) from {path}: {', '.join(added) or '-'}"
              + (f"; mechanism(s) {', '.join(new)}" if new else ""))
    known = {c.id for c in registry.claims()}
    wanted = {c.strip() for c in args.claim.split(",") if c.strip()}
    if wanted - known:
        raise UsageError(f"--claim: unknown claim id(s) {', '.join(sorted(wanted - known))}")
    return wanted or None


def resolve_device(requested, stages):
    """(device, reason): the device torch stages will use and why; derive and report never touch torch."""
    if not set(stages) & {"numeric", "experiments"}:
        return ("cpu" if requested == "auto" else requested), "no torch stage runs"
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise UsageError("torch is not installed; numeric stages need it (see README)")
    from numeric import device as devices

    try:
        return devices.resolve(requested)
    except RuntimeError as exc:
        raise UsageError(str(exc)) from exc


def torch_environment(device):
    """What the run records of torch's device and precision; TF32 is switched off here for every torch stage."""
    from numeric import device as devices

    return {**devices.describe(device), "precision": devices.pin_precision()}


def run_stage(stage, results, args, profile, only_claims):
    t0 = time.perf_counter()
    print(f"== stage {stage}")
    if stage == "derive":
        DeriveStage(results, profile, args.seed, only_claims=only_claims).run()
    elif stage == "codegen":
        from derive.codegen import run_stage as codegen

        codegen(results)
    elif stage == "numeric":  # the torch side is loaded only when its stage runs
        from numeric.stage import NumericStage

        NumericStage(results, profile, results.environment["device"], args.seed).run()
    elif stage == "experiments":
        from numeric.experiments.stage import ExperimentStage

        ExperimentStage(results, profile, results.environment["device"], args.seed, args.out,
                        extended=args.extended, threads=results.environment.get("threads")).run()
    else:
        from reports.render import run_stage as report

        report(results, args.out)
    seconds = time.perf_counter() - t0
    checks = [c for c in results.checks if c.stage == stage]
    env = results.environment
    results.stages[stage] = {"status": stage_status(checks), "seconds": round(seconds, 3), "checks": len(checks),
                             "profile": env.get("profile"), "device": env.get("device"), "seed": args.seed}


def empirical_ids():
    """The ids of the empirical claims (numeric.experiments.registry): reserved, like the built-in analytic ones."""
    from numeric.experiments import registry as empirical

    return tuple(empirical.REGISTRY)


def claim_catalogue():
    """Every registered claim's facts (name, statement, ref), analytic then empirical: the two registries
    joined here, where the CLI may import across packages."""
    from numeric.experiments import registry as empirical

    out = {c.id: {"name": c.name, "statement": c.statement, "ref": c.ref, "kind": c.kind} for c in registry.claims()}
    out.update(empirical.catalogue())
    return out


def stage_status(checks):
    return "fail" if any(c.status == "fail" for c in checks) else (
        "skipped" if all(c.status == "skipped" for c in checks) else "pass")


def merge(previous, fresh, ran, only_claims):
    """`fresh` (this invocation's stages `ran`) merged into `previous` (DIR/results.json): the checks, benchmarks,
    experiments and derive entries of the stages that ran replace theirs; every other stage's are kept. Under
    --claim the derive stage reruns only the named claims, so only their derive checks are replaced (the kill
    matrix follows: it is computed from the checks). Claim verdicts are recomputed afterwards (`recompute_verdicts`)."""
    ran = set(ran)

    def rerun(stage, claim=None):
        if stage not in ran:
            return False
        return not (stage == "derive" and only_claims and claim is not None and claim not in only_claims)

    order = {s: i for i, s in enumerate(STAGES)}
    fresh_ids = {c.id for c in fresh.checks}
    kept = [c for c in previous.checks if not rerun(c.stage, c.claim) and c.id not in fresh_ids]
    checks = sorted(kept + fresh.checks, key=lambda c: order.get(c.stage, len(order)))  # stable: a stage's order kept

    benchmarks = [b for b in previous.benchmarks if not rerun(str(b.get("name", "")).split("/")[0])] + fresh.benchmarks

    experiments = fresh.experiments if "experiments" in ran else previous.experiments

    derive = {}
    for key, value in previous.derive.items():
        owner = DERIVE_KEYS.get(key, "derive")
        # an entry of a stage that reran is replaced, or dropped if that run did not write it; a derive run
        # restricted by --claim does not write every entry (engine mutants), so what it did not write is kept
        if owner not in ran or (key not in fresh.derive and owner == "derive" and only_claims):
            derive[key] = value
    derive.update(fresh.derive)  # the kill matrix is not kept: Results computes it from the merged checks
    claims = {**previous.claims, **fresh.claims}  # every verdict is recomputed from the merged checks

    stages = {**{s: v for s, v in previous.stages.items() if s not in ran}, **fresh.stages}
    stages = dict(sorted(stages.items(), key=lambda kv: order.get(kv[0], len(order))))
    for stage, info in stages.items():  # status and count describe the merged checks
        mine = [c for c in checks if c.stage == stage]
        if mine:
            info.update(status=stage_status(mine), checks=len(mine))
    env = dict(fresh.environment)
    return Results(env, checks, claims, benchmarks, experiments, derive, stages, catalogue=fresh.catalogue)


def _analytic_entry(cid, claim):
    """A claim entry whose verdict derive.verdict computes from checks (registered, or written with its parts)."""
    return cid in {c.id for c in registry.claims()} or "parts" in claim


def recompute_verdicts(results):
    """Every analytic claim's verdict from the checks naming it (derive.verdict), as a pure function of them:
    one without checks is left out (not-run). Empirical claims likewise, from their rule checks (kind `rule`)."""
    by_claim = {}
    for c in results.checks:
        by_claim.setdefault(c.claim, []).append(c)
    registered = [c for c in registry.claims() if c.id in by_claim]
    for cid, entry in list(results.claims.items()):
        if _analytic_entry(cid, entry) and (cid not in by_claim or cid in {c.id for c in registered}):
            del results.claims[cid]  # recomputed below from nothing but its checks, or not-run
    verdict.assign(results, registered)
    for cid, entry in results.claims.items():  # from a claim file not loaded in this invocation
        if "parts" in entry and cid not in {c.id for c in registered}:
            v = verdict.analytic(by_claim[cid])
            entry.update(v)
    empirical = [cid for cid, facts in results.catalogue.items() if facts.get("kind") == "empirical"]
    for cid in empirical:
        if any(c.kind == "rule" for c in by_claim.get(cid, [])):
            results.claims.pop(cid, None)
    verdict.assign_empirical(results, empirical)


def selected_claims(only_claims):
    """The analytic claims this invocation is about: those named by --claim, else every registered one."""
    return [c for c in registry.claims() if not only_claims or c.id in only_claims]


FAMILIES = {"C": "the paper's analytic claims", "H": "heads and biases (ours)"}
ANALYTIC_COLUMNS = ("proved", "holds", "disproved", "undecided", "failed", "not-run")


def _family(cid):
    """An id's family: its letters before the first digit (C1 -> C, X12 -> X); "other ids" for an id without one."""
    m = re.match(r"([A-Za-z]+)\d", cid)
    return m.group(1) if m else "other ids"


def _short(text, width):
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def summary(results, shown, ran=None, report=None, status=None):
    """The verdict at the end of a run: analytic claims per family and one by one, the empirical claims' measured
    numbers beside the paper's, the mechanisms table's cells, the stages, every failure by name, the report's path
    and what the exit status means."""
    from numeric.experiments import registry as empirical

    claims = [c for c in results.to_json()["claims"] if c["id"] in shown]
    analytic = [c for c in claims if c["id"] not in empirical.REGISTRY]
    lines = ["", "== verdict"]
    w = max([6, *(len(c["id"]) for c in claims)])  # the id column
    if analytic:
        families = {}
        for c in analytic:
            families.setdefault(_family(c["id"]), []).append(c["verdict"])
        lines.append(f"{'analytic claims':42}" + "".join(f"{v:>10}" for v in ANALYTIC_COLUMNS))
        for fam, verdicts in families.items():
            label = f"  {fam}: {FAMILIES[fam]} ({len(verdicts)})" if fam in FAMILIES else f"  {fam} ({len(verdicts)})"
            lines.append(f"{label:42}" + "".join(f"{verdicts.count(v):>10}" for v in ANALYTIC_COLUMNS))
        lines.append("")
        lines.append(f"{'claim':{w}} {'verdict':18} evidence")
        for c in analytic:
            positive = c["verdict"] in ("proved", "holds")  # a failure's evidence (witness, reason) is shown whole
            lines.append(f"{c['id']:{w}} {c['verdict']:18} {_short(c['evidence'], 110) if positive else c['evidence']}")
    shown_empirical = [c for c in claims if c["id"] in empirical.REGISTRY]
    if shown_empirical:
        lines += ["", f"{'claim':{w}} {'verdict':18} {'measured':66} the paper's"]
        for c in shown_empirical:
            entry = empirical.REGISTRY[c["id"]]
            measured = entry.headline_of(c.get("measured")) or _short(c["evidence"], 66)
            lines.append(f"{c['id']:{w}} {c['verdict']:18} {_short(measured, 66):66} {entry.paper or '(ours)'}")
    table = (results.derive.get("mechanisms") or {}).get("table") or {}
    if table:
        cells = [q.get("verdict", "?") for row in table.values() for q in row.get("questions", {}).values()]
        counts = {v: cells.count(v) for v in dict.fromkeys(sorted(cells))}
        lines += ["", f"mechanisms table: {len(table)} mechanisms, {len(cells)} cells: "
                  + ", ".join(f"{n} {v}" for v, n in counts.items())]
    lines.append("")
    for stage, info in results.stages.items():
        kept = "  (kept from the previous run)" if ran is not None and stage not in ran else ""
        lines.append(f"stage {stage:12} {info['status']:8} {info['seconds']:8.2f}s  {info['checks']} checks{kept}")
    counts = {s: sum(1 for c in results.checks if c.status == s) for s in ("pass", "fail", "skipped")}
    lines.append(f"checks: {counts['pass']} passed, {counts['fail']} failed, {counts['skipped']} skipped")
    for c in results.failed():
        lines.append(f"FAILED {c.id} (claim {c.claim or '-'}): {c.measured}")
    for x in results.inconsistencies():
        lines.append(f"INTERNAL INCONSISTENCY in claim {x['claim']}, {x['part']} ({x['setting']}): {verdict.describe_clash(x)}")
    if report is not None:
        lines.append(f"report: {report}")
    if status is not None:
        lines.append(f"exit status {status}: {verdict.EXIT_MEANING[status]}")
    return "\n".join(lines)


def empirical_shown(results):
    """The empirical claims the summary lists: every claim a rule check names (E1-E7, W1), and E-claims on record."""
    return {c.claim for c in results.checks if c.kind == "rule"} | {cid for cid in results.claims if cid.startswith("E")}


def open_verdicts(results, claims):
    """Selected analytic claims whose checks ran but did not end in a positive verdict."""
    return [c.id for c in claims if results.claims.get(c.id, {}).get("verdict") in verdict.OPEN]


def exit_status(results, claims):
    return verdict.exit_status(results.failed(), results.inconsistencies(),
                               [results.claims.get(c.id, {}).get("verdict") for c in claims])


def report_only(args, previous, only_claims):
    """`--only report`: render from DIR/results.json as it is, and leave the file untouched."""
    from reports.render import render

    out = Path(args.out)
    print("== stage report")
    try:
        status = render(out)
    except Exception as exc:  # reported as the report stage does, not as a traceback
        print(f"  FAIL report: {type(exc).__name__}: {exc}")
        status = {"html": ("fail", str(exc), 0.0)}
    for name, (s, msg, seconds) in status.items():
        print(f"  {s.upper():4} report/{name:8} {seconds:6.2f}s  {msg}")
    claims = selected_claims(only_claims)
    shown = {c.id for c in claims if c.id in previous.claims} | empirical_shown(previous)
    failed = any(s == "fail" for s, _, _ in status.values())
    code = 1 if failed else exit_status(previous, claims)
    print(summary(previous, shown, ran=["report"], report=out / "report.html", status=code))
    print(f"rendered from {out / 'results.json'} (left unchanged)")
    return code


def main(argv=None, prog="python -m derive.all"):
    """SIGTERM ends a run as an exception would (exit status 143): a save in progress removes its temporary."""
    def terminate(signum, frame):
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        return _main(argv, prog)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv, prog):
    args = parse_args(sys.argv[1:] if argv is None else argv, prog)
    if hasattr(sys.stdout, "reconfigure"):  # progress lines reach a log file as they are printed
        sys.stdout.reconfigure(line_buffering=True)
    try:
        check_out(args.out)
        previous = load_previous(args.out, args.stages)
        only_claims = load_claims(args)
        threads = resolve_threads(args.threads)
        device, device_reason = resolve_device(args.device, args.stages)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.stages == ["report"]:
        return report_only(args, previous, only_claims)
    profile = profiles.get(args.profile)
    fresh = Results(environment(profile.name, device, args.seed, threads), catalogue=claim_catalogue())
    fresh.environment["device_reason"] = device_reason
    if set(args.stages) & {"numeric", "experiments"}:
        fresh.environment.update(torch_environment(device))
        print(f"device: {device} ({device_reason}); TF32 off")
    t0 = time.perf_counter()
    ran = [s for s in STAGES if s in args.stages]
    for stage in ran:
        if stage != "report":
            run_stage(stage, fresh, args, profile, only_claims)
    if previous is not None:
        results = merge(previous, fresh, ran, only_claims)
        others = {(i.get("profile"), i.get("seed")) for s, i in results.stages.items() if s not in ran and "profile" in i}
        if others - {(profile.name, args.seed)}:
            print(f"note: merged with stages of {Path(args.out) / 'results.json'} run under another profile or seed "
                  f"(see its stages)")
    else:
        results = fresh
    recompute_verdicts(results)
    results.environment["stages_run"] = ran
    if "report" in ran:  # rendered from the merged results, verdicts included
        run_stage("report", results, args, profile, only_claims)
    claims = selected_claims(only_claims)
    results.environment["wall_seconds"] = round(time.perf_counter() - t0, 3)
    path = results.write(Path(args.out))
    if "report" in results.stages and "report" in ran:
        print(f"wrote {Path(args.out) / 'report.html'}, report.tex" + (", report.pdf" if (Path(args.out) / "report.pdf").exists() else ""))
    shown = {c.id for c in claims if c.id in results.claims} | empirical_shown(results)
    code = exit_status(results, claims)
    report = Path(args.out) / "report.html"
    print(summary(results, shown, ran=ran if previous is not None else None,
                  report=report if report.exists() and "report" in results.stages else None, status=code))
    print(f"wrote {path}")
    return code


if __name__ == "__main__":
    sys.exit(main())
