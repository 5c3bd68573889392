"""The verdict rule: a pure function of the checks that name a claim."""
from derive.results import Check
from derive.verdict import analytic

WITNESS = {"sizes": {"n": 3}, "point": {"v[0,0]": "1/2"}, "lhs": "0.5", "rhs": "0.25"}


def proof(path, outcome, part="main", setting="masked"):
    status = {"proved": "pass", "disproved": "fail", "undecided": "skipped"}[outcome]
    return Check(f"derive/X/{part}/{path}/{setting}", "derive", "proof", "X", status, 0.0, f"{outcome} by {path}",
                 path=path, part=part, setting=setting, outcome=outcome,
                 witness=WITNESS if outcome == "disproved" else None)


def test_proved_needs_the_general_path():
    assert analytic([proof("general", "proved"), proof("fixed", "proved")])["verdict"] == "proved"
    v = analytic([proof("general", "undecided"), proof("fixed", "proved"), proof("rational", "proved")])
    assert v["verdict"] == "undecided" and v["paths"] == {"general": "undecided", "fixed": "proved", "rational": "proved"}


def test_general_proof_with_other_paths_undecided_is_still_proved():
    v = analytic([proof("general", "proved"), proof("fixed", "undecided"), proof("rational", "proved")])
    assert v["verdict"] == "proved" and "undecided on fixed" in v["evidence"]


def test_any_witness_disproves():
    v = analytic([proof("general", "undecided"), proof("fixed", "disproved"), proof("rational", "undecided")])
    assert v["verdict"] == "disproved" and v["witnesses"][0]["lhs"] == "0.5"


def test_proved_and_disproved_by_two_paths_is_an_internal_inconsistency():
    v = analytic([proof("general", "proved"), proof("rational", "disproved")])
    assert v["verdict"] == "failed" and "INTERNAL INCONSISTENCY" in v["evidence"]
    assert v["inconsistencies"] == [{"part": "main", "setting": "masked", "proved_by": "general", "disproved_by": "rational"}]
    # different identities or mask settings are not a clash: the claim is simply disproved
    v = analytic([proof("general", "proved", setting="unmasked"), proof("rational", "disproved")])
    assert v["verdict"] == "disproved" and not v["inconsistencies"]


def test_a_failing_check_never_sits_beside_a_positive_verdict():
    numeric = Check("numeric/api-vs-autograd/float64", "numeric", "numeric", "X", "fail", 0.0, {"max_rel_error": 1e-7})
    v = analytic([proof("general", "proved"), proof("fixed", "proved"), numeric])
    assert v["verdict"] == "failed" and "numeric/api-vs-autograd/float64" in v["evidence"]
    control = Check("derive/M1/rational", "derive", "negative-control", "X", "fail", 0.0, "accepted", outcome="proved")
    assert analytic([proof("general", "proved"), control])["verdict"] == "failed"


def test_numeric_only_is_confirmed_and_nothing_is_not_run():
    numeric = Check("numeric/X/main/float64", "numeric", "numeric", "X", "pass", 0.0, {})
    assert analytic([numeric])["verdict"] == "confirmed"
    assert analytic([])["verdict"] == "not-run"


def test_a_perturbed_api_kernel_makes_its_claim_fail(monkeypatch):
    """The API kernel's dS off by a factor 1 + 1e-7 (identity kernels untouched): C1 must not stay positive."""
    import pytest

    torch = pytest.importorskip("torch")
    from derive import claims as registry
    from derive import verdict
    from derive.profile import QUICK
    from derive.results import Results
    from numeric import api
    from numeric.stage import NumericStage

    def perturbed(original):
        def kernel(*args):
            alpha, b, ds, dq, dk, dv = original(*args)
            return alpha, b, ds * (1 + 1e-7), dq, dk, dv
        return kernel

    for name in ("attention_backward_masked", "attention_backward_unmasked"):
        monkeypatch.setattr(api.gen, name, perturbed(getattr(api.gen, name)))
    results = Results({})
    stage = NumericStage(results, QUICK, "cpu", 0, log=lambda *a: None)
    torch.set_num_threads(1)
    stage.api_agreement()
    stage.identities(api.gen)
    verdict.assign(results, registry.claims())
    assert any(c.status == "fail" and c.claim == "C1" for c in results.checks)
    assert results.claims["C1"]["verdict"] == "failed", results.claims["C1"]
    assert results.claims["C2"]["verdict"] == "confirmed"  # its own checks passed


