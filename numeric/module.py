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
from numeric.api import HALF, _float_mask, forward_kernel, scores_softmax, sum_batch, sum_to
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


class Attention(torch.autograd.Function):
    """(o, alpha) for o = softmax(scale q k^T + mask) v, inputs already validated; alpha is not
    differentiable. The backward is the generated closed forms; jvp is the closed form of the forward's
    tangent; vmap is generated from these (torch.func). Half inputs are computed in float32 and rounded
    once; nothing reads a value on the host (meta device, torch.compile)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(q, k, v, mask, scale, heads=None):
        alpha, o = forward_kernel(*_wide(q, k, v, mask, heads), scale)
        return o.to(q.dtype), alpha

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, mask, scale, *heads = inputs
        ctx.scale, ctx.heads = scale, (heads or [None])[0]
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(q, k, v, mask, output[1])
        ctx.save_for_forward(q, k, v, mask, output[1])

    @staticmethod
    def backward(ctx, grad_o, *_grad_alpha):  # alpha is not differentiable (functorch passes nothing for it)
        return *_vjp(ctx, *ctx.saved_tensors, grad_o), None


class AttentionJvp(Attention):
    """Attention with forward-mode AD (jvp). torch.compile cannot trace a Function with a custom jvp (a graph
    break), so compiled code calls Attention and everything else this one."""

    @staticmethod
    def jvp(ctx, dq, dk, dv, dmask, _dscale, _dheads=None):
        return _jvp(ctx, *ctx.saved_tensors, dq, dk, dv, dmask)[0], None


class AttentionCore(torch.autograd.Function):
    """o = softmax(scale q k^T + mask) v; backward from the generated closed forms.

    q (..., L, E), k (..., S, E), v (..., S, E_v) with broadcast batch dims; mask None, bool
    (True = may attend) or float (additive); scale a real, a 0-d tensor or None (1/sqrt(E)). Checked as
    scaled_dot_product_attention checks them (metadata only). Differentiable to any order, with
    forward-mode AD and torch.func (grad, vmap, jacrev, jvp). It returns o alone, so its backward
    recomputes alpha; scaled_dot_product_attention keeps alpha from the forward (class Attention).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(q, k, v, mask, scale):
        return Attention.forward(q, k, v, mask, validate.attention_inputs(q, k, v, mask, scale, names=QKV))[0]

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, mask, scale = inputs
        ctx.scale, ctx.heads = validate.scale_value(scale, q.shape[-1]), None  # forward() checked the inputs
        ctx.save_for_backward(q, k, v, mask)
        ctx.save_for_forward(q, k, v, mask)

    @staticmethod
    def backward(ctx, grad_o):
        q, k, v, mask = ctx.saved_tensors
        return _vjp(ctx, q, k, v, mask, _alpha(q, k, mask, ctx.scale), grad_o)

    @staticmethod
    def jvp(ctx, dq, dk, dv, dmask, _dscale):
        q, k, v, mask = ctx.saved_tensors
        return _jvp(ctx, q, k, v, mask, _alpha(q, k, mask, ctx.scale), dq, dk, dv, dmask)[0]


QKV = ("q", "k", "v")


def _alpha(q, k, mask, c):
    """alpha recomputed from the inputs (in float32 for half inputs)."""
    wq, wk, _, wm = _wide(q, k, k, mask)
    with torch.no_grad():
        return scores_softmax(wq, wk, wm, c, inplace=True)


def _vjp(ctx, q, k, v, mask, alpha, grad_o):
    """dq, dk, dv, dmask from the generated closed forms, computed in alpha's dtype and rounded once."""
    wq, wk, wv, wm = _wide(q, k, v, mask, ctx.heads)
    need_mask = ctx.needs_input_grad[3]
    dQ, dK, dV, dS = _grads(wq, wk, wv, alpha, alpha @ wv, grad_o.to(alpha.dtype), ctx.scale, wm, need_mask)
    dM = _mask_grad(dS, mask, need_mask)
    dK, dV = _fold_heads(dK, k, ctx.heads), _fold_heads(dV, v, ctx.heads)  # summed in the wide dtype
    return (sum_to(dQ, q.shape).to(q.dtype), sum_to(dK, k.shape).to(k.dtype), sum_to(dV, v.shape).to(v.dtype),
            None if dM is None else dM.to(mask.dtype), None)


def _jvp(ctx, q, k, v, mask, alpha, dq, dk, dv, dmask):
    """The forward's tangent: do = dalpha v + alpha dv, dalpha = alpha (ds - sum_j alpha ds) with
    ds = c (dq k^T + q dk^T) + dmask (softmax's Jacobian; blocked entries have alpha = 0)."""
    wq, wk, wv, _ = _wide(q, k, v, None, ctx.heads)
    ds = torch.zeros_like(alpha)
    if dq is not None:
        ds = ds + dq.to(alpha.dtype) @ (ctx.scale * wk).mT
    if dk is not None:
        ds = ds + wq @ (ctx.scale * _repeat_heads(dk.to(alpha.dtype), ctx.heads)).mT
    if dmask is not None:
        ds = ds + dmask.to(alpha.dtype)
    d_alpha = alpha * (ds - (alpha * ds).sum(-1, keepdim=True))
    do = d_alpha @ wv if dv is None else d_alpha @ wv + alpha @ _repeat_heads(dv.to(alpha.dtype), ctx.heads)
    return do.to(q.dtype), d_alpha


