"""A drop-in single attention head whose backward is the generated code (C1–C4, C2, C8)."""
from __future__ import annotations

import torch
from torch import nn

from numeric.api import attention_forward, sum_batch
from numeric.generated import attention as gen


class AttentionCore(torch.autograd.Function):
    """o = softmax(scale q k^T, mask) v; backward from the generated closed forms."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale):
        alpha, o = attention_forward(q, k, v, mask=mask, scale=scale)
        ctx.save_for_backward(q, k, v, alpha, o)
        ctx.scale = scale
        return o

    @staticmethod
    def backward(ctx, grad_o):
        q, k, v, alpha, o = ctx.saved_tensors
        dQ, dK, dV = gen.attention_grads_from_forward(q, k, v, alpha, o, grad_o, ctx.scale)
        return dQ, dK, dV, None, None


class AttentionHead(torch.autograd.Function):
    """o = attention(x W_Q, x W_K, x W_V); dW_* from generated C8, dX by the chain rule of x W."""

    @staticmethod
    def forward(ctx, x, w_q, w_k, w_v, mask, scale):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        alpha, o = attention_forward(q, k, v, mask=mask, scale=scale)
        ctx.save_for_backward(x, w_q, w_k, w_v, q, k, v, alpha, o)
        ctx.scale = scale
        return o

    @staticmethod
    def backward(ctx, grad_o):
        x, w_q, w_k, w_v, q, k, v, alpha, o = ctx.saved_tensors
        dQ, dK, dV = gen.attention_grads_from_forward(q, k, v, alpha, o, grad_o, ctx.scale)
        dW_Q, dW_K, dW_V = (sum_batch(t) for t in gen.params_backward(x, dQ, dK, dV))
        dX = dQ @ w_q.transpose(0, 1) + dK @ w_k.transpose(0, 1) + dV @ w_v.transpose(0, 1)
        return dX, dW_Q, dW_K, dW_V, None, None


class GeneratedAttention(nn.Module):
    """Single-head attention (no bias), x (..., n, d_model) -> o (..., n, d_v), generated backward.

    mask: boolean, broadcastable to (..., n, n), True = may attend; causal=True builds j <= i.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int, *, causal: bool = False, init_std: float = 0.1):
        super().__init__()
        for name, val in (("d_model", d_model), ("d_k", d_k), ("d_v", d_v)):
            if not isinstance(val, int) or val <= 0:
                raise ValueError(f"{name} must be a positive integer, got {val!r}")
        self.causal = causal
        self.scale = d_k ** -0.5
        self.w_q = nn.Parameter(torch.randn(d_model, d_k) * init_std)
        self.w_k = nn.Parameter(torch.randn(d_model, d_k) * init_std)
        self.w_v = nn.Parameter(torch.randn(d_model, d_v) * init_std)

    def forward(self, x, mask=None):
        if x.dim() < 2 or x.shape[-1] != self.w_q.shape[0]:
            raise ValueError(f"x must be (..., n, {self.w_q.shape[0]}), got shape {tuple(x.shape)}")
        if self.causal:
            n = x.shape[-2]
            causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
            mask = causal if mask is None else mask & causal
        return AttentionHead.apply(x, self.w_q, self.w_k, self.w_v, mask, self.scale)
