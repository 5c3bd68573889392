"""Every routing mechanism trained on the sticky chain under both schedules: the conjecture on data (claim G1).

The sticky-chain protocol of E1–E3 (numeric.experiments.sticky: the authors' task and sizes, T = 2000, 8 symbols,
d_in 20, d_k 10, d_v 15, 1000 full-batch steps), one layer per mechanism (numeric.experiments.mechanism_layers),
every mechanism on the same data streams and seeds (sticky.make_data: our streams, mu drawn with torch float64 seed
0, as the sticky experiment's first fresh group) and from the same initial W_Q, W_K, W_V, W_O where it has them.
Arms, per parameter group (mechanism_layers.ROUTING / CONTENT):

    sgd         every parameter lr 0.01
    em_like     content lr 0.1 (10x), routing (and the readout W_O) 0.01: the paper's EM-like schedule

The share of a mechanism's parameters that em_like trains at the content rate differs between mechanisms (about a
third for the attention layers, two thirds or more for the cells and the experts): `content_shares` counts it from
the layers' shapes, and the G1 rule's content-share control regresses the gain on it.

The speedup's identical-arms baseline (E1's definition scores identical arms about 1.1, not 1) is SGD's run
against itself, as in E1 (numeric.experiments.rules.g1); training a copy of SGD would give the same curves.

Each (mechanism, group of seeds) is one task of a Dask campaign (numeric.campaign): `train_task` is a pure
module-level function of the config, the mechanism and the seeds (torch pinned to one thread inside it), returning
plain data; finished tasks are cached as JSON under DIR/cache/mechanism-grid/ and a campaign resumes from them. The
results do not depend on the number of workers (tests/test_mechanism_grid.py: 1 and 2 workers, bitwise).

    python -m numeric.experiments.mechanism_grid [--quick | --extended] [--workers N] [--scheduler ADDRESS]
                                                 [--out DIR] [--overhead N]

runs the profile's grid (default: the default profile's reduced grid; --extended: the full grid), prints the table
per mechanism and the wall time; --overhead N times N round trips of a trivial task on a fresh local cluster.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from numeric.experiments import chain, sticky
from numeric.experiments import mechanism_layers as ml
from numeric.experiments import stats as st
from numeric.experiments.config import positive_ints

# arm -> (routing lr, content lr)
ARMS = {"sgd": (0.01, 0.01), "em_like": (0.01, 0.1)}
LABEL = "mechanism-grid"
CURVE_POINTS = 101  # points of each arm's mean loss curve kept in results.json
RESULT = "r2"  # what a task returns, named in its cache key (r2: E4's frame and content distances)


@dataclass(frozen=True)
class GridConfig:
    """The grid: mechanisms x seeds x arms, each seed trained with the sticky experiment's settings (`base`,
    whose own seeds, steps, length and arms are replaced by the grid's)."""

    mechanisms: tuple = field(default_factory=ml.names)  # every registered mechanism with a layer
    length: int = 2000
    steps: int = 1000
    seeds: tuple = sticky.PAPER_SEEDS
    seeds_per_task: int = 1
    blocks: int = 8  # query blocks of the quadratic form (mechanism_layers.query_blocks)
    checkpoints: int = 11  # E4's frame and content snapshots, evenly spaced from step 0 to the last
    arms: tuple = tuple(ARMS)
    base: sticky.StickyConfig = sticky.StickyConfig()

    def validate(self):
        positive_ints(self, "length", "steps", "seeds_per_task", "blocks", "checkpoints")
        if self.length < 3:
            raise ValueError(f"GridConfig.length must be >= 3, got {self.length}")
        ml.check_names(self.mechanisms, "GridConfig.mechanisms")
        if tuple(self.arms) != tuple(ARMS):
            raise ValueError(f"GridConfig.arms must be {tuple(ARMS)} (the rule reads both), got {self.arms!r}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"GridConfig.seeds must be distinct and non-empty, got {self.seeds!r}")
        self.sticky().validate()
        return self

    def sticky(self, seeds=None):
        """The sticky experiment's config for `seeds` (default: all of the grid's)."""
        return dataclasses.replace(self.base, length=self.length, steps=self.steps, seeds=tuple(seeds or self.seeds),
                                   arms=("sgd",), checkpoints=1)

    def groups(self):
        """The seeds in task-sized groups, in order."""
        k = self.seeds_per_task
        return [tuple(self.seeds[i:i + k]) for i in range(0, len(self.seeds), k)]

    def train_key(self):
        """A hash of everything a task's numbers depend on besides its mechanism and seeds (and the code version)."""
        from derive import __version__

        fields = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("mechanisms", "seeds", "seeds_per_task")}
        blob = json.dumps({"cfg": repr(fields), "lrs": ARMS, "version": __version__, "result": RESULT}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


# -- one task: a mechanism on a group of seeds, every arm batched -------------------------------------------------
def learning_rates(mechanism, arms, params):
    """{name: (A, 1, ...) learning rates}: the content lr for the mechanism's content, the routing lr otherwise."""
    out = {}
    for name, p in params.items():
        which = 1 if name in ml.content(mechanism) else 0
        lr = torch.tensor([ARMS[a][which] for a in arms], dtype=p.dtype, device=p.device)
        out[name] = lr.view(-1, *([1] * (p.dim() - 1)))
    return out


def parameter_counts(cfg):
    """{mechanism: {"content": n, "all": n}}: how many numbers each mechanism of the grid trains (one run: one arm,
    one seed) and how many of them are content (mechanism_layers.content: the EM-like arm's fast ones), from the
    layers' shapes at the grid's sizes (cfg.base: d_in, d_k, d_v and the symbols)."""
    b = cfg.base
    return {m: ml.parameter_count(m, b.d_in, b.d_k, b.d_v, b.symbols) for m in cfg.mechanisms}


def content_shares(cfg):
    """{mechanism: share of its parameters under the content rate}: content count / all (parameter_counts), the
    fraction of a run's numbers the EM-like arm trains at 10x; the G1 rule's `shares` (its content-share control)."""
    return {m: c["content"] / c["all"] for m, c in parameter_counts(cfg).items()}


def _metrics(probs, y):
    ce, ent, acc = chain.predictive_metrics(probs.double(), y.expand(probs.shape[:-1]))
    return {"loss": ce.tolist(), "entropy": ent.tolist(), "accuracy": acc.tolist()}


def train_task(cfg, mechanism, seeds, where=None):
    """Train `mechanism` on `seeds` under every arm of `cfg` (one batched program, torch.autograd) and evaluate it.

    Pure: the same numbers for the same arguments in any process (torch runs on one thread inside the call, the
    caller's setting restored after). Returns plain data: per arm x seed the loss curve (before each step, and
    after the last), the final entropy, accuracy, KL to the exact Bayes predictive (bits) on the training and on
    held-out sequences, the Bayes predictive's own metrics, and (under "timing", not part of the numbers) the wall time."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    large_allocations()
    try:
        ml.ensure(mechanism, where)  # a user's mechanism, in a worker that has not loaded its file
        return _train(cfg, mechanism, tuple(seeds))
    finally:
        torch.set_num_threads(threads)


def large_allocations():
    """Let glibc keep the step's few-MB tensors on its heap (mmap threshold 32 MiB, trim threshold 256 MiB).

    Dask's nanny starts every worker with MALLOC_TRIM_THRESHOLD_=65536 (distributed.nanny.pre-spawn-environ), and
    setting any threshold switches off glibc's dynamic ones: the mmap threshold stays at 128 KiB, so every block of
    a step is mapped afresh and page-faulted, which about doubles the step time in a worker. Set in the process the
    task runs in (its numbers do not depend on it); a no-op where the C library is not glibc."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 256 << 20))


def _train(cfg, mechanism, seeds):
    scfg = cfg.sticky(seeds)
    data = sticky.make_data(scfg, "cpu")
    T = data.x.shape[-2]
    blocks = ml.query_blocks(T, cfg.blocks)
    params = ml.init_params(scfg, mechanism, seeds, len(cfg.arms), scfg.torch_dtype)
    lrs = learning_rates(mechanism, cfg.arms, params)
    curve = []
    marks = checkpoints(cfg.steps, cfg.checkpoints)
    rows = [int(r) for r in torch.linspace(0, T - 1, min(scfg.tracked_rows, T)).round().long()]
    snaps = []
    t0 = time.perf_counter()
    for step in range(cfg.steps + 1):
        if step in marks:  # the frame (weights at the tracked rows) and the content, outside the timed loop's work
            snaps.append((ml.tracked_weights(mechanism, params, data.x, rows).double(),
                          torch.cat([params[n].detach().double().flatten(2) for n in ml.content(mechanism)], -1)))
        if step == cfg.steps:
            break
        loss = ml.losses(mechanism, params, data.x, data.y, blocks=blocks)
        ml.descend(params, lrs, loss)
        curve.append(loss.detach())
    loop = time.perf_counter() - t0
    with torch.no_grad():
        probs = ml.probabilities(mechanism, params, data.x, blocks=blocks)
        curve.append(-torch.log(probs.gather(-1, data.y.expand(probs.shape[:-1])[..., None]).squeeze(-1)).mean(-1))
        held = sticky.make_data(scfg, "cpu", seed_offset=scfg.heldout_seed_offset)
        held_probs = ml.probabilities(mechanism, params, held.x, blocks=blocks)
    losses = torch.stack(curve, -1).double()  # (A, S, steps + 1)
    bayes = chain.bayes_predictive(data.P, data.mu, data.x[0])
    bayes_held = chain.bayes_predictive(held.P, held.mu, held.x[0])
    return {
        "mechanism": mechanism, "seeds": list(seeds), "arms": list(cfg.arms), "steps": cfg.steps, "length": T,
        "losses": losses.tolist(),
        "train": {**_metrics(probs, data.y), "kl_bits": chain.kl_bits(bayes[None], probs.double()).tolist()},
        "heldout": {**_metrics(held_probs, held.y), "kl_bits": chain.kl_bits(bayes_held[None], held_probs.double()).tolist()},
        "bayes": _metrics(bayes[None], data.y)["loss"][0], "bayes_entropy": _metrics(bayes[None], data.y)["entropy"][0],
        "bayes_heldout": _metrics(bayes_held[None], held.y)["loss"][0],
        "finite": bool(torch.isfinite(losses).all()),
        "frame": {"steps": marks, "routing": _to_final([w for w, _ in snaps]), "content": _to_final([c for _, c in snaps]),
                  "tracked_rows": rows},
        "timing": {"loop_seconds": loop, "step_seconds": loop / max(cfg.steps, 1)},
    }


def checkpoints(steps, n):
    """n steps evenly spaced from 0 to `steps` (both included), distinct."""
    return sorted({round(steps * c / (n - 1)) for c in range(n)}) if n > 1 else [steps]


def _to_final(snaps):
    """Per checkpoint, each run's relative distance to its last snapshot: ||x_c - x_final|| / ||x_final||, as
    [arm][seed][checkpoint] lists."""
    final = snaps[-1]
    scale = final.flatten(2).norm(dim=-1).clamp_min(1e-300)
    d = torch.stack([(x - final).flatten(2).norm(dim=-1) / scale for x in snaps], -1)  # (A, S, C)
    return d.tolist()


# -- the campaign -------------------------------------------------------------------------------------------------
def tasks(cfg):
    """One campaign task per (mechanism, group of seeds), named by the mechanism, the seeds and the training key."""
    from numeric import campaign

    key = cfg.train_key()
    where = {m: ml.source(m) for m in cfg.mechanisms}
    return [campaign.Task(f"{LABEL}/{ml.task_label(m, where[m])}/seeds={'-'.join(map(str, g))}/{key}", train_task,
                          (cfg, m, g, where[m])) for m in cfg.mechanisms for g in cfg.groups()]


def run(cfg, cache_dir=None, workers=None, scheduler=None, log=print, cluster=None):
    """Train the grid on Dask (numeric.campaign.run). Returns (merged, outcome): merged[mechanism] is the tasks'
    results joined over seed groups in cfg.seeds' order (None for a mechanism with a failed task)."""
    from numeric import campaign

    cfg.validate()
    todo = tasks(cfg)
    outcome = campaign.run(todo, scheduler=scheduler, workers=workers, cache_dir=cache_dir, log=log, label=LABEL,
                           cluster=cluster)
    merged, groups = {}, len(cfg.groups())
    for i, m in enumerate(cfg.mechanisms):
        parts = outcome.results[i * groups:(i + 1) * groups]
        merged[m] = None if any(p is None for p in parts) else merge(parts)
    return merged, outcome


def merge(parts):
    """One mechanism's task results joined along the seed axis."""
    out = {k: parts[0][k] for k in ("mechanism", "arms", "steps", "length")}
    out["seeds"] = [s for p in parts for s in p["seeds"]]
    out["losses"] = [[row for p in parts for row in p["losses"][a]] for a in range(len(out["arms"]))]
    for part in ("train", "heldout"):
        out[part] = {k: [[x for p in parts for x in p[part][k][a]] for a in range(len(out["arms"]))]
                     for k in parts[0][part]}
    for k in ("bayes", "bayes_entropy", "bayes_heldout"):
        out[k] = [x for p in parts for x in p[k]]
    out["frame"] = {"steps": parts[0]["frame"]["steps"], "tracked_rows": parts[0]["frame"]["tracked_rows"],
                    **{k: [[row for p in parts for row in p["frame"][k][a]] for a in range(len(out["arms"]))]
                       for k in ("routing", "content")}}
    out["finite"] = all(p["finite"] for p in parts)
    out["step_seconds"] = [p["timing"]["step_seconds"] for p in parts]
    return out


def curves(merged):
    """{mechanism: {arm: (S, steps + 1) array}}: the G1 rule's input (mechanisms with a failed task left out)."""
    return {m: {arm: np.asarray(r["losses"][i], float) for i, arm in enumerate(r["arms"])}
            for m, r in merged.items() if r is not None}


def summarise(cfg, merged):
    """Per mechanism and arm the numbers results.json reports: means and per-seed lists of the final loss, entropy,
    accuracy, held-out loss and KL, the gap to H_min (the chain's conditional entropy, the Bayes floor of E2) and to
    the exact Bayes predictive's loss on the same sequences, and the arm's mean loss curve."""
    h_min = chain.conditional_entropy(chain.transition_matrix(cfg.base.symbols, cfg.base.self_prob, cfg.base.off_mass))
    out = {}
    for m, r in merged.items():
        if r is None:
            out[m] = {"failed": True}
            continue
        bayes, bayes_held = np.asarray(r["bayes"]), np.asarray(r["bayes_heldout"])
        arms = {}
        for i, arm in enumerate(r["arms"]):
            L = np.asarray(r["losses"][i], float)
            final = L[:, -1]
            per = {"final_loss": final, "final_entropy": r["train"]["entropy"][i], "accuracy": r["train"]["accuracy"][i],
                   "kl_to_bayes_bits": r["train"]["kl_bits"][i], "heldout_loss": r["heldout"]["loss"][i],
                   "heldout_entropy": r["heldout"]["entropy"][i], "heldout_accuracy": r["heldout"]["accuracy"][i],
                   "heldout_kl_to_bayes_bits": r["heldout"]["kl_bits"][i], "gap_to_h_min": final - h_min,
                   "gap_to_bayes_loss": final - bayes, "heldout_gap_to_bayes_loss": np.asarray(r["heldout"]["loss"][i]) - bayes_held}
            arms[arm] = {k: _mean(v) for k, v in per.items()}
            arms[arm].update({f"{k}_per_seed": [float(x) for x in v] for k, v in per.items()})
            arms[arm]["final_loss_ci95"] = st.mean_ci(final)[1]
            arms[arm]["curve"] = st.curve(L, CURVE_POINTS)
        e4 = frame_rule(r)
        out[m] = {"seeds": r["seeds"], "arms": arms, "h_min": h_min,
                  "frame_precision": {"verdict": e4.verdict, "reason": e4.reason, "measured": e4.measured,
                                      "steps": r["frame"]["steps"],
                                      "routing_to_final": {a: np.mean(r["frame"]["routing"][i], 0).tolist()
                                                           for i, a in enumerate(r["arms"])},
                                      "content_to_final": {a: np.mean(r["frame"]["content"][i], 0).tolist()
                                                           for i, a in enumerate(r["arms"])}}, "bayes_loss": _mean(bayes),
                  "bayes_heldout_loss": _mean(bayes_held), "finite": r["finite"],
                  "step_seconds_per_task": r["step_seconds"]}
    return out


def frame_rule(merged_one):
    """E4's rule (numeric.experiments.rules.e4) on one mechanism's runs: per arm, the seed-mean relative distance
    of its routing weights at the tracked rows (the frame) and of its content parameters to their final state.
    The frame distance is the relative Frobenius change of the weights, defined for every mechanism (normalised or
    not); for softmax E4 itself reads the Jensen-Shannon distance, on the same linear scale."""
    from numeric.experiments import rules

    f = merged_one["frame"]
    return rules.e4({a: {"steps": f["steps"], "attention": np.mean(f["routing"][i], 0).tolist(),
                         "values": np.mean(f["content"][i], 0).tolist()} for i, a in enumerate(merged_one["arms"])})


def _mean(v):
    v = np.asarray(v, float)
    return float(v.mean()) if np.isfinite(v).all() else float("nan")


# -- what it costs --------------------------------------------------------------------------------------------------
def step_times(cfg, mechanisms=None, steps=3, rounds=3, forms=False, log=None):
    """Seconds per training step of each mechanism (3 arms x 1 seed at the grid's T and blocks, torch on one
    thread, after a warm-up step), the median of `rounds` rounds that visit every mechanism in turn (so a load
    on the machine falls on all of them alike). With `forms`, the cells' scan form is timed too ("gate/scan").
    Returns {name: {"median_s", "rounds_s"}}."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        scfg = cfg.sticky(cfg.seeds[:1])
        data = sticky.make_data(scfg, "cpu")
        blocks = ml.query_blocks(data.x.shape[-2], cfg.blocks)
        runs = [(m, "quadratic") for m in (mechanisms or cfg.mechanisms)]
        if forms:
            runs += [(m, "scan") for m in ml.names() if "scan" in ml.layer(m).forms and m in (mechanisms or cfg.mechanisms)]
        state = {}
        for m, form in runs:
            params = ml.init_params(scfg, m, scfg.seeds, len(cfg.arms), scfg.torch_dtype)
            state[(m, form)] = (params, learning_rates(m, cfg.arms, params))
            _steps(m, form, *state[(m, form)], data, blocks, 1)  # warm-up
        times = {k: [] for k in state}
        for _ in range(rounds):
            for k in state:
                t0 = time.perf_counter()
                _steps(k[0], k[1], *state[k], data, blocks, steps)
                times[k].append((time.perf_counter() - t0) / steps)
        out = {(m if form == "quadratic" else f"{m}/{form}"): {"median_s": statistics.median(v), "rounds_s": v}
               for (m, form), v in times.items()}
        if log:
            log("  step times: " + ", ".join(f"{k} {1000 * v['median_s']:.0f} ms" for k, v in out.items()))
        return out
    finally:
        torch.set_num_threads(threads)


def _steps(mechanism, form, params, lrs, data, blocks, n):
    for _ in range(n):
        ml.descend(params, lrs, ml.losses(mechanism, params, data.x, data.y, form=form, blocks=blocks))


def _trivial(i):
    return i


def scheduling_overhead(n=50, workers=2, scheduler=None):
    """Seconds per round trip of a trivial task (submit, run, gather one at a time) on a local cluster of
    `workers` (or `scheduler`), the cluster's start-up and close timed apart. Returns a dict."""
    from numeric.campaign import Cluster

    t0 = time.perf_counter()
    with Cluster(scheduler, workers, 20) as cluster:
        client = cluster.client
        started = time.perf_counter()
        client.submit(_trivial, -1, pure=False).result()  # the first task imports on the worker
        trips = []
        for i in range(n):
            t = time.perf_counter()
            client.submit(_trivial, i, pure=False).result()
            trips.append(time.perf_counter() - t)
        closing = time.perf_counter()
    end = time.perf_counter()
    return {"round_trip_median_s": statistics.median(trips), "round_trip_max_s": max(trips), "tasks": n,
            "workers": workers, "cluster_start_s": started - t0, "cluster_close_s": end - closing}


# -- command line -------------------------------------------------------------------------------------------------
def from_sizes(sizes):
    """The GridConfig of a profile's MechanismGridSizes (derive.profile)."""
    return GridConfig(length=sizes.length, steps=sizes.steps, seeds=sizes.seeds, seeds_per_task=sizes.seeds_per_task,
                      blocks=sizes.blocks)


def table(summary, rule_measured=None):
    """Plain-text table: per mechanism the final loss of each arm, the speedup and its interval, and the share of
    its parameters under the content rate (where the rule measured it)."""
    lines = [f"{'mechanism':10} {'compete':8} {'share':>5} {'sgd':>7} {'em_like':>8} {'speedup':>8}  "
             f"{'95% CI':>13} {'excess CI':>15} {'H-Hmin em':>9} {'heldout em':>10}  E4 (frame first)"]
    per = (rule_measured or {}).get("mechanisms", {})
    for m, s in summary.items():
        if s.get("failed"):
            lines.append(f"{m:10} failed")
            continue
        a, r = s["arms"], per.get(m, {})
        ci, xci = r.get("ci95", [math.nan] * 2), r.get("excess_ci95", [math.nan] * 2)
        lines.append(f"{m:10} {str(r.get('competition', '?')):8} {r.get('content_share', math.nan):5.2f} "
                     f"{a['sgd']['final_loss']:7.4f} {a['em_like']['final_loss']:8.4f} "
                     f"{r.get('speedup', math.nan):8.2f}  [{ci[0]:5.2f}, {ci[1]:5.2f}] "
                     f"[{xci[0]:+6.2f}, {xci[1]:+6.2f}] {a['em_like']['final_entropy'] - s['h_min']:9.4f} "
                     f"{a['em_like']['heldout_loss']:10.4f}  {s.get('frame_precision', {}).get('verdict', '?')}")
    return "\n".join(lines)


def main(argv=None, prog="python -m numeric.experiments.mechanism_grid"):
    from derive import options
    from derive import profile as profiles
    from numeric import campaign
    from numeric.experiments import rules

    parser = options.parser(prog, __doc__, parents=[
        options.profile(("quick", "default", "extended"), extended=True,
                        help="quick: the quick profile's tiny grid; extended: the full grid (5 seeds, 1000 steps)"),
        options.out_dir(default=None, help="cache the tasks under DIR/cache/mechanism-grid (default: no cache)"),
        options.json_file("write the summary, the rule and the timings here"), options.campaign()])
    parser.add_argument("--overhead", type=int, default=0, metavar="N", help="also time N trivial round trips")
    args = parser.parse_args(argv)
    sizes = profiles.get("quick" if args.profile == "quick" else "default").experiments
    cfg = from_sizes(sizes.mechanism_grid_extended if args.profile == "extended" else sizes.mechanism_grid)
    cache = f"{args.out}/cache/{LABEL}" if args.out else None
    t0 = time.perf_counter()
    try:
        merged, outcome = run(cfg, cache_dir=cache, workers=args.workers, scheduler=args.scheduler)
    except campaign.CampaignError as exc:
        return campaign.refused(parser.prog, exc)
    wall = time.perf_counter() - t0
    summary = summarise(cfg, merged)
    labels, source = competition_labels(None, cfg.mechanisms)
    rule = rules.g1(curves(merged), labels, cfg.steps, shares=content_shares(cfg))
    print(table(summary, rule.measured))
    print(f"G1: {rule.verdict}: {rule.reason}")
    print(f"grid: {len(cfg.mechanisms)} mechanisms x {len(cfg.seeds)} seeds x {len(cfg.arms)} arms, T = {cfg.length - 1}, "
          f"{cfg.steps} steps; {outcome.computed} tasks computed, {outcome.cached} cached, {outcome.workers} workers: "
          f"{wall:.1f} s wall")
    out = {"config": dataclasses.asdict(cfg), "wall_s": wall, "workers": outcome.workers, "computed": outcome.computed,
           "cached": outcome.cached, "failed": outcome.failed, "labels_source": source}
    if args.overhead:
        out["overhead"] = scheduling_overhead(args.overhead, campaign.worker_count(args.workers or None), args.scheduler)
        print("scheduling overhead: " + json.dumps(out["overhead"]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**out, "summary": summary, "rule": {"verdict": rule.verdict, "reason": rule.reason,
                                                           "measured": rule.measured}}, fh, indent=1, default=float)
    return 1 if outcome.failed else 0


# -- the structural labels ----------------------------------------------------------------------------------------
def competition_labels(table, names):
    """({mechanism: True / False}, source): whether each mechanism's keys compete (its `competition` cell is proved);
    see structural_labels."""
    return structural_labels(table, names, "competition")


def content_routing_labels(table, names):
    """({mechanism: True / False}, source): whether each mechanism routes by content between positions (its
    `content_routing` cell, the paper's partition); see structural_labels."""
    return structural_labels(table, names, "content_routing")


def structural_labels(table, names, question):
    """({mechanism: True / False}, source): each mechanism's `question` cell (proved -> True, disproved -> False)
    from the derive stage's table (results.json `mechanisms`) when it holds the mechanism; else decided here (masked
    and unmasked). A mechanism whose cell is undecided gets no label (left out of the comparison)."""
    labels, sources = {}, set()
    rows = (table or {}).get("table", {})
    for m in names:
        cell = rows.get(m, {}).get("questions", {}).get(question, {})
        if cell.get("verdict") in ("proved", "disproved"):
            labels[m] = cell["verdict"] == "proved"
            sources.add("the derive stage's table (results.json mechanisms)")
            continue
        verdict = _decide(m, question)
        if verdict in ("proved", "disproved"):
            labels[m] = verdict == "proved"
        sources.add("decided here (the derive stage's table was not in results.json)")
    return labels, "; ".join(sorted(sources))


def _decide(name, question):
    from derive.mechanisms import questions, table
    from derive.prove import run_path

    if question == "content_routing":  # a witness decides it: every path runs
        run = table._run({"grid": [{"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}], "points": 2, "seed": 0,
                          "budget_s": 60.0, "fixed_budget_s": 10.0})
        return questions.content_routing_cell(name, run)["verdict"]
    identity = questions.identities(name)[question]
    outcomes = [run_path("general", identity, masked, f"mechanism {name} / {question}", {"seed": 0, "budget_s": 60.0})
                for masked in (False, True)]
    if any(o.status == "disproved" for o in outcomes):
        return "disproved"
    return "proved" if all(o.status == "proved" for o in outcomes) else "undecided"


if __name__ == "__main__":
    sys.exit(main())
