"""Our batched run against the authors' way of running it: a plain sequential PyTorch loop of the
same math (dense masked attention, torch.autograd), one seed and arm at a time, same process."""
from __future__ import annotations

import dataclasses
import time

import torch

from numeric.experiments import sticky


def compare(cfg, steps, device="cpu"):
    """Time `steps` steps both ways (same numbers, checked) and extrapolate to cfg.steps.

    Per-step cost is constant in both (fixed shapes), so the ratio of per-step times is the ratio
    of full runs; the extrapolation is labelled as such."""
    short = dataclasses.replace(cfg, steps=steps, checkpoints=1)
    sticky.train(dataclasses.replace(short, steps=1), device)  # warm-up
    t0 = time.perf_counter()
    ours = sticky.train(short, device)
    ours_s = time.perf_counter() - t0
    seq_s, worst = 0.0, 0.0
    for a, arm in enumerate(cfg.arms):
        for s in range(len(cfg.seeds)):
            t0 = time.perf_counter()
            losses, _ = sticky.reference_run(short, arm, s, steps, device)
            seq_s += time.perf_counter() - t0
            worst = max(worst, float((torch.tensor(losses, dtype=torch.float64) - ours.losses[a, s, :steps]).abs().max()))
    scale = cfg.steps / steps
    return {"timed_steps": steps, "ours_timed_s": ours_s, "sequential_timed_s": seq_s,
            "ours_full_run_s": ours_s * scale, "sequential_full_run_s": seq_s * scale,
            "speedup": seq_s / ours_s, "max_abs_loss_difference": worst, "runs": len(cfg.arms) * len(cfg.seeds),
            "method": f"both timed over {steps} steps per run and extrapolated x{scale:g}; threads "
                      f"{torch.get_num_threads()}; dtype {cfg.dtype}"}
