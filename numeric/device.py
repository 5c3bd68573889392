"""The torch device a run uses, the precision it is pinned to, and what the environment records of both.

The verification tiers assume IEEE arithmetic: float32 tolerances are stated for true fp32 matmuls,
so TF32 (which rounds matmul inputs to 10 mantissa bits on Ampere and later GPUs) is switched off for
every stage that checks numbers, and the flags are recorded with the run."""
from __future__ import annotations

import torch


def resolve(requested):
    """(device, reason) for --device auto|cpu|cuda|cuda:N. `auto` takes CUDA when torch sees a device."""
    kind = torch.device(requested).type if requested != "auto" else "auto"
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"--device {requested} was asked for but CUDA is not available on this machine")
        index = torch.device(requested).index
        if index is not None and index >= torch.cuda.device_count():
            raise RuntimeError(f"--device {requested}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return requested, "asked for"
    if kind == "auto":
        if torch.cuda.is_available():
            return "cuda", f"auto: CUDA is available ({torch.cuda.get_device_name(0)})"
        return "cpu", "auto: torch sees no CUDA device"
    return requested, "asked for"


def synchronize(device):
    """Wait for the device's queued work (CUDA); nothing to wait for elsewhere. For honest wall-clock timing."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def pin_precision():
    """TF32 off for matmuls and cuDNN, float32 matmul precision 'highest'; returns the recorded flags."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return precision_flags()


def precision_flags():
    return {"cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}


def describe(device):
    """What results.json records of the device: torch's build, CUDA and cuDNN versions, the GPU's name."""
    out = {"device_type": torch.device(device).type, "torch_cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
    if torch.device(device).type == "cuda":
        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        out.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   compute_capability=f"{props.major}.{props.minor}")
    return out
