"""numeric.watch on Hugging Face transformers models (GPT-2, Llama with grouped-query attention, BERT with a
padding mask; sdpa and eager attention) and TransformerLens HookedTransformers: tiny models built from configs,
float64. Each recorded step's records are checked against an independent float64 computation: a copy of the
model with the same weights whose attention is computed by plain torch with autograd (the weights, dL/dS and
dL/dV read by retain_grad), its statistics computed here from those tensors; deliberately wrong references
(a perturbed value gradient, the mask transposed) must not match. Outputs and parameter gradients are bitwise
those of an unwatched copy."""
import importlib
import math
import sys
import warnings

import pytest
import torch

from numeric import watch_hf
from numeric.watch import watch

RTOL, ATOL = 1e-10, 1e-12  # float64 throughout
LOOSE = {("llama", "eager"): 1e-6}  # Llama's eager softmax runs in float32 whatever the model's dtype
B, L, VOCAB = 3, 7, 20


def _transformers():
    return pytest.importorskip("transformers")


def _lens():
    pytest.importorskip("transformer_lens")
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    return HookedTransformer, HookedTransformerConfig


# -- the models ---------------------------------------------------------------------------------------------
def hf_model(kind, impl, seed=0):
    t = _transformers()
    torch.manual_seed(seed)
    if kind == "gpt2":
        cfg = t.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=16, n_layer=2, n_head=4, attn_pdrop=0.0,
                           resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0)
        cls = t.GPT2LMHeadModel
    elif kind == "llama":
        cfg = t.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                            bos_token_id=0, eos_token_id=0, pad_token_id=0)
        cls = t.LlamaForCausalLM
    else:
        cfg = t.BertConfig(vocab_size=VOCAB, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                           intermediate_size=32, max_position_embeddings=16, attention_probs_dropout_prob=0.0,
                           hidden_dropout_prob=0.0, pad_token_id=0)
        cls = t.BertForMaskedLM
    cfg._attn_implementation = impl
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = cls(cfg).double()
    model.config._attn_implementation = impl
    return model


def batch(kind, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (B, L), generator=g)
    mask = torch.ones(B, L, dtype=torch.long)
    if kind == "bert":
        mask[1, 5:] = 0  # padding: the last keys of one sequence are not attended
        mask[2, 3:] = 0
    return ids, mask


def hf_loss(model, ids, mask):
    return model(input_ids=ids, attention_mask=mask, labels=ids).loss


def modeling(model):
    return importlib.import_module(type(model).__module__)


CASES = [(k, i) for k in ("gpt2", "llama", "bert") for i in ("sdpa", "eager")]
IDS = [f"{k}-{i}" for k, i in CASES]


# -- the independent reference ----------------------------------------------------------------------------
def reference_attention(store):
    """An eager_attention_forward computing attention in plain torch, keeping what autograd gives."""
    def eager_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                                position_bias=None, **kwargs):
        rep = query.shape[1] // key.shape[1]
        k, v = key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1)
        v.retain_grad()
        raw = query @ k.transpose(-2, -1) * (query.shape[-1] ** -0.5 if scaling is None else scaling)
        if position_bias is not None:  # T5's family adds it to the scores
            raw = raw + position_bias
        m = None if attention_mask is None else attention_mask[..., :k.shape[-2]].to(raw.dtype)
        s = raw if m is None else raw + m
        s.retain_grad()
        a = s.softmax(-1)
        out = a @ v
        out.retain_grad()
        store.append(dict(module=module, alpha=a, scores=s, raw=raw.detach(), mask=m, v=v, out=out))
        return out.transpose(1, 2).contiguous(), a
    return eager_attention_forward


def reference_step(model, ids, mask):
    """Per site (module path): alpha, dL/dS by autograd, u = dL/d(output per head), V and dL/dV by autograd,
    from an eager copy of `model` whose attention is reference_attention."""
    ref = hf_model(model.config.model_type, "eager")
    ref.load_state_dict(model.state_dict())
    store = []
    mod = modeling(ref)
    saved = mod.eager_attention_forward
    mod.eager_attention_forward = reference_attention(store)
    try:
        hf_loss(ref, ids, mask).backward()
    finally:
        mod.eager_attention_forward = saved
    names = {id(m): n for n, m in ref.named_modules()}
    return {names[id(e["module"])]: dict(alpha=e["alpha"].detach(), dS=e["scores"].grad, u=e["out"].grad,
                                         v=e["v"].detach(), dV=e["v"].grad, raw=e["raw"], mask=e["mask"])
            for e in store}


