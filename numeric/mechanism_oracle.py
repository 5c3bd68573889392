"""An independent float64 oracle for fuzzed mechanisms (derive.fuzz.mechanisms): plain torch and autograd only.

This module imports nothing from derive/ (tests/test_import_graph.py holds it to that): from a mechanism's spec,
plain data, it builds the weight itself (`weights`, the formulas of derive.fuzz.mechanisms' docstring written again
in tensors), the model's forward o_i = sum_j w_ij v_j under the linear loss L = sum_i U_i . o_i (b_ij = U_i . v_j,
u = U), and decides by autograd what each question of the mechanisms table asserts, per mask setting (none; the
causal mask j <= i):

- routing: dL/ds = the declared form; advantage: dL/ds_ij = w_ij (b_ij - sum_k w_ik b_ik); competition:
  sum_j dL/ds_ij = 0; content: dL/dv_j = sum_i w_ij u_i; em_step: C10's completed square at a random step;
  each labelled true iff the largest gap is within MARGIN of the largest magnitude at two random draws
  (n = 3 and 4, every leaf inside its declared domain), None where both draws are singular;
- content_routing: whether some d^2 w_ij / dq_ia dk_jb (s = c q . k) is not zero beyond MARGIN of the weight's
  first derivatives, at two random draws (`content_routing`: true where the mechanism routes by content);
- saturation: `replay` evaluates C9's two sides at a printed witness (exactly its point), `search` looks for a
  violation at random and adversarial in-domain points (families of one high logit, +-1 compatibilities).
"""
from __future__ import annotations

from fractions import Fraction

import torch

MARGIN = 1e-9  # relative to the largest magnitude of either side; float64 autograd noise is ~1e-15
LEAF = {"prior": ("P", ("n", "n")), "temperature": ("tau", ("n",)), "shift": ("a", ("n",))}
D = torch.float64


def in_domain(domain, shape, g):
    r = torch.rand(shape, generator=g, dtype=D)
    if domain in (None, "real"):
        return 2 * torch.randn(shape, generator=g, dtype=D)
    return {"positive": 0.2 + 2.5 * r, "nonnegative": 2.5 * r, "unit": 0.02 + 0.96 * r, "negative": -(0.2 + 2.5 * r),
            "nonpositive": -2.5 * r}[domain]


def _f(name, x):
    return {"exp": lambda: x.exp(), "softplus": lambda: torch.nn.functional.softplus(x), "square": lambda: x ** 2,
            "sigmoid": lambda: x.sigmoid(), "identity": lambda: x, "cube_exp": lambda: x ** 3 * x.exp()}[name]()


def weights(spec, s, leaf, beta, mask):
    """w (..., n, n) from logits s, the mechanism's own leaf (or None), the scalar beta and a 0/1 mask."""
    role, norm = spec["role"], spec["norm"]
    x = s + beta if norm == "none" else s
    if role == "prior":
        g = _f(spec["f"], x) * leaf
    elif role == "temperature":
        g = _f(spec["f"], leaf[..., :, None] * x)
    elif role == "shift":
        g = _f(spec["f"], x + leaf[..., :, None])
    else:
        g = _f(spec["f"], x)
    if norm == "none":
        return mask * g
    total = (mask * g if norm == "keys" else g).sum(-1, keepdim=True)
    if spec["sink"]:
        total = total + beta.exp()
    return mask * g / total


def declared(spec, w, b, leaf):
    adv = w * (b - (w * b).sum(-1, keepdim=True))
    return {"advantage": lambda: adv, "per_key": lambda: w * (1 - w) * b, "plain": lambda: w * b,
            "tempered": lambda: leaf[..., :, None] * adv}[spec["routing"]]()


def _draw(spec, n, dv, g):
    name, dims = LEAF.get(spec["role"], (None, None))
    leaf = in_domain(spec["domain"], (n,) * len(dims), g) if name else None
    return {"s": 2 * torch.randn(n, n, generator=g, dtype=D), "v": torch.randn(n, dv, generator=g, dtype=D),
            "U": torch.randn(n, dv, generator=g, dtype=D), "leaf": leaf, "beta": torch.randn((), generator=g, dtype=D)}


def _mask(n, masked):
    return torch.ones(n, n, dtype=D).tril() if masked else torch.ones(n, n, dtype=D)


def _sides(spec, x, masked, g):
    """{question: (lhs, rhs)} at one draw."""
    s, v = x["s"].clone().requires_grad_(), x["v"].clone().requires_grad_()
    w = weights(spec, s, x["leaf"], x["beta"], _mask(s.shape[0], masked))
    loss = (x["U"] * (w @ v)).sum()
    gs, gv = torch.autograd.grad(loss, (s, v))
    w = w.detach()
    b = x["U"] @ x["v"].T
    closed = w.T @ x["U"]  # sum_i w_ij u_i
    eta = 0.5 + torch.rand((), generator=g, dtype=D)
    mass = w.sum(0)[:, None]
    star = -eta * closed / mass
    step = torch.randn(closed.shape, generator=g, dtype=D)

    def prox(d):
        return (gv * d).sum(-1) + mass[:, 0] / (2 * eta) * (d ** 2).sum(-1)

    # (lhs, rhs, the magnitudes a rounding error is relative to: the terms, not only a side that may be 0)
    return {"routing": (gs, declared(spec, w, b, x["leaf"]), ()),
            "advantage": (gs, w * (b - (w * b).sum(-1, keepdim=True)), ()),
            "competition": (gs.sum(-1), torch.zeros(s.shape[0], dtype=D), (gs,)),
            "content": (gv, closed, ()),
            "em_step": (prox(step) - prox(star), mass[:, 0] / (2 * eta) * ((step - star) ** 2).sum(-1),
                        (prox(step), prox(star)))}


