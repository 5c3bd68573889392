"""Every registered mechanism's trainable layer (its file's `layer`, derive.mechanisms.layer) trained in plain torch.

Parameters are stacked with leading dims (arms A, seeds S), as in the sticky trainer (numeric.experiments.sticky);
the data x (1, S, T, d_in) broadcast over arms. A layer mixes its contents into o (A, S, T, d_v), read out by W_O
into logits over the m symbols, with the sticky experiment's cross-entropy (the mean over positions, per run).
Gradients come from torch.autograd (the loss of every run summed: the runs share no parameter). Nothing here knows
a mechanism by name: `names()` are the registered mechanisms that have a layer, a user's from a claims file too.

Quadratic layers (weights T x T through the causal mask) are mixed in query blocks (`query_blocks`: each block of
query rows over its key prefix); the recurrent cells also run as the scan (`form="scan"`), which gives the same
outputs and is timed beside the quadratic form (results.json benchmarks experiments/mechanism-step/<name>/scan).
The weights of every layer equal its mechanism's plain-torch `reference(t)` on the same inputs
(tests/test_mechanism_layers.py, float64); `weights(...)` returns them with the reference's inputs.
"""
from __future__ import annotations

import hashlib
import math
import zlib
from pathlib import Path

import torch
import torch.nn.functional as F

from derive import mechanisms
from derive.mechanisms import layer as layer_base
from numeric.experiments import sticky

FORMS = layer_base.FORMS
SHARED = tuple(layer_base.SHARED)


def names():
    """The registered mechanisms that have a trainable layer, built-ins first (derive.mechanisms.registered)."""
    return tuple(m.name for m in mechanisms.registered() if m.layer is not None)


def baselines():
    """The models trained beside the mechanisms on the conjecture's tasks, not mechanisms themselves (no proved cells;
    numeric.experiments.lstm: the real LSTM at attention's parameter count and at about three times it)."""
    from numeric.experiments import lstm

    return tuple(lstm.BASELINES)


def trainable():
    """Every name `layer` knows: the mechanisms with a layer, then the baselines."""
    return (*names(), *baselines())


def source(mechanism):
    """Where a worker process finds `mechanism`: None for a built-in, else (the claims file that registered it, the
    sha256 of its text), so a task names the file's version (a changed file is never read from the cache)."""
    if mechanism in mechanisms.BUILTIN or mechanism in baselines():
        return None
    from derive import claimfile

    path = claimfile.LOADED_FROM.get(mechanism)
    if path is None:
        return None  # registered in this process by code, not a file: runs where it is registered
    return path, hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def ensure(mechanism, where):
    """Register `mechanism` in this process (a Dask worker) from its claims file, when it is not yet."""
    if where is None or mechanism in mechanisms.REGISTRY:
        return
    from derive import claimfile

    claimfile.load(where[0])


def task_label(mechanism, where):
    """The mechanism's part of a campaign task's name: its name, and its file's version for a user's."""
    return mechanism if where is None else f"{mechanism}-{where[1]}"


def check_names(chosen, what, known=None):
    """Refuse a choice of mechanisms that are not distinct names among `known` (default: the trainable mechanisms)."""
    known = names() if known is None else known
    if not chosen or len(set(chosen)) != len(chosen) or any(c not in known for c in chosen):
        raise ValueError(f"{what} must be distinct names among {known}, got {tuple(chosen)!r}")


def params(mechanism):
    """Its parameters: the shared matrices it uses, then its own."""
    return layer(mechanism).params


def content(mechanism):
    """Its content parameters (the EM-like arm's fast ones)."""
    return layer(mechanism).content


def routing(mechanism):
    """Its routing parameters: everything that is not content (the readout W_O included)."""
    return layer(mechanism).routing


def shapes(mechanism, d_in, d_k, d_v, m):
    """Every parameter's shape (without the leading (A, S))."""
    return layer(mechanism).shapes({"d_in": d_in, "d_k": d_k, "d_v": d_v, "m": m})


def parameter_count(mechanism, d_in, d_k, d_v, m):
    """{"content": n, "all": n}: the numbers one run of the mechanism trains (one arm, one seed) at these sizes, and
    how many of them are content (the EM-like arm's fast ones), from its layer's shapes."""
    sh = shapes(mechanism, d_in, d_k, d_v, m)
    size = {name: math.prod(sh[name]) for name in params(mechanism)}
    return {"content": sum(size[name] for name in content(mechanism)), "all": sum(size.values())}


