"""numeric.watch: the recorded closed forms equal autograd on the same module, and watching changes nothing."""
import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from numeric.watch import ENTRIES as W_ENTRIES
from numeric.watch import watch

imported_sdpa = F.scaled_dot_product_attention  # bound at import, as `from ... import` binds it

D, H, N, L = 16, 4, 3, 7
TOL = 1e-10


class SelfAttention(nn.Module):
    """Multi-head self-attention through SDPA, or (explicit=True) an explicit softmax whose scores keep their grad."""

    def __init__(self, mask_kind="causal"):
        super().__init__()
        self.qkv, self.out, self.mask_kind, self.explicit, self.saved = nn.Linear(D, 3 * D), nn.Linear(D, D), mask_kind, False, {}
        g = torch.Generator().manual_seed(1)
        self.bool_mask = torch.rand(L, L, generator=g) > 0.3
        self.bool_mask[:, 0] = True
        self.float_mask = torch.randn(L, L, generator=g, dtype=torch.float64)

    def forward(self, x):
        q, k, v = (t.reshape(N, L, H, D // H).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))  # (N, H, L, hd)
        if self.explicit:
            o = self._explicit(q, k, v)
        elif self.mask_kind == "causal":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            mask = self.bool_mask if self.mask_kind == "bool" else self.float_mask
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.7)
        return self.out(o.transpose(1, 2).reshape(N, L, D))

    def _explicit(self, q, k, v):
        scale = 1 / math.sqrt(D // H) if self.mask_kind == "causal" else 0.7
        s = q @ k.mT * scale
        if self.mask_kind == "float":
            s = s + self.float_mask
        else:
            keep = torch.ones(L, L, dtype=torch.bool).tril() if self.mask_kind == "causal" else self.bool_mask
            s = s.masked_fill(~keep, -math.inf)
        s.retain_grad(), v.retain_grad()
        alpha = torch.softmax(s, -1)
        o = alpha @ v
        o.retain_grad()
        self.saved = dict(s=s, alpha=alpha, v=v, o=o)
        return o


def explicit_mha(mod, query, key, value, attn_mask=None, key_padding_mask=None, saved=None, **_):
    """nn.MultiheadAttention's forward written out, keeping scores, v and the head outputs for autograd."""
    if mod.batch_first:
        query, key, value = (x.transpose(0, 1) for x in (query, key, value))
    Lq, Nb, E = query.shape
    hd = E // mod.num_heads
    ws, bs = mod.in_proj_weight.chunk(3), mod.in_proj_bias.chunk(3)
    q, k, v = (F.linear(x, w, b).reshape(x.shape[0], Nb, mod.num_heads, hd).permute(1, 2, 0, 3)
               for x, w, b in zip((query, key, value), ws, bs))
    s = q @ k.mT / math.sqrt(hd)
    for m, view in ((attn_mask, (1, 1, Lq, -1)), (key_padding_mask, (Nb, 1, 1, -1))):
        if m is not None:
            s = s.masked_fill(m.view(view), -math.inf) if m.dtype == torch.bool else s + m.view(view)
    s.retain_grad(), v.retain_grad()
    alpha = torch.softmax(s, -1)
    o = alpha @ v
    o.retain_grad()
    saved.update(s=s, alpha=alpha, v=v, o=o)
    y = mod.out_proj(o.permute(2, 0, 1, 3).reshape(Lq, Nb, E))
    return y.transpose(0, 1) if mod.batch_first else y


def reference(saved):
    """The recorded quantities from autograd's dL/ds and dL/dv on the explicit model (lists over heads)."""
    alpha, A, dV = saved["alpha"], saved["s"].grad, saved["v"].grad
    amax = alpha.amax(-1)
    ent = -(alpha * torch.log(alpha.clamp_min(1e-300))).sum(-1)
    norm = lambda t: t.square().sum((0, 2, 3)).sqrt()  # noqa: E731
    return dict(entropy=ent.mean((0, 2)), saturation=(1 - amax).mean((0, 2)), adv_max=A.abs().amax((0, 2, 3)),
                adv_row_l1=A.abs().sum(-1).mean((0, 2)), resp_max=alpha.sum(-2).amax(-1).mean(0),
                resp_min=alpha.sum(-2).amin(-1).mean(0), dS_norm=norm(A), dV_norm=norm(dV))


def assert_records_close(one, other, skip=(), rel=1e-12, abs=1e-15):
    """Two records agree: the same keys, names, counts and None entries equal, numbers (and lists of them) to
    rel/abs (pytest.approx compares numbers only)."""
    assert one.keys() == other.keys()
    for key, value in one.items():
        if key in skip:
            continue
        if value is None or isinstance(value, (str, int)):
            assert value == other[key], key
        else:
            assert other[key] is not None and value == pytest.approx(other[key], rel=rel, abs=abs), key


def assert_matches(rec, ref, keys=None):
    for key in keys or ref:
        assert torch.allclose(torch.tensor(rec[key], dtype=torch.float64), ref[key], rtol=TOL, atol=TOL), key


def loss_of(y):
    w = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    return (y * w).sum() + y.square().sum()


def train_twice(model, x, every=1, steps=1, forward=None):
    """(outputs, grads) without and with the watcher on identical copies, and the watcher."""
    forward = forward or (lambda m: m(x))
    results, w = [], None
    for watched in (False, True):
        m = copy.deepcopy(model)
        outs = []
        with watch(m, every=every) if watched else _null() as w_:
            for _ in range(steps):
                y = forward(m)
                loss_of(y).backward()
                outs.append(y.detach())
        w = w_ if watched else w
        results.append((outs, [p.grad for p in m.parameters()]))
    return results, w


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def assert_unchanged(results):
    (outs0, grads0), (outs1, grads1) = results
    assert all(torch.equal(a, b) for a, b in zip(outs0, outs1))
    assert all(torch.equal(a, b) for a, b in zip(grads0, grads1))


@pytest.mark.parametrize("mask_kind", ["causal", "bool", "float"])
def test_sdpa_model_matches_autograd_and_is_unchanged(mask_kind):
    torch.manual_seed(0)
    model = SelfAttention(mask_kind).double()
    x = torch.randn(N, L, D, dtype=torch.float64)
    results, w = train_twice(model, x)
    assert_unchanged(results)
    ref_model = copy.deepcopy(model)
    ref_model.explicit = True
    loss_of(ref_model(x)).backward()
    (rec,) = w.records
    assert (rec["site"], rec["call"], rec["step"], rec["heads"]) == ("", 0, 0, H)
    assert_matches(rec, reference(ref_model.saved))


def test_negative_control_uniform_baseline_differs():
    torch.manual_seed(0)
    model = SelfAttention("causal").double()
    x = torch.randn(N, L, D, dtype=torch.float64)
    with watch(model) as w:
        loss_of(model(x)).backward()
    model.explicit = True
    loss_of(model(x)).backward()
    sv = model.saved
    B = sv["o"].grad @ sv["v"].detach().mT
    keep = torch.ones(L, L, dtype=torch.bool).tril()
    uniform = torch.where(keep, B, 0).sum(-1, keepdim=True) / keep.sum(-1, keepdim=True)  # wrong baseline
    wrong = sv["alpha"] * (B - uniform)
    ref = reference(sv)
    bad = dict(ref, adv_max=wrong.abs().amax((0, 2, 3)), dS_norm=wrong.square().sum((0, 2, 3)).sqrt())
    assert_matches(w.records[0], ref, ["adv_max", "dS_norm"])
    with pytest.raises(AssertionError):
        assert_matches(w.records[0], bad, ["adv_max", "dS_norm"])


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("padding", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_multihead_attention_matches_reference(batch_first, padding, causal):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(D, H, batch_first=batch_first).double()
    x = torch.randn(N, L, D, dtype=torch.float64)
    x = x if batch_first else x.transpose(0, 1)
    kpm = torch.zeros(N, L, dtype=torch.bool)
    kpm[0, -2:] = True
    kw = dict(key_padding_mask=kpm if padding else None,
              attn_mask=~torch.ones(L, L, dtype=torch.bool).tril() if causal else None)
    for need_weights in (True, False):
        results, w = train_twice(mha, x, forward=lambda m, nw=need_weights: m(x, x, x, need_weights=nw, **kw)[0])
        assert_unchanged(results)
        saved = {}
        loss_of(explicit_mha(mha, x, x, x, saved=saved, **kw)).backward()
        (rec,) = w.records
        assert rec["site"] == "" and rec["heads"] == H
        assert_matches(rec, reference(saved))


def test_transformer_encoder_layer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, 2 * D, dropout=0.0, batch_first=True).double()
    x = torch.randn(N, L, D, dtype=torch.float64)
    mask = nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64)
    results, w = train_twice(layer, x, forward=lambda m: m(x, src_mask=mask, is_causal=True))
    assert_unchanged(results)
    ref, saved = copy.deepcopy(layer), {}
    ref.self_attn.forward = lambda q, k, v, **kw: (explicit_mha(ref.self_attn, q, k, v, saved=saved, **kw), None)
    loss_of(ref(x, src_mask=mask, is_causal=True)).backward()
    (rec,) = w.records
    assert rec["site"] == "self_attn"
    assert_matches(rec, reference(saved))


def test_slack_every_and_detach():
    torch.manual_seed(0)
    model = SelfAttention("causal").double()
    x = torch.randn(N, L, D, dtype=torch.float64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with watch(model, every=3) as w:
        for _ in range(7):
            loss_of(model(x)).backward()
            opt.step(), opt.zero_grad()
            assert torch._C._len_torch_function_stack() == 0  # the mode lives only inside a recorded forward
        with torch.no_grad():
            model(x)  # not a step
    assert [r["step"] for r in w.records] == [0, 3, 6]
    assert all(s >= -1e-12 for r in w.records for s in r["c9_slack"])
    assert w.records[0]["js"] is None and all(j > 0 for j in w.records[1]["js"])
    assert all(c > 0 for c in w.records[2]["v_change"])
    assert torch._C._len_torch_function_stack() == 0
    assert not model._forward_pre_hooks and not model._forward_hooks
    loss_of(model(x)).backward()
    assert len(w.records) == 3
    assert set(w.summary()) == {"<root>#0"}


def test_gqa_matches_repeated_heads():
    torch.manual_seed(0)
    q = torch.randn(2, 4, 5, 8, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(2, 2, 5, 8, dtype=torch.float64, requires_grad=True)

    class GQA(nn.Module):
        def forward(self, q, kv, gqa):
            k = kv if gqa else kv.repeat_interleave(2, 1)
            return F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=gqa)
    recs = []
    for gqa in (True, False):
        m = GQA()
        with watch(m) as w:
            loss_of(m(q, kv, gqa)).backward()
        recs.append(w.records[0])
    for key in ("entropy", "adv_max", "dS_norm", "dV_norm", "c9_slack"):
        assert recs[0][key] == pytest.approx(recs[1][key], rel=1e-12, abs=1e-14), key


def test_dropout_and_bad_input_raise():
    layer = nn.TransformerEncoderLayer(D, H, 2 * D, dropout=0.1, batch_first=True).double()
    x = torch.randn(N, L, D, dtype=torch.float64)
    with pytest.raises(ValueError, match="dropout_p=0.1"):
        with watch(layer):
            layer(x)
    with watch(layer, allow_dropout=True) as w:
        loss_of(layer(x)).backward()
    assert w.records[0]["dropout_p"] == 0.1
    with pytest.raises(ValueError, match="every"):
        watch(layer, every=0)
    with pytest.raises(TypeError, match="nn.Module"):
        watch(lambda x: x)


def test_drift_is_frame_js():
    from numeric.experiments.frame import _js
    from numeric.watch import TINY
    from numeric.watch import _js as watch_js
    g = torch.Generator().manual_seed(0)
    a, b = (torch.softmax(torch.randn(2, 3, 5, 6, generator=g, dtype=torch.float64), -1) for _ in range(2))
    log = lambda t: t.clamp_min(TINY).log()  # noqa: E731
    assert torch.allclose(watch_js(a, log(a), b, log(b)), _js(a, b), rtol=1e-12, atol=0)
    assert torch.equal(watch_js(a, log(a), a, log(a)), torch.zeros(2, 3, 5, dtype=torch.float64))


def test_chunked_batch_equals_one_chunk(monkeypatch):
    import numeric.watch as W
    torch.manual_seed(0)
    model = SelfAttention("bool").double()
    x = torch.randn(N, L, D, dtype=torch.float64)
    records = []
    for chunk in (10**9, 2 * H * L * L):  # one chunk; two sequences a chunk
        monkeypatch.setattr(W, "CHUNK", chunk)
        m = copy.deepcopy(model)
        with watch(m) as w:
            for _ in range(2):
                loss_of(m(x)).backward()
                m.qkv.weight.data += 0.01 * m.qkv.weight.grad
        records.append(w.records[1])
    assert records[0]["js"] is not None
    assert_records_close(records[0], records[1])


def test_unsupported_multihead_attention_raises_and_leaves_no_hooks():
    model = nn.Sequential(nn.Linear(D, D), nn.MultiheadAttention(D, H, add_bias_kv=True))
    with pytest.raises(ValueError, match="add_bias_kv"):
        with watch(model):
            pass
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())
    assert torch._C._len_torch_function_stack() == 0


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["demo", "long"])
def test_benchmark_reports_ratio_and_memory(setup):
    from numeric.watch_bench import benchmark
    r = benchmark(setup, every=2, steps=2, repeats=1)
    assert r["ratio"] > 0 and r["step_s"] > 0 and r["held_mib"] > 0 and r["peak_rss_mib"] > 0


