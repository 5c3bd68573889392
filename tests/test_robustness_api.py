"""The torch API and module against scaled_dot_product_attention (SDPA) + autograd: double backward,
SDPA's mask and scale semantics, broadcast batch dims, and named errors for every bad input."""
import math
import random

import numpy as np
import pytest
import torch

import numeric
from numeric import attention_backward, attention_forward, attention_loss_backward
from numeric.agreement import TOLERANCE, rel_error
from numeric.module import AttentionCore, AttentionHead, GeneratedAttention
from numeric.validate import scale as validate_scale

torch.set_num_threads(1)
F = torch.nn.functional
F64 = torch.float64
INF = float("inf")


def sdpa(q, k, v, mask=None, scale=None):
    if torch.is_tensor(mask) and mask.dim() < 2:  # SDPA documents any broadcastable mask, but its CPU flash
        # backend (4-D inputs) raises IndexError below 2 dims; the same mask viewed as (1, S) is equal
        mask = mask.reshape((1,) * (2 - mask.dim()) + tuple(mask.shape))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def leaves(*ts):
    return [t.detach().clone().requires_grad_(True) for t in ts]


def sdpa_grads(q, k, v, u, mask=None, scale=None):
    """o, dQ, dK, dV (and d mask for a float mask) by autograd through SDPA, L = <u, o>."""
    q, k, v = leaves(q, k, v)
    m = leaves(mask)[0] if mask is not None and mask.is_floating_point() else mask
    o = sdpa(q, k, v, m, scale)
    (o * u).sum().backward()
    return o.detach(), q.grad, k.grad, v.grad, (m.grad if m is not None and m.is_floating_point() else None)


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


def additive(mask_bool, dtype=F64):
    """A bool mask as SDPA's additive float mask: 0 where allowed, -inf where blocked."""
    return torch.zeros(mask_bool.shape, dtype=dtype).masked_fill(~mask_bool, -INF)


def qkvu(batch=(2,), L=4, S=5, E=3, Ev=2, dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch + (L, E), generator=g, dtype=dtype)
    k = torch.randn(batch + (S, E), generator=g, dtype=dtype)
    v = torch.randn(batch + (S, Ev), generator=g, dtype=dtype)
    u = torch.randn(batch + (L, Ev), generator=g, dtype=dtype)
    return q, k, v, u


def head_inputs(seed=0, b=2, n=5, d=4, d_k=3, d_v=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, d, generator=g, dtype=F64)
    ws = [torch.randn(d, d_k, generator=g, dtype=F64) * 0.7, torch.randn(d, d_k, generator=g, dtype=F64) * 0.7,
          torch.randn(d, d_v, generator=g, dtype=F64)]
    return x, ws


def dead_row_mask(n=5, row=2):
    m = causal(n)
    m[row] = False
    return m


def float_mask(n=5, seed=1):
    """Additive: finite values, scattered -inf, and row 1 fully blocked."""
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(n, n, generator=g, dtype=F64)
    m = m.masked_fill(torch.rand(n, n, generator=g) < 0.3, -INF)
    m[:, 0] = 0.25
    m[1] = -INF
    return m


# -- 1. double backward -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["none", "causal", "dead-row", "float"])
def test_gradgradcheck_attention_head(kind):
    x, ws = head_inputs(n=4, d=3, d_k=2, d_v=2)
    mask = {"none": None, "causal": causal(4), "dead-row": dead_row_mask(4, 1), "float": float_mask(4)}[kind]
    args = leaves(x, *ws)
    if kind == "float":  # the additive mask is an input too: its gradient is dS
        args.append(leaves(mask)[0])
        fn = lambda a, b, c, d, m: AttentionHead.apply(a, b, c, d, m, -0.6)  # noqa: E731
    else:
        fn = lambda a, b, c, d: AttentionHead.apply(a, b, c, d, mask, 0.8)  # noqa: E731
    assert torch.autograd.gradcheck(fn, tuple(args))
    assert torch.autograd.gradgradcheck(fn, tuple(args))


