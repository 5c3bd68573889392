"""The LSTM the paper names as its negative case, trained beside the mechanisms on the conjecture's tasks.

The equations are torch.nn.LSTM's (one layer, gate order i, f, g, o):

    i_t = sigma(x_t W_xi + h_{t-1} W_hi + b_i)    f_t, o_t likewise
    g_t = tanh(x_t W_xg + h_{t-1} W_hg + b_g)
    c_t = f_t c_{t-1} + i_t g_t,    h_t = o_t tanh(c_t),    h_{-1} = c_{-1} = 0

read out by W_O (h_t W_O, the logits over the next token). The gates see the current input and the previous hidden
state, never another position's content relative to the query: the paper's reason an LSTM should not learn the
posterior. It is not a mechanism of the mechanisms table (its weights over earlier positions are not a closed form of
one step), so it has no proved cells; the conjecture's report shows it beside the table's partition, labelled as the
paper's negative case, not inside it.

Written over stacked parameters with leading dims (arms, seeds), like every layer of
numeric.experiments.mechanism_layers, so all runs of a task train at once; tests/test_lstm.py checks the output
against torch.nn.LSTM with the same weights (float64). Content (the EM-like arm's fast parameters): the candidate's
weights W_xg, W_hg, b_g, what the cell writes; routing: the three gates and the readout.

Capacity: `LSTM(factor)` picks the hidden width whose parameter count is nearest `factor` x the paper's mechanism's
(softmax attention's W_Q, W_K, W_V, W_O) at the task's sizes: `torch-lstm` at the same count, `torch-lstm-wide` at
about three times it, so a failure is not a matter of size. Their names hold a hyphen, which no mechanism's name can
(a mechanism's name is an identifier): a user's mechanism called `lstm` trains as itself beside them.
"""
from __future__ import annotations

import functools

from derive.mechanisms.layer import Layer, project

GATES = 3  # i, f, o (the candidate g is the content)


def count(h, d_in, m):
    """Parameters of an LSTM of hidden width h on d_in inputs read out to m symbols."""
    return 4 * h * d_in + 4 * h * h + 4 * h + h * m


def attention_count(d_in, d_k, d_v, m):
    """Parameters of softmax attention's layer: W_Q, W_K (d_in x d_k), W_V (d_in x d_v), W_O (d_v x m)."""
    return 2 * d_in * d_k + d_in * d_v + d_v * m


def width(factor, d_in, d_k, d_v, m):
    """The hidden width whose parameter count is nearest factor x attention's (ties: the smaller width)."""
    target = factor * attention_count(d_in, d_k, d_v, m)
    return min(range(1, 4097), key=lambda h: (abs(count(h, d_in, m) - target), h))


class LSTM(Layer):
    """torch.nn.LSTM's cell over stacked parameters (leading (A, S, ...)), read out by W_O."""
    shared = ()
    content = ("W_xg", "W_hg", "b_g")
    forms = ("scan",)
    quadratic = False
    padded = ()

    def __init__(self, factor=1.0):
        self.factor = float(factor)
        self.own = {"W_x": ("d_in", "3h"), "W_h": ("h", "3h"), "b": ("3h",),
                    "W_xg": ("d_in", "h"), "W_hg": ("h", "h"), "b_g": ("h",), "W_O": ("h", "m")}

    def validate(self, name):
        self.name = name

    def shapes(self, dims):
        h = width(self.factor, dims["d_in"], dims["d_k"], dims["d_v"], dims["m"])
        sizes = {**dims, "h": h, "3h": GATES * h}
        return {n: tuple(sizes[d] for d in shape) for n, shape in self.own.items()}

    def mix(self, p, x):
        """h_t for every position (..., T, h): the scan, one step per position (`scan`)."""
        import torch

        # The gates' and the candidate's weights joined once, so each position costs one recurrent product
        # (the parameters stay apart: the EM-like arm moves the candidate's at its own rate).
        w_x = torch.cat([p["W_x"], p["W_xg"]], -1)
        w_h = torch.cat([p["W_h"], p["W_hg"]], -1)
        pre = project(x, w_x) + torch.cat([p["b"], p["b_g"]], -1)[..., None, :]  # (..., T, 4h)
        return scan(pre, w_h)

    def weights(self, p, x, mask):
        raise NotImplementedError(NO_WEIGHTS)

    def tracked(self, p, x, rows):
        raise NotImplementedError(NO_WEIGHTS)


NO_WEIGHTS = "an LSTM has no closed-form weights over positions (it is not in the mechanisms table)"


def scan(pre, w_h):
    """h_t (..., T, h) from the pre-activations pre (..., T, 4h) (x_t W_x + b, gate order i, f, o, g) and the recurrent
    weights w_h (..., h, 4h), or (..., 1, h, 4h) against a batch axis of pre (the tunnel's (R, S, B, T, 4h): one
    product per run over its B rows). Where w_h holds one matrix per run of pre's batch, the scan is `Scan`: one
    autograd node whose backward is the LSTM's own backpropagation through time, a few fused operations per position
    instead of a graph of them (tests/test_lstm.py holds it to autograd through `reference_scan`). Otherwise
    `reference_scan`."""
    if pre.dim() >= 3 and w_h.dim() == pre.dim() and w_h.shape[-3] == 1 and w_h.shape[:-3] == pre.shape[:-3]:
        return _scan_function().apply(pre, w_h.squeeze(-3))
    return reference_scan(pre, w_h)


