"""numeric.sdpa.scaled_dot_product_attention against torch's SDPA: a random sweep of every argument, per
dtype tolerances, torch.func / forward-mode AD / torch.compile / meta, and a model trained both ways."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from numeric.sdpa import generated_sdpa, scaled_dot_product_attention

F64, F32, F16, BF16 = torch.float64, torch.float32, torch.float16, torch.bfloat16
HALF = (F16, BF16)
# float64/float32: |ours - SDPA| relative to the largest entry of the quantity (and of SDPA's result);
# half precision: our error against a float64 computation at most 1.5x SDPA's own, plus half an ulp of
# the quantity's largest entry (the one rounding of a result that is otherwise exact).
TOL = {F64: 1e-12, F32: 2e-5}
HALF_RATIO = 1.5
SWEEP = 600


def _case(g):
    """One random call: dtype, ranks, broadcast batch dims, GQA, L != S, every mask kind, scale kinds."""
    pick = lambda seq: seq[int(torch.randint(len(seq), (1,), generator=g))]  # noqa: E731
    dtype = pick((F64, F32, F16, BF16))
    rank = pick((2, 3, 4, 4, 5))
    L, S, E, Ev = (pick((0, 1, 2, 3, 5, 8)) if i < 2 and float(torch.rand(1, generator=g)) < 0.1
                   else pick((1, 2, 3, 5, 8, 13)) for i in range(4))
    batch = [pick((1, 2, 3)) for _ in range(rank - 2)]
    gqa = rank >= 3 and float(torch.rand(1, generator=g)) < 0.3
    hq = batch[-1] * 2 if gqa else (batch[-1] if rank >= 3 else None)
    qb = batch[:-1] + [hq] if rank >= 3 else []

    def kv_batch():
        b = [x if float(torch.rand(1, generator=g)) < 0.7 else 1 for x in batch]
        return b[len(b) - pick(range(len(b) + 1)):] if not gqa else b  # fewer leading dims broadcast too

    shapes = (qb + [L, E], kv_batch() + [S, E])
    shapes += ((shapes[1][:-2] if gqa else kv_batch()) + [S, Ev],)
    if gqa and rank >= 3 and float(torch.rand(1, generator=g)) < 0.5:  # key and value heads may differ
        shapes[2][-3] = 1
    q, k, v = (torch.randn(sh, generator=g, dtype=F64).to(dtype) for sh in shapes)
    kind = pick(("none", "causal", "bool", "float", "neg-inf-row", "large-negative"))
    kw = {"enable_gqa": gqa}
    score = qb + [L, S]
    mshape = [x if float(torch.rand(1, generator=g)) < 0.6 else 1 for x in score]
    mshape = mshape[pick(range(len(mshape) - 1)):]  # leading dims may be dropped
    if kind == "causal":
        kw["is_causal"] = True
    elif kind == "bool":
        kw["attn_mask"] = torch.rand(mshape, generator=g) < 0.7
    elif kind != "none":
        mdtype = F32 if dtype in HALF and float(torch.rand(1, generator=g)) < 0.7 else dtype
        m = torch.randn(mshape, generator=g, dtype=F64)
        m = m.masked_fill(torch.rand(mshape, generator=g) < 0.2, -math.inf)
        if mshape[-2] > 0:
            fill = {"float": None, "neg-inf-row": -math.inf, "large-negative": pick((-1e5, -1e9, torch.finfo(F32).min))}
            if fill[kind] is not None:
                m[..., int(torch.randint(mshape[-2], (1,), generator=g)), :] = fill[kind]
        kw["attn_mask"] = m.to(mdtype)
    scale = pick((None, None, 0.7, -0.3, 0.0, 2, "tensor"))
    kw["scale"] = torch.tensor(0.45) if scale == "tensor" else scale
    return q, k, v, kw


def _run(fn, q, k, v, kw, u, dtype=None):
    """Output and (dq, dk, dv) of fn at inputs cast to dtype (as given when None)."""
    leaves = [t.detach().to(dtype or t.dtype).requires_grad_(True) for t in (q, k, v)]
    kwargs = dict(kw)
    if dtype is not None and kwargs.get("attn_mask") is not None and kwargs["attn_mask"].is_floating_point():
        kwargs["attn_mask"] = kwargs["attn_mask"].to(dtype)
    o = fn(*leaves, **kwargs)
    if o.numel() == 0:
        return [o.detach()] + [torch.zeros_like(t) for t in leaves]
    grads = torch.autograd.grad(o, leaves, u.to(o.dtype), allow_unused=True)
    return [o.detach()] + [torch.zeros_like(t) if d is None else d for t, d in zip(leaves, grads)]


def _scale_of(x):
    return float(x.abs().max()) if x.numel() else 0.0


def test_sweep_matches_torch_sdpa():
    g = torch.Generator().manual_seed(2026)
    worst = {d: 0.0 for d in (F64, F32)}
    ratios = {d: [] for d in HALF}
    for i in range(SWEEP):
        q, k, v, kw = _case(g)
        torch_out = F.scaled_dot_product_attention(q, k, v, **{**kw, "enable_gqa": kw["enable_gqa"]})
        u = torch.randn(torch_out.shape, generator=g, dtype=F64)
        ours = _run(scaled_dot_product_attention, q, k, v, kw, u)
        theirs = _run(F.scaled_dot_product_attention, q, k, v, kw, u)
        info = (i, q.dtype, tuple(q.shape), tuple(k.shape), tuple(v.shape),
                {a: (tuple(b.shape), b.dtype) if torch.is_tensor(b) else b for a, b in kw.items()})
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape and a.dtype == b.dtype, info
            assert bool(torch.isfinite(a).all()) == bool(torch.isfinite(b).all()), info
        # a gradient that is 0 up to rounding (one key per row: dS = 0) is compared at the problem's scale
        scale = max(_scale_of(b.double()) for b in theirs) or 1.0
        if q.dtype in TOL:
            for a, b in zip(ours, theirs):
                err = _scale_of(a.double() - b.double()) / max(_scale_of(b.double()), scale)
                assert err <= TOL[q.dtype], (info, err)
                worst[q.dtype] = max(worst[q.dtype], err)
            continue
        exact = _run(F.scaled_dot_product_attention, q, k, v, kw, u, dtype=F64)
        for a, b, r in zip(ours, theirs, exact):
            e_ours, e_torch = _scale_of(a.double() - r), _scale_of(b.double() - r)
            floor = 0.5 * torch.finfo(q.dtype).eps * _scale_of(r) + TOL[F32] * scale
            assert e_ours <= HALF_RATIO * e_torch + floor, (info, e_ours, e_torch)
            if e_torch > 0:
                ratios[q.dtype].append(e_ours / e_torch)
    for d in HALF:  # on the sweep as a whole, well inside the bound
        assert len(ratios[d]) > 50 and sorted(ratios[d])[len(ratios[d]) // 2] <= 1.0, (d, len(ratios[d]))


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("fill", [-1e5, -1e9, torch.finfo(F32).min])
def test_half_inputs_with_large_negative_float32_mask_rows_are_finite(dtype, fill):
    """The padding convention: a float32 mask whose row is all -1e9 with float16 inputs. SDPA is finite there
    (the row is uniform); so is every entry point (the mask is added in float32, not rounded to -inf)."""
    from numeric import AttentionCore, GeneratedAttention, attention_forward
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4, generator=g).to(dtype) for _ in range(3))
    mask = torch.zeros(5, 5)
    mask[2] = fill
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for got in (scaled_dot_product_attention(q, k, v, attn_mask=mask), AttentionCore.apply(q, k, v, mask, None),
                attention_forward(q, k, v, mask=mask)[1]):
        assert bool(torch.isfinite(got).all())
        assert (got.float() - want.float()).abs().max() <= 2 * torch.finfo(dtype).eps * want.float().abs().max()
    head = GeneratedAttention(4, 4, 4).to(dtype)
    assert bool(torch.isfinite(head(q, mask=mask)).all())


def test_paths_that_skipped_validation_refuse_what_sdpa_refuses():
    """AttentionCore and attention_forward used to accept a 1-D query (mixing one batch's weights with
    another's values), string/bool/1-element scales and mixed devices."""
    from numeric import AttentionCore, attention_forward
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    for call in (lambda: AttentionCore.apply(torch.randn(4), k, v, None, None),
                 lambda: attention_forward(torch.randn(4), k, v)):
        with pytest.raises(ValueError, match="q must have at least 2 dimensions"):
            call()
    for bad in ("0.5", True, torch.tensor([0.5])):
        for call in (lambda bad=bad: AttentionCore.apply(q, k, v, None, bad), lambda bad=bad: attention_forward(q, k, v, scale=bad)):
            with pytest.raises(TypeError, match="scale must be a real number"):
                call()
    meta = torch.randn(2, 5, 4, device="meta")
    for call in (lambda: AttentionCore.apply(q, meta, v, None, None), lambda: attention_forward(q, meta, v)):
        with pytest.raises(ValueError, match="is on meta but"):
            call()


def test_refusals_match_sdpa():
    """Where SDPA raises, the drop-in raises, with a message naming the argument."""
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match="query must have at least 2 dimensions"):
        scaled_dot_product_attention(torch.randn(4), k, v)
    for bad in ("0.5", True, torch.tensor([0.5])):  # SDPA reads True as 1.0; refused here (documented)
        with pytest.raises(TypeError, match="scale must be a real number"):
            scaled_dot_product_attention(q, k, v, scale=bad)
    with pytest.raises(ValueError, match="key is on meta but query is on cpu"):
        scaled_dot_product_attention(q, torch.randn(2, 5, 4, device="meta"), v)
    with pytest.raises(TypeError, match="has dtype torch.float64"):
        scaled_dot_product_attention(q, k.double(), v)
    with pytest.raises(ValueError, match="S=4 rows, expected 5"):
        scaled_dot_product_attention(q, k, v[:, :4])
    with pytest.raises(ValueError, match="attn_mask and is_causal"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(3, 5, dtype=torch.bool), is_causal=True)
    with pytest.raises(ValueError, match="enable_gqa=True: key has 2 heads"):
        scaled_dot_product_attention(torch.randn(1, 3, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 6),
                                     enable_gqa=True)
    with pytest.raises(ValueError, match="do not broadcast"):  # GQA heads without the flag, as SDPA
        scaled_dot_product_attention(torch.randn(1, 4, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 6))
    with pytest.raises(NotImplementedError, match="dropout_p=0.1: the generated kernels have no attention dropout"):
        scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    with pytest.raises(TypeError, match="is_causal must be a bool"):
        scaled_dot_product_attention(q, k, v, is_causal=1)


