"""A drop-in single attention head whose backward is the generated code (C1–C4, C2, C8).

The backward has two paths. Without create_graph (ordinary training) it runs the generated kernels
on the forward's saved alpha and o. With create_graph=True (grad mode on inside backward: gradient
penalties, double backward) it recomputes the forward from the saved inputs with differentiable ops
and evaluates the same generated closed forms without in-place ops, so autograd differentiates the
proved first-order formulas exactly.
"""
from __future__ import annotations

import torch
from torch import nn

from numeric import validate
from numeric.api import attention_forward, default_scale, scores_softmax, sum_batch, sum_to
from numeric.generated import attention as gen
from numeric.reference import causal_mask


def _grads(q, k, v, alpha, o, grad_o, c, mask, need_dS):
    """dQ, dK, dV (and dS when asked) from the generated closed forms."""
    if torch.is_grad_enabled():  # create_graph=True: rebuild alpha and o as functions of the inputs
        alpha = scores_softmax(q, k, mask, c)
        o = alpha @ v
    if torch.is_grad_enabled() or need_dS:  # no in-place ops: differentiable, and dS is kept
        _, dS, dQ, dK, dV = gen.attention_backward_from_forward(q, k, v, alpha, o, grad_o, c)
        return dQ, dK, dV, dS
    return (*gen.attention_grads_from_forward(q, k, v, alpha, o, grad_o, c), None)


def _mask_grad(dS, mask, needed):
    """dL/dmask of an additive (float) mask that requires grad: dS summed to the mask's shape."""
    return sum_to(dS, mask.shape) if needed else None


class AttentionCore(torch.autograd.Function):
    """o = softmax(scale q k^T + mask) v; backward from the generated closed forms.

    q (..., L, E), k (..., S, E), v (..., S, E_v) with broadcast batch dims; mask None, bool
    (True = may attend) or float (additive); scale a real or None (1/sqrt(E)). Differentiable to any
    order (the create_graph backward is ordinary torch ops).
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, scale):
        c = default_scale(scale, q)
        alpha, o = attention_forward(q, k, v, mask=mask, scale=c)
        ctx.save_for_backward(q, k, v, mask, alpha, o)
        ctx.scale = c
        return o

    @staticmethod
    def backward(ctx, grad_o):
        q, k, v, mask, alpha, o = ctx.saved_tensors
        need_mask = ctx.needs_input_grad[3]
        dQ, dK, dV, dS = _grads(q, k, v, alpha, o, grad_o, ctx.scale, mask, need_mask)
        return sum_to(dQ, q.shape), sum_to(dK, k.shape), sum_to(dV, v.shape), _mask_grad(dS, mask, need_mask), None


class AttentionHead(torch.autograd.Function):
    """o = attention(x W_Q, x W_K, x W_V); dW_* from generated C8, dX by the chain rule of x W.
    Differentiable to any order (see the module docstring)."""

    @staticmethod
    def forward(ctx, x, w_q, w_k, w_v, mask, scale):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        c = default_scale(scale, q)
        alpha, o = attention_forward(q, k, v, mask=mask, scale=c)
        ctx.save_for_backward(x, w_q, w_k, w_v, mask, q, k, v, alpha, o)
        ctx.scale = c
        return o

    @staticmethod
    def backward(ctx, grad_o):
        x, w_q, w_k, w_v, mask, q, k, v, alpha, o = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: q, k, v as functions of x and the weights
            q, k, v = x @ w_q, x @ w_k, x @ w_v
        need_mask = ctx.needs_input_grad[4]
        dQ, dK, dV, dS = _grads(q, k, v, alpha, o, grad_o, ctx.scale, mask, need_mask)
        dW_Q, dW_K, dW_V = (sum_batch(t) for t in gen.params_backward(x, dQ, dK, dV))
        dX = dQ @ w_q.transpose(0, 1) + dK @ w_k.transpose(0, 1) + dV @ w_v.transpose(0, 1)
        return dX, dW_Q, dW_K, dW_V, _mask_grad(dS, mask, need_mask), None


class GeneratedAttention(nn.Module):
    """Single-head attention (no bias), x (..., n, d_model) -> o (..., n, d_v), generated backward.

    mask: bool (True = may attend) or float (added to the scores, -inf = blocked), broadcastable to
    (..., n, n), as scaled_dot_product_attention; causal=True also blocks j > i. scale: any finite
    real (0 and negative included), None = 1/sqrt(d_k). Double backward (create_graph=True) is exact.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int, *, causal: bool = False, scale=None, init_std: float = 0.1):
        super().__init__()
        for name, val in (("d_model", d_model), ("d_k", d_k), ("d_v", d_v)):
            if not isinstance(val, int) or val <= 0:
                raise ValueError(f"{name} must be a positive integer, got {val!r}")
        self.causal = causal
        self.scale = validate.scale(scale, d_k)
        self.w_q = nn.Parameter(torch.randn(d_model, d_k) * init_std)
        self.w_k = nn.Parameter(torch.randn(d_model, d_k) * init_std)
        self.w_v = nn.Parameter(torch.randn(d_model, d_v) * init_std)

    def forward(self, x, mask=None):
        if not torch.is_tensor(x):
            raise TypeError(f"x must be a torch.Tensor (..., n, {self.w_q.shape[0]}), got {type(x).__name__}")
        if x.dim() < 2 or x.shape[-1] != self.w_q.shape[0]:
            raise ValueError(f"x must be (..., n, {self.w_q.shape[0]}), got shape {tuple(x.shape)}")
        n = x.shape[-2]
        validate.mask(mask, tuple(x.shape[:-2]) + (n, n), x.dtype, x.device, values=False)
        if self.causal:
            causal = causal_mask(n, x.device)
            if mask is None:
                mask = causal
            elif mask.dtype == torch.bool:
                mask = mask & causal
            else:
                mask = mask.masked_fill(~causal, float("-inf"))
        return AttentionHead.apply(x, self.w_q, self.w_k, self.w_v, mask, self.scale)
