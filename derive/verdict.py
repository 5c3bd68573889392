"""A claim's verdict, as a pure function of every check that names it (one rule per claim kind).

Analytic claims (identities, and inequalities whose identity steps are proved):

1. a path that proved what another path disproved with a witness (same identity, same mask
   setting), or found it `holds` at a set of sizes that includes the witness's, is an internal
   inconsistency: verdict `failed`, reported loudly. A witness at sizes a fixed-size path did not try
   contradicts nothing: that path's `holds` is about its own sizes only;
2. any witness against the claim: `disproved`;
3. any other failing check that names the claim (a negative control a path accepted, a numeric
   check of the generated code, the adversarial search): `failed` — never beside a positive verdict;
4. the general path proved every identity, masked and unmasked: `proved`;
5. no proof ran but numeric checks did and passed: `confirmed`; nothing ran: `not-run`;
6. otherwise `undecided`, with the reasons.

Empirical claims (`empirical`): a rule check (kind `rule`, one per question the claim is asked: the
paper's streams replayed, fresh streams, or the one measurement) carries its rule's verdict, reason
and measurements.

1. any failing check that names the claim (a negative control its rule did not reject, an invalid
   experiment, a rule fed non-finite numbers): `failed`;
2. no rule check: `not-run`;
3. otherwise the verdict of the rule check labelled `fresh`, or of the only one; every rule check's
   verdict is kept under `verdicts`, and the evidence says each in turn.
"""
from __future__ import annotations

from collections import defaultdict

PATH_ORDER = ("general", "fixed", "rational")
CROSS_CHECK = "cross-check"  # a witness searched at the sizes a path holds at, when another path has a witness elsewhere
# The run's exit status, and what each means: the main job's summary, its --help and the report's banner read these.
OPEN = ("disproved", "undecided", "failed")  # an analytic verdict that makes a run exit 1
EXIT_MEANING = {0: "every check passed and every analytic claim reached its verdict",
                1: "a check failed, an analytic claim was disproved or left undecided, or two proof paths contradict "
                   "each other",
                2: "bad usage"}


def exit_status(failed_checks, inconsistencies, analytic_verdicts):
    """0 or 1, from the failed checks, the internal inconsistencies and the verdicts of the analytic claims."""
    return 1 if failed_checks or inconsistencies or any(v in OPEN for v in analytic_verdicts) else 0


KILL_CELL = {"disproved": "rejected", "proved": "ACCEPTED", "holds": "ACCEPTED", "undecided": "undecided"}
MUTANT_COLUMNS = ("general", "fixed", "rational", "adversarial")  # where a mutant is attacked in the derive stage


def _is_path_proof(check):
    return check.kind == "proof" and check.path in PATH_ORDER


def path_outcomes(checks):
    """{path: proved | holds | disproved | undecided} over every identity and mask setting of a claim."""
    by_path = defaultdict(list)
    for c in checks:
        if _is_path_proof(c):
            by_path[c.path].append(c.outcome)
    out = {}
    for path in PATH_ORDER:
        outcomes = by_path.get(path)
        if not outcomes:
            continue
        out[path] = ("disproved" if "disproved" in outcomes else "proved" if all(o == "proved" for o in outcomes)
                     else "holds" if all(o in ("proved", "holds") for o in outcomes) else "undecided")
    return out


def contradicts(outcome, scope, witness_sizes):
    """Whether a path's positive outcome is contradicted by a certified witness at `witness_sizes` (same identity,
    same mask setting): a `proved` (every size) always is; a `holds` only when the witness's sizes are among
    those it tried (`scope`); a witness elsewhere is no contradiction."""
    if outcome == "proved":
        return True
    if outcome == "holds":
        return witness_sizes is not None and any(dict(s) == dict(witness_sizes) for s in scope or ())
    return False


