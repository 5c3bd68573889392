"""Experiments: the chain, its exact Bayes predictor, the batched trainer, statistics, simulations."""
import dataclasses
import itertools
import math

import numpy as np
import sys

import pytest
import torch

from numeric.experiments import chain, dynamics, sticky, windtunnel
from numeric.experiments import stats as st


def test_transition_matrix_matches_the_authors_row_and_h_min():
    P = chain.transition_matrix()
    quoted = [0.350, 0.166, 0.083, 0.055, 0.042]
    assert np.allclose(P[0, :5].numpy(), quoted, atol=1e-3)
    assert torch.allclose(P.sum(1), torch.ones(8, dtype=torch.float64))
    assert torch.allclose(chain.stationary(P), torch.full((8,), 1 / 8, dtype=torch.float64))
    assert round(chain.conditional_entropy(P), 4) == 1.8292


@pytest.mark.parametrize("cfg,match", [
    (windtunnel.TunnelConfig(steps=True), "TunnelConfig.steps must be a positive integer"),
    (windtunnel.TunnelConfig(sticky=-1.0), "TunnelConfig.sticky must be non-negative"),
    (windtunnel.TunnelConfig(value_lr_ratio=0.0), "TunnelConfig.value_lr_ratio must be positive"),
    (dynamics.DynamicsConfig(step_sizes=()), "DynamicsConfig.step_sizes must be positive"),
    (dynamics.DynamicsConfig(n=2.5), "DynamicsConfig.n must be a positive integer")])
def test_bad_simulation_configs_name_the_field(cfg, match):
    with pytest.raises(ValueError, match=match):
        cfg.validate()


def test_mu_generators_are_the_named_conventions():
    import numpy.random as npr

    state = npr.get_state()
    try:
        npr.seed(0)  # what `np.random.seed(0); np.random.randn(8, 20)` in a script gives
        assert np.array_equal(chain.symbol_means(rng="numpy-legacy").numpy(), npr.randn(8, 20))
    finally:
        npr.set_state(state)
    with torch.random.fork_rng():  # `torch.manual_seed(0); torch.randn(8, 20)`, global state left as found
        torch.manual_seed(0)
        assert torch.equal(chain.symbol_means(rng="torch-float32"), torch.randn(8, 20).double())
    draws = [chain.symbol_means(rng=r) for r in chain.MU_RNGS]
    assert all(not torch.allclose(a, b) for a, b in itertools.combinations(draws, 2))
    with pytest.raises(ValueError, match="unknown mu generator"):
        chain.symbol_means(rng="sobol")


def test_sampling_is_seeded_and_shaped():
    P, mu = chain.transition_matrix(), chain.symbol_means()
    x1, y1 = chain.sample(P, mu, 50, [1, 2])
    x2, y2 = chain.sample(P, mu, 50, [1, 2])
    assert x1.shape == (2, 49, 20) and y1.shape == (2, 49)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(chain.sample(P, mu, 50, [3])[1], y1[:1])


def test_bayes_predictive_against_path_enumeration():
    """The HMM filter equals brute-force enumeration of all hidden paths (k = 3, T = 4)."""
    k, T = 3, 4
    P = chain.transition_matrix(k, 0.5, 0.5)
    mu = chain.symbol_means(k, 2, seed=3)
    x, _ = chain.sample(P, mu, T + 1, [5])
    pred = chain.bayes_predictive(P, mu, x)[0]
    pi = chain.stationary(P)
    for t in range(T):
        joint = torch.zeros(k, dtype=torch.float64)  # over y_{t+1}
        for path in itertools.product(range(k), repeat=t + 1):  # y_0 .. y_t
            w = pi[path[0]] * math.prod(float(P[a, b]) for a, b in zip(path, path[1:]))
            w *= math.prod(math.exp(-0.5 * float(((x[0, s] - mu[path[s]]) ** 2).sum())) for s in range(t + 1))
            joint += w * P[path[t]]
        assert torch.allclose(pred[t], joint / joint.sum(), atol=1e-12)


