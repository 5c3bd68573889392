"""The public API against torch.autograd, finite differences and SDPA, per dtype.

Tolerances are relative to the largest reference entry and stated per dtype (never loosened to
pass): float64 is the verification tier; float32 and bfloat16 are compared with a float64
reference computed from the same (rounded) inputs, so the tolerance covers rounding in the
computation only.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from numeric.api import attention_backward, attention_loss_backward
from numeric.module import AttentionCore, GeneratedAttention
from numeric.reference import MASK_KINDS, causal_mask, make_mask, softmax

# float64: 1e-12 (unit roundoff 1.1e-16; softmax + three contractions over n <= 64 lose < 4 digits).
# float32: 2e-5 (unit roundoff 6e-8; sums over n <= 64 grow the error ~ n u = 4e-6, x5 margin for exp).
# bfloat16: 1e-2 (computed in float32, rounded once: the output rounding 2^-9 relative per entry,
#   x2.5 margin; the input rounding is shared with the float64 reference, which uses the same inputs).
TOLERANCE = {torch.float64: 1e-12, torch.float32: 2e-5, torch.bfloat16: 1e-2}
FIELDS = ("alpha", "B", "dS", "dQ", "dK", "dV")


@dataclass(frozen=True)
class Case:
    batch: tuple
    n: int
    d_k: int
    d_v: int
    mask: str  # a kind of numeric.reference.make_mask
    seed: int

    def label(self):
        b = "x".join(map(str, self.batch)) or "-"
        return f"b{b}-n{self.n}-dk{self.d_k}-dv{self.d_v}-{self.mask}"


def random_cases(count, seed, max_n=12):
    """Shapes drawn from a seeded generator: n and d from 1, batch and head dims, every mask kind."""
    rng = random.Random(seed)
    kinds = MASK_KINDS
    cases = [Case((), 1, 1, 1, "none", seed), Case((2, 3), 1, 2, 1, "causal", seed + 1)]
    while len(cases) < count:
        batch = rng.choice([(), (2,), (2, 3), (1, 4)])
        cases.append(Case(batch, rng.randint(1, max_n), rng.randint(1, 8), rng.randint(1, 8),
                          kinds[len(cases) % len(kinds)], rng.randrange(2**31)))
    return cases


def make_inputs(case, dtype, device, magnitude=1.0):
    g = torch.Generator().manual_seed(case.seed)
    shape = case.batch + (case.n,)
    q = torch.randn(shape + (case.d_k,), generator=g, dtype=torch.float64) * magnitude
    k = torch.randn(shape + (case.d_k,), generator=g, dtype=torch.float64) * magnitude
    v = torch.randn(shape + (case.d_v,), generator=g, dtype=torch.float64)
    u = torch.randn(shape + (case.d_v,), generator=g, dtype=torch.float64)
    mask = make_mask(case.mask, case.batch, case.n, g)
    to = lambda t: t.to(dtype=dtype, device=device)  # noqa: E731
    return to(q), to(k), to(v), to(u), (mask.to(device) if mask is not None else None)


def autograd_reference(q, k, v, u, mask, scale):
    """alpha, dL/dalpha (= B), dL/ds, dQ, dK, dV by torch.autograd on the plain forward, L = <u, o>."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    s = scale * q @ k.transpose(-1, -2)
    s.retain_grad()
    alpha = softmax(s, mask)
    alpha.retain_grad()
    o = alpha @ v
    (o * u).sum().backward()
    return {"alpha": alpha.detach(), "B": alpha.grad, "dS": s.grad, "dQ": q.grad, "dK": k.grad, "dV": v.grad}


def rel_error(ours, ref):
    ours, ref = ours.double(), ref.double()
    if ref.numel() == 0:
        return 0.0
    scale = float(ref.abs().max())
    return float((ours - ref).abs().max()) / (scale if scale > 0 else 1.0)


def compare_api(case, dtype, device, magnitude=1.0):
    """Worst relative error over the fields; reference in float64 from the same rounded inputs."""
    q, k, v, u, mask = make_inputs(case, dtype, device, magnitude)
    scale = q.shape[-1] ** -0.5
    ours = attention_backward(q, k, v, u, mask=mask, scale=scale)._asdict()
    ref = autograd_reference(*(t.double() for t in (q, k, v, u)), mask, scale)
    errors = {f: rel_error(ours[f], ref[f]) for f in FIELDS}
    finite = all(bool(torch.isfinite(ours[f]).all()) for f in FIELDS)
    return max(errors.values()), errors, finite