def stats(alpha, u, v, dV, dS=None):
    """The record's per-head statistics, computed here from alpha (N, H, L, S), u, V and dL/dV."""
    b = u @ v.transpose(-2, -1)
    A = alpha * (b - (alpha * b).sum(-1, keepdim=True))  # C1, from its definition
    if dS is not None:  # autograd's dL/dS is the same matrix
        torch.testing.assert_close(A, dS, rtol=1e-7, atol=1e-12)
    amax = alpha.amax(-1)
    live = amax > 0
    n = live.sum((0, 2)).clamp_min(1)
    plogp = torch.where(alpha > 0, alpha * alpha.clamp_min(1e-300).log(), torch.zeros_like(alpha)).sum(-1)
    N = alpha.sum(-2)
    bmax = torch.where(alpha > 0, b.abs(), torch.zeros_like(b)).amax(-1)
    c9 = torch.where(live, 4 * (1 - amax) * bmax - A.abs().sum(-1), torch.full_like(amax, math.inf)).amin((0, 2))
    out = dict(entropy=(-plogp * live).sum((0, 2)) / n, saturation=((1 - amax) * live).sum((0, 2)) / n,
               adv_max=A.abs().amax((0, 2, 3)), adv_row_l1=(A.abs().sum(-1) * live).sum((0, 2)) / n,
               resp_max=N.amax(-1).mean(0), resp_min=N.amin(-1).mean(0), c9_slack=c9,
               dS_norm=A.square().sum((0, 2, 3)).sqrt(), dV_norm=dV.square().sum((0, 2, 3)).sqrt())
    return {k: x.tolist() for k, x in out.items()}


def matches(record, ref, rtol=RTOL):
    return not mismatches(record, ref, rtol)


def mismatches(record, ref, rtol=RTOL):
    return [k for k, x in ref.items() if not torch.allclose(torch.tensor(record[k], dtype=torch.float64),
                                                            torch.tensor(x, dtype=torch.float64), rtol=rtol,
                                                            atol=ATOL if rtol == RTOL else 1e-9)]


def n_layers(model):
    return model.config.num_hidden_layers


# -- Hugging Face -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,impl", CASES, ids=IDS)
def test_hf_records_equal_the_independent_computation(kind, impl):
    model = hf_model(kind, impl)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    ids, mask = batch(kind)
    refs, v_prev = {}, {}
    with watch(model, every=2) as w:
        for step in range(5):
            if step % 2 == 0:
                refs[step] = reference_step(model, ids, mask)
            hf_loss(model, ids, mask).backward()
            opt.step()
            opt.zero_grad()
    records = w.records
    rtol = LOOSE.get((kind, impl), RTOL)
    heads = model.config.num_attention_heads
    assert [(r["step"], r["call"]) for r in records] == [(s, c) for s in (0, 2, 4) for c in range(n_layers(model))]
    for rec in records:
        ref = refs[rec["step"]][rec["site"]]
        assert rec["heads"] == heads and rec["passes"] == 1 and rec["dropout_p"] == 0.0
        assert all(len(rec[k]) == heads for k in ("entropy", "adv_max", "dV_norm"))
        expect = stats(ref["alpha"], ref["u"], ref["v"], ref["dV"], ref["dS"])
        assert matches(rec, expect, rtol), (rec["site"], rec["step"], mismatches(rec, expect, rtol))
        # negative controls: a perturbed value gradient, the mask transposed
        assert not matches(rec, stats(ref["alpha"], ref["u"], ref["v"], ref["dV"] * 1.001), rtol)
        masked = ref["raw"] + (ref["mask"] if ref["mask"] is not None else 0)
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        full = ref["mask"] if ref["mask"] is not None else torch.zeros(1, 1, L, L, dtype=masked.dtype).masked_fill(~causal, -math.inf)
        wrong = (ref["raw"] + full.transpose(-2, -1)).softmax(-1)
        assert torch.allclose(masked.softmax(-1), ref["alpha"])
        assert not matches(rec, stats(wrong, ref["u"], ref["v"], ref["dV"]), rtol)
        prev = v_prev.get(rec["site"])
        if prev is not None:
            change = (ref["v"] - prev).square().sum((0, 2, 3)).sqrt() / prev.square().sum((0, 2, 3)).sqrt()
            assert torch.allclose(torch.tensor(rec["v_change"], dtype=torch.float64), change, rtol=rtol)
        else:
            assert rec["v_change"] is None
        v_prev[rec["site"]] = ref["v"]


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
def test_hf_eager_reference_is_the_model_s_own_attention(kind):
    """The reference's alpha is what the eager model returns with output_attentions=True."""
    model = hf_model(kind, "eager")
    ids, mask = batch(kind)
    ref = reference_step(model, ids, mask)
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    names = sorted(ref)
    assert len(got) == len(names) == n_layers(model)
    for name, weights in zip(names, got):
        torch.testing.assert_close(weights, ref[name]["alpha"], rtol=1e-6, atol=1e-9)  # Llama's softmax is float32


