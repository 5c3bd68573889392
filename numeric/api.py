"""The public API: gradients of single-head attention from the generated closed forms."""
from __future__ import annotations

from typing import NamedTuple

import torch

from numeric import validate
from numeric.generated import attention as gen

HALF = (torch.float16, torch.bfloat16)
NEG_INF = float("-inf")
QKV = ("q", "k", "v")


class AttentionGrads(NamedTuple):
    """alpha (..., L, S); B = u v^T (C7); A = dS, the advantage (C1); dQ (C3), dK (C4), dV (C2).

    alpha has the score shape (q's and k's batch dims broadcast), B and dS the broadcast batch of
    q, k, v; dQ, dK, dV have the shapes of q, k, v."""

    alpha: torch.Tensor
    B: torch.Tensor
    A: torch.Tensor
    dS: torch.Tensor
    dQ: torch.Tensor
    dK: torch.Tensor
    dV: torch.Tensor


class AttentionRouting(NamedTuple):
    """attention_backward's alpha, B, A = dS and dV, without dQ and dK (two n x n contractions fewer)."""

    alpha: torch.Tensor
    B: torch.Tensor
    A: torch.Tensor
    dS: torch.Tensor
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


def _check_qkvu(q, k, v, u, mask, scale, values=True):
    """The checks every entry point runs (metadata: ranks, dtypes, devices, shapes, mask, scale) and, with
    values=True, the ones that read the data (NaN/Inf in the inputs, NaN/+inf in a float mask)."""
    c = validate.attention_inputs(q, k, v, mask, scale, names=QKV, sizes=("d_k", "n"))
    validate.tensor("u", u)
    validate.same_dtype_device([("q", q), ("u", u)])
    batch = validate.broadcast_batch([("q", q), ("k", k), ("v", v)])
    validate.dims("u", u, rows=q.shape[-2], cols=v.shape[-1], cols_name="d_v")
    if tuple(u.shape[:-2]) != batch:
        raise ValueError(f"u has batch dims {tuple(u.shape[:-2])}, expected {batch} (shape {tuple(u.shape)}): "
                         f"u = dL/do has the output's shape, the broadcast batch dims of q, k, v + (L, d_v)")
    if values:
        for name, x in (("q", q), ("k", k), ("v", v), ("u", u)):
            validate.finite(name, x)
        validate.mask_values(mask)
    return c


def attention_backward(q, k, v, u, *, mask=None, scale=None, validate_inputs=True) -> AttentionGrads:
    """Gradients of L = <u, o> for o = softmax(scale q k^T + mask) v, on (..., L, E), (..., S, E),
    (..., S, E_v) tensors with batch dims broadcast as in scaled_dot_product_attention (SDPA).

    mask: bool (True = may attend) or float (added to the scores; -inf = blocked), broadcastable to
    the score shape (..., L, S). A fully masked row has alpha = 0 and zero gradients (as SDPA).
    scale: any finite real (0 and negative included; Python/numpy scalar or 0-d tensor); None =
    1/sqrt(E). u has the output's shape. alpha has the score shape, dQ/dK/dV the shapes of q/k/v
    (summed over broadcast dims, as autograd). With inputs that require grad (and grad mode on) the
    result is differentiable: autograd differentiates the closed forms (second derivatives).
    validate_inputs=False skips the checks that read the data (NaN/Inf) in hot loops; the shape, dtype,
    device, mask and scale checks always run (they read metadata only). float16/bfloat16 inputs are
    computed in float32 and rounded once to the input dtype.
    """
    c = _check_qkvu(q, k, v, u, mask, scale, validate_inputs)
    if q.dtype in HALF:  # compute in float32, round once at the end (as torch's fused kernels do inside)
        m = mask.float() if _is_additive(mask, q.dtype) else mask
        out = attention_backward(*(t.float() for t in (q, k, v, u)), mask=m, scale=c, validate_inputs=False)
        return AttentionGrads(*(t.to(q.dtype) for t in out))
    graph = _needs_graph(q, k, v, u, mask)
    if graph or _is_additive(mask, q.dtype):  # the closed forms from the forward's alpha (zero where blocked)
        alpha = scores_softmax(q, k, mask, c, inplace=not graph)
        B, dS, dQ, dK, dV = gen.attention_backward_from_forward(q, k, v, alpha, alpha @ v, u, c)
    elif mask is None:
        alpha, B, dS, dQ, dK, dV = gen.attention_backward_unmasked(q, k, v, u, c)
    else:
        alpha, B, dS, dQ, dK, dV = gen.attention_backward_masked(q, k, v, u, mask, c)
    return AttentionGrads(alpha, B, dS, dS, sum_to(dQ, q.shape), sum_to(dK, k.shape), sum_to(dV, v.shape))


