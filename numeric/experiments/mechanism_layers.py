"""Every built-in routing mechanism (derive/mechanisms/) as a trainable layer on the sticky chain, in plain torch.

Parameters are stacked with leading dims (arms A, seeds S), as in the sticky trainer (numeric.experiments.sticky);
the data x (1, S, T, d_in) broadcast over arms. Each layer mixes its contents into o (A, S, T, d_v), read out by
W_O into logits over the m symbols, with the sticky experiment's cross-entropy (the mean over positions, per
run). Gradients come from torch.autograd (the loss of every run summed: the runs share no parameter).

Each mechanism's layer is one object in LAYERS (a `Layer`: its parameters, which of them are content, how it
prepares its per-position tensors and forms one block of weights, the forms it can run in); nothing below
dispatches on a mechanism's name. Every layer's parameters are split into routing (whatever feeds the logits,
gates or decays, and the readout W_O, as in the paper's EM-like arm) and content (the values, a cell's candidate,
the experts): ROUTING and CONTENT.

    softmax  w_ij = M_ij e^{s_ij} / sum_k M_ik e^{s_ik}, s_ij = c q_i . k_j                   content: W_V
    sigmoid  w_ij = M_ij sigma(c q_i . k_j + beta), beta = -log T (arXiv 2409.04431)           content: W_V
    linear   w_ij = M_ij kappa_ij / sum_l M_il kappa_il, kappa = exp(q) . exp(k) (phi = exp)    content: W_V
    ssd      w_ij = M_ij e^{G_i - G_j} c q_i . k_j, G = cumsum(ell), ell_t = -softplus(x_t w_ell)    content: W_V
    gate     h_t = (1 - g_t) h_{t-1} + g_t x~_t, g_t = sigma(x_t w_g), x~_t = x_t W_V, h_{-1} = 0:
             w_tj = g_j prod_{s=j+1..t} (1 - g_s)                                              content: W_V
    lstm     c_t = f_t c_{t-1} + i_t g~_t, f_t = sigma(x_t w_f), i_t = sigma(x_t w_i), g~_t = x_t W_V, c_{-1} = 0:
             w_tj = i_j prod_{s=j+1..t} f_s (the linear cell: no tanh, no output gate)          content: W_V
    moe      o_t = sum_e g_te x_t W_e over 4 linear experts, router logits r_te = x_t . w_e, top-2 selection S,
             g_te = S_te e^{r_te} / sum_e' S_te' e^{r_te'}                                     content: W_E

SSD, the gate and the LSTM are written in the quadratic (masked) form, T x T weights through the causal mask
(`query_blocks`: query rows in blocks, each over its key prefix), the cumulative log-decays G in float64 and each
block's differences G_i - G_j formed relative to the block's first position before the cast to float32 (G reaches
about -1400 at T = 2000, where float32's spacing is 1e-4). The gate and the LSTM also have the scan (`form="scan"`:
one step per position, the recurrence as written); both give the same outputs (tests/test_mechanism_layers.py), and
the quadratic form is the one trained: it is the faster on a CPU (every run times both: results.json benchmarks
experiments/mechanism-step/{gate,lstm}/scan).

The LSTM is its linear cell: c_t = f_t c_{t-1} + i_t g~_t read out directly, without the tanh on the candidate or
the cell and without the output gate. That is the cell the derive side analyses (derive/mechanisms/lstm.py: one
step, weights sigma(A_io) over the options previous cell / candidate, the content entering linearly), so its
routing / content split is the table's; a tanh or an output gate would make the output nonlinear in the content
and mix a second nonlinearity into the comparison with the other mechanisms, which all mix their contents linearly.

The weights of every layer equal the mechanism's own plain-torch `reference(t)` (derive/mechanisms/<name>.py) on
the same inputs (tests/test_mechanism_layers.py, float64); `weights(...)` returns them with the reference's inputs.
"""
from __future__ import annotations

import math
import zlib

import torch
import torch.nn.functional as F

from numeric.experiments import sticky

EXPERTS, TOP_K = 4, 2
FORMS = ("quadratic", "scan")  # the recurrent cells (gate, lstm): T x T masked weights, or one step per position

