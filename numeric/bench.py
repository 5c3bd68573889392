"""Benchmark: generated backward vs torch.autograd vs SDPA, forward + backward, threads pinned.

    python -m numeric.bench [--quick] [--device cpu|cuda] [--threads N] [--json FILE]

Times are medians over repeats, interleaved per size so drift hits every runner alike; the ratio is
ours / autograd measured in one process. Peak memory: CUDA's allocator peak on GPU; on CPU the peak
resident memory above the baseline (VmHWM), measured in a child process (see measure_memory).
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import torch

from numeric.api import attention_backward
from numeric.device import synchronize
from numeric.reference import causal_mask
from numeric.sdpa import scaled_dot_product_attention

SIZES = {"default": (64, 256, 1024), "quick": (64, 256), "gpu": (1024, 2048, 4096)}
REPEATS = {"default": {64: 60, 256: 20, 1024: 7}, "quick": {64: 7, 256: 3}, "gpu": {1024: 50, 2048: 30, 4096: 20}}
BATCH = {"default": 8, "quick": 8, "gpu": 32}  # sequences x heads: a GPU is timed where it is busy
WARMUPS = {"default": 1, "quick": 1, "gpu": 5}  # a GPU's first calls pick kernels and grow the allocator


@dataclass
class Row:
    """One size: 'ours' is the drop-in module (autograd.Function around the generated kernels),
    'api' is numeric.attention_backward (one generated kernel, forward and all gradients)."""

    n: int
    causal: bool
    device: str
    dtype: str
    batch: int
    d: int
    seconds: dict  # runner -> median seconds
    peak_mb: dict  # runner -> peak MB
    memory_method: str
    max_rel_diff: float

    def ratio(self, runner, reference):
        return self.seconds[runner] / self.seconds[reference]


def _inputs(batch, n, d, device, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v, u = (torch.randn(batch, n, d, generator=g).to(device=device, dtype=dtype) for _ in range(4))
    return q, k, v, u


def run_ours(q, k, v, u, mask, scale):
    """The drop-in numeric.sdpa.scaled_dot_product_attention: generated forward and backward kernels."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    scaled_dot_product_attention(q, k, v, is_causal=mask is not None, scale=scale).backward(u)
    return q.grad, k.grad, v.grad


def run_api(q, k, v, u, mask, scale):
    """numeric.attention_backward: one generated kernel computing the forward and every gradient."""
    g = attention_backward(q, k, v, u, mask=mask, scale=scale, validate_inputs=False)
    return g.dQ, g.dK, g.dV


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


RUNNERS = {"ours": run_ours, "api": run_api, "autograd": run_autograd, "sdpa": run_sdpa}


def _cuda(device):
    return torch.device(device).type == "cuda"


def _timed(fn, args, device):
    """Seconds of one call: CUDA events on a GPU (the device's own clock), the wall clock on CPU."""
    if _cuda(device):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def time_runs(args, device, repeats, warmups=1, runners=None):
    """Median seconds per runner (default RUNNERS), runners interleaved within each repeat, after `warmups`
    calls of each."""
    runners = RUNNERS if runners is None else runners
    times = {name: [] for name in runners}
    for _ in range(warmups):
        for fn in runners.values():
            fn(*args)
    synchronize(device)
    for _ in range(repeats):
        for name, fn in runners.items():
            times[name].append(_timed(fn, args, device))
    return {name: statistics.median(ts) for name, ts in times.items()}


def peak_memory_mb(fn, args, device):
    if _cuda(device):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn(*args)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20, "cuda allocator peak"
    return _cpu_peak(fn, args)


def _status_kb(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} not in /proc/self/status")


