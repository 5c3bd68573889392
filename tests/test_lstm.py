"""The conjecture's real LSTM (numeric.experiments.lstm): torch.nn.LSTM's equations over stacked parameters, its
capacity controls, and its place beside (not inside) the mechanisms."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from numeric.experiments import bijection, lstm
from numeric.experiments import mechanism_layers as ml
from numeric.experiments import mechanism_tunnel as mt


def _torch_lstm(p, a, s, d_in, h):
    """torch.nn.LSTM holding run (a, s)'s weights: gate rows in torch's order (i, f, g, o), one bias (b_hh = 0)."""
    net = torch.nn.LSTM(d_in, h, batch_first=True).double()
    i, f, o = p["W_x"][a, s].split(h, -1)
    hi, hf, ho = p["W_h"][a, s].split(h, -1)
    bi, bf, bo = p["b"][a, s].split(h, -1)
    with torch.no_grad():
        net.weight_ih_l0.copy_(torch.cat([i, f, p["W_xg"][a, s], o], -1).T)
        net.weight_hh_l0.copy_(torch.cat([hi, hf, p["W_hg"][a, s], ho], -1).T)
        net.bias_ih_l0.copy_(torch.cat([bi, bf, p["b_g"][a, s], bo]))
        net.bias_hh_l0.zero_()
    return net


@pytest.mark.parametrize("name", ["torch-lstm", "torch-lstm-wide"])
def test_the_layer_is_torch_nn_lstm_with_the_same_weights(name):
    lay = ml.layer(name)
    d_in, T, B = 6, 9, 3
    sh = lay.shapes({"d_in": d_in, "d_k": 4, "d_v": 4, "m": 5})
    g = torch.Generator().manual_seed(0)
    p = {n: torch.randn(2, 3, *s, generator=g, dtype=torch.float64) * 0.5 for n, s in sh.items()}
    x = torch.randn(3, B, T, d_in, generator=g, dtype=torch.float64)  # (S, B, T, d_in): one batch per seed
    ours = lay.mix({n: v[:, :, None] for n, v in p.items()}, x[None])  # (A, S, B, T, h)
    h = sh["W_hg"][0]
    for a in range(2):
        for s in range(3):
            ref, _ = _torch_lstm(p, a, s, d_in, h)(x[s])
            torch.testing.assert_close(ours[a, s], ref, rtol=1e-12, atol=1e-13)
    # a negative control: the same weights with the forget and input gates swapped are not torch's LSTM
    swapped = dict(p)
    i, f, o = p["W_x"].split(h, -1)
    swapped["W_x"] = torch.cat([f, i, o], -1)
    wrong = lay.mix({n: v[:, :, None] for n, v in swapped.items()}, x[None])
    ref, _ = _torch_lstm(p, 0, 0, d_in, h)(x[0])
    assert (wrong[0, 0] - ref).abs().max() > 1e-3


def test_capacity_controls_match_and_exceed_attentions_parameter_count():
    cfg = bijection.BijectionConfig()
    d_in, m = 2 * cfg.symbols, cfg.symbols
    target = lstm.attention_count(d_in, cfg.d_k, cfg.d_v, m)
    counts = {}
    for name in ("torch-lstm", "torch-lstm-wide"):
        sh = ml.layer(name).shapes({"d_in": d_in, "d_k": cfg.d_k, "d_v": cfg.d_v, "m": m})
        counts[name] = sum(torch.Size(s).numel() for s in sh.values())
        assert counts[name] == lstm.count(sh["W_hg"][0], d_in, m)
    assert abs(counts["torch-lstm"] - target) <= 0.1 * target  # the same count, to a width step
    assert 2.6 * target <= counts["torch-lstm-wide"] <= 3.4 * target
    assert lstm.width(1.0, 10, 2, 2, 3) < lstm.width(4.0, 10, 2, 2, 3)


def test_the_baselines_train_beside_the_mechanisms_but_are_not_mechanisms():
    assert not set(ml.baselines()) & set(ml.names()) and set(ml.baselines()) == {"torch-lstm", "torch-lstm-wide"}
    assert ml.trainable()[-2:] == ml.baselines()
    assert set(ml.content("torch-lstm")) == {"W_xg", "W_hg", "b_g"} and "W_O" in ml.routing("torch-lstm")
    with pytest.raises(ValueError, match="no trainable layer; choose from"):
        ml.layer("gru")
    with pytest.raises(NotImplementedError, match="not in the mechanisms"):
        ml.layer("torch-lstm").weights({}, None, None)
    task = bijection.BijectionConfig(values=3, pairs=4, batch=4, steps=3, eval_batch=5, d_k=4, d_v=4)
    cfg = mt.MechanismTunnelConfig(tunnel=task, mechanisms=("softmax", "torch-lstm"), seeds=(0, 1), seeds_per_task=2)
    cfg.validate()
    out = mt.train_task(cfg, "torch-lstm", (0, 1))
    assert out["finite"] and len(out["kl_bits"][0]) == 2
    with pytest.raises(ValueError, match="distinct names among"):
        dataclasses.replace(cfg, mechanisms=("softmax", "gru")).validate()


def test_a_users_mechanism_called_lstm_trains_as_itself_beside_the_baselines(loaded, tmp_path):
    """A mechanism name is an identifier and a baseline's holds a hyphen: a user's `lstm` is never replaced by the
    real LSTM baseline, and the conjecture trains both."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "examples" / "attention_sink.py").read_text()
    assert '"sink", "softmax with an attention sink"' in text
    mine = tmp_path / "my_lstm.py"
    mine.write_text(text.replace('"sink", "softmax with an attention sink"', '"lstm", "a user\'s mechanism named lstm"'))
    loaded(str(mine))
    from derive import mechanisms

    assert ml.layer("lstm") is mechanisms.get("lstm").layer and ml.layer("lstm") is not ml.layer("torch-lstm")
    names = ml.trainable()
    assert len(set(names)) == len(names) and {"lstm", "torch-lstm", "torch-lstm-wide"} <= set(names)


