"""Inputs on which every rule says `reproduced`: small, seeded, for tests and for the synthetic controls."""
from __future__ import annotations

import numpy as np

from numeric.experiments.rules.e5 import tunnel_evaluation


def _paired_curves(seeds, steps, tau_sgd, tau_em, rng, start=2.0794415416798357):  # ln 8
    """Loss curves of two arms on the same seeds: each seed's floor (its data) shared by both arms,
    the EM-like arm approaching it faster."""
    t = np.arange(steps + 1)
    floor = 1.9 + 0.02 * rng.standard_normal((seeds, 1))
    noise = lambda: 0.001 * rng.standard_normal((seeds, steps + 1))  # noqa: E731
    return (floor + (start - floor) * np.exp(-t / tau_sgd)[None] + noise(),
            floor + (start - floor) * np.exp(-t / tau_em)[None] + noise())


def synthetic_measurements(seed=0):
    """Inputs on which every rule says `reproduced` (keyed by claim, each the keyword arguments of its
    rule): small, seeded, for tests and for the synthetic negative controls built from them."""
    rng = np.random.default_rng(seed)
    steps, n = 100, 8
    # EM-like's curve reaches SGD's final loss near step 46 of 100: speedup ~2.2 (identical arms ~1.09)
    sgd, em = _paired_curves(n, steps, 40.0, 15.0, rng)
    h_min, m = 1.8292, 8
    loss = 2.0 + 0.01 * rng.standard_normal(n)
    ent = 1.95 + 0.01 * rng.standard_normal(n)
    acc = 0.33 + 0.005 * rng.standard_normal(n)
    t = np.linspace(0, 1000, 11)
    w = np.linspace(50, 1000, 20)  # W1: drifts recorded every 50 steps; routing settles at step 250, values at 700
    B, L, d = 48, 20, 6
    H = rng.uniform(0.5, 2.0, (B, L))
    pts = H[..., None] * np.eye(d)[0] + 0.05 * rng.standard_normal((B, L, d))
    cur = rng.integers(0, 4, (B, L))
    tunnel = tunnel_evaluation(pts, H, cur, seed=seed)
    inst = 16
    own0, ctl0 = 0.05 * rng.standard_normal(inst), 0.05 * rng.standard_normal(inst)
    own1, ctl1 = 0.85 + 0.03 * rng.standard_normal(inst), 0.06 + 0.03 * rng.standard_normal(inst)
    return {
        "E1": {"sgd": sgd, "em": em, "steps": steps, "paper_speedup": 2.3},
        "E2": {"entropy_sgd": h_min + 0.02 + 0.005 * rng.standard_normal(n),
               "entropy_em": h_min + 0.01 + 0.005 * rng.standard_normal(n), "h_min": h_min, "m": m},
        "E3": {"sgd": {"loss": loss, "entropy": ent, "accuracy": acc},
               "em": {"loss": loss - 0.08 + 0.005 * rng.standard_normal(n), "entropy": ent - 0.06 + 0.005 * rng.standard_normal(n),
                      "accuracy": acc + 0.02 + 0.003 * rng.standard_normal(n)}},
        "E4": {"arms": {a: {"steps": t.astype(int).tolist(), "attention": np.exp(-t / 100).tolist(),
                            "values": np.exp(-t / tv).tolist()} for a, tv in (("sgd", 400.0), ("em_like", 300.0))}},
        "E5": {"arms": {"sgd": tunnel, "em_like": tunnel}},
        "E6": {"agreement": 0.995, "control_agreement": 0.005},
        "W1": {"optimizers": {name: {"steps": w.astype(int).tolist(),
                                     "routing": np.broadcast_to(np.exp(-w / 100), (2, 2, 4, w.size)).copy(),
                                     "values": np.broadcast_to(np.exp(-w / 400), (2, 2, 4, w.size)).copy()}
                              for name in ("sgd", "em_like", "adamw")}},
        "E7": {"spec": {"steps": [0, 300], "cos_value_signal": [float(own0.mean()), float(own1.mean())],
                        "cos_value_control": [float(ctl0.mean()), float(ctl1.mean())],
                        "cos_value_signal_initial_per_instance": own0.tolist(),
                        "cos_value_control_initial_per_instance": ctl0.tolist(),
                        "cos_value_signal_final_per_instance": own1.tolist(),
                        "cos_value_control_final_per_instance": ctl1.tolist()}},
    }

__all__ = ["synthetic_measurements"]
