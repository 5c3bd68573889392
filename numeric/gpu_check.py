"""One command that validates a device: `python -m numeric.gpu_check --device cuda --out DIR`.

Writes everything under DIR (DIR/gpu_check.json, DIR/pipeline/ with the stages' results.json and
cache) and prints one line per step:

1. environment: torch, CUDA and cuDNN versions, the GPU, the precision flags (TF32 off);
2. the codegen and numeric stages (quick profile) on the device, through the CLI;
3. agreement of the batched sticky trainer on the device with the CPU: float64 (<= 1e-10) and
   float32 (stated tolerance FP32_TOL), and the device run against the one-run-at-a-time loop;
4. resume on the device: a run interrupted and resumed equals an uninterrupted one, exactly;
5. the quick experiments stage on the device, then its cache reloaded on the CPU;
6. ms per sticky step by query-block count, on the default profile's first fresh group;
7. the paper's experiment (5 seeds x 2 arms x 1000 steps, T = 2000) timed end to end.

On the CPU (`--device cpu`, the default where there is no GPU) steps 6 and 7 run smaller (sequence
length and steps shrunk, stated in the output), so CI runs the whole script. Exit status 1 if a
check fails.
"""
from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import torch

from numeric import device as devices
from numeric.device import synchronize
from numeric.experiments import replay, sticky

FP64_TOL = 1e-10
FP32_TOL = 1e-4  # float32 losses after a few steps: summation order differs between devices
BLOCKS = (1, 2, 4, 8, 16, 32)


def _small():
    return sticky.StickyConfig(length=96, steps=6, seeds=(42, 7), arms=("sgd", "em_like", "em_mstep"), blocks=4,
                               checkpoints=3, tracked_rows=4, dtype="float64")


def agreement(device):
    cfg = _small()
    out = {}
    for dtype, tol in (("float64", FP64_TOL), ("float32", FP32_TOL)):
        c = dataclasses.replace(cfg, dtype=dtype)
        a, b = sticky.train(c, "cpu"), sticky.train(c, device)
        out[dtype] = {"max_abs_loss_difference": float((a.losses - b.losses).abs().max()), "tolerance": tol}
    run = sticky.train(cfg, device)
    worst = 0.0
    for i, arm in enumerate(cfg.arms):
        ref, _ = sticky.reference_run(cfg, arm, 0, cfg.steps, device)
        worst = max(worst, float((torch.tensor(ref, dtype=torch.float64) - run.losses[i, 0, : cfg.steps]).abs().max()))
    out["device_vs_sequential_float64"] = {"max_abs_loss_difference": worst, "tolerance": FP64_TOL}
    ok = all(v["max_abs_loss_difference"] <= v["tolerance"] for v in out.values())
    return ok, out


def resume(device, directory):
    cfg = dataclasses.replace(_small(), steps=9)
    whole = sticky.train(cfg, device)
    state = Path(directory) / "resume.partial"

    def stop(step):
        if step == 5:
            raise KeyboardInterrupt

    try:
        sticky.train(cfg, device, progress=stop, state_path=state, save_every=4)
    except KeyboardInterrupt:
        pass
    resumed = sticky.train(cfg, device, state_path=state, save_every=4, log=lambda *a: None)
    state.unlink(missing_ok=True)
    return bool(torch.equal(resumed.losses, whole.losses)), {"steps": cfg.steps, "interrupted_at": 5}


