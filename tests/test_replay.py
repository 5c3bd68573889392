"""The authors' random streams, the replay check against their script, and the typicality study."""
import dataclasses

import numpy as np
import pytest
import torch

from numeric.experiments import chain, replay, sticky, typicality
from numeric.experiments import stats as st

AUTHORS = sticky.StickyConfig(stream="authors", mu_rng="torch-float32", arms=("sgd", "em_like"), checkpoints=1)


def test_authors_transition_matrix_is_the_float32_reading_of_ours():
    P32 = chain.authors_transition_matrix()
    assert P32.dtype == torch.float32
    assert float((P32.double() - chain.transition_matrix()).abs().max()) <= 3e-8
    assert torch.allclose(P32.sum(1), torch.ones(8), atol=1e-6)


def test_authors_stream_is_the_global_generator_protocol_seed_for_seed():
    """The protocol as the script runs it, on torch's global generator, against ours on a private one."""
    P32 = chain.authors_transition_matrix()
    state = torch.get_rng_state()
    try:
        torch.manual_seed(7)
        saved = torch.get_rng_state()
        torch.manual_seed(0)
        mu = torch.randn(8, 20)
        torch.set_rng_state(saved)
        ys = [int(torch.randint(8, (1,)))]
        for _ in range(1, 60):
            ys.append(int(torch.multinomial(P32[ys[-1]], 1)))
        noise = torch.randn(59, 20)
        for _ in range(4):
            torch.randn(3, 3)  # model construction's discarded draws
        torch.manual_seed(7)
        weights = [torch.randn(sh) * 0.1 for sh in ((20, 10), (20, 10), (20, 15), (15, 8))]
    finally:
        torch.set_rng_state(state)
    x, y = chain.authors_sequence(P32, chain.symbol_means(rng="torch-float32").float(), 60, 7)
    assert torch.equal(y, torch.tensor(ys[1:])) and torch.equal(x, mu[torch.tensor(ys[:-1])] + noise)
    cfg = dataclasses.replace(AUTHORS, length=60, seeds=(7,))
    for ours, theirs in zip(sticky.seed_params(cfg, 7), weights):
        assert torch.equal(ours, theirs.double())


def test_replay_draws_only_on_its_own_cpu_generator():
    cfg = dataclasses.replace(AUTHORS, length=40, seeds=(42, 2024))
    torch.manual_seed(1)
    a = sticky.make_data(cfg, "cpu")
    torch.manual_seed(2)
    before = torch.get_rng_state()
    b = sticky.make_data(cfg, "cpu")
    assert torch.equal(torch.get_rng_state(), before)  # the global generator is neither read nor advanced
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)


def test_replay_does_not_depend_on_what_is_batched_with_it():
    cfg = dataclasses.replace(AUTHORS, length=50, steps=3, seeds=(42,), arms=("sgd",), blocks=2)
    wide = dataclasses.replace(cfg, seeds=(1, 42, 2024), arms=("em_like", "sgd"))
    one, many = sticky.make_data(cfg, "cpu"), sticky.make_data(wide, "cpu")
    assert torch.equal(one.x[0, 0], many.x[0, 1]) and torch.equal(one.y[0], many.y[1])
    assert all(torch.equal(p[0, 0], q[1, 1]) for p, q in zip(sticky.init_params(cfg, "cpu"), sticky.init_params(wide, "cpu")))
    alone, batched = sticky.train(cfg), sticky.train(wide)
    assert np.allclose(alone.losses[0, 0].numpy(), batched.losses[1, 1].numpy(), atol=1e-6, rtol=0)


