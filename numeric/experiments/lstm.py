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
        """h_t for every position (..., T, h): the scan, one step per position."""
        import torch

        # The gates' and the candidate's weights joined once, so each position costs one recurrent product
        # (the parameters stay apart: the EM-like arm moves the candidate's at its own rate).
        w_x = torch.cat([p["W_x"], p["W_xg"]], -1)
        w_h = torch.cat([p["W_h"], p["W_hg"]], -1)
        pre = project(x, w_x) + torch.cat([p["b"], p["b_g"]], -1)[..., None, :]  # (..., T, 4h)
        hdim = p["W_hg"].shape[-1]
        lead = torch.broadcast_shapes(pre.shape[:-2], w_h.shape[:-2])
        h = pre.new_zeros((*lead, hdim))
        c = pre.new_zeros((*lead, hdim))
        out = []
        for t in range(x.shape[-2]):
            z = pre[..., t, :] + _recurrent(h, w_h)
            i, f, o = z[..., :GATES * hdim].sigmoid().split(hdim, -1)
            g = torch.tanh(z[..., GATES * hdim:])
            c = f * c + i * g
            h = o * torch.tanh(c)
            out.append(h)
        return torch.stack(out, -2)

    def weights(self, p, x, mask):
        raise NotImplementedError(NO_WEIGHTS)

    def tracked(self, p, x, rows):
        raise NotImplementedError(NO_WEIGHTS)


NO_WEIGHTS = "an LSTM has no closed-form weights over positions (it is not in the mechanisms table)"


def _recurrent(h, w):
    """h_{t-1} W per run: h (..., B, h) against w (..., 1, h, k) (the tunnel's batch axis: B rows, one product per
    run), or h (..., h) against w (..., h, k) (one row per run)."""
    if w.dim() == h.dim() + 1 and w.shape[-3] == 1:
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