@pytest.mark.slow
def test_benchmark_times_more_pairs_when_steps_are_fast():
    from numeric.watch_bench import benchmark
    few = benchmark("demo", every=2, steps=2, repeats=1)
    many = benchmark("demo", every=2, steps=2, repeats=1, min_seconds=0.5)
    assert few["pairs"] == 1 and many["pairs"] > 3


def test_benchmark_rejects_an_unknown_setup():
    from numeric.watch_bench import benchmark, main
    with pytest.raises(ValueError, match="unknown benchmark setup 'wide'; choose from demo, long"):
        benchmark("wide")
    with pytest.raises(SystemExit):
        main(["--every", "0"])
    with pytest.raises(ValueError, match="repeats must be a positive int, got 0"):
        benchmark("demo", repeats=0)
    with pytest.raises(ValueError, match="min_seconds must be >= 0"):
        benchmark("demo", min_seconds=-1)


def test_a_three_dimensional_call_is_one_head_over_a_batch():
    """SDPA on (N, L, E) (no head axis) with L != S and a per-sequence mask: one head, the batch averaged."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(3, 4, 6, generator=g, dtype=torch.float64)
    kv = torch.randn(3, 7, 6, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(3, 4, 7, generator=g) < 0.7
    mask[..., 0] = True

    class Cross(torch.nn.Module):
        def forward(self, q, kv):
            return torch.nn.functional.scaled_dot_product_attention(q, kv, kv, attn_mask=mask)

    model = Cross()
    with watch(model, every=1) as w:
        model(q, kv).pow(2).sum().backward()
    (rec,) = w.records
    alpha = torch.softmax((q @ kv.detach().mT / 6 ** 0.5).masked_fill(~mask, float("-inf")), -1)
    entropy = float(-(alpha * alpha.clamp_min(1e-30).log()).sum(-1).mean())
    assert rec["heads"] == 1 and len(rec["entropy"]) == 1
    assert abs(rec["entropy"][0] - entropy) <= 1e-10


def test_a_dtype_change_between_records_gives_no_drift_and_no_error():
    """Autocast on one recorded step and not the next: the record is made, its drift is None (a JS between
    alphas of two dtypes is not computed), and the user's backward does not fail."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 16)
    with watch(layer, every=1) as w:
        layer(x).sum().backward()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            layer(x).float().sum().backward()
        layer(x).sum().backward()
    assert [r["step"] for r in w.records] == [0, 1, 2]
    assert all(r["js"] is None and r["v_change"] is None for r in w.records[:2])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_calls_are_watched_in_float32(dtype):
    """A causal half-precision SDPA call (masked entries have alpha = 0): finite entropy and drift, close to
    the float32 values of the same call."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 6, 4, generator=g) for _ in range(3))

    class Head(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    records = {}
    for dt in (torch.float32, dtype):
        qq, kk, vv = (t.to(dt).clone().requires_grad_() for t in (q, k, v))
        model = Head()
        with watch(model, every=1) as w:
            for _ in range(2):
                model(qq, kk, vv).float().square().sum().backward()
                with torch.no_grad():
                    qq.add_(0.1 * qq.grad.sign())  # attention moves between the records
                qq.grad = None
        records[dt] = w.records
    for rec in records[dtype]:
        assert all(math.isfinite(x) for x in rec["entropy"])
    assert records[dtype][1]["js"] is not None and all(math.isfinite(x) for x in records[dtype][1]["js"])
    for a, b in zip(records[torch.float32][0]["entropy"], records[dtype][0]["entropy"]):
        assert abs(a - b) <= 0.05 * abs(a)


class Heads(nn.Module):
    """q, k, v as parameters (N, H, Lq, hd) / (N, H, S, hd); SDPA under a bool mask, or explicitly (scores kept)."""

    def __init__(self, Lq, S, seed=0, call=None):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.q, self.k, self.v = (nn.Parameter(torch.randn(2, 3, n, 5, generator=g, dtype=torch.float64)) for n in (Lq, S, S))
        self.mask = torch.rand(Lq, S, generator=g) > 0.4
        self.mask[:, 0] = True
        self.mask[1] = False  # a row with no attended key: alpha 0, not a live row
        self.call, self.saved = call or F.scaled_dot_product_attention, {}

    def forward(self, explicit=False):
        if not explicit:
            return self.call(self.q, self.k, self.v, attn_mask=self.mask)
        s = (self.q @ self.k.mT / math.sqrt(5)).masked_fill(~self.mask, -math.inf)
        s.retain_grad()
        dead = ~self.mask.any(-1, keepdim=True)
        alpha = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
        self.saved.update(s=s, alpha=alpha, v=self.v)
        return alpha @ self.v


@pytest.mark.parametrize("S", [7, 13, 31, 40, 70])
def test_rows_of_any_length_match_autograd(S):
    """Key counts on both sides of the zero padding of the row maxima (rows of S mod 32 > 8 entries are
    padded to a multiple of 32), with a fully masked row."""
    model = Heads(6, S)
    with watch(model) as w:
        loss_of(model()).backward()
    model.zero_grad()
    loss_of(model(explicit=True)).backward()
    saved = dict(model.saved, v=model.v)
    ref = reference(saved)
    live = saved["alpha"].sum(-1) > 0
    rows = live.sum((0, 2)).double()
    ref.update(entropy=-(saved["alpha"] * saved["alpha"].clamp_min(1e-300).log()).sum(-1).sum((0, 2)) / rows,
               saturation=((1 - saved["alpha"].amax(-1)) * live).sum((0, 2)) / rows,
               adv_row_l1=saved["s"].grad.abs().sum(-1).sum((0, 2)) / rows)
    assert_matches(w.records[0], ref)
    assert min(w.records[0]["c9_slack"]) >= -1e-12


def test_a_sdpa_imported_by_name_is_seen_once_and_equals_the_attribute_call():
    models = [Heads(5, 9, call=imported_sdpa), Heads(5, 9)]
    records = []
    for model in models:
        with watch(model) as w:
            loss_of(model()).backward()
        assert len(w.records) == 1  # the mode and the wrapper never both report a call
        records.append(w.records[0])
    assert records[0] == records[1]


def test_between_records_the_submodules_carry_no_hooks_and_sdpa_is_restored():
    torch.manual_seed(0)
    original = F.scaled_dot_product_attention
    layer = nn.TransformerEncoderLayer(D, H, 2 * D, dropout=0.0, batch_first=True).double()
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    x = torch.randn(N, L, D, dtype=torch.float64)
    mask = nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64)
    submodules = [m for m in model.modules() if m is not model]
    with watch(model, every=2) as w:
        for _ in range(4):
            y = model(x, mask=mask, is_causal=True)
            assert F.scaled_dot_product_attention is original
            assert all(not m._forward_pre_hooks and not m._forward_hooks for m in submodules)
            loss_of(y).backward()
    assert [(r["site"], r["step"]) for r in w.records] == [("layers.0.self_attn", 0), ("layers.1.self_attn", 0),
                                                          ("layers.0.self_attn", 2), ("layers.1.self_attn", 2)]
    assert all(r["js"] is not None for r in w.records[2:])

    class Boom(nn.Module):
        def forward(self, q):
            F.scaled_dot_product_attention(q, q, q)
            raise RuntimeError("boom")
    boom = Boom()
    with watch(boom):
        with pytest.raises(RuntimeError, match="boom"):
            boom(torch.randn(1, 2, 3, 4, requires_grad=True))
        assert F.scaled_dot_product_attention is original  # restored when the forward raised
        assert torch._C._len_torch_function_stack() == 0
    assert F.scaled_dot_product_attention is original


class TwoSites(nn.Module):
    """Two SDPA calls of one shape under different bool masks (one group, masks concatenated per head) and one
    of another length (a group of its own); the first can be skipped."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = Heads(6, 8, seed=1), Heads(6, 8, seed=2), Heads(6, 11, seed=3)
        self.skip = False

    def forward(self):
        outs = [self.b(), self.c()] if self.skip else [self.a(), self.b(), self.c()]
        return sum(o.sum() * (i + 1) + o.square().sum() for i, o in enumerate(outs))