def inconsistencies(checks):
    """(part, setting, prover, disprover, sizes) wherever one path's positive outcome is contradicted by a witness
    of another path or of the stage's cross-check at its sizes (`contradicts`); sizes is None for a `proved`, else
    the witness's sizes, which the `holds` covered."""
    cells = defaultdict(list)
    for c in checks:
        if _is_path_proof(c) or (c.kind == "proof" and c.path == CROSS_CHECK):
            cells[(c.part, c.setting)].append(c)
    found = []
    for (part, setting), cell in sorted(cells.items()):
        disprovers = [d for d in cell if d.outcome == "disproved"]
        for c in cell:
            if c.path not in PATH_ORDER:
                continue
            for d in disprovers:
                sizes = (d.witness or {}).get("sizes")
                if d.path != c.path and contradicts(c.outcome, c.scope, sizes):
                    found.append((part, setting, c.path, d.path, None if c.outcome == "proved" else sizes))
    return _unique(found)


def _unique(found):
    seen, out = set(), []
    for p, s, a, b, z in found:
        key = (p, s, a, b, None if z is None else tuple(sorted(z.items())))
        if key not in seen:
            seen.add(key)
            out.append((p, s, a, b, z))
    return out


def clash_record(part, setting, a, b, sizes):
    """The results.json form of an inconsistency; `held_at`: the witness's sizes, where the holding path said holds."""
    out = {"part": part, "setting": setting, "proved_by": a, "disproved_by": b}
    return out if sizes is None else {**out, "held_at": dict(sizes)}


def describe_clash(x):
    """One line for an inconsistency record (`clash_record`, as results.json holds it)."""
    if x.get("held_at"):
        at = ",".join(f"{d}={v}" for d, v in x["held_at"].items())
        return f"path {x['proved_by']} found it holds at {at}, where path {x['disproved_by']} disproved it with a witness"
    return f"path {x['proved_by']} proved what path {x['disproved_by']} disproved with a witness"


def analytic(checks):
    """{verdict, evidence, paths, witnesses, reasons, inconsistencies} for one analytic claim."""
    proofs = [c for c in checks if _is_path_proof(c)]
    others = [c for c in checks if not _is_path_proof(c)]
    paths = path_outcomes(checks)
    witnesses = [{"check": c.id, **c.witness} for c in proofs if c.outcome == "disproved" and c.witness]
    reasons = {c.id: c.measured for c in proofs if c.outcome == "undecided"}
    clash = inconsistencies(checks)
    failing = [c for c in others if c.status == "fail"]
    records = [clash_record(*x) for x in clash]
    base = {"paths": paths, "witnesses": witnesses, "reasons": reasons, "inconsistencies": records}
    if clash:
        text = "; ".join(f"{describe_clash(x)}: {x['part']} ({x['setting']})" for x in records)
        return {"verdict": "failed", "evidence": f"INTERNAL INCONSISTENCY: {text}", **base}
    if witnesses:
        first = next(c for c in proofs if c.outcome == "disproved")
        held = _joined(paths, "holds")
        note = f" ({held}: holds at the sizes tried, not the witness's)" if held else ""
        return {"verdict": "disproved", "evidence": f"disproved by {_joined(paths, 'disproved')}{note}: {first.measured}",
                **base}
    if failing:
        names = ", ".join(c.id for c in failing[:6]) + (f" and {len(failing) - 6} more" if len(failing) > 6 else "")
        return {"verdict": "failed", "evidence": f"failing checks: {names}", **base}
    if paths.get("general") == "proved":
        return {"verdict": "proved", "evidence": _proved_evidence(paths, others), **base}
    if not proofs:
        numeric = [c for c in others if c.kind == "numeric"]
        if numeric:
            return {"verdict": "confirmed", "evidence": f"{len(numeric)} numeric checks passed; proofs not run in this invocation",
                    **base}
        return {"verdict": "not-run", "evidence": "no check ran", **base}
    first = next(iter(reasons.values()), "the general path did not run")
    return {"verdict": "undecided", "evidence": f"general path {paths.get('general', 'not run')}: {first}", **base}


def _joined(paths, outcome):
    return ", ".join(p for p, o in paths.items() if o == outcome)


def _proved_evidence(paths, others):
    text = "proved at general size"
    also = _joined({p: o for p, o in paths.items() if p != "general"}, "proved")
    if also:
        text += f"; also proved by {also}"
    held = _joined(paths, "holds")
    if held:
        text += f"; holds at the sizes tried on {held}"
    open_paths = _joined(paths, "undecided")
    if open_paths:
        text += f"; undecided on {open_paths}"
    numeric = [c for c in others if c.kind == "numeric" and c.status == "pass"]
    if numeric:
        text += f"; {len(numeric)} numeric checks passed"
    return text


