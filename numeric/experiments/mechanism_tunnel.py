"""Every routing mechanism in the Bayesian wind tunnel (E5's task): how close each comes to the exact posterior.

The task is numeric.experiments.windtunnel's: sticky chains whose transition matrix is drawn per sequence from a
Dirichlet prior, inputs x_t = [e_{y_t}, e_{y_{t-1}}], a fresh batch every step, the exact Bayes predictive from the
Dirichlet counts. Each mechanism is its trainable layer (numeric.experiments.mechanism_layers, the same code as the
sticky-chain grid) read out by W_O (no bias), trained by full-batch-per-step SGD (in `dtype`, float64 by default;
the evaluation always in float64) on the mean cross-entropy under both arms: sgd (every parameter at the tunnel's lr) and em_like (the mechanism's content at
value_lr_ratio x lr, routing and the readout at lr), every mechanism on the same sequences and, per seed, from
parameters drawn by (seed, parameter name). Reported per mechanism, arm and seed: the KL from the Bayes predictive
to the model's (bits, on fresh evaluation sequences), the entropy error (bits) and the final training loss.

The task may also be bijection recall (numeric.experiments.bijection, `--task bijection`: `tunnel` a
BijectionConfig): the same training, its exact Bayes predictive, and beside the models its floors (the prior, the
no-context and the counts-only predictors) on the same held-out sequences, the KL at the key positions and the
accuracy where the answer was shown.

One Dask task per mechanism and group of seeds (`train_task`, pure, both arms batched), cached under
DIR/cache/mechanism-tunnel/.

    python -m numeric.experiments.mechanism_tunnel [--quick | --extended] [--task windtunnel|bijection|transitions]
                                                   [--lrs LR,LR,...] [--pairs N] [--dtype float32|float64]
                                                   [--workers N | --scheduler ADDRESS] [--out DIR]
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import math
import sys
import time
import zlib
from dataclasses import dataclass, field

import numpy as np
import torch

from numeric.experiments import bijection, chain, transitions, windtunnel
from numeric.experiments import mechanism_layers as ml
from numeric.experiments import stats as st
from numeric.experiments.config import positive, positive_ints

LABEL = "mechanism-tunnel"
ARMS = ("sgd", "em_like")
RESULT = "t4"  # what a task returns, named in its cache key (t4: validation KLs whenever rates are given)
TASKS = {"windtunnel": windtunnel, "bijection": bijection, "transitions": transitions}
DTYPES = {"float64": torch.float64, "float32": torch.float32}
CONFIGS = {windtunnel.TunnelConfig: windtunnel, bijection.BijectionConfig: bijection,
           transitions.TransitionsConfig: transitions}


def task_of(cfg):
    """The task module `cfg.tunnel` configures (sample, inputs, bayes_predictive; the conjecture's tasks also floors
    and scores)."""
    try:
        return CONFIGS[type(cfg.tunnel)]
    except KeyError:
        raise ValueError(f"MechanismTunnelConfig.tunnel must be one of {[c.__name__ for c in CONFIGS]}, got "
                         f"{type(cfg.tunnel).__name__}") from None


@dataclass(frozen=True)
class MechanismTunnelConfig:
    """The wind tunnel's task and optimiser (`tunnel`: E5's TunnelConfig; its seed is replaced by `seeds`), the
    mechanisms, the seeds, the initial scale of every parameter, the seeds batched in one task, and the learning
    rates swept (`lrs`; empty: the task's own lr). Every (arm, rate) pair is a run of its own, batched on the leading
    axis; with rates given, each run is also scored on validation sequences of its own, on which each arm's rate is
    chosen per mechanism (`summarise`; `run_all` joins a sweep and its extension past the edge on them)."""

    tunnel: object = windtunnel.TunnelConfig()  # or a bijection.BijectionConfig, a transitions.TransitionsConfig
    mechanisms: tuple = field(default_factory=ml.names)  # every registered mechanism with a layer
    seeds: tuple = (0, 1, 2, 3)
    init_std: float = 0.3  # as E5's attention head
    seeds_per_task: int = 4
    lrs: tuple = ()
    # The training dtype ("float64" or "float32"); the evaluation always runs in float64 on the trained parameters.
    dtype: str = "float64"

    def rates(self):
        """The learning rates trained: `lrs`, or the task's own lr."""
        return tuple(float(x) for x in self.lrs) or (float(self.tunnel.lr),)

    def runs(self):
        """(arm, learning rate) of each run on the leading axis, arm-major."""
        return [(a, lr) for a in ARMS for lr in self.rates()]

    def validate(self):
        self.tunnel.validate()
        positive_ints(self, "seeds_per_task")
        positive(self, "init_std")
        if self.dtype not in DTYPES:
            raise ValueError(f"MechanismTunnelConfig.dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        ml.check_names(self.mechanisms, "MechanismTunnelConfig.mechanisms", ml.trainable())
        if len(set(self.rates())) != len(self.rates()) or not all(math.isfinite(x) and x > 0 for x in self.rates()):
            raise ValueError(f"MechanismTunnelConfig.lrs must be distinct positive rates, got {self.lrs!r}")
        if len(self.seeds) < 2 or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"MechanismTunnelConfig.seeds must hold at least two distinct seeds, got {self.seeds!r}")
        return self

    def groups(self):
        k = self.seeds_per_task
        return [tuple(self.seeds[i:i + k]) for i in range(0, len(self.seeds), k)]

    def key(self):
        from derive import __version__

        fields = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("mechanisms", "seeds", "seeds_per_task")}
        blob = repr((fields, task_of(self).__name__, ARMS, RESULT, __version__))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def init_params(cfg, mechanism, seeds):
    """{name: (R, S, 1, ...)} leaves in cfg.dtype, R = runs() (arm x learning rate): every parameter N(0, init_std^2),
    drawn in float64 per (seed, name); every run of a seed starts from the same point; the third axis broadcasts over
    the batch of sequences."""
    K, t = cfg.tunnel.symbols, cfg.tunnel
    sh = ml.shapes(mechanism, 2 * K, t.d_k, t.d_v, K)
    out = {}
    for name in ml.params(mechanism):
        per = []
        for s in seeds:
            g = torch.Generator().manual_seed((int(s) * 1_000_003 + zlib.crc32(name.encode())) % (2 ** 62))
            per.append(torch.randn(sh[name], generator=g, dtype=torch.float64) * cfg.init_std)
        w = torch.stack(per)[None, :, None].expand(len(cfg.runs()), *([-1] * (len(sh[name]) + 2)))
        out[name] = w.to(DTYPES[cfg.dtype]).clone().requires_grad_(True)
    return out


