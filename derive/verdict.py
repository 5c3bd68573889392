"""A claim's verdict, as a pure function of every check that names it (one rule per claim kind).

Analytic claims (identities, and inequalities whose identity steps are proved):

1. a path that proved what another path disproved with a witness (same identity, same mask
   setting) is an internal inconsistency: verdict `failed`, reported loudly;
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
KILL_CELL = {"disproved": "rejected", "proved": "ACCEPTED", "undecided": "undecided"}
MUTANT_COLUMNS = ("general", "fixed", "rational", "adversarial")  # where a mutant is attacked in the derive stage


def _is_path_proof(check):
    return check.kind == "proof" and check.path in PATH_ORDER


def path_outcomes(checks):
    """{path: proved | disproved | undecided} over every identity and mask setting of a claim."""
    by_path = defaultdict(list)
    for c in checks:
        if _is_path_proof(c):
            by_path[c.path].append(c.outcome)
    out = {}
    for path in PATH_ORDER:
        outcomes = by_path.get(path)
        if not outcomes:
            continue
        out[path] = "disproved" if "disproved" in outcomes else "proved" if all(o == "proved" for o in outcomes) else "undecided"
    return out


def inconsistencies(checks):
    """(part, setting, prover, disprover) wherever one path proved what another disproved."""
    cells = defaultdict(dict)
    for c in checks:
        if _is_path_proof(c):
            cells[(c.part, c.setting)][c.path] = c.outcome
    found = []
    for (part, setting), paths in sorted(cells.items()):
        provers = [p for p, o in paths.items() if o == "proved"]
        disprovers = [p for p, o in paths.items() if o == "disproved"]
        found += [(part, setting, a, b) for a in provers for b in disprovers]
    return found


def analytic(checks):
    """{verdict, evidence, paths, witnesses, reasons, inconsistencies} for one analytic claim."""
    proofs = [c for c in checks if _is_path_proof(c)]
    others = [c for c in checks if not _is_path_proof(c)]
    paths = path_outcomes(checks)
    witnesses = [{"check": c.id, **c.witness} for c in proofs if c.outcome == "disproved" and c.witness]
    reasons = {c.id: c.measured for c in proofs if c.outcome == "undecided"}
    clash = inconsistencies(checks)
    failing = [c for c in others if c.status == "fail"]
    base = {"paths": paths, "witnesses": witnesses, "reasons": reasons,
            "inconsistencies": [{"part": p, "setting": s, "proved_by": a, "disproved_by": b} for p, s, a, b in clash]}
    if clash:
        text = "; ".join(f"{a} proved and {b} disproved {p} ({s})" for p, s, a, b in clash)
        return {"verdict": "failed", "evidence": f"INTERNAL INCONSISTENCY: {text}", **base}
    if witnesses:
        first = next(c for c in proofs if c.outcome == "disproved")
        return {"verdict": "disproved", "evidence": f"disproved by {_joined(paths, 'disproved')}: {first.measured}", **base}
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