@pytest.mark.parametrize("kind,impl", CASES, ids=IDS)
def test_hf_outputs_and_gradients_are_bitwise_unchanged(kind, impl):
    plain, watched = hf_model(kind, impl), hf_model(kind, impl)
    ids, mask = batch(kind)
    mod = modeling(watched)
    before = mod.eager_attention_forward
    with watch(watched, every=2) as w:
        for _ in range(3):
            outs = []
            for model in (plain, watched):
                out = model(input_ids=ids, attention_mask=mask, labels=ids)
                out.loss.backward()
                outs.append(out)
                if model is watched:
                    assert mod.eager_attention_forward is before  # restored after each forward
            assert torch.equal(outs[0].logits, outs[1].logits) and torch.equal(outs[0].loss, outs[1].loss)
            for (n, p), q in zip(plain.named_parameters(), watched.parameters()):
                assert torch.equal(p.grad, q.grad), n
    assert len(w.records) == 2 * n_layers(plain)  # steps 0 and 2


def test_hf_unrecorded_steps_run_unwatched():
    model = hf_model("gpt2", "eager")
    mod = modeling(model)
    original = mod.eager_attention_forward
    seen = []

    def spy(*args, **kwargs):
        seen.append(mod.eager_attention_forward is spy)
        return original(*args, **kwargs)
    ids, mask = batch("gpt2")
    mod.eager_attention_forward = spy
    try:
        with watch(model, every=2) as w:
            for _ in range(2):
                hf_loss(model, ids, mask).backward()
    finally:
        mod.eager_attention_forward = original
    # step 0 recorded (the attribute was the watcher's wrapper around spy), step 1 not (spy itself)
    assert seen == [False, False, True, True]
    assert {r["step"] for r in w.records} == {0}


def test_hf_reorder_and_upcast_is_refused():
    t = _transformers()
    cfg = t.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=16, n_layer=1, n_head=2, reorder_and_upcast_attn=True,
                       bos_token_id=0, eos_token_id=0)
    cfg._attn_implementation = "eager"
    model = t.GPT2LMHeadModel(cfg)
    with pytest.raises(ValueError, match="reorder_and_upcast_attn"):
        with watch(model):
            pass