def test_generated_attention_saves_causal_and_scale_and_takes_the_mask_by_keyword(tmp_path):
    from numeric import GeneratedAttention
    torch.manual_seed(0)
    saved = GeneratedAttention(6, 4, 3, causal=True, scale=0.3).double()
    torch.save(saved.state_dict(), tmp_path / "head.pt")
    loaded = GeneratedAttention(6, 4, 3).double()  # built differently: not causal, default scale
    loaded.load_state_dict(torch.load(tmp_path / "head.pt", weights_only=True))
    x = torch.randn(2, 5, 6, dtype=F64)
    assert (loaded.causal, loaded.scale) == (True, 0.3)
    assert torch.equal(loaded(x), saved(x))
    with pytest.raises(TypeError, match="positional"):  # m(query, memory) cannot read memory as a mask
        saved(x, torch.ones(5, 5, dtype=torch.bool))
    bad = dict(saved.state_dict())
    bad["_extra_state"] = {"causal": "yes", "scale": 0.3}
    with pytest.raises(TypeError, match="causal must be a bool"):
        loaded.load_state_dict(bad)


def _reference(q, k, v, mask, c):
    """Plain torch forward (no fused kernel), differentiable by every transform."""
    from numeric.reference import softmax
    return softmax(c * q @ k.mT, mask) @ v


