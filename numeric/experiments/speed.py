"""Our batched run against the authors' way of running it, the same math one seed and arm at a time.

The authors' way is a plain sequential PyTorch loop (dense masked attention, torch.autograd).

`compare` times both step loops in one process (the experiments stage's figure). `whole_process` runs each side as a
process of its own, start to exit (the interpreter, the imports, the data, the training, the losses written), the
paper's five seeds x two arms on the authors' streams:

    python -m numeric.experiments.speed [--steps 200] [--rounds 3] [--threads N] [--json FILE]
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


SIDES = ("ours", "sequential")
WHOLE_PROCESS_TOL = 1e-4  # float32: both sides' losses, step for step (the stage's check of `compare`)


def paper_config(steps):
    """The paper's experiment as the authors' script runs it: its five seeds x sgd and em_like on its streams."""
    return sticky.StickyConfig(stream="authors", mu_rng="torch-float32", arms=("sgd", "em_like"), checkpoints=1,
                               steps=steps)


def _side(side, steps, threads, out):
    """One side's whole run in this process: the losses of every run and step, (arms, seeds, steps), saved to `out`."""
    torch.set_num_threads(threads)
    cfg = paper_config(steps)
    if side == "ours":
        losses = sticky.train(cfg).losses[..., :steps]
    else:
        losses = torch.tensor([[sticky.reference_run(cfg, arm, s, steps)[0] for s in range(len(cfg.seeds))]
                               for arm in cfg.arms], dtype=torch.float64)
    torch.save(losses, out)


def whole_process(steps=200, rounds=3, threads=None, log=print):
    """Each side as its own process (`python -m numeric.experiments.speed --side ...`), timed start to exit, in
    `rounds` rounds (the sides' order alternating); both sides' losses compared step for step. Returns the seconds per
    round and side, the ratio per round, their median and the largest loss difference."""
    from derive.results import default_threads

    threads = threads or default_threads()
    seconds, worst = {side: [] for side in SIDES}, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            got = {}
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                out = Path(tmp) / f"{side}.pt"
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "numeric.experiments.speed", "--side", side, "--steps", str(steps),
                                "--threads", str(threads), "--out", str(out)], check=True)
                seconds[side].append(time.perf_counter() - t0)
                got[side] = torch.load(out)
            worst = max(worst, float((got["ours"] - got["sequential"]).abs().max()))
            log(f"  round {r + 1}/{rounds}: ours {seconds['ours'][-1]:.1f} s, sequential {seconds['sequential'][-1]:.1f} s, "
                f"ratio {seconds['sequential'][-1] / seconds['ours'][-1]:.2f}")
    ratios = [b / a for a, b in zip(seconds["ours"], seconds["sequential"])]
    cfg = paper_config(steps)
    return {"steps": steps, "rounds": rounds, "threads": threads, "runs": len(cfg.arms) * len(cfg.seeds), "seconds": seconds,
            "speedup_per_round": ratios, "speedup": statistics.median(ratios), "max_abs_loss_difference": worst,
            "same_numbers": worst <= WHOLE_PROCESS_TOL,
            "method": f"each side a process of its own, timed start to exit, {rounds} rounds (order alternating), "
                      f"{steps} steps, the paper's 5 seeds x 2 arms on the authors' streams, {threads} threads, float32"}


def main(argv=None, prog="python -m numeric.experiments.speed"):
    import argparse

    from derive import options

    parser = options.parser(prog, __doc__)
    parser.add_argument("--steps", type=int, default=200, help="training steps per run (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each running both sides once (default 3)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of both sides (default: OMP_NUM_THREADS or MKL_NUM_THREADS, else 2)")
    parser.add_argument("--json", metavar="FILE", help="also write the record to FILE")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # one side's process (internal)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or (args.threads is not None and args.threads < 1):
        parser.error("--steps, --rounds and --threads must be positive integers")
    if args.side:
        if not args.out:
            parser.error("--side needs --out")
        _side(args.side, args.steps, args.threads or 1, args.out)
        return 0
    try:
        r = whole_process(args.steps, args.rounds, args.threads)
    except subprocess.CalledProcessError as exc:
        print(f"{prog}: the {exc.cmd[4]} side's process failed (exit status {exc.returncode}); its error is above",
              file=sys.stderr)
        return 1
    print(f"whole process, {r['steps']} steps, {r['runs']} runs (5 seeds x 2 arms), {r['threads']} threads: ours "
          f"{statistics.median(r['seconds']['ours']):.1f} s, sequential {statistics.median(r['seconds']['sequential']):.1f} s, "
          f"speedup {r['speedup']:.2f}x (rounds {', '.join(f'{x:.2f}' for x in r['speedup_per_round'])}); "
          f"max loss difference {r['max_abs_loss_difference']:.1e}")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1) + "\n")
    if not r["same_numbers"]:
        print(f"the two sides' losses differ by more than {WHOLE_PROCESS_TOL}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
