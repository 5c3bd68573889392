"""Device choice, precision pinning and what the environment records (exercised on CPU; CUDA faked)."""
import pytest
import torch

from numeric import device as devices


def test_auto_says_which_device_it_chose_and_why(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve("auto") == ("cpu", "auto: torch sees no CUDA device")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        devices.resolve("cuda")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        devices.resolve("cuda:1")  # a device string with an index is still CUDA
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Fake GPU")
    assert devices.resolve("auto") == ("cuda", "auto: CUDA is available (Fake GPU)")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert devices.resolve("cuda:0") == ("cuda:0", "asked for")
    with pytest.raises(RuntimeError, match="has 1 CUDA device"):
        devices.resolve("cuda:1")
    assert devices.resolve("cpu") == ("cpu", "asked for")


def test_precision_is_pinned_to_ieee_fp32_and_recorded():
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    try:
        flags = devices.pin_precision()
        assert flags["cuda_matmul_allow_tf32"] is False and flags["cudnn_allow_tf32"] is False
        assert flags["float32_matmul_precision"] == "highest"
        assert not torch.backends.cuda.matmul.allow_tf32 and torch.get_float32_matmul_precision() == "highest"
    finally:
        devices.pin_precision()


def test_environment_records_the_torch_build():
    info = devices.describe("cpu")
    assert info["device_type"] == "cpu" and "torch_cuda" in info and "cudnn" in info and "gpu" not in info


def test_cli_records_device_reason_and_precision(tmp_path):
    from derive import all as cli

    assert cli.main(["--quick", "--only", "codegen", "--device", "cpu", "--out", str(tmp_path)]) == 0
    import json
    env = json.loads((tmp_path / "results.json").read_text())["environment"]
    assert env["device"] == "cpu" and env["device_reason"] == "no torch stage runs"
    torch_env = cli.torch_environment("cpu")  # what a run with a torch stage adds
    assert torch_env["precision"]["cuda_matmul_allow_tf32"] is False and torch_env["device_type"] == "cpu"


def test_cli_device_accepts_an_indexed_cuda_device_and_rejects_others(capsys):
    from derive import all as cli

    assert cli.parse_args(["--device", "cuda:1"]).device == "cuda:1"
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(["--device", "gpu"])
    assert exc.value.code == 2 and "expected auto, cpu, cuda or cuda:N" in capsys.readouterr().err
