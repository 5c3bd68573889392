"""Where a training step's time goes, and how close it runs to the machine.

`profile(cfg)` times the sticky-chain step (sticky.gradients and the parameter update, every arm and seed at once)
per component — the projections q, k, v; the per-step allocations; the attention forward, the readout and the
attention backward of every query block; the parameter gradients; the optimizer's update; and what is left
(Python between the components) — from marks in sticky.gradients, and the threads' idle share from the process's
CPU time against the wall time. Beside it the step's FLOPs: `step_flops` counts them from the shapes (every matrix
product, at the padded widths the step runs and at the model's own), and a test checks the count against torch's
FLOP counter.

`ceiling(...)` measures the float32 matrix-product rate of this machine on the same threads, at the step's own
largest product (the scores of the last query block, batched over the runs) and at a large square product; the
step's achieved GFLOP/s over it is its roofline point. `mechanism_points` gives the same point for every
mechanism's training step of the grid (mechanism_grid.step_times), its FLOPs from torch's counter.

    python -m numeric.experiments.roofline [--quick] [--steps N] [--threads N] [--json FILE]   # 5 seeds x 2 arms
"""
from __future__ import annotations

import math
import sys
import time

import torch

from numeric.experiments import sticky

COMPONENTS = ("projections", "allocation", "attention forward", "readout", "attention backward",
              "parameter gradients", "optimizer", "other")
SQUARE = 1024  # the large square product's size


def _gflops(flops, seconds):
    return flops / seconds / 1e9 if seconds > 0 else float("nan")


def _rate(fn, flops, min_seconds):
    """GFLOP/s of fn() (flops per call): calls repeated until min_seconds have passed, after one warm-up call; the
    best of three such rounds."""
    fn()
    best = float("inf")
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_seconds / 3:
                break
        best = min(best, elapsed / n)
    return _gflops(flops, best)


