"""E5 in a Bayesian wind tunnel (Paper I): a sticky chain whose transition matrix is drawn per
sequence from a Dirichlet prior with extra diagonal mass, so the exact Bayes predictive (Dirichlet
counts of the current row) and its entropy vary along every sequence.

Model (ours): one causal attention head (numeric.GeneratedAttention, generated backward) over
x_t = [e_{y_t}, e_{y_{t-1}}], a linear readout to the next symbol, trained by the paper's two arms.
Reported: KL to the Bayes predictive and entropy MAE (bits), and the PCA of attention outputs
against the Bayes posterior-predictive entropy (explained variance of PC1–3, Spearman of PC1)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

from numeric.experiments import chain
from numeric.experiments import stats as st
from numeric.experiments.config import positive, positive_ints
from numeric.module import GeneratedAttention

# What `evaluate` returns, named in the cache key: a cached evaluation of another version is not reused.
EVALUATION = "eval2"  # eval2: bootstrap intervals over evaluation sequences

@dataclass(frozen=True)
class TunnelConfig:
    symbols: int = 5
    length: int = 48
    batch: int = 64
    steps: int = 1500
    prior: float = 1.0
    sticky: float = 4.0  # extra Dirichlet mass on the diagonal
    d_k: int = 16
    d_v: int = 16
    lr: float = 0.5
    value_lr_ratio: float = 10.0
    eval_batch: int = 256
    pca_points: int = 1500
    seed: int = 0

    def validate(self):
        positive_ints(self, "symbols", "length", "batch", "steps", "d_k", "d_v", "eval_batch", "pca_points")
        positive(self, "prior", "lr", "value_lr_ratio")
        if not self.sticky >= 0:
            raise ValueError(f"TunnelConfig.sticky must be non-negative, got {self.sticky!r}")
        return self


def from_sizes(sizes):
    """The TunnelConfig of a profile's ExperimentSizes (derive.profile)."""
    return TunnelConfig(steps=sizes.tunnel_steps, batch=sizes.tunnel_batch, eval_batch=sizes.tunnel_eval_batch,
                        length=sizes.tunnel_length)


def sample(cfg, batch, g):
    """Sequences (batch, length) with per-sequence transition matrices ~ Dirichlet(prior + sticky e_i)."""
    K = cfg.symbols
    conc = torch.full((K, K), cfg.prior, dtype=torch.float64) + cfg.sticky * torch.eye(K, dtype=torch.float64)
    gamma = torch._standard_gamma(conc.expand(batch, K, K).contiguous(), generator=g)
    P = gamma / gamma.sum(-1, keepdim=True)
    y = torch.empty(batch, cfg.length, dtype=torch.long)
    y[:, 0] = torch.randint(0, K, (batch,), generator=g)
    u = torch.rand(batch, cfg.length, generator=g, dtype=torch.float64)
    for t in range(1, cfg.length):
        row = P[torch.arange(batch), y[:, t - 1]]
        y[:, t] = torch.searchsorted(row.cumsum(-1), u[:, t : t + 1].contiguous()).squeeze(1).clamp(max=K - 1)
    return y


def bayes_predictive(cfg, y):
    """P(y_{t+1} | y_0..y_t) for t = 0..length-2: Dirichlet counts of row y_t, (batch, length-1, K)."""
    K, (B, L) = cfg.symbols, y.shape
    counts = torch.zeros(B, K, K, dtype=torch.float64)
    out = torch.empty(B, L - 1, K, dtype=torch.float64)
    base = torch.full((K, K), cfg.prior, dtype=torch.float64) + cfg.sticky * torch.eye(K, dtype=torch.float64)
    for t in range(L - 1):
        if t > 0:
            counts[torch.arange(B), y[:, t - 1], y[:, t]] += 1
        row = base[y[:, t]] + counts[torch.arange(B), y[:, t]]
        out[:, t] = row / row.sum(-1, keepdim=True)
    return out


def inputs(cfg, y):
    K = cfg.symbols
    cur = torch.nn.functional.one_hot(y[:, :-1], K)
    prev = torch.nn.functional.one_hot(torch.cat([torch.full_like(y[:, :1], K), y[:, :-2]], 1), K + 1)[..., :K]
    return torch.cat([cur, prev], -1).double()  # (B, L-1, 2K)


