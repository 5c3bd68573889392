"""`python -m derive.all`: exit codes, outputs, and an injected wrong claim."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

WRONG_CLAIM = '''
from derive.claims import Claim, Identity, register
register(Claim("X9", "wrong-advantage", r"\\partial L/\\partial s = \\alpha b", "test: deliberately wrong",
    (Identity("main", ("n", "n"), "scores", lambda m, i, j: m.derived_grad("s", i, j),
              lambda m, i, j: m.alpha(i, j) * m.b(i, j), "wrong"),)))
'''

SHAPE_CLAIM = '''
from derive.claims import Claim, Identity, register
register(Claim("X8", "mismatched", r"x", "test: wrong index range",
    (Identity("main", ("n", "dk"), "qk", lambda m, i, a: m.derived_grad("q", i, a),
              lambda m, i, a: m.c * m.sum("n", lambda j: m.dS(i, j) * m.v(j, a)), "bad"),)))
'''


def run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "derive.all", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_quick_derive_run_passes_and_writes_results(tmp_path):
    p = run("--only", "derive", "--quick", "--claim", "C1,C6", "--out", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in data["claims"]}
    assert verdicts["C1"] == verdicts["C6"] == "proved"
    assert verdicts["C2"] == "not-run"
    assert "C1     proved" in p.stdout and "checks:" in p.stdout


def test_report_stage_renders_from_results(tmp_path):
    p = run("--only", "derive,report", "--quick", "--claim", "C6", "--out", str(tmp_path))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    assert (tmp_path / "report.html").exists() and (tmp_path / "report.tex").exists()
    data = json.loads((tmp_path / "results.json").read_text())
    report = {c["id"]: c["status"] for c in data["checks"] if c["stage"] == "report"}
    assert report["report/html"] == "pass" and report["report/tex"] == "pass"
    assert report["report/pdf"] in ("pass", "skipped")
    assert data["stages"]["report"]["status"] in ("pass", "skipped")


@pytest.mark.parametrize("args", [["--only", "bogus"], ["--seed", "-1"], ["--device", "tpu"], ["--claim", "C99"],
                                  ["--claims", "/nonexistent.py"], ["--only", ""]])
def test_bad_usage_exits_2(args, tmp_path):
    p = run(*args, "--out", str(tmp_path))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "error" in p.stderr


def test_injected_wrong_claim_fails_and_is_named(tmp_path):
    claim_file = tmp_path / "wrong.py"
    claim_file.write_text(WRONG_CLAIM)
    p = run("--only", "derive", "--quick", "--claims", str(claim_file), "--claim", "X9", "--out", str(tmp_path))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAILED derive/X9/main/general" in p.stdout
    data = json.loads((tmp_path / "results.json").read_text())
    x9 = next(c for c in data["claims"] if c["id"] == "X9")
    assert x9["verdict"] == "disproved" and x9["witnesses"], x9
    assert set(x9["paths"].values()) == {"disproved"}
    w = x9["witnesses"][0]
    assert {"sizes", "indices", "point", "lhs", "rhs"} <= set(w) and w["lhs"] != w["rhs"]
    assert "X9     disproved" in p.stdout and "C1 " not in p.stdout


def test_mismatched_index_is_reported_by_claim_and_index(tmp_path):
    claim_file = tmp_path / "shape.py"
    claim_file.write_text(SHAPE_CLAIM)
    p = run("--only", "derive", "--quick", "--claims", str(claim_file), "--claim", "X8", "--out", str(tmp_path))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    assert f"{claim_file}:5: " in p.stderr and "ranges over dk but position 2 of v ranges over dv" in p.stderr


def test_cuda_requested_but_absent_is_bad_usage(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    p = run("--only", "numeric", "--device", "cuda", "--out", str(tmp_path))
    assert p.returncode == 2 and "CUDA is not available" in p.stderr


def test_codegen_and_numeric_stages(tmp_path):
    p = run("--only", "codegen,numeric", "--quick", "--out", str(tmp_path))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    numeric = [c for c in data["checks"] if c["stage"] == "numeric" and c["kind"] == "numeric"]
    # every mechanism has generated kernels, those whose weights range over their own options (a gate's inputs,
    # experts) too: no numeric/mechanisms/* check is skipped, and each mechanism's agreement with autograd passed
    mechanism_checks = {c["id"]: c["status"] for c in data["checks"] if c["id"].startswith("numeric/mechanisms/")}
    assert not [cid for cid, status in mechanism_checks.items() if status == "skipped"]
    for m in ("softmax", "sigmoid", "linear", "ssd", "gate", "glr", "moe"):
        assert mechanism_checks[f"numeric/mechanisms/{m}/float64/unmasked"] == "pass"
    assert len(numeric) >= 20 and all(c["status"] == "pass" for c in numeric)
    assert all(row["numeric"] in ("rejected", "n/a") for row in data["derive"]["kill_matrix"].values())
    assert any(b["reference"] == "autograd" for b in data["benchmarks"])
    assert not any(b["name"].startswith("numeric/watch-overhead/long/") for b in data["benchmarks"])  # default only
    for setup in ("demo",):
        watched = next(b for b in data["benchmarks"] if b["name"] == f"numeric/watch-overhead/{setup}/every=10")
        assert watched["ratio"] > 0 and watched["ours_s"] > 0 and watched["peak_rss_increase_mib"] >= 0
    verdicts = {c["id"]: c["verdict"] for c in data["claims"]}
    assert verdicts["C1"] == "confirmed"
    fz = data["derive"]["fuzz"]
    assert fz["claims"] >= 6 and fz["false_verdicts"] == [] and set(fz["paths"]) == {"general", "fixed", "rational"}
    assert any(c["id"] == "numeric/claim-fuzzer" and c["status"] == "pass" for c in data["checks"])


def test_experiments_stage_quick_and_cached(tmp_path):
    p = run("--only", "experiments", "--quick", "--device", "cpu", "--out", str(tmp_path), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in data["claims"]}
    assert all(verdicts[f"E{i}"] != "not-run" for i in range(1, 8))
    assert verdicts["W1"] in ("reproduced", "partly-reproduced", "not-reproduced")  # ours, in the summary too
    assert f"W1     {verdicts['W1']}" in p.stdout and "deep_watch" in data["experiments"]
    sm = data["experiments"]["sticky_markov"]
    assert {"h_min", "speedup", "speedup_ci95", "steps_to_threshold", "arms", "paired_t", "p_value"} <= set(sm)
    assert {"sgd", "em_like", "em_mstep"} <= set(sm["arms"])
    assert {"final_loss", "final_entropy", "accuracy", "heldout_loss"} <= set(sm["arms"]["sgd"])
    assert sm["paper_seeds"]["seeds"] == [42, 2024] and len(sm["seeds"]) == 4  # the authors' seeds beside all
    assert len(sm["paper_seeds"]["steps_to_threshold"]) == 2 and sm["paper_seeds"]["speedup"] > 0
    assert set(sm["frame_precision"]) == {"sgd", "em_like", "em_mstep"}
    assert any(c["id"] == "experiments/sticky/batched-equals-sequential" and c["status"] == "pass" for c in data["checks"])
    again = run("--only", "experiments", "--quick", "--device", "cpu", "--out", str(tmp_path), timeout=600)
    assert again.returncode == 0 and "cached   sticky-fresh-0" in again.stdout and "cached   sticky-fresh-1" in again.stdout
    assert "cached   deep-watch" in again.stdout
