"""numeric.sdpa.scaled_dot_product_attention against torch's SDPA: a random sweep of every argument, per
dtype tolerances, torch.func / forward-mode AD / torch.compile / meta, and a model trained both ways."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from numeric import sdpa_sweep
from numeric.sdpa import generated_sdpa, scaled_dot_product_attention

F64, F32, F16, BF16 = torch.float64, torch.float32, torch.float16, torch.bfloat16
SWEEP = 600


def test_sweep_matches_torch_sdpa():
    """600 random calls (numeric.sdpa_sweep: every dtype, rank 2-5, broadcasting, GQA, L != S, empty L or S,
    every mask kind, large-negative rows, every scale kind): float64 within 1e-12 and float32 within 2e-5 of
    torch relative to the problem's scale; half precision within 1.5x torch's own error plus half an ulp;
    same shapes, dtypes and finiteness as torch everywhere."""
    out = sdpa_sweep.sweep(SWEEP, 2026)
    assert sum(e["cases"] for e in out.values()) == SWEEP
    for name, entry in out.items():
        assert entry["cases"] >= 100 and entry["failures"] == [], (name, entry)
    assert out["float64"]["worst"] <= 1e-12 and out["float32"]["worst"] <= 2e-5
    for name in ("float16", "bfloat16"):  # on the sweep as a whole, well inside the bound
        assert out[name]["ratios_counted"] > 50 and out[name]["median_ratio"] <= 1.0, out[name]


def test_the_sweep_rejects_a_wrong_kernel():
    """Negative control: a drop-in that ignores the scale fails the sweep in every dtype."""
    out = sdpa_sweep.sweep(80, 5, fn=sdpa_sweep.forgets_the_scale)
    assert all(len(e["failures"]) >= 1 for e in out.values()) and sum(len(e["failures"]) for e in out.values()) >= 20, out


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
