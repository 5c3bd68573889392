"""Input validation for the public API: fail early, naming the argument, its shape and dtype."""
from __future__ import annotations

import math

import torch

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def tensor(name, x, ndim_min=2):
    if not torch.is_tensor(x):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOATS:
        raise TypeError(f"{name} must be a floating tensor, got dtype {x.dtype} (shape {tuple(x.shape)})")
    if x.dim() < ndim_min:
        raise ValueError(f"{name} must have at least {ndim_min} dimensions (..., n, d), got shape {tuple(x.shape)}")
    return x


def finite(name, x):
    if not bool(torch.isfinite(x).all()):
        bad = "NaN" if bool(torch.isnan(x).any()) else "Inf"
        raise ValueError(f"{name} contains {bad} (shape {tuple(x.shape)})")


def same_dtype_device(named):
    (n0, x0), *rest = named
    for name, x in rest:
        if x.dtype != x0.dtype:
            raise TypeError(f"{name} has dtype {x.dtype} but {n0} has {x0.dtype}: mixed dtypes are not supported")
        if x.device != x0.device:
            raise ValueError(f"{name} is on {x.device} but {n0} is on {x0.device}")


def dims(name, x, *, batch, rows=None, cols=None, rows_name="n", cols_name="d"):
    shape = tuple(x.shape)
    if shape[:-2] != batch:
        raise ValueError(f"{name} has batch dims {shape[:-2]}, expected {batch} (shape {shape})")
    if rows is not None and shape[-2] != rows:
        raise ValueError(f"{name} has {rows_name}={shape[-2]} rows, expected {rows} (shape {shape})")
    if cols is not None and shape[-1] != cols:
        raise ValueError(f"{name} has {cols_name}={shape[-1]} columns, expected {cols} (shape {shape})")


def mask(m, batch, n_q, n_k, device):
    if m is None:
        return None
    if not torch.is_tensor(m) or m.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True = may attend), got {getattr(m, 'dtype', type(m).__name__)}")
    if m.device != device:
        raise ValueError(f"mask is on {m.device} but the inputs are on {device}")
    try:
        torch.broadcast_shapes(tuple(m.shape), batch + (n_q, n_k))
    except RuntimeError:
        raise ValueError(f"mask of shape {tuple(m.shape)} does not broadcast to {batch + (n_q, n_k)}") from None
    return m


def scale(s, d_k):
    if s is None:
        return 1.0 / math.sqrt(d_k)
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
        raise ValueError(f"scale must be a positive finite number, got {s!r}")
    return float(s)
