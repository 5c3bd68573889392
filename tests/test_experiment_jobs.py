"""The experiments stage's training runs as one campaign ahead of its steps (numeric.experiments.jobs, stage.prefetch):
every run a step reads is trained by the campaign, the same as in this process, and nothing is trained twice."""
from __future__ import annotations

import pytest
import torch

from derive.results import Results
from numeric.experiments import jobs, registry
from numeric.experiments.stage import ExperimentStage


def _stage(tmp_path, lines, **kw):
    return ExperimentStage(Results({}, catalogue=registry.catalogue()), "quick", "cpu", 0, tmp_path, log=lines.append,
                           **kw)


def _no_training(*_args, **_kwargs):
    raise AssertionError("trained in the stage's process after the campaign")


def test_campaign_trains_every_run_the_steps_read(tmp_path, monkeypatch):
    lines = []
    stage = _stage(tmp_path, lines, threads=2)
    try:
        stage.prefetch()
        done = stage.data["training_campaign"]
        assert not done["failed"] and done["workers"] == 2
        assert set(done["runs"]) == {j.name for j in stage._jobs()}
        assert all(j.cached(stage.cache, "cpu") for j in stage._jobs())
        # the longest runs start first (load balance): sticky groups by size, the small jobs after them
        costs = [next(j.cost for j in stage._jobs() if j.name == name) for name in done["runs"]]
        assert costs == sorted(costs, reverse=True) and costs[0] > 0
        for name in ("sticky_record", "evaluation_record", "tunnel_record", "deep_record"):
            monkeypatch.setattr(jobs, name, _no_training)
        monkeypatch.setattr(ExperimentStage, "mechanisms", lambda self: None)  # its own campaign, tested elsewhere
        stage._run()  # prefetch again finds everything cached; every step reads the cache
    finally:
        stage.close()
    assert stage.data["training_campaign"]["runs"] == done["runs"]  # not rerun
    assert all(c.status == "pass" for c in stage.results.checks), [c.id for c in stage.results.checks if c.status != "pass"]
    for name in ("sticky-replay", "sticky-fresh-0", "sticky-fresh-0-heldout", "tunnel-", "deep-watch-",
                 "sticky-frozen-routing-"):
        assert any(line.startswith(f"  cached   {name}") for line in lines), name


def test_a_campaign_record_equals_the_one_trained_here(tmp_path, monkeypatch):
    lines = []
    stage = _stage(tmp_path, lines, threads=2)
    job = next(j for j in stage._jobs() if j.name == "sticky-fresh-0")
    monkeypatch.setattr(stage, "_jobs", lambda: [job])
    try:
        stage.prefetch()
    finally:
        stage.close()
    cached = stage.cache.load(stage.cache.key(job.name, job.cfg, "cpu"), lines.append)
    here = jobs.sticky_record(job.cfg, "cpu")
    assert torch.equal(cached["run"].losses, here["run"].losses)
    assert all(torch.equal(a, b) for a, b in zip(cached["run"].params, here["run"].params))
    held = stage.cache.load(stage.cache.key(f"{job.name}-heldout", job.cfg, "cpu"), lines.append)
    assert torch.equal(torch.as_tensor(held["loss"]), torch.as_tensor(jobs.evaluation_record(job.cfg, here["run"], "cpu", True)["loss"]))


@pytest.mark.parametrize("kw", [{"threads": 1}, {"device": "cuda"}])
def test_no_campaign_on_one_thread_or_off_the_cpu(tmp_path, kw):
    lines = []
    device = kw.pop("device", "cpu")
    stage = ExperimentStage(Results({}, catalogue=registry.catalogue()), "quick", device, 0, tmp_path, log=lines.append,
                            **kw)
    stage.prefetch()  # returns before touching the device or starting a cluster
    assert "training_campaign" not in stage.data and stage._cluster is None


def test_an_unknown_job_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown job kind"):
        jobs.run_job(jobs.Job("nope", "x", None), str(tmp_path), "cpu")