# -- TransformerLens ---------------------------------------------------------------------------------------
def lens_model(gqa=False, seed=0):
    HookedTransformer, HookedTransformerConfig = _lens()
    extra = dict(n_key_value_heads=2, positional_embedding_type="rotary", rotary_dim=4) if gqa else {}
    cfg = HookedTransformerConfig(n_layers=2, d_model=16, n_ctx=12, d_head=4, n_heads=4, d_vocab=VOCAB, act_fn="gelu",
                                  seed=seed, **extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HookedTransformer(cfg).double()


def lens_reference(model, ids):
    """Per block: alpha (hook_pattern), dL/dS (grad at hook_attn_scores), u (grad at hook_z), V repeated to the
    query heads, and dL/dV = alpha^T u (checked against autograd's grad at hook_v, summed over each group), from a
    copy of the model with TransformerLens's own hooks."""
    ref = lens_model(gqa=model.cfg.n_key_value_heads is not None)
    ref.load_state_dict(model.state_dict())
    kept = {}

    def keep(t, hook):
        t.retain_grad()
        kept[hook.name] = t
    for name in ref.hook_dict:
        if name.split(".")[-1] in ("hook_attn_scores", "hook_pattern", "hook_v", "hook_z"):
            ref.add_hook(name, keep)
    ref(ids, return_type="loss").backward()
    ref.reset_hooks()
    out = {}
    for layer in range(ref.cfg.n_layers):
        at = lambda h, layer=layer: kept[f"blocks.{layer}.attn.{h}"]
        alpha, u = at("hook_pattern").detach(), at("hook_z").grad.transpose(1, 2)
        v_kv, dv_kv = at("hook_v").detach().transpose(1, 2), at("hook_v").grad.transpose(1, 2)
        rep = alpha.shape[1] // v_kv.shape[1]
        v = v_kv.repeat_interleave(rep, 1)
        dV = alpha.transpose(-2, -1) @ u
        torch.testing.assert_close(dV.unflatten(1, (-1, rep)).sum(2), dv_kv, rtol=1e-7, atol=1e-12)
        out[f"blocks.{layer}.attn"] = dict(alpha=alpha, dS=at("hook_attn_scores").grad, u=u, v=v, dV=dV)
    return out


@pytest.mark.parametrize("gqa", [False, True], ids=["mha", "gqa-rotary"])
def test_lens_records_equal_the_independent_computation(gqa):
    model = lens_model(gqa)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    ids, _ = batch("gpt2")
    refs = {}
    with watch(model, every=2) as w:
        for step in range(4):
            if step % 2 == 0:
                refs[step] = lens_reference(model, ids)
            model(ids, return_type="loss").backward()
            opt.step()
            opt.zero_grad()
    records = w.records
    assert [(r["site"], r["step"]) for r in records] == [(f"blocks.{i}.attn", s) for s in (0, 2) for i in range(2)]
    for rec in records:
        ref = refs[rec["step"]][rec["site"]]
        assert rec["heads"] == 4
        expect = stats(ref["alpha"], ref["u"], ref["v"], ref["dV"], ref["dS"])
        assert matches(rec, expect), mismatches(rec, expect)
        assert not matches(rec, stats(ref["alpha"], ref["u"] * 1.001, ref["v"], ref["dV"]))
        anti = ref["alpha"].transpose(-2, -1)  # the causal pattern transposed: a wrong mask
        assert not matches(rec, stats(anti / anti.sum(-1, keepdim=True), ref["u"], ref["v"], ref["dV"]))


def test_lens_outputs_and_gradients_are_bitwise_unchanged():
    plain, watched = lens_model(True), lens_model(True)
    ids, _ = batch("gpt2")
    with watch(watched, every=2) as w:
        for _ in range(3):
            losses = []
            for model in (plain, watched):
                loss = model(ids, return_type="loss")
                loss.backward()
                losses.append(loss)
            assert torch.equal(*losses)
            for p, q in zip(plain.parameters(), watched.parameters()):
                assert torch.equal(p.grad, q.grad)
    assert len(w.records) == 4
    assert all(not point._forward_hooks for point in watched.modules() if type(point).__name__ == "HookPoint")


def test_hf_t5_eager_records_add_the_position_bias():
    """T5's eager attention adds a relative-position bias to the scores: the records are those of the biased
    scores (encoder and decoder self-attention, cross-attention), and leaving the bias out is told apart."""
    t = _transformers()
    torch.manual_seed(0)
    cfg = t.T5Config(vocab_size=VOCAB, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=4,
                     relative_attention_num_buckets=8, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
    cfg._attn_implementation = "eager"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, ref = (t.T5ForConditionalGeneration(cfg).double() for _ in range(2))
    ref.load_state_dict(model.state_dict())
    ids, _ = batch("gpt2")
    with watch(model, every=1) as w:
        model(input_ids=ids, labels=ids).loss.backward()
    store, mod = [], modeling(ref)
    saved, mod.eager_attention_forward = mod.eager_attention_forward, reference_attention(store)
    try:
        ref(input_ids=ids, labels=ids).loss.backward()
    finally:
        mod.eager_attention_forward = saved
    names = {id(m): n for n, m in ref.named_modules()}
    refs = {names[id(e["module"])]: e for e in store}
    assert len(w.records) == 3 and {r["site"] for r in w.records} == set(refs)
    biased = 0
    for rec in w.records:
        e = refs[rec["site"]]
        u, v, dV = e["out"].grad, e["v"].detach(), e["v"].grad
        assert matches(rec, stats(e["alpha"].detach(), u, v, dV, e["scores"].grad)), rec["site"]
        if e["module"].has_relative_attention_bias:  # the bias left out: the scores q k^T and the mask alone
            biased += 1
            raw = e["raw"] - e["module"].compute_bias(L, L, device=v.device).to(v.dtype)
            nobias = (raw + (e["mask"] if e["mask"] is not None else 0)).softmax(-1)
            assert not matches(rec, stats(nobias, u, v, dV))
    assert biased == 2  # the encoder's and the decoder's self-attention carry the bias


def _lens_refuses(match, **options):
    """A one-block HookedTransformer with `options` (its construction warnings silenced): watching it is refused with
    an error naming `match`."""
    HookedTransformer, HookedTransformerConfig = _lens()
    cfg = HookedTransformerConfig(n_layers=1, d_model=16, n_ctx=8, d_head=4, n_heads=4, d_vocab=VOCAB, act_fn="gelu",
                                  **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = HookedTransformer(cfg)
    with pytest.raises(ValueError, match=match):
        with watch(model):
            pass


def test_lens_clip_qkv_is_refused_whatever_the_positional_embedding():
    for extra in ({}, dict(positional_embedding_type="rotary", rotary_dim=4)):
        _lens_refuses("clip_qkv", clip_qkv=0.05, **extra)


def test_lens_softcap_is_refused():
    _lens_refuses("attn_scores_soft_cap", attn_scores_soft_cap=5.0)


# -- without the extra -------------------------------------------------------------------------------------
def test_a_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now raises ImportError
    with pytest.raises(ImportError, match=r"pip install -e '\.\[hf\]'"):
        watch_hf.require("transformers")
    from numeric import watch_bench
    with pytest.raises(ImportError, match=r"pip install -e '\.\[hf\]'"):
        watch_bench.hf_setup()
    assert "pip install -e '.[hf]'" in watch_bench.skip_reason("hf")
    # other models are watched as before
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    with watch(layer) as w:
        layer(torch.randn(2, 5, 8)).sum().backward()
    assert len(w.records) == 1


# -- the overhead benchmark in the numeric stage ------------------------------------------------------------
def _stage_benchmarks(monkeypatch, missing):
    from derive.profile import DEFAULT
    from derive.results import Results
    from numeric import stage, watch_bench

    timed = []

    def benchmark(setup, **kwargs):
        timed.append(setup)
        return dict(step_s=1.0, step_watched_s=1.05, ratio=1.05, ratio_quartiles=[1.0, 1.1], peak_rss_increase_mib=1.0,
                    held_mib=0.5, pairs=1, steps_per_block=20, enter_exit_s=0.0)
    monkeypatch.setattr(watch_bench, "benchmark", benchmark)
    if missing:
        monkeypatch.setitem(sys.modules, "transformers", None)
    results = Results({})
    st = stage.NumericStage(results, DEFAULT, "cpu", 0, log=lambda *a: None)
    st.watch_overhead()
    return timed, results


def test_the_default_profile_times_hf_beside_the_others(monkeypatch):
    pytest.importorskip("transformers")
    timed, results = _stage_benchmarks(monkeypatch, missing=False)
    assert timed == ["demo", "long", "hf"]
    hf = next(b for b in results.benchmarks if b["name"] == "numeric/watch-overhead/hf/every=10")
    assert hf["ratio"] == 1.05 and hf["goal_ratio"] == 1.1


def test_the_stage_records_hf_skipped_without_transformers(monkeypatch):
    timed, results = _stage_benchmarks(monkeypatch, missing=True)
    assert timed == ["demo", "long"]
    (check,) = [c for c in results.checks if c.id == "numeric/watch-overhead/hf/every=10"]
    assert check.status == "skipped" and "pip install -e '.[hf]'" in str(check.measured)
    assert not any(b["name"].startswith("numeric/watch-overhead/hf/") for b in results.benchmarks)
