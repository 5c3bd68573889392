"""V1 (ours): the value-manifold diagnostic (numeric.manifold) on a small GPT-2-style model trained in E5's
Bayesian wind tunnel.

Model (`TinyGPT`): token and learned position embeddings, `layers` pre-LN blocks, each causal multi-head
self-attention (fused q, k, v projection, F.scaled_dot_product_attention with is_causal=True, an output
projection) and a GELU MLP (4x wide), a final LayerNorm and a readout tied to the token embedding; no dropout.
It predicts y_{t+1} from y_0..y_t of the wind tunnel's sequences (windtunnel.sample: a transition matrix per
sequence ~ Dirichlet(prior + sticky e_i), E5's prior 1 and sticky mass 4), trained by AdamW on next-token
cross-entropy over fresh batches, float32 on the stage's threads.

Measured on held-out sequences (their own stream): the KL from the exact Bayes predictive
(windtunnel.bayes_predictive) to the model's and the entropy error (bits); then per attention layer the value
vectors and the attention outputs (numeric.manifold.capture) against the model's own predictive entropy and
against the Bayes entropy (numeric.manifold.measure: PC1's share of the variance, Spearman of the PC1 coordinate
with the entropy, bootstrap intervals over the sequences); and, as a control derived from the run, the same
vectors against the model's entropy permuted over every position.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from numeric import manifold
from numeric.experiments import chain
from numeric.experiments.config import positive, positive_ints
from numeric.experiments.windtunnel import TunnelConfig, bayes_predictive, sample

# What `run` returns, named in the cache key: a cached result of another version is not reused.
EVALUATION = "vm1"


@dataclass(frozen=True)
class ManifoldConfig:
    """The sizes come from the profile (derive.profile.ExperimentSizes manifold_*, `from_sizes`); the rest is the
    experiment's own setting."""

    steps: int
    batch: int
    length: int
    eval_batch: int
    d_model: int
    resamples: int
    heads: int = 4
    layers: int = 2
    symbols: int = 5
    prior: float = 1.0  # E5's wind tunnel
    sticky: float = 4.0
    lr: float = 3e-3
    weight_decay: float = 0.01
    dtype: str = "float32"
    seed: int = 0

    @classmethod
    def from_sizes(cls, x):
        return cls(steps=x.manifold_steps, batch=x.manifold_batch, length=x.manifold_length,
                   eval_batch=x.manifold_eval_batch, d_model=x.manifold_d_model, resamples=x.manifold_resamples)

    def validate(self):
        positive_ints(self, "steps", "batch", "length", "eval_batch", "d_model", "resamples", "heads", "layers",
                      "symbols")
        positive(self, "prior", "lr")
        if self.length < 3:
            raise ValueError(f"ManifoldConfig.length must be >= 3, got {self.length}")
        if self.eval_batch < 2:
            raise ValueError("ManifoldConfig.eval_batch must be >= 2 (intervals resample sequences)")
        if self.d_model % self.heads:
            raise ValueError(f"ManifoldConfig.d_model ({self.d_model}) must be a multiple of heads ({self.heads})")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"ManifoldConfig.dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if not self.sticky >= 0 or not self.weight_decay >= 0:
            raise ValueError("ManifoldConfig.sticky and weight_decay must be non-negative")
        self.tunnel().validate()
        return self

    def tunnel(self):
        return TunnelConfig(symbols=self.symbols, length=self.length, prior=self.prior, sticky=self.sticky,
                            seed=self.seed)

    def sites(self):
        return [f"blocks.{i}.attn" for i in range(self.layers)]


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, L, d = x.shape
        q, k, v = self.qkv(x).split(d, -1)
        q, k, v = (t.view(B, L, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(B, L, d))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), CausalSelfAttention(d, heads)
        self.ln2, self.mlp = nn.LayerNorm(d), nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A GPT-2-style decoder: token + position embeddings, pre-LN blocks, final LayerNorm, tied readout."""

    def __init__(self, vocab, length, d, heads, layers):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(length, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, y):  # (B, L) tokens -> (B, L, vocab) next-token logits
        h = self.tok(y) + self.pos(torch.arange(y.shape[1], device=y.device))
        for block in self.blocks:
            h = block(h)
        return self.ln(h) @ self.tok.weight.T


def build(cfg):
    torch.manual_seed(cfg.seed)
    model = TinyGPT(cfg.symbols, cfg.length - 1, cfg.d_model, cfg.heads, cfg.layers)
    return model.to(getattr(torch, cfg.dtype))


def train(cfg, device="cpu"):
    """AdamW on fresh wind-tunnel batches (drawn on the CPU, then moved). Returns (model, loss curve)."""
    cfg.validate()
    model = build(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    g = torch.Generator().manual_seed(cfg.seed + 17)
    tunnel, curve = cfg.tunnel(), []
    for _ in range(cfg.steps):
        y = sample(tunnel, cfg.batch, g).to(device)
        loss = F.cross_entropy(model(y[:, :-1]).flatten(0, 1), y[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        curve.append(loss.detach())
    return model, (torch.stack(curve).cpu().tolist() if curve else [])


def evaluate(cfg, model):
    """The model on held-out sequences: KL to Bayes and entropy error (bits), and the manifold measurement of every
    layer and kind against the model's entropy (`model`), the Bayes entropy (`bayes`) and the model's entropy
    permuted over every position (`shuffled`, a control)."""
    tunnel = cfg.tunnel()
    g = torch.Generator().manual_seed(cfg.seed + 99)
    y = sample(tunnel, cfg.eval_batch, g)
    device = next(model.parameters()).device
    model.eval()
    cap = manifold.capture(model, y[:, :-1].to(device))
    logits = cap.output.cpu().double()
    p = torch.softmax(logits, -1)
    bayes = bayes_predictive(tunnel, y)
    h_model = manifold.predictive_entropy(logits).numpy()
    h_bayes = (-(bayes * torch.log(bayes)).sum(-1) / math.log(2)).numpy()
    perm = np.random.default_rng(cfg.seed + 5).permutation(h_model.size)
    h_shuffled = h_model.reshape(-1)[perm].reshape(h_model.shape)
    kw = {"resamples": cfg.resamples, "seed": cfg.seed + 7}
    return {"kl_bits": float(chain.kl_bits(bayes, p).mean()),
            "entropy_mae_bits": float(np.abs(h_model - h_bayes).mean()),
            "model_entropy_bits_mean": float(h_model.mean()), "bayes_entropy_bits_mean": float(h_bayes.mean()),
            "spearman_model_bayes_entropy": manifold.spearman(h_model.reshape(-1), h_bayes.reshape(-1)),
            "layers": {n: {k: list(t.shape) for k, t in got.items()} for n, got in cap.layers.items()},
            "capture_source": cap.source,
            **manifold.measure_layers(cap.layers, {"model": h_model, "bayes": h_bayes, "shuffled": h_shuffled}, **kw)}


def run(cfg, device="cpu", threads=1):
    """Train, then evaluate, on `threads` torch threads (the caller's count restored after): plain numbers
    (results.json experiments.value_manifold's, cached by the stage)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        t0 = time.perf_counter()
        model, curve = train(cfg, device)
        train_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        ev = evaluate(cfg, model)
    finally:
        torch.set_num_threads(before)
    tail = curve[-max(1, len(curve) // 20):]
    return {"config": asdict(cfg), "curve": curve[:: max(1, len(curve) // 200)], "final_loss": float(np.mean(tail)),
            "train_seconds": train_s, "eval_seconds": time.perf_counter() - t1,
            "parameters": sum(p.numel() for p in model.parameters()), **ev}
