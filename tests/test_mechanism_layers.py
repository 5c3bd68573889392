"""The routing mechanisms as trainable layers (numeric.experiments.mechanism_layers): each layer's weights equal the
mechanism's own plain-torch reference (derive/mechanisms) and, where they exist, its generated kernels, at float64;
the block-causal form equals the dense one, the quadratic form of the cells equals their scan, the parameters split
into routing and content."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from derive import mechanisms as registry
from numeric.experiments import mechanism_layers as ml
from numeric.experiments import sticky

CFG = sticky.StickyConfig(length=25, seeds=(42, 2024), arms=("sgd",), dtype="float64")
ARMS = 2


def setup(mechanism, scale=1.0):
    """float64 parameters (A = 2 arms, the second moved off the first so the arms differ), data, the causal mask."""
    data = sticky.make_data(CFG, "cpu")
    params = ml.init_params(CFG, mechanism, CFG.seeds, ARMS, torch.float64)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in params.values():
            p.mul_(scale)
            p[1] += 0.3 * torch.randn(p[1].shape, generator=g, dtype=torch.float64)
    T = data.x.shape[-2]
    return params, data, ml.causal(T)


def close(a, b, tol=1e-12):
    a, b = a.detach(), b.detach()
    scale = max(1.0, float(b.abs().max()))
    return float((a - b).abs().max()) <= tol * scale


@pytest.mark.parametrize("name", ml.names())
def test_layer_weights_equal_the_mechanisms_reference(name):
    params, data, mask = setup(name, scale=5.0)  # weights far from uniform
    with torch.no_grad():
        out = ml.weights(name, params, data.x, mask)
        ref = registry.get(name).reference(out["reference"])
    assert out["w"].shape == ref.shape and out["w"].dtype == torch.float64
    assert close(out["w"], ref), float((out["w"] - ref).abs().max())
    assert not close(out["w"][0], out["w"][1], 1e-6)  # the arms differ: a mix-up of arms would show


def test_moe_selects_two_experts_and_mixes_them_with_the_reference_gates():
    params, data, mask = setup("moe", scale=5.0)
    with torch.no_grad():
        out = ml.weights("moe", params, data.x, mask)
        o = ml.mix("moe", params, data.x)
        experts = torch.einsum("bstd,asedv->astev", data.x, params["W_E"])  # y_te = x_t W_e
    g = out["w"]
    assert ((g > 0).sum(-1) == registry.get("moe").layer.top_k).all() and torch.allclose(g.sum(-1), torch.ones_like(g[..., 0]))
    assert close(o, (g[..., None] * experts).sum(-2))


@pytest.mark.parametrize("name", ("gate", "glr"))
def test_cells_unrolled_weights_are_the_recurrence_and_equal_the_scan(name):
    params, data, mask = setup(name, scale=3.0)
    with torch.no_grad():
        out = ml.weights(name, params, data.x, mask)
        keep, write = out["w"][..., 0], out["w"][..., 1]
        T = keep.shape[-1]
        W = torch.zeros(keep.shape + (T,), dtype=torch.float64)  # w_tj = write_j prod_{s=j+1..t} keep_s
        for t in range(T):
            for j in range(t + 1):
                W[..., t, j] = write[..., j] * keep[..., j + 1:t + 1].prod(-1)
        assert close(out["unrolled"], W)
        quadratic, scan = ml.mix(name, params, data.x, mask), ml.mix(name, params, data.x, form="scan")
        assert close(quadratic, scan)
        if name == "gate":  # the convex gate's weights over (previous, candidate) sum to 1
            assert torch.allclose(out["w"].sum(-1), torch.ones_like(keep))


@pytest.mark.parametrize("name", ml.names())
def test_block_causal_form_equals_the_dense_form_values_and_gradients(name):
    params, data, mask = setup(name, scale=2.0)
    T = data.x.shape[-2]
    leaves = list(params.values())
    dense = ml.losses(name, params, data.x, data.y, mask)
    blocked = ml.losses(name, params, data.x, data.y, blocks=ml.query_blocks(T, 5))
    assert close(blocked, dense)
    for a, b in zip(torch.autograd.grad(blocked.sum(), leaves), torch.autograd.grad(dense.sum(), leaves)):
        assert close(a, b, 1e-11)


@pytest.mark.parametrize("name", ml.names())
def test_runs_are_independent_and_each_gradient_is_its_own_losses(name):
    """The arms x seeds batch is a batch of independent runs: the gradient of the summed losses, restricted to one
    run, is that run's gradient alone (autograd through one run's slice)."""
    params, data, mask = setup(name)
    loss = ml.losses(name, params, data.x, data.y, mask)
    grads = torch.autograd.grad(loss.sum(), list(params.values()), retain_graph=True)
    one = torch.autograd.grad(loss[1, 0], list(params.values()))
    for g, o in zip(grads, one):
        assert close(g[1, 0], o[1, 0]) and float(o[0].abs().max()) == 0.0 and float(o[1, 1].abs().max()) == 0.0


def test_generated_mechanism_kernels_give_the_same_weights():
    """numeric/generated/mechanisms.py (emitted from the proved closed forms), for every mechanism: the attention
    mechanisms' weights over keys and outputs; each cell's one step (the kernel's weights over (previous state,
    new content) from its logits A, and o = the state h_t from H = (h_{t-1}, x_t W_V)); the router's gates and the
    mixture of experts' output."""
    gen = pytest.importorskip("numeric.generated.mechanisms")
    nm = pytest.importorskip("numeric.mechanisms")
    assert set(ml.names()) <= set(gen.MECHANISMS) and not gen.UNEMITTED
    for name in ml.names():
        params, data, mask = setup(name, scale=3.0)
        with torch.no_grad():
            out = ml.weights(name, params, data.x, mask)
            t = out["reference"]
            if name in ("gate", "glr"):
                h = ml.cell_scan(name, params, data.x)
                prev = torch.cat([torch.zeros_like(h[..., :1, :]), h[..., :-1, :]], -2)
                H = torch.stack([prev, data.x.expand(h.shape[:-1] + data.x.shape[-1:]) @ params["W_V"]], -2)
                alpha, o = nm.call(nm.kernel(gen, name, "forward", "unmasked"), {"a": t["A"], "h": H})
                assert close(o, h), name
                assert close(o, ml.mix(name, params, data.x, mask).detach()), name  # the quadratic form trained
            elif name == "moe":
                env = {"x": t["X"], "mask": t["mask"], "w_e": params["W_E"], "w_r": t["WR"]}
                alpha, o = nm.call(nm.kernel(gen, name, "forward", "masked"), env)
                assert close(o, ml.mix(name, params, data.x, mask).detach()), name
            else:
                v = data.x @ params["W_V"]
                env = {"q": t["q"], "k": t["k"], "v": v, "mask": t["mask"], "scale": t["c"], "beta": t["beta"],
                       "ell": t.get("ell")}
                alpha, o = nm.call(nm.kernel(gen, name, "forward", "masked"), env)
                assert close(o, ml.mix(name, params, data.x, mask).detach()), name
        assert close(alpha, out["w"]), name


