# GENERATED FILE: do not edit. Regenerate with `python -m derive.codegen --write`.
# Emitted by derive/codegen.py from the closed forms of the claim registry (derive/paper_claims.py, derive/head_claims.py),
# the same SymPy objects the derivation engine proves. The codegen stage fails when this file
# differs from a fresh emission.
"""Torch kernels generated from the proven closed forms of the claims (see derive/codegen.py)."""
import torch


def _recip(x):
    """1/x with 1/0 := 0, so a fully masked row has zero attention and zero gradients."""
    return torch.where(x == 0, torch.zeros_like(x), 1 / x)


def host_readable(t):
    """Whether t's values may be read on the host for free: a plain CPU tensor, outside torch.compile and
    torch.func transforms (where a read is a graph break or an error); the meta device has no values."""
    return (t.device.type == "cpu" and not torch.compiler.is_compiling()
            and not torch._C._functorch.is_functorch_wrapped_tensor(t))


def _softmax(x, mask, dim, inplace=False):
    """The softmax pattern M e^x / sum M e^x, max-shifted (torch.softmax); fully masked rows give 0."""
    if mask is None:
        return torch.softmax(x, dim)
    allowed = mask if mask.dtype == torch.bool else mask != 0  # ~ on a bool mask is ~30x cheaper than == 0
    x = x.masked_fill_(~allowed, float("-inf")) if inplace else x.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(x, dim)
    live = allowed.any(dim, keepdim=True)  # a row with nothing to attend to gives 0/0: set to 0 below
    if host_readable(live) and bool(live.all()):  # on the CPU a read is free and spares a pass
        return out
    return out.masked_fill_(~live, 0.0)  # elsewhere the mask alone decides: the data is never read


def _softmax_(x, mask, dim):
    """_softmax that may overwrite x (a temporary that dies on this line)."""
    return _softmax(x, mask, dim, inplace=True)


# The function that checks each identity, keyed (claim id, identity name), and each mutant, keyed by its id.
MANIFEST = {
    ("C1", "main"): "identity_c1_main",
    ("C1", "fused baseline"): "identity_c1_fused_baseline",
    "M1-drop-baseline": "mutant_m1_drop_baseline",
    "M2-uniform-baseline": "mutant_m2_uniform_baseline",
    "M3-drop-alpha": "mutant_m3_drop_alpha",
    "M4-flip-sign": "mutant_m4_flip_sign",
    "M5-masked-baseline": "mutant_m5_masked_baseline",
    ("C2", "main"): "identity_c2_main",
    "M6-wrong-index": "mutant_m6_wrong_index",
    ("C3", "main"): "identity_c3_main",
    "M7-lose-scale": "mutant_m7_lose_scale",
    "M8-transpose-qk": "mutant_m8_transpose_qk",
    ("C4", "main"): "identity_c4_main",
    "M9-transpose-qk": "mutant_m9_transpose_qk",
    ("C5", "main"): "identity_c5_main",
    "M10-lose-1/T": "mutant_m10_lose_1_t",
    ("C6", "main"): "identity_c6_main",
    "M11-baseline-not-cancelled": "mutant_m11_baseline_not_cancelled",
    ("C7", "main"): "identity_c7_main",
    "M12-times-alpha": "mutant_m12_times_alpha",
    ("C8", "W_V"): "identity_c8_w_v",
    ("C8", "W_Q"): "identity_c8_w_q",
    ("C8", "W_K"): "identity_c8_w_k",
    ("C8", "W_O"): "identity_c8_w_o",
    "M13-WV-transposed-alpha": "mutant_m13_wv_transposed_alpha",
    ("C9", "S1 baseline as mixture"): "identity_c9_s1_baseline_as_mixture",
    ("C9", "S2 self term vanishes"): "identity_c9_s2_self_term_vanishes",
    ("C9", "S3 off-diagonal mass"): "identity_c9_s3_off_diagonal_mass",
    "M14-S1-uniform-weights": "mutant_m14_s1_uniform_weights",
    ("C10", "completed square"): "identity_c10_completed_square",
    "M16-plain-gradient-step": "mutant_m16_plain_gradient_step",
    ("H1", "main"): "identity_h1_main",
    "M17-key-bias-drop-baseline": "mutant_m17_key_bias_drop_baseline",
    "M18-key-bias-alpha-for-dS": "mutant_m18_key_bias_alpha_for_ds",
    ("H2", "main"): "identity_h2_main",
    ("H2", "row covariance"): "identity_h2_row_covariance",
    "M19-query-bias-lose-scale": "mutant_m19_query_bias_lose_scale",
    "M20-query-bias-alpha-for-dS": "mutant_m20_query_bias_alpha_for_ds",
    "M21-query-bias-uncentred": "mutant_m21_query_bias_uncentred",
    ("H3", "row mass"): "identity_h3_row_mass",
    ("H3", "attended rows"): "identity_h3_attended_rows",
    "M22-value-bias-count": "mutant_m22_value_bias_count",
    "M23-value-bias-responsibility": "mutant_m23_value_bias_responsibility",
    ("H4", "main"): "identity_h4_main",
    ("H4", "head upstream"): "identity_h4_head_upstream",
    "M24-head-alone-advantage": "mutant_m24_head_alone_advantage",
    "M25-head-alone-upstream": "mutant_m25_head_alone_upstream",
    ("H5", "main"): "identity_h5_main",
    ("H5", "output block"): "identity_h5_output_block",
    "M26-head-alone-values": "mutant_m26_head_alone_values",
    "M27-values-routing-transposed": "mutant_m27_values_routing_transposed",
    "M28-output-block-head-alone": "mutant_m28_output_block_head_alone",
}
# Identities and mutants with no check function, and why.
UNEMITTED = {
    "M15-constant-3.5": "a bound constant, not a closed form (the derive stage's saturation search attacks it)",
}


