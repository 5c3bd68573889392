"""The value-manifold diagnostic (numeric.manifold), its rule V1 with its controls, the capture on real models and the
experiments stage's part (numeric.experiments.gpt_tunnel)."""
import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from derive import verdict
from derive.results import Results
from numeric import manifold
from numeric.experiments import gpt_tunnel as gt
from numeric.experiments import registry, rules


def axis_points(seed=0, B=64, L=20, d=6, share=0.8, noise_on_axis=0.0):
    """Points with a known PC1 share along e_0 whose coordinate is the entropy (plus optional noise on the axis),
    the rest isotropic: variance 1 on e_0, (1 - share) / share spread over the other d - 1 directions."""
    rng = np.random.default_rng(seed)
    H = rng.uniform(0.5, 2.0, (B, L))
    z = (H - H.mean()) / H.std()
    z = math.sqrt(1 - noise_on_axis**2) * z + noise_on_axis * rng.standard_normal((B, L))
    other = math.sqrt((1 - share) / share / (d - 1))
    P = np.concatenate([z[..., None], other * rng.standard_normal((B, L, d - 1))], -1)
    return P, H


def test_known_share_and_correlation_are_measured_with_intervals_that_contain_them():
    P, H = axis_points(share=0.8)
    m = manifold.measure(P, H, seed=0)
    assert m["finite"] and m["pc1_share"] == pytest.approx(0.8, abs=0.02)
    assert m["pc1_share_ci95"][0] <= 0.8 <= m["pc1_share_ci95"][1]
    assert m["spearman"] > 0.99 and m["abs_spearman_lower"] > 0.99
    assert (m["sequences"], m["positions"], m["dim"]) == (64, 20, 6)
    # a correlation well below 1: rho = (6 / pi) asin(r / 2) for a bivariate normal with correlation r
    rng = np.random.default_rng(3)
    B, L, r = 200, 25, 0.6
    x = rng.standard_normal((B, L))
    e = r * x + math.sqrt(1 - r**2) * rng.standard_normal((B, L))
    P = np.concatenate([3 * x[..., None], 0.1 * rng.standard_normal((B, L, 3))], -1)
    m = manifold.measure(P, e, seed=1)
    truth = 6 / math.pi * math.asin(r / 2)
    assert m["spearman_ci95"][0] <= truth <= m["spearman_ci95"][1] and m["spearman"] == pytest.approx(truth, abs=0.05)


def test_interval_covers_the_truth_in_most_repetitions():
    hits = 0
    for seed in range(10):
        P, H = axis_points(seed=seed, B=40, L=10, share=0.6, noise_on_axis=0.5)
        ci = manifold.measure(P, H, resamples=100, seed=seed)["pc1_share_ci95"]
        hits += ci[0] <= 0.6 <= ci[1]
    assert hits >= 8


def test_the_sign_of_pc1_is_fixed_by_the_entropy_and_the_measurement_is_seeded():
    P, H = axis_points()
    a, b = manifold.measure(P, H, seed=4), manifold.measure(-P, H, seed=4)
    assert a == b  # PC1 oriented so that rho >= 0, whichever way the points point
    assert manifold.measure(P, H, seed=5)["pc1_share_ci95"] != a["pc1_share_ci95"]
    many = manifold.measure_many(P, {"h": H, "minus": -H}, seed=4)
    assert many["h"] == a and many["minus"]["spearman"] == a["spearman"]


def test_the_replicates_are_sequences_resampled_whole():
    """Each bootstrap replicate equals the PCA and Spearman of the materialised resample of whole sequences."""
    from numeric.manifold import _replicates, _spearman

    P, H = axis_points(B=12, L=5, d=4, share=0.5, noise_on_axis=0.7)
    m = manifold.measure(P, H, resamples=3, seed=9)
    _, _, pc1 = _direct(P, H)
    shares, rhos = _replicates(P, {"h": H}, pc1, 3, 9)
    rng = np.random.default_rng(9)
    for r in range(3):
        idx = np.sort(rng.integers(0, 12, 12))
        Pr, Hr = P[idx], H[idx]
        share, rho, _ = _direct(Pr, Hr, pc1)
        assert shares[r] == pytest.approx(share, abs=1e-10) and rhos["h"][r] == pytest.approx(rho, abs=1e-10)
    assert m["resamples"] == 3 and _spearman(np.arange(5.0), np.arange(5.0)) == pytest.approx(1.0)