def fully_masked_rows_are_zero(device):
    case = Case((2,), 5, 3, 4, "fully-masked-row", 11)
    q, k, v, u, mask = make_inputs(case, torch.float64, device)
    g = attention_backward(q, k, v, u, mask=mask)
    row = case.n // 2
    zero = all(float(t[..., row, :].abs().max()) == 0.0 for t in (g.alpha, g.dS, g.dQ))
    finite = all(bool(torch.isfinite(t).all()) for t in g)
    return zero and finite


def gradcheck_core(device):
    case = Case((2,), 4, 3, 2, "causal", 5)
    q, k, v, _, mask = make_inputs(case, torch.float64, device)
    args = tuple(t.requires_grad_(True) for t in (q, k, v))
    return torch.autograd.gradcheck(lambda a, b, c: AttentionCore.apply(a, b, c, mask, 0.7), args, eps=1e-6, atol=1e-8)


def sdpa_error(case, device):
    """Our dQ, dK, dV against the backward of torch's scaled_dot_product_attention (float64)."""
    q, k, v, u, mask = make_inputs(case, torch.float64, device)
    scale = q.shape[-1] ** -0.5
    leaf = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    o = torch.nn.functional.scaled_dot_product_attention(*leaf, attn_mask=mask, scale=scale)
    o.backward(u)
    ours = attention_backward(q, k, v, u, mask=mask, scale=scale)
    return max(rel_error(ours.dQ, leaf[0].grad), rel_error(ours.dK, leaf[1].grad), rel_error(ours.dV, leaf[2].grad))


def loss_variant_error(device, seed=3):
    g = torch.Generator().manual_seed(seed)
    b, n, d_x, d_k, d_v, m = (2, 3), 6, 5, 4, 3, 4
    x = torch.randn(b + (n, d_x), generator=g, dtype=torch.float64).to(device)
    ws = [torch.randn(shape, generator=g, dtype=torch.float64).to(device) * 0.5
          for shape in ((d_x, d_k), (d_x, d_k), (d_x, d_v), (d_v, m))]
    targets = torch.randint(0, m, b + (n,), generator=g).to(device)
    mask = causal_mask(n, device)
    ours = attention_loss_backward(x, *ws, targets, mask=mask)
    leaves = [t.clone().requires_grad_(True) for t in ws]
    q, k, v = (x @ w for w in leaves[:3])
    o = softmax(d_k ** -0.5 * q @ k.transpose(-1, -2), mask) @ v
    o.retain_grad()
    z = o @ leaves[3]
    loss = torch.nn.functional.cross_entropy(z.reshape(-1, m), targets.reshape(-1), reduction="none").reshape(b + (n,))
    loss = loss.mean(-1).sum()
    loss.backward()
    pairs = [(ours.loss, loss.detach()), (ours.u, o.grad)] + [(a, w.grad) for a, w in zip(
        (ours.dW_Q, ours.dW_K, ours.dW_V, ours.dW_O), leaves)]
    return max(rel_error(a, r) for a, r in pairs)


def training_matches_autograd(device, steps=3):
    """Three SGD steps of the generated module against the same module under plain autograd."""
    torch.manual_seed(0)
    ours = GeneratedAttention(6, 4, 3, causal=True).double().to(device)
    ref = {k: p.detach().clone().requires_grad_(True) for k, p in ours.named_parameters()}
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 7, 6, generator=g, dtype=torch.float64).to(device)
    target = torch.randn(2, 7, 3, generator=g, dtype=torch.float64).to(device)
    mask = causal_mask(7, device)
    opt = torch.optim.SGD(ours.parameters(), lr=0.1)
    ropt = torch.optim.SGD(list(ref.values()), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        ((ours(x) - target) ** 2).sum().backward()
        opt.step()
        ropt.zero_grad()
        q, k, v = x @ ref["w_q"], x @ ref["w_k"], x @ ref["w_v"]
        ((softmax(4 ** -0.5 * q @ k.transpose(-1, -2), mask) @ v - target) ** 2).sum().backward()
        ropt.step()
    return max(rel_error(p.detach(), ref[k].detach()) for k, p in ours.named_parameters())