# The sticky model's four matrices (W_Q, W_K, W_V, W_O, drawn by sticky.seed_params: the same initial values for
# every mechanism that has them), then each mechanism's own parameters (own seeded stream, `own_params`).
SHARED = ("W_Q", "W_K", "W_V", "W_O")
def shapes(d_in, d_k, d_v, m):
    """Every parameter's shape (without the leading (A, S))."""
    return {"W_Q": (d_in, d_k), "W_K": (d_in, d_k), "W_V": (d_in, d_v), "W_O": (d_v, m), "w_ell": (d_in,),
            "w_g": (d_in,), "w_f": (d_in,), "w_i": (d_in,), "W_R": (d_in, EXPERTS), "W_E": (EXPERTS, d_in, d_v)}


def own_params(cfg, mechanism, seed):
    """The mechanism's own parameters for one seed, N(0, init_std^2) in float64, each from a generator seeded by
    (seed, parameter name): independent of the shared draws, so every mechanism starts from the sticky model's
    W_Q, W_K, W_V, W_O where it has them."""
    sh = shapes(cfg.d_in, cfg.d_k, cfg.d_v, cfg.symbols)
    out = {}
    for name in PARAMS[mechanism]:
        if name in SHARED:
            continue
        g = torch.Generator().manual_seed((int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2 ** 62))
        out[name] = torch.randn(sh[name], generator=g, dtype=torch.float64) * cfg.init_std
    return out


def init_params(cfg, mechanism, seeds, arms, dtype=torch.float32, device="cpu"):
    """{name: (A, S, ...)} leaves (requires_grad), every arm of a seed from the same point."""
    per_seed = []
    for s in seeds:
        shared = dict(zip(SHARED, sticky.seed_params(cfg, s)))
        per_seed.append({**shared, **own_params(cfg, mechanism, s)})
    return {name: torch.stack([p[name] for p in per_seed])[None].expand(arms, *([-1] * (per_seed[0][name].dim() + 1)))
            .clone().to(device, dtype).requires_grad_(True) for name in PARAMS[mechanism]}