def reference_scan(pre, w_h):
    """The scan as plain torch operations, differentiated by autograd: the definition `Scan` is checked against."""
    import torch

    hdim = w_h.shape[-1] // (GATES + 1)
    lead = torch.broadcast_shapes(pre.shape[:-2], w_h.shape[:-2])
    h = pre.new_zeros((*lead, hdim))
    c = pre.new_zeros((*lead, hdim))
    out = []
    for t in range(pre.shape[-2]):
        z = pre[..., t, :] + _recurrent(h, w_h)
        i, f, o = z[..., :GATES * hdim].sigmoid().split(hdim, -1)
        g = torch.tanh(z[..., GATES * hdim:])
        c = f * c + i * g
        h = o * torch.tanh(c)
        out.append(h)
    return torch.stack(out, -2)


@functools.cache
def _scan_function():
    """`Scan`, the autograd function, built on first use (torch is imported by the layer's methods, not here)."""
    import torch

    class Scan(torch.autograd.Function):
        """The LSTM scan over pre (..., B, T, 4h) with w (..., h, 4h), one matrix per run of pre's leading axes.

        Backward, per position from the last (dh, dc carried from position t+1; s = sigma, the gates i, f, o):
            dh_t = dH_t + dh',  dc_t = dc' + dh_t o (1 - tanh^2 c_t),
            dz_t = [dc_t g i(1-i), dc_t c_{t-1} f(1-f), dh_t tanh(c_t) o(1-o), dc_t i (1-g^2)],
            dh' = dz_t w^T,  dc' = dc_t f;
        then d pre = dz and dw = sum over B and T of h_{t-1}^T dz_t, one product. Every coefficient that depends
        only on the forward's values is formed once over all positions, so each position costs six operations."""

        @staticmethod
        def forward(ctx, pre, w):
            hdim = w.shape[-1] // (GATES + 1)
            lead, T = pre.shape[:-2], pre.shape[-2]
            h = pre.new_zeros((*lead, hdim))
            c = pre.new_zeros((*lead, hdim))
            gates, cands, cells, tanhs, hs = [], [], [], [], []
            for t in range(T):
                z = torch.matmul(h, w).add_(pre[..., t, :])
                s = z[..., :GATES * hdim].sigmoid()
                g = z[..., GATES * hdim:].tanh()
                i, f, o = s.split(hdim, -1)
                c = torch.addcmul(f * c, i, g)
                tc = c.tanh()
                h = o * tc
                gates.append(s), cands.append(g), cells.append(c), tanhs.append(tc), hs.append(h)
            H = torch.stack(hs, -2)
            ctx.save_for_backward(w, H, torch.stack(gates, -2), torch.stack(cands, -2), torch.stack(cells, -2),
                                  torch.stack(tanhs, -2))
            return H

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, dH):
            w, H, S, G, C, TC = ctx.saved_tensors
            hdim, T = G.shape[-1], G.shape[-2]
            i, f, o = S.split(hdim, -1)
            zero = C.new_zeros((*C.shape[:-2], 1, hdim))
            c_prev = torch.cat([zero, C[..., :-1, :]], -2)
            h_prev = torch.cat([zero, H[..., :-1, :]], -2)
            A = o * (1 - TC * TC)  # d c_t / d h_t through h = o tanh(c)
            P = torch.cat([G * i * (1 - i), c_prev * f * (1 - f), TC * o * (1 - o), i * (1 - G * G)], -1)  # dz's layout
            wT = w.mT
            dZ = torch.empty_like(P)
            dh = dc = None
            for t in range(T - 1, -1, -1):
                dh_t = dH[..., t, :] if dh is None else dH[..., t, :] + dh
                dc_t = dh_t * A[..., t, :] if dc is None else torch.addcmul(dc, dh_t, A[..., t, :])
                dz = torch.mul(torch.cat([dc_t, dc_t, dh_t, dc_t], -1), P[..., t, :], out=dZ[..., t, :])
                dh = torch.matmul(dz, wT)
                dc = dc_t * f[..., t, :]
            rows = (*h_prev.shape[:-3], h_prev.shape[-3] * T)
            dw = h_prev.reshape(*rows, hdim).mT @ dZ.reshape(*rows, dZ.shape[-1])
            return dZ, dw

    return Scan


def _recurrent(h, w):
    """h_{t-1} W per run: h (..., B, h) against w (..., 1, h, k) (the tunnel's batch axis: B rows, one product per
    run), or h (..., h) against w (..., h, k) (one row per run)."""
    if w.dim() >= 3 and w.dim() == h.dim() + 1 and w.shape[-3] == 1:
        return h @ w.squeeze(-3)
    return (h[..., None, :] @ w).squeeze(-2)


def _registered():
    out = {"torch-lstm": LSTM(1.0), "torch-lstm-wide": LSTM(3.0)}
    for name, lay in out.items():
        lay.validate(name)
    return out


# The baselines the conjecture's tasks train beside the mechanisms (numeric.experiments.mechanism_layers.layer finds
# them by name): not mechanisms, so neither the sticky grid nor the mechanisms table has them.
BASELINES = _registered()
