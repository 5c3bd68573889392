"""Gradient-dynamics simulations: E6 (advantage predicts routing), E7 (specialisation), C9 (saturation).

Small single-head models with free queries, keys and values (the paper's simulation setting) and a
cross-entropy readout; gradients from the generated closed forms (numeric.attention_backward)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from numeric import attention_backward
from numeric.experiments.config import positive, positive_ints
from numeric.reference import causal_mask, softmax


@dataclass(frozen=True)
class DynamicsConfig:
    n: int = 10
    d: int = 6
    classes: int = 5
    instances: int = 64
    step_sizes: tuple = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 3.0)
    train_steps: int = 300
    lr: float = 0.5
    checkpoints: int = 11
    temperatures: tuple = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    seed: int = 0

    def validate(self):
        positive_ints(self, "n", "d", "classes", "instances", "train_steps", "checkpoints")
        positive(self, "lr")
        if not self.step_sizes or any(not h > 0 for h in self.step_sizes):
            raise ValueError(f"DynamicsConfig.step_sizes must be positive, got {self.step_sizes!r}")
        return self


def _problem(cfg, g, device="cpu"):
    """Drawn on the CPU generator `g`, then moved: the same problem on every device."""
    B, n, d, m = cfg.instances, cfg.n, cfg.d, cfg.classes
    q, k, v = (torch.randn(B, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    w_o = torch.randn(d, m, generator=g, dtype=torch.float64)
    y = torch.randint(0, m, (B, n), generator=g)
    return tuple(t.to(device) for t in (q, k, v, w_o, y))



def _u(q, k, v, w_o, y, mask):
    """u = dL/do for the mean cross-entropy of the readout (C5), by autograd on o only."""
    o = attention_backward(q, k, v, torch.zeros_like(v), mask=mask, validate_inputs=False).alpha @ v
    o = o.detach().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy((o @ w_o).flatten(0, 1), y.flatten(), reduction="sum") / o.shape[-2]
    (u,) = torch.autograd.grad(loss, o)
    return u


def advantage_sign_agreement(cfg, device="cpu"):
    """E6: after one gradient step of size h, the fraction of allowed (i, j) with
    sign(delta alpha_ij) == sign(-A_ij), for steps on the scores and on the queries/keys.

    Controls, on the same live entries: `scores_control` and `queries_keys_control`, the fraction with
    sign(delta alpha_ij) == sign(+A_ij) (the opposite prediction). With no zero changes the two
    fractions sum to 1; a rule that passes the control is not testing the sign of A.

    `scores_natural` (E6's positive control): the same for the score step -h A / alpha (zero where alpha
    is), the gradient step preconditioned by the softmax's Fisher metric. With A = alpha (B - <alpha, B>)
    per row, that step is -h (B - <alpha, B>), which has zero alpha-weighted mean, so delta alpha =
    alpha (delta s - <alpha, delta s>) = -h A to first order: the claimed sign holds by construction at
    small h. `scores_natural_control`: its sign(+A) fraction."""
    cfg.validate()
    g = torch.Generator().manual_seed(cfg.seed)
    q, k, v, w_o, y = _problem(cfg, g, device)
    mask = causal_mask(cfg.n, device)
    u = _u(q, k, v, w_o, y, mask)
    grads = attention_backward(q, k, v, u, mask=mask)
    alpha, A = grads.alpha, grads.A
    live = mask & (A.abs() > 1e-12 * A.abs().max())
    rows = {"step_sizes": list(cfg.step_sizes), "scores": [], "queries_keys": [], "scores_control": [],
            "queries_keys_control": [], "scores_natural": [], "scores_natural_control": []}
    scale = cfg.d ** -0.5
    s = scale * q @ k.mT
    natural = torch.where(alpha > 0, A / alpha.clamp_min(torch.finfo(alpha.dtype).tiny), torch.zeros_like(A))
    for h in cfg.step_sizes:
        a_scores = softmax(s - h * A, mask)
        a_params = softmax(scale * (q - h * grads.dQ) @ (k - h * grads.dK).mT, mask)
        a_natural = softmax(s - h * natural, mask)
        for key, new in (("scores", a_scores), ("queries_keys", a_params), ("scores_natural", a_natural)):
            agree = (torch.sign(new - alpha) == torch.sign(-A)) & live
            rows[key].append(float(agree.sum() / live.sum()))
            control = (torch.sign(new - alpha) == torch.sign(A)) & live
            rows[f"{key}_control"].append(float(control.sum() / live.sum()))
    return rows


def _derangements(instances, n, g):
    """One permutation of range(n) with no fixed point per instance (Sattolo's algorithm: a uniformly
    drawn n-cycle), (instances, n); drawn from `g` only."""
    out = torch.empty(instances, n, dtype=torch.long)
    for b in range(instances):
        p = list(range(n))
        for i in range(n - 1, 0, -1):
            j = int(torch.randint(0, i, (1,), generator=g))
            p[i], p[j] = p[j], p[i]
        out[b] = torch.tensor(p)
    return out


def specialisation(cfg, device="cpu"):
    """E7: train free values by SGD; track cos(v_j, m_j) with m_j = -sum_i alpha_ij u_i / N_j (the
    responsibility-weighted mean error signal of the queries routed to j) and the alignment of each
    value update with m_j.

    `cos_update_signal` is 1 by construction: the value update -dV_j = sum_i alpha_ij (-u_i) is
    N_j m_j, a positive multiple of the signal (an identity, a check of the code, not evidence).
    `cos_value_signal` alone partly measures how persistent the gradient is (v is the sum of past
    updates), so a control is tracked beside it: `cos_value_control` = cos(v_j, m_pi(j)) with pi a
    fixed derangement of the key positions of each instance (the error signal routed to ANOTHER key,
    drawn once from a generator of its own). Specialisation is the own cosine beating the control.
    Per-instance means over keys at the first and last checkpoint (`*_initial_per_instance`,
    `*_final_per_instance`) let a rule put an interval over instances on the rise and the margin.
    `cos_signal_control_final_per_instance`: cos(m_j, m_pi(j)) at the end, what the control would read if
    every value were its own signal (E7's positive control)."""
    cfg.validate()
    g = torch.Generator().manual_seed(cfg.seed + 1)
    q, k, v, w_o, y = _problem(cfg, g, device)
    perm = _derangements(cfg.instances, cfg.n, torch.Generator().manual_seed(cfg.seed + 3)).to(device)
    v = v * 0.1
    mask = causal_mask(cfg.n, device)
    marks = {round(cfg.train_steps * c / (cfg.checkpoints - 1)) for c in range(cfg.checkpoints)}
    out = {"steps": [], "cos_value_signal": [], "cos_value_control": [], "cos_update_signal": [], "loss": []}
    per_instance = []  # (own, control) per checkpoint, each (instances,)
    for step in range(cfg.train_steps + 1):
        u = _u(q, k, v, w_o, y, mask)
        gr = attention_backward(q, k, v, u, mask=mask)
        signal = -gr.dV / gr.alpha.sum(-2).clamp_min(1e-12)[..., None]
        if step in marks:
            o = gr.alpha @ v
            loss = torch.nn.functional.cross_entropy((o @ w_o).flatten(0, 1), y.flatten())
            own = torch.nn.functional.cosine_similarity(v, signal, dim=-1)  # (instances, n)
            routed_elsewhere = signal.gather(-2, perm[..., None].expand_as(signal))
            other = torch.nn.functional.cosine_similarity(v, routed_elsewhere, dim=-1)
            per_instance.append((own.mean(-1), other.mean(-1)))
            signals = torch.nn.functional.cosine_similarity(signal, routed_elsewhere, dim=-1).mean(-1)
            out["steps"].append(step)
            out["cos_value_signal"].append(float(own.mean()))
            out["cos_value_control"].append(float(other.mean()))
            out["cos_update_signal"].append(float(torch.nn.functional.cosine_similarity(-gr.dV, signal, dim=-1).mean()))
            out["loss"].append(float(loss))
        q, k, v = q - cfg.lr * gr.dQ, k - cfg.lr * gr.dK, v - cfg.lr * gr.dV
    (own0, other0), (own1, other1) = per_instance[0], per_instance[-1]
    out.update({"cos_value_signal_initial_per_instance": own0.tolist(),
                "cos_value_control_initial_per_instance": other0.tolist(),
                "cos_value_signal_final_per_instance": own1.tolist(),
                "cos_value_control_final_per_instance": other1.tolist(),
                "cos_signal_control_final_per_instance": signals.tolist()})
    return out


def saturation(cfg, device="cpu"):
    """C9 numerically: as the inverse temperature grows, attention concentrates; per row,
    sum_j |dS_ij| against the bound 4 (1 - max alpha) max |b|, and ||dS|| against ||dV||."""
    cfg.validate()
    g = torch.Generator().manual_seed(cfg.seed + 2)
    q, k, v, w_o, y = _problem(cfg, g, device)
    out = {"beta": [], "max_alpha": [], "ds_norm": [], "dv_norm": [], "worst_bound_ratio": []}
    for beta in cfg.temperatures:
        qb = q * beta
        u = _u(qb, k, v, w_o, y, None)
        gr = attention_backward(qb, k, v, u)
        lhs = gr.dS.abs().sum(-1)
        rhs = 4 * (1 - gr.alpha.max(-1).values) * gr.B.abs().max(-1).values
        ratio = torch.where(rhs > 0, lhs / rhs, torch.zeros_like(lhs))
        out["beta"].append(beta)
        out["max_alpha"].append(float(gr.alpha.max(-1).values.mean()))
        out["ds_norm"].append(float(gr.dS.norm()))
        out["dv_norm"].append(float(gr.dV.norm()))
        out["worst_bound_ratio"].append(float(ratio.max()))
    return out
