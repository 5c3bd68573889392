"""The derive stage end to end: verdicts, kill matrix and results.json schema."""
import json

import pytest

from derive import claims as registry
from derive.all import claim_catalogue
from derive.profile import QUICK
from derive.prove import PATHS
from derive.results import KINDS, STATUSES, VERDICTS, Check, Results
from derive.stage import DeriveStage


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    r = Results(environment={"profile": "quick"}, catalogue=claim_catalogue())
    DeriveStage(r, QUICK, seed=0, log=lambda *a: None).run()
    out = tmp_path_factory.mktemp("derive")
    r.write(out)
    return r, json.loads((out / "results.json").read_text())


def test_every_analytic_claim_is_proved_by_at_least_two_paths(results):
    _, data = results
    claims = {c["id"]: c for c in data["claims"]}
    for cid in [f"C{i}" for i in range(1, 11)]:
        assert claims[cid]["verdict"] == "proved", claims[cid]
    for cid in [f"E{i}" for i in range(1, 8)]:
        assert claims[cid]["verdict"] == "not-run"
    proofs = [c for c in data["checks"] if c["kind"] == "proof"]
    for cid in [f"C{i}" for i in range(1, 11)]:
        paths = {c["detail"] for c in proofs if c["claim"] == cid and c["status"] == "pass"}
        assert len(paths) >= 2 or cid == "C9"


def test_kill_matrix_is_complete(results):
    _, data = results
    matrix = data["derive"]["kill_matrix"]
    assert set(matrix) == {m.id for m in registry.mutants()}
    for mid, row in matrix.items():
        cells = [row[p] for p in PATHS + ("adversarial",)]
        assert "ACCEPTED" not in cells, (mid, row)
        assert cells.count("rejected") >= 1
        if registry.mutants()[[m.id for m in registry.mutants()].index(mid)].constant is None:
            assert all(row[p] == "rejected" for p in PATHS), (mid, row)


def test_negative_controls_are_checks(results):
    _, data = results
    ncs = [c for c in data["checks"] if c["kind"] == "negative-control" and c["id"] != "derive/engine-mutants"]
    assert len(ncs) >= 8 * 3
    assert all(c["status"] == "pass" and c["expected"] == "rejected" for c in ncs)
    assert all(c["outcome"] == "disproved" for c in ncs if c["path"] != "adversarial")


def test_engine_mutants_and_rational_bound_are_recorded(results):
    _, data = results
    em = data["derive"]["engine_mutants"]
    assert em["planted"] >= 10 and em["killed"] == em["planted"] and em["kill_rate"] == 1.0
    assert "Schwartz" in data["derive"]["rational_bound"]
    claims = {c["id"]: c for c in data["claims"]}
    assert claims["C1"]["paths"] == {"general": "proved", "fixed": "holds", "rational": "holds"}
    assert data["inconsistencies"] == []


def test_results_schema(results):
    _, data = results
    assert data["schema_version"] == 1
    for c in data["checks"]:
        assert set(c) >= {"id", "stage", "kind", "claim", "status", "seconds", "measured", "expected"}
        assert c["kind"] in KINDS and c["status"] in STATUSES
        assert c["seconds"] >= 0
    assert len({c["id"] for c in data["checks"]}) == len(data["checks"])
    assert {c["id"] for c in data["claims"]} == set(claim_catalogue())  # every registered claim, run or not
    assert all(c["verdict"] in VERDICTS for c in data["claims"])
    for b in data["benchmarks"]:
        assert set(b) >= {"name", "device", "dtype", "shape", "ours_s", "reference", "reference_s", "ratio"}


def test_scaling_table_covers_n_d_m(results):
    _, data = results
    rows = data["derive"]["scaling"]
    assert {r["varied"] for r in rows} == {"n", "d", "m"}
    assert all(r["all_proved"] and r["seconds"] > 0 for r in rows)


def test_check_validation():
    with pytest.raises(ValueError, match="unknown kind"):
        Check("x", "derive", "vibes", "C1", "pass", 0.0)
    with pytest.raises(ValueError, match="unknown status"):
        Check("x", "derive", "proof", "C1", "ok", 0.0)
    r = Results({})
    r.add(Check("x", "derive", "proof", "C1", "pass", 0.0))
    with pytest.raises(ValueError, match="duplicate"):
        r.add(Check("x", "derive", "proof", "C1", "pass", 0.0))
    with pytest.raises(ValueError, match="unknown verdict"):
        r.set_claim("C1", "probably", "")


def test_a_causal_claim_is_checked_with_the_mask_only():
    from derive.claims import Claim, Identity

    claim = Claim("K1", "causal product", "x", "test", (Identity(
        "main", ("n", "n"), "scores", lambda m, i, j: m.alpha(i, j) * m.alpha(j, i),
        lambda m, i, j: m.delta(i, j) * m.alpha(i, i) * m.alpha(i, i), "x", mask_algebra="causal"),))
    registry.register(claim)
    try:
        r = Results(environment={})
        DeriveStage(r, QUICK, seed=0, log=lambda *a: None, only_claims={"K1"}).run()
    finally:
        del registry.REGISTRY["K1"]
    assert {c.setting for c in r.checks if c.claim == "K1"} == {"masked"}
    assert r.claims["K1"]["verdict"] == "proved", r.claims["K1"]
