"""scaled_dot_product_attention from the generated kernels, with torch's signature and semantics.

`scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
scale=None, enable_gqa=False)` returns what `torch.nn.functional.scaled_dot_product_attention` returns
(masks, is_causal aligned to the top left when L != S, grouped-query attention, broadcasting, fully
masked rows 0); its backward is the generated closed forms (C1-C4). `generated_sdpa()` routes a whole
model's attention through it.
"""
from __future__ import annotations

import contextlib
import numbers

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from numeric import validate
from numeric.module import Attention, AttentionJvp

TORCH_SDPA = torch._C._nn.scaled_dot_product_attention  # what F.scaled_dot_product_attention is


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """softmax(scale q k^T + mask) v as torch's SDPA computes it, backward from the generated closed forms.

    query (N, ..., H_q, L, E), key (N, ..., H, S, E), value (N, ..., H, S, E_v); attn_mask bool (True =
    may attend) or float (added; -inf blocks), broadcastable to (N, ..., H_q, L, S); is_causal: query i
    attends to keys j <= i (top-left aligned); scale: a real or a 0-d tensor, None = 1/sqrt(E);
    enable_gqa: H divides H_q and each key/value head serves H_q / H query heads. float16/bfloat16 are
    computed in float32 and rounded once. dropout_p > 0 is refused (the kernels are dropout-free).
    Composable: torch.func (grad, vmap, jacrev, jvp), forward-mode AD, torch.compile, the meta device.
    """
    _check_flags(dropout_p, is_causal, enable_gqa)
    c = validate.attention_inputs(query, key, value, attn_mask, scale, enable_gqa=enable_gqa, is_causal=is_causal)
    if is_causal:
        attn_mask = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).tril()
    heads = query.shape[-3] if enable_gqa and query.dim() >= 3 else None  # key/value repeated inside, folded back in float32
    function = Attention if torch.compiler.is_compiling() else AttentionJvp
    return function.apply(query, key, value, attn_mask, c, heads)[0]


def _check_flags(dropout_p, is_causal, enable_gqa):
    for name, flag in (("is_causal", is_causal), ("enable_gqa", enable_gqa)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {flag!r} of type {type(flag).__name__}")
    if not isinstance(dropout_p, numbers.Real) or isinstance(dropout_p, bool):
        raise TypeError(f"dropout_p must be a real number, got {dropout_p!r} of type {type(dropout_p).__name__}")
    if dropout_p != 0:
        raise NotImplementedError(
            f"dropout_p={dropout_p!r}: the generated kernels have no attention dropout; use dropout_p=0.0 (for an "
            f"nn.MultiheadAttention or nn.TransformerEncoderLayer: dropout=0.0, or model.eval())")


class _Route(TorchFunctionMode):
    """Sends torch's SDPA, under whatever name it was imported, to the generated one."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is TORCH_SDPA:
            return scaled_dot_product_attention(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def generated_sdpa():
    """Within the block every call of torch's scaled_dot_product_attention runs the generated one: the
    attribute F.scaled_dot_product_attention (which nn.MultiheadAttention and most models call) is
    replaced, and a TorchFunctionMode catches the function imported under any other name."""
    previous = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = scaled_dot_product_attention
    try:
        with _Route():
            yield
    finally:
        F.scaled_dot_product_attention = previous
