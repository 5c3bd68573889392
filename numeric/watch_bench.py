"""The watcher's cost on a training step: `python -m numeric.watch_bench [--setup NAME] [--every K]`.

A setup is a model with its own training step (forward, loss, backward, optimizer step), built afresh
by a function `() -> (model, step)`; `step(model)` trains one step. The same step is timed on a copy
watched by one `numeric.watch.watch(model, every=K)` held open throughout (as in a training run) and on
an unwatched copy, in alternating blocks on one thread, and the peak resident memory of a fresh process
that trains the setup is read with and without the watcher.

Setups (SETUPS):
- `demo`: the demonstration experiment's model and training step (numeric.experiments.deep_watch: a
  2-layer, 4-head causal nn.TransformerEncoder on the sticky wind tunnel, SGD), the model the 10%
  goal is stated for;
- `long`: the same kind of encoder (d_model 64, 4 heads, 2 layers, feed-forward 256) on sequences of
  128 random vectors, batch 16, a squared-output loss: attention matrices 16x larger per sequence, so
  the closed forms weigh more against the rest of the step;
- `hf`: a Hugging Face GPT-2 (GPT2LMHeadModel from a config built here, no weights downloaded: 2 layers, 4
  heads, d_model 128, vocabulary 256, attn_implementation="sdpa", no dropout) trained with Adam on batch 8 x 128
  random tokens, its language-modelling loss; needs the `hf` extra (`pip install -e '.[hf]'`), and without it
  is skipped (skip_reason says why).
"""
from __future__ import annotations

import contextlib
import importlib
import math
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

from numeric import watch_hf
from numeric.watch import watch

# name -> (the function building it, `module:function`; what it trains, as results.json's benchmark `shape`)
SETUPS = {
    "demo": ("numeric.experiments.deep_watch:benchmark_setup",
             {"model": "the demonstration experiment's 2-layer 4-head causal TransformerEncoder (numeric.experiments."
                       "deep_watch)", "data": "sticky wind tunnel"}),
    "long": ("numeric.watch_bench:long_setup",
             {"model": "2-layer 4-head causal TransformerEncoder", "d_model": 64, "batch": 16, "seq": 128}),
    "hf": ("numeric.watch_bench:hf_setup",
           {"model": "Hugging Face GPT2LMHeadModel, 2 layers, 4 heads, sdpa, Adam", "d_model": 128, "vocab": 256,
            "batch": 8, "seq": 128}),
}
NEEDS = {"hf": "transformers"}  # setup -> the optional dependency it needs


def skip_reason(setup):
    """Why `setup` cannot run here (its optional dependency is missing), or None."""
    need = NEEDS.get(setup)
    if need is None:
        return None
    try:
        watch_hf.require(need)
    except ImportError as exc:
        return str(exc)
    return None