def test_torch_func_and_forward_mode_ad():
    from torch.func import grad, hessian, jacrev, jvp, vmap
    g = torch.Generator().manual_seed(1)
    q, k, v, u = (torch.randn(2, 3, 5, 4, generator=g, dtype=F64) for _ in range(4))
    m = torch.rand(5, 5, generator=g) < 0.7
    m[1] = False  # a fully masked row
    ours = lambda a, b, c: scaled_dot_product_attention(a, b, c, attn_mask=m)  # noqa: E731
    ref = lambda a, b, c: _reference(a, b, c, m, 0.5)  # noqa: E731
    close = lambda a, b: float((a - b).abs().max()) <= 1e-12 * max(1.0, float(b.abs().max()))  # noqa: E731
    loss = lambda f: lambda a, b, c: (f(a, b, c) * u).sum()  # noqa: E731
    for a, b in zip(grad(loss(ours), argnums=(0, 1, 2))(q, k, v), grad(loss(ref), argnums=(0, 1, 2))(q, k, v)):
        assert close(a, b)
    assert close(vmap(ours, in_dims=(0, 0, None))(q, k, v[0]), vmap(ref, in_dims=(0, 0, None))(q, k, v[0]))
    assert close(jacrev(ours, argnums=1)(q, k, v), jacrev(ref, argnums=1)(q, k, v))
    tangents = tuple(torch.randn(q.shape, generator=g, dtype=F64) for _ in range(3))
    assert close(jvp(ours, (q, k, v), tangents)[1], jvp(ref, (q, k, v), tangents)[1])
    assert close(hessian(lambda a: loss(ours)(a, k, v))(q[0, 0]), hessian(lambda a: loss(ref)(a, k, v))(q[0, 0]))
    import torch.autograd.forward_ad as fwAD
    want = jvp(ref, (q, k, v), tangents)[1]
    with fwAD.dual_level():
        out = ours(fwAD.make_dual(q, tangents[0]), fwAD.make_dual(k, tangents[1]), fwAD.make_dual(v, tangents[2]))
        assert close(fwAD.unpack_dual(out).tangent, want)


