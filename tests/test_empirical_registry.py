"""E1–E7, W1 and G1: the registry, verdicts as a pure function of rule checks, and the fresh groups combined."""
import pytest

from derive import verdict
from derive.results import Check, Results
from numeric.experiments import registry, rules
from numeric.experiments.frame import combine


def rule(cid, label, v, reason="why", on="", **extra):
    return Check(f"experiments/{cid}/verdict/{label}", "experiments", "rule", cid, "pass", 0.0,
                 {"verdict": v, "reason": reason, "measured": {}, **extra}, None, on)


def test_registry_holds_every_empirical_claim_once_with_its_rule_and_thresholds():
    assert registry.IDS == (*(f"E{i}" for i in range(1, 8)), "W1", "G1", "G2", "V1", "G3")  # G3: rules/g3.py's CLAIM
    for c in registry.claims():
        assert c.ref.startswith("arXiv 2512.22473" if c.id.startswith("E") else "ours: ") and c.statement and c.reads
        own = getattr(rules, c.id.lower())  # the rule, or (a claim that is one module: CLAIM) its module
        home = rules if callable(own) else own
        assert c.rule is (own if callable(own) else getattr(own, c.id.lower()))
        for name, value in c.thresholds.items():  # named after the rules module's constants, same values
            assert getattr(home, name) == value
    assert registry.REGISTRY["E1"].figure["speedup"] == 2.3 and registry.REGISTRY["E2"].figure["h_min"] == 1.8292
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.REGISTRY["E1"])


def test_empirical_verdict_is_the_fresh_rule_with_every_question_in_the_evidence():
    checks = [rule("E1", "replay", "partly-reproduced", "losses as printed", on="Paper's streams"),
              rule("E1", "fresh", "reproduced", "speedup in interval", on="Fresh streams", seeds=20),
              Check("experiments/sticky/valid", "experiments", "experiment", "E1", "pass", 0.0)]
    v = verdict.empirical(checks)
    assert v["verdict"] == "reproduced"
    assert v["evidence"].index("Paper's streams: partly-reproduced") < v["evidence"].index("Fresh streams: reproduced")
    assert v["verdicts"]["replay"]["verdict"] == "partly-reproduced" and v["verdicts"]["fresh"]["seeds"] == 20


def test_empirical_verdict_fails_on_any_failing_check_and_is_not_run_without_a_rule():
    control = Check("experiments/negative-control/E6/plus-A", "experiments", "negative-control", "E6", "fail", 0.0)
    assert verdict.empirical([rule("E6", "rule", "reproduced"), control])["verdict"] == "failed"
    valid = Check("experiments/sticky/valid", "experiments", "experiment", "E1", "pass", 0.0)
    assert verdict.empirical([valid])["verdict"] == "not-run"
    single = verdict.empirical([rule("E7", "rule", "partly-reproduced", "only rises")])
    assert (single["verdict"], single["evidence"]) == ("partly-reproduced", "only rises")


def test_assign_empirical_names_claims_from_the_catalogue():
    r = Results({}, catalogue=registry.catalogue())
    r.add(rule("E4", "rule", "not-reproduced", "attention late"))
    verdict.assign_empirical(r, registry.IDS)
    assert r.claims["E4"]["verdict"] == "not-reproduced" and r.claims["E4"]["name"] == "frame-precision"
    assert r.claims["E4"]["ref"].startswith("arXiv 2512.22473") and "E5" not in r.claims
    assert {c["id"]: c["verdict"] for c in r.to_json()["claims"]}["E5"] == "not-run"