def test_gradgradcheck_core_broadcast_cross_attention():
    q, k, v, _ = qkvu(batch=(2, 1), L=3, S=4, E=2, Ev=2)
    k, v = k[:1, 0], v[0]  # k (4, 2) and v (1, 4, 2) broadcast against q (2, 1, 3, 2)
    mask = torch.tensor([True, False, True, True])  # (S,): broadcast over rows
    fn = lambda a, b, c: AttentionCore.apply(a, b, c, mask, None)  # noqa: E731
    assert torch.autograd.gradgradcheck(fn, tuple(leaves(q, k, v)))


@pytest.mark.parametrize("mask", [None, "dead-row", "float"])
def test_gradgradcheck_functional_api(mask):
    q, k, v, u = qkvu(batch=(2,), L=3, S=4, E=2, Ev=2)
    m = {None: None, "dead-row": dead_row_mask(4, 1)[:3], "float": float_mask(4)[:3]}[mask]
    fwd = lambda a, b, c: attention_forward(a, b, c, mask=m, scale=0.9)[1]  # noqa: E731
    assert torch.autograd.gradgradcheck(fwd, tuple(leaves(q, k, v)))
    # the gradients of attention_backward are functions of q, k, v, u: their derivatives are the
    # second derivatives of attention
    bwd = lambda a, b, c, d: attention_backward(a, b, c, d, mask=m, scale=0.9)[4:]  # noqa: E731
    assert torch.autograd.gradcheck(bwd, tuple(leaves(q, k, v, u)))


def _penalty_step(head, x, target, mask, lam, ref):
    """One SGD step on loss + lam * |d loss / dx|^2; ref=True uses SDPA + autograd on the same weights."""
    x = x.clone().requires_grad_(True)
    if ref:
        q, k, v = (x @ w for w in (head.w_q, head.w_k, head.w_v))
        m = mask
        if head.causal:
            m = causal(x.shape[-2]) if m is None else (m & causal(x.shape[-2]) if m.dtype == torch.bool
                                                       else m.masked_fill(~causal(x.shape[-2]), -INF))
        o = sdpa(q, k, v, m, head.scale)
    else:
        o = head(x, mask=mask)
    loss = ((o - target) ** 2).sum()
    (gx,) = torch.autograd.grad(loss, x, create_graph=True)
    total = loss + lam * (gx ** 2).sum()
    head.zero_grad()
    total.backward()
    with torch.no_grad():
        for p in head.parameters():
            p -= 0.05 * p.grad
    return float(total.detach())


@pytest.mark.parametrize("causal_, mask", [(True, None), (False, "dead-row"), (True, "float"), (False, "float")])
def test_gradient_penalty_training_matches_sdpa(causal_, mask):
    torch.manual_seed(3)
    ours = GeneratedAttention(4, 3, 2, causal=causal_, scale=0.8).double()
    ref = GeneratedAttention(4, 3, 2, causal=causal_, scale=0.8).double()
    ref.load_state_dict(ours.state_dict())
    x, _ = head_inputs(seed=4)
    target = torch.randn(2, 5, 2, dtype=F64)
    m = {None: None, "dead-row": dead_row_mask(), "float": float_mask()}[mask]
    for _ in range(3):
        lo = _penalty_step(ours, x, target, m, 0.3, ref=False)
        lr = _penalty_step(ref, x, target, m, 0.3, ref=True)
        assert abs(lo - lr) <= 1e-10 * abs(lr)
    for (name, p), r in zip(ours.named_parameters(), ref.parameters()):
        assert rel_error(p.detach(), r.detach()) <= 1e-10, name


def test_second_derivative_by_w_v_is_exact():
    """The reported case: d/dW_V of a gradient penalty, against SDPA + autograd."""
    x, ws = head_inputs(seed=7)
    ours, ref = leaves(*ws), leaves(*ws)
    xo, xr = leaves(x, x)
    gx_o, = torch.autograd.grad(AttentionHead.apply(xo, *ours, causal(5), 0.5).pow(2).sum(), xo, create_graph=True)
    gx_r, = torch.autograd.grad(sdpa(xr @ ref[0], xr @ ref[1], xr @ ref[2], causal(5), 0.5).pow(2).sum(), xr,
                                create_graph=True)
    assert rel_error(gx_o.detach(), gx_r.detach()) <= 1e-12
    (d_o,) = torch.autograd.grad(gx_o.pow(2).sum(), ours[2])
    (d_r,) = torch.autograd.grad(gx_r.pow(2).sum(), ref[2])
    assert rel_error(d_o, d_r) <= 1e-10