def _batch(cfg, gens, batch, dtype=torch.float64):
    """(x (1, S, B, T, 2K), y (1, S, B, T)): one batch of sequences per seed, from that seed's generator."""
    task = task_of(cfg)
    ys = [task.sample(cfg.tunnel, batch, g) for g in gens]
    x = torch.stack([task.inputs(cfg.tunnel, y) for y in ys])[None].to(dtype)
    return x, torch.stack([y[:, 1:] for y in ys])[None], ys


def train_task(cfg, mechanism, seeds, where=None):
    """Every run (arm x learning rate) of `mechanism` on `seeds` (torch on one thread inside the call), then the
    evaluation. Pure."""
    from numeric.experiments.mechanism_grid import large_allocations

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    large_allocations()  # in a Dask worker, glibc's thresholds as outside one (docs/experiments.md: G3)
    try:
        ml.ensure(mechanism, where)  # a user's mechanism, in a worker that has not loaded its file
        return _train(cfg, mechanism, tuple(seeds))
    finally:
        torch.set_num_threads(threads)


def _entropy_bits(q):
    return -(q * torch.log(q.clamp_min(1e-300))).sum(-1) / math.log(2)


def _held_out(cfg, seeds, offset):
    """The held-out sequences of `seeds` (generator seed + offset): inputs, tokens and the Bayes predictive, the same
    for every mechanism and every sweep of rates, so computed once per process and task (`_held_out_of`)."""
    return _held_out_of(cfg.tunnel, tuple(seeds), offset)