def causal(T, device="cpu"):
    """True where key j may be seen by query i (j <= i)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def beta(T):
    """Sigmoid attention's bias, -log T (arXiv 2409.04431's choice b = -log n)."""
    return -math.log(T)


def _qkv(p, x):
    return x @ p["W_Q"], x @ p["W_K"], x @ p["W_V"]


def _cumulative(logs):
    """G (..., T) = cumsum of per-position log-factors, in float64."""
    return logs.double().cumsum(-1)


def _logit(p, x, name):
    """x_t . w per position, (A, S, T): one matmul per (arm, seed), so each run's logits do not depend on the
    others in the batch (a summed product over the batch vectorises rows across the runs' boundaries)."""
    return (x @ p[name][..., :, None]).squeeze(-1)


def decays(p, x):
    """SSD's data-dependent log-decays ell_t = -softplus(x_t . w_ell) <= 0, (A, S, T)."""
    return -F.softplus(_logit(p, x, "w_ell"))


def log_kernel(q, k):
    """log kappa_ij = log sum_a e^{q_ia} e^{k_ja}, each row max-shifted (finite wherever kappa is)."""
    mq, mk = q.detach().amax(-1, keepdim=True), k.detach().amax(-1, keepdim=True)
    return torch.log(torch.exp(q - mq) @ torch.exp(k - mk).mT) + mq + mk.mT


def gate_logits(p, x):
    """a_t = x_t . w_g: g_t = sigma(a_t)."""
    return _logit(p, x, "w_g")


def lstm_logits(p, x):
    """(a_f, a_i), each (A, S, T): f_t = sigma(a_f), i_t = sigma(a_i)."""
    return _logit(p, x, "w_f"), _logit(p, x, "w_i")


def router(p, x):
    """Router logits r (A, S, T, E), the top-k selection S (0/1, float) and the gates g (A, S, T, E)."""
    r = x @ p["W_R"]
    top = r.detach().topk(TOP_K, -1).indices
    sel = torch.zeros_like(r).scatter_(-1, top, 1.0)
    return r, sel, r.masked_fill(sel == 0, float("-inf")).softmax(-1)


def moe_mix(p, x):
    """o_t = sum_e g_te x_t W_e, as one matmul of (g_t (x) x_t) with the stacked experts."""
    _, _, g = router(p, x)
    gx = (g[..., :, None] * x[..., None, :]).flatten(-2)  # (..., T, E d_in)
    return gx @ p["W_E"].flatten(-3, -2)  # W_E (..., E, d_in, d_v) as (..., E d_in, d_v)


def query_blocks(T, blocks, device="cpu"):
    """[(lo, hi, mask)]: query rows lo:hi see keys 0:hi, mask (hi - lo, hi) True where j <= i. The upper triangle
    beyond each block is never formed (about (nb + 1) / (2 nb) of the dense work), and every T x T intermediate
    is cut into pieces a few MB large: on this 2-core CPU a 48 MB tensor per step (3 arms, T = 2000) costs page
    faults on every allocation (glibc maps anything over 32 MB afresh), about 5x the step time."""
    edges = sorted({round(T * b / blocks) for b in range(blocks + 1)})
    rows = torch.arange(T, device=device)
    return [(lo, hi, rows[:hi][None, :] <= rows[lo:hi][:, None]) for lo, hi in zip(edges[:-1], edges[1:])]


def _log_decay(pre, lo, hi, dtype):
    """D_ij = G_i - G_j (+ start_j), rows lo:hi, keys 0:hi, in `dtype`: both sides taken relative to G_lo in
    float64 (vectors only) before the cast, so a pair near the diagonal keeps its precision late in the sequence
    (G itself reaches about -1400 at T = 2000, where float32's spacing is 1e-4); far pairs, whose difference is
    large, have weights e^D that vanish anyway."""
    G = pre["G"]
    ref = G[..., lo:lo + 1]
    a = (G[..., lo:hi] - ref).to(dtype)
    b = G[..., :hi] - ref
    if "start" in pre:
        b = b - pre["start"][..., :hi]
    return a[..., :, None] - b.to(dtype)[..., None, :]


# -- one layer per mechanism ----------------------------------------------------------------------------------
class Layer:
    """A mechanism whose weights are over keys, formed from q_i and k_j (x W_Q, x W_K), mixing the values x W_V.

    params: its parameters (SHARED first, then its own), content: those that are content (the rest are routing),
    forms: the forms it trains in, quadratic: whether its weights are T x T through the causal mask (mixed in query
    blocks), padded: the per-position tensors widened to sticky.LANE columns (see `_padded`)."""
    name = ""
    params = SHARED
    content = ("W_V",)
    forms = ("quadratic",)
    quadratic = True
    padded = ("v", "q", "k")

    def prepare(self, p, x):
        """What every query block reads: per-position tensors (A, S, T, .) or (A, S, T), and the constants."""
        q, k, v = _qkv(p, x)
        return {"q": q, "k": k, "v": v, "c": 1.0 / math.sqrt(q.shape[-1]), "beta": beta(x.shape[-2])}

    def scores(self, pre, lo, hi):
        """s_ij = c q_i . k_j for query rows lo:hi over keys 0:hi."""
        return (pre["q"][..., lo:hi, :] @ pre["k"][..., :hi, :].mT) * pre["c"]

    def block(self, pre, lo, hi, mask):
        """The weights of query rows lo:hi over keys 0:hi (A, S, hi - lo, hi)."""
        raise NotImplementedError

    def reference_inputs(self, p, x, mask, pre):
        """The inputs of derive.mechanisms.<name>.reference(t) that give this layer's weights."""
        return {"q": pre["q"], "k": pre["k"], "mask": mask.to(x.dtype), "c": pre["c"], "beta": pre["beta"]}

    def weights(self, p, x, mask):
        pre = self.prepare(p, x)
        return {"w": self.block(pre, 0, x.shape[-2], mask), "reference": self.reference_inputs(p, x, mask, pre)}

    def tracked(self, p, x, rows):
        """Row r's weights over keys 0..r for each tracked query row, flattened (A, S, sum_r (r + 1))."""
        pre = self.prepare(p, x)
        one = torch.ones(1, 1, dtype=torch.bool, device=x.device)
        return torch.cat([self.block(pre, r, r + 1, one.expand(1, r + 1)).flatten(-2) for r in rows], -1)


class Softmax(Layer):
    name = "softmax"

    def block(self, pre, lo, hi, mask):
        return self.scores(pre, lo, hi).masked_fill(~mask, float("-inf")).softmax(-1)


class Sigmoid(Layer):
    name = "sigmoid"

    def block(self, pre, lo, hi, mask):
        return torch.sigmoid(self.scores(pre, lo, hi) + pre["beta"]) * mask


class Linear(Layer):
    """Normalised linear attention: exp(q) . exp(k) is not a dot product of q and k (a zero column adds e^0 to it),
    so its q and k are not padded."""
    name = "linear"
    padded = ("v",)

    def block(self, pre, lo, hi, mask):
        return log_kernel(pre["q"][..., lo:hi, :], pre["k"][..., :hi, :]).masked_fill(~mask, float("-inf")).softmax(-1)


class SSD(Layer):
    name = "ssd"
    params = (*SHARED, "w_ell")

    def prepare(self, p, x):
        return {**super().prepare(p, x), "G": _cumulative(decays(p, x))}

    def block(self, pre, lo, hi, mask):
        s = self.scores(pre, lo, hi)
        return _log_decay(pre, lo, hi, s.dtype).masked_fill(~mask, float("-inf")).exp() * s

    def reference_inputs(self, p, x, mask, pre):
        return {**super().reference_inputs(p, x, mask, pre), "ell": decays(p, x)}


class Cell(Layer):
    """A recurrent cell h_t = keep_t h_{t-1} + write_t x~_t (x~ = x W_V), trained in its quadratic form
    w_tj = write_j prod_{s=j+1..t} keep_s, or as the scan."""
    forms = FORMS
    padded = ("v",)

    def logits(self, p, x):
        """The option logits A (A, S, T, 2) of derive's cell: w_io over (previous state, new content)."""
        raise NotImplementedError

    def steps(self, p, x):
        """(keep, write), each (A, S, T)."""
        raise NotImplementedError

    def logs(self, p, x):
        """(log keep, log write) from the logits, without forming 1 - g: log(1 - sigma(a)) = -softplus(a)."""
        raise NotImplementedError

    def prepare(self, p, x):
        log_keep, log_write = self.logs(p, x)
        return {"v": x @ p["W_V"], "G": _cumulative(log_keep), "start": log_write.double()}

    def block(self, pre, lo, hi, mask):
        return _log_decay(pre, lo, hi, pre["v"].dtype).masked_fill(~mask, float("-inf")).exp()

    def scan(self, p, x):
        """The recurrence as written: h_t = keep_t h_{t-1} + write_t x~_t from h_{-1} = 0, one step per position."""
        keep, write = self.steps(p, x)
        v = x @ p["W_V"]
        h = torch.zeros_like(v[..., 0, :])
        out = []
        for t in range(v.shape[-2]):
            h = keep[..., t, None] * h + write[..., t, None] * v[..., t, :]
            out.append(h)
        return torch.stack(out, -2)

    def weights(self, p, x, mask):
        keep, write = self.steps(p, x)
        return {"w": torch.stack([keep, write], -1), "reference": {"A": self.logits(p, x)},
                "unrolled": self.block(self.prepare(p, x), 0, x.shape[-2], mask)}


class Gate(Cell):
    """g_t = sigma(x_t w_g): keep 1 - g, write g; w_io a softmax over (previous, candidate) of (0, a_t)."""
    name = "gate"
    params = ("W_V", "W_O", "w_g")

    def logits(self, p, x):
        a = gate_logits(p, x)
        return torch.stack([torch.zeros_like(a), a], -1)

    def steps(self, p, x):
        g = torch.sigmoid(gate_logits(p, x))
        return 1 - g, g

    def logs(self, p, x):
        a = gate_logits(p, x)
        return -F.softplus(a), -F.softplus(-a)


class LSTM(Cell):
    """Independent gates f_t = sigma(x_t w_f) (keep) and i_t = sigma(x_t w_i) (write): w_io = sigma(A_io)."""
    name = "lstm"
    params = ("W_V", "W_O", "w_f", "w_i")

    def logits(self, p, x):
        return torch.stack(lstm_logits(p, x), -1)

    def steps(self, p, x):
        a_f, a_i = lstm_logits(p, x)
        return torch.sigmoid(a_f), torch.sigmoid(a_i)

    def logs(self, p, x):
        a_f, a_i = lstm_logits(p, x)
        return -F.softplus(-a_f), -F.softplus(-a_i)


class MoE(Layer):
    """A top-k router over linear experts: weights per token over the experts, no mixing over positions."""
    name = "moe"
    params = ("W_O", "W_R", "W_E")
    content = ("W_E",)
    quadratic = False

    def mix(self, p, x):
        return moe_mix(p, x)

    def tracked(self, p, x, rows):
        """The gates of each tracked token, flattened (A, S, R * E)."""
        _, _, g = router(p, x)
        return g[..., list(rows), :].flatten(-2)

    def weights(self, p, x, mask):
        _, sel, g = router(p, x)
        return {"w": g, "reference": {"X": x.expand(g.shape[:-1] + x.shape[-1:]), "WR": p["W_R"], "mask": sel}}


# derive.mechanisms.BUILTIN's order
LAYERS = {layer.name: layer for layer in (Softmax(), Sigmoid(), Linear(), SSD(), Gate(), LSTM(), MoE())}
MECHANISMS = tuple(LAYERS)
PARAMS = {m: layer.params for m, layer in LAYERS.items()}
CONTENT = {m: layer.content for m, layer in LAYERS.items()}
ROUTING = {m: tuple(p for p in PARAMS[m] if p not in CONTENT[m]) for m in MECHANISMS}
QUADRATIC = tuple(m for m, layer in LAYERS.items() if layer.quadratic)  # T x T weights through the causal mask


def layer(mechanism):
    """The mechanism's Layer; a ValueError naming the choices for any other name."""
    try:
        return LAYERS[mechanism]
    except (KeyError, TypeError):
        raise ValueError(f"unknown mechanism {mechanism!r}; choose from {MECHANISMS}") from None


def cell_steps(mechanism, p, x):
    """Per position, the weight kept on the previous state and the weight of the new content: (keep, write),
    each (A, S, T). gate: (1 - g, g); lstm: (f, i)."""
    return layer(mechanism).steps(p, x)


def cell_scan(mechanism, p, x):
    return layer(mechanism).scan(p, x)


def mix(mechanism, p, x, mask=None, form="quadratic", blocks=None):
    """The layer's output o (A, S, T, d_v). The quadratic mechanisms take `blocks` (query_blocks, default one
    block: the dense form) or the dense `mask`; the cells also take form="scan"."""
    lay = layer(mechanism)
    if not lay.quadratic:
        return lay.mix(p, x)
    if form not in lay.forms:
        raise ValueError(f"unknown form {form!r} for {mechanism}; choose from {lay.forms}")
    if form == "scan":
        return lay.scan(p, x)
    T = x.shape[-2]
    if blocks is None:
        blocks = [(0, T, mask if mask is not None else causal(T, x.device))]
    pre = _padded(lay, lay.prepare(p, x))
    out = [lay.block(pre, lo, hi, m) @ pre["v"][..., :hi, :] for lo, hi, m in blocks]
    return (out[0] if len(out) == 1 else torch.cat(out, -2))[..., :p["W_V"].shape[-1]]


def _padded(lay, pre):
    """The layer's `padded` tensors (the contents v, and the queries and keys of a dot-product score) with zero
    columns up to a multiple of sticky.LANE: the block's products (weights @ v, and their gradients' dS @ k) run
    faster at 16 columns than at 10 or 15 on a CPU's matrix kernels. Exact: a zero column adds nothing to q . k and
    gives a zero output column, cut off by `mix`; the scale c was taken from the unpadded width."""
    out = dict(pre)
    for name in lay.padded:
        width = out[name].shape[-1]
        pad = sticky.lane_width(width) - width
        if pad:
            out[name] = F.pad(out[name], (0, pad))
    return out


def tracked_weights(mechanism, p, x, rows):
    """The weights the layer mixes with at query positions `rows`, flattened: (A, S, sum_r (r + 1)) for the
    mechanisms over keys (row r's weights over keys 0..r, the cells' unrolled weights included), (A, S, R * E) for
    the mixture of experts (the gates of each tracked token). The routing "frame" of E4, for every mechanism."""
    with torch.no_grad():
        return layer(mechanism).tracked(p, x, rows)


def weights(mechanism, p, x, mask):
    """{"w": the layer's weights (the training code's, one query block: the dense form), "reference": the inputs of
    derive.mechanisms.<name>.reference(t) that give them (the model's leaf names); for the cells "w" is the per-step
    weights over (previous state, new content) and "unrolled" the T x T weights the layer mixes with}."""
    return layer(mechanism).weights(p, x, mask)


def losses(mechanism, p, x, y, mask=None, form="quadratic", blocks=None):
    """Cross-entropy per run (A, S): the mean over positions of -log p(y_t), p = softmax(o_t W_O)."""
    logp = (mix(mechanism, p, x, mask, form, blocks) @ p["W_O"]).log_softmax(-1)
    return -logp.gather(-1, y.expand(logp.shape[:-1])[..., None]).squeeze(-1).mean(-1)


def descend(params, lrs, loss):
    """One SGD step of every run at once: the gradient of the runs' summed loss (the runs share no parameter), each
    parameter moved by its own per-arm learning rate lrs[name] (broadcast over its leading arm axis)."""
    grads = torch.autograd.grad(loss.sum(), list(params.values()))
    with torch.no_grad():
        for (name, p), g in zip(params.items(), grads):
            p.sub_(lrs[name] * g)


def probabilities(mechanism, p, x, mask=None, form="quadratic", blocks=None):
    return (mix(mechanism, p, x, mask, form, blocks) @ p["W_O"]).softmax(-1)


