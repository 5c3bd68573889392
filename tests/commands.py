"""Test helper: the argparse parser behind a command line of the project, without running the command.

`parser_of(words)` takes `agv SUB ...`, `python -m MODULE ...` or `python -m derive.all ...` and returns
(parser, remaining argv): the module's `main` is called with argparse's `parse_args` intercepted, so nothing past
the parser is run.
"""
import argparse
import importlib
import shlex

from derive import cli

MODULES = {module for module, _ in cli.COMMANDS.values()}
OTHER_MODULES = {"pip", "pytest", "venv"}  # `python -m` lines of the docs that are not the project's


class Captured(Exception):
    def __init__(self, parser):
        self.parser = parser


def split(line):
    """The words of one shell line, without a `$ ` prompt, leading VAR=value assignments or a trailing comment."""
    words = shlex.split(line.strip().removeprefix("$ "), comments=True)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)
    return words


def target(words):
    """(module, prog, argv) for a command line of the project, or None for any other command."""
    if len(words) >= 2 and words[0] == "agv":
        if words[1] not in cli.COMMANDS:
            raise AssertionError(f"`agv {words[1]}`: no such subcommand")
        return cli.COMMANDS[words[1]][0], f"agv {words[1]}", words[2:]
    if len(words) >= 3 and words[0] in ("python", "python3") and words[1] == "-m":
        if words[2] in OTHER_MODULES:
            return None
        if words[2] not in MODULES:
            raise AssertionError(f"`python -m {words[2]}`: not a command of the project")
        return words[2], f"python -m {words[2]}", words[3:]
    return None


def parser_of(module, prog):
    """The parser `module.main` builds, captured at its parse_args call."""
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        raise Captured(self)

    argparse.ArgumentParser.parse_args = capture
    try:
        importlib.import_module(module).main([], prog=prog)
    except Captured as c:
        return c.parser
    finally:
        argparse.ArgumentParser.parse_args = original
    raise AssertionError(f"{module}.main returned without parsing its arguments")


def options(parser):
    """{option string: action} of every visible option."""
    return {s: a for a in parser._actions for s in a.option_strings if a.help is not argparse.SUPPRESS}
