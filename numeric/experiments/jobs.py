"""The experiments stage's training jobs, as plain functions of their configuration.

Each job returns the record the stage caches (numeric.experiments.cache) under a name. The stage runs a job in its
own process when it needs the record and finds no cache entry; on a CPU with more than one core it first runs every
job it will need as one Dask campaign (`Job.task`: one worker per core, one torch thread each), and its steps then
read the records from the cache. Training is deterministic full-batch descent on fixed draws, so a record is the
same function of its configuration in either place; where it was computed changes only how long it took.

Why a campaign: on a 2-core machine two single-thread processes, each training its own sticky-chain group, do 1.9x
the work of one such process, while one process on 2 threads does 1.7x (measured: 30 steps of 10 runs at T = 1999 take
5.1 s on one thread, 5.1-5.3 s each with two such processes side by side, 3.0 s on 2 threads).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from numeric.experiments import deep_watch, sticky, windtunnel
from numeric.experiments.cache import Cache

EVALUATIONS = (("eval", False), ("heldout", True))  # a fresh group's evaluations: (name suffix, held-out sequences)


def sticky_record(cfg, device, state_path=None, progress=None, on_start=None, log=print, freeze_routing=None):
    """A sticky-chain run (sticky.train) and its wall time; `state_path`: the resumable state, removed when done."""
    t0 = time.perf_counter()
    run = sticky.train(cfg, device, progress=progress, state_path=state_path, on_start=on_start, log=log,
                       freeze_routing=freeze_routing)
    if state_path is not None:
        Path(state_path).unlink(missing_ok=True)
    return {"run": run, "seconds": time.perf_counter() - t0}


def evaluation_record(cfg, run, device, heldout):
    """A trained sticky run's metrics on its training sequences or on held-out ones (sticky.evaluate)."""
    return sticky.evaluate(cfg, run.params, device, heldout=heldout)


def tunnel_record(cfg, arm, device):
    """One arm of the wind tunnel (E5): its loss curve (at most ~200 points) and its evaluation."""
    model, curve = windtunnel.train(cfg, arm, device)
    return {"curve": curve[:: max(1, len(curve) // 200)], **windtunnel.evaluate(cfg, model)}


def deep_record(cfg, device, progress=None, freeze_routing=None):
    """The watched deep model (W1): every optimizer on every seed, and its wall time."""
    t0 = time.perf_counter()
    out = deep_watch.run(cfg, device, progress=progress, freeze_routing=freeze_routing)
    return {**out, "seconds": time.perf_counter() - t0}


@dataclass(frozen=True)
class Job:
    """One cached record: `kind` (sticky, tunnel or deep), its cache `name` and `cfg`, the job's own arguments
    (`freeze_routing`, a tunnel's `arm`), and for a sticky run the evaluations cached after it (`evaluations`:
    (suffix, held-out) pairs, cached as '<name>-<suffix>')."""

    kind: str
    name: str
    cfg: object
    freeze_routing: int | None = None
    arm: str = ""
    evaluations: tuple = ()

    @property
    def cost(self):
        """A rough size, to start the longest jobs first (the campaign's load balance): a sticky run's
        runs x length^2 x steps; the others are small next to a full-size sticky group and go after them."""
        if self.kind == "sticky":
            return len(self.cfg.arms) * len(self.cfg.seeds) * self.cfg.length ** 2 * self.cfg.steps
        return 0

    def names(self):
        return (self.name, *(f"{self.name}-{suffix}" for suffix, _ in self.evaluations))

    def cached(self, cache, device):
        """Whether every record of this job is in `cache`."""
        return all(cache.key(name, self.cfg, device).exists() for name in self.names())

    def task(self, out_dir, device):
        """The campaign task computing this job's records into the cache under `out_dir`."""
        from numeric.campaign import Task

        return Task(f"experiments/{self.name}", run_job, (self, str(out_dir), device))


def _quiet(*_args, **_kwargs):
    pass


def run_job(job, out_dir, device):
    """A campaign task: compute `job`'s records not yet in the cache under `out_dir` and write them there (a
    sticky run resumes from its saved state). Returns the seconds it took (the records stay on disk).

    Torch runs on one thread inside the call (the caller's setting restored after), and glibc's heap keeps the
    step's large blocks (mechanism_grid.large_allocations: Dask's nanny sets MALLOC_TRIM_THRESHOLD_, which leaves
    every block of a step mapped afresh and page-faulted). Without the latter the default profile's sticky groups
    took 2.0-2.4x their time on 2 threads in one process (e.g. the replay 252 s against 103 s)."""
    import torch

    from numeric.experiments.mechanism_grid import large_allocations

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    large_allocations()
    try:
        return _run_job(job, out_dir, device)
    finally:
        torch.set_num_threads(threads)


def _run_job(job, out_dir, device):
    t0 = time.perf_counter()
    cache = Cache(out_dir)
    cfg = job.cfg
    if job.kind == "sticky":
        state = cache.key(job.name, cfg, device).with_suffix(".partial")
        out = cache.get_or_run(job.name, cfg, device, lambda: sticky_record(
            cfg, device, state_path=state, log=_quiet, freeze_routing=job.freeze_routing), _quiet)
        for suffix, heldout in job.evaluations:
            cache.get_or_run(f"{job.name}-{suffix}", cfg, device,
                             lambda h=heldout: evaluation_record(cfg, out["run"], device, h), _quiet)
    elif job.kind == "tunnel":
        cache.get_or_run(job.name, cfg, device, lambda: tunnel_record(cfg, job.arm, device), _quiet)
    elif job.kind == "deep":
        cache.get_or_run(job.name, cfg, device, lambda: deep_record(cfg, device, freeze_routing=job.freeze_routing),
                         _quiet)
    else:
        raise ValueError(f"unknown job kind {job.kind!r}")
    return round(time.perf_counter() - t0, 3)