def test_grouped_sites_equal_sites_evaluated_alone(monkeypatch):
    import numeric.watch as W
    records = []
    for grouped in (True, False):
        if not grouped:
            monkeypatch.setattr(W, "_group_key", lambda *call: object())  # every call a group of its own
        model = TwoSites()
        with watch(model) as w:
            for _ in range(3):
                model().backward()
                with torch.no_grad():
                    for p in model.parameters():
                        p -= 0.05 * p.grad
                        p.grad = None
        records.append(w.records)
    assert [r["site"] for r in records[0]] == [r["site"] for r in records[1]] == ["a", "b", "c"] * 3
    for one, alone in zip(*records):
        assert_records_close(one, alone)
    # V is a parameter updated in place: its drift is measured against a copy
    assert all(r["js"] is not None and min(r["v_change"]) > 1e-3 for recs in records for r in recs[3:])


def test_drift_is_none_when_a_sites_group_changes():
    model = TwoSites()
    with watch(model) as w:
        for skip in (False, True, False, False):
            model.skip = skip
            model().backward()
    by_step = [{r["site"]: r for r in w.records if r["step"] == s} for s in range(4)]
    # a site is (module path, call index in the step): skipping a renumbers b and c, whose groups then differ
    assert [(r["call"], r["js"] is None) for r in by_step[1].values()] == [(0, True), (1, True)]
    # at step 2 the sites are step 0's again, with their groups: drift against step 0
    assert all(r["js"] is not None and r["v_change"] is not None for s in (2, 3) for r in by_step[s].values())