def attention_routing(q, k, v, u, *, mask=None, scale=None, validate_inputs=True) -> AttentionRouting:
    """alpha, B, A = dS (C1) and dV (C2) exactly as attention_backward returns them, without computing dQ and
    dK (numeric.watch reads only these). Same inputs and conventions as attention_backward."""
    c = _check_qkvu(q, k, v, u, mask, scale, validate_inputs)
    if q.dtype in HALF:
        m = mask.float() if _is_additive(mask, q.dtype) else mask
        out = attention_routing(*(t.float() for t in (q, k, v, u)), mask=m, scale=c, validate_inputs=False)
        return AttentionRouting(*(t.to(q.dtype) for t in out))
    graph = _needs_graph(q, k, v, u, mask)
    if graph or _is_additive(mask, q.dtype):  # from the forward's alpha (zero where blocked), as attention_backward
        alpha = scores_softmax(q, k, mask, c, inplace=not graph)
        B, dS, dV = gen.attention_routing_from_forward(v, alpha, alpha @ v, u)
        return AttentionRouting(alpha, B, dS, dS, sum_to(dV, v.shape))
    if mask is None:
        alpha, B, dS, dV = gen.attention_routing_unmasked(q, k, v, u, c)
    else:
        alpha, B, dS, dV = gen.attention_routing_masked(q, k, v, u, mask, c)
    return AttentionRouting(alpha, B, dS, dS, sum_to(dV, v.shape))


def attention_forward(q, k, v, *, mask=None, scale=None):
    """alpha and o = alpha v, SDPA's checks first (metadata only). The generated kernel when no graph is
    recorded; with inputs that require grad, a differentiable forward (no in-place). float16/bfloat16
    are computed in float32 and rounded once."""
    c = validate.attention_inputs(q, k, v, mask, scale, names=QKV, sizes=("d_k", "n"))
    if q.dtype in HALF:
        alpha, o = forward_kernel(q.float(), k.float(), v.float(), _float_mask(mask), c)
        return alpha.to(q.dtype), o.to(q.dtype)
    return forward_kernel(q, k, v, mask, c)


def forward_kernel(q, k, v, mask, c):
    """alpha and o for validated inputs of one dtype (no rounding): generated kernels, or differentiable ops
    when autograd records the call."""
    graph = _needs_graph(q, k, v, mask)
    if graph or _is_additive(mask, q.dtype):
        alpha = scores_softmax(q, k, mask, c, inplace=not graph)
        return alpha, alpha @ v
    return gen.attention_forward_unmasked(q, k, v, c) if mask is None else gen.attention_forward_masked(q, k, v, mask, c)


def _float_mask(mask):
    """A half-precision additive mask in float32 (the computation's dtype); None and bool masks as they are."""
    return mask.float() if mask is not None and mask.dtype in HALF else mask