def _direct(P, H, direction=None):
    from numeric.experiments import stats as st

    ratios, rho, v = st.pc1_spearman(P.reshape(-1, P.shape[-1]), H.reshape(-1), direction)
    if direction is None and rho < 0:
        v, rho = -v, -rho
    return ratios[0], rho, v


def test_far_from_origin_points_give_the_intervals_of_centred_points():
    P, H = axis_points(B=16, L=8, d=4, share=0.6, noise_on_axis=0.5)
    P = P - P.reshape(-1, 4).mean(0)
    a, b = manifold.measure(P, H, resamples=50, seed=2), manifold.measure(P + 1e5, H, resamples=50, seed=2)
    for key in ("pc1_share", "spearman"):
        assert b[key] == pytest.approx(a[key], abs=1e-9)
    for key in ("pc1_share_ci95", "spearman_ci95"):
        assert b[key] == pytest.approx(a[key], abs=1e-9)


def test_rule_is_conservative_on_small_samples():

    import importlib

    v1_unit = importlib.import_module("numeric.experiments.rules.v1").v1_unit
    for seed in range(20):  # isotropic points, the entropy their own sample PC1 coordinate: a biased-up share
        rng = np.random.default_rng(seed)
        P = rng.standard_normal((8, 3, 3))
        X = P.reshape(-1, 3) - P.reshape(-1, 3).mean(0)
        H = (X @ np.linalg.eigh(X.T @ X)[1][:, -1]).reshape(8, 3)
        m = manifold.measure(P, H, resamples=100, seed=seed)
        verdict_, entry = v1_unit(m)
        assert verdict_ != "reproduced" and entry["pc1_share_lower"] <= m["pc1_share"]
    P, H = axis_points(B=3, L=20, share=0.9)
    m = manifold.measure(P, H, resamples=20)
    assert m["finite"] and v1_unit(m)[0] == "undecided" and "fewer than 8" in v1_unit(m)[1]["why"]


def test_non_finite_or_degenerate_inputs_are_not_measured():
    P, H = axis_points()
    bad = P.copy()
    bad[0, 0, 0] = np.nan
    assert manifold.measure(bad, H)["finite"] is False and math.isnan(manifold.measure(bad, H)["pc1_share"])
    assert manifold.measure(P, np.ones_like(H))["finite"] is False  # a constant entropy
    assert manifold.measure(np.zeros_like(P), H)["why"] == "the points do not vary"
    with pytest.raises(ValueError, match="points must be"):
        manifold.measure(P[0], H)


def test_predictive_entropy_is_in_bits():
    logits = torch.zeros(2, 3, 8)
    assert torch.allclose(manifold.predictive_entropy(logits), torch.full((2, 3), 3.0, dtype=torch.float64))
    sharp = torch.tensor([[100.0, 0.0, 0.0]])
    assert manifold.predictive_entropy(sharp).item() == pytest.approx(0.0, abs=1e-12)


# -- the rule ------------------------------------------------------------------------------------------------------
def unit(share_ci, rho_ci, share=None, rho=None):
    return {"pc1_share": share if share is not None else sum(share_ci) / 2, "pc1_share_ci95": list(share_ci),
            "spearman": rho if rho is not None else sum(rho_ci) / 2, "spearman_ci95": list(rho_ci), "finite": True,
            "sequences": 32, "positions": 10, "dim": 8}