@functools.lru_cache(maxsize=8)
def _held_out_of(tunnel, seeds, offset):
    cfg = MechanismTunnelConfig(tunnel=tunnel)  # what the sequences depend on: the task and its sizes
    gens = [torch.Generator().manual_seed(int(s) + offset) for s in seeds]
    x, _, ys = _batch(cfg, gens, tunnel.eval_batch)
    task = task_of(cfg)
    bayes = torch.stack([task.bayes_predictive(tunnel, yy) for yy in ys])[None]  # (1, S, B, T, K)
    return x, ys, bayes


def _floor_scores(cfg, seeds):
    """The task's floors scored on the held-out sequences, per seed (as `_held_out`, once per process and task)."""
    return _floor_scores_of(cfg.tunnel, tuple(seeds))


@functools.lru_cache(maxsize=8)
def _floor_scores_of(tunnel, seeds):
    task = task_of(MechanismTunnelConfig(tunnel=tunnel))
    _, ys, bayes = _held_out_of(tunnel, seeds, 99)
    ent_b = _entropy_bits(bayes)
    return [{name: {**task.scores(tunnel, ys[s], f, bayes[0, s]),
                    "entropy_mae_bits": float((_entropy_bits(f) - ent_b[0, s]).abs().mean())}
             for name, f in task.floors(tunnel, ys[s]).items()} for s in range(len(seeds))]


def _evaluate(cfg, mechanism, params, seeds, offset):
    """The model's and Bayes's predictives on eval_batch fresh sequences per seed (generator seed + offset), in
    float64 whatever the training dtype."""
    x, ys, bayes = _held_out(cfg, tuple(seeds), offset)
    with torch.no_grad():
        p = ml.probabilities(mechanism, {n: w.double() for n, w in params.items()}, x)  # (R, S, B, T, K)
    return p, bayes, ys