def _wide(q, k, v, mask, heads=None):
    """float16/bfloat16 inputs (and a half additive mask) in float32, the dtype the kernels compute in; under
    grouped-query attention (heads: the query's head count) key and value repeated to it."""
    if q.dtype in HALF:
        q, k, v, mask = q.float(), k.float(), v.float(), _float_mask(mask)
    return q, _repeat_heads(k, heads), _repeat_heads(v, heads), mask


def _repeat_heads(x, heads):
    """Grouped-query attention: each of x's heads (dim -3) serves heads / H consecutive query heads."""
    if heads is None or x.shape[-3] == heads:
        return x
    return x.repeat_interleave(heads // x.shape[-3], dim=-3)


def _fold_heads(dx, x, heads):
    """The gradient of a grouped key or value: summed over the query heads each of its heads serves."""
    if heads is None or x.shape[-3] == heads:
        return dx
    return dx.unflatten(-3, (x.shape[-3], heads // x.shape[-3])).sum(-3)


class AttentionHead(torch.autograd.Function):
    """o = attention(x W_Q, x W_K, x W_V); dW_* from generated C8, dX by the chain rule of x W.
    Differentiable to any order (see the module docstring); half inputs computed in float32, rounded once."""

    @staticmethod
    def forward(ctx, x, w_q, w_k, w_v, mask, scale):
        q, k, v = x @ w_q, x @ w_k, x @ w_v  # (..., n, d_k), (..., n, d_k), (..., n, d_v)
        c = validate.attention_inputs(q, k, v, mask, scale, names=QKV)
        alpha, o = forward_kernel(*_wide(q, k, v, mask), c)
        ctx.save_for_backward(x, w_q, w_k, w_v, mask, q, k, v, alpha, o)
        ctx.scale = c
        return o.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_o):
        x, w_q, w_k, w_v, mask, q, k, v, alpha, o = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: q, k, v as functions of x and the weights
            q, k, v = x @ w_q, x @ w_k, x @ w_v
        need_mask = ctx.needs_input_grad[4]
        wide = x.dtype in HALF
        q, k, v, wm = _wide(q, k, v, mask)
        x, w_q, w_k, w_v = (t.float() for t in (x, w_q, w_k, w_v)) if wide else (x, w_q, w_k, w_v)
        dQ, dK, dV, dS = _grads(q, k, v, alpha, o, grad_o.to(alpha.dtype), ctx.scale, wm, need_mask)
        dW_Q, dW_K, dW_V = (sum_batch(t) for t in gen.params_backward(x, dQ, dK, dV))
        dX = dQ @ w_q.transpose(0, 1) + dK @ w_k.transpose(0, 1) + dV @ w_v.transpose(0, 1)
        dM = _mask_grad(dS, mask, need_mask)
        dt = ctx.saved_tensors[0].dtype
        return (dX.to(dt), dW_Q.to(dt), dW_K.to(dt), dW_V.to(dt), None if dM is None else dM.to(mask.dtype), None)


class GeneratedAttention(nn.Module):
    """Single-head attention (no bias), x (..., n, d_model) -> o (..., n, d_v), generated backward.

    mask (keyword-only): bool (True = may attend) or float (added to the scores, -inf = blocked),
    broadcastable to (..., n, n), as scaled_dot_product_attention; causal=True also blocks j > i. scale:
    any finite real (0 and negative included), None = 1/sqrt(d_k). causal and scale are saved in the state
    dict and restored by load_state_dict. Double backward (create_graph=True) is exact.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int, *, causal: bool = False, scale=None, init_std: float = 0.1):
        super().__init__()
        for name, val in (("d_model", d_model), ("d_k", d_k), ("d_v", d_v)):
            if not isinstance(val, int) or val <= 0:
                raise ValueError(f"{name} must be a positive integer, got {val!r}")
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {causal!r}")
        self.causal = causal
        self.scale = validate.scale(scale, d_k)
        self.w_q = nn.Parameter(torch.randn(d_model, d_k) * init_std)
        self.w_k = nn.Parameter(torch.randn(d_model, d_k) * init_std)
        self.w_v = nn.Parameter(torch.randn(d_model, d_v) * init_std)

    def get_extra_state(self):
        return {"causal": self.causal, "scale": self.scale}

    def set_extra_state(self, state):
        if not isinstance(state, dict) or set(state) != {"causal", "scale"}:
            raise ValueError(f"GeneratedAttention state must hold 'causal' and 'scale', got {state!r}")
        if not isinstance(state["causal"], bool):
            raise TypeError(f"GeneratedAttention state: causal must be a bool, got {state['causal']!r}")
        self.causal, self.scale = state["causal"], validate.scale(state["scale"], self.w_q.shape[1])

    def forward(self, x, *, mask=None):
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