def test_functional_gradient_penalty_matches_sdpa():
    q, k, v, u = qkvu(batch=(2, 3), L=4, S=5, E=3, Ev=2)
    m = float_mask(5)[:4]
    lq, lk, lv, lu = leaves(q, k, v, u)
    g = attention_backward(lq, lk, lv, lu, mask=m, scale=-0.7)
    (g.dQ.pow(2).sum() + g.dK.pow(2).sum() + (g.dV * lv).sum()).backward()
    rq, rk, rv, ru = leaves(q, k, v, u)
    o = sdpa(rq, rk, rv, m, -0.7)
    dq, dk, dv = torch.autograd.grad((o * ru).sum(), (rq, rk, rv), create_graph=True)
    (dq.pow(2).sum() + dk.pow(2).sum() + (dv * rv).sum()).backward()
    for a, b in ((g.dQ, dq), (g.dK, dk), (g.dV, dv)):
        assert rel_error(a.detach(), b.detach()) <= 1e-12
    for a, b in ((lq, rq), (lk, rk), (lv, rv), (lu, ru)):
        assert rel_error(a.grad, b.grad) <= 1e-10


def test_loss_variant_is_differentiable_with_a_dead_row():
    x, ws = head_inputs(seed=2)
    w_o = torch.randn(2, 3, dtype=F64)
    targets = torch.randint(0, 3, (2, 5), generator=torch.Generator().manual_seed(0))
    args = leaves(*ws, w_o)
    out = attention_loss_backward(x, *args, targets, mask=dead_row_mask())
    (out.loss + out.dW_V.pow(2).sum()).backward()
    assert all(bool(torch.isfinite(a.grad).all()) for a in args)