def test_rule_per_layer_and_for_the_claim():
    yes, axis_only, tracks = unit((0.6, 0.7), (0.6, 0.8)), unit((0.6, 0.7), (-0.1, 0.1)), unit((0.2, 0.3), (0.55, 0.7))
    assert rules.v1({"a": yes, "b": axis_only}).verdict == "reproduced"
    assert rules.v1({"a": axis_only}).verdict == "not-reproduced"  # dominant, but not the entropy's
    assert rules.v1({"a": tracks, "b": axis_only}).verdict == "partly-reproduced"
    assert rules.v1({"a": unit((0.49, 0.7), (0.6, 0.8))}).verdict == "partly-reproduced"  # the share's lower end
    assert rules.v1({"a": unit((0.5, 0.7), (-0.8, -0.5))}).verdict == "reproduced"  # |rho|
    nan = unit((float("nan"), float("nan")), (0.6, 0.8))
    assert rules.v1({"a": nan, "b": axis_only}).verdict == "undecided"  # a could carry it
    assert rules.v1({"a": nan, "b": yes}).verdict == "reproduced"
    assert rules.v1({}).verdict == "undecided" and rules.v1({"a": None}).verdict == "undecided"
    r = rules.v1({"a": nan, "b": yes})
    assert r.measured["units"]["a"]["pc1_share"] is None and r.measured["carrying"] == ["b"]  # no nan kept
    assert "rules" not in r.reason and "b: PC1 65%" in r.reason


def test_controls_say_what_they_must():
    m = {"units": {"x (values)": unit((0.2, 0.3), (0.0, 0.1))}, "seed": 0,
         "shuffled": {"x (values)": unit((0.2, 0.3), (-0.02, 0.02))}}
    got = {cid: (kind, r.verdict) for cid, (kind, r) in rules.v1_controls(m).items()}
    assert got == {cid: ("positive" if v == "reproduced" else "negative", v) for cid, v in rules.V1_EXPECTED.items()}
    assert set(got) == set(rules.V1_CONSTRUCTIONS)
    assert "V1/entropy-shuffled" not in rules.v1_controls({"units": m["units"]})


def test_registered_with_named_thresholds():
    claim = registry.REGISTRY["V1"]
    assert claim.rule is rules.v1 and claim.thresholds == {"V1_SHARE": rules.V1_SHARE, "V1_RHO": rules.V1_RHO,
                                                          "V1_MIN_SEQUENCES": rules.V1_MIN_SEQUENCES}
    assert claim.ref.startswith("ours: ")
    r = rules.v1({"a (outputs)": unit((0.6, 0.7), (0.6, 0.8))})
    assert claim.headline_of(r.measured).startswith("a (outputs): PC1 65% (from 60%), |rho| from 0.60")


# -- the capture ---------------------------------------------------------------------------------------------------
def test_capture_on_a_transformer_encoder_names_layers_by_module_path():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=True)
    model = nn.Sequential(nn.Linear(3, 16), nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)).eval()
    x = torch.randn(2, 7, 3)
    plain = model(x).detach()  # with grad: the general path, which the capture runs (the fused one differs by rounding)
    cap = manifold.capture(model, x)
    assert torch.equal(cap.output, plain) and cap.source == "sdpa"
    with torch.no_grad():
        assert torch.allclose(cap.output, model(x), atol=1e-5)
    assert list(cap.layers) == ["1.layers.0.self_attn", "1.layers.1.self_attn"]
    got = cap.layers["1.layers.0.self_attn"]
    assert got["values"].shape == got["outputs"].shape == (2, 7, 16)
    # the values are the V projection of the first layer's normalised input, heads concatenated
    enc = model[1].layers[0]
    with torch.no_grad():
        h = enc.norm1(model[0](x))
        E = enc.self_attn.embed_dim
        v = h @ enc.self_attn.in_proj_weight[2 * E:].T + enc.self_attn.in_proj_bias[2 * E:]
    assert torch.allclose(got["values"], v, atol=1e-6)
    only = manifold.capture(model, x, kinds=("values",))
    assert set(only.layers["1.layers.1.self_attn"]) == {"values"}
    with pytest.raises(ValueError, match="kinds"):
        manifold.capture(model, x, kinds=("keys",))


def test_capture_of_multihead_attention_with_weights_reruns_it_without():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(3, 5, 8)
    cap = manifold.capture(mha, x, x, x)  # need_weights=True: no SDPA call, run again for the capture
    assert list(cap.layers) == [""] and cap.layers[""]["outputs"].shape == (3, 5, 8)
    with torch.no_grad():
        out, _ = mha(x, x, x)
    assert torch.allclose(cap.output[0], out)
    assert torch.allclose(mha.out_proj(cap.layers[""]["outputs"]), out, atol=1e-6)