def test_parameters_split_into_routing_and_content_and_start_from_the_sticky_models():
    for m in ml.names():
        assert set(ml.routing(m)) | set(ml.content(m)) == set(ml.params(m)) and not set(ml.routing(m)) & set(ml.content(m))
        assert "W_O" in ml.routing(m) and ml.content(m)
    assert ml.content("moe") == ("W_E",) and set(ml.routing("ssd")) == {"W_Q", "W_K", "W_O", "w_ell"}
    assert set(ml.routing("glr")) == {"W_O", "w_f", "w_i"} and set(ml.routing("gate")) == {"W_O", "w_g"}
    cfg = dataclasses.replace(CFG, dtype="float32")
    shared = dict(zip(ml.SHARED, sticky.seed_params(cfg, 2024)))
    for m in ml.names():
        p = ml.init_params(cfg, m, cfg.seeds, 3)
        for name, t in p.items():
            assert t.shape[:2] == (3, 2) and t.requires_grad
            assert torch.equal(t[0], t[2])  # every arm of a seed starts from the same point
            if name in shared:
                assert torch.equal(t[1, 1], shared[name].float())
    assert torch.equal(ml.init_params(cfg, "ssd", (2024,), 1)["w_ell"][0, 0], ml.init_params(cfg, "ssd", cfg.seeds, 1)["w_ell"][0, 1])


def test_unknown_mechanism_or_form_is_refused():
    params, data, mask = setup("softmax")
    with pytest.raises(ValueError, match="no trainable layer"):
        ml.mix("mamba", params, data.x, mask)
    with pytest.raises(ValueError, match="unknown form"):
        ml.mix("softmax", params, data.x, mask, form="scan")