def test_first_order_backward_does_not_recompute(monkeypatch):
    """Without create_graph the module's backward reuses the forward's alpha (no extra softmax)."""
    import numeric.module as module

    calls = []
    original = module.scores_softmax
    monkeypatch.setattr(module, "scores_softmax", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    head = GeneratedAttention(4, 3, 2, causal=True).double()
    x, _ = head_inputs()
    head(x).sum().backward()
    assert calls == []
    (gx,) = torch.autograd.grad(head(x.requires_grad_(True)).sum(), x, create_graph=True)
    assert calls == [1]


# -- 2. SDPA's mask and scale semantics -----------------------------------------------------------
@pytest.mark.parametrize("causal_", [False, True])
def test_float_mask_is_additive_in_the_module(causal_):
    """-inf blocks and finite values are added (it was read as `mask != 0`: -inf allowed)."""
    head = GeneratedAttention(4, 3, 2, causal=causal_).double()
    x, _ = head_inputs()
    m = float_mask()
    q, k, v = (x @ w for w in (head.w_q, head.w_k, head.w_v))
    ref_mask = m.masked_fill(~causal(5), -INF) if causal_ else m
    assert rel_error(head(x, mask=m).detach(), sdpa(q, k, v, ref_mask, head.scale).detach()) <= 1e-12
    bool_mask = ~torch.isneginf(m)  # the same blocking as a bool mask, without the finite bias
    want = sdpa(q, k, v, bool_mask & causal(5) if causal_ else bool_mask, head.scale)
    assert rel_error(head(x, mask=additive(bool_mask)).detach(), want.detach()) <= 1e-12


def test_float_mask_in_the_api_matches_sdpa_and_its_gradient():
    q, k, v, u = qkvu(L=5, S=5)
    m = float_mask().requires_grad_(True)
    o, dq, dk, dv, dm = sdpa_grads(q, k, v, u, m)
    g = attention_backward(q, k, v, u, mask=m.detach())
    assert rel_error(g.alpha @ v, o) <= 1e-12
    for a, b in ((g.dQ, dq), (g.dK, dk), (g.dV, dv), (g.dS.sum_to_size(m.shape), dm)):
        assert rel_error(a, b) <= 1e-12
    assert float(g.alpha[:, 1].abs().max()) == 0.0  # the fully blocked row


def test_float32_mask_with_float64_inputs_is_accepted_as_sdpa():
    q, k, v, u = qkvu(L=5, S=5)
    m = float_mask().float()
    assert rel_error(attention_backward(q, k, v, u, mask=m).dQ, sdpa_grads(q, k, v, u, m)[1]) <= 1e-12


@pytest.mark.parametrize("scale", [0.0, 0, -1.5, np.float32(0.3), np.float64(-0.2), np.int64(2), torch.tensor(0.4)],
                         ids=lambda s: f"{type(s).__name__}({float(s)})")
@pytest.mark.parametrize("validate_inputs", [True, False])
def test_scale_any_real(scale, validate_inputs):
    q, k, v, u = qkvu()
    o, dq, dk, dv, _ = sdpa_grads(q, k, v, u, None, scale)
    g = attention_backward(q, k, v, u, scale=scale, validate_inputs=validate_inputs)
    assert rel_error(g.alpha @ v, o) <= 1e-12
    for a, b in ((g.dQ, dq), (g.dK, dk), (g.dV, dv)):
        assert rel_error(a, b) <= 1e-12
    assert rel_error(attention_forward(q, k, v, scale=scale)[1], o) <= 1e-12


def test_scale_zero_is_uniform_attention_unvalidated():
    """scale=0.0 stays 0 on the unvalidated path (not the default 1/sqrt(d_k)): uniform attention."""
    q, k, v, u = qkvu(L=3, S=4)
    g = attention_backward(q, k, v, u, scale=0.0, validate_inputs=False)
    assert float((g.alpha - 0.25).abs().max()) == 0.0
    head = GeneratedAttention(4, 3, 2, scale=0.0).double()
    x, _ = head_inputs()
    q, k, v = (x @ w for w in (head.w_q, head.w_k, head.w_v))
    assert rel_error(head(x).detach(), sdpa(q, k, v, None, 0.0).detach()) <= 1e-12


def test_module_scale_and_causal_with_masks():
    x, _ = head_inputs()
    for scale in (None, -0.5, np.float32(0.25), torch.tensor(0.0)):
        head = GeneratedAttention(4, 3, 2, causal=True, scale=scale).double()
        q, k, v = (x @ w for w in (head.w_q, head.w_k, head.w_v))
        want = sdpa(q, k, v, dead_row_mask() & causal(5), None if scale is None else float(scale))
        assert rel_error(head(x, mask=dead_row_mask()).detach(), want.detach()) <= 1e-12
    with pytest.raises(TypeError, match="scale must be a real number"):
        GeneratedAttention(4, 3, 2, scale="0.5")
    with pytest.raises(ValueError, match="scale must be finite"):
        GeneratedAttention(4, 3, 2, scale=INF)


def test_broadcast_batch_dims_match_sdpa():
    q, k, v, _ = qkvu(batch=(3, 2), L=4, S=5)
    k, v = k[:1], v[0]  # (1, 2, 5, 3) and (2, 5, 2) against q (3, 2, 4, 3)
    u = torch.randn(3, 2, 4, 2, dtype=F64)
    mask = torch.rand(2, 1, 5, generator=torch.Generator().manual_seed(0)) < 0.7  # (2, 1, S)
    o, dq, dk, dv, _ = sdpa_grads(q, k, v, u, mask)
    g = attention_backward(q, k, v, u, mask=mask)
    assert (g.dQ.shape, g.dK.shape, g.dV.shape) == (q.shape, k.shape, v.shape)
    for a, b in ((g.alpha @ v, o), (g.dQ, dq), (g.dK, dk), (g.dV, dv)):
        assert rel_error(a, b) <= 1e-12
    lq, lk, lv = leaves(q, k, v)
    AttentionCore.apply(lq, lk, lv, mask, None).backward(u)
    for a, b in ((lq.grad, dq), (lk.grad, dk), (lv.grad, dv)):
        assert rel_error(a, b) <= 1e-12


# -- 3. errors, each named; values where SDPA returns one -----------------------------------------
def test_fully_masked_row_backward_through_forward_and_backward():
    """`requires_grad` inputs and a fully masked row: backward runs (no in-place modification of a saved
    tensor); the rows are 0, as SDPA returns, with zero gradients."""
    q, k, v, u = qkvu(L=5, S=5)
    m = dead_row_mask()
    lq, lk, lv = leaves(q, k, v)
    alpha, o = attention_forward(lq, lk, lv, mask=m)
    (o * u).sum().backward()
    ref = sdpa_grads(q, k, v, u, m)
    assert rel_error(o.detach(), ref[0]) <= 1e-12 and float(o.detach()[:, 2].abs().max()) == 0.0
    for a, b in ((lq.grad, ref[1]), (lk.grad, ref[2]), (lv.grad, ref[3])):
        assert rel_error(a, b) <= 1e-12
    lq, lk, lv = leaves(q, k, v)
    g = attention_backward(lq, lk, lv, u, mask=m)
    (g.dQ.sum() + g.dK.sum() + g.dV.sum()).backward()
    assert all(bool(torch.isfinite(t.grad).all()) for t in (lq, lk, lv))


def test_zero_width_and_empty_dims_match_sdpa():
    for L, S, E, Ev in ((3, 4, 0, 2), (0, 4, 3, 2), (3, 0, 3, 2), (3, 4, 3, 0)):
        q, k, v, u = qkvu(L=L, S=S, E=E, Ev=Ev)
        o, dq, dk, dv, _ = sdpa_grads(q, k, v, u)
        g = attention_backward(q, k, v, u)
        for a, b in ((g.alpha @ v, o), (g.dQ, dq), (g.dK, dk), (g.dV, dv)):
            assert a.shape == b.shape and rel_error(a, b) <= 1e-12, (L, S, E, Ev)


@pytest.mark.parametrize("make,exc,pattern", [
    (lambda q: torch.ones(4, 2, 4, 5, dtype=torch.bool), ValueError,
     r"mask of shape \(4, 2, 4, 5\) does not broadcast to the score shape \(\.\.\., L, S\) = \(2, 4, 5\).*no extra leading dims"),
    (lambda q: torch.ones(4, 5, dtype=torch.uint8), TypeError, r"mask must be a bool tensor .* got dtype torch.uint8 \(shape \(4, 5\)\)"),
    (lambda q: torch.ones(4, 5, dtype=torch.int64), TypeError, r"integer masks are refused"),
    (lambda q: torch.zeros(4, 5, dtype=torch.float16), TypeError, r"a float mask must be float32 or the inputs' dtype torch.float64"),
    (lambda q: torch.ones(4, 5, dtype=torch.bool).numpy(), TypeError, r"mask must be a torch.Tensor"),
])
def test_bad_masks_are_named_where_sdpa_also_refuses(make, exc, pattern):
    q, k, v, u = qkvu()
    mask = make(q)
    with pytest.raises((RuntimeError, TypeError)):  # SDPA refuses these too
        sdpa(q, k, v, mask)
    with pytest.raises(exc, match=pattern):
        attention_backward(q, k, v, u, mask=mask)
    if torch.is_tensor(mask) and mask.dim() == 2:  # also on the unvalidated path (dtype is checked always)
        with pytest.raises(exc, match=pattern):
            attention_backward(q, k, v, u, mask=mask, validate_inputs=False)


def test_bad_masks_are_named_by_the_module():
    head = GeneratedAttention(3, 2, 2).double()
    x = torch.randn(2, 4, 3, dtype=F64)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 2, 4, 4\) does not broadcast to the score shape .* = \(2, 4, 4\)"):
        head(x, mask=torch.ones(3, 2, 4, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"got dtype torch.uint8 \(shape \(4, 4\)\)"):
        head(x, mask=torch.ones(4, 4, dtype=torch.uint8))
    with pytest.raises(TypeError, match="a float mask must be float32 or the inputs' dtype torch.float64"):
        head(x, mask=torch.zeros(4, 4, dtype=torch.bfloat16))


@pytest.mark.parametrize("value,name", [(float("nan"), "NaN"), (INF, r"\+inf")])
def test_float_mask_nan_or_plus_inf_is_refused(value, name):
    q, k, v, u = qkvu(L=5, S=5)
    m = float_mask()
    m[0, 0] = value
    with pytest.raises(ValueError, match=f"mask contains {name} \\(shape \\(5, 5\\)\\)"):
        attention_backward(q, k, v, u, mask=m)


@pytest.mark.parametrize("scale,exc,pattern", [
    (float("nan"), ValueError, "scale must be finite, got nan"),
    (-INF, ValueError, "scale must be finite, got -inf"),
    ("0.5", TypeError, "scale must be a real number .* got '0.5' of type str"),
    (torch.tensor([0.5]), TypeError, r"got a torch.float32 tensor of shape \(1,\)"),
    (1j, TypeError, "got 1j of type complex"),
    (True, TypeError, "got True of type bool"),
])
def test_bad_scales_are_named(scale, exc, pattern):
    q, k, v, u = qkvu()
    with pytest.raises(exc, match=pattern):
        attention_backward(q, k, v, u, scale=scale)


def test_loss_variant_edge_inputs():
    x, ws = head_inputs(seed=5)
    w_o = torch.randn(2, 3, dtype=F64)
    t64 = torch.randint(0, 3, (2, 5), generator=torch.Generator().manual_seed(1))
    want = attention_loss_backward(x, *ws, w_o, t64)
    for dtype in (torch.int32, torch.int16, torch.uint8):  # any integer dtype of targets
        got = attention_loss_backward(x, *ws, w_o, t64.to(dtype))
        assert float((got.loss - want.loss).abs()) == 0.0 and torch.equal(got.dW_Q, want.dW_Q)
    for validate_inputs in (True, False):  # n = 0: a named error, not a division by zero
        with pytest.raises(ValueError, match=r"x must hold at least one position \(n >= 1\).*shape \(2, 0, 4\)"):
            attention_loss_backward(x[:, :0], *ws, w_o, t64[:, :0], validate_inputs=validate_inputs)
    with pytest.raises(TypeError, match="targets must be an integer tensor"):
        attention_loss_backward(x, *ws, w_o, t64.bool())
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5, 5\) does not broadcast to the score shape"):
        attention_loss_backward(x, *ws, w_o, t64, mask=torch.ones(3, 5, 5, dtype=torch.bool))
    m = float_mask()
    got = attention_loss_backward(x, *ws, w_o, t64, mask=m)
    lw = leaves(*ws, w_o)
    o = sdpa(x @ lw[0], x @ lw[1], x @ lw[2], m, 3 ** -0.5)
    loss = F.cross_entropy((o @ lw[3]).reshape(-1, 3), t64.reshape(-1), reduction="none").reshape(2, 5).mean(-1).sum()
    loss.backward()
    assert abs(float(got.loss - loss.detach())) <= 1e-12 * float(loss.detach())
    for a, w in zip((got.dW_Q, got.dW_K, got.dW_V, got.dW_O), lw):
        assert rel_error(a, w.grad) <= 1e-12