def pipeline(device, directory, stages):
    """The CLI, quick profile, on `device`: (ok, summary)."""
    cmd = [sys.executable, "-m", "derive.all", "--quick", "--device", device, "--only", stages, "--out", str(directory)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    Path(directory).mkdir(parents=True, exist_ok=True)  # a CLI that failed early may not have made it
    (Path(directory) / f"log-{stages.replace(',', '-')}.txt").write_text(p.stdout + p.stderr)
    data = json.loads((Path(directory) / "results.json").read_text()) if (Path(directory) / "results.json").exists() else {}
    mine = [c for c in data.get("checks", []) if c["stage"] in stages.split(",")]
    failed = [c["id"] for c in mine if c["status"] == "fail"]
    return p.returncode == 0 and not failed, {"command": " ".join(cmd[1:]), "returncode": p.returncode,
                                              "checks": len(mine), "failed": failed,
                                              "seconds": round(time.perf_counter() - t0, 2)}


def cache_on_cpu(directory):
    """Every cache entry the device run wrote, read back on the CPU (weights_only, map_location cpu): each
    loads, and every training run in it has finite losses and parameters."""
    paths = sorted((Path(directory) / "cache").glob("*.pt"))
    bad, runs = [], 0
    for path in paths:
        try:
            obj = sticky.load(path)
        except Exception as exc:  # reported, not raised: the check fails
            bad.append(f"{path.name}: {type(exc).__name__}")
            continue
        if isinstance(obj, dict) and isinstance(obj.get("run"), sticky.Run):
            runs += 1
            run = obj["run"]
            if not all(bool(torch.isfinite(t).all()) for t in (run.losses, *run.params)):
                bad.append(f"{path.name}: non-finite")
    return bool(paths) and runs > 0 and not bad, {"entries": len(paths), "training_runs": runs, "bad": bad}


def step_times(device, small):
    """ms per training step of the default first fresh group (10 runs) by block count."""
    cfg = sticky.StickyConfig(seeds=sticky.PAPER_SEEDS, arms=("sgd", "em_like"))
    if small:
        cfg = dataclasses.replace(cfg, length=400)
    data, params = sticky.make_data(cfg, device), sticky.init_params(cfg, device)
    _, mstep = sticky.learning_rates(cfg, device)
    T, scale = data.x.shape[-2], 1.0 / math.sqrt(cfg.d_k)
    reps = 3 if small else 10
    out = {}
    for nb in BLOCKS:
        blocks = sticky._blocks(T, nb, device)
        work = sticky.workspace(cfg, blocks, device)
        for _ in range(2):  # warm-up
            sticky.gradients(params, data, scale, blocks, mstep, work)
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            sticky.gradients(params, data, scale, blocks, mstep, work)
        synchronize(device)
        out[nb] = round(1000 * (time.perf_counter() - t0) / reps, 3)
    return {"length": cfg.length, "runs": len(cfg.seeds) * len(cfg.arms), "ms_per_step_by_blocks": out}


def paper_experiment(device, small):
    """The paper's 5 seeds x 2 arms x 1000 steps on the authors' streams, timed end to end (set-up included)."""
    cfg = sticky.StickyConfig(stream="authors", mu_rng="torch-float32", arms=("sgd", "em_like"), checkpoints=1)
    if small:
        cfg = dataclasses.replace(cfg, steps=replay.QUICK_STEPS)
    synchronize(device)
    t0 = time.perf_counter()
    run = sticky.train(cfg, device)
    synchronize(device)
    seconds = time.perf_counter() - t0
    cmp = replay.compare(list(cfg.seeds), cfg.steps, run.losses.numpy())
    return cmp["ok"], {"steps": cfg.steps, "seeds": list(cfg.seeds), "arms": list(cfg.arms), "wall_seconds": round(seconds, 2),
                       "loop_seconds": round(run.loop_seconds, 2), "max_loss_error_vs_authors": cmp["max_loss_error"],
                       "goal_seconds_on_one_gpu": 10.0 if not small else None}


def main(argv=None, prog="python -m numeric.gpu_check"):
    from derive import options

    ap = options.parser(prog, __doc__, parents=[
        options.device(help="the device to validate (auto: CUDA when torch sees one; on CPU, small sizes)"),
        options.out_dir(default="gpu_check", help="directory for everything the check writes (gpu_check.json in it)")])
    args = ap.parse_args(argv)
    try:
        device, reason = devices.resolve(args.device)
    except (RuntimeError, ValueError) as exc:
        ap.exit(2, f"error: {exc}\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    small = torch.device(device).type == "cpu"
    report = {"device": device, "device_reason": reason, "environment": devices.describe(device),
              "precision": devices.pin_precision(), "steps": {}}
    print(f"device: {device} ({reason}){'; CPU sizes for steps 6-7' if small else ''}")
    ok_all = True

    def step(name, fn, *a):
        nonlocal ok_all
        t0 = time.perf_counter()
        result = fn(*a)
        ok, detail = result if isinstance(result, tuple) else (True, result)
        ok_all = ok_all and ok
        report["steps"][name] = {"ok": ok, "seconds": round(time.perf_counter() - t0, 2), **detail}
        print(f"  {'PASS' if ok else 'FAIL'} {name:32} {report['steps'][name]['seconds']:8.2f}s  {json.dumps(detail)[:160]}",
              flush=True)

    step("codegen-and-numeric", pipeline, device, out / "pipeline", "codegen,numeric")
    step("trainer-agreement-with-cpu", agreement, device)
    step("resume-equality", resume, device, out)
    step("quick-experiments", pipeline, device, out / "pipeline", "experiments")
    step("cache-reloaded-on-cpu", cache_on_cpu, out / "pipeline")
    step("ms-per-step-by-blocks", step_times, device, small)
    step("paper-experiment", paper_experiment, device, small)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"{'all checks passed' if ok_all else 'SOME CHECKS FAILED'}; wrote {out / 'gpu_check.json'}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