@pytest.mark.parametrize("eps, rel", [(1e-2, 1e-2), (1e-3, 0.2)])
def test_float32_drift_is_close_to_float64(eps, rel):
    """The watcher's JS in float32 against the same model in float64, for rows that barely move (q scaled by
    1 + eps between the records: JS about 1e-5 and 1e-7 nats): each KL term is a sum of p (log p - log m)
    (a difference of entropies, H(m) - (H(p) + H(q)) / 2, was off by about 1e-7 nats in float32)."""
    js = {}
    for dtype in (torch.float64, torch.float32):
        model = Heads(6, 45).to(dtype)
        with watch(model) as w:
            for _ in range(2):
                loss_of(model()).backward()
                with torch.no_grad():
                    model.q *= 1 + eps
        js[dtype] = w.records[1]["js"]
    assert all(0 < j < 1e-4 for j in js[torch.float64])
    assert js[torch.float32] == pytest.approx(js[torch.float64], rel=rel)


@pytest.mark.slow
def test_unrecorded_benchmark_times_watched_steps_that_record_nothing():
    from numeric.watch_bench import unrecorded
    r = unrecorded("demo", steps=2, repeats=2)
    assert r["records"] == 2 and r["ratio"] > 0 and r["pairs"] == 2  # the demo model's 2 layers at step 0 only
    with pytest.raises(ValueError, match="repeats must be an int >= 2"):
        unrecorded("demo", repeats=1)


