"""`agv`: the project's one console command; each subcommand is one module's `main(argv, prog)`.

    agv run [--quick] [--out DIR] ...      the main job (the same as `python -m derive.all`)
    agv SUBCOMMAND --help                  the subcommand's options, with their defaults
    agv --help                             this list

The subcommands are imported only when called, so `agv --help` needs neither torch nor SymPy. Exit status is the
subcommand's (0 pass, 1 a check failed or a verdict is not reached, 2 bad usage).
"""
from __future__ import annotations

import difflib
import importlib
import sys

# subcommand: (module, one line on what it does)
COMMANDS = {
    "run": ("derive.all", "the main job: prove the claims, check them numerically, run the experiments, render the report"),
    "codegen": ("derive.codegen", "emit (or --check) the generated torch modules from the proved formulas"),
    "faults": ("derive.engine_faults", "plant faults in the proof engine and check that the verifier notices each"),
    "fuzz": ("numeric.fuzz", "a campaign of random claims through every proof path (false verdicts counted)"),
    "mechanism-fuzz": ("numeric.mechanism_fuzz", "a campaign of random attention mechanisms through the mechanism table"),
    "mechanisms": ("numeric.mechanisms", "check the generated mechanism kernels against autograd, and time them"),
    "grid": ("numeric.experiments.mechanism_grid", "the mechanism grid (G1): EM-like vs SGD for every mechanism, on Dask"),
    "tunnel": ("numeric.experiments.mechanism_tunnel", "the wind tunnel for every mechanism (G2), on Dask"),
    "speed": ("numeric.experiments.speed", "the paper's experiment against the sequential loop, each a process of its own"),
    "roofline": ("numeric.experiments.roofline", "where the sticky step's time goes, against the machine's product rate"),
    "bench": ("numeric.bench", "time the generated attention backward against autograd, threads pinned"),
    "watch-bench": ("numeric.watch_bench", "time the watcher's overhead on a training loop"),
    "gpu-check": ("numeric.gpu_check", "the GPU validation: pipeline, agreement with CPU, resume, timings"),
    "render": ("reports.render", "render DIR/results.json into report.html, report.tex and report.pdf"),
    "screenshot": ("reports.screenshot", "the picture of the report's first screen the README shows (headless Chromium)"),
}
PROG = "agv"


def usage():
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} SUBCOMMAND [options]   ({PROG} SUBCOMMAND --help for its options)", "",
             "The attention-gradient verifier: prove the paper's claims, check the code that computes them, run its "
             "experiments, report.", "", "subcommands:"]
    lines += [f"  {name:{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "The main job is also `python -m derive.all`; every subcommand is `python -m MODULE` too:"]
    lines += [f"  {PROG} {name:{width}}  = python -m {module}" for name, (module, _) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        from derive import __version__

        print(f"{PROG} {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=2)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        print(f"{PROG}: error: unknown subcommand {name!r}{hint} (see `{PROG} --help`)", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return module.main(rest, prog=f"{PROG} {name}")


if __name__ == "__main__":
    sys.exit(main())