@pytest.mark.parametrize("change,match", [
    ({"length": -5}, "length must be a positive integer"), ({"self_prob": 1.5}, r"self_prob must lie in \[0, 1\]"),
    ({"arms": ("adam",)}, "unknown"), ({"dtype": "float16"}, "float32 or float64"), ({"seeds": (1, 1)}, "distinct"),
    ({"init_std": 0.0}, "init_std must be positive"), ({"mu_rng": "mersenne"}, "mu_rng must be one of"),
    ({"mu_seed": -1}, "mu_seed must be a non-negative integer")])
def test_bad_sticky_config(change, match):
    import dataclasses

    with pytest.raises(ValueError, match=match):
        dataclasses.replace(sticky.StickyConfig(), **change).validate()


def test_batched_training_equals_the_sequential_loop():
    cfg = sticky.StickyConfig(length=60, steps=6, seeds=(42, 7), dtype="float64", blocks=3, checkpoints=2, tracked_rows=4)
    run = sticky.train(cfg)
    for a, arm in enumerate(cfg.arms):
        for s in range(2):
            ref, params = sticky.reference_run(cfg, arm, s, cfg.steps)
            assert np.allclose(ref, run.losses[a, s, :6].numpy(), atol=1e-12, rtol=0)
            for p, q in zip(params, run.params):
                assert torch.allclose(p, q[a, s], atol=1e-12)


def test_mstep_arm_uses_the_responsibility_normalised_value_step():
    cfg = sticky.StickyConfig(length=30, steps=1, seeds=(3,), arms=("em_like", "em_mstep"), dtype="float64", blocks=2)
    data = sticky.make_data(cfg, "cpu")
    params = sticky.init_params(cfg, "cpu")
    _, mstep = sticky.learning_rates(cfg, "cpu")
    blocks = sticky._blocks(29, 2)
    _, grads = sticky.gradients(params, data, cfg.d_k ** -0.5, blocks, mstep)
    x = data.x[0, 0]
    q, k, v = (x @ w[0, 0] for w in params[:3])
    mask = torch.ones(29, 29, dtype=torch.bool).tril()
    alpha = torch.softmax((q @ k.T / math.sqrt(cfg.d_k)).masked_fill(~mask, float("-inf")), -1)
    o = (alpha @ v).requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(o @ params[3][0, 0], data.y[0])
    (u,) = torch.autograd.grad(loss, o)
    dv = (alpha.T @ u) / alpha.sum(0)[:, None]  # C10: sum_i alpha_ij u_i / N_j
    assert torch.allclose(grads[2][1, 0], x.T @ dv, atol=1e-14)
    assert not torch.allclose(grads[2][0, 0], x.T @ dv, atol=1e-6)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("extended", [False, True])
def test_default_profile_runs_four_draws_of_mu_with_the_papers_seeds_first(device, extended):
    from derive.profile import DEFAULT
    from numeric.experiments.stage import configs

    sizes = DEFAULT.for_device(device).experiments
    cfgs = configs(sizes, extended)  # configs only: nothing is run, no GPU needed
    fresh = cfgs["fresh"]
    seeds = [s for c in fresh for s in c.seeds]
    # 11 seeds in the default profile (the paper's five, two in each other group), 20 with --extended (five in each,
    # the default's first)
    assert len(seeds) == (20 if extended else 11) and len(set(seeds)) == len(seeds) and fresh[0].seeds == sticky.PAPER_SEEDS
    assert [c.seeds[:2] for c in fresh[1:]] == [(1, 2), (6, 7), (11, 12)]
    assert len({(c.mu_rng, c.mu_seed) for c in fresh}) == len(fresh) >= 4  # each group its own draw of mu
    assert all(c.arms[:2] == ("sgd", "em_like") and (c.steps, c.length) == (1000, 2000) for c in fresh)
    with_mstep = [i for i, c in enumerate(fresh) if "em_mstep" in c.arms]
    assert with_mstep == (list(range(len(fresh))) if device == "cuda" else [0])
    assert set(cfgs["exact"].arms) == set(sticky.ARMS) and cfgs["exact"].dtype == "float64"
    assert set(cfgs["speed"].seeds) <= set(sticky.PAPER_SEEDS) and cfgs["speed"].arms == ("sgd", "em_like")
    assert set(sizes.opt_in) == {"typicality", "sweep"}