def _cpu_peak(fn, args):
    """Peak resident memory above the baseline (Linux): large blocks are mmapped with a fixed
    threshold, so freed tensors leave RSS, and VmHWM is reset right before the run."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD, fixed (no dynamic growth)
        gc.collect()
        libc.malloc_trim(0)  # hand free heap pages back, so reusing them counts as new residency
        base = _status_kb("VmRSS")
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset VmHWM to the current RSS
        fn(*args)
        return (_status_kb("VmHWM") - base) / 1024, "peak RSS above baseline (VmHWM)"
    except OSError:
        return float("nan"), "unavailable on this platform"


def _args(n, causal, device, batch, d, dtype):
    """(q, k, v, u, mask, scale) for one benchmark size."""
    mask = causal_mask(n, device) if causal else None
    return (*_inputs(batch, n, d, device, dtype), mask, d ** -0.5)


def bench_size(n, causal, device, dtype=torch.float32, batch=8, d=64, repeats=7, warmups=1):
    args = _args(n, causal, device, batch, d, dtype)
    ref = run_autograd(*args)
    diff = max(float((a - b).abs().max() / b.abs().max()) for name in ("ours", "api", "sdpa")
               for a, b in zip(RUNNERS[name](*args), ref))
    seconds = time_runs(args, device, repeats, warmups)
    return Row(n, causal, device, str(dtype).removeprefix("torch."), batch, d, seconds, {}, "", diff)


def measure_memory(rows, dtype=torch.float32):
    """Peak memory per runner, for each row. On CPU each row is measured in a child process of its own: fixing
    malloc's mmap threshold (needed for an honest RSS peak) would otherwise slow every later allocation in this
    process. The children run at once (each peak is its own process's, so they do not disturb each other),
    which spares the cost of starting torch in each, one after another."""
    children = []
    for row in rows:
        if _cuda(row.device):
            row.peak_mb, row.memory_method = _peaks(row.n, row.causal, row.device, row.batch, row.d, dtype)
            continue
        cmd = [sys.executable, "-m", "numeric.bench", "--peak-memory", str(row.n), "--batch", str(row.batch),
               "--d", str(row.d)] + (["--causal"] if row.causal else [])
        children.append((row, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    for row, child in children:
        out, err = child.communicate(timeout=600)
        if child.returncode != 0:
            raise subprocess.CalledProcessError(child.returncode, child.args, out, err)
        data = json.loads(out.strip().splitlines()[-1])
        row.peak_mb, row.memory_method = data["peak_mb"], data["method"]


def _peaks(n, causal, device, batch, d, dtype=torch.float32):
    args = _args(n, causal, device, batch, d, dtype)
    for fn in RUNNERS.values():  # warm-up: first calls allocate lazily initialised state
        fn(*args)
    mem = {name: peak_memory_mb(fn, args, device) for name, fn in RUNNERS.items()}
    return {k: v[0] for k, v in mem.items()}, mem["ours"][1]


def run(profile="default", device="cpu", threads=1, log=print):
    """Every size of `profile` ('quick', 'default', or 'gpu': larger n and batch, CUDA events, 5 warm-ups)."""
    if profile not in SIZES:
        raise ValueError(f"unknown benchmark profile {profile!r}; choose from {', '.join(SIZES)}")
    torch.set_num_threads(threads)
    rows = [bench_size(n, causal, device, batch=BATCH[profile], repeats=REPEATS[profile][n], warmups=WARMUPS[profile])
            for n in SIZES[profile] for causal in (False, True)]
    measure_memory(rows)
    for r in rows:
        ms = {k: f"{v * 1e3:8.2f}" for k, v in r.seconds.items()}
        log(f"  bench n={r.n:5} {'causal' if r.causal else 'full  '} module {ms['ours']} ms  api {ms['api']} ms  "
            f"autograd {ms['autograd']} ms  sdpa {ms['sdpa']} ms | vs autograd: module {r.ratio('ours', 'autograd'):4.2f} "
            f"api {r.ratio('api', 'autograd'):4.2f} | module vs sdpa {r.ratio('ours', 'sdpa'):4.2f} | peak MB "
            + "/".join(f"{r.peak_mb[k]:.1f}" for k in ("ours", "api", "autograd", "sdpa")))
    return rows


def as_benchmarks(rows):
    """results.json `benchmarks` entries: module and API against autograd and SDPA."""
    out = []
    for r in rows:
        shape = {"batch": r.batch, "n": r.n, "d": r.d, "causal": r.causal}
        for ours, label in (("ours", "module"), ("api", "api")):
            for ref in ("autograd", "sdpa"):
                out.append({"name": f"numeric/fwd-bwd/{label}-vs-{ref}/n={r.n}/{'causal' if r.causal else 'full'}",
                            "device": r.device, "dtype": r.dtype, "shape": shape, "ours_s": r.seconds[ours],
                            "reference": ref, "reference_s": r.seconds[ref], "ratio": r.ratio(ours, ref),
                            "ours_peak_mb": r.peak_mb[ours], "reference_peak_mb": r.peak_mb[ref],
                            "memory_method": r.memory_method})
    return out


def main(argv=None, prog="python -m numeric.bench"):
    from derive import options

    p = options.parser(prog, __doc__, parents=[
        options.profile(tuple(SIZES), help="sizes to time (gpu: larger n and batch, CUDA events, 5 warm-ups)"),
        options.device(default="cpu", help="torch device to time on (auto: CUDA when torch sees one)"),
        options.json_file("also write the rows to this file")])
    p.add_argument("--threads", type=options.positive_int, default=1, metavar="N", help="torch threads, pinned")
    p.add_argument("--peak-memory", type=int, metavar="N", help=argparse.SUPPRESS)  # child process of measure_memory
    p.add_argument("--causal", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=8, help=argparse.SUPPRESS)
    p.add_argument("--d", type=int, default=64, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.peak_memory:
        torch.set_num_threads(args.threads)
        peaks, method = _peaks(args.peak_memory, args.causal, args.device, args.batch, args.d)
        print(json.dumps({"peak_mb": peaks, "method": method}))
        return 0
    from numeric import device as devices

    try:
        device, _ = devices.resolve(args.device)
    except (RuntimeError, ValueError) as exc:
        p.error(f"--device {args.device}: {exc}")
    rows = run(args.profile, device, args.threads)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(r) for r in rows], fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