def test_a_backward_pass_that_raises_leaves_the_next_step_recorded():
    model = TwoSites()
    with watch(model) as w:
        out = model()
        model.a.q.register_hook(lambda g: (_ for _ in ()).throw(RuntimeError("hook")))
        with pytest.raises(RuntimeError, match="hook"):
            out.backward(retain_graph=True)
        model.a.q._backward_hooks.clear()
        out.backward(retain_graph=True)  # the same step's backward again, now whole
        model().backward()
    assert [(r["site"], r["step"], r["passes"]) for r in w.records] == [(s, step, 1) for step in (0, 1) for s in "abc"]


def test_grouped_sites_whose_masks_broadcast_differently():
    """A decoder's self-attention (causal, padding) and cross-attention (padding only) have one shape and
    masks that broadcast differently over the rows: grouped, each equals its site alone."""
    import numeric.watch as W
    torch.manual_seed(0)
    layer = nn.TransformerDecoderLayer(D, H, 2 * D, dropout=0.0, batch_first=True).double()
    x, memory = torch.randn(N, L, D, dtype=torch.float64), torch.randn(N, L, D, dtype=torch.float64)
    pad = torch.zeros(N, L, dtype=torch.bool)
    pad[0, -2:] = True
    kw = dict(tgt_mask=~torch.ones(L, L, dtype=torch.bool).tril(), tgt_is_causal=True,  # bool, as the padding masks
              tgt_key_padding_mask=pad, memory_key_padding_mask=pad)
    records = []
    for grouped in (True, False):
        key = W._group_key if grouped else (lambda *call: object())
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(W, "_group_key", key)
            m = copy.deepcopy(layer)
            with watch(m) as w:
                loss_of(m(x, memory, **kw)).backward()
        records.append(w.records)
    assert [r["site"] for r in records[0]] == ["self_attn", "multihead_attn"]
    for one, alone in zip(*records):
        for key in ("entropy", "adv_max", "c9_slack", "resp_min", "dS_norm", "dV_norm"):
            assert one[key] == pytest.approx(alone[key], rel=1e-12, abs=1e-15), key