def test_extended_fresh_groups_must_be_the_same_draws():
    from derive.profile import DEFAULT, FreshGroup

    groups = DEFAULT.experiments.fresh_extended
    for bad in (groups[:3], (FreshGroup("torch-float64", 0, (42, 2024)),) + groups[1:],
                groups[:1] + (FreshGroup("torch-float64", 5, (1, 2)),) + groups[2:], groups[:1] + groups[1:2] * 2 + groups[3:]):
        with pytest.raises(ValueError, match="fresh_extended"):
            DEFAULT.replace("experiments", fresh_extended=bad)
    assert DEFAULT.replace("experiments", fresh_extended=()).experiments.fresh_groups(True) == DEFAULT.experiments.fresh


def test_padded_widths_train_the_same_model_and_their_pads_stay_zero():
    cfg = sticky.StickyConfig(length=40, steps=2, seeds=(42, 7), dtype="float64", blocks=2,
                              arms=("sgd", "em_like", "em_mstep"))
    params = sticky.init_params(cfg, "cpu")
    wide = sticky.padded(params, cfg)
    assert [p.shape[-1] for p in wide[:3]] == [sticky.LANE] * 3 and wide[3].shape[-2] == sticky.LANE
    assert all(torch.equal(a, b) for a, b in zip(sticky.unpadded(wide, cfg), params))
    data = sticky.make_data(cfg, "cpu")
    _, mstep = sticky.learning_rates(cfg, "cpu")
    blocks = sticky._blocks(39, 2)
    loss_w, grads_w = sticky.gradients(wide, data, cfg.d_k ** -0.5, blocks, mstep)
    loss, grads = sticky.gradients(params, data, cfg.d_k ** -0.5, blocks, mstep)
    assert torch.allclose(loss_w, loss, atol=1e-14, rtol=0)
    assert all(torch.allclose(a, b, atol=1e-14, rtol=0) for a, b in zip(sticky.unpadded(grads_w, cfg), grads))
    pads = [grads_w[0][..., cfg.d_k:], grads_w[1][..., cfg.d_k:], grads_w[2][..., cfg.d_v:], grads_w[3][..., cfg.d_v:, :]]
    assert all(p.numel() and bool((p == 0).all()) for p in pads)  # so the padded columns stay zero under any step
    run = sticky.train(cfg)
    assert [tuple(p.shape[-2:]) for p in run.params] == [(20, 10), (20, 10), (20, 15), (15, 8)]
    assert run.values[0].shape[-1] == cfg.d_v and run.params[0].is_contiguous()


def test_device_choices_follow_the_device_type():
    from derive.profile import DEFAULT, QUICK

    for device in ("cuda", "cuda:1"):
        assert DEFAULT.for_device(device).numeric.bench == "gpu" and QUICK.for_device(device).numeric.bench == "quick"
        assert DEFAULT.for_device(device).experiments.mstep_groups == (0, 1, 2, 3)
    assert DEFAULT.for_device("cpu") is DEFAULT and DEFAULT.for_device("meta") is DEFAULT