class Tunnel(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.head = GeneratedAttention(2 * cfg.symbols, cfg.d_k, cfg.d_v, causal=True, init_std=0.3)
        self.readout = torch.nn.Linear(cfg.d_v, cfg.symbols)

    def forward(self, x):
        o = self.head(x)
        return o, self.readout(o)


def train(cfg, arm, device="cpu"):
    """Train one model with arm 'sgd' (one LR) or 'em_like' (value LR x value_lr_ratio) on `device`. The
    model is initialised and every batch drawn on the CPU, then moved: the same run on every device.
    The loss curve stays on the device until the end (no host sync per step)."""
    cfg.validate()
    torch.manual_seed(cfg.seed)
    model = Tunnel(cfg).double().to(device)
    v_lr = cfg.lr * (cfg.value_lr_ratio if arm == "em_like" else 1.0)
    groups = [{"params": [model.head.w_q, model.head.w_k, *model.readout.parameters()], "lr": cfg.lr},
              {"params": [model.head.w_v], "lr": v_lr}]
    opt = torch.optim.SGD(groups, lr=cfg.lr)
    g = torch.Generator().manual_seed(cfg.seed + 17)
    curve = []
    for _ in range(cfg.steps):
        y = sample(cfg, cfg.batch, g)
        x, y = inputs(cfg, y).to(device), y.to(device)
        _, logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        curve.append(loss.detach())
    return model, torch.stack(curve).cpu().tolist() if curve else []


def evaluate(cfg, model):
    """Metrics of a trained model on fresh sequences, run on the model's device and scored on the CPU."""
    g = torch.Generator().manual_seed(cfg.seed + 99)
    y = sample(cfg, cfg.eval_batch, g)
    device = next(model.parameters()).device
    with torch.no_grad():
        o, logits = (t.cpu() for t in model(inputs(cfg, y).to(device)))
    p = torch.softmax(logits, -1)
    bayes = bayes_predictive(cfg, y)
    ln2 = math.log(2)
    ent_model = -(p * torch.log(p.clamp_min(1e-300))).sum(-1) / ln2
    ent_bayes = -(bayes * torch.log(bayes)).sum(-1) / ln2
    pca = _pca(o.flatten(0, 1).numpy(), ent_bayes.flatten().numpy(), cfg)
    within = _within_symbol(o, ent_bayes, y[:, :-1], cfg)
    return {"within_symbol": within, "kl_bits": float(chain.kl_bits(bayes, p).mean()),
            "entropy_mae_bits": float((ent_model - ent_bayes).abs().mean()),
            "bayes_entropy_bits_mean": float(ent_bayes.mean()), "bayes_entropy_bits_std": float(ent_bayes.std()),
            **pca, **_intervals(o.numpy(), ent_bayes.numpy(), pca["spearman_pc1_entropy"], cfg)}


BOOTSTRAP_RESAMPLES = 500  # a few seconds for the default evaluation (256 sequences x 47 positions)


def _intervals(o, entropy, rho, cfg, resamples=BOOTSTRAP_RESAMPLES):
    """95% percentile intervals over evaluation sequences (resampled whole, seeded) for PC1's explained
    variance and Spearman(PC1, Bayes entropy). The interval for rho is stated in the sign of the point
    estimate `rho` (PC1's sign is arbitrary: the replicates are oriented along one PC1, then the
    interval is flipped if that PC1 points the other way from _pca's)."""
    out = st.bootstrap_pc1_spearman(o, entropy, resamples=resamples, seed=cfg.seed + 7)
    _, rho_boot, _ = st.pc1_spearman(o.reshape(-1, o.shape[-1]), entropy.reshape(-1))
    if rho_boot * rho < 0:
        lo, hi = out["spearman_pc1_entropy_ci95"]
        out["spearman_pc1_entropy_ci95"] = [-hi, -lo]
    return {"explained_variance_pc1_ci95": out["explained_variance_pc1_ci95"],
            "spearman_pc1_entropy_ci95": out["spearman_pc1_entropy_ci95"],
            "bootstrap": {"resamples": out["resamples"], "sequences": out["units"], "level": 0.95}}


def _within_symbol(o, entropy, current, cfg):
    """PCA per current symbol: the symbol's identity otherwise dominates the outputs."""
    pc1, rho = [], []
    for r in range(cfg.symbols):
        sel = current == r
        if int(sel.sum()) < 10:
            continue
        res = _pca(o[sel].numpy(), entropy[sel].numpy(), cfg)
        pc1.append(res["explained_variance"][0])
        rho.append(abs(res["spearman_pc1_entropy"]))
    return {"pc1_explained_mean": float(np.mean(pc1)), "abs_spearman_pc1_entropy_mean": float(np.mean(rho)),
            "symbols": len(pc1)}


def _pca(points, entropy, cfg):
    X = points - points.mean(0)
    _, svals, vt = np.linalg.svd(X, full_matrices=False)
    var = svals**2 / (svals**2).sum()
    scores = X @ vt[:3].T
    rho = stats.spearmanr(scores[:, 0], entropy).statistic
    rng = np.random.default_rng(cfg.seed)
    keep = rng.choice(len(X), size=min(cfg.pca_points, len(X)), replace=False)
    return {"explained_variance": [float(v) for v in var[:3]], "spearman_pc1_entropy": float(rho),
            "pca_points": {"pc1": scores[keep, 0].tolist(), "pc2": scores[keep, 1].tolist(),
                           "entropy_bits": entropy[keep].tolist()}}