def own_params(cfg, mechanism, seed):
    """The mechanism's own parameters for one seed, N(0, init_std^2) in float64, each from a generator seeded by
    (seed, parameter name): independent of the shared draws, so every mechanism starts from the sticky model's
    W_Q, W_K, W_V, W_O where it has them."""
    sh = shapes(mechanism, cfg.d_in, cfg.d_k, cfg.d_v, cfg.symbols)
    out = {}
    for name in params(mechanism):
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
            .clone().to(device, dtype).requires_grad_(True) for name in params(mechanism)}


def causal(T, device="cpu"):
    """True where key j may be seen by query i (j <= i)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def query_blocks(T, blocks, device="cpu"):
    """[(lo, hi, mask)]: query rows lo:hi see keys 0:hi, mask (hi - lo, hi) True where j <= i. The upper triangle
    beyond each block is never formed (about (nb + 1) / (2 nb) of the dense work), and every T x T intermediate is
    cut into pieces a few MB large (one large tensor per step costs page faults on every allocation: glibc maps
    anything over its mmap threshold afresh)."""
    edges = sorted({round(T * b / blocks) for b in range(blocks + 1)})
    rows = torch.arange(T, device=device)
    return [(lo, hi, rows[:hi][None, :] <= rows[lo:hi][:, None]) for lo, hi in zip(edges[:-1], edges[1:])]


def layer(mechanism):
    """The mechanism's Layer (or a baseline's); a ValueError naming the choices for a mechanism without one."""
    from numeric.experiments import lstm

    if mechanism in lstm.BASELINES:
        return lstm.BASELINES[mechanism]
    try:
        lay = mechanisms.get(mechanism).layer
    except (ValueError, TypeError):
        lay = None
    if lay is None:
        raise ValueError(f"mechanism {mechanism!r} has no trainable layer; choose from {trainable()}")
    return lay


def cell_steps(mechanism, p, x):
    """Per position, the weight kept on the previous state and the weight of the new content: (keep, write),
    each (A, S, T)."""
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
    logp = layer_base.project(mix(mechanism, p, x, mask, form, blocks), p["W_O"]).log_softmax(-1)
    return -logp.gather(-1, y.expand(logp.shape[:-1])[..., None]).squeeze(-1).mean(-1)


def descend(params, lrs, loss):
    """One SGD step of every run at once: the gradient of the runs' summed loss (the runs share no parameter), each
    parameter moved by its own per-arm learning rate lrs[name] (broadcast over its leading arm axis)."""
    grads = torch.autograd.grad(loss.sum(), list(params.values()))
    with torch.no_grad():
        for (name, p), g in zip(params.items(), grads):
            p.sub_(lrs[name] * g)


class Adam:
    """Adam for every run at once (elementwise, so each run's parameters move on their own gradients only), each
    parameter at its own per-arm learning rate lrs[name] as in `descend`; betas and eps are torch's defaults."""

    def __init__(self, params, betas=(0.9, 0.999), eps=1e-8):
        self.betas, self.eps, self.t = betas, eps, 0
        self.m = {n: torch.zeros_like(p) for n, p in params.items()}
        self.v = {n: torch.zeros_like(p) for n, p in params.items()}

    def step(self, params, lrs, loss):
        grads = torch.autograd.grad(loss.sum(), list(params.values()))
        self.t += 1
        b1, b2 = self.betas
        with torch.no_grad():
            for (name, p), g in zip(params.items(), grads):
                self.m[name].mul_(b1).add_(g, alpha=1 - b1)
                self.v[name].mul_(b2).addcmul_(g, g, value=1 - b2)
                m_hat = self.m[name] / (1 - b1 ** self.t)
                v_hat = self.v[name] / (1 - b2 ** self.t)
                p.sub_(lrs[name] * m_hat / (v_hat.sqrt() + self.eps))


def probabilities(mechanism, p, x, mask=None, form="quadratic", blocks=None):
    return layer_base.project(mix(mechanism, p, x, mask, form, blocks), p["W_O"]).softmax(-1)