def test_frame_records_of_groups_combine_weighted_by_seeds():
    def record(att, val):
        return {"sgd": {"steps": [0, 5, 10], "tol": 0.2, "alpha_js_to_final": att, "alpha_jsd_to_final": att,
                        "values_rel_change_to_final": val, "V_rel_change_to_final": val}}

    out = combine([(1, record([1.0, 0.1, 0.0], [1.0, 1.0, 0.0])), (3, record([1.0, 0.5, 0.0], [1.0, 0.2, 0.0]))])["sgd"]
    assert out["alpha_jsd_to_final"] == pytest.approx([1.0, 0.4, 0.0])
    assert out["values_rel_change_to_final"] == pytest.approx([1.0, 0.4, 0.0])
    assert out["attention_jsd_stable_step"] == 10 and out["values_stable_step"] == 10  # 0.4 > 0.2 at step 5
    with pytest.raises(ValueError, match="checkpoints"):
        bad = record([1.0, 0.0, 0.0], [1.0, 0.0, 0.0])
        bad["sgd"]["steps"] = [0, 4, 10]
        combine([(1, record([1.0, 0.1, 0.0], [1.0, 1.0, 0.0])), (1, bad)])


def test_a_rule_fed_non_finite_numbers_fails_its_claim(tmp_path):
    from numeric.experiments.stage import ExperimentStage

    r = Results({}, catalogue=registry.catalogue())
    stage = ExperimentStage(r, "quick", "cpu", 0, tmp_path, log=lambda *a: None)
    stage._rule_check("E6", "rule", "reproduced", "fine", {"agreement": 0.99, "control": float("nan")})
    stage._rule_check("E7", "rule", "reproduced", "fine", {"margin": 0.8, "n": 3, "ok": True})
    verdict.assign_empirical(r, registry.IDS)
    assert r.checks[0].status == "fail" and r.claims["E6"]["verdict"] == "failed"
    assert r.checks[1].status == "pass" and r.claims["E7"]["verdict"] == "reproduced"


def test_a_measured_claim_is_decided_with_its_controls_and_its_faults_stay_its_own(tmp_path):
    """The experiments stage's claims measured from the other experiments (EmpiricalClaim.measure): one decided with
    its controls; one whose measure raises, one without a positive control and one whose inputs did not run are
    their own checks' failures (or skip), and the stage goes on."""
    from numeric.experiments.stage import ExperimentStage

    ok = lambda m: rules.Rule("reproduced" if m["x"] > 0 else "not-reproduced", f"x = {m['x']}", {"x": m["x"]})
    make = lambda cid, measure, controls: registry.EmpiricalClaim(
        cid, cid.lower(), "x is positive", "a test", {}, ("x",), lambda **kw: ok(kw), measure=measure, controls=controls)
    both = lambda m: {f"{m['id']}/zero": ("negative", ok({"x": 0})), f"{m['id']}/one": ("positive", ok({"x": 1}))}
    claims = [make("T1", lambda d: {"x": d["x"], "id": "T1"}, both),
              make("T2", lambda d: {"x": 1 / 0}, both),
              make("T3", lambda d: {"x": 1, "id": "T3"}, lambda m: {"T3/zero": ("negative", ok({"x": 0}))}),
              make("T4", lambda d: None, both)]
    for c in claims:
        registry.register(c)
    try:
        results = Results({})
        stage = ExperimentStage(results, "quick", "cpu", 0, tmp_path, log=lambda *a, **k: None)
        stage.data["x"] = 2.0
        stage.measured_claims()
    finally:
        for c in claims:
            registry.REGISTRY.pop(c.id)
    status = {c.id: c.status for c in results.checks if c.claim.startswith("T")}  # (G3 skipped: its inputs did not run)
    assert status == {"experiments/T1/verdict/rule": "pass", "experiments/negative-control/T1/zero": "pass",
                      "experiments/positive-control/T1/one": "pass", "experiments/T2/measure": "fail",
                      "experiments/T3/measure": "fail", "experiments/T4/measure": "skipped"}
    detail = {c.id: c.detail for c in results.checks}
    assert "ZeroDivisionError" in detail["experiments/T2/measure"]
    assert "at least one of each" in detail["experiments/T3/measure"]
    by = {cid: [c for c in results.checks if c.claim == cid] for cid in ("T1", "T2", "T4")}
    assert verdict.empirical(by["T1"])["verdict"] == "reproduced"
    assert verdict.empirical(by["T2"])["verdict"] == "failed" and verdict.empirical(by["T4"])["verdict"] == "not-run"
    assert list(stage.data["measured_claims"]) == ["T1"] and stage.data["measured_claims"]["T1"]["verdict"] == "reproduced"