def test_a_path_contradicting_another_is_reported_loudly():
    """With a fault planted in the rational path, it says the wrong formula holds at its sizes while the others
    disprove it elsewhere; the stage's cross-check finds a witness at the rational path's own sizes: an internal
    inconsistency."""
    from derive import claims as registry
    from derive import engine_faults
    from derive.all import open_verdicts, summary
    from derive.claims import Claim, Identity
    from derive.profile import QUICK
    from derive.results import Results
    from derive.stage import DeriveStage

    wrong = Claim("Z1", "wrong advantage", "x", "test", (Identity("main", ("n", "n"), "scores",
                  lambda m, i, j: m.derived_grad("s", i, j), lambda m, i, j: m.alpha(i, j) * m.b(i, j), "x"),))
    registry.register(wrong)
    try:
        results = Results({})
        fault = next(f for f in engine_faults.FAULTS if f.id == "rational-differences-ignored")
        with engine_faults.planted(fault):
            DeriveStage(results, QUICK, 0, log=lambda *a: None, only_claims={"Z1"}).run()
    finally:
        del registry.REGISTRY["Z1"]
    z1 = results.claims["Z1"]
    assert z1["verdict"] == "failed" and z1["evidence"].startswith("INTERNAL INCONSISTENCY")
    assert {(x["proved_by"], x["disproved_by"]) for x in results.inconsistencies()} >= {("rational", "cross-check")}
    assert all(x["held_at"] for x in results.inconsistencies())
    assert "INTERNAL INCONSISTENCY in claim Z1" in summary(results, {"Z1"})
    assert open_verdicts(results, [wrong]) == ["Z1"]


def test_kill_matrix_is_a_function_of_the_checks():
    from derive.results import Check, Results
    from derive.verdict import kill_matrix

    checks = [Check("derive/M1/general", "derive", "negative-control", "C1", "pass", 0.0, "", "rejected", "drop",
                    path="general", outcome="disproved"),
              Check("derive/M1/fixed", "derive", "negative-control", "C1", "fail", 0.0, "", "rejected", "drop",
                    path="fixed", outcome="undecided"),
              Check("derive/M15/adversarial", "derive", "negative-control", "C9", "pass", 0.0, "", "rejected", "3.5",
                    path="adversarial", outcome="disproved"),
              Check("numeric/M1", "numeric", "negative-control", "C1", "fail", 0.0, {}, {}, "drop"),
              Check("numeric/M15", "numeric", "negative-control", "C9", "skipped", 0.0, "not emitted", ""),
              Check("derive/M10-lose-1/T/general", "derive", "negative-control", "C6", "pass", 0.0, "", "", "1/T",
                    path="general", outcome="disproved"),
              Check("numeric/X7/jacobian/float64", "numeric", "numeric", "X7", "skipped", 0.0, "not emitted", ""),
              Check("numeric/claim-fuzzer", "numeric", "negative-control", "", "pass", 0.0),
              Check("derive/C1/main/general/masked", "derive", "proof", "C1", "pass", 0.0, path="general",
                    outcome="proved")]
    km = kill_matrix(checks)
    assert km == {"M1": {"claim": "C1", "description": "drop", "general": "rejected", "fixed": "undecided",
                         "rational": "n/a", "adversarial": "n/a", "numeric": "ACCEPTED"},
                  "M15": {"claim": "C9", "description": "3.5", "adversarial": "rejected", "general": "n/a",
                          "fixed": "n/a", "rational": "n/a", "numeric": "n/a"},
                  "M10-lose-1/T": {"claim": "C6", "description": "1/T", "general": "rejected", "fixed": "n/a",
                                   "rational": "n/a", "adversarial": "n/a"}}
    r = Results({}, checks)
    r.derive["kill_matrix"] = {"stale": {"claim": "C1"}}  # a stored matrix never outlives the checks
    assert r.to_json()["derive"]["kill_matrix"] == km


def test_the_numeric_stage_marks_a_bound_constant_not_applicable_in_the_kill_matrix():
    from derive.profile import QUICK
    from derive.results import Results
    from derive.verdict import kill_matrix
    from numeric.stage import NumericStage, generated_module

    r = Results({})
    NumericStage(r, QUICK, "cpu", 0, log=lambda *a: None).mutants(generated_module())
    km = kill_matrix(r.checks)
    assert km["M15-constant-3.5"]["numeric"] == "n/a" and km["M1-drop-baseline"]["numeric"] == "rejected"


def test_the_summary_groups_a_user_s_ids_and_keeps_them_aligned():
    from derive.all import summary
    from derive.results import Results

    results = Results({})
    results.claims.update({cid: {"id": cid, "name": cid, "verdict": v, "evidence": e} for cid, v, e in (
        ("C1", "proved", "proved at general size"), ("X12", "disproved", "witness at n=8: lhs 1 vs rhs 2"),
        ("my_long_claim", "proved", "proved at general size"))})
    text = summary(results, {"C1", "X12", "my_long_claim"}, status=1)
    rows = {line.split()[0]: line for line in text.splitlines() if line.split()[:1] in (["C1"], ["X12"], ["my_long_claim"])}
    assert len({row.index(row.split()[1]) for row in rows.values()}) == 1  # one column for the verdicts
    assert "witness at n=8: lhs 1 vs rhs 2" in rows["X12"]  # a failure's evidence whole
    families = [line.split("(")[0].strip() for line in text.splitlines() if line.startswith("  ")]
    assert families == ["C: the paper's analytic claims", "X", "other ids"]
    assert text.rstrip().endswith("exit status 1: " + __import__("derive.verdict").verdict.EXIT_MEANING[1])