def truth(spec, seed=0):
    """{question: {"unmasked": bool or None, "masked": bool or None}}."""
    out = {}
    for masked in (False, True):
        g = torch.Generator().manual_seed(seed * 7919 + masked)
        labels = {}
        draws = 0
        for _attempt in range(12):
            if draws == 2:
                break
            x = _draw(spec, 3 + draws, 2, g)
            sides = _sides(spec, x, masked, g)
            if not all(torch.isfinite(t).all() for lhs, rhs, terms in sides.values() for t in (lhs, rhs, *terms)):
                continue  # a singular point of the weight: another draw
            draws += 1
            for q, (lhs, rhs, terms) in sides.items():
                scale = max(max(float(t.abs().max()) for t in (lhs, rhs, *terms)), 1e-300)
                ok = float((lhs - rhs).abs().max()) <= MARGIN * scale
                labels[q] = labels.get(q, True) and ok
        for q in ("routing", "advantage", "competition", "content", "em_step"):
            out.setdefault(q, {})["masked" if masked else "unmasked"] = labels.get(q) if draws else None
    return out


def content_routing(spec, seed=0, dk=2):
    """{"unmasked", "masked": True where some d^2 w_ij / dq_ia dk_jb is not zero at a random draw (s_ij = c q_i . k_j),
    False where none is at two draws, None where both draws are singular}."""
    out = {}
    for masked in (False, True):
        g = torch.Generator().manual_seed(seed * 7919 + 31 + masked)
        found, draws = False, 0
        for _attempt in range(12):
            if draws == 2 or found:
                break
            n = 3 + draws
            x = _draw(spec, n, 2, g)
            q = torch.randn(n, dk, generator=g, dtype=D).requires_grad_()
            k = torch.randn(n, dk, generator=g, dtype=D).requires_grad_()
            c = 0.3 + torch.rand((), generator=g, dtype=D)
            w = weights(spec, c * q @ k.T, x["leaf"], x["beta"], _mask(n, masked))
            if not torch.isfinite(w).all():
                continue
            mixed, first = [], []
            for i in range(n):
                for j in range(n):
                    gq, gk = torch.autograd.grad(w[i, j], (q, k), create_graph=True)
                    first += [gq.abs().max().detach(), gk.abs().max().detach()]
                    for b in range(dk):
                        (h,) = torch.autograd.grad(gk[j, b], q, retain_graph=True, allow_unused=True)
                        if h is not None:
                            mixed.append(h[i].abs().max().detach())
            if not all(torch.isfinite(t) for t in mixed + first):
                continue
            draws += 1
            scale = max(max(float(t) for t in first), 1e-300)
            found = bool(mixed) and max(float(t) for t in mixed) > MARGIN * scale
        out["masked" if masked else "unmasked"] = True if found else (False if draws else None)
    return out


def _c9(spec, s, v, u, leaf, beta, mask):
    """C9's two sides per row, batched: (lhs, rhs) of shape (..., n)."""
    s = s.clone().requires_grad_()
    w = weights(spec, s, leaf, beta, mask)
    (gs,) = torch.autograd.grad((u * (w @ v)).sum(), s)
    b = u @ v.mT
    return gs.abs().sum(-1), 4 * (1 - w.detach().amax(-1)) * b.abs().amax(-1)


def _tensor(point, name, shape):
    t = torch.zeros(shape, dtype=D)
    for label, value in point.items():
        if label.startswith(name + "["):
            t[tuple(int(x) for x in label[len(name) + 1:-1].split(","))] = float(Fraction(value))
    return t


def replay(spec, witness):
    """C9's two sides at the witness's row, rebuilt from its printed point alone: (lhs, rhs) in float64."""
    n, dv, point = witness["sizes"]["n"], witness["sizes"]["dv"], witness["point"]
    name, dims = LEAF.get(spec["role"], (None, None))
    leaf = _tensor(point, name, (n,) * len(dims)) if name else None
    beta = torch.tensor(float(Fraction(point.get("beta", "0"))), dtype=D)
    lhs, rhs = _c9(spec, _tensor(point, "s", (n, n)), _tensor(point, "v", (n, dv)), _tensor(point, "U", (n, dv)),
                   leaf, beta, _mask(n, witness["masked"]))
    r = witness["row"]
    return float(lhs[r]), float(rhs[r])


def search(spec, masked, seed=0, batch=128):
    """The largest violation lhs - rhs (relative) found over random and adversarial in-domain points; > 0: the bound
    fails at some point the oracle found (a proved cell is then false)."""
    g = torch.Generator().manual_seed(seed * 104729 + masked)
    worst = -float("inf")
    name, dims = LEAF.get(spec["role"], (None, None))
    for n in (2, 3, 4, 6):
        for scale in (0.5, 2.0, 8.0):
            s = scale * torch.randn(batch, n, n, generator=g, dtype=D)
            s[: batch // 4, :, 0] += 2 * scale  # one high logit per row
            u = torch.ones(batch, n, 1, dtype=D)
            v = torch.randn(batch, n, 1, generator=g, dtype=D)
            v[: batch // 2] = torch.tensor([(-1.0) ** j for j in range(n)], dtype=D)[:, None]  # b = +-1 alternating
            leaf = in_domain(spec["domain"], (batch,) + (n,) * len(dims), g) if name else None
            beta = torch.randn((), generator=g, dtype=D)
            lhs, rhs = _c9(spec, s, v, u, leaf, beta, _mask(n, masked))
            gap = (lhs - rhs) / (1 + rhs.abs())
            gap = gap[torch.isfinite(gap)]
            if gap.numel():
                worst = max(worst, float(gap.max()))
    return worst