def test_profiles_are_validated_and_reject_unknown_keys():
    from derive.profile import DEFAULT, QUICK, FreshGroup

    with pytest.raises(ValueError, match="no key"):
        QUICK.replace("experiments", lenght=3)
    with pytest.raises(ValueError, match="no section"):
        QUICK.replace("experiment", length=3)
    with pytest.raises(ValueError, match="steps"):
        QUICK.replace("experiments", steps=0)
    with pytest.raises(ValueError, match="two groups"):
        QUICK.replace("experiments", fresh=(FreshGroup("torch-float64", 0, (1, 2)), FreshGroup("torch-float64", 1, (2, 3))))
    with pytest.raises(ValueError, match="sweep_seeds"):
        DEFAULT.replace("experiments", sweep_seeds=(1,))
    with pytest.raises(ValueError, match="opt_in"):
        QUICK.replace("experiments", opt_in=("everything",))
    with pytest.raises(ValueError, match="at least two seeds"):
        QUICK.replace("experiments", fresh=(FreshGroup("torch-float64", 0, (42,)),), sweep_seeds=(42,))
    with pytest.raises(ValueError, match="watch_repeats"):
        QUICK.replace("numeric", watch_repeats=0)
    for bad in (("long",), ("demo", "demo"), ("demo", "wide"), "demo"):
        with pytest.raises(ValueError, match="watch_setups"):
            QUICK.replace("numeric", watch_setups=bad)
    with pytest.raises(ValueError, match="fuzz_jobs"):
        QUICK.replace("numeric", fuzz_jobs=-1)
    with pytest.raises(ValueError, match="scaling_sweeps"):
        QUICK.replace("derive", scaling_sweeps={"n": (2,)})
    with pytest.raises(TypeError):
        FreshGroup("torch-float64", 0, (1,), extra=1)
    assert QUICK.replace("experiments", steps=7).experiments.steps == 7 and QUICK.experiments.steps != 7  # frozen


def test_speed_comparison_runs_both_ways_on_the_same_numbers():
    from numeric.experiments import speed

    cfg = sticky.StickyConfig(length=40, steps=100, seeds=(42, 7), arms=("sgd", "em_like"), blocks=2)
    res = speed.compare(cfg, 3, rounds=2)
    assert res["max_abs_loss_difference"] <= 1e-5 and res["runs"] == 4 and len(res["speedup_per_round"]) == 2
    assert all(r > 0 for r in res["speedup_per_round"])
    assert res["ours_full_run_s"] == pytest.approx(res["ours_timed_s"] * 100 / 3)
    assert res["sequential_full_run_s"] == pytest.approx(res["sequential_timed_s"] * 100 / 3)


def test_whole_process_speed_runs_each_side_as_a_process_of_its_own_on_the_same_numbers(tmp_path):
    from numeric.experiments import speed

    lines = []
    res = speed.whole_process(steps=2, rounds=1, threads=1, log=lines.append)
    assert res["same_numbers"] and res["max_abs_loss_difference"] <= speed.WHOLE_PROCESS_TOL
    assert len(res["seconds"]["ours"]) == len(res["seconds"]["sequential"]) == 1 and res["speedup"] > 0
    assert len(lines) == 1 and "round 1/1" in lines[0]
    out = tmp_path / "ours.pt"  # a side's file holds the losses of the paper's 5 seeds x 2 arms, step by step
    speed._side("ours", 2, 1, out)
    assert torch.load(out).shape == (2, 5, 2)
    for bad in (["--rounds", "0"], ["--steps", "-1"], ["--side", "ours"]):
        with pytest.raises(SystemExit):
            speed.main(bad)


def test_whole_process_speed_exits_1_when_the_sides_differ_or_a_side_fails(monkeypatch, capsys):
    import subprocess

    from numeric.experiments import speed

    record = {"steps": 2, "runs": 10, "threads": 1, "seconds": {"ours": [1.0], "sequential": [4.0]},
              "speedup": 4.0, "speedup_per_round": [4.0], "max_abs_loss_difference": 1e-3, "same_numbers": False}
    monkeypatch.setattr(speed, "whole_process", lambda *a: record)
    assert speed.main(["--steps", "2", "--rounds", "1"]) == 1
    assert "differ by more than" in capsys.readouterr().err
    monkeypatch.setattr(speed, "whole_process", lambda *a: {**record, "max_abs_loss_difference": 0.0,
                                                            "same_numbers": True})
    assert speed.main(["--steps", "2", "--rounds", "1"]) == 0

    def fails(*a):
        raise subprocess.CalledProcessError(3, [sys.executable, "-m", "numeric.experiments.speed", "--side", "ours"])

    monkeypatch.setattr(speed, "whole_process", fails)
    assert speed.main(["--steps", "2", "--rounds", "1"]) == 1
    assert "the ours side's process failed (exit status 3)" in capsys.readouterr().err


