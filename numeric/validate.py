"""Input validation for the public API: fail early, naming the argument, its shape and what is allowed.

Masks and scales follow torch.nn.functional.scaled_dot_product_attention (SDPA): where SDPA returns
a value the API returns the same value, where SDPA raises the API raises a ValueError/TypeError that
says what is allowed.
"""
from __future__ import annotations

import math
import numbers

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


def dims(name, x, *, rows=None, cols=None, rows_name="n", cols_name="d"):
    """The last two sizes of x (batch dims are checked by broadcast_batch)."""
    shape = tuple(x.shape)
    if rows is not None and shape[-2] != rows:
        raise ValueError(f"{name} has {rows_name}={shape[-2]} rows, expected {rows} (shape {shape})")
    if cols is not None and shape[-1] != cols:
        raise ValueError(f"{name} has {cols_name}={shape[-1]} columns, expected {cols} (shape {shape})")


def broadcast_batch(named):
    """The broadcast of the batch dims (all but the last two) of the named tensors, as SDPA and
    torch.matmul broadcast them; a ValueError names the first tensor that does not broadcast."""
    batch, seen = (), []
    for name, x in named:
        b = tuple(x.shape[:-2])
        try:
            batch = _broadcast(batch, b)
        except ValueError:
            raise ValueError(f"{name} has batch dims {b} (shape {tuple(x.shape)}), which do not broadcast with "
                             f"the batch dims {batch} of {', '.join(seen)}: batch dims must be equal or 1 "
                             f"(right-aligned), as in scaled_dot_product_attention") from None
        seen.append(name)
    return batch


def _broadcast(a, b):
    """torch.broadcast_shapes of two shapes (right-aligned, equal or 1), in plain Python: it runs on every call."""
    if a == b:
        return a
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = tuple(y if x == 1 else x for x, y in zip(a, b))
    if any(x != y and x != 1 and y != 1 for x, y in zip(a, b)):
        raise ValueError(f"shapes {a} and {b} do not broadcast")
    return out


def mask_dtype(m, dtype):
    """bool (True = may attend) or floating (additive), as SDPA: a float mask is float32 or `dtype`."""
    if m.dtype == torch.bool:
        return
    if m.dtype.is_floating_point:
        if m.dtype in (torch.float32, dtype):
            return
        raise TypeError(f"a float mask must be float32 or the inputs' dtype {dtype} (as in "
                        f"scaled_dot_product_attention), got {m.dtype} (shape {tuple(m.shape)}); "
                        f"convert it with mask.to({dtype})")
    raise TypeError(f"mask must be a bool tensor (True = may attend) or a floating tensor (added to the "
                    f"scores: 0 = attend, -inf = blocked), got dtype {m.dtype} (shape {tuple(m.shape)}); "
                    f"integer masks are refused as by scaled_dot_product_attention: use mask.bool() for a 0/1 mask")


def mask(m, score_shape, dtype, device, *, values=True):
    """A mask broadcastable to the score shape (..., L, S) without enlarging it (as SDPA requires);
    values=True also refuses NaN and +inf in a float mask (finite values and -inf are allowed)."""
    if m is None:
        return None
    if not torch.is_tensor(m):
        raise TypeError(f"mask must be a torch.Tensor (bool: True = may attend; float: added to the scores), "
                        f"got {type(m).__name__}")
    mask_dtype(m, dtype)
    if m.device != device:
        raise ValueError(f"mask is on {m.device} but the inputs are on {device}")
    score_shape = tuple(score_shape)
    try:
        fits = _broadcast(tuple(m.shape), score_shape) == score_shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"mask of shape {tuple(m.shape)} does not broadcast to the score shape (..., L, S) = "
                         f"{score_shape}: each mask dim must equal the score dim or be 1, with no extra leading dims")
    if values:
        mask_values(m)
    return m


def mask_values(m):
    """A float mask holds finite values or -inf (blocked): NaN and +inf are refused (this reads the data)."""
    if m is None or m.dtype == torch.bool:
        return
    for bad, test in (("NaN", torch.isnan), ("+inf", torch.isposinf)):
        if bool(test(m).any()):
            raise ValueError(f"mask contains {bad} (shape {tuple(m.shape)}): a float mask is added to the "
                             f"scores and must hold finite values or -inf (blocked)")