def test_half_inputs_with_a_half_float_mask():
    q, k, v, u = (t.to(torch.bfloat16) for t in qkvu(L=5, S=5))
    m = float_mask().to(torch.bfloat16)
    g = attention_backward(q, k, v, u, mask=m)
    ref = sdpa_grads(*(t.double() for t in (q, k, v, u)), m.double())
    assert g.dQ.dtype == torch.bfloat16
    for a, b in ((g.dQ, ref[1]), (g.dK, ref[2]), (g.dV, ref[3])):
        assert rel_error(a, b) <= TOLERANCE[torch.bfloat16]


# -- 4. property test: random shapes, masks, scales and dtypes against SDPA + autograd ------------
# Errors are relative to the larger of the largest reference entry and the quantity's natural scale:
# max|v| for o, |c| max|B| max|k| for dQ (B = u v^T), |c| max|B| max|q| for dK, max|u| for dV,
# max|B| for a float mask's gradient dS. (Relative to the largest entry alone the comparison is
# ill-conditioned where dS = alpha (B - baseline) cancels, e.g. a row with one allowed key, where
# dS is 0 and both sides are rounding noise; torch's own float32 SDPA shows 1.4e-4 on such draws.)
# float64: 1e-10. float32: 2e-5 against a float64 SDPA reference from the same float32 inputs (unit
# roundoff 6e-8; sums over S <= 7, E <= 5 and exp of scores with |c| <= 2 lose under 2 digits; x ~3).
PROPERTY_TOL = {F64: 1e-10, torch.float32: 2e-5}
DRAWS = 1000  # ~3 s on one core