def test_a_run_on_another_device_replays_the_same_draws(monkeypatch):
    """Every generator is a CPU one and the data are moved afterwards: on a device without tensors of
    its own ('meta'), the draws are still made and the tensors land there."""
    made = []
    real = torch.Generator

    def spy(*args, **kwargs):
        made.append(kwargs.get("device", args[0] if args else "cpu"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "Generator", spy)
    cfg = dataclasses.replace(AUTHORS, length=30, seeds=(42, 9999))
    data = sticky.make_data(cfg, "meta")
    params = sticky.init_params(cfg, "meta")
    assert made and all(str(d) == "cpu" for d in made)
    assert data.x.device.type == "meta" and data.onehot.device.type == "meta" and params[0].device.type == "meta"
    assert data.x.shape == (1, 2, 29, cfg.d_in)


def test_authors_seeds_start_where_the_script_starts():
    """The loss before the first step (data and initial weights only) equals the script's, seed for seed."""
    for i, seed in enumerate(sticky.PAPER_SEEDS):
        losses, _ = sticky.reference_run(AUTHORS, "sgd", i, 1)
        assert abs(losses[0] - replay.AUTHORS[seed][2]) <= replay.LOSS_TOL


def test_replay_compare_says_no_to_a_perturbed_run():
    seeds = list(replay.AUTHORS)
    L = np.zeros((2, 5, replay.QUICK_STEPS + 1))
    for i, s in enumerate(seeds):
        L[0, i, 0] = replay.AUTHORS[s][2]
        L[:, i, -1] = replay.QUICK_CURVE[s]
    assert replay.compare(seeds, replay.QUICK_STEPS, L)["ok"]
    L[1, 3, -1] += 3e-5
    bad = replay.compare(seeds, replay.QUICK_STEPS, L)
    assert not bad["ok"] and bad["max_loss_error"] > replay.LOSS_TOL
    with pytest.raises(ValueError, match="not one of the authors' seeds"):
        replay.compare([1], 1, np.zeros((2, 1, 2)))


def test_full_replay_compare_checks_the_em_steps():
    seeds, steps = list(replay.AUTHORS), replay.AUTHORS_STEPS
    L = np.empty((2, 5, steps + 1))
    for i, s in enumerate(seeds):
        a = replay.AUTHORS[s]
        L[0, i] = np.linspace(a[2], a[0], steps + 1)
        hit = replay.AUTHORS_EM_STEPS[s]  # EM-like falls below the mean SGD final loss exactly at its step
        L[1, i] = np.where(np.arange(steps + 1) < hit, 2.1, a[1])
    ent = [[replay.AUTHORS[s][3] for s in seeds], [replay.AUTHORS[s][4] for s in seeds]]
    acc = [[replay.AUTHORS[s][5] for s in seeds], [replay.AUTHORS[s][6] for s in seeds]]
    good = replay.compare(seeds, steps, L, ent, acc)
    assert good["ok"] and good["em_steps"] == list(replay.AUTHORS_EM_STEPS.values())
    assert abs(good["speedup"] - replay.authors_speedup()) < 1e-12 and round(good["speedup"], 2) == 2.18
    L[1, 0, 700:747] = 2.1  # seed 42 reaches the threshold later: same final losses, other steps
    assert not replay.compare(seeds, steps, L, ent, acc)["ok"]
    L[1, 0, 700:747] = replay.AUTHORS[42][1]
    ent[1][2] += 1e-3
    assert not replay.compare(seeds, steps, L, ent, acc)["ok"]


def test_stream_is_validated():
    with pytest.raises(ValueError, match="stream must be one of"):
        sticky.StickyConfig(stream="numpy").validate()
    with pytest.raises(ValueError, match="mu_rng='torch-float32'"):
        sticky.StickyConfig(stream="authors").validate()


def test_first_passage_is_steps_to_threshold_for_many_thresholds():
    rng = np.random.default_rng(0)
    curves = 2.1 - np.cumsum(rng.random((6, 40)) * 0.01, axis=1) + rng.normal(0, 0.003, (6, 40))
    thresholds = [2.2, 2.05, 1.99, 1.95, 1.0]
    got = st.first_passage(curves, thresholds)
    for t_i, t in enumerate(thresholds):
        assert got[:, t_i].tolist() == st.steps_to_threshold(curves, t).tolist()


def test_typicality_analysis_places_the_reference_in_each_distribution():
    rng = np.random.default_rng(1)
    steps = 50
    t = np.arange(steps + 1)

    def arms(em_rate, S):
        sgd = 2.08 - 0.001 * t[None] * (1 + 0.1 * rng.standard_normal((S, 1)))
        em = 2.08 - em_rate * t[None] * (1 + 0.1 * rng.standard_normal((S, 1)))
        return np.stack([sgd, em])

    study = typicality.analyse({"authors": arms(0.003, 20), "ours": arms(0.002, 20)}, steps,
                               {"sgd_final_loss": 2.03, "em_like_final_loss": 1.90, "speedup": 2.0})
    a, o = study["protocols"]["authors"], study["protocols"]["ours"]
    assert a["em_like"]["final_loss_mean"] < o["em_like"]["final_loss_mean"]
    assert a["speedup"] > o["speedup"] > 1
    diff = study["difference_authors_minus_ours"]["em_like"]
    assert diff["ci95"][1] < 0 and diff["p_value"] < 0.01
    frac = a["subset"]["fraction_as_favourable"]
    assert 0 <= frac["em_like_final_loss"] <= 1 and frac["speedup"] > o["subset"]["fraction_as_favourable"]["speedup"]
    assert "authors protocol, 20 seeds" in typicality.summary(study)


def test_profiles_replay_the_papers_seeds_on_the_authors_streams():
    from derive.profile import PROFILES
    from numeric.experiments.stage import configs

    for name, profile in PROFILES.items():
        cfgs = configs(profile.experiments)
        r = cfgs["replay"]
        assert (r.stream, r.mu_rng, r.seeds, r.arms, r.length) == ("authors", "torch-float32", sticky.PAPER_SEEDS,
                                                                    ("sgd", "em_like"), 2000)
        assert r.steps == (replay.QUICK_STEPS if name == "quick" else replay.AUTHORS_STEPS)
        assert {c.stream for c in cfgs["typicality"].values()} == set(typicality.PROTOCOLS)
    seeds = PROFILES["default"].experiments.typicality_seeds
    assert len(seeds) >= 50 and not set(seeds) & set(sticky.PAPER_SEEDS)


def test_typicality_is_read_from_the_cache_but_never_retrained_unasked(tmp_path):
    """The study is a Dask campaign (one task per protocol and group of seeds, cached under cache/typicality):
    without --extended it is read when every task is cached and never trained (no cluster is even started)."""
    from derive.results import Results
    from numeric.experiments.stage import ExperimentStage

    def stage(flag):
        st_ = ExperimentStage(Results({}), "quick", "cpu", 0, tmp_path, log=lambda *a: None, extended=flag)
        st_.data["sticky_replay"] = {}
        return st_

    quiet = stage(False)
    quiet.typicality()
    assert "typicality" not in quiet.data and quiet._cluster is None  # nothing cached: nothing reported or trained
    loud = stage(True)
    try:
        loud.typicality()
    finally:
        loud.close()
    assert set(loud.data["typicality"]["protocols"]) == set(typicality.PROTOCOLS)
    entries = sorted((tmp_path / "cache" / typicality.LABEL).glob("*.json"))
    assert len(entries) == len(typicality.tasks(loud.cfgs["typicality"])) >= 4  # 2 protocols x groups of seeds
    again = stage(False)
    again.typicality()
    assert again._cluster is None, "a cached study was retrained"
    assert again.data["typicality"]["protocols"] == loud.data["typicality"]["protocols"]
    entries[0].write_bytes(b"truncated")
    broken = stage(False)
    broken.typicality()
    assert broken._cluster is None, "a study with a corrupt task was retrained unasked"
    assert "typicality" not in broken.data and not entries[0].exists()


def test_typicality_tasks_split_the_seeds_and_join_them_back():
    """Groups of SEEDS_PER_TASK seeds per protocol, and the joined curves equal one batched run per group."""
    from derive.profile import QUICK
    from numeric.experiments.stage import configs

    cfgs = configs(QUICK.experiments)["typicality"]
    todo = typicality.tasks(cfgs, seeds_per_task=4)
    assert [t.args[1] for t in todo[:2]] == [(1, 2, 3, 4), (5, 6)] and len(todo) == 4
    assert len({t.name for t in todo}) == 4
    small = {p: dataclasses.replace(c, steps=3, seeds=(1, 2, 3)) for p, c in cfgs.items()}
    joined = typicality.run(small, workers=0, log=lambda *a: None)
    for p, c in small.items():
        whole = sticky.train(c, "cpu", log=lambda *a: None).losses.double().numpy()
        assert joined[p].shape == whole.shape == (2, 3, 4)
        np.testing.assert_allclose(joined[p], whole, rtol=1e-6)
