"""Campaigns on Dask: many independent tasks (fuzzed claims, training runs), one machine or a cluster.

A task is a pure function of its arguments (seeds included) that returns plain data; the campaign
submits the tasks not already finished, writes each result to its cache as it arrives (so an
interrupted campaign resumes, and a worker lost after a task finished loses nothing), retries a task
that raises once, records one that raises again as failed (naming it), and returns the results in
task order: the same whatever the number of workers or the order in which they finish.

By default the campaign starts an in-process `LocalCluster` sized to the machine (one thread per
worker) and stops it at the end; `scheduler="tcp://host:8786"` uses a running cluster instead (any Dask
deployment: `dask scheduler` + `dask worker`, Kubernetes, SLURM via dask-jobqueue). Workers need this
package and its dependencies installed (the same versions), nothing else. `workers=0` runs the tasks one
after another in the calling process, without Dask (tiny campaigns, debugging, profiling), with the same
cache, retry and result order.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from numeric.experiments.progress import Progress


@dataclass(frozen=True)
class Task:
    """One unit of a campaign: fn(*args) with a stable name (its cache key). `priority`: tasks of higher priority
    start first (a campaign's longest tasks given a higher one finish sooner on a few workers); not in the key."""

    name: str
    fn: Callable
    args: tuple = ()
    priority: int = 0

    @property
    def key(self) -> str:
        """A file-safe key: the name's readable head and a hash of the whole name."""
        digest = hashlib.sha256(self.name.encode()).hexdigest()[:16]
        head = "".join(c if c.isalnum() or c in "-_." else "-" for c in self.name)[:48]
        return f"{head}-{digest}"


@dataclass
class Outcome:
    """Results in task order (None for a failed task), the failures {name: error}, and the run's figures."""

    results: list
    failed: dict = field(default_factory=dict)
    cached: int = 0
    computed: int = 0
    seconds: float = 0.0
    workers: int = 0
    scheduler: str = ""


class CampaignError(RuntimeError):
    """A campaign that cannot run at all (an unreachable scheduler, a bad worker count)."""


def worker_count(workers=None, inline=False) -> int:
    """The local cluster's size: `workers`, or one per CPU; with `inline`, 0 (in this process) is accepted too."""
    n = workers if workers is not None else (os.cpu_count() or 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < (0 if inline else 1):
        raise CampaignError(f"--workers must be a {'non-negative' if inline else 'positive'} integer, got {workers!r}")
    return n


def run(tasks, *, scheduler=None, workers=None, cache_dir=None, log=print, retries=1, label="campaign",
        connect_timeout_s=20, on_result=None, cluster=None) -> Outcome:
    """Run `tasks` (a list of Task) on Dask; see the module docstring. `on_result(index, result)` is called as
    each task's result arrives (from the cache first), in the order they finish. `cluster`: a `Cluster` already
    open (several campaigns of one command share it; `scheduler` and `workers` are then its own)."""
    tasks = list(tasks)
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError("task names must be unique (they are the cache keys)")
    cache = Path(cache_dir) if cache_dir else None
    results = [None] * len(tasks)
    todo = []
    inline = cluster is None and scheduler is None and worker_count(workers, inline=True) == 0
    for index, task in enumerate(tasks):
        hit = _read(cache, task)
        if hit is not None:
            results[index] = hit["result"]
            if on_result:
                on_result(index, results[index])
        else:
            todo.append(index)
    t0 = time.perf_counter()
    out = Outcome(results, cached=len(tasks) - len(todo))
    if out.cached:
        log(f"  {label}: {out.cached} of {len(tasks)} tasks read from the cache")
    if not todo:
        out.seconds = round(time.perf_counter() - t0, 3)
        return out
    if inline:
        out.scheduler = "in this process"
        _inline(tasks, todo, out, cache, log, retries, label, on_result)
        out.seconds = round(time.perf_counter() - t0, 3)
        return out
    if cluster is not None:  # a Cluster, or a function that opens one (called only when there is work)
        _on(cluster if isinstance(cluster, Cluster) else cluster(), tasks, todo, out, cache, log, retries, label,
            on_result)
    else:
        with Cluster(scheduler, workers, connect_timeout_s) as opened:
            _on(opened, tasks, todo, out, cache, log, retries, label, on_result)
    out.seconds = round(time.perf_counter() - t0, 3)
    return out


def _on(cluster, tasks, todo, out, cache, log, retries, label, on_result):
    client = cluster.client
    out.workers = len(client.scheduler_info().get("workers", {}))
    out.scheduler = cluster.scheduler or "local"
    _gather(client, tasks, todo, out, cache, log, retries, label, on_result)


def _gather(client, tasks, todo, out, cache, log, retries, label, on_result):
    from distributed import as_completed

    futures = {client.submit(tasks[i].fn, *tasks[i].args, key=f"{label}-{tasks[i].key}", pure=False,
                             retries=retries, priority=tasks[i].priority): i for i in todo}
    progress = Progress(len(todo), label, log, unit="tasks done")
    for future in as_completed(futures):
        index = futures[future]
        if future.status == "error":
            exc = future.exception()
            _failed(out, tasks[index], exc, retries, label, log)
        else:
            _finished(out, cache, tasks, index, future.result(), on_result)
        future.release()
        progress.update()


def _inline(tasks, todo, out, cache, log, retries, label, on_result):
    """The tasks one after another in this process: the same cache, retries and failures as on Dask."""
    progress = Progress(len(todo), label, log, unit="tasks done")
    for index in todo:
        for attempt in range(retries + 1):
            try:
                result = tasks[index].fn(*tasks[index].args)
            except Exception as exc:  # noqa: BLE001 (a task's failure is recorded, as Dask records it)
                if attempt == retries:
                    _failed(out, tasks[index], exc, retries, label, log)
                continue
            _finished(out, cache, tasks, index, result, on_result)
            break
        progress.update()


def _finished(out, cache, tasks, index, result, on_result):
    out.results[index] = result
    _write(cache, tasks[index], result)
    out.computed += 1
    if on_result:
        on_result(index, result)


def _failed(out, task, exc, retries, label, log):
    out.failed[task.name] = f"{type(exc).__name__}: {exc}"[:500]
    log(f"  {label}: task {task.name} failed after {retries + 1} attempts: {out.failed[task.name]}")


class Cluster:
    """A Dask client on the given scheduler, or on a LocalCluster started here (one worker per CPU, or `workers`,
    one thread each) and stopped on exit. `with Cluster(...) as c: run(..., cluster=c)` shares one cluster
    between campaigns; `c.client` is the distributed.Client."""

    def __init__(self, scheduler=None, workers=None, timeout_s=20):
        self.scheduler, self.workers, self.timeout_s = scheduler, workers, timeout_s
        self.cluster = self.client = None

    def __enter__(self):
        import logging

        from distributed import Client, LocalCluster

        logging.getLogger("distributed").setLevel(logging.ERROR)
        try:
            if self.scheduler:
                self.client = Client(self.scheduler, timeout=f"{self.timeout_s}s")
            else:
                self.cluster = LocalCluster(n_workers=worker_count(self.workers), threads_per_worker=1, processes=True,
                                            dashboard_address=":0", silence_logs=logging.ERROR)
                self.client = Client(self.cluster)
        except OSError as exc:
            self.__exit__(None, None, None)
            raise CampaignError(f"cannot reach the Dask scheduler {self.scheduler}: {exc}") from exc
        self.client.run(_pin_threads)
        return self

    def __exit__(self, *exc):
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        self.client = self.cluster = None


def _pin_threads():
    """One torch thread per worker (workers are sized one per core)."""
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # a worker without torch runs torch-free tasks only
        pass


def all_cached(tasks, cache_dir) -> bool:
    """Whether every task's result is in the cache (an opt-in study is read only whole)."""
    cache = Path(cache_dir) if cache_dir else None
    return cache is not None and all(_read(cache, t) is not None for t in tasks)


def _read(cache, task):
    if cache is None:
        return None
    path = cache / f"{task.key}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        path.unlink(missing_ok=True)  # a corrupt entry is recomputed
        return None
    return data if isinstance(data, dict) and data.get("name") == task.name and "result" in data else None


def _write(cache, task, result):
    if cache is None:
        return
    from derive.results import atomic_write

    cache.mkdir(parents=True, exist_ok=True)
    atomic_write(cache / f"{task.key}.json", lambda fh: json.dump({"name": task.name, "result": result}, fh))




def refused(prog, exc):
    """A campaign that cannot run (CampaignError) as a command reports it: one line on stderr, exit status 2."""
    import sys

    print(f"{prog}: {exc}", file=sys.stderr)
    return 2