def _sub_batch(rng, batch):
    """A batch shape that broadcasts to `batch`: some leading dims dropped, some sizes set to 1."""
    b = list(batch[rng.randint(0, len(batch)):] if rng.random() < 0.4 else batch)
    return tuple(1 if rng.random() < 0.3 else s for s in b)


def _draw(rng, g):
    batch = tuple(rng.randint(1, 3) for _ in range(rng.randint(0, 3)))
    L, S, E, Ev = rng.randint(1, 6), rng.randint(1, 7), rng.randint(1, 5), rng.randint(1, 5)
    dtype = rng.choice([F64, F64, torch.float32])
    qb, kb, vb = _sub_batch(rng, batch), _sub_batch(rng, batch), _sub_batch(rng, batch)
    full = tuple(torch.broadcast_shapes(qb, kb, vb))
    score = tuple(torch.broadcast_shapes(qb, kb)) + (L, S)
    q = torch.randn(qb + (L, E), generator=g, dtype=dtype)
    k = torch.randn(kb + (S, E), generator=g, dtype=dtype)
    v = torch.randn(vb + (S, Ev), generator=g, dtype=dtype)
    u = torch.randn(full + (L, Ev), generator=g, dtype=dtype)
    kind = rng.choice(["none", "bool", "float"])
    mask = None
    if kind != "none":
        shape = list(_sub_batch(rng, score[:-2])) + [1 if rng.random() < 0.2 else L, 1 if rng.random() < 0.15 else S]
        if rng.random() < 0.15:
            shape = shape[-1:]  # a (S,) or (1,) mask
        blocked = torch.rand(shape, generator=g) < 0.3
        if rng.random() < 0.3 and len(shape) >= 2:
            blocked[..., 0, :] = True  # a fully masked row
        if kind == "bool":
            mask = ~blocked
        else:
            mdtype = rng.choice([dtype, torch.float32])
            mask = torch.randn(shape, generator=g, dtype=mdtype).masked_fill(blocked, -INF)
            mask.requires_grad_(rng.random() < 0.5)
    scale = rng.choice([None, 0.0, -rng.uniform(0.1, 2.0), rng.uniform(0.1, 2.0), np.float32(rng.uniform(-2, 2)),
                        np.float64(rng.uniform(-2, 2)), torch.tensor(rng.uniform(-2, 2)), rng.randint(-2, 2)])
    return q, k, v, u, mask, scale, dtype


