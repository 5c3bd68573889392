"""W1: the rule on synthetic drifts, its negative controls, the EM-like gradient scaling, and a tiny watched run."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch import nn

from derive import verdict
from derive.results import Results
from numeric.experiments import deep_watch as dw
from numeric.experiments import registry, rules
from numeric.experiments import stats as st
from numeric.experiments.windtunnel import bayes_predictive, sample

TINY = dw.DeepConfig(steps=8, every=2, batch=4, seeds=(0, 1), d_model=16, ff=32, length=8, probe_batch=4,
                     eval_batch=16, resamples=50, checkpoints=3)


def drifts(routing, values, shape=(2, 2, 4)):
    """One optimizer's rule input: the same routing and values series (R,) for every (seed, layer, head)."""
    r, v = np.asarray(routing, float), np.asarray(values, float)
    return {"steps": list(range(10, 10 * (r.size + 1), 10)), "routing": np.broadcast_to(r, (*shape, r.size)).copy(),
            "values": np.broadcast_to(v, (*shape, v.size)).copy()}


t = np.arange(1, 21)
EARLY, LATE, FLAT = np.exp(-t / 2), np.exp(-t / 8), np.ones(t.size)


@pytest.fixture(scope="module")
def tiny_run():
    return dw.run(TINY)


# -- the rule ---------------------------------------------------------------------------------------------
def test_rule_freezing_heads_reproduce_and_never_freezing_do_not():
    r = rules.w1({n: drifts(EARLY, LATE) for n in dw.OPTIMIZERS})
    assert r.verdict == "reproduced", r.reason
    m = r.measured["optimizers"]["sgd"]
    assert m["frame_first_fraction"] == 1.0 and m["heads_frozen"] == m["units"] == 16
    head = m["heads"][0]
    assert head["freeze_step"][0] < head["values_settle_step"][0] and head["frame_first"] == 2
    assert head["verdict"] == "reproduced" and (head["layer"], head["head"]) == (0, 0)
    assert head["value_change_after_freeze"][0] > head["routing_drift_after_freeze"][0] > 0
    never = rules.w1({n: drifts(FLAT, LATE) for n in dw.OPTIMIZERS})
    assert never.verdict == "not-reproduced" and never.measured["optimizers"]["adamw"]["heads_frozen"] == 0
    assert never.measured["optimizers"]["adamw"]["median_freeze_step"] is None
    together = rules.w1({n: drifts(LATE, LATE) for n in dw.OPTIMIZERS})  # a tie is not earlier
    assert together.verdict == "not-reproduced"
    values_first = rules.w1({n: drifts(LATE, EARLY) for n in dw.OPTIMIZERS})
    assert values_first.verdict == "not-reproduced"


def test_rule_mixed_is_partly():
    across = rules.w1({"sgd": drifts(EARLY, LATE), "em_like": drifts(FLAT, LATE), "adamw": drifts(FLAT, LATE)})
    assert across.verdict == "partly-reproduced" and "not under every optimizer" in across.reason
    within = drifts(FLAT, LATE)
    within["routing"][:, 0, 0] = EARLY  # one head of 4 in layer 0 on both seeds: 2 of 16 units
    within["routing"][:, 1, :2] = EARLY  # and two heads of layer 1: 6 of 16 units
    within["routing"][1, 1, 3] = EARLY  # one seed of one more head: that head partly
    r = rules.w1({n: within for n in dw.OPTIMIZERS})
    assert r.measured["optimizers"]["sgd"]["frame_first_fraction"] == pytest.approx(7 / 16)
    assert [h["verdict"] for h in r.measured["optimizers"]["sgd"]["heads"]] == [
        "reproduced", "not-reproduced", "not-reproduced", "not-reproduced",
        "reproduced", "reproduced", "not-reproduced", "partly-reproduced"]
    assert r.verdict == "partly-reproduced" and r.measured["optimizers"]["sgd"]["verdict"] == "partly-reproduced"
    within["routing"][:, 1, 2:] = EARLY  # 10 of 16: most
    assert rules.w1({n: within for n in dw.OPTIMIZERS}).verdict == "reproduced"


