"""The wind tunnel enlarged so that what Bayes needs no longer fits a vector state: a task with a closed-form Bayes
posterior on which the paper's conjecture predicts a split.

Each sequence draws its transition matrix row by row from a symmetric Dirichlet(prior) over K symbols (no extra
diagonal mass: no stickiness), its first symbol uniform, and runs the chain for `length` steps (numeric.experiments.
windtunnel's sampler). The inputs are the wind tunnel's, x_t = [e_{y_t}, e_{y_{t-1}}], and every position predicts
the next symbol. Exact Bayes: the Dirichlet counts of the current row, (n_{y_t b} + prior) / (n_{y_t} + K prior).

At K = 8 those are K^2 = 64 counts: more than a recurrent vector state of width 16 holds. Attention can read them
from the context: a query for the current symbol a matched against each position's previous symbol (in x_j) finds
the earlier occurrences of a, and their tokens are a's successors.

Floors, each a predictor that sees less (`floors`):

- `prior`: no input: uniform over the K symbols (exact: by symmetry every marginal is uniform);
- `no_context`: the best predictor of the current and previous symbol alone (x_t itself). By the symmetry of the
  prior it depends only on whether y_t = y_{t-1} and on which of them the next symbol equals, so it has three free
  numbers; they are estimated once from 4096 sequences of a generator no training or evaluation uses (seed
  NO_CONTEXT_SEED), pooled over every position. The events within a sequence are correlated: measured over
  sequences the three standard errors are about 0.005, 0.001 and 0.002, which moves the floor's KL by about 2e-5
  bits; the first position (no previous symbol) is uniform, exactly;
- `unigram`: the token frequencies so far, (c_b + 1) / (t + 1 + K): what a state of K counts gives. A predictor,
  not a bound on every fixed-width state.

    python -m numeric.experiments.mechanism_tunnel --task transitions   (every mechanism trained on it)
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from numeric.experiments import windtunnel
from numeric.experiments.config import positive, positive_ints

FLOORS = ("prior", "no_context", "unigram")
NO_CONTEXT_SEED = 2 ** 31 - 7  # the generator of the no-context floor's estimate (none of the tasks' seeds)
NO_CONTEXT_SEQUENCES = 4096


@dataclass(frozen=True)
class TransitionsConfig:
    """The task (K symbols, sequence length, the Dirichlet prior of every row) and the tunnel's optimiser settings
    (numeric.experiments.mechanism_tunnel trains on it as on the wind tunnel)."""
    symbols: int = 8
    length: int = 128
    prior: float = 0.2
    batch: int = 64
    steps: int = 1500
    d_k: int = 16
    d_v: int = 16
    lr: float = 1e-2
    value_lr_ratio: float = 10.0
    eval_batch: int = 256
    optimizer: str = "adam"

    @property
    def sticky(self):
        """No extra diagonal mass (windtunnel's samplers read it)."""
        return 0.0

    def validate(self):
        positive_ints(self, "symbols", "length", "batch", "steps", "d_k", "d_v", "eval_batch")
        positive(self, "prior", "lr", "value_lr_ratio")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"TransitionsConfig.optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.symbols < 2:
            raise ValueError(f"TransitionsConfig.symbols must be at least 2, got {self.symbols!r}")
        if self.length < 3:
            raise ValueError(f"TransitionsConfig.length must be at least 3, got {self.length!r}")
        return self


def sample(cfg, batch, g):
    """Sequences (batch, length), each from its own transition matrix (rows ~ Dirichlet(prior))."""
    return windtunnel.sample(cfg, batch, g)


def inputs(cfg, y):
    """x_t = [e_{y_t}, e_{y_{t-1}}] for t = 0..length-2 (windtunnel.inputs)."""
    return windtunnel.inputs(cfg, y)


def bayes_predictive(cfg, y):
    """P(y_{t+1} | y_0..y_t) exactly: the Dirichlet counts of row y_t, (B, length-1, K)."""
    return windtunnel.bayes_predictive(cfg, y)


def _classes(y):
    """Per position t = 1..L-2 of y (B, L): same = (y_t == y_{t-1}); and per outcome b the class of b: 0 = y_t,
    1 = y_{t-1} (when different), 2 = another symbol."""
    cur, prev, nxt = y[:, 1:-1], y[:, :-2], y[:, 2:]
    same = cur == prev
    out = torch.full_like(cur, 2)
    out[nxt == cur] = 0
    out[(nxt == prev) & ~same] = 1
    return same, out


@functools.lru_cache(maxsize=8)
def no_context_table(symbols, length, prior):
    """The no-context floor's three numbers: (P(next = y_t | y_t = y_{t-1}), P(next = y_t | differ),
    P(next = y_{t-1} | differ)), estimated from NO_CONTEXT_SEQUENCES sequences of generator NO_CONTEXT_SEED."""
    cfg = TransitionsConfig(symbols=symbols, length=length, prior=prior)
    y = sample(cfg, NO_CONTEXT_SEQUENCES, torch.Generator().manual_seed(NO_CONTEXT_SEED))
    same, cls = _classes(y)
    s, d = cls[same], cls[~same]
    return float((s == 0).double().mean()), float((d == 0).double().mean()), float((d == 1).double().mean())


def no_context(cfg, y):
    """(B, length-1, K): the no-context floor (the module's docstring)."""
    K, (B, L) = cfg.symbols, y.shape
    p_same, p_cur, p_prev = no_context_table(cfg.symbols, cfg.length, float(cfg.prior))
    out = torch.full((B, L - 1, K), 1.0 / K, dtype=torch.float64)
    cur, prev = y[:, 1:-1], y[:, :-2]
    same = (cur == prev)[..., None]
    rest_same = (1 - p_same) / (K - 1)
    rest_diff = (1 - p_cur - p_prev) / (K - 2) if K > 2 else 0.0
    body = torch.where(same, torch.tensor(rest_same, dtype=torch.float64), torch.tensor(rest_diff, dtype=torch.float64))
    body = body.expand(B, L - 2, K).clone()
    body.scatter_(-1, prev[..., None], torch.where(same, body.gather(-1, prev[..., None]),
                                                   torch.tensor(p_prev, dtype=torch.float64)))
    body.scatter_(-1, cur[..., None], torch.where(same, torch.tensor(p_same, dtype=torch.float64),
                                                  torch.tensor(p_cur, dtype=torch.float64)))
    out[:, 1:] = body
    return out


def unigram(cfg, y):
    """(B, length-1, K): (c_b + 1) / (t + 1 + K), c_b the count of b among y_0..y_t."""
    K, L = cfg.symbols, y.shape[1]
    counts = torch.nn.functional.one_hot(y[:, :-1], K).double().cumsum(1)
    t = torch.arange(1, L, dtype=torch.float64)[None, :, None]
    return (counts + 1) / (t + K)


def floors(cfg, y):
    """{floor: (B, length-1, K)} the predictors that see less than Bayes (the module's docstring)."""
    B, L = y.shape
    prior = torch.full((B, L - 1, cfg.symbols), 1.0 / cfg.symbols, dtype=torch.float64)
    return {"prior": prior, "no_context": no_context(cfg, y), "unigram": unigram(cfg, y)}


def query_positions(cfg, y):
    """(key, seen), each (B, length-1) bool: every position is a query here (key all True); seen where the current
    symbol occurred before, so its row has an observed transition in the context."""
    cur = y[:, :-1]
    onehot = torch.nn.functional.one_hot(cur, cfg.symbols)
    before = onehot.cumsum(1) - onehot  # occurrences strictly before t
    seen = before.gather(-1, cur[..., None]).squeeze(-1) > 0
    return torch.ones_like(seen), seen


def scores(cfg, y, p, bayes=None):
    """{kl_bits, kl_bits_queries, accuracy_seen}: the mean KL from the Bayes predictive to p (bits) over every
    position and over the query positions (here the same: every position is one), and how often p's most likely
    symbol is one of Bayes's most likely ones where the current symbol was seen before (the next symbol is not
    determined: the answer is Bayes's mode; where Bayes has tied modes, each counts)."""
    bayes = bayes_predictive(cfg, y) if bayes is None else bayes
    kl = (bayes * (torch.log(bayes.clamp_min(1e-300)) - torch.log(p.clamp_min(1e-300)))).sum(-1) / math.log(2)
    key, seen = query_positions(cfg, y)
    top = bayes.gather(-1, p.argmax(-1, keepdim=True)).squeeze(-1)
    hit = top >= bayes.max(-1).values * (1 - 1e-12)
    return {"kl_bits": float(kl.mean()), "kl_bits_queries": float(kl[key].mean()),
            "accuracy_seen": float(hit[seen].double().mean()) if seen.any() else float("nan")}