def test_capture_on_the_gpt_style_model_and_a_call_index():
    cfg = gt.ManifoldConfig(steps=1, batch=2, length=9, eval_batch=4, d_model=16, resamples=5)
    model = gt.build(cfg).eval()
    y = torch.randint(0, 5, (4, 8))
    cap = manifold.capture(model, y)
    assert list(cap.layers) == cfg.sites() and cap.output.shape == (4, 8, 5)
    assert all(t.shape == (4, 8, 16) for got in cap.layers.values() for t in got.values())

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = gt.CausalSelfAttention(16, 4)

        def forward(self, x):
            return self.attn(self.attn(x))

    assert list(manifold.capture(Twice(), torch.randn(2, 5, 16)).layers) == ["attn", "attn#1"]
    units = manifold.measure_layers(cap.layers, manifold.predictive_entropy(cap.output).numpy(), resamples=5)
    assert list(units) == [f"{s} ({k})" for s in cfg.sites() for k in manifold.KINDS]


def _same_weights_under_sdpa_and_eager(make, ids, names):
    torch.manual_seed(0)
    sdpa = make("sdpa").eval()
    eager = make("eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    a, b = manifold.capture(sdpa, ids), manifold.capture(eager, ids)
    assert (a.source, b.source) == ("sdpa", "eager")
    assert list(a.layers) == list(b.layers) == names
    for name in names:
        assert set(a.layers[name]) == set(b.layers[name]) == {"values", "outputs"}
        for kind in manifold.KINDS:
            assert a.layers[name][kind].shape == b.layers[name][kind].shape
            assert torch.allclose(a.layers[name][kind], b.layers[name][kind], atol=1e-5), (name, kind)
    assert torch.allclose(a.output.logits, b.output.logits, atol=1e-5)
    return a


def test_capture_on_a_hugging_face_gpt2_is_the_same_under_sdpa_and_eager():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=11, n_positions=16, n_embd=16, n_layer=2, n_head=4)
    ids = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(1))
    cap = _same_weights_under_sdpa_and_eager(
        lambda impl: transformers.GPT2LMHeadModel._from_config(copy.deepcopy(config), attn_implementation=impl), ids,
        ["transformer.h.0.attn", "transformer.h.1.attn"])
    assert all(t.shape == (2, 6, 16) for got in cap.layers.values() for t in got.values())
    assert cap.output.logits.shape == (2, 6, 11)


def test_capture_on_a_hugging_face_llama_with_grouped_keys_is_the_same_under_sdpa_and_eager():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=13, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
    ids = torch.randint(0, 13, (2, 6), generator=torch.Generator().manual_seed(2))
    cap = _same_weights_under_sdpa_and_eager(
        lambda impl: transformers.LlamaForCausalLM._from_config(copy.deepcopy(config), attn_implementation=impl), ids,
        ["model.layers.0.self_attn", "model.layers.1.self_attn"])
    assert all(t.shape == (2, 6, 16) for got in cap.layers.values() for t in got.values())  # 4 heads of 4


def test_capture_reads_three_dimensional_and_batched_sdpa_inputs():
    class Attn(nn.Module):
        def __init__(self, shape):
            super().__init__()
            self.shape = shape

        def forward(self, x):
            q = x.reshape(self.shape)
            return F.scaled_dot_product_attention(q, q, q)

    from torch.nn import functional as F

    x = torch.randn(2, 3, 5, 4)
    cap = manifold.capture(Attn((2, 5, 12)), x)  # (B, L, E): one head
    assert cap.layers[""]["values"].shape == (2, 5, 12)
    assert torch.equal(cap.layers[""]["values"], x.reshape(2, 5, 12))
    cap = manifold.capture(Attn((2, 1, 3, 5, 4)), x)  # (B1, B2, H, L, dh): batch dims flattened
    assert cap.layers[""]["values"].shape == (2, 5, 12)
    assert torch.equal(cap.layers[""]["values"], x.transpose(1, 2).reshape(2, 5, 12))
    with pytest.raises(ValueError, match="cannot read"):
        manifold._heads(torch.randn(5, 4))