class Attend(nn.Module):
    def forward(self, q, k, v, f=1.0):
        return F.scaled_dot_product_attention(q * f, k, v)


def test_drift_needs_the_same_batch():
    """Batches of 40, 40 and 16 sequences in chunks of 16: the third record has no drift (another batch)."""
    import numeric.watch as W
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(40, 3, 6, 5, generator=g, dtype=torch.float64) for _ in range(3))
    model = Attend()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(W, "CHUNK", 16 * 3 * 6 * 6)
        with watch(model) as w:
            for n, f in ((40, 1.0), (40, 1.1), (16, 1.2)):
                loss_of(model(*(t[:n].clone().requires_grad_() for t in (q, k, v)), f)).backward()
    assert [r["js"] is None for r in w.records] == [True, False, True]


def test_sdpa_called_with_keyword_names():
    class Kw(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(query=q, key=k, value=v, is_causal=True)
    q, k, v = (torch.randn(2, 2, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    model = Kw()
    with watch(model) as w:
        loss_of(model(q, k, v)).backward()
    (rec,) = w.records
    assert rec["heads"] == 2 and min(rec["c9_slack"]) >= -1e-12


def test_accumulated_steps_drift_against_the_step_before():
    """Two forwards, then one backward of the summed losses: the steps are evaluated in order, so step 1's
    drift is against step 0 (and step 3's against step 2)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 5, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    model = Attend()
    with watch(model) as w:
        for f in ((1.0, 1.1), (1.2, 1.3)):
            sum(loss_of(model(q, k, v, fi)) for fi in f).backward()
    assert [(r["step"], r["js"] is None) for r in w.records] == [(0, True), (1, False), (2, False), (3, False)]
    a = [torch.softmax(q.detach() * f @ k.detach().mT / math.sqrt(5), -1) for f in (1.0, 1.1)]
    from numeric.experiments.frame import _js
    assert w.records[1]["js"] == pytest.approx(_js(a[1], a[0]).mean((0, 2)).tolist(), rel=1e-10)


def test_a_backward_inside_a_backward_keeps_the_outer_sites():
    """A site run inside a custom Function that keeps its own graph and back-propagates it with autograd.grad
    in its backward (a backward pass inside the outer one), after a plain site."""
    class Inner(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, layer):
            with torch.enable_grad():
                xd = x.detach().requires_grad_()
                y = layer(xd)
            ctx.save_for_backward(xd, y)
            return y.detach()

        @staticmethod
        def backward(ctx, g):
            xd, y = ctx.saved_tensors
            return torch.autograd.grad(y, xd, g)[0], None

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = Attend(), Attend()

        def forward(self, x):
            return self.second(Inner.apply(x, lambda t: self.first(t, t, t)), x, x)
    x = torch.randn(2, 3, 6, 5, dtype=torch.float64, requires_grad=True)
    model = Two()
    with watch(model) as w:
        loss_of(model(x)).backward()
    assert sorted(r["site"] for r in w.records) == ["first", "second"]  # the inner pass ends first


def test_checkpointing_the_whole_model_counts_one_step_and_leaves_nothing_behind():
    from torch.utils.checkpoint import checkpoint
    original = F.scaled_dot_product_attention
    model = Heads(6, 8)
    with watch(model) as w:
        for _ in range(3):
            loss_of(checkpoint(model, use_reentrant=False)).backward()
    assert [r["step"] for r in w.records] == [0, 1, 2]
    assert F.scaled_dot_product_attention is original and torch._C._len_torch_function_stack() == 0
    assert not model._forward_pre_hooks and not model._forward_hooks


def test_overlapping_recorded_forwards_see_each_call_once_and_restore_sdpa():
    """Two watchers on one model, a recorded forward that raises and is caught in between: every later step
    records each site once per watcher, and nothing is left patched."""
    original = F.scaled_dot_product_attention
    model = Heads(6, 8)
    with watch(model) as w1, watch(model) as w2:
        model.call = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom"))
        with pytest.raises(RuntimeError):
            model()
        model.call = F.scaled_dot_product_attention
        for _ in range(2):
            loss_of(model()).backward()
    assert [r["step"] for r in w1.records] == [r["step"] for r in w2.records] == [1, 2]
    assert F.scaled_dot_product_attention is original and torch._C._len_torch_function_stack() == 0


@pytest.mark.parametrize("n, L, S", [(0, 4, 5), (2, 0, 5), (2, 4, 0)])
def test_an_empty_call_records_nothing_measured(n, L, S):
    q = torch.randn(n, 2, L, 3, requires_grad=True)
    k, v = (torch.randn(n, 2, S, 3, requires_grad=True) for _ in range(2))
    model = Attend()
    with watch(model) as w:
        (model(q, k, v).sum() + q.sum() + k.sum() + v.sum()).backward()
    (rec,) = w.records
    assert rec["heads"] == 2 and all(rec[key] is None for key in W_ENTRIES)
    assert w.summary()["<root>#0"] == {"step": 0, **dict.fromkeys(W_ENTRIES)}


def test_summary_is_the_last_records_mean_over_heads():
    model = Heads(6, 8)
    with watch(model) as w:
        for _ in range(2):
            loss_of(model()).backward()
    last = w.records[-1]
    summary = w.summary()["<root>#0"]
    assert set(summary) == {"step", *W_ENTRIES} and summary["step"] == 1
    assert summary["entropy"] == pytest.approx(sum(last["entropy"]) / 3) and summary["c9_slack"] == min(last["c9_slack"])
    assert set(last) == {"site", "call", "step", "heads", "dropout_p", "passes", *W_ENTRIES}


def test_record_next_records_exactly_the_steps_asked_for():
    model = Heads(6, 8)
    with watch(model, every=None) as w:
        for step in range(6):
            if step in (2, 3, 5):
                w.record_next()
            loss_of(model()).backward()
    assert [r["step"] for r in w.records] == [2, 3, 5]
    assert w.records[0]["js"] is None and w.records[1]["js"] is not None
    with watch(model, every=4) as w:
        for step in range(6):
            if step == 1:
                w.record_next()
            loss_of(model()).backward()
    assert [r["step"] for r in w.records] == [0, 1, 4]
    with pytest.raises(ValueError, match="positive int or None"):
        watch(model, every=0)


class ThreeOutputs(nn.Module):
    """TwoSites' three sites (a and b one group, c another), their outputs returned for the losses to combine."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = Heads(6, 8, seed=1), Heads(6, 8, seed=2), Heads(6, 11, seed=3)

    def forward(self):
        return self.a(), self.b(), self.c()


def two_losses(outs):
    return sum(o.sum() * (i + 1) for i, o in enumerate(outs)), sum(o.square().sum() for o in outs)


def sgd(model, lr=0.05):
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
            p.grad = None


def test_backward_passes_of_one_step_are_summed_into_one_record():
    """loss1.backward(retain_graph=True); loss2.backward() after one forward: one record per site and step, equal
    to a single backward of loss1 + loss2 (u summed over the step's passes), drift against the previous step."""
    records, summaries = {}, {}
    for passes in (1, 2):
        model = ThreeOutputs()
        with watch(model) as w:
            for _ in range(3):
                loss1, loss2 = two_losses(model())
                if passes == 1:
                    (loss1 + loss2).backward()
                else:
                    loss1.backward(retain_graph=True)
                    loss2.backward()
                sgd(model)
        records[passes], summaries[passes] = w.records, w.summary()
    assert [(r["site"], r["step"]) for r in records[2]] == [(s, t) for t in range(3) for s in "abc"]
    assert [r["passes"] for r in records[1]] == [1] * 9 and [r["passes"] for r in records[2]] == [2] * 9
    for one, two in zip(records[1], records[2]):
        assert_records_close(one, two, skip=("passes",))
    assert all(r["js"] is not None and min(r["js"]) > 0 for r in records[2][3:])
    assert summaries[1].keys() == summaries[2].keys()
    for key, entry in summaries[1].items():
        assert entry == pytest.approx(summaries[2][key], rel=1e-12, abs=1e-15)


def test_a_gradient_penalty_step_gives_one_record_per_site():
    """torch.autograd.grad(..., create_graph=True), then backward of the loss and the penalty: one record per
    site and step, with passes = 2 (u is the sum of the two passes' dL/do)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    model = ThreeOutputs()
    with watch(model) as w:
        for _ in range(2):
            with sdpa_kernel(SDPBackend.MATH):  # a double backward through SDPA
                loss, _ = two_losses(model())
            grads = torch.autograd.grad(loss, list(model.parameters()), create_graph=True)
            (loss + sum(g.square().sum() for g in grads)).backward()
            sgd(model, 1e-3)
    assert [(r["site"], r["step"], r["passes"]) for r in w.records] == [(s, t, 2) for t in range(2) for s in "abc"]
    assert all(r["js"] is not None for r in w.records[3:])


def test_a_mask_changed_in_place_after_its_forward_is_read_as_it_was():
    """A bool mask buffer changed in place between two forwards whose losses share one backward: each step is
    evaluated with the mask its forward used."""
    model = Heads(6, 8)
    flipped = model.mask.clone()
    flipped[:, 1:] = ~flipped[:, 1:]
    alone = []
    for mask in (model.mask, flipped):
        m = copy.deepcopy(model)
        m.mask = mask.clone()
        with watch(m) as w:
            loss_of(m()).backward()
        alone.append(w.records[0])
    m = copy.deepcopy(model)
    with watch(m) as w:
        first = loss_of(m())
        m.mask.copy_(flipped)
        (first + loss_of(m())).backward()
    assert [r["step"] for r in w.records] == [0, 1]
    for rec, ref in zip(w.records, alone):
        assert_records_close(rec, ref, skip=("step", "js", "v_change"))


class Rotary(nn.Module):
    """q and k scaled by a float32 buffer after an in-projection (as RoPE does): under bfloat16 autocast q, k
    reach SDPA as float32 and v as bfloat16."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.register_buffer("rot", torch.linspace(0.5, 1.5, D // H))
        self.seen = None

    def forward(self, x):
        q, k, v = (t.reshape(N, L, H, D // H).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        q, k = q * self.rot, k * self.rot
        self.seen = (q.detach(), k.detach(), v.dtype)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_mixed_dtypes_under_autocast_are_watched_in_a_common_dtype():
    torch.manual_seed(0)
    x = torch.randn(N, L, D)
    model = Rotary()
    results = []
    for watched in (False, True):
        m = copy.deepcopy(model)
        with watch(m) if watched else _null() as w:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = m(x)
            y.float().square().sum().backward()  # raised a dtype error from the generated code
        results.append(([y.detach()], [p.grad for p in m.parameters()]))
    assert_unchanged(results)
    q, k, v_dtype = m.seen
    assert (q.dtype, k.dtype, v_dtype) == (torch.float32, torch.float32, torch.bfloat16)
    alpha = torch.softmax((q @ k.mT / math.sqrt(D // H)).masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf), -1)
    entropy = -(alpha * alpha.clamp_min(1e-30).log()).sum(-1).mean((0, 2))
    (rec,) = w.records
    assert rec["entropy"] == pytest.approx(entropy.tolist(), rel=1e-5)
    mha = nn.MultiheadAttention(D, H, batch_first=True)  # need_weights=True: u from (dL/d out) W_out
    with watch(mha) as w:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = mha(x, x, x)[0]
        y.float().square().sum().backward()  # raised: bfloat16 dL/d out times the float32 W_out
    assert all(math.isfinite(e) for e in w.records[0]["entropy"])


def test_a_watcher_that_recorded_nothing_warns_why():
    from numeric.watch import WatchWarning
    model = Heads(6, 8)
    w = watch(model)  # never entered
    loss_of(model()).backward()
    with pytest.warns(WatchWarning, match="never entered.*with watch"):
        assert w.records == []
    with pytest.warns(WatchWarning, match="never entered"):
        assert w.summary() == {}
    with watch(model) as w:
        loss_of(model.forward()).backward()  # the hooks never run
        with torch.no_grad():
            model()  # not a step
    with pytest.warns(WatchWarning, match=r"no step.*model\(\.\.\.\)"):
        assert w.summary() == {}
    with watch(nn.Linear(3, 3)) as w:  # steps, no attention
        w.model(torch.randn(2, 3)).sum().backward()
    with pytest.warns(WatchWarning, match="no attention call"):
        assert w.records == []
    with watch(model) as w:
        loss_of(model()).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(w.records) == 1 and w.summary()


def test_records_are_in_step_then_forward_call_order():
    """Backward reaches TwoSites' sites in the reverse of the forward order (c, then the group of a and b); with
    two forwards before their backwards, the later step's backward runs first. Records are in step order, and
    within a step in the order of the forward calls."""
    model = TwoSites()
    with watch(model) as w:
        for _ in range(2):
            model().backward()
        first, second = model(), model()
        second.backward()
        first.backward()
    assert [(r["step"], r["site"], r["call"]) for r in w.records] == [(t, s, i) for t in range(4) for i, s in enumerate("abc")]
    assert all(r["js"] is not None for r in w.records[3:])


class CompiledPair(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = Heads(6, 8, seed=1), Heads(6, 8, seed=2)

    def forward(self):
        return self.second().sum() + self.first().square().sum()


def test_a_compiled_model_is_refused_and_its_uncompiled_module_recorded_under_the_same_names():
    """The watcher does not see SDPA inside a torch.compile graph: a compiled model, a compiled submodule or a
    compiled wrapper of the watched model run on a recorded step raise, naming the fix (watch the uncompiled
    module, run it on the recorded steps); so used, the records are those of a model never compiled."""
    torch._dynamo.reset()
    with pytest.raises(ValueError, match="uncompiled"):
        with watch(torch.compile(CompiledPair(), backend="eager")):
            pass
    model = CompiledPair()
    model.first = torch.compile(model.first, backend="eager")
    with pytest.raises(ValueError, match="uncompiled"):
        with watch(model):
            pass
    model = CompiledPair()
    model.compile(backend="eager")
    with pytest.raises(ValueError, match="uncompiled"):
        with watch(model):
            pass
    original = F.scaled_dot_product_attention
    records = []
    for compiled in (False, True):
        model = CompiledPair()
        fast = torch.compile(model, backend="aot_eager") if compiled else model
        with watch(model, every=None) as w:
            for step in range(4):
                if step in (0, 3):
                    w.record_next()
                (model() if step in (0, 3) else fast()).backward()
                sgd(model)
            if compiled:
                w.record_next()
                with pytest.raises(RuntimeError, match="uncompiled"):
                    fast()
                assert F.scaled_dot_product_attention is original and torch._C._len_torch_function_stack() == 0
        records.append(w.records)
    assert [(r["site"], r["step"]) for r in records[1]] == [("second", 0), ("first", 0), ("second", 3), ("first", 3)]
    for one, other in zip(*records):
        assert_records_close(one, other)
    torch._dynamo.reset()
