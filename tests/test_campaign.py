"""Campaigns on Dask (numeric.campaign): pure tasks, the same results whatever the number of workers,
finished tasks cached and resumed, one retry then a named failure."""
import json

import pytest

from numeric import campaign, campaign_tasks

TASKS = [campaign.Task(f"draw seed={s}", campaign_tasks.draw, (s,)) for s in range(6)]


@pytest.mark.slow
def test_one_and_two_workers_give_bitwise_equal_results(tmp_path):
    one = campaign.run(TASKS, workers=1, log=lambda *a: None)
    two = campaign.run(TASKS, workers=2, log=lambda *a: None)
    assert one.results == two.results and one.failed == two.failed == {}
    assert (one.workers, two.workers) == (1, 2) and one.computed == two.computed == len(TASKS)
    assert json.dumps(one.results) == json.dumps(two.results)  # bitwise: the same floats, the same order
    assert [r["seed"] for r in one.results] == list(range(6))


@pytest.mark.slow
def test_finished_tasks_are_cached_and_a_campaign_resumes(tmp_path):
    first = campaign.run(TASKS[:3], workers=1, cache_dir=tmp_path, log=lambda *a: None)
    assert first.computed == 3 and len(list(tmp_path.glob("*.json"))) == 3
    (tmp_path / f"{TASKS[1].key}.json").write_text("{truncated")  # a corrupt entry is recomputed
    lines = []
    resumed = campaign.run(TASKS, workers=1, cache_dir=tmp_path, log=lines.append)
    assert resumed.cached == 2 and resumed.computed == 4
    assert resumed.results == campaign.run(TASKS, workers=1, log=lambda *a: None).results
    assert any("6/6" in line or "4/4" in line for line in lines)  # progress: done / total, elapsed, estimate
    assert all("left" in line for line in lines if "tasks done" in line)


@pytest.mark.slow
def test_a_failing_task_is_retried_once_then_named(tmp_path):
    tasks = [campaign.Task(f"seed={s}", campaign_tasks.fail_on, (s, 2)) for s in range(4)]
    tasks.append(campaign.Task("transient", campaign_tasks.fail_first, (9, str(tmp_path / "marker"))))
    out = campaign.run(tasks, workers=1, cache_dir=tmp_path / "cache", log=lambda *a: None)
    assert list(out.failed) == ["seed=2"] and "planted failure" in out.failed["seed=2"]
    assert out.results[2] is None and out.results[4] == {"seed": 9, "attempts": 2}
    assert not (tmp_path / "cache" / f"{tasks[2].key}.json").exists()  # a failure is not cached


def test_bad_usage_is_refused():
    with pytest.raises(campaign.CampaignError, match="--workers must be a positive integer"):
        campaign.worker_count(0)
    with pytest.raises(ValueError, match="unique"):
        campaign.run([TASKS[0], TASKS[0]], log=lambda *a: None)


@pytest.mark.slow
def test_an_unreachable_scheduler_is_a_clear_error():
    with pytest.raises(campaign.CampaignError, match="cannot reach the Dask scheduler tcp://127.0.0.1:1"):
        campaign.run(TASKS[:1], scheduler="tcp://127.0.0.1:1", log=lambda *a: None, connect_timeout_s=2)


def test_keys_are_file_safe_and_distinct():
    keys = {campaign.Task(n, campaign_tasks.draw).key for n in ("a/b", "a b", "a:b", "a" * 200)}
    assert len(keys) == 4 and all("/" not in k and " " not in k and len(k) <= 65 for k in keys)


@pytest.mark.slow
def test_a_running_cluster_is_used_by_address():
    """--scheduler ADDRESS: the campaign connects to a cluster it did not start and leaves it running."""
    from distributed import LocalCluster
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        out = campaign.run(TASKS[:2], scheduler=cluster.scheduler_address, log=lambda *a: None)
        assert out.scheduler == cluster.scheduler_address and out.workers == 1
        assert out.results == [campaign_tasks.draw(0), campaign_tasks.draw(1)]
        assert len(cluster.scheduler_info["workers"]) == 1  # still up


@pytest.mark.slow
def test_a_lost_worker_loses_no_finished_task(tmp_path):
    """A worker process dies mid-campaign: Dask reruns its task elsewhere (the nanny restarts the worker), the tasks
    finished before it are in the cache, and the campaign completes with every result."""
    cache = tmp_path / "cache"
    tasks = [*TASKS[:3], campaign.Task("dies once", campaign_tasks.die_first, (7, str(tmp_path / "marker"))), *TASKS[3:]]
    out = campaign.run(tasks, workers=2, cache_dir=cache, log=lambda *a: None)
    assert (tmp_path / "marker").exists() and not out.failed and out.computed == len(tasks)
    assert out.results[3] == {"seed": 7, "after_a_lost_worker": True}
    assert [r for i, r in enumerate(out.results) if i != 3] == [campaign_tasks.draw(s) for s in range(6)]
    assert len(list(cache.glob("*.json"))) == len(tasks)  # every finished task written as it arrived
    again = campaign.run(tasks, workers=2, cache_dir=cache, log=lambda *a: None)
    assert again.cached == len(tasks) and again.results == out.results