def test_settle_index_needs_a_lasting_fall_from_the_early_peak():
    x = [0.1, 0.5, 1.0, 0.9, 0.5, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
    assert rules.settle_index(x) == (5, 1.0)  # the early level is the peak of the first quarter, not x[0]
    dip = [1.0] * 10 + [0.1, 0.1]  # two quiet records are fewer than W1_HOLD: no freeze
    assert rules.W1_HOLD == 3 and rules.settle_index(dip)[0] == len(dip)
    assert rules.settle_index([1.0] * 9 + [0.1] * 3)[0] == 9
    with pytest.raises(ValueError, match="one shape"):
        rules.w1({"sgd": {"steps": [10, 20], "routing": np.zeros((1, 1, 1, 2)), "values": np.zeros((1, 1, 2, 2))}})


def test_a_series_that_never_moved_is_not_a_freeze():
    """Routing whose drift is 0 throughout has nothing to freeze: not 'froze first', even against values that
    never settle; values that never moved did not keep refining. The never-settles control built from such a
    run is still not-reproduced."""
    steps = list(range(10, 110, 10))
    still, moving = np.zeros((2, 2, 4, 10)), np.ones((2, 2, 4, 10))
    falling = np.broadcast_to(np.exp(-np.arange(10.0)), (2, 2, 4, 10)).copy()
    assert rules.settle_index(np.zeros(10)) == (0, 0.0)
    run = {n: {"steps": steps, "routing": still, "values": moving} for n in ("sgd", "adamw")}
    assert rules.w1(run).verdict == "not-reproduced"
    assert rules.w1({n: {"steps": steps, "routing": falling, "values": still} for n in ("sgd",)}).verdict == "not-reproduced"
    assert rules.w1({n: {"steps": steps, "routing": falling, "values": moving} for n in ("sgd",)}).verdict == "reproduced"
    controls = rules.negative_controls({"W1": {"optimizers": run}})
    assert all(r.verdict == "not-reproduced" for r in controls.values())
    with pytest.raises(ValueError, match="non-empty 1-D"):
        rules.settle_index([])


def test_negative_controls_are_not_reproduced_on_synthetic_and_real_drifts(tiny_run):
    for cid in ("W1/attention-at-values-rate", "W1/routing-never-settles"):
        rule = rules.NEGATIVE_CONTROLS[cid]()
        assert rule.verdict == "not-reproduced", (cid, rule.reason)
    assert rules.w1(**rules.synthetic_measurements()["W1"]).verdict == "reproduced"
    real = rules.negative_controls({"W1": {"optimizers": dw.rule_inputs(tiny_run, TINY)}})
    assert set(real) == {"W1/attention-at-values-rate", "W1/routing-never-settles"}
    assert all(r.verdict == "not-reproduced" for r in real.values())


def test_registered_with_named_thresholds():
    c = registry.REGISTRY["W1"]
    assert c.rule is rules.w1 and c.name == "frame-precision-deep" and c.ref.startswith("ours: E4 in a 2-layer, 4-head")
    assert {k: getattr(rules, k) for k in c.thresholds} == c.thresholds and set(c.thresholds) >= {"W1_TOL", "W1_MOST"}


# -- the experiment ---------------------------------------------------------------------------------------
def test_em_like_scaling_touches_exactly_the_value_slice():
    torch.manual_seed(0)
    model = dw.DeepTunnel(TINY)
    y = sample(TINY.tunnel(), 4, torch.Generator().manual_seed(3))
    dw.next_symbol_loss(model, y).backward()
    before = {n: p.grad.clone() for n, p in model.named_parameters()}
    dw.scale_value_grads(model, 10.0)
    E = TINY.d_model
    for name, p in model.named_parameters():
        if name.endswith(("self_attn.in_proj_weight", "self_attn.in_proj_bias")):
            assert torch.equal(p.grad[: 2 * E], before[name][: 2 * E])  # Q and K slices unchanged
            assert torch.allclose(p.grad[2 * E:], 10.0 * before[name][2 * E:])  # V slice x ratio
            assert before[name][2 * E:].abs().sum() > 0
        else:
            assert torch.equal(p.grad, before[name]), name
    assert sum(isinstance(m, nn.MultiheadAttention) for m in model.modules()) == TINY.layers


def test_tiny_run_watches_two_layers_of_four_heads(tiny_run):
    records = TINY.steps // TINY.every + 1
    for runs in tiny_run["runs"].values():
        assert len(runs) == len(TINY.seeds)
        for r in runs:
            for q in dw.QUANTITIES:
                arr = r["series"][q]
                assert arr.shape == (2, 4, records - (q in dw.DRIFTS)) and np.isfinite(arr).all(), q
            assert (r["series"]["c9_slack"] >= -1e-6).all()  # C9 holds on the deep model's own gradients
            assert len(r["losses"]) == TINY.steps and len(r["kl_bits"]) == len(TINY.checkpoint_steps())
    first = {n: [r["losses"][0] for r in runs] for n, runs in tiny_run["runs"].items()}
    assert first["sgd"] == first["em_like"] == first["adamw"]  # same initial weights and first batch per seed
    assert tiny_run["runs"]["sgd"][0]["losses"][1] != tiny_run["runs"]["em_like"][0]["losses"][1]
    assert dw.finite(tiny_run)
    inputs = dw.rule_inputs(tiny_run, TINY)
    assert np.asarray(inputs["adamw"]["routing"]).shape == (2, 2, 4, records - 1) and inputs["sgd"]["steps"][0] == TINY.every
    rule = rules.w1(inputs)
    data = dw.summarise(tiny_run, TINY, rule.measured["optimizers"])
    o = data["optimizers"]["em_like"]
    assert o["value_lr"] == pytest.approx(10 * TINY.sgd_lr) and len(o["heads"]) == 8
    assert o["kl_bits_ci95"][0] <= o["kl_bits"] <= o["kl_bits_ci95"][1] and o["kl_bits"] >= 0
    assert np.asarray(o["series"]["js"]).shape == (2, 4, records - 1) and len(o["series"]["drift_steps"]) == records - 1
    assert data["sites"] == ["encoder.layers.0.self_attn", "encoder.layers.1.self_attn"]


def test_kl_to_bayes_equals_a_direct_computation():
    torch.manual_seed(1)
    model = dw.DeepTunnel(TINY).double()
    tunnel = TINY.tunnel()
    y = sample(tunnel, 3, torch.Generator().manual_seed(5))
    bayes = bayes_predictive(tunnel, y)
    got = dw.kl_to_bayes_bits(model, y, bayes)
    with torch.no_grad():
        p = torch.softmax(model(y[:, :-1]), -1)
    for b in range(3):
        direct = np.mean([sum(float(bayes[b, i, k]) * math.log2(float(bayes[b, i, k]) / float(p[b, i, k]))
                              for k in range(TINY.symbols)) for i in range(TINY.length - 1)])
        assert float(got[b]) == pytest.approx(direct, rel=1e-10) and direct > 0


def test_bootstrap_interval_over_evaluation_sequences():
    v = np.array([[0.1, 0.2, 0.3, 0.4], [0.2, 0.2, 0.4, 0.6]])
    lo, hi = st.bootstrap_mean_ci(v, 500, seed=3)
    assert lo < v.mean() < hi and st.bootstrap_mean_ci(v, 500, seed=3) == [lo, hi]
    assert st.bootstrap_mean_ci(np.full((2, 5), 0.25), 100) == [0.25, 0.25]


def test_config_and_profile_sizes_are_checked():
    from derive.profile import DEFAULT, QUICK

    with pytest.raises(ValueError, match="multiple of every"):
        dataclasses.replace(TINY, steps=10, every=3).validate()
    with pytest.raises(ValueError, match="deep_seeds"):
        QUICK.replace("experiments", deep_seeds=(0,))
    with pytest.raises(ValueError, match="deep_every"):
        QUICK.replace("experiments", deep_every=7)
    for profile in (QUICK, DEFAULT):
        x = profile.experiments
        assert len(x.deep_seeds) >= 2 and x.deep_steps // x.deep_every >= 4
    assert QUICK.experiments.deep_steps * 10 <= DEFAULT.experiments.deep_steps


def test_stage_records_the_rule_and_the_data_and_reads_its_cache(tmp_path):
    from numeric.experiments.stage import ExperimentStage

    lines = []
    r = Results({}, catalogue=registry.catalogue())
    stage = ExperimentStage(r, "quick", "cpu", 0, tmp_path, log=lines.append, threads=1)
    stage.cfgs["deep"] = TINY
    stage.deep_model()
    ids = [c.id for c in r.checks]
    assert ids == ["experiments/deep-watch", "experiments/W1/verdict/rule"] and all(c.status == "pass" for c in r.checks)
    data = r.experiments["deep_watch"]
    assert set(data["optimizers"]) == set(dw.OPTIMIZERS) and data["config"]["steps"] == TINY.steps
    verdict.assign_empirical(r, registry.IDS)
    assert r.claims["W1"]["verdict"] in rules.VERDICTS and r.claims["W1"]["verdict"] == data["verdict"]
    again = ExperimentStage(Results({}, catalogue=registry.catalogue()), "quick", "cpu", 0, tmp_path, log=lines.append)
    again.cfgs["deep"] = TINY
    again.deep_model()
    assert any("cached   deep-watch" in line for line in lines)
    assert set(rules.negative_controls(again._measurements)) == {"W1/attention-at-values-rate", "W1/routing-never-settles"}
