"""Every mechanism in the wind tunnel (numeric.experiments.mechanism_tunnel), E4's frame per mechanism in the grid,
and the G2 rule (numeric.experiments.rules.g2) with its controls."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from derive import mechanisms
from derive import profile as profiles
from numeric.experiments import mechanism_grid as mg
from numeric.experiments import mechanism_layers as ml
from numeric.experiments import mechanism_tunnel as mt
from numeric.experiments import registry, rules, windtunnel

TINY = mt.MechanismTunnelConfig(tunnel=windtunnel.TunnelConfig(length=10, batch=4, steps=3, eval_batch=6, d_k=4, d_v=5),
                                seeds=(0, 1, 2), seeds_per_task=2)
QUIET = dict(log=lambda *a: None)


def test_tunnel_on_one_and_two_workers_is_the_same_and_resumes(tmp_path):
    one, o1 = mt.run(TINY, workers=1, **QUIET)
    two, o2 = mt.run(TINY, workers=2, cache_dir=tmp_path, **QUIET)
    assert (o1.workers, o2.workers) == (1, 2) and o1.computed == 14 and not o2.failed
    untimed = lambda s: {m: {k: v for k, v in x.items() if k != "timing"} for m, x in s.items()}  # noqa: E731
    assert untimed(one) == untimed(two)
    again, o3 = mt.run(TINY, workers=0, cache_dir=tmp_path, **QUIET)
    assert o3.cached == 14 and o3.computed == 0 and untimed(again) == untimed(two)
    for s in one.values():
        assert s["seeds"] == [0, 1, 2] and s["finite"] and set(s["arms"]) == set(mt.ARMS)
        for arm in mt.ARMS:
            e = s["arms"][arm]
            assert len(e["kl_bits_per_seed"]) == 3 and min(e["kl_bits_per_seed"]) > 0
            assert e["kl_bits_ci95"][0] <= e["kl_bits"] <= e["kl_bits_ci95"][1]


def test_a_tunnel_task_is_pure_and_a_seed_does_not_depend_on_its_batch():
    a = mt.train_task(TINY, "glr", (1,))
    b = mt.train_task(TINY, "glr", (0, 1))
    assert np.allclose(a["kl_bits"][0][0], b["kl_bits"][0][1], rtol=1e-12)
    a.pop("timing")
    again = mt.train_task(TINY, "glr", (1,))
    again.pop("timing")
    assert a == again


def test_the_tunnel_learns_and_em_like_scales_only_the_content():
    """Against a control: trained parameters are closer to Bayes than the initial ones; em_like's content lr is
    value_lr_ratio x the routing lr (and the readout's)."""
    cfg = dataclasses.replace(TINY, tunnel=dataclasses.replace(TINY.tunnel, steps=150, batch=16, length=16, lr=0.5))
    trained = mt.train_task(cfg, "softmax", (0,))
    untrained = mt.train_task(dataclasses.replace(cfg, tunnel=dataclasses.replace(cfg.tunnel, steps=1)), "softmax", (0,))
    assert trained["kl_bits"][0][0] < 0.8 * untrained["kl_bits"][0][0]
    params = mt.init_params(TINY, "moe", (0, 1))
    assert params["W_E"].shape == (2, 2, 1, mechanisms.get("moe").layer.experts, 2 * TINY.tunnel.symbols, TINY.tunnel.d_v)
    assert torch.equal(params["W_E"][0], params["W_E"][1])  # both arms start from one point


@pytest.mark.parametrize("module", [mt, mg])
def test_the_commands_refuse_a_bad_worker_count_and_an_unreachable_scheduler(module, capsys):
    with pytest.raises(SystemExit) as e:
        module.main(["--quick", "--workers", "-1"])
    assert e.value.code == 2 and "must be a non-negative integer" in capsys.readouterr().err
    from numeric import campaign

    def unreachable(*a, **k):
        raise campaign.CampaignError("cannot reach the Dask scheduler tcp://127.0.0.1:1: refused")

    module_run = module.run
    try:
        module.run = unreachable
        assert module.main(["--quick", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    finally:
        module.run = module_run
    assert "cannot reach the Dask scheduler" in capsys.readouterr().err


def test_bad_tunnel_configs_name_the_field():
    with pytest.raises(ValueError, match="mechanisms"):
        dataclasses.replace(TINY, mechanisms=("softmax", "nope")).validate()
    with pytest.raises(ValueError, match="seeds"):
        dataclasses.replace(TINY, seeds=(3,)).validate()


def test_profiles_size_the_tunnel_and_extended_is_e5s_own():
    from numeric.experiments.stage import configs

    sizes = profiles.get("default").experiments
    tunnel = configs(sizes)["tunnel"]
    reduced, full = mt.from_sizes(sizes, tunnel), mt.from_sizes(sizes, tunnel, extended=True)
    assert (reduced.tunnel.steps, reduced.tunnel.batch) == (sizes.mechanism_tunnel_steps, sizes.mechanism_tunnel_batch)
    assert (full.tunnel.steps, full.tunnel.batch) == (tunnel.steps, tunnel.batch) == (1500, 64)
    with pytest.raises(ValueError, match="mechanism_tunnel_seeds"):
        dataclasses.replace(sizes, mechanism_tunnel_seeds=(1, 1)).validate()


# -- E4 per mechanism ------------------------------------------------------------------------------------------------
def test_tracked_weights_are_the_rows_the_layer_mixes_with():
    cfg = mg.GridConfig(length=9, steps=2, seeds=(42, 2024), blocks=2).sticky()
    x = torch.randn(1, 2, 8, cfg.d_in, dtype=torch.float64)
    mask = ml.causal(8)
    for m in ml.names():
        p = {k: v.double() for k, v in ml.init_params(cfg, m, (42, 2024), 2, torch.float64).items()}
        rows = [0, 3, 7]
        got = ml.tracked_weights(m, p, x, rows)
        w = ml.weights(m, p, x, mask)
        dense = w["w"] if m in ("softmax", "sigmoid", "linear", "ssd", "moe") else w["unrolled"]
        if m == "moe":
            want = dense[..., rows, :].flatten(-2)
        else:
            want = torch.cat([dense[..., r, : r + 1] for r in rows], -1)
        torch.testing.assert_close(got, want.detach(), rtol=1e-12, atol=1e-14, msg=m)


def test_the_grid_applies_e4_per_mechanism_and_it_can_say_both():
    tiny = mg.GridConfig(length=13, steps=4, seeds=(42, 2024), seeds_per_task=2, blocks=3, checkpoints=3)
    r = mg.merge([mg.train_task(tiny, "softmax", (42, 2024))])
    f = r["frame"]
    assert f["steps"] == [0, 2, 4] and np.asarray(f["routing"]).shape == (2, 2, 3)
    assert np.asarray(f["routing"])[..., -1].max() == 0 and np.asarray(f["content"])[..., 0].min() > 0
    verdict = mg.frame_rule(r).verdict
    assert verdict in rules.VERDICTS
    frozen = {**r, "frame": {**f, "routing": [[[1.0, 0.0, 0.0]] * 2] * 2, "content": [[[1.0, 0.5, 0.0]] * 2] * 2}}
    assert mg.frame_rule(frozen).verdict == "reproduced"  # the frame settles first by construction
    late = {**r, "frame": {**f, "routing": [[[1.0, 0.5, 0.0]] * 2] * 2, "content": [[[1.0, 0.0, 0.0]] * 2] * 2}}
    assert mg.frame_rule(late).verdict == "not-reproduced"


# -- G2 ----------------------------------------------------------------------------------------------------------------
def test_g2_is_registered_and_its_controls_say_what_they_must():
    c = registry.REGISTRY["G2"]
    assert c.rule is rules.g2 and c.ref.startswith("ours: ")
    for n in (2, 3, 5):
        got = {cid: r.verdict for cid, (_, r) in rules.g2_controls(rules.g2_synthetic(seeds=n)).items()}
        assert got == rules.G2_EXPECTED, n


def test_g2_verdicts():
    k = rules.g2_synthetic(seeds=4)
    good = rules.g2(**k)
    assert good.verdict == "reproduced" and good.measured["ratio"] > 3 and good.measured["permutation_p"] <= 0.05
    flipped = rules.g2(k["kl"], {m: not v for m, v in k["competition"].items()})
    assert flipped.verdict == "not-reproduced"
    one_side = rules.g2(k["kl"], {m: True for m in k["kl"]})
    assert one_side.verdict == "not-reproduced" and "no comparison" in one_side.reason
    diverged = {**k["kl"], "ssd": [float("nan")] * 4}
    out = rules.g2(diverged, k["competition"])
    assert "ssd" in out.measured["left_out"] and "ssd" not in out.measured["mechanisms"]
    with pytest.raises(ValueError, match="same seeds"):
        rules.g2({**k["kl"], "ssd": [0.2, 0.2]}, k["competition"])


def test_the_bijection_task_trains_every_chosen_mechanism_with_its_floors_beside():
    """--task bijection: the same campaign on bijection recall (numeric.experiments.bijection): every mechanism's KL
    to the exact Bayes predictive, at the key positions and the accuracy where the answer was shown, and the floors
    on the same held-out sequences, ordered as they see less; its tasks are cached apart from the wind tunnel's."""
    from numeric.experiments import bijection

    cfg = mt.MechanismTunnelConfig(tunnel=bijection.BijectionConfig(values=4, pairs=6, batch=4, steps=3, eval_batch=8,
                                                                      d_k=4, d_v=5),
                                   mechanisms=("softmax", "glr"), seeds=(0, 1), seeds_per_task=2)
    summary, outcome = mt.run(cfg, workers=0, **QUIET)
    assert not outcome.failed and set(summary) == {"softmax", "glr"}
    for s in summary.values():
        for arm in mt.ARMS:
            e = s["arms"][arm]
            assert e["kl_bits"] > 0 and e["kl_bits_queries"] > 0 and 0 <= e["accuracy_seen"] <= 1
        f = s["floors"]
        assert f["prior"]["kl_bits"] > f["no_context"]["kl_bits"] > f["counts"]["kl_bits"] > 0
    assert summary["softmax"]["floors"] == summary["glr"]["floors"]  # the same sequences for every mechanism
    assert cfg.key() != dataclasses.replace(TINY, mechanisms=("softmax", "glr")).key()
    assert "floor counts" in mt.table(summary)


def test_a_rate_sweep_is_one_batch_of_runs_and_each_arms_rate_is_chosen_on_validation_sequences():
    """lrs: every (arm, rate) a run of its own on the leading axis; a run at one rate equals the same rate trained
    alone (the runs share nothing); each arm's reported numbers are those of the rate with the lowest validation KL,
    which is computed on sequences other than the scored ones."""
    from numeric.experiments import bijection

    task = bijection.BijectionConfig(values=4, pairs=6, batch=4, steps=15, eval_batch=8, d_k=4, d_v=5)
    swept = mt.MechanismTunnelConfig(tunnel=task, mechanisms=("softmax",), seeds=(0, 1), seeds_per_task=2,
                                     lrs=(1e-3, 3e-2))
    out = mt.train_task(swept, "softmax", (0, 1))
    assert out["runs"] == [["sgd", 1e-3], ["sgd", 3e-2], ["em_like", 1e-3], ["em_like", 3e-2]]
    alone = mt.train_task(dataclasses.replace(swept, lrs=(3e-2,)), "softmax", (0, 1))
    assert np.allclose(out["kl_bits"][1], alone["kl_bits"][0], rtol=1e-10)
    assert np.allclose(out["kl_bits"][3], alone["kl_bits"][1], rtol=1e-10)
    assert "validation_kl_bits" in out and "validation_kl_bits" in alone  # rates given: scored on validation too
    assert np.allclose(out["validation_kl_bits"][1], alone["validation_kl_bits"][0], rtol=1e-10)
    assert "validation_kl_bits" not in mt.train_task(dataclasses.replace(swept, lrs=()), "softmax", (0, 1))
    assert not np.allclose(out["validation_kl_bits"], out["kl_bits"])  # other sequences
    s = mt.summarise([out])
    for a, arm in enumerate(mt.ARMS):
        e = s["arms"][arm]
        val = {lr: np.mean(out["validation_kl_bits"][2 * a + i]) for i, lr in enumerate(swept.lrs)}
        assert e["lr"] == min(val, key=val.get) and len(e["lr_sweep"]) == 2
        r = 2 * a + swept.lrs.index(e["lr"])
        assert np.allclose(e["kl_bits_per_seed"], out["kl_bits"][r], rtol=1e-12)  # the task's own score of it
        T = task.length - 1
        assert len(e["entropy_by_position"]) == T and len(e["entropy_mae_by_position"]) == T
        assert abs(np.mean(e["entropy_mae_by_position"]) - e["entropy_mae_bits"]) < 1e-9
    assert len(s["bayes_entropy_by_position"]) == task.length - 1
    assert "lr " in mt.table({"softmax": s})
    with pytest.raises(ValueError, match="distinct positive rates"):
        dataclasses.replace(swept, lrs=(1e-3, 1e-3)).validate()
    with pytest.raises(ValueError, match="distinct positive rates"):
        dataclasses.replace(swept, lrs=(-1.0,)).validate()


def test_the_conjecture_config_reads_the_profile_and_the_cli_refuses_bad_options(capsys):
    sizes = profiles.get("quick").experiments
    cfg = mt.conjecture_config(sizes, "bijection")
    assert cfg.mechanisms == ml.trainable() and cfg.lrs == tuple(sizes.conjecture_lrs)
    assert (cfg.tunnel.steps, cfg.tunnel.batch) == (sizes.conjecture_steps, sizes.conjecture_batch)
    assert mt.conjecture_config(sizes, "bijection", extended=True).tunnel.steps == 1500
    with pytest.raises(SystemExit):
        mt.main(["--task", "windtunnel", "--pairs", "8"])
    assert "--pairs applies to --task bijection only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        mt.main(["--task", "bijection", "--lrs", "a,b"])
    assert "comma-separated learning rates" in capsys.readouterr().err
    with pytest.raises(ValueError, match="conjecture_lrs"):
        dataclasses.replace(sizes, conjecture_lrs=(0.0,)).validate()
    with pytest.raises(ValueError, match="conjecture_tasks"):
        dataclasses.replace(sizes, conjecture_tasks=("sticky",)).validate()


def test_float32_training_is_scored_in_float64_and_lands_near_float64_training():
    """dtype: the parameters train in float32 (the leaves are float32), the evaluation casts them to float64; on a
    short run the two dtypes' KLs agree to float32's rounding, not exactly (they are different computations)."""
    from numeric.experiments import bijection

    task = bijection.BijectionConfig(values=4, pairs=6, batch=4, steps=10, eval_batch=8, d_k=4, d_v=5)
    cfg = mt.MechanismTunnelConfig(tunnel=task, mechanisms=("softmax",), seeds=(0, 1), seeds_per_task=2)
    params = mt.init_params(dataclasses.replace(cfg, dtype="float32"), "softmax", (0, 1))
    assert all(p.dtype == torch.float32 for p in params.values())
    wide, narrow = (mt.train_task(dataclasses.replace(cfg, dtype=d), "softmax", (0, 1)) for d in ("float64", "float32"))
    a, b = np.asarray(wide["kl_bits"]), np.asarray(narrow["kl_bits"])
    assert np.allclose(a, b, rtol=1e-4) and not np.array_equal(a, b)
    assert dataclasses.replace(cfg, dtype="float32").key() != cfg.key()
    with pytest.raises(ValueError, match="dtype"):
        dataclasses.replace(cfg, dtype="float16").validate()
    with pytest.raises(ValueError, match="conjecture_dtype"):
        dataclasses.replace(profiles.get("quick").experiments, conjecture_dtype="half").validate()


def test_several_configs_run_as_one_campaign_each_summarised_as_alone(tmp_path):
    """run_all: the configs' tasks in one campaign, each config's summary what `run` gives it alone; the baselines'
    tasks (the longest) carry the higher priority, so they start first."""
    from numeric.experiments import bijection

    task = bijection.BijectionConfig(values=4, pairs=5, batch=2, steps=3, eval_batch=4, d_k=4, d_v=5)
    a = mt.MechanismTunnelConfig(tunnel=task, mechanisms=("softmax", "torch-lstm"), seeds=(0, 1), seeds_per_task=2)
    b = dataclasses.replace(a, tunnel=dataclasses.replace(task, pairs=6), mechanisms=("gate",))
    (sa, sb), outcome = mt.run_all([a, b], workers=0, **QUIET)
    assert outcome.computed == 3 and not outcome.failed and set(sa) == {"softmax", "torch-lstm"} and set(sb) == {"gate"}
    untimed = lambda s: {m: {k: v for k, v in x.items() if k != "timing"} for m, x in s.items()}  # noqa: E731
    assert untimed(sa) == untimed(mt.run(a, workers=0, **QUIET)[0])
    assert untimed(sb) == untimed(mt.run(b, workers=0, **QUIET)[0])
    assert [t.priority for t in mt.tasks(a)] == [0, 1]


def test_a_rate_chosen_at_the_sweeps_edge_is_trained_once_more_past_it():
    """run_all(extend=True): with two rates every chosen rate is at an edge, so each model trains once more one step
    past it; the joined runs are those of the three rates trained at once, and the rate is chosen over all of them."""
    from numeric.experiments import bijection

    task = bijection.BijectionConfig(values=4, pairs=5, batch=2, steps=4, eval_batch=4, d_k=4, d_v=5)
    cfg = mt.MechanismTunnelConfig(tunnel=task, mechanisms=("softmax",), seeds=(0, 1), seeds_per_task=2,
                                   lrs=(1e-2, 3e-2))
    plain = mt.train_task(cfg, "softmax", (0, 1))
    past = mt.edges(cfg, [plain])["softmax"]
    assert past and all(np.isclose(x, 1e-2 / 3, rtol=1e-5) or np.isclose(x, 9e-2) for x in past)
    (s,), outcome = mt.run_all([cfg], workers=0, **QUIET)
    assert s["softmax"]["extended_rates"] == list(past) and outcome.computed == 2
    every = mt.train_task(dataclasses.replace(cfg, lrs=(1e-2, 3e-2) + past), "softmax", (0, 1))
    for arm in mt.ARMS:
        e = s["softmax"]["arms"][arm]
        assert sorted(x["lr"] for x in e["lr_sweep"]) == sorted((1e-2, 3e-2) + past)
        swept = dict(zip([tuple(r) for r in every["runs"]], every["validation_kl_bits"]))
        for x in e["lr_sweep"]:
            assert np.isclose(x["validation_kl_bits"], np.mean(swept[(arm, x["lr"])]), rtol=1e-9)
        assert isinstance(e["lr_at_edge"], bool)
    (unextended,), _ = mt.run_all([cfg], workers=0, extend=False, **QUIET)
    assert "extended_rates" not in unextended["softmax"]
    with pytest.raises(ValueError, match="different mechanisms"):
        mt.join(plain, {**plain, "mechanism": "gate"})
