"""A trainable mechanism and an empirical claim, each from one file of the user's: the worked examples
(docs/examples/attention_sink.py, softmax with an attention sink and its `layer`; docs/examples/em_never_slower.py,
a claim measured from the mechanism grid's numbers with its rule and controls), copied outside the project and
loaded with --claims. The mechanism is proved in the mechanisms table, trained on the sticky chain in the mechanism
grid and in the wind tunnel (in Dask workers that register it from its file) and reported; the claim is decided,
its controls say both verdicts, and it has its report section; no other file is touched."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from derive import mechanisms
from numeric.experiments import mechanism_layers as ml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "attention_sink.py"
CLAIM = ROOT / "docs" / "examples" / "em_never_slower.py"


def test_the_sink_layer_forms_its_reference_weights_in_float64(loaded):
    loaded(EXAMPLE)
    assert "sink" in ml.names() and ml.params("sink") == ("W_Q", "W_K", "W_V", "W_O")
    cfg = ml.sticky.StickyConfig(length=12)
    p = {n: t.double() for n, t in ml.init_params(cfg, "sink", (3, 5), 2).items()}
    x = torch.randn(1, 2, 11, cfg.d_in, dtype=torch.float64)
    w = ml.weights("sink", p, x, ml.causal(11))
    want = mechanisms.get("sink").reference(w["reference"])
    assert torch.allclose(w["w"], want, rtol=0, atol=1e-14)
    assert (w["w"].sum(-1) < 1).all()  # the sink takes its share of every row
    dense = ml.mix("sink", p, x)
    blocked = ml.mix("sink", p, x, blocks=ml.query_blocks(11, 3))
    assert torch.allclose(dense, blocked, rtol=0, atol=1e-14)


@pytest.mark.slow
def test_a_users_mechanism_and_claim_files_are_proved_trained_decided_and_reported(tmp_path):
    mine, claim = tmp_path / "my_sink.py", tmp_path / "my_claim.py"
    shutil.copy(EXAMPLE, mine)
    shutil.copy(CLAIM, claim)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "derive.all", "--quick", "--claims", str(mine), "--claims", str(claim),
                           "--out", str(out), "--only", "derive,experiments,report"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a failing check (the sink's saturation is undecided)
    r = json.loads((out / "results.json").read_text())
    assert r["mechanisms"]["table"]["sink"]["questions"]["routing"]["verdict"] == "proved"
    grid = r["experiments"]["mechanisms"]
    assert "sink" in grid["config"]["mechanisms"] and not grid["campaign"]["failed"]
    assert grid["routing"]["sink"] == ["W_Q", "W_K", "W_O"] and grid["content"]["sink"] == ["W_V"]
    assert grid["competition"]["sink"] is False  # read from the proved table: the sink absorbs part of each row
    sink = grid["mechanisms"]["sink"]
    for arm in ("sgd", "em_like"):
        assert 0 < sink["arms"][arm]["final_loss"] < 3  # trained: finite and below log(8) + 1
    assert sink["arms"]["em_like"]["final_loss"] != sink["arms"]["sgd"]["final_loss"]
    assert "sink" in grid["rule"]["reason"] and "sink" in grid["step_seconds"]
    assert "sink" in grid["tunnel"]["mechanisms"] and grid["tunnel"]["mechanisms"]["sink"]["finite"]
    assert "mechanism(s) sink" in proc.stdout and "extra claim(s) from " + str(claim) + ": X1" in proc.stdout
    x1 = r["experiments"]["measured_claims"]["X1"]
    assert x1["verdict"] == "reproduced" and x1["measured"]["mechanisms"] == len(grid["config"]["mechanisms"])
    assert {c: e["verdict"] for c, e in x1["controls"].items()} == {
        "X1/identical-arms": "not-reproduced", "X1/em-behind": "not-reproduced", "X1/em-ahead": "reproduced"}
    assert [c["verdict"] for c in r["claims"] if c["id"] == "X1"] == ["reproduced"]
    checks = {c["id"]: c["status"] for c in r["checks"] if "X1" in c["id"]}
    assert checks == {"experiments/X1/verdict/rule": "pass", "experiments/negative-control/X1/identical-arms": "pass",
                      "experiments/negative-control/X1/em-behind": "pass", "experiments/positive-control/X1/em-ahead": "pass"}
    html = (out / "report.html").read_text()
    assert html.count("sink") >= 3  # the mechanisms table's row, the grid's and the tunnel's
    section = html[html.index('id="measured-X1"'):]
    assert "em-never-slower" in section[:400] and "gap.sink" in section[:4000]
    assert "\\subsection*{X1: em-never-slower}" in (out / "report.tex").read_text()


def test_a_claim_module_in_the_rules_package_registers_itself(tmp_path, monkeypatch):
    """A new claim is one module of numeric/experiments/rules: registry.discover finds its CLAIM."""
    from numeric.experiments import registry, rules

    (tmp_path / "x9.py").write_text(CLAIM.read_text().replace('"X1', '"X9').replace("register(EmpiricalClaim(",
                                                                                      "CLAIM = (EmpiricalClaim("))
    monkeypatch.setattr(rules, "__path__", [*rules.__path__, str(tmp_path)])
    try:
        assert registry.discover() == ["X9"]
        claim = registry.REGISTRY["X9"]
        grid = {"mechanisms": {"mechanisms": {"a": {"arms": {"sgd": {"final_loss": 2.0}, "em_like": {"final_loss": 1.9}}},
                                              "b": {"arms": {"sgd": {"final_loss": 2.0}, "em_like": {"final_loss": 2.1}}}}}}
        m = claim.measure(grid)
        assert claim.rule(**m).verdict == "partly-reproduced" and claim.measure({}) is None
        assert registry.discover() == []  # registered once
    finally:
        registry.REGISTRY.pop("X9", None)
        sys.modules.pop("numeric.experiments.rules.x9", None)
