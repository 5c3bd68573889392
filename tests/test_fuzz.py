"""The claim fuzzer: no path gives a false verdict on a quick run, and the oracle it trusts is right."""
import json
import time

import pytest

from derive import fuzz
from derive.fuzz import Claim, dgrad, mul, q
from numeric import fuzz as runner
from numeric import oracle

C1_FREE = (("i", "n"), ("j", "n"))
C1 = Claim(-1, "scores", C1_FREE, dgrad("s", "i", "j"), q("dS", "i", "j"), "C1 closed form")
C1_DROPPED_BASELINE = Claim(-2, "scores", C1_FREE, dgrad("s", "i", "j"), mul(q("alpha", "i", "j"), q("b", "i", "j")), "M1")


@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
def test_oracle_accepts_c1_and_rejects_its_mutant(masked):
    true, false = oracle.label(C1, masked, 0), oracle.label(C1_DROPPED_BASELINE, masked, 0)
    assert true["true"] and true["gap"] < 1e-13, true
    assert not false["true"] and false["gap"] > 1e3 * oracle.MARGIN, false


def test_generation_is_deterministic_and_well_formed():
    first = [c.description + c.text() for c in fuzz.generate(150, 7)]
    assert first == [c.description + c.text() for c in fuzz.generate(150, 7)]
    assert first != [c.description + c.text() for c in fuzz.generate(150, 8)]
    assert all(not fuzz.problems(c) for c in fuzz.generate(150, 7))


def test_quick_run_has_no_false_verdict():
    t0 = time.perf_counter()
    summary = runner.run(n=12, seed=0, paths=runner.PATHS, jobs=1, log=lambda line: None, budget_s=5.0)
    seconds = time.perf_counter() - t0
    assert summary["false_verdicts"] == [], json.dumps(summary["false_verdicts"], indent=1)
    assert summary["cases_true"] > 0 and summary["cases_false"] > 0, summary
    assert summary["ill_formed"] == 0
    assert summary["largest_true_gap"] < 1e-12 and summary["closest_false_gap"] > 1e3 * oracle.MARGIN, summary
    assert set(summary["paths"]) == set(runner.PATHS)
    assert sum(f["claims"] for f in summary["families"].values()) == summary["claims"]
    assert seconds <= 60, f"quick fuzz run took {seconds:.1f} s"


def test_cli_writes_json_and_exit_status(tmp_path):
    out = tmp_path / "fuzz.json"
    assert runner.main(["--n", "2", "--jobs", "1", "--paths", "general", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["claims"] == 2 and list(written["paths"]) == ["general"]


def test_a_path_that_proves_everything_is_caught(monkeypatch, tmp_path):
    """Positive control: the fuzzer is not vacuous; a path saying "proved" to everything gives false verdicts."""

    class Proved:
        status, seconds, measured = "proved", 0.0, "fake path"

    monkeypatch.setattr("derive.prove.run_path", lambda *args, **kwargs: Proved())
    out = tmp_path / "fuzz.json"
    assert runner.main(["--n", "6", "--jobs", "1", "--paths", "general", "--out", str(out)]) == 1
    verdicts = json.loads(out.read_text())["false_verdicts"]
    assert verdicts and all(v["verdict"] == "proved" and v["truth"] == "false" for v in verdicts)


def test_fuzzer_command_line_runs_as_a_module(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "fuzz.json"
    p = subprocess.run([sys.executable, "-m", "numeric.fuzz", "--n", "2", "--jobs", "1", "--paths", "general",
                        "--out", str(out)], cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(out.read_text())["claims"] == 2 and "general" in p.stdout