def _reference(q, k, v, u, mask, scale):
    """SDPA + autograd in float64 from the same inputs: o and the gradients of <u, o>."""
    m = None if mask is None else (mask.detach().double() if mask.is_floating_point() else mask)
    o, dq, dk, dv, dm = sdpa_grads(*(t.double() for t in (q, k, v, u)), m, None if scale is None else float(scale))
    return o, dq, dk, dv, (dm if mask is not None and mask.requires_grad else None)


def _err_floor(ours, ref, floor):
    """rel_error (relative to the largest reference entry, absolute when it is 0) with the scale at
    least `floor`."""
    ours, ref = ours.double(), ref.double()
    if ref.numel() == 0:
        return 0.0
    return float((ours - ref).abs().max()) / (max(float(ref.abs().max()), floor) or 1.0)


def _errors(ours, ref, floors):
    """Errors of (o, dQ, dK, dV[, dmask]) against the reference, each with its floor."""
    return [_err_floor(a, r, f) for a, r, f in zip(ours, ref, floors) if r is not None]


def test_property_api_and_module_match_sdpa():
    rng, g = random.Random(20240611), torch.Generator().manual_seed(20240611)
    worst = {F64: 0.0, torch.float32: 0.0}
    for draw in range(DRAWS):
        q, k, v, u, mask, scale, dtype = _draw(rng, g)
        ref = _reference(q, k, v, u, mask, scale)
        info = (draw, tuple(q.shape), tuple(k.shape), tuple(v.shape), tuple(u.shape),
                None if mask is None else (mask.dtype, tuple(mask.shape), mask.requires_grad), scale, dtype)
        m0 = None if mask is None else mask.detach()
        gr = attention_backward(q, k, v, u, mask=m0, scale=scale)  # the functional API, validated
        c, big_b = abs(validate_scale(scale, q.shape[-1])), float(gr.B.abs().max())
        natural = [float(v.abs().max()), c * big_b * float(k.abs().max()), c * big_b * float(q.abs().max()),
                   float(u.abs().max())]
        # a float mask's gradient: a mask dim broadcast over keys has gradient sum_j dS_ij = 0 (C6), all
        # rounding noise, measured against the scale of dS; a float32 mask's gradient is float32
        floors = natural + [big_b]
        got = [[gr.alpha @ v, gr.dQ, gr.dK, gr.dV, gr.dS.sum_to_size(mask.shape) if ref[4] is not None else None]]
        for run in ("forward", "function"):  # attention_forward's graph path, the autograd Function
            lq, lk, lv = leaves(q, k, v)
            lm = None if mask is None else (leaves(mask)[0] if mask.requires_grad else mask)
            o = (attention_forward(lq, lk, lv, mask=lm, scale=scale)[1] if run == "forward"
                 else AttentionCore.apply(lq, lk, lv, lm, scale))
            (o * u).sum().backward()
            got.append([o.detach(), lq.grad, lk.grad, lv.grad, lm.grad if ref[4] is not None else None])
        errs = [e for ours in got for e in _errors(ours[:4], ref[:4], floors[:4])]
        mask_errs = [e for ours in got for e in _errors(ours[4:], ref[4:], floors[4:])]
        assert max(errs) <= PROPERTY_TOL[dtype], (info, errs)
        assert max(mask_errs, default=0.0) <= PROPERTY_TOL[mask.dtype if mask_errs else dtype], (info, mask_errs)
        worst[dtype] = max(worst[dtype], max(errs))
        if draw % 4 == 0:
            _module_matches_sdpa(rng, g)
    assert worst[F64] > 0.0  # the comparison is not vacuous
    print(f"worst relative error over {DRAWS} draws: {worst}")


