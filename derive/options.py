"""The command line's shared conventions: one help formatter and the parent parsers the subcommands take.

Every command of the project (`agv SUBCOMMAND`, or `python -m MODULE`) spells an option the same way:

    --out DIR          a directory the command writes into (created when missing)
    --json FILE        one JSON file the command writes its rows or summary to
    --device D         auto | cpu | cuda | cuda:N  (auto: CUDA when torch sees one)
    --profile NAME     the sizes to run (--quick is short for --profile quick)
    --workers N        workers of a local Dask cluster (0: in this process); --scheduler ADDRESS joins a running one

Each parent parser is built per command (`parents=[options.out_dir(...)]`), so the help text can say what that
command puts in DIR. This module imports nothing beyond the standard library: `agv --help` stays instant.
"""
from __future__ import annotations

import argparse

DEVICE_METAVAR = "auto|cpu|cuda[:N]"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default, unless the help already says it or the option is a flag."""

    def _get_help_string(self, action):
        text = action.help or ""
        if text is argparse.SUPPRESS or "default" in text.lower() or action.default is argparse.SUPPRESS:
            return text
        if action.nargs == 0 or not action.option_strings and action.nargs not in ("?", "*"):
            return text  # a flag (off unless given) or a required positional
        if action.default is None or action.default == []:
            return f"{text} (default: none)".strip()
        return f"{text} (default: %(default)s)".strip()


def parser(prog, description, parents=(), epilog=None):
    """An ArgumentParser with the project's formatter; `description` may be a module docstring (first line kept)."""
    first = (description or "").strip().split("\n")[0]
    return argparse.ArgumentParser(prog=prog, description=first, parents=list(parents), epilog=epilog,
                                   formatter_class=HelpFormatter)


def _parent():
    return argparse.ArgumentParser(add_help=False)


def device_type(text):
    """--device: auto, cpu, cuda or cuda:N."""
    if text in ("auto", "cpu", "cuda") or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:N, got {text!r}")


def _integer(least, what):
    """An argparse type: an integer >= least, refused with `what` it must be."""
    def parse(text):
        try:
            n = int(text)
        except ValueError:
            n = least - 1
        if n < least:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return n
    return parse


positive_int = _integer(1, "a positive integer")
workers_type = _integer(0, "a non-negative integer (0: in this process)")  # --workers
_non_negative = _integer(0, "a non-negative integer")


def out_dir(default="out", help="directory the command writes into", old=()):
    """--out DIR. `old`: earlier spellings kept as hidden aliases."""
    p = _parent()
    p.add_argument("--out", default=default, metavar="DIR", help=help)
    for spelling in old:
        p.add_argument(spelling, dest="out", help=argparse.SUPPRESS)
    return p


def json_file(help="write the command's rows as JSON to this file", old=()):
    """--json FILE. `old`: earlier spellings (e.g. an --out that named a file) kept as hidden aliases."""
    p = _parent()
    p.add_argument("--json", default=None, metavar="FILE", help=help)
    for spelling in old:
        p.add_argument(spelling, dest="json", metavar="FILE", help=argparse.SUPPRESS)
    return p


def device(default="auto", help="torch device (auto: CUDA when torch sees one, else CPU)"):
    p = _parent()
    p.add_argument("--device", default=default, type=device_type, metavar=DEVICE_METAVAR, help=help)
    return p


def profile(choices, default="default", help="the sizes to run", extended=False):
    """--profile NAME, with --quick (and, where `extended`, --extended) as its short forms; at most one of them."""
    p = _parent()
    one = p.add_mutually_exclusive_group()
    one.add_argument("--profile", choices=tuple(choices), default=default, help=help)
    one.add_argument("--quick", dest="profile", action="store_const", const="quick", help="short for --profile quick")
    if extended:
        one.add_argument("--extended", dest="profile", action="store_const", const="extended",
                         help="short for --profile extended")
    return p


def campaign():
    """--scheduler ADDRESS and --workers N, as every Dask campaign takes them."""
    p = _parent()
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="a running Dask scheduler (tcp://host:8786); default: a local cluster started here")
    p.add_argument("--workers", type=workers_type, default=None, metavar="N",
                   help="workers of the local cluster (default: one per CPU; 0: run the tasks in this process, "
                        "without Dask; ignored with --scheduler)")
    return p


def seed(help="seed for every random choice"):
    p = _parent()
    p.add_argument("--seed", type=_non_negative, default=0, metavar="N", help=help)
    return p