def attention_forward_masked(q, k, v, mask, scale):
    """The attention forward. Returns alpha, o."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    return alpha, o


def attention_forward_unmasked(q, k, v, scale):
    """The attention forward. Returns alpha, o."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    return alpha, o


def attention_backward_masked(q, k, v, u, mask, scale):
    """The attention backward from q, k, v and u = dL/do. Returns alpha, B (C7), dS (C1), dQ (C3), dK (C4), dV (C2)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = (b - baseline[..., :, None]) * alpha  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    B = b  # (..., n, n)
    return alpha, B, dS, dQ, dK, dV


def attention_backward_unmasked(q, k, v, u, scale):
    """The attention backward from q, k, v and u = dL/do. Returns alpha, B (C7), dS (C1), dQ (C3), dK (C4), dV (C2)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = (b - baseline[..., :, None]) * alpha  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    B = b  # (..., n, n)
    return alpha, B, dS, dQ, dK, dV


def attention_backward_from_forward(q, k, v, alpha, o, u, scale):
    """The attention backward reusing alpha and o from the forward (alpha is zero where masked, so no mask is needed). Returns B (C7), dS (C1), dQ (C3), dK (C4), dV (C2)."""
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = (b - baseline[..., :, None]) * alpha  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    B = b  # (..., n, n)
    return B, dS, dQ, dK, dV


def attention_routing_masked(q, k, v, u, mask, scale):
    """The routing and value gradients without dQ and dK (what numeric.watch reads). Returns alpha, B (C7), dS (C1), dV (C2)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = (b - baseline[..., :, None]) * alpha  # (..., n, n)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    B = b  # (..., n, n)
    return alpha, B, dS, dV


def attention_routing_unmasked(q, k, v, u, scale):
    """The routing and value gradients without dQ and dK (what numeric.watch reads). Returns alpha, B (C7), dS (C1), dV (C2)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = (b - baseline[..., :, None]) * alpha  # (..., n, n)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    B = b  # (..., n, n)
    return alpha, B, dS, dV


def attention_routing_from_forward(v, alpha, o, u):
    """attention_routing reusing alpha and o from the forward (any mask, float masks included). Returns B (C7), dS (C1), dV (C2)."""
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = (b - baseline[..., :, None]) * alpha  # (..., n, n)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    B = b  # (..., n, n)
    return B, dS, dV


def attention_grads_from_forward(q, k, v, alpha, o, u, scale):
    """The module's backward: B and dS die early, so their buffers are reused. Returns dQ (C3), dK (C4), dV (C2)."""
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return dQ, dK, dV