def _module_matches_sdpa(rng, g, dtype=F64):
    """GeneratedAttention (self-attention over x) with a random mask, scale and causal flag, in float64
    (its float32 path runs the kernels and the autograd Function checked above in float32)."""
    batch = tuple(rng.randint(1, 3) for _ in range(rng.randint(0, 2)))
    n, d, d_k, d_v = rng.randint(1, 6), rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 4)
    is_causal = rng.random() < 0.5
    scale = rng.choice([None, 0.0, -0.8, np.float32(1.3), torch.tensor(0.6)])
    head = GeneratedAttention(d, d_k, d_v, causal=is_causal, scale=scale, init_std=0.8).to(dtype)
    x = torch.randn(batch + (n, d), generator=g, dtype=dtype)
    kind = rng.choice(["none", "bool", "float"])
    mask = None
    if kind != "none":
        shape = (_sub_batch(rng, batch) if batch else ()) + (n, n)
        blocked = torch.rand(shape, generator=g) < 0.3
        mask = ~blocked if kind == "bool" else torch.randn(shape, generator=g, dtype=dtype).masked_fill(blocked, -INF)
    # reference on float64 copies of the same weights
    xr = leaves(x.double())[0]
    wr = leaves(*(p.double() for p in (head.w_q, head.w_k, head.w_v)))
    m = None if mask is None else (mask.double() if mask.is_floating_point() else mask)
    if is_causal:
        c = causal(n)
        m = c if m is None else (m & c if m.dtype == torch.bool else m.masked_fill(~c, -INF))
    o_ref = sdpa(xr @ wr[0], xr @ wr[1], xr @ wr[2], m, head.scale)
    t = torch.randn(o_ref.shape, generator=g, dtype=F64)
    (o_ref * t).sum().backward()
    xo = leaves(x)[0]
    o = head(xo, mask=mask)
    (o * t.to(dtype)).sum().backward()
    # gradients relative to the largest gradient entry of the head (x and the three weights): a weight
    # whose gradient is 0 up to rounding (one allowed key per row: dS = 0) is compared at that scale
    ours, refs = [xo.grad, head.w_q.grad, head.w_k.grad, head.w_v.grad], [xr.grad] + [r.grad for r in wr]
    floor = max(float(r.abs().max()) for r in refs if r.numel())
    errs = [rel_error(o.detach(), o_ref.detach())] + [_err_floor(a, r, floor) for a, r in zip(ours, refs)]
    assert max(errs) <= PROPERTY_TOL[dtype], (batch, n, d, d_k, d_v, is_causal, scale, kind, errs)


def test_numeric_exports_are_unchanged():
    assert {"attention_backward", "attention_forward", "attention_loss_backward", "GeneratedAttention",
            "AttentionCore", "AttentionHead"} <= set(numeric.__all__)
    assert math.isclose(GeneratedAttention(4, 9, 2).scale, 1 / 3)