def test_attention_core_composes_too():
    from torch.func import grad, jvp, vmap

    from numeric import AttentionCore
    g = torch.Generator().manual_seed(2)
    q, k, v, u = (torch.randn(3, 4, 2, generator=g, dtype=F64) for _ in range(4))
    m = torch.ones(4, 4, dtype=torch.bool).tril()
    core = lambda a, b, c: AttentionCore.apply(a, b, c, m, 0.8)  # noqa: E731
    ref = lambda a, b, c: _reference(a, b, c, m, 0.8)  # noqa: E731
    for a, b in zip(grad(lambda *x: (core(*x) * u).sum(), argnums=(0, 1, 2))(q, k, v),
                    grad(lambda *x: (ref(*x) * u).sum(), argnums=(0, 1, 2))(q, k, v)):
        assert torch.allclose(a, b, rtol=0, atol=1e-12)
    assert torch.allclose(vmap(core)(q, k, v), ref(q, k, v), rtol=0, atol=1e-12)
    t = (u, u.flip(0), u.flip(1))
    assert torch.allclose(jvp(core, (q, k, v), t)[1], jvp(ref, (q, k, v), t)[1], rtol=0, atol=1e-12)


def test_meta_device_and_no_graph_breaks():
    """No value is read on the host: the meta device works, and torch.compile traces the kernels in one graph
    (forward and backward, every mask kind) with no graph break."""
    import torch._dynamo as dynamo
    meta = torch.randn(2, 3, 5, 4, device="meta")
    assert scaled_dot_product_attention(meta, meta, meta, is_causal=True).shape == (2, 3, 5, 4)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g, requires_grad=True) for _ in range(3))
    masks = {"none": {}, "causal": {"is_causal": True}, "bool": {"attn_mask": torch.rand(5, 5, generator=g) < 0.6},
             "float": {"attn_mask": torch.randn(5, 5, generator=g).masked_fill(torch.eye(5, dtype=torch.bool), -math.inf)},
             "scale tensor": {"scale": torch.tensor(0.3)}}
    breaks = {}
    for name, kw in masks.items():
        fn = lambda a, b, c, kw=kw: scaled_dot_product_attention(a, b, c, **kw).square().sum()  # noqa: E731
        breaks[name] = dynamo.explain(fn)(q, k, v).graph_break_count
        dynamo.reset()
        compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
        got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
        want = torch.autograd.grad(fn(q, k, v), (q, k, v))
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, want)), name
    assert breaks == dict.fromkeys(masks, 0), breaks


def _encoder(seed):
    torch.manual_seed(seed)
    return nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, dtype=F64)


def test_a_transformer_layer_trains_the_same_on_the_generated_sdpa():
    """nn.TransformerEncoderLayer trained 5 SGD steps with torch's SDPA and with the generated one (routed by
    generated_sdpa()): every parameter agrees to float64 rounding, and the generated kernels really ran."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 7, 16, generator=g, dtype=F64)
    mask = nn.Transformer.generate_square_subsequent_mask(7, dtype=F64)
    layers = [_encoder(0), _encoder(0)]
    calls = []
    import numeric.sdpa as sdpa_module
    original = sdpa_module.Attention.forward
    for i, layer in enumerate(layers):
        opt = torch.optim.SGD(layer.parameters(), lr=0.1)
        for _ in range(5):
            if i:
                with generated_sdpa():
                    sdpa_module.AttentionJvp.forward = staticmethod(lambda *a: calls.append(1) or original(*a))
                    try:
                        out = layer(x, src_mask=mask, is_causal=True)
                    finally:
                        sdpa_module.AttentionJvp.forward = original
            else:
                out = layer(x, src_mask=mask, is_causal=True)
            out.square().mean().backward()
            opt.step()
            opt.zero_grad()
    assert len(calls) == 5
    assert F.scaled_dot_product_attention is sdpa_module.TORCH_SDPA  # restored
    for (name, a), b in zip(layers[0].named_parameters(), layers[1].parameters()):
        assert float((a - b).abs().max()) <= 1e-12 * float(a.abs().max()), name


def test_the_router_catches_sdpa_imported_under_another_name():
    from torch._C._nn import scaled_dot_product_attention as imported
    q = torch.randn(2, 3, 4)
    with generated_sdpa():
        with pytest.raises(NotImplementedError, match="no attention dropout"):  # proof that ours ran
            imported(q, q, q, dropout_p=0.5)
    assert imported(q, q, q, dropout_p=0.0).shape == (2, 3, 4)