def scores_softmax(q, k, mask, c, *, inplace=False):
    """alpha = softmax(c q k^T + mask) over keys, SDPA's semantics: a bool mask blocks False, a float
    mask is added (-inf blocks); a row with every key blocked is 0. inplace=False uses no in-place op,
    so the result is differentiable to any order; inplace=True reuses the score buffer (no graph).
    No value is read on the host except on a plain CPU tensor (see gen.host_readable)."""
    s = q @ (c * k).mT  # the generated kernels' expression for the scores
    if mask is None:
        return torch.softmax(s, -1)
    if mask.dtype == torch.bool:
        s = s.masked_fill_(~mask, NEG_INF) if inplace else s.masked_fill(~mask, NEG_INF)
        dead = ~mask.any(-1, keepdim=True)
    else:
        m = mask.to(s.dtype)
        s = s.add_(m) if inplace else s + m
        dead = torch.isneginf(mask).all(-1, keepdim=True)
    if gen.host_readable(dead) and not bool(dead.any()):
        return torch.softmax(s, -1)
    if inplace:
        return torch.softmax(s.masked_fill_(dead, 0.0), -1).masked_fill_(dead, 0.0)
    return torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)


def attention_loss_backward(x, w_q, w_k, w_v, w_o, targets, *, mask=None, scale=None, validate_inputs=True) -> LossGrads:
    """Full single-head model: x (..., n, d_x), W_Q/W_K (d_x, d_k), W_V (d_x, d_v), W_O (d_v, m),
    integer targets (..., n). Returns the loss and every gradient from generated code (differentiable
    when the inputs require grad). mask and scale as in attention_backward."""
    if torch.is_tensor(x) and x.dim() >= 2 and x.shape[-2] == 0:
        raise ValueError(f"x must hold at least one position (n >= 1) for the mean cross-entropy, got shape {tuple(x.shape)}")
    if validate_inputs:
        _check_loss_inputs(x, w_q, w_k, w_v, w_o, targets)
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    c = validate.scale(scale, q.shape[-1]) if validate_inputs else default_scale(scale, q)
    if validate_inputs:
        n = x.shape[-2]
        validate.mask(mask, tuple(x.shape[:-2]) + (n, n), x.dtype, x.device)
    alpha, o = attention_forward(q, k, v, mask=mask, scale=c)
    targets = targets if targets.dtype == torch.int64 else targets.long()
    y = torch.nn.functional.one_hot(targets, w_o.shape[-1]).to(x.dtype)
    p, u, dW_O, loss = gen.readout_backward(o, w_o, y)
    B, dS, dQ, dK, dV = gen.attention_backward_from_forward(q, k, v, alpha, o, u, c)
    dW_Q, dW_K, dW_V = (sum_batch(t) for t in gen.params_backward(x, dQ, dK, dV))
    return LossGrads(loss.sum(), alpha, o, p, u, dS, dQ, dK, dV, dW_Q, dW_K, dW_V, sum_batch(dW_O))


def default_scale(scale, q):
    """The scale as given (0 and negative included; a 0-d tensor stays a tensor, unread), or 1/sqrt(d_k)
    when None (unvalidated: the hot-loop path)."""
    if scale is None:
        return validate.default_scale(q.shape[-1])
    return scale.detach() if torch.is_tensor(scale) else float(scale)


def sum_to(t, shape):
    """A gradient of a broadcast input: summed over the broadcast dims back to the input's shape (no copy when equal)."""
    return t if t.shape == shape else t.sum_to_size(shape)


def _needs_graph(*tensors):
    """Whether autograd records this call (grad mode on and some input requires grad)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _is_additive(mask, dtype):
    """True for a float (additive) mask; False for None or bool; a TypeError for any other dtype."""
    if mask is None:
        return False
    validate.mask_dtype(mask, dtype)
    return mask.dtype != torch.bool


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
    if not torch.is_tensor(targets) or targets.dtype.is_floating_point or targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(f"targets must be an integer tensor of class indices, got {getattr(targets, 'dtype', type(targets))}")
    if tuple(targets.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"targets has shape {tuple(targets.shape)}, expected {tuple(x.shape[:-1])}")
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= w_o.shape[-1]):
        raise ValueError(f"targets must lie in [0, {w_o.shape[-1]}), got range [{int(targets.min())}, {int(targets.max())}]")
    for name, t in named:
        validate.finite(name, t)
