"""Benchmark: generated backward vs torch.autograd vs SDPA, forward + backward, threads pinned.

    python -m numeric.bench [--quick] [--device cpu|cuda] [--threads N] [--json FILE]

Times are medians over repeats, interleaved per size so drift hits all three alike; the ratio is
ours / autograd measured in one process. Peak memory: CUDA's allocator peak on GPU; on CPU the
profiler's running sum of allocations (an estimate, labelled as such).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import torch

from numeric.module import AttentionCore

SIZES = {"default": (64, 256, 1024), "quick": (64, 256)}
REPEATS = {"default": {64: 60, 256: 20, 1024: 7}, "quick": {64: 20, 256: 5}}


@dataclass
class Row:
    n: int
    causal: bool
    device: str
    dtype: str
    batch: int
    d: int
    ours_s: float
    autograd_s: float
    sdpa_s: float
    ratio_autograd: float
    ratio_sdpa: float
    ours_peak_mb: float
    autograd_peak_mb: float
    sdpa_peak_mb: float
    memory_method: str
    max_rel_diff: float


def _inputs(batch, n, d, device, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v, u = (torch.randn(batch, n, d, generator=g).to(device=device, dtype=dtype) for _ in range(4))
    return q, k, v, u


def run_ours(q, k, v, u, mask, scale):
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    AttentionCore.apply(q, k, v, mask, scale).backward(u)
    return q.grad, k.grad, v.grad


def run_autograd(q, k, v, u, mask, scale):
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    s = scale * q @ k.transpose(-1, -2)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    (torch.softmax(s, -1) @ v).backward(u)
    return q.grad, k.grad, v.grad


def run_sdpa(q, k, v, u, mask, scale):
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=mask is not None, scale=scale).backward(u)
    return q.grad, k.grad, v.grad


RUNNERS = {"ours": run_ours, "autograd": run_autograd, "sdpa": run_sdpa}


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_runs(args, device, repeats):
    """Median seconds per runner, runners interleaved within each repeat."""
    times = {name: [] for name in RUNNERS}
    for name, fn in RUNNERS.items():  # warm-up
        fn(*args)
    for _ in range(repeats):
        for name, fn in RUNNERS.items():
            _sync(device)
            t0 = time.perf_counter()
            fn(*args)
            _sync(device)
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def peak_memory_mb(fn, args, device):
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn(*args)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20, "cuda allocator peak"
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn(*args)
    events = sorted((e for e in prof.events() if e.cpu_memory_usage), key=lambda e: e.time_range.start)
    level = peak = 0
    for e in events:  # self allocations (+) and frees (-) in time order
        level += e.self_cpu_memory_usage
        peak = max(peak, level)
    return peak / 2**20, "cpu profiler running sum (estimate)"


def bench_size(n, causal, device, dtype=torch.float32, batch=8, d=64, repeats=7):
    q, k, v, u = _inputs(batch, n, d, device, dtype)
    mask = torch.ones(n, n, dtype=torch.bool, device=device).tril() if causal else None
    scale = d ** -0.5
    args = (q, k, v, u, mask, scale)
    ours, ref = run_ours(*args), run_autograd(*args)
    diff = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(ours, ref))
    t = time_runs(args, device, repeats)
    mem = {name: peak_memory_mb(fn, args, device) for name, fn in RUNNERS.items()}
    return Row(n, causal, device, str(dtype).removeprefix("torch."), batch, d, t["ours"], t["autograd"], t["sdpa"],
               t["ours"] / t["autograd"], t["ours"] / t["sdpa"], mem["ours"][0], mem["autograd"][0], mem["sdpa"][0],
               mem["ours"][1], diff)


def run(profile="default", device="cpu", threads=1, log=print):
    torch.set_num_threads(threads)
    rows = []
    for n in SIZES[profile]:
        for causal in (False, True):
            row = bench_size(n, causal, device, repeats=REPEATS[profile][n])
            rows.append(row)
            log(f"  bench n={n:5} causal={causal!s:5} ours {row.ours_s * 1e3:8.2f} ms  autograd "
                f"{row.autograd_s * 1e3:8.2f} ms  sdpa {row.sdpa_s * 1e3:8.2f} ms  ratio {row.ratio_autograd:5.2f} "
                f"(sdpa {row.ratio_sdpa:5.2f})  peak MB {row.ours_peak_mb:7.1f}/{row.autograd_peak_mb:7.1f}")
    return rows


def as_benchmarks(rows):
    """results.json `benchmarks` entries: ours against autograd and against SDPA."""
    out = []
    for r in rows:
        shape = {"batch": r.batch, "n": r.n, "d": r.d, "causal": r.causal}
        for ref, ref_s, ratio in (("autograd", r.autograd_s, r.ratio_autograd), ("sdpa", r.sdpa_s, r.ratio_sdpa)):
            out.append({"name": f"numeric/attention-fwd-bwd/n={r.n}/{'causal' if r.causal else 'full'}/vs-{ref}",
                        "device": r.device, "dtype": r.dtype, "shape": shape, "ours_s": r.ours_s, "reference": ref,
                        "reference_s": ref_s, "ratio": ratio, "ours_peak_mb": r.ours_peak_mb,
                        "reference_peak_mb": r.autograd_peak_mb if ref == "autograd" else r.sdpa_peak_mb,
                        "memory_method": r.memory_method})
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m numeric.bench", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available")
    if args.threads < 1:
        p.error("--threads must be >= 1")
    rows = run("quick" if args.quick else "default", args.device, args.threads)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(r) for r in rows], fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