def test_speedup_statistics():
    sgd = np.array([[2.0, 1.9, 1.8, 1.7], [2.0, 1.95, 1.85, 1.75]])
    em = np.array([[2.0, 1.7, 1.6, 1.5], [2.0, 1.8, 1.7, 1.6]])
    s, threshold, hits = st.speedup(sgd, em, 3)
    assert threshold == pytest.approx(1.725)
    assert hits.tolist() == [1, 2] and s == pytest.approx(2.0)
    lo, hi = st.bootstrap_speedup(sgd, em, 3, resamples=200)
    assert lo <= s <= hi
    t, p = st.paired_t([1.0, 2.0, 3.0], [0.5, 1.4, 2.6])
    assert t > 0 and 0 < p < 1
    assert math.isnan(st.paired_t([1.0], [2.0])[1])
    assert st.steps_to_threshold([[3, 3, 3]], 1.0).tolist() == [3]


def test_saturation_bound_and_specialisation():
    cfg = dynamics.DynamicsConfig(instances=8, train_steps=60, checkpoints=4)
    c9 = dynamics.saturation(cfg)
    assert max(c9["worst_bound_ratio"]) <= 1.0
    assert c9["ds_norm"][-1] < c9["ds_norm"][3] and c9["dv_norm"][-1] > c9["dv_norm"][0]
    e7 = dynamics.specialisation(cfg)
    assert e7["cos_value_signal"][-1] > e7["cos_value_signal"][0] + 0.3
    e6 = dynamics.advantage_sign_agreement(cfg)
    assert all(0.5 < f <= 1.0 for f in e6["scores"])


def test_wind_tunnel_bayes_predictive_by_hand():
    cfg = windtunnel.TunnelConfig(symbols=2, length=4, prior=1.0, sticky=2.0)
    y = torch.tensor([[0, 0, 1, 0]])
    pred = windtunnel.bayes_predictive(cfg, y)
    # t=0: row 0 prior (1+2, 1) -> (3/4, 1/4); t=1: one 0->0 seen -> (4/5, 1/5); t=2: row 1 prior (1, 3) -> (1/4, 3/4)
    assert torch.allclose(pred[0], torch.tensor([[0.75, 0.25], [0.8, 0.2], [0.25, 0.75]], dtype=torch.float64))
    with pytest.raises(ValueError, match="symbols must be a positive integer"):
        windtunnel.TunnelConfig(symbols=0).validate()


def test_interrupted_training_resumes_exactly(tmp_path):
    cfg = sticky.StickyConfig(length=40, steps=12, seeds=(42, 7), blocks=2, checkpoints=3, tracked_rows=4)
    full = sticky.train(cfg)
    state = tmp_path / "run.partial"

    def stop_at(step):
        if step == 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sticky.train(cfg, progress=stop_at, state_path=state, save_every=5)
    assert state.exists()
    resumed = sticky.train(cfg, state_path=state, save_every=5)
    assert torch.equal(resumed.losses, full.losses)
    assert all(torch.equal(a, b) for a, b in zip(resumed.params, full.params))
    assert len(resumed.tracked) == len(full.tracked)


def test_speed_comparison_times_the_step_loops_only(monkeypatch):
    """Set-up (make_data) is outside both clocks: making it slow does not change the timed seconds."""
    import time as time_module

    from numeric.experiments import speed

    cfg = sticky.StickyConfig(length=40, steps=100, seeds=(42,), arms=("sgd",), blocks=2)
    make_data = sticky.make_data

    def slow(*a, **k):
        time_module.sleep(0.3)
        return make_data(*a, **k)

    monkeypatch.setattr(sticky, "make_data", slow)
    res = speed.compare(cfg, 2, rounds=1)
    assert res["ours_timed_s"] < 0.3 and res["sequential_timed_s"] < 0.3
    run = sticky.train(dataclasses.replace(cfg, steps=3, checkpoints=1))
    assert 0 < run.loop_seconds < 0.3