def square_rate(min_seconds=0.6, square=SQUARE, dtype=torch.float32):
    """GFLOP/s of a square (square^3) float32 matrix product on the current threads."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(square, square, generator=g, dtype=dtype) for _ in range(2))
    out = torch.empty(square, square, dtype=dtype)
    return _rate(lambda: torch.matmul(a, b, out=out), 2 * square ** 3, min_seconds)


def ceiling(runs, rows, keys, width, min_seconds=0.6, square=SQUARE, dtype=torch.float32):
    """{shape name: {"shape", "gflops"}} of float32 matrix products on the current threads: the step's largest
    product ((runs, rows, width) @ (runs, width, keys), the last query block's scores), and a square product."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(runs, rows, width, generator=g, dtype=dtype)
    b = torch.randn(runs, width, keys, generator=g, dtype=dtype)
    out = torch.empty(runs, rows, keys, dtype=dtype)
    return {"step_shape": {"shape": [runs, rows, width, keys],
                           "gflops": _rate(lambda: torch.matmul(a, b, out=out), 2 * runs * rows * width * keys,
                                           min_seconds)},
            "square": {"shape": [square, square, square], "gflops": square_rate(min_seconds, square, dtype)}}


def step_flops(cfg, padded=True):
    """FLOPs of one sticky.gradients step (every matrix product, 2 per multiply-add), all runs: at the padded widths
    the step runs (`padded`) or at the model's own d_k, d_v."""
    R = len(cfg.arms) * len(cfg.seeds)
    dk, dv = (sticky.lane_width(cfg.d_k), sticky.lane_width(cfg.d_v)) if padded else (cfg.d_k, cfg.d_v)
    T, m, d = _positions(cfg), cfg.symbols, cfg.d_in
    total = 2 * 2 * T * d * (2 * dk + dv)  # the projections q, k, v and the parameter gradients
    for lo, hi, _ in sticky._blocks(T, cfg.blocks):
        r = hi - lo
        total += 2 * r * hi * 3 * (dk + dv)  # scores, alpha V; B = u V^T, dQ = dS K, dK = dS^T Q, dV = alpha^T u
        total += 3 * 2 * r * dv * m  # the readout: z = o W_O, u = (p - y) W_O^T / n, dW_O = o^T (p - y) / n
    return R * total


def _positions(cfg):
    """The positions a sticky sequence of cfg.length symbols trains on (one input per predicted next symbol)."""
    return cfg.length - 1


def _setup(cfg, device="cpu"):
    data = sticky.make_data(cfg, device)
    params = sticky.padded(sticky.init_params(cfg, device), cfg)
    lrs, mstep = sticky.learning_rates(cfg, device)
    T = data.x.shape[-2]
    blocks = sticky._blocks(T, cfg.blocks, device)
    return data, params, lrs, mstep, 1.0 / math.sqrt(cfg.d_k), blocks, sticky.workspace(cfg, blocks, device)


def _step(data, params, lrs, mstep, scale, blocks, work, mark=None):
    sticky.descend(params, data, scale, blocks, mstep, lrs, work, mark=mark)


def products(data, params, scale, blocks, work):
    """The step's matrix products alone, at its shapes and on its operands, every other operation left out: the
    projections q, k, v; per query block the scores, alpha V, the readout's three, B = u V^T, dQ = dS K, dK = dS^T Q
    and dV = alpha^T u (the scores' tile standing in for alpha and dS, whose values do not change a product's time);
    the parameter gradients. A step cannot take less than this with these products (`floor` times it)."""
    x, w_o = data.x, params[3]
    q, k, v = (x @ w for w in params[:3])
    u = torch.empty_like(v)
    for lo, hi, _ in blocks:
        qb, kt = q[..., lo:hi, :], k[..., :hi, :].mT
        shape = torch.broadcast_shapes(qb.shape[:-1], kt.shape[:-2] + (1,)) + (hi,)
        tile = torch.matmul(qb, kt, out=work[:math.prod(shape)].view(shape))
        o = tile @ v[..., :hi, :]
        z = o @ w_o
        ub = z @ w_o.mT
        o.mT @ z
        u[..., lo:hi, :] = ub
        torch.matmul(ub, v[..., :hi, :].mT, out=tile)
        tile @ k[..., :hi, :]
        qb.mT @ tile
        ub.mT @ tile
    for g in (q, k, v):
        x.mT @ g


def floor(cfg, steps=10, device="cpu", state=None):
    """Seconds per step of `products` alone (cfg's arms and seeds at once), after one warm-up: the time a step could
    reach if every operation other than its matrix products cost nothing. `state`: `_setup`'s, when already made."""
    data, params, _, _, scale, blocks, work = state or _setup(cfg, device)
    products(data, params, scale, blocks, work)
    t0 = time.perf_counter()
    for _ in range(steps):
        products(data, params, scale, blocks, work)
    return (time.perf_counter() - t0) / steps


def _timed(one, steps, components=()):
    """`one(mark=None)` (a training step) timed after one warm-up call: seconds per step over `steps` unmarked calls,
    the threads' idle share over them (1 - the process's CPU time over wall time x threads: a thread that spins while
    it waits counts as busy, so this is a lower bound), and per component over `steps` marked calls (`mark(component)`
    is called after each component's work; `other` is the marked step's time outside every mark)."""
    one()
    threads = torch.get_num_threads()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        one()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    per, last = dict.fromkeys(components, 0.0), [0.0]

    def mark(component):
        now = time.perf_counter()
        per[component] = per.get(component, 0.0) + now - last[0]
        last[0] = now

    marked0 = time.perf_counter()
    for _ in range(steps):
        last[0] = time.perf_counter()
        one(mark)
    marked = time.perf_counter() - marked0
    per["other"] = max(0.0, marked - sum(v for k, v in per.items() if k != "other"))
    return {"threads": threads, "step_s": wall / steps, "marked_step_s": marked / steps,
            "components_s": {k: v / steps for k, v in per.items()},
            "thread_idle_share": max(0.0, 1.0 - cpu / (wall * threads))}


def profile(cfg, steps=10, device="cpu", state=None):
    """The generated kernels' sticky step (cfg's arms and seeds at once) timed by `_timed`, per COMPONENTS, with the
    FLOPs from the shapes and as torch's counter sees them in one step, and the achieved GFLOP/s. `state`:
    `_setup`'s, when already made (its parameters are trained by the timed steps)."""
    cfg.validate()
    state = state or _setup(cfg, device)
    timed = _timed(lambda mark=None: _step(*state, mark=mark), steps, COMPONENTS)
    step_s = timed["step_s"]
    flops, useful = step_flops(cfg), step_flops(cfg, padded=False)
    counted = counted_flops(lambda: _step(*state))
    return {"counted_flops": int(counted), "steps": steps, "runs": len(cfg.arms) * len(cfg.seeds), "length": cfg.length,
            **timed, "flops": flops, "useful_flops": useful, "gflops": _gflops(flops, step_s),
            "useful_gflops": _gflops(useful, step_s)}


def fused_profile(cfg, steps=10, device="cpu"):
    """The fused step's seconds per step (numeric.experiments.fused: the step as trained on the CPU), in total and per
    component (projections, the fused kernel, the parameter gradients, the optimizer, other), with its FLOPs: the
    model's own widths, since it runs unpadded (torch's counter cannot see inside the kernel, so the count is the
    shapes' alone, the count a test holds to torch's on the generated step). None where the fused step does not run."""
    from numeric.experiments import fused

    step = fused.step_for(cfg, device)
    if step is None:
        return None
    data, params, lrs, mstep, scale, blocks, _ = _setup(cfg, device)
    params = sticky.unpadded(params, cfg)  # the fused step runs at the model's own widths
    timed = _timed(lambda mark=None: sticky.descend(params, data, scale, blocks, mstep, lrs, mark=mark, step=step), steps)
    flops = step_flops(cfg, padded=False)
    return {**timed, "flops": flops, "gflops": _gflops(flops, timed["step_s"])}


def roofline(cfg, steps=10, device="cpu", min_seconds=0.6):
    """profile(cfg), the products' floor (`floor`: seconds per step of the step's matrix products alone, their GFLOP/s
    and their share of the step) and the ceiling at its largest product, with the step's fraction of each ceiling."""
    cfg.validate()
    state = _setup(cfg, device)  # the data and buffers, made once for the profile and the floor
    prof = profile(cfg, steps, device, state)
    products_s = floor(cfg, steps, device, state)
    lo, hi, _ = sticky._blocks(_positions(cfg), cfg.blocks)[-1]
    ceil = ceiling(prof["runs"], hi - lo, hi, sticky.lane_width(cfg.d_k), min_seconds)
    fused = fused_profile(cfg, steps, device)
    if fused is not None:
        fused.update(fraction_of_step_shape_ceiling=fused["gflops"] / ceil["step_shape"]["gflops"],
                     fraction_of_square_ceiling=fused["gflops"] / ceil["square"]["gflops"],
                     speedup_over_generated=prof["step_s"] / fused["step_s"])
    return {**prof, "fused": fused, "ceiling": ceil, "products_s": products_s, "products_gflops": _gflops(prof["flops"], products_s),
            "products_share": products_s / prof["step_s"],
            "fraction_of_step_shape_ceiling": prof["gflops"] / ceil["step_shape"]["gflops"],
            "fraction_of_square_ceiling": prof["gflops"] / ceil["square"]["gflops"]}


def counted_flops(fn):
    """FLOPs torch's FLOP counter sees in fn() (matrix products)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def mechanism_points(cfg, times, ceiling_gflops):
    """{mechanism: {"flops", "step_s", "gflops", "fraction_of_square_ceiling"}} for the grid's training steps
    (mechanism_grid.step_times: 3 arms x 1 seed at the grid's T and blocks, one thread), FLOPs counted by torch on
    one step of the same sizes."""
    from numeric.experiments import mechanism_grid as mg
    from numeric.experiments import mechanism_layers as ml

    scfg = cfg.sticky(cfg.seeds[:1])
    data = sticky.make_data(scfg, "cpu")
    blocks = ml.query_blocks(data.x.shape[-2], cfg.blocks)
    out = {}
    for m, t in times.items():
        if "/" in m:  # a cell's scan form: timed beside, not a point of its own
            continue
        params = ml.init_params(scfg, m, scfg.seeds, len(cfg.arms), scfg.torch_dtype)
        lrs = mg.learning_rates(m, cfg.arms, params)
        flops = counted_flops(lambda m=m, params=params, lrs=lrs: mg._steps(m, "quadratic", params, lrs, data, blocks, 1))
        gf = _gflops(flops, t["median_s"])
        out[m] = {"flops": int(flops), "step_s": t["median_s"], "gflops": gf,
                  "fraction_of_square_ceiling": gf / ceiling_gflops}
    return out


def main(argv=None, prog="python -m numeric.experiments.roofline"):
    from derive import options

    parser = options.parser(prog, __doc__)
    parser.add_argument("--quick", action="store_true",
                        help="T = 200 instead of the paper's 2000 (default: the paper's experiment, its five seeds x "
                             "the two arms at once)")
    parser.add_argument("--steps", type=int, default=10, help="steps timed (default 10)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", metavar="FILE", help="also write the record to FILE")
    args = parser.parse_args(argv)
    if args.steps < 1 or (args.threads is not None and args.threads < 1):
        parser.error("--steps and --threads must be positive integers")
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = sticky.StickyConfig(arms=("sgd", "em_like"), length=200 if args.quick else sticky.StickyConfig.length)
    r = roofline(cfg, args.steps)
    print("the generated kernels' step (whole-tile tensor operations, lane-padded widths):")
    print(f"sticky step: {r['runs']} runs, T = {r['length']}, {r['threads']} threads: {r['step_s'] * 1e3:.1f} ms, "
          f"{r['flops'] / 1e9:.2f} GFLOP ({r['useful_flops'] / 1e9:.2f} at the model's widths), "
          f"{r['gflops']:.1f} GFLOP/s; threads idle {r['thread_idle_share']:.0%}")
    for k, v in r["components_s"].items():
        print(f"  {k:20} {v * 1e3:8.2f} ms  {v / r['marked_step_s']:6.1%}")
    print(f"its matrix products alone: {r['products_s'] * 1e3:.1f} ms ({r['products_gflops']:.1f} GFLOP/s), "
          f"{r['products_share']:.0%} of the step")
    for k, c in r["ceiling"].items():
        print(f"ceiling {k:11} {c['shape']}: {c['gflops']:.1f} GFLOP/s; the step at {r['gflops'] / c['gflops']:.0%}")
    f = r["fused"]
    if f is None:
        print("the fused step does not run here (numba missing, or not a CPU)")
    else:
        print(f"the fused step (as trained on the CPU): {f['step_s'] * 1e3:.1f} ms, {f['speedup_over_generated']:.2f}x the "
              f"generated kernels' step; {f['flops'] / 1e9:.2f} GFLOP at the model's widths, {f['gflops']:.1f} GFLOP/s: "
              f"{f['fraction_of_step_shape_ceiling']:.0%} of the step-shape ceiling, "
              f"{f['fraction_of_square_ceiling']:.0%} of the square one")
        for k, v in f["components_s"].items():
            print(f"  {k:20} {v * 1e3:8.2f} ms  {v / f['marked_step_s']:6.1%}")
    if args.json:
        import json
        from pathlib import Path

        Path(args.json).write_text(json.dumps(r, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