def test_sequence_first_attention_is_captured_batch_first_and_a_mismatch_is_refused():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=False).eval()
    x = torch.randn(5, 3, 8)  # (L, B, E)
    cap = manifold.capture(mha, x, x, x, need_weights=False)
    assert cap.layers[""]["values"].shape == (3, 5, 8)  # (B, L, .) whatever batch_first
    H = manifold.predictive_entropy(cap.output[0]).numpy()  # (L, B): the module's own layout
    with pytest.raises(ValueError, match=r"\(5, 3\)"):
        manifold.measure_layers(cap.layers, H, resamples=5)
    assert set(manifold.measure_layers(cap.layers, H.T, resamples=5)) == {"(model) (values)", "(model) (outputs)"}


def test_capture_of_a_model_without_attention_warns():
    with pytest.warns(RuntimeWarning, match="nothing was captured"):
        cap = manifold.capture(nn.Linear(3, 4), torch.randn(2, 3))
    assert cap.layers == {} and cap.source == ""


def test_capture_on_a_hooked_transformer():
    tl = pytest.importorskip("transformer_lens")
    cfg = tl.HookedTransformerConfig(n_layers=2, d_model=16, n_ctx=8, d_head=4, n_heads=4, d_vocab=11,
                                     act_fn="relu", attn_only=False)
    model = tl.HookedTransformer(cfg).eval()
    cap = manifold.capture(model, torch.randint(0, 11, (2, 6)))
    assert cap.source == "transformer_lens" and list(cap.layers) == ["blocks.0.attn", "blocks.1.attn"]
    assert all(t.shape == (2, 6, 16) for got in cap.layers.values() for t in got.values())


# -- the experiments stage's part ------------------------------------------------------------------------------------
def test_stage_part_runs_at_quick_sizes_and_writes_its_section(tmp_path):
    from numeric.experiments.stage import ExperimentStage

    lines = []
    r = Results({}, catalogue=registry.catalogue())
    stage = ExperimentStage(r, "quick", "cpu", 0, tmp_path, log=lines.append, threads=1)
    stage.value_manifold()
    ids = [c.id for c in r.checks]
    assert ids[:3] == ["experiments/value-manifold", "experiments/V1/verdict/model-entropy",
                       "experiments/V1/verdict/bayes-entropy"]
    assert set(ids[3:]) == {f"experiments/{'positive' if v == 'reproduced' else 'negative'}-control/{cid}"
                            for cid, v in rules.V1_EXPECTED.items()}
    assert all(c.status == "pass" for c in r.checks), [c.id for c in r.checks if c.status != "pass"]
    data = r.experiments["value_manifold"]
    cfg = stage.cfgs["manifold"]
    assert sorted(data["layers"]) == cfg.sites() and data["config"]["steps"] == cfg.steps
    assert set(data["model"]) == set(data["bayes"]) == {f"{s} ({k})" for s in cfg.sites() for k in manifold.KINDS}
    assert data["rule"]["verdict"] in (*rules.VERDICTS, "undecided") and set(data["controls"]) == set(rules.V1_EXPECTED)
    verdict.assign_empirical(r, registry.IDS)
    assert r.claims["V1"]["verdict"] == data["rule"]["verdict"]
    again = ExperimentStage(Results({}, catalogue=registry.catalogue()), "quick", "cpu", 0, tmp_path, log=lines.append)
    again.value_manifold()
    assert any("cached   value-manifold" in line for line in lines)
    assert again.results.experiments["value_manifold"]["model"] == data["model"]


def test_profile_sizes_are_checked():
    from derive.profile import DEFAULT, QUICK

    with pytest.raises(ValueError, match="manifold_d_model"):
        QUICK.replace("experiments", manifold_d_model=30)
    with pytest.raises(ValueError, match="manifold_eval_batch"):
        QUICK.replace("experiments", manifold_eval_batch=1)
    assert QUICK.experiments.manifold_steps * 10 <= DEFAULT.experiments.manifold_steps
    with pytest.raises(ValueError, match="dtype"):
        gt.ManifoldConfig(steps=1, batch=1, length=4, eval_batch=2, d_model=8, resamples=1, dtype="half").validate()
