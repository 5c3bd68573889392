"""C9 numerically: adversarial search for the worst case of the saturation bound.

ratio(alpha, b) = sum_j |alpha_j (b_j - alpha.b)| / (K (1 - max alpha) max |b|). The bound with
constant K holds iff sup ratio <= 1; K = 4 is tight iff the search can push the ratio to 1. The
exact tight family (n = 2, alpha = (eps, 1 - eps), b = (-1, 1)) is evaluated in rationals.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

TIGHT_CONSTANT = 4.0


def ratio(alpha, b, constant=TIGHT_CONSTANT):
    """Left side over right side of the bound, for one attention row."""
    ds = alpha * (b - alpha @ b)
    bound = constant * (1.0 - alpha.max()) * np.abs(b).max()
    return float(np.abs(ds).sum() / bound) if bound > 0 else 0.0


def tight_family_ratio(eps: Fraction) -> Fraction:
    """Exact ratio for n = 2, alpha = (eps, 1 - eps), b = (-1, 1): equals 1 - eps."""
    alpha = (eps, 1 - eps)
    b = (Fraction(-1), Fraction(1))
    mean = alpha[0] * b[0] + alpha[1] * b[1]
    lhs = sum(abs(a * (bj - mean)) for a, bj in zip(alpha, b))
    return lhs / (4 * (1 - max(alpha)) * max(abs(x) for x in b))


@dataclass
class Search:
    sup_ratio: float
    witness_n: int
    witness_alpha: list
    witness_b: list
    evaluations: int


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def _climb(rng, n, constant, steps):
    logits, b = rng.normal(size=n) * rng.uniform(0.5, 6.0), rng.normal(size=n)
    best = ratio(_softmax(logits), b, constant)
    scale = 1.0
    for _ in range(steps):
        cand_l = logits + rng.normal(size=n) * scale
        cand_b = b + rng.normal(size=n) * scale * 0.3
        r = ratio(_softmax(cand_l), cand_b, constant)
        if r > best:
            logits, b, best = cand_l, cand_b, r
        else:
            scale = max(scale * 0.995, 1e-3)
    return best, _softmax(logits), b


def adversarial_search(constant=TIGHT_CONSTANT, restarts=60, steps=400, seed=0, max_n=8) -> Search:
    """Random restarts of a hill climb on (logits, b) that maximises the ratio."""
    rng = np.random.default_rng(seed)
    best = Search(0.0, 0, [], [], 0)
    for r in range(restarts):
        n = 2 + r % (max_n - 1)
        value, alpha, b = _climb(rng, n, constant, steps)
        best.evaluations += steps + 1
        if value > best.sup_ratio:
            best = Search(value, n, alpha.tolist(), b.tolist(), best.evaluations)
    return best
