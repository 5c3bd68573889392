"""The sticky Markov chain of the authors' script, its data, and its exact Bayes predictor."""
from __future__ import annotations

import math

import numpy as np
import torch


def transition_matrix(k=8, self_prob=0.3, off_mass=0.7, dtype=torch.float64):
    """P as the authors' script builds it: weights 1/circular distance (the diagonal's
    distance clamped to 1), each row scaled to sum `off_mass`, the diagonal then set to `self_prob`,
    and each row renormalised once more. Gives the quoted row [0.350, 0.166, 0.083, 0.055, 0.042, ...]."""
    i = torch.arange(k)
    dist = (i[:, None] - i[None, :]).abs()
    dist = torch.minimum(dist, k - dist).clamp(min=1).to(dtype)
    w = 1.0 / dist
    w = off_mass * w / w.sum(1, keepdim=True)
    w.fill_diagonal_(self_prob)
    return w / w.sum(1, keepdim=True)


def stationary(P):
    evals, evecs = torch.linalg.eig(P.T)
    v = evecs[:, torch.argmin((evals - 1).abs())].real
    return v / v.sum()


def conditional_entropy(P):
    """H(Y_t | Y_{t-1}) in nats under the stationary law: the paper's H_min."""
    pi = stationary(P)
    return float(-(pi[:, None] * P * torch.log(P)).sum())


MU_RNGS = ("torch-float64", "torch-float32", "numpy-legacy")


def symbol_means(k=8, dim=20, seed=0, rng="torch-float64"):
    """mu in R^{k x dim}, N(0, 1), with its own seed (0), as float64.

    The paper fixes the seed but not the generator, and each reading of "drawn with seed 0" gives
    another mu: torch's float64 normal sampler (ours), torch's float32 one (`torch.manual_seed(0);
    torch.randn(k, dim)`), numpy's legacy one (`np.random.seed(0); np.random.randn(k, dim)`)."""
    if rng == "torch-float64":
        return torch.randn(k, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    if rng == "torch-float32":
        return torch.randn(k, dim, generator=torch.Generator().manual_seed(seed)).double()
    if rng == "numpy-legacy":
        return torch.from_numpy(np.random.RandomState(seed).standard_normal((k, dim)))
    raise ValueError(f"unknown mu generator {rng!r}; choose from {MU_RNGS}")


def sample(P, mu, length, seeds, dtype=torch.float64):
    """One sequence per seed: y_0 ~ stationary, y_t ~ P[y_{t-1}], x_t = mu[y_{t-1}] + eps_t.

    Returns x (S, length - 1, dim) and targets y_1.. (S, length - 1). The chain is sampled for all
    seeds at once (a vectorised loop over time, not a Python loop per seed and step)."""
    S, k = len(seeds), P.shape[0]
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    u = torch.stack([torch.rand(length, generator=g, dtype=torch.float64) for g in gens])  # (S, T)
    eps = torch.stack([torch.randn(length - 1, mu.shape[1], generator=g, dtype=torch.float64) for g in gens])
    cdf = P.cumsum(1)
    y = torch.empty(S, length, dtype=torch.long)
    y[:, 0] = torch.searchsorted(stationary(P).cumsum(0), u[:, 0].contiguous()).clamp(max=k - 1)
    for t in range(1, length):  # vectorised over seeds
        y[:, t] = torch.searchsorted(cdf[y[:, t - 1]], u[:, t : t + 1].contiguous()).squeeze(1).clamp(max=k - 1)
    x = mu[y[:, :-1]] + eps
    return x.to(dtype), y[:, 1:]


def authors_transition_matrix(k=8, self_prob=0.3, off_mass=0.7):
    """P in float32, built as the authors' script builds it: off-diagonal weights 1/circular distance,
    the diagonal entry `self_prob` counted in the row sum that is scaled to `off_mass`, then `self_prob`
    added on the diagonal. Equal to `transition_matrix` to float32 rounding (about 3e-8)."""
    i = torch.arange(k)
    dist = (i[:, None] - i[None, :]).abs()
    dist = torch.minimum(dist, k - dist)
    w = torch.where(dist > 0, 1.0 / dist.clamp(min=1).float(), torch.tensor(self_prob, dtype=torch.float32))
    w = w / w.sum(1, keepdim=True) * off_mass
    return w + self_prob * torch.eye(k, dtype=torch.float32)


def authors_sequence(P32, mu32, length, seed):
    """One seed's data exactly as the authors' script draws it from a CPU generator seeded with `seed`
    (mu is drawn from its own seed and does not consume this stream): y_0 = one `randint(k, (1,))`, then
    one `multinomial(P[y_{t-1}], 1)` per step, then one `randn(length - 1, dim)` of noise;
    x_t = mu[y_{t-1}] + noise_t in float32. Returns x (length - 1, dim) float32 and targets y_1.. .

    Only a torch CPU generator is used (never the global one, never a device's), so the draws do not
    depend on the device a run trains on or on which other seeds are sampled with this one."""
    g = torch.Generator().manual_seed(int(seed))
    k = P32.shape[0]
    y = [int(torch.randint(k, (1,), generator=g))]
    for _ in range(1, length):
        y.append(int(torch.multinomial(P32[y[-1]], 1, generator=g)))
    noise = torch.randn(length - 1, mu32.shape[1], generator=g)
    y = torch.tensor(y)
    return mu32[y[:-1]] + noise, y[1:]


def authors_weights(shapes, std, seed):
    """The authors' initial weights: a CPU generator re-seeded with `seed` (after the data, so the data
    draws do not shift them), then one float32 `randn(shape) * std` per shape, in order."""
    g = torch.Generator().manual_seed(int(seed))
    return [torch.randn(sh, generator=g) * std for sh in shapes]


def bayes_predictive(P, mu, x):
    """Exact HMM filter: P(y_t | x_1..x_t) for every t, x (S, T, dim) -> (S, T, k), in float64.

    x_t is an emission of y_{t-1} (N(mu_{y_{t-1}}, I)); the filter tracks P(y_{t-1} | x_1..x_t)
    and the predictive is that posterior pushed through P."""
    P, mu, x = P.double(), mu.double(), x.double()
    loglik = -0.5 * ((x[..., None, :] - mu) ** 2).sum(-1)  # (S, T, k), up to a constant
    prior = stationary(P).expand(x.shape[0], -1)
    out = torch.empty(x.shape[:2] + (P.shape[0],), dtype=torch.float64)
    for t in range(x.shape[1]):
        logpost = torch.log(prior) + loglik[:, t]
        post = torch.softmax(logpost, -1)  # P(y_{t-1} | x_1..x_t)
        out[:, t] = post @ P  # P(y_t | x_1..x_t)
        prior = out[:, t]
    return out


def predictive_metrics(probs, targets):
    """Mean CE (nats), mean predictive entropy (nats), accuracy; per leading index."""
    logp = torch.log(probs.clamp_min(1e-300))
    ce = -logp.gather(-1, targets[..., None]).squeeze(-1).mean(-1)
    ent = -(probs * logp).sum(-1).mean(-1)
    acc = (probs.argmax(-1) == targets).double().mean(-1)
    return ce, ent, acc


def kl_bits(p, q):
    """Mean KL(p || q) over positions, in bits."""
    return ((p * (torch.log(p.clamp_min(1e-300)) - torch.log(q.clamp_min(1e-300)))).sum(-1).mean(-1)) / math.log(2)
