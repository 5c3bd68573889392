"""The device validation command runs end to end on the CPU (smaller sizes), as CI runs it."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_end_to_end_on_cpu(tmp_path):
    p = subprocess.run([sys.executable, "-m", "numeric.gpu_check", "--device", "cpu", "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    steps = report["steps"]
    assert set(steps) == {"codegen-and-numeric", "trainer-agreement-with-cpu", "resume-equality", "quick-experiments",
                          "cache-reloaded-on-cpu", "ms-per-step-by-blocks", "paper-experiment"}
    assert all(s["ok"] for s in steps.values())
    assert steps["trainer-agreement-with-cpu"]["float64"]["max_abs_loss_difference"] <= 1e-10
    assert set(steps["ms-per-step-by-blocks"]["ms_per_step_by_blocks"]) == {"1", "2", "4", "8", "16", "32"}
    assert steps["paper-experiment"]["max_loss_error_vs_authors"] <= 1e-5
    assert steps["cache-reloaded-on-cpu"]["training_runs"] > 0 and not steps["cache-reloaded-on-cpu"]["bad"]
    assert report["precision"]["cuda_matmul_allow_tf32"] is False and report["environment"]["device_type"] == "cpu"
    assert (tmp_path / "pipeline" / "results.json").exists() and "all checks passed" in p.stdout


def test_gpu_check_refuses_a_missing_device(tmp_path):
    import torch

    if torch.cuda.is_available():
        return
    p = subprocess.run([sys.executable, "-m", "numeric.gpu_check", "--device", "cuda", "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "CUDA is not available" in p.stderr
