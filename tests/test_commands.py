"""One console command (`agv`), one set of conventions: every subcommand parses its options the same way and
lists each with its default."""
import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import commands
import pytest
from commands import parser_of

from derive import cli, options

ROOT = Path(__file__).resolve().parents[1]
NAMES = sorted(cli.COMMANDS)


def run(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=env)


def test_the_console_command_is_declared():
    text = (ROOT / "pyproject.toml").read_text()
    section = re.search(r"^\[project\.scripts\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    assert section and section.group(1).strip() == 'agv = "derive.cli:main"'
    for module, _ in cli.COMMANDS.values():  # each subcommand's module takes the prog it is called under
        assert "prog" in __import__(module, fromlist=["main"]).main.__code__.co_varnames


def test_help_lists_every_subcommand_without_importing_torch_or_sympy():
    code = ("import sys; from derive import cli; cli.main(['--help']); "
            "print('LOADED', sorted(m for m in ('torch', 'sympy', 'numpy') if m in sys.modules))")
    p = run("-c", code)
    assert p.returncode == 0, p.stderr
    assert "LOADED []" in p.stdout
    for name, (module, _) in cli.COMMANDS.items():
        assert re.search(rf"^  {re.escape(name)} +\S", p.stdout, re.M), name
        assert f"python -m {module}" in p.stdout


def test_bad_subcommands_are_usage_errors(capsys):
    assert cli.main([]) == 2
    assert cli.main(["grd"]) == 2
    err = capsys.readouterr().err
    assert "unknown subcommand 'grd'" in err and "grid" in err


@pytest.mark.parametrize("name", NAMES)
def test_every_subcommand_help_lists_each_option_with_its_default(name, capsys):
    module = cli.COMMANDS[name][0]
    with pytest.raises(SystemExit) as exit_:
        cli.main([name, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: agv {name} ")
    parser = parser_of(module, f"agv {name}")
    for action in parser._actions:
        if action.help is argparse.SUPPRESS or not action.option_strings or action.nargs == 0:
            continue  # flags are off unless given
        # the option's help entry: from its line to the next option's
        entry = re.search(rf"^  {re.escape(', '.join(action.option_strings))}\b.*?(?=^  -|\Z)", text, re.M | re.S)
        assert entry, (name, action.option_strings)
        assert action.help and "default" in entry.group(0), (name, action.option_strings, entry.group(0))


@pytest.mark.parametrize("name", NAMES)
def test_shared_options_mean_the_same_everywhere(name):
    parser = parser_of(cli.COMMANDS[name][0], f"agv {name}")
    acts = commands.options(parser)  # visible ones: an older spelling kept as a hidden alias may differ
    if "--out" in acts:
        assert acts["--out"].metavar == "DIR", "--out names a directory"
    if "--json" in acts:
        assert acts["--json"].metavar == "FILE", "--json names one file"
    if "--device" in acts:
        assert acts["--device"].type is options.device_type
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(["--device", "tpu"])
        assert exit_.value.code == 2
        assert parser.parse_args(["--device", "cuda:1"]).device == "cuda:1"
    if "--workers" in acts:
        assert acts["--workers"].type is options.workers_type and "--scheduler" in acts
    if "--profile" in acts:
        assert "--quick" in acts and parser.parse_args(["--quick"]).profile == "quick"
        assert parser.parse_args([]).profile == "default"


def test_a_profile_is_given_once():
    grid = parser_of("numeric.experiments.mechanism_grid", "agv grid")
    for argv in (["--quick", "--extended"], ["--profile", "quick", "--extended"]):
        with pytest.raises(SystemExit) as exit_:
            grid.parse_args(argv)
        assert exit_.value.code == 2


def test_older_spellings_still_parse():
    fuzz = parser_of("numeric.fuzz", "agv fuzz")
    assert fuzz.parse_args(["--out", "f.json"]).json == "f.json"  # --out named a file here once
    assert fuzz.parse_args(["--jobs", "0"]).workers == 0
    grid = parser_of("numeric.experiments.mechanism_grid", "agv grid")
    assert grid.parse_args(["--extended"]).profile == "extended"
    main = parser_of("derive.all", "agv run")
    assert main.parse_args(["--typicality"]).extended is True
    render = parser_of("reports.render", "agv render")
    args = render.parse_args(["somewhere"])
    assert args.out_dir == "somewhere"


def test_faults_help_prints_help_and_runs_nothing():
    p = run("-m", "derive.engine_faults", "--help", timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage:") and "planted faults killed" not in p.stdout


def test_agv_run_is_the_main_job(tmp_path, capsys):
    assert cli.main(["run", "--only", "codegen", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "results.json").is_file()
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--only", "nothing", "--out", str(tmp_path)])
    assert exit_.value.code == 2 and "unknown stage" in capsys.readouterr().err