def _train(cfg, mechanism, seeds):
    t = cfg.tunnel
    runs = cfg.runs()
    params = init_params(cfg, mechanism, seeds)
    lrs = {n: torch.tensor([lr * (t.value_lr_ratio if a == "em_like" and n in ml.content(mechanism) else 1.0)
                            for a, lr in runs], dtype=p.dtype).view(-1, *([1] * (p.dim() - 1)))
           for n, p in params.items()}
    gens = [torch.Generator().manual_seed(int(s) + 17) for s in seeds]  # the same sequences for every mechanism
    curve = []
    adam = ml.Adam(params) if getattr(t, "optimizer", "sgd") == "adam" else None
    t0 = time.perf_counter()
    for _ in range(t.steps):
        x, y, _ = _batch(cfg, gens, t.batch, DTYPES[cfg.dtype])
        loss = ml.losses(mechanism, params, x, y).mean(-1)  # (R, S): the mean over sequences and positions
        if adam is not None:
            adam.step(params, lrs, loss)
        else:
            ml.descend(params, lrs, loss)
        curve.append(loss.detach())
    seconds = time.perf_counter() - t0
    p, bayes, ys = _evaluate(cfg, mechanism, params, seeds, 99)
    task = task_of(cfg)
    ent_p, ent_b = _entropy_bits(p), _entropy_bits(bayes)  # (R, S, B, T), (1, S, B, T)
    losses = torch.stack(curve, -1)  # (R, S, steps)
    extra = {}
    if hasattr(task, "scores"):  # the task's own scores per run and seed, and its floors on the same sequences
        extra["scores"] = [[task.scores(t, ys[s], p[r, s], bayes[0, s]) for s in range(len(seeds))]
                           for r in range(len(runs))]
        extra["floors"] = copy.deepcopy(_floor_scores(cfg, tuple(seeds)))
    if cfg.lrs:  # a rate is chosen on sequences of its own, not on the ones scored
        pv, bv, _ = _evaluate(cfg, mechanism, params, seeds, 55)
        extra["validation_kl_bits"] = chain.kl_bits(bv, pv).mean(-1).tolist()
    return {**extra, "mechanism": mechanism, "seeds": list(seeds), "arms": list(ARMS), "lrs": list(cfg.rates()),
            "runs": [list(r) for r in runs], "steps": t.steps,
            "kl_bits": chain.kl_bits(bayes, p).mean(-1).tolist(),  # (R, S): mean over positions, then sequences
            "entropy_mae_bits": (ent_p - ent_b).abs().mean((-1, -2)).tolist(),
            "entropy_by_position": ent_p.mean(-2).tolist(),  # (R, S, T): mean over the held-out sequences
            "entropy_mae_by_position": (ent_p - ent_b).abs().mean(-2).tolist(),
            "bayes_entropy_bits": float(ent_b.mean()),
            "bayes_entropy_by_position": ent_b[0].mean(-2).tolist(),  # (S, T)
            "final_loss": losses[..., -max(1, t.steps // 20):].mean(-1).tolist(),  # the last 5% of steps
            "curve": losses[..., :: max(1, t.steps // 100)].tolist(),
            "finite": bool(torch.isfinite(losses).all() and torch.isfinite(p).all()),
            "timing": {"loop_seconds": seconds}}


def tasks(cfg):
    """One campaign task per mechanism and group of seeds. The baselines (a loop over positions per step, the
    campaign's longest tasks) start first, so that on a few workers no one of them is left running alone at the end."""
    from numeric import campaign

    key = cfg.key()
    where = {m: ml.source(m) for m in cfg.mechanisms}
    slow = set(ml.baselines())
    return [campaign.Task(f"{LABEL}/{ml.task_label(m, where[m])}/seeds={'-'.join(map(str, g))}/{key}", train_task,
                          (cfg, m, g, where[m]), priority=1 if m in slow else 0)
            for m in cfg.mechanisms for g in cfg.groups()]


def run(cfg, cache_dir=None, workers=None, scheduler=None, log=print, cluster=None):
    """Train every mechanism as a campaign. Returns (summary, outcome): summary[mechanism] per arm the KL to Bayes
    (mean, 95% interval over seeds, per seed), the entropy error and the final loss; {"failed": True} for a
    mechanism with a failed task."""
    (summary,), outcome = run_all([cfg], cache_dir, workers, scheduler, log, cluster)
    return summary, outcome


def run_all(cfgs, cache_dir=None, workers=None, scheduler=None, log=print, cluster=None, extend=True):
    """Several configurations' tasks as one campaign (the workers never wait between two of them). Returns
    ([summary per config], outcome), each summary as `run`'s.

    `extend`: where a mechanism's chosen rate (either arm) is the sweep's lowest or highest, it is trained once more
    one step past that edge (the sweep's own ratio there), as a second campaign of those mechanisms only, and each
    arm's rate is chosen again over the sweep and the extension (summary[m]["extended_rates"]; an arm whose rate is
    still at an edge says so, `lr_at_edge`)."""
    from numeric import campaign

    def submit(todo):
        return campaign.run(todo, scheduler=scheduler, workers=workers, cache_dir=cache_dir, log=log, label=LABEL,
                            cluster=cluster)

    todo, spans = [], []
    for cfg in cfgs:
        cfg.validate()
        mine = tasks(cfg)
        spans.append((len(todo), len(todo) + len(mine)))
        todo += mine
    outcome = submit(todo)
    results = [list(outcome.results[lo:hi]) for lo, hi in spans]
    extended = [{} for _ in cfgs]
    if extend:
        more, where = [], []
        for c, cfg in enumerate(cfgs):
            for m, rates in edges(cfg, results[c]).items():
                ext = dataclasses.replace(cfg, mechanisms=(m,), lrs=rates)
                mine = tasks(ext)
                where.append((c, m, len(more), len(mine)))
                extended[c][m] = list(rates)
                more += mine
        if more:
            log(f"  {LABEL}: {len(where)} models chose a rate at the sweep's edge; trained once more past it")
            second = submit(more)
            outcome.failed.update(second.failed)
            outcome.computed += second.computed
            outcome.cached += second.cached
            outcome.seconds += second.seconds
            for c, m, lo, n in where:
                i = cfgs[c].mechanisms.index(m)
                for j in range(n):
                    a, b = results[c][i * n + j], second.results[lo + j]
                    results[c][i * n + j] = None if a is None or b is None else join(a, b)
    summaries = [_collect(cfg, r) for cfg, r in zip(cfgs, results)]
    for summary, ext in zip(summaries, extended):
        for m, rates in ext.items():
            if not summary[m].get("failed"):
                summary[m]["extended_rates"] = rates
    return summaries, outcome


def edges(cfg, results):
    """{mechanism: rates one step past each edge of the sweep its chosen rates sit on}, from a config's task results
    (none without a sweep of at least two rates, or for a mechanism with a failed task)."""
    rates = sorted(cfg.rates())
    if len(rates) < 2:
        return {}
    groups, out = len(cfg.groups()), {}
    for i, m in enumerate(cfg.mechanisms):
        parts = results[i * groups:(i + 1) * groups]
        if any(p is None for p in parts):
            continue
        chosen = {e["lr"] for e in summarise(parts)["arms"].values()}
        new = ([rates[-1] * rates[-1] / rates[-2]] if rates[-1] in chosen else []) + (
            [rates[0] * rates[0] / rates[1]] if rates[0] in chosen else [])
        if new:
            out[m] = tuple(sorted(float(f"{x:.6g}") for x in new))
    return out


PER_RUN = ("kl_bits", "entropy_mae_bits", "entropy_by_position", "entropy_mae_by_position", "final_loss", "curve",
           "scores", "validation_kl_bits", "runs")


def join(a, b):
    """One task's result and its extension's (the same mechanism, seeds and sequences, other rates) as one result
    whose runs are both's."""
    if a["mechanism"] != b["mechanism"] or a["seeds"] != b["seeds"]:
        raise ValueError("join: results of different mechanisms or seeds")
    out = {**a, "lrs": list(a["lrs"]) + [x for x in b["lrs"] if x not in a["lrs"]],
           "finite": a["finite"] and b["finite"],
           "timing": {"loop_seconds": a["timing"]["loop_seconds"] + b["timing"]["loop_seconds"]}}
    for key in PER_RUN:
        if key in a:
            out[key] = list(a[key]) + list(b[key])
    return out


def _collect(cfg, results):
    groups, out = len(cfg.groups()), {}
    for i, m in enumerate(cfg.mechanisms):
        parts = results[i * groups:(i + 1) * groups]
        out[m] = {"failed": True} if any(p is None for p in parts) else summarise(parts)
    return out


def _interval(v):
    v = np.asarray(v, float)
    mean, half = st.mean_ci(v) if np.isfinite(v).all() else (float("nan"), float("nan"))
    return float(mean), [float(mean - half), float(mean + half)]


def summarise(parts):
    """One mechanism's task results joined over seeds: per arm, at the learning rate chosen for it (the lowest
    seed-mean KL on the validation sequences when several were swept), the mean, 95% t-interval and per-seed
    values; beside it every swept rate's validation and test KL."""
    first = parts[0]
    runs = [tuple(r) for r in first["runs"]]
    out = {"seeds": [s for p in parts for s in p["seeds"]], "finite": all(p["finite"] for p in parts),
           "timing": float(sum(p.get("timing", {}).get("loop_seconds", 0.0) for p in parts)),
           "bayes_entropy_bits": float(np.mean([p["bayes_entropy_bits"] for p in parts])), "arms": {}}
    if "bayes_entropy_by_position" in first:
        out["bayes_entropy_by_position"] = np.mean([row for p in parts for row in p["bayes_entropy_by_position"]],
                                                   0).tolist()
    seeds_of = lambda key, r: [x for p in parts for x in p[key][r]]  # noqa: E731
    for arm in first["arms"]:
        mine = [r for r, (a, _) in enumerate(runs) if a == arm]
        sweep = {}
        if "validation_kl_bits" in first:
            for r in mine:
                sweep[r] = float(np.mean(seeds_of("validation_kl_bits", r)))
            finite = {r: v for r, v in sweep.items() if np.isfinite(v)}
            best = min(finite, key=finite.get) if finite else mine[0]
        else:
            best = mine[0]
        entry = {"lr": runs[best][1]}
        if sweep:
            entry["lr_at_edge"] = runs[best][1] in (min(runs[r][1] for r in mine), max(runs[r][1] for r in mine))
            entry["lr_sweep"] = [{"lr": runs[r][1], "validation_kl_bits": sweep[r],
                                  "kl_bits": float(np.mean(seeds_of("kl_bits", r)))} for r in mine]
        for key in ("kl_bits", "entropy_mae_bits", "final_loss"):
            v = seeds_of(key, best)
            entry[key], entry[f"{key}_ci95"] = _interval(v)
            entry[f"{key}_per_seed"] = [float(x) for x in v]
        entry["curve"] = np.mean(seeds_of("curve", best), 0).tolist()
        for key in ("entropy_by_position", "entropy_mae_by_position"):
            if key in first:
                entry[key] = np.mean(seeds_of(key, best), 0).tolist()
        if "scores" in first:  # the task's own scores (KL at the queries, accuracy where the answer was shown)
            for key in first["scores"][best][0]:
                v = [x[key] for p in parts for x in p["scores"][best]]
                entry[key], entry[f"{key}_ci95"] = _interval(v)
                entry[f"{key}_per_seed"] = [float(x) for x in v]
        out["arms"][arm] = entry
    if "floors" in first:  # the same for every mechanism (the same held-out sequences)
        rows = [f for p in parts for f in p["floors"]]
        out["floors"] = {name: {key: float(np.mean([r[name][key] for r in rows])) for key in rows[0][name]}
                         for name in rows[0]}
    return out


def from_sizes(sizes, tunnel, extended=False):
    """The per-mechanism tunnel of a profile's ExperimentSizes: E5's task (`tunnel`, its TunnelConfig) with the
    profile's mechanism_tunnel_steps and _batch, or with `extended` E5's own steps and batch; one task per
    mechanism holding all of mechanism_tunnel_seeds."""
    if not extended:
        tunnel = dataclasses.replace(tunnel, steps=sizes.mechanism_tunnel_steps, batch=sizes.mechanism_tunnel_batch)
    seeds = tuple(sizes.mechanism_tunnel_seeds)
    return MechanismTunnelConfig(tunnel=tunnel, seeds=seeds, seeds_per_task=len(seeds))


def _rates(text):
    import argparse

    try:
        out = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated learning rates, got {text!r}") from None
    if not out:
        raise argparse.ArgumentTypeError("expected at least one learning rate")
    return out


def conjecture_config(sizes, task, extended=False, lrs=None):
    """The conjecture's campaign on `task` ("bijection" or "transitions") at a profile's ExperimentSizes: every
    mechanism with a layer and the baselines (numeric.experiments.lstm), `conjecture_steps` Adam steps of
    `conjecture_batch` sequences on `conjecture_seeds`, scored on `conjecture_eval_batch` held-out sequences, the
    rates `conjecture_lrs` swept (or `lrs`); `extended`: the task's own steps, batch and evaluation."""
    config = next(c for c, module in CONFIGS.items() if module is TASKS[task])
    reduced = {"steps": sizes.conjecture_steps, "batch": sizes.conjecture_batch,
               "eval_batch": sizes.conjecture_eval_batch}
    if task == "transitions":
        reduced["length"] = sizes.conjecture_transitions_length
    tunnel = config() if extended else config(**reduced)
    seeds = tuple(sizes.conjecture_seeds)
    return MechanismTunnelConfig(tunnel=tunnel, mechanisms=ml.trainable(), seeds=seeds, seeds_per_task=len(seeds),
                                 lrs=tuple(sizes.conjecture_lrs if lrs is None else lrs), dtype=sizes.conjecture_dtype)


def table(summary):
    lines = [f"{'mechanism':10} {'KL sgd (bits)':>24} {'KL em_like (bits)':>24} {'entropy err em':>15}"]
    floors = next((s["floors"] for s in summary.values() if "floors" in s), None)
    for m, s in summary.items():
        if s.get("failed"):
            lines.append(f"{m:10} failed")
            continue
        cells = []
        for arm in ARMS:
            e = s["arms"][arm]
            cells.append(f"{e['kl_bits']:.4f} [{e['kl_bits_ci95'][0]:.4f}, {e['kl_bits_ci95'][1]:.4f}]")
        em = s["arms"]["em_like"]
        rates = ("  lr " + "/".join(f"{s['arms'][a]['lr']:g}" for a in ARMS)) if "lr_sweep" in em else ""
        lines.append(f"{m:10} {cells[0]:>24} {cells[1]:>24} {em['entropy_mae_bits']:15.4f}{rates}"
                     + (f"  queries {em['kl_bits_queries']:.3f} bits, seen {em['accuracy_seen']:.1%}"
                        if "kl_bits_queries" in em else "") + ("" if s["finite"] else "  (not finite)"))
    for name, f in (floors or {}).items():
        lines.append(f"{'floor ' + name:18} KL {f['kl_bits']:.4f} bits, queries {f['kl_bits_queries']:.3f}, "
                     f"seen {f['accuracy_seen']:.1%}")
    return "\n".join(lines)


def main(argv=None, prog="python -m numeric.experiments.mechanism_tunnel"):
    from derive import options
    from derive import profile as profiles
    from numeric import campaign

    parser = options.parser(prog, __doc__, parents=[
        options.profile(("quick", "default", "extended"), extended=True,
                        help="quick: the quick profile's sizes; default: the default profile's reduced tunnel; "
                             "extended: E5's own steps and batch"),
        options.out_dir(default=None, help="cache the tasks under DIR/cache/mechanism-tunnel (default: no cache)"),
        options.campaign()])
    parser.add_argument("--task", choices=tuple(TASKS), default="windtunnel",
                        help="windtunnel: E5's task; bijection: bijection recall and elimination "
                             "(numeric.experiments.bijection, V = 16, 24 pairs); transitions: the enlarged wind "
                             "tunnel (numeric.experiments.transitions, K = 8, L = 128, 64 in the default profile, Dirichlet 0.2); the last two "
                             "with their floors and the real LSTM beside the mechanisms (default: windtunnel)")
    parser.add_argument("--lrs", type=_rates, default=(), metavar="LR,LR,...",
                        help="learning rates swept per mechanism, each arm's chosen on held-out validation sequences "
                             "(default: the task's own lr)")
    parser.add_argument("--pairs", type=int, default=None, metavar="N",
                        help="bijection only: the number of pairs shown per sequence (default 24)")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default=None,
                        help="the training dtype; every model is scored in float64 whatever it is (default: float64 "
                             "for windtunnel, the profile's conjecture_dtype, float32, for the other two)")
    args = parser.parse_args(argv)
    sizes = profiles.get("quick" if args.profile == "quick" else "default").experiments
    if args.pairs is not None and args.task != "bijection":
        parser.error("--pairs applies to --task bijection only")
    if args.task == "windtunnel":
        cfg = dataclasses.replace(from_sizes(sizes, windtunnel.from_sizes(sizes), args.profile == "extended"),
                                  lrs=args.lrs)
    else:
        cfg = conjecture_config(sizes, args.task, extended=args.profile == "extended", lrs=args.lrs or None)
        if args.pairs is not None:
            cfg = dataclasses.replace(cfg, tunnel=dataclasses.replace(cfg.tunnel, pairs=args.pairs))
    if args.dtype is not None:
        cfg = dataclasses.replace(cfg, dtype=args.dtype)
    try:
        cfg.validate()
    except ValueError as exc:
        parser.error(str(exc))
    t0 = time.perf_counter()
    try:
        summary, outcome = run(cfg, cache_dir=f"{args.out}/cache/{LABEL}" if args.out else None,
                               workers=args.workers, scheduler=args.scheduler)
    except campaign.CampaignError as exc:
        return campaign.refused(parser.prog, exc)
    print(table(summary))
    print(f"tunnel: {len(cfg.mechanisms)} mechanisms x {len(cfg.seeds)} seeds x {len(ARMS)} arms, "
          f"{cfg.tunnel.steps} steps of {cfg.tunnel.batch} sequences; {outcome.computed} tasks computed, "
          f"{outcome.cached} cached, {outcome.workers} workers: {time.perf_counter() - t0:.1f} s wall")
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main())