def default_scale(d_k):
    """1/sqrt(d_k); with d_k = 0 every score is an empty sum, 0, whatever the scale: 1.0 (as SDPA, uniform)."""
    return 1.0 / math.sqrt(d_k) if d_k > 0 else 1.0


def scale(s, d_k):
    """None -> 1/sqrt(d_k); any finite real (0 and negative included) as a Python int/float, a numpy
    scalar or a 0-d real tensor -> float (a constant: no gradient flows to a tensor scale, as in SDPA)."""
    if s is None:
        return default_scale(d_k)
    if torch.is_tensor(s):
        if s.dim() != 0 or s.dtype == torch.bool or s.is_complex():
            raise TypeError(f"scale must be a real number or a 0-d real tensor, got a {s.dtype} tensor of "
                            f"shape {tuple(s.shape)}")
        value = float(s.detach())
    elif isinstance(s, numbers.Real) and not isinstance(s, bool):
        value = float(s)
    else:
        raise TypeError(f"scale must be a real number (Python or numpy scalar, or a 0-d tensor) or None "
                        f"(1/sqrt(d_k)), got {s!r} of type {type(s).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"scale must be finite, got {value!r}")
    return value



def attention_inputs(query, key, value, attn_mask=None, scale=None, *, enable_gqa=False, is_causal=False,
                     names=("query", "key", "value"), sizes=("E", "S")):
    """SDPA's checks, run by every entry point, from metadata alone (no value is read, so it runs under
    torch.compile, torch.func and on the meta device): ranks >= 2, one floating dtype, one device, E of q
    and k equal, S of k and v equal, batch dims that broadcast (heads that divide under enable_gqa), a
    bool/float mask that broadcasts to the scores, not both a mask and is_causal. Returns the scale:
    a float, or a 0-d tensor kept as a tensor (detached: a constant, as in SDPA). names and sizes: what
    errors call the tensors and the sizes E and S."""
    named = list(zip(names, (query, key, value)))
    for name, x in named:
        tensor(name, x)
    same_dtype_device(named)
    dims(names[1], key, cols=query.shape[-1], cols_name=sizes[0])
    dims(names[2], value, rows=key.shape[-2], rows_name=sizes[1])
    if enable_gqa and query.dim() >= 3:
        heads(query, key, value)
        named = [(name, _Shape(x.shape[:-3] + (query.shape[-3],) + x.shape[-2:])) for name, x in named]
    batch_qk = broadcast_batch(named[:2])
    broadcast_batch(named)
    if is_causal and attn_mask is not None:
        raise ValueError("attn_mask and is_causal=True were both given: pass one (is_causal is the mask "
                         "j <= i, aligned to the top left when L != S), as in scaled_dot_product_attention")
    mask(attn_mask, batch_qk + (query.shape[-2], key.shape[-2]), query.dtype, query.device, values=False)
    c = scale_value(scale, query.shape[-1])
    if torch.is_tensor(c) and c.device != query.device and c.device.type != "cpu":
        raise ValueError(f"scale is a tensor on {c.device} but the inputs are on {query.device}")
    return c


def heads(query, key, value):
    """enable_gqa: the head dim (-3) of key and of value divides the query's, as in SDPA."""
    hq = query.shape[-3]
    for name, x in (("key", key), ("value", value)):
        if x.dim() < 3 or x.shape[-3] == 0 or hq % x.shape[-3]:
            h = x.shape[-3] if x.dim() >= 3 else None
            raise ValueError(f"enable_gqa=True: {name} has {h} heads (dim -3, shape {tuple(x.shape)}), which must "
                             f"divide the query's {hq} heads (shape {tuple(query.shape)})")


class _Shape:
    """A shape standing in for a tensor in broadcast_batch (key and value as repeated under GQA)."""

    def __init__(self, shape):
        self.shape = tuple(shape)


def scale_value(s, d_k):
    """scale(), except that a 0-d real tensor is kept as a tensor, detached and unread (reading it would
    sync a device or break tracing); a real dtype is required."""
    if not torch.is_tensor(s):
        return scale(s, d_k)
    if s.dim() != 0 or s.dtype == torch.bool or s.is_complex():
        raise TypeError(f"scale must be a real number or a 0-d real tensor, got a {s.dtype} tensor of "
                        f"shape {tuple(s.shape)}")
    return s.detach() if s.dtype.is_floating_point else s.detach().double()