def assign(results, claims):
    """Set the verdict of every analytic claim in `claims` that some check names."""
    by_claim = defaultdict(list)
    for c in results.checks:
        by_claim[c.claim].append(c)
    for claim in claims:
        checks = by_claim.get(claim.id, [])
        if not checks:
            continue
        v = analytic(checks)
        results.set_claim(claim.id, v.pop("verdict"), v.pop("evidence"), claim.name, statement=claim.statement,
                          ref=claim.ref, derivation=claim.derivation, kind=claim.kind,
                          parts=[{"name": p.name, "latex": p.latex} for p in claim.parts], **v)


def empirical(checks):
    """{verdict, evidence, verdicts, measured} for one empirical claim, from the checks naming it."""
    rules = [c for c in checks if c.kind == "rule"]
    label = lambda c: c.id.rsplit("/", 1)[-1]  # noqa: E731  experiments/E1/verdict/fresh -> fresh
    verdicts = {label(c): {"verdict": c.measured["verdict"], "reason": c.measured["reason"], "on": c.detail,
                           **{k: c.measured[k] for k in ("seeds", "measured") if k in c.measured}} for c in rules}
    failing = [c for c in checks if c.status == "fail"]
    if failing:
        names = ", ".join(c.id for c in failing[:6]) + (f" and {len(failing) - 6} more" if len(failing) > 6 else "")
        return {"verdict": "failed", "evidence": f"failing checks: {names}", "verdicts": verdicts}
    if not rules:
        return {"verdict": "not-run", "evidence": "no rule was evaluated", "verdicts": verdicts}
    main = next((c for c in rules if label(c) == "fresh"), rules[0])
    if len(rules) == 1:
        evidence = main.measured["reason"]
    else:
        evidence = " ".join(f"{c.detail}: {c.measured['verdict']}: {c.measured['reason']}." for c in rules)
    context = " ".join(c.measured["context"] for c in rules if c.measured.get("context"))
    return {"verdict": main.measured["verdict"], "evidence": evidence + (" " + context if context else ""),
            "verdicts": verdicts if len(rules) > 1 else {}, "measured": main.measured.get("measured", {})}


def assign_empirical(results, ids):
    """Set the verdict of every empirical claim in `ids` that some check names (`empirical`)."""
    by_claim = defaultdict(list)
    for c in results.checks:
        by_claim[c.claim].append(c)
    for cid in ids:
        if by_claim.get(cid):
            v = empirical(by_claim[cid])
            verdicts = v.pop("verdicts")
            results.set_claim(cid, v.pop("verdict"), v.pop("evidence"), **({"verdicts": verdicts} if verdicts else {}), **v)


def kill_matrix(checks):
    """{mutant id: {claim, description, column: cell}}: every mutant against every place it is attacked, as a
    pure function of the checks (`derive/<mutant>/<path>` and `numeric/<mutant>`). A cell is `rejected`,
    `ACCEPTED`, `undecided`, or `n/a` where the mutant is not attacked (a bound constant has no closed form
    for the paths or the generated code; a closed form is not searched adversarially)."""
    rows = {}
    for c in checks:
        if not c.claim or c.kind != "negative-control":
            continue
        if c.stage == "derive" and c.path and c.id.endswith("/" + c.path):  # derive/<mutant id>/<path>
            mid, column, cell = c.id[len("derive/"):-len(c.path) - 1], c.path, KILL_CELL.get(c.outcome, "undecided")
        elif c.stage == "numeric":  # numeric/<mutant id> (a mutant id may itself contain '/')
            mid, column = c.id[len("numeric/"):], "numeric"
            cell = "n/a" if c.status == "skipped" else "rejected" if c.status == "pass" else "ACCEPTED"
        else:
            continue
        row = rows.setdefault(mid, {"claim": c.claim, "description": c.detail})
        row["description"] = row["description"] or c.detail
        row[column] = cell
    order = ("claim", "description", *MUTANT_COLUMNS, "numeric")
    for mid, row in rows.items():
        if any(k in row for k in MUTANT_COLUMNS):
            for k in MUTANT_COLUMNS:
                row.setdefault(k, "n/a")
        rows[mid] = {k: row[k] for k in order if k in row}
    return rows
