"""Our batched run against the authors' way of running it: a plain sequential PyTorch loop of the
same math (dense masked attention, torch.autograd), one seed and arm at a time, same process."""
from __future__ import annotations

import dataclasses
import statistics

import torch

from numeric.experiments import sticky


def compare(cfg, steps, device="cpu", rounds=3):
    """Time `steps` steps both ways (same numbers, checked) in `rounds` alternating rounds and
    extrapolate to cfg.steps; the speedup is the median over rounds, with the range beside it.

    Only the step loops are timed (sticky.Run.loop_seconds, reference_run's `timing`): set-up (data,
    parameters, block masks) and the final evaluation are outside both clocks, and the device is
    synchronised at both ends of each. Both sides are warmed up first. Per-step cost is constant in
    both (fixed shapes), so the ratio of per-step times is the ratio of full runs; the extrapolation is
    labelled as such."""
    short = dataclasses.replace(cfg, steps=steps, checkpoints=1)
    sticky.train(dataclasses.replace(short, steps=2), device)  # warm-up: allocator, kernels, thread pool
    sticky.reference_run(short, cfg.arms[0], 0, 2, device)
    ours_s, seq_s, worst = [], [], 0.0
    for _ in range(rounds):
        ours = sticky.train(short, device)
        ours_s.append(ours.loop_seconds)
        total = 0.0
        for a, arm in enumerate(cfg.arms):
            for s in range(len(cfg.seeds)):
                timing = {}
                losses, _ = sticky.reference_run(short, arm, s, steps, device, timing=timing)
                total += timing["loop_seconds"]
                worst = max(worst, float((torch.tensor(losses, dtype=torch.float64) - ours.losses[a, s, :steps]).abs().max()))
        seq_s.append(total)
    ratios = [b / a for a, b in zip(ours_s, seq_s)]
    scale = cfg.steps / steps
    ours_med, seq_med = statistics.median(ours_s), statistics.median(seq_s)
    return {"timed_steps": steps, "rounds": rounds, "ours_timed_s": ours_med, "sequential_timed_s": seq_med,
            "ours_full_run_s": ours_med * scale, "sequential_full_run_s": seq_med * scale,
            "speedup": statistics.median(ratios), "speedup_per_round": ratios,
            "max_abs_loss_difference": worst, "runs": len(cfg.arms) * len(cfg.seeds),
            "method": f"step loops only (set-up and evaluation outside the clocks, both sides warmed up), {steps} steps "
                      f"per run in {rounds} alternating rounds (median), extrapolated x{scale:g}; threads "
                      f"{torch.get_num_threads()}; dtype {cfg.dtype}; device {device}"}
