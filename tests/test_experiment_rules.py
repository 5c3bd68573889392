"""The E1–E7 verdict rules: each verdict reachable, every negative control not-reproduced, every positive
control reproduced, the expanded bootstrap, and the controls and intervals the measurements now carry."""
from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from derive import verdict
from derive.results import Results
from numeric.experiments import deep_watch, dynamics, frame, registry, rules, sticky, windtunnel
from numeric.experiments import stats as st


@pytest.fixture(scope="module")
def synth():
    return rules.synthetic_measurements()


def test_rule_is_frozen_and_checks_its_verdict():
    r = rules.Rule("reproduced", "why", {"x": 1.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.verdict = "not-reproduced"
    with pytest.raises(ValueError, match="Rule.verdict"):
        rules.Rule("reproduced-ish", "why")


def test_every_rule_reproduces_on_its_synthetic_input(synth):
    for claim, rule in rules.evaluate_all(synth).items():
        assert rule.verdict == "reproduced", (claim, rule.reason)
    assert set(rules.evaluate_all(synth)) == {*(f"E{i}" for i in range(1, 8)), "W1"}


# -- E1 --------------------------------------------------------------------------------------------------
def test_e1_three_verdicts(synth):
    k = synth["E1"]
    good = rules.e1(**k)
    m = good.measured
    assert good.verdict == "reproduced" and "lies in the speedup interval" in good.reason
    assert m["ci95"][0] <= 2.3 <= m["ci95"][1] and m["baseline"] > 1.0  # identical arms do not score 1
    assert m["n_seeds"] == 8 and len(m["steps_to_threshold"]) == 8 and m["em_steps_mean"] == np.mean(m["steps_to_threshold"])
    assert m["speedup"] == pytest.approx(st.speedup(k["sgd"], k["em"], k["steps"])[0])
    far = rules.e1(k["sgd"], k["em"], k["steps"], paper_speedup=6.0)
    assert far.verdict == "partly-reproduced" and "outside" in far.reason
    slower = rules.e1(k["em"], k["sgd"], k["steps"], 2.3)  # SGD in EM-like's place
    assert slower.verdict == "not-reproduced" and "reaches 0" in slower.reason
    with pytest.raises(ValueError, match="at least 2 seeds"):
        rules.e1(k["sgd"][:1], k["em"][:1], k["steps"], 2.3)


def test_e1_identical_arms_excess_is_exactly_zero(synth):
    k = synth["E1"]
    r = rules.e1(k["sgd"], k["sgd"], k["steps"], 2.3)
    assert r.verdict == "not-reproduced"
    assert r.measured["excess_ci95"] == [0.0, 0.0] and r.measured["speedup"] == r.measured["baseline"]


# -- expanded bootstrap -----------------------------------------------------------------------------------
def test_expanded_alpha_small_and_large_n():
    assert st.expanded_alpha(5) / 2 == pytest.approx(0.00095, abs=2e-5)  # percentiles 0.1 / 99.9 at n = 5
    values = [st.expanded_alpha(n) for n in (3, 5, 20, 200, 5000)]
    assert all(a < b for a, b in zip(values, values[1:])) and values[-1] == pytest.approx(0.05, abs=3e-4)
    assert math.isnan(st.expanded_alpha(1))


def _pair(n, seed):
    return rules._paired_curves(n, 60, 30.0, 12.0, np.random.default_rng(seed))


def test_expanded_bootstrap_wider_at_5_seeds_equal_at_many():
    sgd, em = _pair(5, 3)
    plain = st.bootstrap_speedup(sgd, em, 60, seed=1)
    s_em, _ = st.speedup_resamples(sgd, em, 60, seed=1)  # the same draws, vectorised
    assert [float(x) for x in np.percentile(s_em, [2.5, 97.5])] == pytest.approx(list(plain), rel=1e-12)
    lo, hi = st.bootstrap_speedup_expanded(sgd, em, 60, seed=1)
    assert lo <= plain[0] and hi >= plain[1] and hi - lo > 1.1 * (plain[1] - plain[0])
    sgd, em = _pair(300, 4)
    s_em, _ = st.speedup_resamples(sgd, em, 60, seed=1)
    p_lo, p_hi = np.percentile(s_em, [2.5, 97.5])
    lo, hi = st.bootstrap_speedup_expanded(sgd, em, 60, seed=1)
    assert (hi - lo) == pytest.approx(p_hi - p_lo, rel=0.03)


# -- E2 --------------------------------------------------------------------------------------------------
def test_e2_three_verdicts_and_scale(synth):
    k = synth["E2"]
    h, m = k["h_min"], k["m"]
    span = math.log(m) - h
    assert rules.e2(**k).verdict == "reproduced"
    rng = np.random.default_rng(0)
    sgd = h + 0.95 * span + 0.002 * rng.standard_normal(5)  # closes ~5% (the real SGD arm)
    em = h + 0.65 * span + 0.002 * rng.standard_normal(5)  # closes ~35%
    partly = rules.e2(sgd, em, h, m)
    assert partly.verdict == "partly-reproduced" and "em_like closed" in partly.reason
    assert partly.measured["arms"]["em_like"]["fraction_closed"] == pytest.approx(0.35, abs=0.01)
    assert rules.e2(sgd, sgd, h, m).verdict == "not-reproduced"
    below = rules.e2(np.full(4, h - 0.5 * span), np.full(4, h - 0.5 * span), h, m)  # overconfident: |gap| counts
    assert below.verdict == "partly-reproduced" and below.measured["arms"]["sgd"]["gap_signed"] < 0
    with pytest.raises(ValueError, match="below ln m"):
        rules.e2(sgd, em, math.log(m), m)


# -- E3 --------------------------------------------------------------------------------------------------
def test_e3_three_verdicts(synth):
    k = synth["E3"]
    assert rules.e3(**k).verdict == "reproduced"
    em = copy.deepcopy(k["em"])
    rng = np.random.default_rng(1)
    em["entropy"] = np.asarray(k["sgd"]["entropy"]) + 0.01 * rng.standard_normal(8)
    em["accuracy"] = np.asarray(k["sgd"]["accuracy"]) - 0.02
    partly = rules.e3(k["sgd"], em)
    assert partly.verdict == "partly-reproduced" and "only loss" in partly.reason
    assert rules.e3(k["sgd"], k["sgd"]).verdict == "not-reproduced"
    assert rules.e3(k["em"], k["sgd"]).verdict == "not-reproduced"


# -- E4 --------------------------------------------------------------------------------------------------
def test_e4_three_verdicts_and_stable_step(synth):
    arms = synth["E4"]["arms"]
    assert rules.e4(arms).verdict == "reproduced"
    tie = {**arms, "em_like": {**arms["em_like"], "attention": arms["em_like"]["values"]}}
    partly = rules.e4(tie)
    assert partly.verdict == "partly-reproduced" and "in sgd only" in partly.reason
    late = {a: {**d, "attention": d["values"], "values": d["attention"]} for a, d in arms.items()}
    assert rules.e4(late).verdict == "not-reproduced"
    assert frame._stable is rules.stable_step
    assert rules.stable_step([0, 1, 2, 3], [1.0, 0.1, 0.3, 0.0], 0.2) == 3
    assert rules.stable_step([0, 1, 2, 3], [2.0, 0.3, 0.4, 0.0], 0.2) == 1
    mid = rules.e4(arms).measured["arms"]["sgd"]
    assert mid["middle_step"] == 500 and mid["attention_normalised_middle"] == pytest.approx(math.exp(-5))


# -- E5 --------------------------------------------------------------------------------------------------
def _tunnel(ev_lo, rho_ci, within):
    return {"explained_variance": [ev_lo + 0.02, 0.05, 0.01], "explained_variance_pc1_ci95": [ev_lo, ev_lo + 0.04],
            "spearman_pc1_entropy": sum(rho_ci) / 2, "spearman_pc1_entropy_ci95": list(rho_ci),
            "within_symbol": {"abs_spearman_pc1_entropy_mean": within, "pc1_explained_mean": 0.5, "symbols": 5}}


def test_e5_judges_every_arm():
    good, local, none = _tunnel(0.85, (-0.9, -0.7), 0.8), _tunnel(0.3, (-0.1, 0.2), 0.6), _tunnel(0.3, (-0.1, 0.2), 0.1)
    assert rules.e5({"sgd": good, "em_like": good}).verdict == "reproduced"
    r = rules.e5({"sgd": good, "em_like": none})
    assert r.verdict == "partly-reproduced" and r.measured["arms"]["em_like"]["verdict"] == "not-reproduced"
    r = rules.e5({"sgd": local, "em_like": none})
    assert r.verdict == "partly-reproduced" and r.measured["arms"]["sgd"]["verdict"] == "partly-reproduced"
    assert rules.e5({"sgd": none, "em_like": none}).verdict == "not-reproduced"
    narrow = _tunnel(0.85, (0.3, 0.9), 0.2)  # |rho| judged on the interval's lower end
    assert rules.e5({"a": narrow}).measured["arms"]["a"]["abs_spearman_lower"] == pytest.approx(0.3)
    assert rules.e5({"a": narrow}).verdict == "not-reproduced"
    with pytest.raises(ValueError, match="spearman_pc1_entropy_ci95"):
        rules.e5({"a": {k: v for k, v in good.items() if k != "spearman_pc1_entropy_ci95"}})


def test_pc1_bootstrap_orientation():
    rng = np.random.default_rng(0)
    H = rng.uniform(0, 1, (40, 10))
    pts = -H[..., None] * np.array([1.0, 0.0, 0.0]) + 0.05 * rng.standard_normal((40, 10, 3))
    ratios, rho, _ = st.pc1_spearman(pts.reshape(-1, 3), H.ravel())
    boot = st.bootstrap_pc1_spearman(pts, H, resamples=100)
    lo, hi = boot["spearman_pc1_entropy_ci95"]
    assert abs(rho) > 0.95 and lo <= rho <= hi and lo * hi > 0  # one sign across replicates
    assert boot["explained_variance_pc1_ci95"][0] <= ratios[0] <= boot["explained_variance_pc1_ci95"][1]


# -- E6, E7 ----------------------------------------------------------------------------------------------
def test_e6_three_verdicts():
    assert rules.e6(0.995, 0.005).verdict == "reproduced"
    assert rules.e6(0.89, 0.11).verdict == "partly-reproduced"
    r = rules.e6(0.6, 0.4)
    assert r.verdict == "not-reproduced" and r.measured["control_agreement"] == 0.4


def test_e7_three_verdicts(synth):
    spec = synth["E7"]["spec"]
    assert rules.e7(spec).verdict == "reproduced"
    rng = np.random.default_rng(2)
    own = np.asarray(spec["cos_value_signal_final_per_instance"])
    shared = {**spec, "cos_value_control_final_per_instance": (own + 0.05 * rng.standard_normal(own.size)).tolist()}
    r = rules.e7(shared)  # the control rises as much: not specific to the own signal
    assert r.verdict == "partly-reproduced" and "does not beat the control" in r.reason
    low = {**spec, "cos_value_signal_final_per_instance": (own - 0.45).tolist(),
           "cos_value_control_final_per_instance": (own - 0.8).tolist()}
    r = rules.e7(low)
    assert r.verdict == "partly-reproduced" and "does not end > 0.5" in r.reason
    assert rules.e7(rules._frozen(spec)).verdict == "not-reproduced"


# -- negative controls ------------------------------------------------------------------------------------
def test_every_negative_control_is_not_reproduced(synth):
    assert {cid.split("/")[0] for cid in rules.NEGATIVE_CONTROLS} == {*(f"E{i}" for i in range(1, 8)), "W1"}
    for cid, control in rules.NEGATIVE_CONTROLS.items():
        rule = control()
        assert rule.verdict == "not-reproduced", (cid, rule.reason)
    derived = rules.negative_controls(synth)
    assert set(derived) == set(rules.NEGATIVE_CONTROLS)
    assert all(r.verdict == "not-reproduced" for r in derived.values())
    assert set(rules.negative_controls({"E6": synth["E6"]})) == {"E6/plus-A"}


# -- the measurements -------------------------------------------------------------------------------------
def test_dynamics_controls_in_a_small_run():
    cfg = dynamics.DynamicsConfig(n=6, instances=6, train_steps=30, checkpoints=3, step_sizes=(1e-3, 1.0))
    e6 = dynamics.advantage_sign_agreement(cfg)
    for key in ("scores", "queries_keys"):
        assert len(e6[f"{key}_control"]) == 2
        assert all(0 <= a + c <= 1 + 1e-6 for a, c in zip(e6[key], e6[f"{key}_control"]))
    assert e6["scores"][0] + e6["scores_control"][0] == pytest.approx(1.0, abs=1e-6)
    assert e6["scores"][0] > 0.5
    control = rules.negative_controls({"E6": {"agreement": e6["scores"][0], "control_agreement": e6["scores_control"][0]}})
    assert control["E6/plus-A"].verdict == "not-reproduced"
    spec = dynamics.specialisation(cfg)
    for key in ("cos_value_signal", "cos_value_control"):
        assert len(spec[key]) == 3
        for when in ("initial", "final"):
            assert len(spec[f"{key}_{when}_per_instance"]) == 6
    assert np.mean(spec["cos_value_signal_final_per_instance"]) == pytest.approx(spec["cos_value_signal"][-1])
    assert np.mean(spec["cos_value_control_initial_per_instance"]) == pytest.approx(spec["cos_value_control"][0])
    assert all(c == pytest.approx(1.0) for c in spec["cos_update_signal"])  # an identity, not evidence
    assert rules.e7(spec).measured["instances"] == 6
    assert rules.negative_controls({"E7": {"spec": spec}})["E7/frozen-values"].verdict == "not-reproduced"
    perm = dynamics._derangements(50, 5, torch.Generator().manual_seed(0))
    assert not (perm == torch.arange(5)).any() and (perm.sort(-1).values == torch.arange(5)).all()


def test_frame_distance_series():
    cfg = sticky.StickyConfig(length=40, steps=6, seeds=(42, 7), arms=("sgd", "em_like"), blocks=2, checkpoints=3,
                              tracked_rows=4)
    run = sticky.train(cfg)
    fp = frame.frame_precision(cfg, run)
    assert set(fp) == {"sgd", "em_like"}
    for a, arm in enumerate(cfg.arms):
        d = fp[arm]
        for key in ("alpha_js_to_final", "alpha_jsd_to_final", "values_rel_change_to_final", "V_rel_change_to_final",
                    "attention_stable_step", "attention_jsd_stable_step", "values_stable_step", "V_stable_step"):
            assert key in d
        js = frame._js(run.tracked[0][a].double(), run.tracked[-1][a].double())
        assert d["alpha_jsd_to_final"][0] == pytest.approx(float(js.sqrt().mean()))
        assert d["alpha_js_to_final"][0] == pytest.approx(float(js.mean()))
        assert d["alpha_jsd_to_final"][-1] == 0.0 and d["alpha_jsd_to_final"][0] > d["alpha_js_to_final"][0]
    assert rules.e4(rules.e4_inputs(fp)).measured["tol"] == rules.E4_TOL


def test_wind_tunnel_evaluate_has_intervals():
    cfg = windtunnel.TunnelConfig(steps=3, batch=8, eval_batch=16, length=12, pca_points=20)
    model, _ = windtunnel.train(cfg, "sgd")
    ev = windtunnel.evaluate(cfg, model)
    lo, hi = ev["explained_variance_pc1_ci95"]
    assert lo <= ev["explained_variance"][0] <= hi
    lo, hi = ev["spearman_pc1_entropy_ci95"]
    assert lo <= ev["spearman_pc1_entropy"] <= hi
    assert ev["bootstrap"]["sequences"] == 16 and ev["bootstrap"]["resamples"] == windtunnel.BOOTSTRAP_RESAMPLES
    assert {"within_symbol", "kl_bits", "pca_points"} <= set(ev)
    assert rules.e5({"sgd": ev}).verdict in rules.VERDICTS


def test_e1_replay_compares_at_the_printed_precision():
    paper = {"sgd_final_loss": 2.03, "em_like_final_loss": 1.93, "speedup": 2.3, "em_steps": 430}
    got = {"sgd_final_loss": 2.030977, "em_like_final_loss": 1.93193, "speedup": 2.184, "em_steps": [746, 282, 345, 394, 522]}
    assert rules.printed_decimals(2.03) == 2 and rules.printed_decimals(2.3) == 1 and rules.printed_decimals(430) == 0
    r = rules.e1_replay(got, paper)
    assert r.verdict == "partly-reproduced" and "speedup 2.184 (paper 2.3)" in r.reason and "457.8" in r.reason
    assert rules.e1_replay({**got, "speedup": 2.27}, paper).verdict == "reproduced"
    assert rules.e1_replay({**got, "em_like_final_loss": 1.9381}, paper).verdict == "not-reproduced"
    assert rules.e1_replay({**got, "sgd_final_loss": 2.0249}, paper).verdict == "not-reproduced"


# -- positive controls ------------------------------------------------------------------------------------
CLAIMS = {*(f"E{i}" for i in range(1, 8)), "W1"}
FROZEN_STICKY = sticky.StickyConfig(length=40, steps=20, seeds=(42, 7), arms=("sgd", "em_like"), blocks=2, checkpoints=5,
                                    tracked_rows=4)
FROZEN_DEEP = deep_watch.DeepConfig(steps=16, every=2, batch=4, seeds=(0, 1), d_model=16, ff=32, length=8, probe_batch=4,
                                    eval_batch=16, resamples=50, checkpoints=3, layers=1)
SMALL_DYNAMICS = dynamics.DynamicsConfig(n=6, instances=6, train_steps=30, checkpoints=3, step_sizes=(1e-4, 1.0))


@pytest.fixture(scope="module")
def constructed():
    """The positive controls' constructed runs at small sizes, as the stage builds them: a sticky-chain run with
    W_Q, W_K frozen after 2 of 20 steps (E4), the natural-gradient score step (E6), the one-layer watched model
    with its routing frozen after the first record (W1). Returns ({claim: rule input}, sticky run, deep run)."""
    run = sticky.train(FROZEN_STICKY, freeze_routing=2)
    e6 = dynamics.advantage_sign_agreement(SMALL_DYNAMICS)
    deep = deep_watch.run(FROZEN_DEEP, freeze_routing=FROZEN_DEEP.every)
    runs = {"E4": {"arms": rules.e4_inputs(frame.frame_precision(FROZEN_STICKY, run))},
            "E6": {"agreement": e6["scores_natural"][0], "control_agreement": e6["scores_natural_control"][0]},
            "W1": {"optimizers": deep_watch.rule_inputs(deep, FROZEN_DEEP)}}
    return runs, run, deep


def test_every_rule_says_reproduced_on_its_positive_control_and_not_on_its_negative_controls(synth, constructed):
    runs = constructed[0]
    positive = rules.positive_controls(synth, runs)
    assert set(positive) == set(rules.POSITIVE_CONTROLS) and {c.split("/")[0] for c in positive} == CLAIMS
    for cid, rule in positive.items():
        assert rule.verdict == "reproduced", (cid, rule.reason)
    negative = {**rules.negative_controls(synth), **rules.negative_controls(runs)}  # E4, E6, W1 also on the runs
    for claim in CLAIMS:  # the pair: the same rule says both
        mine = [r for cid, r in negative.items() if cid.startswith(claim + "/")]
        assert mine and all(r.verdict == "not-reproduced" for r in mine), claim
    for cid in ("E4/attention-at-values-rate", "E6/plus-A", "W1/attention-at-values-rate", "W1/routing-never-settles"):
        assert rules.negative_controls(runs)[cid].verdict == "not-reproduced", cid
    only = rules.positive_controls({"E2": synth["E2"]}, {"W1": runs["W1"]})
    assert set(only) == {"E2/at-h-min", "W1/frozen-routing"}


def test_e2_control_centres_each_draw_of_mu_when_the_groups_are_given():
    # two draws of mu whose seeds end 0.1 nats apart, each draw's own seeds within 0.002 of each other: centred as one
    # set the draws' spread reads as distance from H_min; centred per draw the control is at H_min
    h_min, n = 1.8292, 6
    em = np.array([1.95, 1.952, 1.951, 2.05, 2.052, 2.051])
    base = {"entropy_sgd": em + 0.001, "entropy_em": em, "h_min": h_min, "m": 8}
    together = rules.positive_controls({"E2": base})["E2/at-h-min"]
    apart = rules.positive_controls({"E2": {**base, "groups": [0] * 3 + [1] * 3}})["E2/at-h-min"]
    assert together.verdict != "reproduced" and apart.verdict == "reproduced", (together.reason, apart.reason)
    assert apart.measured["arms"]["em_like"]["r"] < 0.01 < together.measured["arms"]["em_like"]["r"]
    with pytest.raises(ValueError, match="group labels"):
        rules.positive_controls({"E2": {**base, "groups": [0] * (n - 1)}})


def test_positive_controls_hold_whatever_the_run_measured(synth):
    """Derived from measurements on which the claim itself fails (the negative controls' inputs), the positive
    controls still say reproduced: they are built, not found."""
    k = synth
    flat = {"E1": {**k["E1"], "em": k["E1"]["sgd"]},
            "E2": {**k["E2"], "entropy_sgd": np.full(8, math.log(8)), "entropy_em": np.full(8, math.log(8))},
            "E3": {"sgd": k["E3"]["sgd"], "em": k["E3"]["sgd"]},
            "E7": {"spec": rules._frozen(k["E7"]["spec"])}}
    assert all(r.verdict == "not-reproduced" for r in rules.evaluate_all(flat).values())
    for cid, rule in rules.positive_controls(flat).items():
        assert rule.verdict == "reproduced", (cid, rule.reason)


def test_paper_speed_curves_start_with_sgd_and_reach_the_papers_speedup(synth):
    k = synth["E1"]
    em, q, delta = rules.paper_speed_curves(k["sgd"], k["steps"], 2.3)
    sgd = np.asarray(k["sgd"])
    assert em.shape == sgd.shape and np.allclose(em[:, 0], sgd[:, 0]) and q > 1 and delta > 0
    assert (em[:, -1] < sgd[:, -1].mean()).all()  # every seed passes below the authors' threshold
    s = st.speedup(sgd, em, k["steps"])[0]
    assert 2.3 <= s <= 2.3 * 1.05
    assert rules.e1(sgd, em, k["steps"], 2.3).verdict == "reproduced"
    assert rules.e1(sgd, em, k["steps"], 6.0).verdict == "partly-reproduced"  # the paper's figure is still judged


def test_clear_margin_has_twice_the_critical_t(synth):
    k = synth["E3"]
    r = rules.positive_controls({"E3": k})["E3/clear-margin"]
    crit = st.stats.t.ppf(1 - rules.E3_P / 2, 7)
    for metric, _ in rules.E3_METRICS:
        assert r.measured[metric]["t"] == pytest.approx(rules.E3_CONTROL_MARGIN * crit, rel=1e-9)
    assert r.measured["loss"]["em_like"] < r.measured["loss"]["sgd"]
    assert r.measured["accuracy"]["em_like"] > r.measured["accuracy"]["sgd"]


def test_e5_control_features_carry_the_tunnels_bayes_entropy():
    H, y = rules.tunnel_entropies(seed=3, sequences=6, length=10)
    cfg = windtunnel.TunnelConfig(symbols=5, prior=1.0, sticky=4.0)
    p = windtunnel.bayes_predictive(cfg, torch.as_tensor(y))
    assert H == pytest.approx((-(p * torch.log2(p)).sum(-1)).numpy(), abs=1e-12)
    ev = rules.entropy_tunnel_evaluation(seed=0)
    assert ev["explained_variance_pc1_ci95"][0] >= rules.E5_EV and rules._abs_lower(ev["spearman_pc1_entropy_ci95"]) > 0.9


def test_natural_score_step_predicts_the_sign_exactly_at_small_steps():
    e6 = dynamics.advantage_sign_agreement(SMALL_DYNAMICS)
    assert e6["scores_natural"][0] >= rules.E6_ALL and e6["scores_natural"][0] > e6["scores"][0]
    assert e6["scores_natural"][0] + e6["scores_natural_control"][0] == pytest.approx(1.0, abs=1e-6)


def test_sticky_run_with_frozen_routing(constructed):
    _, run, _ = constructed
    short = sticky.train(dataclasses.replace(FROZEN_STICKY, steps=2, checkpoints=2))
    for p in (0, 1):  # W_Q, W_K as they were after 2 steps
        assert torch.equal(run.params[p], short.params[p])
    assert not torch.allclose(run.params[2], short.params[2])  # W_V kept learning
    for tracked in run.tracked[1:]:  # checkpoints from step 5 on: the attention rows do not move
        assert torch.equal(tracked, run.tracked[-1])
    with pytest.raises(ValueError, match="freeze_routing"):
        sticky.train(FROZEN_STICKY, freeze_routing=21)


def test_frozen_routing_fixes_one_layer_but_not_the_second(constructed):
    """With its routing parameters frozen (deep_watch.routing_parameters), a one-layer model's attention rows stop
    under every optimizer (AdamW's moments and weight decay included) while its values keep moving; in a
    second layer they keep moving, because that layer reads the first layer's values: W1's control has one layer."""
    _, _, deep = constructed
    for name, runs in deep["runs"].items():
        for r in runs:
            js, dv = r["series"]["js"], r["series"]["v_change"]  # (layers, heads, records)
            assert (js[..., 1:] == 0).all() and (js[..., 0] > 0).all(), name
            assert (dv[..., 1:] > 0).all(), name
    two = dataclasses.replace(FROZEN_DEEP, layers=2, steps=8, seeds=(0,))
    out = deep_watch.run(two, freeze_routing=two.every)
    for name, runs in out["runs"].items():
        js = runs[0]["series"]["js"]
        assert (js[0, :, 1:] == 0).all() and (js[1, :, 1:] > 0).all(), name
    with pytest.raises(ValueError, match="freeze_routing"):
        deep_watch.train(two, "sgd", *deep_watch.data(two, 0), *deep_watch.fixed_sequences(two), freeze_routing=0)


def test_stage_records_positive_controls_like_the_negative_ones(tmp_path, synth):
    from numeric.experiments.stage import ExperimentStage

    lines = []
    r = Results({}, catalogue=registry.catalogue())
    stage = ExperimentStage(r, "quick", "cpu", 0, tmp_path, log=lines.append, threads=1)
    stage.cfgs["fresh"][0] = dataclasses.replace(FROZEN_STICKY, arms=("sgd", "em_like", "em_mstep"))
    stage.cfgs["deep"] = dataclasses.replace(FROZEN_DEEP, layers=2, steps=8, seeds=(0,), eval_batch=8)
    stage._measurements = dict(synth)
    e6 = dynamics.advantage_sign_agreement(SMALL_DYNAMICS)
    stage._constructed["E6"] = {"agreement": e6["scores_natural"][0], "control_agreement": e6["scores_natural_control"][0]}
    stage.positive_controls()
    checks = {c.id: c for c in r.checks}
    assert set(checks) == {f"experiments/positive-control/{cid}" for cid in rules.POSITIVE_CONTROLS}
    for c in checks.values():
        assert (c.stage, c.kind, c.status, c.expected) == ("experiments", "negative-control", "pass", {"verdict": "reproduced"})
        assert c.claim == c.id.split("/")[2] and c.detail == rules.POSITIVE_CONTROLS[c.id.split("/", 2)[2]]
    data = r.experiments["positive_controls"]
    assert data["E4/frozen-routing"]["freeze_after_step"] == 2 and data["E4/frozen-routing"]["seeds"] == [42]
    assert data["W1/frozen-routing"]["layers"] == 1 and data["W1/frozen-routing"]["freeze_after_step"] == 2
    verdict.assign_empirical(r, registry.IDS)
    assert all(c["verdict"] != "failed" for c in r.claims.values())
    again = ExperimentStage(Results({}, catalogue=registry.catalogue()), "quick", "cpu", 0, tmp_path, log=lines.append)
    again.cfgs["fresh"][0], again.cfgs["deep"] = stage.cfgs["fresh"][0], stage.cfgs["deep"]
    again._measurements = dict(synth)
    again.positive_controls()
    assert any("cached   sticky-frozen-routing-2" in x for x in lines) and any("cached   deep-watch" in x for x in lines)


def test_each_claim_s_rule_thresholds_and_controls_live_in_its_own_module():
    import importlib

    from numeric.experiments import registry

    for cid, claim in registry.REGISTRY.items():
        module = importlib.import_module(f"numeric.experiments.rules.{cid.lower()}")
        assert claim.rule is getattr(module, cid.lower()), cid  # the registered rule is its module's
        for name, value in claim.thresholds.items():
            assert getattr(module, name) == value, (cid, name)  # each threshold beside its rule
        for table in ("NEGATIVE", "POSITIVE"):
            assert all(c.split("/")[0] == cid for c in getattr(module, table, {})), (cid, table)
    controls = {c.split("/")[0] for c in rules.NEGATIVE_CONTROLS}
    assert controls == {"E1", "E2", "E3", "E4", "E5", "E6", "E7", "W1"}  # every paper claim and W1 has one


def test_the_constructed_g_controls_use_the_run_s_own_mechanisms_and_labels():
    # a partition no list in the code names (7 mechanisms: 35 relabelings, so a permutation p <= 0.05 is reachable):
    # the controls must be built for it, and still say what they must
    comp, rest = ("alpha", "gamma", "eps", "eta"), ("beta", "delta", "zeta")
    names = comp + rest
    k = rules.g1_synthetic(seeds=3, competing=comp, others=rest)
    k["curves"] = {m: k["curves"][m] for m in sorted(names)}  # the run's order, not the constructions'
    k["competition"] = {m: m in comp for m in names}
    out = rules.g1_controls(k)
    positive = out["G1/structured-gain"][1]
    assert set(positive.measured["mechanisms"]) == set(names) and positive.verdict == "reproduced"
    assert positive.measured["competing"] == sorted(comp)
    assert {c: r.verdict for c, (_, r) in out.items() if c != "G1/structured-gain"} == {
        "G1/identical-arms": "not-reproduced", "G1/labels-shuffled": "not-reproduced"}
    out2 = rules.g2_controls(rules.g2_synthetic(seeds=3, competing=comp, others=rest))
    assert set(out2["G2/structured-gap"][1].measured["competing"]) == set(comp)
    assert [r.verdict for _, r in out2.values()] == ["not-reproduced", "not-reproduced", "reproduced"]


def test_g3_says_both_and_its_controls_say_what_they_are_built_to():
    """G3 (numeric/experiments/rules/g3.py, a claim that is one module): the split as predicted is reproduced, none
    and the reverse are not, a partial split is partly, a baseline (the real LSTM) that beats the floor keeps it
    from reproduced; across tasks it holds only where every task holds; its controls on the run's own labels."""
    from numeric.experiments.rules import g3

    labels = {"softmax": True, "ssd": True, "glr": False, "gate": False}
    floor, nc = 1.0, 2.3
    def kl(**v):
        return {m: [x, x] for m, x in v.items()}
    task = lambda *a, **k: g3.g3_task(*a, **k).verdict  # noqa: E731
    assert task(kl(softmax=0.2, ssd=0.3, glr=2.3, gate=2.2), labels, floor, nc) == "reproduced"
    assert task(kl(softmax=0.2, ssd=1.5, glr=2.3, gate=2.2), labels, floor, nc) == "partly-reproduced"
    assert task(kl(softmax=2.0, ssd=1.5, glr=2.3, gate=2.2), labels, floor, nc) == "not-reproduced"
    assert task(kl(softmax=0.2, ssd=0.3, glr=0.5, gate=2.2), labels, floor, nc) == "not-reproduced"
    assert task(kl(softmax=0.2, ssd=0.3), labels, floor, nc) == "not-reproduced"  # one group empty
    good = kl(softmax=0.2, ssd=0.3, glr=2.3, gate=2.2)
    assert task(good, labels, floor, nc, kl(lstm=2.0)) == "reproduced"
    assert task(good, labels, floor, nc, kl(lstm=0.3)) == "partly-reproduced"  # the paper's negative case learns
    x = {"kl": good, "floor": floor, "floor_name": "counts", "no_context": nc, "baselines": kl(lstm=2.0)}
    bad = {**x, "kl": kl(softmax=2.0, ssd=1.5, glr=2.3, gate=2.2)}
    assert g3.g3({"a": x, "b": x}, labels).verdict == "reproduced"
    assert g3.g3({"a": x, "b": bad}, labels).verdict == "partly-reproduced"
    assert g3.g3({"a": bad, "b": bad}, labels).verdict == "not-reproduced"
    assert g3.g3({}, labels).verdict == "not-reproduced"
    both = g3.g3({"a": x}, labels, competition={"softmax": True, "ssd": False, "glr": False, "gate": True})
    assert both.verdict == "reproduced" and both.measured["competition"]["verdict"] == "not-reproduced"
    m = {"tasks": {"a": x, "b": {**x, "floor": 0.5}}, "labels": labels, "competition": None}
    assert {c: (k, r.verdict) for c, (k, r) in g3.controls(m).items()} == {
        "G3/no-split": ("negative", "not-reproduced"), "G3/split-reversed": ("negative", "not-reproduced"),
        "G3/split": ("positive", "reproduced")}
    assert g3.measure({}) is None
    entry = {"floors": {"prior": {"kl_bits_queries": 3.0}, "counts": {"kl_bits_queries": 1.0},
                        "no_context": {"kl_bits_queries": 2.0}},
             "baselines": ["lstm"], "content_routing": labels, "competition": None,
             "mechanisms": {"softmax": {"arms": {"em_like": {"kl_bits_queries_per_seed": [0.1, 0.2]}}},
                            "lstm": {"arms": {"em_like": {"kl_bits_queries_per_seed": [2.1, 2.2]}}},
                            "glr": {"failed": True}}}
    inputs = g3.task_inputs(entry)
    assert inputs["floor_name"] == "counts" and inputs["floor"] == 1.0 and set(inputs["kl"]) == {"softmax"}
    assert set(inputs["baselines"]) == {"lstm"} and inputs["no_context"] == 2.0
    assert set(g3.measure({"conjecture": {"bijection": entry}})["tasks"]) == {"bijection"}
    # a mechanism whose cell is undecided is in neither group, and said so; each task's sizes head its table
    entry["mechanisms"]["mine"] = {"arms": {"em_like": {"kl_bits_queries_per_seed": [0.1, 0.1]}}}
    entry["config"] = {"tunnel": {"values": 16, "pairs": 24, "steps": 600, "lr": 0.01}}
    r = g3.g3(**g3.measure({"conjecture": {"bijection": entry}}))
    assert r.measured["tasks"]["bijection"]["left_out"] == ["mine"] and "left out (cell undecided): mine" in r.reason
    assert g3.tables(r.measured)[0]["caption"].startswith("bijection (values 16, pairs 24, steps 600): ")
