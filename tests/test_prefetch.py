"""The experiments stage's smaller trainings as one campaign (ExperimentStage.prefetch): each trained once, on one
thread, into the stage's cache, where its experiment reads it; the same result as training it here."""
from __future__ import annotations

import dataclasses

import torch

from derive.results import Results
from numeric.experiments import registry
from numeric.experiments import stage as stage_module
from numeric.experiments.stage import ExperimentStage


def _stage(tmp_path, threads, lines):
    stage = ExperimentStage(Results({}, catalogue=registry.catalogue()), "quick", "cpu", 0, tmp_path, log=lines.append,
                            threads=threads)
    stage.cfgs["tunnel"] = dataclasses.replace(stage.cfgs["tunnel"], steps=20)
    stage.cfgs["deep"] = dataclasses.replace(stage.cfgs["deep"], steps=20, every=5)
    stage.cfgs["manifold"] = dataclasses.replace(stage.cfgs["manifold"], steps=10)
    return stage


def test_prefetch_trains_every_side_job_once_and_each_experiment_reads_its_own(tmp_path):
    lines = []
    stage = _stage(tmp_path, 2, lines)
    try:
        stage.prefetch()
    finally:
        stage.close()
    side = stage.side
    assert set(side) == {"manifold", "deep", "deep-frozen", "tunnel-sgd", "tunnel-em_like"}
    record = stage.data["side_trainings"]
    assert record["computed"] == len(side) and not record["failed"] and record["workers"] == 2
    for name, cfg, _, _ in side.values():
        assert stage.cache.key(name, cfg, "cpu").exists(), name
    # what the campaign trained is what the experiment trains here on one thread, to the bit
    name, cfg, fn, kw = side["tunnel-em_like"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        here = fn(cfg, "cpu", **kw)
    finally:
        torch.set_num_threads(threads)
    there = stage.cache.load(stage.cache.key(name, cfg, "cpu"), lines.append)
    assert here["curve"] == there["curve"] and here["kl_bits"] == there["kl_bits"]
    # a later stage finds every job cached: no campaign starts, and the experiment reads its result
    again = _stage(tmp_path, 2, lines)
    again.prefetch()
    assert again._cluster is None and "side_trainings" not in again.data
    again.tunnel()
    assert any(line.startswith("  cached   tunnel-") for line in lines)
    assert again.data["wind_tunnel"]["arms"]["em_like"]["kl_bits"] == there["kl_bits"]


def test_prefetch_leaves_the_jobs_to_their_experiments_on_one_thread(tmp_path):
    lines = []
    stage = _stage(tmp_path, 1, lines)
    stage.prefetch()
    assert stage._cluster is None and "side_trainings" not in stage.data
    assert not any(stage.cache.key(n, c, "cpu").exists() for n, c, _, _ in stage.side.values())
    assert stage_module._on_one_thread(lambda cfg, device, **kw: torch.get_num_threads(), None, "cpu", {}) == 1