def _scan_inputs(dtype, R=2, S=3, B=4, T=7, h=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    pre = torch.randn(R, S, B, T, 4 * h, generator=g, dtype=dtype).requires_grad_(True)
    w = (torch.randn(R, S, 1, h, 4 * h, generator=g, dtype=dtype) * 0.5).requires_grad_(True)
    return pre, w, torch.randn(R, S, B, T, h, generator=g, dtype=dtype)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_the_fused_scan_and_its_backward_equal_autograd_through_the_plain_scan(dtype, tol):
    """lstm.Scan (one node, the LSTM's own backpropagation through time) against reference_scan differentiated by
    autograd: outputs and both gradients, relative to their largest entry, per dtype."""
    pre, w, probe = _scan_inputs(dtype)
    ours, ref = lstm.scan(pre, w), lstm.reference_scan(pre, w)
    assert ours.grad_fn is not None and "Scan" in type(ours.grad_fn).__name__  # the fused path, not the fallback
    torch.testing.assert_close(ours, ref, rtol=tol, atol=tol)
    got = torch.autograd.grad((ours * probe).sum(), [pre, w])
    want = torch.autograd.grad((ref * probe).sum(), [pre, w])
    for a, b in zip(got, want):
        assert float((a - b).abs().max() / b.abs().max()) < tol
    # a negative control: the scan's gradient with the forget gate's own term left out (f held constant, as a
    # backward that dropped dz_f would compute) is caught by the same comparison
    def forgetful(pre, w_h):
        hdim = w_h.shape[-1] // 4
        h = c = pre.new_zeros((*pre.shape[:-2], hdim))
        out = []
        for t in range(pre.shape[-2]):
            z = pre[..., t, :] + h @ w_h.squeeze(-3)
            i, f, o = z[..., :3 * hdim].sigmoid().split(hdim, -1)
            c = f.detach() * c + i * torch.tanh(z[..., 3 * hdim:])
            h = o * torch.tanh(c)
            out.append(h)
        return torch.stack(out, -2)

    bad = forgetful(pre, w)
    torch.testing.assert_close(bad, ref, rtol=tol, atol=tol)  # the same values: only the gradient is wrong
    wrong = torch.autograd.grad((bad * probe).sum(), [pre, w])
    assert all(float((a - b).abs().max() / b.abs().max()) > 1e-3 for a, b in zip(got, wrong))


def test_the_scan_falls_back_to_autograd_where_weights_broadcast_over_runs():
    """Weights shared across runs (no matrix per run of pre's leading axes) take reference_scan: same values."""
    pre, w, _ = _scan_inputs(torch.float64)
    shared = w[:1, :1].detach().clone().requires_grad_(True)  # (1, 1, 1, h, 4h) against pre's (2, 3, ...)
    out = lstm.scan(pre, shared)
    assert "Scan" not in type(out.grad_fn).__name__
    torch.testing.assert_close(out, lstm.reference_scan(pre, shared), rtol=0, atol=0)
    # one sequence, no run axes at all (T, 4h) against (h, 4h): torch.nn.LSTM's own numbers
    lay = ml.layer("torch-lstm")
    sh = lay.shapes({"d_in": 6, "d_k": 4, "d_v": 4, "m": 5})
    g = torch.Generator().manual_seed(1)
    p = {n: torch.randn(*s, generator=g, dtype=torch.float64) * 0.5 for n, s in sh.items()}
    x = torch.randn(9, 6, generator=g, dtype=torch.float64)
    ref, _ = _torch_lstm({n: v[None, None] for n, v in p.items()}, 0, 0, 6, sh["W_hg"][0])(x[None])
    torch.testing.assert_close(lay.mix(p, x), ref[0], rtol=1e-12, atol=1e-13)
