"""The public API: gradients of single-head attention from the generated closed forms."""
from __future__ import annotations

from typing import NamedTuple

import torch

from numeric import validate
from numeric.generated import attention as gen

HALF = (torch.float16, torch.bfloat16)


class AttentionGrads(NamedTuple):
    """alpha (..., n, n); B = u v^T (C7); A = dS, the advantage (C1); dQ (C3), dK (C4), dV (C2)."""

    alpha: torch.Tensor
    B: torch.Tensor
    A: torch.Tensor
    dS: torch.Tensor
    dQ: torch.Tensor
    dK: torch.Tensor
    dV: torch.Tensor


class LossGrads(NamedTuple):
    """The full loss L = sum over batch of mean-over-positions cross-entropy, and its gradients."""

    loss: torch.Tensor
    alpha: torch.Tensor
    o: torch.Tensor
    p: torch.Tensor
    u: torch.Tensor  # dL/do (C5)
    A: torch.Tensor  # dL/ds (C1)
    dQ: torch.Tensor
    dK: torch.Tensor
    dV: torch.Tensor
    dW_Q: torch.Tensor  # C8
    dW_K: torch.Tensor
    dW_V: torch.Tensor
    dW_O: torch.Tensor


def _check_qkvu(q, k, v, u, mask, scale):
    for name, x in (("q", q), ("k", k), ("v", v), ("u", u)):
        validate.tensor(name, x)
    validate.same_dtype_device([("q", q), ("k", k), ("v", v), ("u", u)])
    batch, n_q, d_k = tuple(q.shape[:-2]), q.shape[-2], q.shape[-1]
    validate.dims("k", k, batch=batch, cols=d_k, cols_name="d_k")
    n_k = k.shape[-2]
    validate.dims("v", v, batch=batch, rows=n_k)
    validate.dims("u", u, batch=batch, rows=n_q, cols=v.shape[-1], cols_name="d_v")
    for name, x in (("q", q), ("k", k), ("v", v), ("u", u)):
        validate.finite(name, x)
    validate.mask(mask, batch, n_q, n_k, q.device)
    return validate.scale(scale, d_k)


def attention_backward(q, k, v, u, *, mask=None, scale=None, validate_inputs=True) -> AttentionGrads:
    """Gradients of L with dL/do = u for o = softmax(scale q k^T, mask) v, on (..., n, d) tensors.

    mask: boolean, broadcastable to (..., n, n), True where attention is allowed (the convention
    of scaled_dot_product_attention). A fully masked row has alpha = 0 and zero gradients.
    scale defaults to 1/sqrt(d_k). validate_inputs=False skips the checks in hot loops.
    float16/bfloat16 inputs are computed in float32 and rounded once to the input dtype.
    """
    c = _check_qkvu(q, k, v, u, mask, scale) if validate_inputs else default_scale(scale, q)
    if q.dtype in HALF:  # compute in float32, round once at the end (as torch's fused kernels do inside)
        out = attention_backward(*(t.float() for t in (q, k, v, u)), mask=mask, scale=c, validate_inputs=False)
        return AttentionGrads(*(t.to(q.dtype) for t in out))
    if mask is None:
        alpha, B, dS, dQ, dK, dV = gen.attention_backward_unmasked(q, k, v, u, c)
    else:
        alpha, B, dS, dQ, dK, dV = gen.attention_backward_masked(q, k, v, u, mask, c)
    return AttentionGrads(alpha, B, dS, dS, dQ, dK, dV)


def attention_forward(q, k, v, *, mask=None, scale=None):
    """alpha and o = alpha v (generated; no validation: used by the module and benchmarks)."""
    c = default_scale(scale, q)
    return gen.attention_forward_unmasked(q, k, v, c) if mask is None else gen.attention_forward_masked(q, k, v, mask, c)


def attention_loss_backward(x, w_q, w_k, w_v, w_o, targets, *, mask=None, scale=None, validate_inputs=True) -> LossGrads:
    """Full single-head model of PAPER.md: x (..., n, d_x), W_Q/W_K (d_x, d_k), W_V (d_x, d_v),
    W_O (d_v, m), integer targets (..., n). Returns the loss and every gradient from generated code."""
    if validate_inputs:
        _check_loss_inputs(x, w_q, w_k, w_v, w_o, targets)
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    c = validate.scale(scale, q.shape[-1]) if validate_inputs else default_scale(scale, q)
    if validate_inputs:
        validate.mask(mask, tuple(x.shape[:-2]), x.shape[-2], x.shape[-2], x.device)
    alpha, o = attention_forward(q, k, v, mask=mask, scale=c)
    y = torch.nn.functional.one_hot(targets, w_o.shape[-1]).to(x.dtype)
    p, u, dW_O, loss = gen.readout_backward(o, w_o, y)
    B, dS, dQ, dK, dV = gen.attention_backward_from_forward(q, k, v, alpha, o, u, c)
    dW_Q, dW_K, dW_V = (sum_batch(t) for t in gen.params_backward(x, dQ, dK, dV))
    return LossGrads(loss.sum(), alpha, o, p, u, dS, dQ, dK, dV, dW_Q, dW_K, dW_V, sum_batch(dW_O))


def default_scale(scale, q):
    """The scale as given, or 1/sqrt(d_k) (unvalidated: the hot-loop path)."""
    return scale or q.shape[-1] ** -0.5


def sum_batch(t):
    """A shared parameter's gradient: the per-sequence closed forms (..., r, c) summed over batch dims."""
    return t.sum(dim=tuple(range(t.dim() - 2))) if t.dim() > 2 else t


def _check_loss_inputs(x, w_q, w_k, w_v, w_o, targets):
    named = [("x", x), ("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)]
    for name, t in named:
        validate.tensor(name, t)
    validate.same_dtype_device(named)
    d_x = x.shape[-1]
    for name, t in named[1:4]:
        if t.dim() != 2 or t.shape[0] != d_x:
            raise ValueError(f"{name} must be ({d_x}, d), got shape {tuple(t.shape)}")
    if w_q.shape != w_k.shape:
        raise ValueError(f"w_k has shape {tuple(w_k.shape)} but w_q has {tuple(w_q.shape)}")
    if w_o.dim() != 2 or w_o.shape[0] != w_v.shape[1]:
        raise ValueError(f"w_o must be ({w_v.shape[1]}, m), got shape {tuple(w_o.shape)}")
    if not torch.is_tensor(targets) or targets.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"targets must be an integer tensor of class indices, got {getattr(targets, 'dtype', type(targets))}")
    if tuple(targets.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"targets has shape {tuple(targets.shape)}, expected {tuple(x.shape[:-1])}")
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= w_o.shape[-1]):
        raise ValueError(f"targets must lie in [0, {w_o.shape[-1]}), got range [{int(targets.min())}, {int(targets.max())}]")
    for name, t in named:
        validate.finite(name, t)