def readout_backward(o, w_o, y):
    """The readout: class probabilities, u = dL/do, dL/dW_O and the mean cross-entropy of each sequence. Returns p, u (C5), dW_O (C8 W_O), loss."""
    n_size = o.shape[-2]
    z = o @ w_o  # (..., n, m)
    p = _softmax(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    dW_O = o.mT @ ((p - y) / n_size)  # (..., d_v, m)
    loss = ((torch.logsumexp(z, dim=-1) - torch.linalg.vecdot(y, z)) / n_size).sum(dim=-1)  # (...)
    return p, u, dW_O, loss


def params_backward(x, dQ, dK, dV):
    """The parameter gradients from dQ, dK, dV. Returns dW_Q (C8 W_Q), dW_K (C8 W_K), dW_V (C8 W_V)."""
    dW_Q = x.mT @ dQ  # (..., d_x, d_k)
    dW_K = x.mT @ dK  # (..., d_x, d_k)
    dW_V = x.mT @ dV  # (..., d_x, d_v)
    return dW_Q, dW_K, dW_V


def identity_c1_main(v, s, w_o, y, mask, grad_s):
    """C1 / main (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    derived = grad_s  # (..., n, n)
    closed = dS  # (..., n, n)
    return derived, closed


def identity_c1_fused_baseline(v, s, w_o, y, mask):
    """C1 / fused baseline (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    derived = baseline  # (..., n)
    closed = torch.linalg.vecdot(o, u)  # (..., n)
    return derived, closed


def mutant_m1_drop_baseline(v, s, w_o, y, mask, grad_s):
    """negative control M1-drop-baseline: baseline dropped: alpha_ij b_ij (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    derived = grad_s  # (..., n, n)
    closed = alpha * b  # (..., n, n)
    return derived, closed


def mutant_m2_uniform_baseline(v, s, w_o, y, mask, grad_s):
    """negative control M2-uniform-baseline: uniform instead of alpha-weighted baseline (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    derived = grad_s  # (..., n, n)
    closed = (b - (b / n_size).sum(dim=-1)[..., :, None]) * alpha  # (..., n, n)
    return derived, closed


def mutant_m3_drop_alpha(v, s, w_o, y, mask, grad_s):
    """negative control M3-drop-alpha: alpha factor dropped: b_ij - E[b] (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    derived = grad_s  # (..., n, n)
    closed = b - baseline[..., :, None]  # (..., n, n)
    return derived, closed


def mutant_m4_flip_sign(v, s, w_o, y, mask, grad_s):
    """negative control M4-flip-sign: sign flipped (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    derived = grad_s  # (..., n, n)
    closed = -dS  # (..., n, n)
    return derived, closed


def mutant_m5_masked_baseline(v, s, w_o, y, mask, grad_s):
    """negative control M5-masked-baseline: masked positions included in the baseline (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    derived = grad_s  # (..., n, n)
    closed = (b - torch.linalg.vecdot(_softmax(s, None, dim=-1), b)[..., :, None]) * alpha  # (..., n, n)
    return derived, closed


def identity_c2_main(v, s, w_o, y, mask, grad_v):
    """C2 / main (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    derived = grad_v  # (..., n, d_v)
    closed = dV  # (..., n, d_v)
    return derived, closed


def mutant_m6_wrong_index(v, s, w_o, y, mask, grad_v):
    """negative control M6-wrong-index: sum over the wrong index: sum_i alpha_ji u_i (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    derived = grad_v  # (..., n, d_v)
    closed = alpha @ u  # (..., n, d_v)
    return derived, closed


def identity_c3_main(q, k, v, w_o, y, mask, grad_q, scale):
    """C3 / main (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    derived = grad_q  # (..., n, d_k)
    closed = dQ  # (..., n, d_k)
    return derived, closed


def mutant_m7_lose_scale(q, k, v, w_o, y, mask, grad_q, scale):
    """negative control M7-lose-scale: scale c lost (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    derived = grad_q  # (..., n, d_k)
    closed = dS @ k  # (..., n, d_k)
    return derived, closed


def mutant_m8_transpose_qk(q, k, v, w_o, y, mask, grad_q, scale):
    """negative control M8-transpose-qk: q/k roles transposed: c sum_j dS_ji k_j (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    derived = grad_q  # (..., n, d_k)
    closed = ((scale * k).mT @ dS).mT  # (..., n, d_k)
    return derived, closed


def identity_c4_main(q, k, v, w_o, y, mask, grad_k, scale):
    """C4 / main (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    derived = grad_k  # (..., n, d_k)
    closed = dK  # (..., n, d_k)
    return derived, closed


def mutant_m9_transpose_qk(q, k, v, w_o, y, mask, grad_k, scale):
    """negative control M9-transpose-qk: q/k roles transposed: c sum_i dS_ij k_i (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    derived = grad_k  # (..., n, d_k)
    closed = ((scale * k).mT @ dS).mT  # (..., n, d_k)
    return derived, closed


def identity_c5_main(o, w_o, y, grad_o):
    """C5 / main (derived side with autograd inputs grad_*, closed side)."""
    n_size = o.shape[-2]
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    derived = grad_o  # (..., n, d_v)
    closed = u  # (..., n, d_v)
    return derived, closed


def mutant_m10_lose_1_t(o, w_o, y, grad_o):
    """negative control M10-lose-1/T: 1/T lost (derived side with autograd inputs grad_*, closed side)."""
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    derived = grad_o  # (..., n, d_v)
    closed = (p - y) @ w_o.mT  # (..., n, d_v)
    return derived, closed


def identity_c6_main(grad_s):
    """C6 / main (derived side with autograd inputs grad_*, closed side)."""
    derived = grad_s.sum(dim=-1)  # (..., n)
    closed = 0  # a number, broadcast to (..., n)
    return derived, closed


def mutant_m11_baseline_not_cancelled(v, s, w_o, y, mask, grad_s):
    """negative control M11-baseline-not-cancelled: zero-sum claimed to equal the baseline (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    derived = grad_s.sum(dim=-1)  # (..., n)
    closed = baseline  # (..., n)
    return derived, closed


def identity_c7_main(v, alpha, w_o, y, grad_alpha):
    """C7 / main (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    derived = grad_alpha  # (..., n, n)
    closed = b  # (..., n, n)
    return derived, closed


def mutant_m12_times_alpha(v, alpha, w_o, y, grad_alpha):
    """negative control M12-times-alpha: an extra alpha factor: alpha_ij b_ij (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    derived = grad_alpha  # (..., n, n)
    closed = alpha * b  # (..., n, n)
    return derived, closed


def identity_c8_w_v(x, w_q, w_k, w_v, w_o, y, mask, grad_WV, scale):
    """C8 / W_V (derived side with autograd inputs grad_*, closed side)."""
    n_size = x.shape[-2]
    q = x @ w_q  # (..., n, d_k)
    k = x @ w_k  # (..., n, d_k)
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    v = x @ w_v  # (..., n, d_v)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    derived = grad_WV  # (..., d_x, d_v)
    closed = x.mT @ dV  # (..., d_x, d_v)
    return derived, closed


def identity_c8_w_q(x, w_q, w_k, w_v, w_o, y, mask, grad_WQ, scale):
    """C8 / W_Q (derived side with autograd inputs grad_*, closed side)."""
    n_size = x.shape[-2]
    q = x @ w_q  # (..., n, d_k)
    k = x @ w_k  # (..., n, d_k)
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    v = x @ w_v  # (..., n, d_v)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    derived = grad_WQ  # (..., d_x, d_k)
    closed = x.mT @ dQ  # (..., d_x, d_k)
    return derived, closed


def identity_c8_w_k(x, w_q, w_k, w_v, w_o, y, mask, grad_WK, scale):
    """C8 / W_K (derived side with autograd inputs grad_*, closed side)."""
    n_size = x.shape[-2]
    q = x @ w_q  # (..., n, d_k)
    k = x @ w_k  # (..., n, d_k)
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    v = x @ w_v  # (..., n, d_v)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    derived = grad_WK  # (..., d_x, d_k)
    closed = x.mT @ dK  # (..., d_x, d_k)
    return derived, closed


def identity_c8_w_o(o, w_o, y, grad_WO):
    """C8 / W_O (derived side with autograd inputs grad_*, closed side)."""
    n_size = o.shape[-2]
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    derived = grad_WO  # (..., d_v, m)
    closed = o.mT @ ((p - y) / n_size)  # (..., d_v, m)
    return derived, closed


def mutant_m13_wv_transposed_alpha(x, w_q, w_k, w_v, w_o, y, mask, grad_WV, scale):
    """negative control M13-WV-transposed-alpha: responsibilities transposed in dL/dW_V (derived side with autograd inputs grad_*, closed side)."""
    n_size = x.shape[-2]
    q = x @ w_q  # (..., n, d_k)
    k = x @ w_k  # (..., n, d_k)
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    v = x @ w_v  # (..., n, d_v)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    derived = grad_WV  # (..., d_x, d_v)
    closed = x.mT @ (alpha @ u)  # (..., d_x, d_v)
    return derived, closed


def identity_c9_s1_baseline_as_mixture(v, s, w_o, y, mask):
    """C9 / S1 baseline as mixture (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    derived = b - baseline[..., :, None]  # (..., n, n)
    closed = torch.einsum("...abc,...ac->...ab", b[..., :, :, None] - b[..., :, None, :], alpha)  # (..., n, n)
    return derived, closed


def identity_c9_s2_self_term_vanishes(v, s, w_o, y, mask):
    """C9 / S2 self term vanishes (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    _like = dict(dtype=v.dtype, device=v.device)
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    derived = torch.einsum("...abc,...ac->...ab", b[..., :, :, None] - b[..., :, None, :], alpha)  # (..., n, n)
    closed = torch.einsum("...ab,...cba,...ca->...cb", 1 - torch.eye(n_size, **_like), b[..., :, :, None] - b[..., :, None, :], alpha)  # (..., n, n)
    return derived, closed


def identity_c9_s3_off_diagonal_mass(s, mask):
    """C9 / S3 off-diagonal mass (derived side with autograd inputs grad_*, closed side)."""
    n_size = s.shape[-2]
    _like = dict(dtype=s.dtype, device=s.device)
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    derived = alpha @ (1 - torch.eye(n_size, **_like)).mT  # (..., n, n)
    closed = 1 - alpha  # (..., n, n)
    return derived, closed


def mutant_m14_s1_uniform_weights(v, s, w_o, y, mask):
    """negative control M14-S1-uniform-weights: mixture with uniform weights (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    derived = b - baseline[..., :, None]  # (..., n, n)
    closed = ((b[..., :, :, None] - b[..., :, None, :]) / n_size).sum(dim=-1)  # (..., n, n)
    return derived, closed


def identity_c10_completed_square(v, s, w_o, y, delta, mask, grad_v, eta):
    """C10 / completed square (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    responsibility = alpha.sum(dim=-2)  # (..., n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    derived = torch.einsum("...a,...ab,...ab->...a", eta * _recip(responsibility), dV, grad_v) + responsibility * delta.square().sum(dim=-1) / (2 * eta) - responsibility * torch.einsum("...a,...ab->...a", eta ** 2 * _recip(responsibility) ** 2, dV.square()) / (2 * eta) + torch.linalg.vecdot(delta, grad_v)  # (..., n)
    closed = responsibility * (eta * _recip(responsibility)[..., :, None] * dV + delta).square().sum(dim=-1) / (2 * eta)  # (..., n)
    return derived, closed


def mutant_m16_plain_gradient_step(v, s, w_o, y, delta, mask, grad_v, eta):
    """negative control M16-plain-gradient-step: step without 1/N_j: -eta sum_i alpha_ij u_i (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    responsibility = alpha.sum(dim=-2)  # (..., n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    derived = torch.linalg.vecdot(eta * dV, grad_v) + responsibility * delta.square().sum(dim=-1) / (2 * eta) - responsibility * (eta ** 2 * dV.square()).sum(dim=-1) / (2 * eta) + torch.linalg.vecdot(delta, grad_v)  # (..., n)
    closed = responsibility * (eta * dV + delta).square().sum(dim=-1) / (2 * eta)  # (..., n)
    return derived, closed


def identity_h1_main(grad_k):
    """H1 / main (derived side with autograd inputs grad_*, closed side)."""
    derived = grad_k.sum(dim=-2)  # (..., d_k)
    closed = 0  # a number, broadcast to (..., d_k)
    return derived, closed


def mutant_m17_key_bias_drop_baseline(q, k, v, w_o, y, mask, grad_k, scale):
    """negative control M17-key-bias-drop-baseline: baseline dropped in dS (alpha_ij b_ij): c sum_ij alpha_ij b_ij q_i (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    derived = grad_k.sum(dim=-2)  # (..., d_k)
    closed = torch.einsum("...ab,...a->...b", scale * q, torch.linalg.vecdot(alpha, b))  # (..., d_k)
    return derived, closed


def mutant_m18_key_bias_alpha_for_ds(q, k, mask, grad_k, scale):
    """negative control M18-key-bias-alpha-for-dS: alpha in place of dS: c sum_ij alpha_ij q_i (derived side with autograd inputs grad_*, closed side)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    derived = grad_k.sum(dim=-2)  # (..., d_k)
    closed = torch.einsum("...ab,...a->...b", scale * q, alpha.sum(dim=-1))  # (..., d_k)
    return derived, closed


def identity_h2_main(q, k, v, w_o, y, mask, grad_q, scale):
    """H2 / main (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    derived = grad_q.sum(dim=-2)  # (..., d_k)
    closed = torch.einsum("...ab,...bc->...c", dS, scale * k)  # (..., d_k)
    return derived, closed


def identity_h2_row_covariance(q, k, v, w_o, y, mask, grad_q, scale):
    """H2 / row covariance (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    derived = grad_q  # (..., n, d_k)
    closed = torch.einsum("...ab,...bca,...ab->...ac", scale * (b - baseline[..., :, None]), k[..., :, :, None] - (alpha @ k).mT[..., None, :, :], alpha)  # (..., n, d_k)
    return derived, closed


def mutant_m19_query_bias_lose_scale(q, k, v, w_o, y, mask, grad_q, scale):
    """negative control M19-query-bias-lose-scale: scale c lost: sum_ij dS_ij k_j (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    derived = grad_q.sum(dim=-2)  # (..., d_k)
    closed = torch.einsum("...ab,...bc->...c", dS, k)  # (..., d_k)
    return derived, closed


def mutant_m20_query_bias_alpha_for_ds(q, k, mask, grad_q, scale):
    """negative control M20-query-bias-alpha-for-dS: alpha in place of dS: c sum_ij alpha_ij k_j (derived side with autograd inputs grad_*, closed side)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    derived = grad_q.sum(dim=-2)  # (..., d_k)
    closed = torch.einsum("...ab,...bc->...c", alpha, scale * k)  # (..., d_k)
    return derived, closed


def mutant_m21_query_bias_uncentred(q, k, v, w_o, y, mask, grad_q, scale):
    """negative control M21-query-bias-uncentred: neither b nor k centred: c sum_j alpha_ij b_ij k_j (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    derived = grad_q  # (..., n, d_k)
    closed = torch.einsum("...ab,...ab,...bc->...ac", alpha, b, scale * k)  # (..., n, d_k)
    return derived, closed


def identity_h3_row_mass(q, k, v, w_o, y, mask, grad_v, scale):
    """H3 / row mass (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    derived = grad_v.sum(dim=-2)  # (..., d_v)
    closed = torch.einsum("...ab,...a->...b", u, alpha.sum(dim=-1))  # (..., d_v)
    return derived, closed


def identity_h3_attended_rows(q, k, v, w_o, y, mask, grad_v, scale):
    """H3 / attended rows (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    derived = grad_v.sum(dim=-2)  # (..., d_v)
    closed = u.sum(dim=-2)  # (..., d_v)
    return derived, closed


def mutant_m22_value_bias_count(q, k, v, w_o, y, mask, grad_v, scale):
    """negative control M22-value-bias-count: every alpha counted as 1: sum_i u_i sum_j M_ij (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    derived = grad_v.sum(dim=-2)  # (..., d_v)
    closed = torch.einsum("...ab,...a->...b", u, mask.sum(dim=-1))  # (..., d_v)
    return derived, closed


def mutant_m23_value_bias_responsibility(q, k, v, w_o, y, mask, grad_v, scale):
    """negative control M23-value-bias-responsibility: weighted by the responsibility of the row's own position: sum_j N_j u_j (derived side with autograd inputs grad_*, closed side)."""
    n_size = q.shape[-2]
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    responsibility = alpha.sum(dim=-2)  # (..., n)
    o = alpha @ v  # (..., n, d_v)
    z = o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    derived = grad_v.sum(dim=-2)  # (..., d_v)
    closed = torch.einsum("...a,...ab->...b", responsibility, u)  # (..., d_v)
    return derived, closed


def identity_h4_main(v, s, w_o, y, mask, other_logits, grad_s):
    """H4 / main (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = other_logits + o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    derived = grad_s  # (..., n, n)
    closed = dS  # (..., n, n)
    return derived, closed


def identity_h4_head_upstream(o, w_o, y, other_logits, grad_o):
    """H4 / head upstream (derived side with autograd inputs grad_*, closed side)."""
    n_size = o.shape[-2]
    z = other_logits + o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    u = (p - y) @ (w_o / n_size).mT  # (..., n, d_v)
    derived = grad_o  # (..., n, d_v)
    closed = u  # (..., n, d_v)
    return derived, closed


def mutant_m24_head_alone_advantage(v, s, w_o, y, mask, grad_s):
    """negative control M24-head-alone-advantage: the head's own logits taken for all of them: p_i = softmax(W_O^T o_i), the other heads forgotten (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    derived = grad_s  # (..., n, n)
    closed = (((_recip(torch.exp(w_o.mT @ o.mT).sum(dim=-2))[..., :, None] * torch.exp(w_o.mT @ o.mT).mT - y) @ (w_o / n_size).mT) @ v.mT - torch.einsum("...ab,...ba->...a", alpha, v @ ((_recip(torch.exp(w_o.mT @ o.mT).sum(dim=-2))[..., :, None] * torch.exp(w_o.mT @ o.mT).mT - y) @ (w_o / n_size).mT).mT)[..., :, None]) * alpha  # (..., n, n)
    return derived, closed


def mutant_m25_head_alone_upstream(o, w_o, y, grad_o):
    """negative control M25-head-alone-upstream: u from the head's own logits only: W_O (softmax(W_O^T o_i) - y_i) / n (derived side with autograd inputs grad_*, closed side)."""
    n_size = o.shape[-2]
    derived = grad_o  # (..., n, d_v)
    closed = (_recip(torch.exp(w_o.mT @ o.mT).sum(dim=-2))[..., :, None] * torch.exp(w_o.mT @ o.mT).mT - y) @ (w_o / n_size).mT  # (..., n, d_v)
    return derived, closed


def identity_h5_main(v, s, w_o, y, mask, other_logits, grad_v):
    """H5 / main (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = other_logits + o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    derived = grad_v  # (..., n, d_v)
    closed = (w_o @ (((p - y) / n_size).mT @ alpha)).mT  # (..., n, d_v)
    return derived, closed


def identity_h5_output_block(o, w_o, y, other_logits, grad_WO):
    """H5 / output block (derived side with autograd inputs grad_*, closed side)."""
    n_size = o.shape[-2]
    z = other_logits + o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    derived = grad_WO  # (..., d_v, m)
    closed = o.mT @ ((p - y) / n_size)  # (..., d_v, m)
    return derived, closed


def mutant_m26_head_alone_values(v, s, w_o, y, mask, grad_v):
    """negative control M26-head-alone-values: the head's own logits taken for all of them: W_O sum_i alpha_ij (softmax(W_O^T o_i) - y_i) / n (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    derived = grad_v  # (..., n, d_v)
    closed = (w_o @ (((_recip(torch.exp(w_o.mT @ o.mT).sum(dim=-2))[..., :, None] * torch.exp(w_o.mT @ o.mT).mT - y) / n_size).mT @ alpha)).mT  # (..., n, d_v)
    return derived, closed


def mutant_m27_values_routing_transposed(v, s, w_o, y, mask, other_logits, grad_v):
    """negative control M27-values-routing-transposed: routing read the wrong way: sum_i alpha_ji u_i (derived side with autograd inputs grad_*, closed side)."""
    n_size = v.shape[-2]
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    z = other_logits + o @ w_o  # (..., n, m)
    p = _softmax_(z, None, dim=-1)  # (..., n, m)
    derived = grad_v  # (..., n, d_v)
    closed = alpha @ ((p - y) @ (w_o / n_size).mT)  # (..., n, d_v)
    return derived, closed


def mutant_m28_output_block_head_alone(o, w_o, y, grad_WO):
    """negative control M28-output-block-head-alone: the block's gradient from the head's own logits: sum_i o_i (softmax(W_O^T o_i) - y_i)^T / n (derived side with autograd inputs grad_*, closed side)."""
    n_size = o.shape[-2]
    derived = grad_WO  # (..., d_v, m)
    closed = o.mT @ ((_recip(torch.exp(w_o.mT @ o.mT).sum(dim=-2))[..., :, None] * torch.exp(w_o.mT @ o.mT).mT - y) / n_size)  # (..., d_v, m)
    return derived, closed
