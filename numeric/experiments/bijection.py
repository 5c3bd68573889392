"""Bijection recall and elimination: a task with a closed-form Bayes posterior on which content-based routing is
predicted to matter (the paper's conjecture can fail here; on the sticky chain it cannot).

Each sequence draws a permutation pi of V values and `pairs` keys with replacement, and shows the pairs:
tokens k_1, V + pi(k_1), k_2, V + pi(k_2), ... (keys are tokens 0..V-1, values V..2V-1; K = 2V symbols). The
inputs are the wind tunnel's, x_t = [e_{y_t}, e_{y_{t-1}}], and every position predicts the next token. Exact Bayes:

- after a value (the next token is a key): uniform over the V keys;
- after key k: certain, pi(k), when k was shown before; otherwise uniform over the values not yet shown (pi is a
  bijection: a shown value belongs to another key).

Floors, each a predictor that sees less (all exact, `floors`):

- `prior`: the next token's marginal with no input: uniform over the K tokens;
- `no_context`: the current and the previous token (x_t itself): after a key, uniform over the values, since pi(k)
  is uniform a priori, after a value uniform over the keys;
- `counts`: the bag of tokens shown so far and the current one, not their order: a value shown c times belongs to a
  key shown c times (each showing of a key shows its value), so after key k seen c times before, uniform over the
  shown values shown c times (exact by symmetry among the keys of equal count); unseen, uniform over the unused.

A recurrent state that holds counts does no better than `counts`; attention can read the value that followed the
earlier showing of the same key (its previous token is the key), and reach Bayes.

    python -m numeric.experiments.mechanism_tunnel --task bijection   (every mechanism trained on it)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from numeric.experiments import windtunnel
from numeric.experiments.config import positive, positive_ints

FLOORS = ("prior", "no_context", "counts")


@dataclass(frozen=True)
class BijectionConfig:
    """The task (values V, pairs per sequence) and the tunnel's optimiser settings (numeric.experiments.
    mechanism_tunnel trains on it as on the wind tunnel)."""
    values: int = 16
    pairs: int = 24
    batch: int = 64
    steps: int = 1500
    d_k: int = 16
    d_v: int = 16
    lr: float = 1e-2  # Adam's; SGD at the wind tunnel's rates stays at the no-context floor in this budget
    value_lr_ratio: float = 10.0
    eval_batch: int = 256
    optimizer: str = "adam"  # or "sgd" (the wind tunnel's)

    @property
    def symbols(self):
        """K = 2V tokens: keys 0..V-1, values V..2V-1."""
        return 2 * self.values

    @property
    def length(self):
        return 2 * self.pairs

    def validate(self):
        positive_ints(self, "values", "pairs", "batch", "steps", "d_k", "d_v", "eval_batch")
        positive(self, "lr", "value_lr_ratio")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"BijectionConfig.optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.values < 2:
            raise ValueError(f"BijectionConfig.values must be at least 2, got {self.values!r}")
        return self


def sample(cfg, batch, g):
    """Token sequences (batch, 2 pairs): keys with replacement, each followed by its value V + pi(key)."""
    V = cfg.values
    perm = torch.argsort(torch.rand(batch, V, generator=g), -1)
    keys = torch.randint(0, V, (batch, cfg.pairs), generator=g)
    y = torch.empty(batch, cfg.length, dtype=torch.long)
    y[:, 0::2] = keys
    y[:, 1::2] = V + perm.gather(1, keys)
    return y


def inputs(cfg, y):
    """x_t = [e_{y_t}, e_{y_{t-1}}] for t = 0..length-2: the wind tunnel's inputs over this task's K tokens."""
    return windtunnel.inputs(cfg, y)


def _walk(cfg, y, predict):
    """(B, length-1, K): predict(state, b, t) for every sequence and position, state the prefix's bookkeeping
    (the value of each shown key, how often each token was shown before position t)."""
    B, L = y.shape
    K, V = cfg.symbols, cfg.values
    out = torch.zeros(B, L - 1, K, dtype=torch.float64)
    for b in range(B):
        value_of, count = {}, [0] * K
        for t in range(L - 1):
            tok = int(y[b, t])
            out[b, t] = predict(value_of, count, tok, V, K)
            count[tok] += 1
            if tok >= V:
                value_of[int(y[b, t - 1])] = tok
    return out


def _uniform(K, tokens):
    p = torch.zeros(K, dtype=torch.float64)
    p[list(tokens)] = 1.0 / len(tokens)
    return p


def _bayes(value_of, count, tok, V, K):
    if tok >= V:
        return _uniform(K, range(V))
    if tok in value_of:
        return _uniform(K, [value_of[tok]])
    return _uniform(K, [v for v in range(V, K) if v not in value_of.values()])


def _no_context(value_of, count, tok, V, K):
    return _uniform(K, range(V) if tok >= V else range(V, K))


def _counts(value_of, count, tok, V, K):
    if tok >= V:
        return _uniform(K, range(V))
    c = count[tok]
    if c == 0:
        return _uniform(K, [v for v in range(V, K) if count[v] == 0])
    return _uniform(K, [v for v in range(V, K) if count[v] == c])


def bayes_predictive(cfg, y):
    """P(y_{t+1} | y_0..y_t) exactly, t = 0..length-2: (B, length-1, K)."""
    return _walk(cfg, y, _bayes)


def floors(cfg, y):
    """{floor: (B, length-1, K)} the predictors that see less than Bayes (the module's docstring)."""
    B, L = y.shape
    prior = torch.full((B, L - 1, cfg.symbols), 1.0 / cfg.symbols, dtype=torch.float64)
    return {"prior": prior, "no_context": _walk(cfg, y, _no_context), "counts": _walk(cfg, y, _counts)}


def query_positions(cfg, y):
    """(B, length-1) bool: the positions that hold a key (their next token is its value), and (B, length-1) bool:
    those whose key was shown before (the answer is in the context)."""
    V = cfg.values
    key = y[:, :-1] < V
    seen = torch.zeros_like(key)
    shown = y[:, 0:y.shape[1] - 1:2]  # (B, P): the tokens at the even positions, where a pair's key stands
    earlier = torch.ones(shown.shape[1], shown.shape[1], dtype=torch.bool).tril(-1)  # [t, t']: t' before t
    seen[:, 0:y.shape[1] - 1:2] = ((shown[:, :, None] == shown[:, None, :]) & earlier).any(-1)
    return key, seen


def scores(cfg, y, p, bayes=None):
    """{kl_bits, kl_bits_queries, accuracy_seen}: the mean KL from the Bayes predictive to p (bits) over every
    position and over the key positions, and how often p's most likely token is the answer where it was shown."""
    bayes = bayes_predictive(cfg, y) if bayes is None else bayes
    kl = (bayes * (torch.log(bayes.clamp_min(1e-300)) - torch.log(p.clamp_min(1e-300)))).sum(-1) / math.log(2)
    key, seen = query_positions(cfg, y)
    target = y[:, 1:]
    hit = (p.argmax(-1) == target)
    return {"kl_bits": float(kl.mean()), "kl_bits_queries": float(kl[key].mean()),
            "accuracy_seen": float(hit[seen].double().mean()) if seen.any() else float("nan")}