def hf_setup(seed=0):
    """A small Hugging Face GPT-2 (sdpa attention, float32, no dropout) on batch 8 x 128 random tokens, Adam."""
    transformers = watch_hf.require("transformers")
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=128, n_embd=128, n_layer=2, n_head=4, attn_pdrop=0.0,
                                  resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    cfg._attn_implementation = "sdpa"
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 256, (8, 128), generator=torch.Generator().manual_seed(1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(model):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    return model, step


def long_setup(seed=0):
    """A 2-layer, 4-head causal nn.TransformerEncoder (d_model 64, float32, no dropout) on batch 16 x 128."""
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    x = torch.randn(16, 128, 64, generator=torch.Generator().manual_seed(1))
    mask = nn.Transformer.generate_square_subsequent_mask(128)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step(model):
        model(x, mask=mask, is_causal=True).square().mean().backward()
        opt.step()
        opt.zero_grad()
    return model, step


def _setup(name):
    if name not in SETUPS:
        raise ValueError(f"unknown benchmark setup {name!r}; choose from {', '.join(SETUPS)}")
    module, function = SETUPS[name][0].split(":")
    return getattr(importlib.import_module(module), function)


def benchmark(setup="demo", every=10, steps=20, repeats=15, min_seconds=0.0):
    """Training-step time with and without the watcher (one thread): two copies of the setup, one trained
    inside a single `watch(model, every=every)` kept open throughout, as a training run would, the other
    unwatched, timed in alternating blocks of `steps` steps (rounded up to a multiple of `every`, so every
    block holds the same number of recorded steps) after one warm-up block each. Returns per-step seconds
    (medians), the median of the per-pair ratios and their lower and upper quartiles, the seconds entering and leaving the watcher take once
    (not in the ratio), the peak-RSS increase of a fresh process (MiB) and the MiB the watcher holds between
    records (alpha, log alpha, live rows and V per site, for drift). At least `repeats`
    pairs of blocks are timed, more when that takes under `min_seconds` (fast steps are noisy: the median
    then has more pairs to steady it); the number timed is returned as `pairs`."""
    make = _setup(setup)
    for name, value in (("every", every), ("steps", steps), ("repeats", repeats)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"benchmark: {name} must be a positive int, got {value!r}")
    if not min_seconds >= 0:
        raise ValueError(f"benchmark: min_seconds must be >= 0, got {min_seconds!r}")
    steps = -(-steps // every) * every
    with _one_thread():
        runs = {False: make(), True: make()}
        t0 = time.perf_counter()
        with watch(runs[True][0], every=every):
            pass
        enter_exit_s = time.perf_counter() - t0
        times = {False: [], True: []}
        pairs = repeats
        with watch(runs[True][0], every=every) as w:
            while len(times[False]) < pairs + 1:  # the first pair is a warm-up
                for on, (model, step) in runs.items():
                    times[on].append(_block(model, step, steps))
                if len(times[False]) == 2:  # one timed pair: how many fill min_seconds
                    pair_s = (times[False][1] + times[True][1]) * steps
                    pairs = max(repeats, math.ceil(min_seconds / pair_s)) if pair_s > 0 else repeats
    plain, watched = times[False][1:], times[True][1:]  # the first block is a warm-up
    held = sum(t.nbytes for states in w._prev.values() for state in states for t in state) / 2**20
    rss = _rss_pair(setup, every)
    ratio, quartiles = _ratios(plain, watched)
    return dict(setup=setup, pairs=len(plain), steps_per_block=steps, step_s=statistics.median(plain),
                step_watched_s=statistics.median(watched), ratio=ratio, ratio_quartiles=quartiles,
                enter_exit_s=enter_exit_s, peak_rss_mib=rss[0], peak_rss_increase_mib=rss[1] - rss[0], held_mib=held)


def unrecorded(setup="demo", steps=20, repeats=40):
    """An unrecorded watched step against a plain one, on one model (one thread): blocks of `steps` steps
    alternately outside and inside one watcher that records only its first step (every = 10**9). Returns
    per-step seconds (medians), the median per-pair ratio and its quartiles."""
    for name, value in (("steps", steps), ("repeats", repeats)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 2:
            raise ValueError(f"unrecorded: {name} must be an int >= 2, got {value!r}")
    with _one_thread():
        model, step = _setup(setup)()
        w = watch(model, every=10**9)
        with w:
            step(model)  # step 0, the one recorded
        first = len(w.records)
        times = {False: [], True: []}
        for _ in range(repeats + 1):  # the first pair is a warm-up
            for on in (False, True):
                with w if on else contextlib.nullcontext():
                    times[on].append(_block(model, step, steps))
    if not first or len(w.records) != first:
        raise RuntimeError(f"unrecorded: {first} records at step 0 and {len(w.records) - first} after it; expected some, then none")
    plain, watched = times[False][1:], times[True][1:]
    ratio, quartiles = _ratios(plain, watched)
    return dict(setup=setup, pairs=repeats, step_s=statistics.median(plain), step_unrecorded_s=statistics.median(watched),
                ratio=ratio, ratio_quartiles=quartiles, records=len(w.records))


@contextlib.contextmanager
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _block(model, step, steps):
    """Seconds per step over `steps` training steps."""
    t0 = time.perf_counter()
    for _ in range(steps):
        step(model)
    return (time.perf_counter() - t0) / steps


def _ratios(plain, other):
    """The median of the per-pair ratios other / plain, and their lower and upper quartiles."""
    ratios = [b / a for a, b in zip(plain, other)]
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return statistics.median(ratios), [q[0], q[2]]


def _rss_pair(setup, every):
    """Peak RSS (MiB) of two fresh processes training the setup, unwatched and watched, run side by side (a
    process's peak is its own, so running both at once changes neither; it halves the wall time)."""
    procs = [subprocess.Popen([sys.executable, "-m", "numeric.watch_bench", "--rss", setup, str(on), str(every)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for on in (0, 1)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate()
        if p.returncode:
            raise RuntimeError(f"watch_bench: the peak-memory process for {setup!r} failed: {stderr.strip()[-2000:]}")
        out.append(float(stdout))
    return out


def _peak_rss(setup, on, every, steps=20):
    """Peak resident memory (MiB) of this process after training `steps` steps: VmHWM (Linux), which
    starts afresh at exec, unlike ru_maxrss, which a child inherits from its parent."""
    torch.set_num_threads(1)
    model, step = _setup(setup)()
    with watch(model, every=every) if on else contextlib.nullcontext():
        for _ in range(steps):
            step(model)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def main(argv=None, prog="python -m numeric.watch_bench"):
    import argparse

    from derive import options

    ap = options.parser(prog, __doc__)
    ap.add_argument("--setup", choices=sorted(SETUPS), default="demo", help="the model and training step")
    ap.add_argument("--every", type=int, default=10, metavar="K", help="record every K-th step")
    ap.add_argument("--repeats", type=int, default=15, metavar="N", help="timed blocks per side, at least")
    ap.add_argument("--min-seconds", type=float, default=10.0, metavar="S", help="time at least this many seconds")
    ap.add_argument("--unrecorded", action="store_true",
                    help="time unrecorded watched steps against plain ones instead (one model, 40 pairs of blocks)")
    ap.add_argument("--rss", nargs=3, metavar=("SETUP", "ON", "EVERY"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rss:
        print(_peak_rss(args.rss[0], bool(int(args.rss[1])), int(args.rss[2])))
        return 0
    if args.every < 1 or args.repeats < 1 or not args.min_seconds >= 0:
        ap.error("--every and --repeats must be positive, --min-seconds >= 0")
    reason = skip_reason(args.setup)
    if reason:
        print(f"{args.setup}: skipped: {reason}", file=sys.stderr)
        return 2
    if args.unrecorded:
        r = unrecorded(args.setup)
        print(f"{args.setup}: step {r['step_s'] * 1e3:.2f} ms, unrecorded watched step {r['step_unrecorded_s'] * 1e3:.2f} ms: "
              f"median ratio {r['ratio']:.3f} (quartiles {r['ratio_quartiles'][0]:.3f}-{r['ratio_quartiles'][1]:.3f}) "
              f"over {r['pairs']} pairs of blocks")
        return 0
    r = benchmark(args.setup, every=args.every, steps=max(20, 2 * args.every), repeats=args.repeats,
                  min_seconds=args.min_seconds)
    print(f"{args.setup}: step {r['step_s'] * 1e3:.2f} ms, watched (every={args.every}) {r['step_watched_s'] * 1e3:.2f} ms: "
          f"median ratio {r['ratio']:.3f} (quartiles {r['ratio_quartiles'][0]:.3f}-{r['ratio_quartiles'][1]:.3f}) "
          f"over {r['pairs']} pairs of {r['steps_per_block']}-step blocks; "
          f"entering and leaving the watcher {r['enter_exit_s'] * 1e3:.2f} ms; "
          f"peak RSS {r['peak_rss_mib']:.0f} MiB, +{r['peak_rss_increase_mib']:.1f} MiB; "
          f"held between records {r['held_mib']:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
