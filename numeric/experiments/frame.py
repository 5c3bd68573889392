"""E4 measurements: how far the attention frame and the values are from their final state, per checkpoint.

Two scales are reported for attention. `alpha_js_to_final` is the mean Jensen–Shannon divergence of
the tracked rows (nats): a divergence, quadratic in a small change of a row. `alpha_jsd_to_final` is
the mean of its square root, the Jensen–Shannon distance: a metric, linear in a small change, and so on
the same scale as the relative Frobenius changes of W_V and of V = X W_V. Compare stable steps on the
distance (`attention_jsd_stable_step`), not the divergence, against `values_stable_step`; a series is
stable from the first checkpoint after which it stays within `tol` of its initial value."""
from __future__ import annotations

import torch

from numeric.experiments import sticky
from numeric.experiments.rules import stable_step as _stable  # one definition for the series and the E4 rule


def frame_precision(cfg, run, tol=0.2):
    """Per arm of `run` (a sticky.Run trained with `cfg`): distances to the final state at each checkpoint
    and the step at which each becomes stable (within `tol` of its initial distance: 80% of the way).

    Keys per arm: steps; alpha_js_to_final (mean JS divergence of tracked rows); alpha_jsd_to_final
    (mean JS distance, sqrt of the divergence per row, then averaged over seeds and rows);
    values_rel_change_to_final (||W_V - W_V_final|| / ||W_V_final||); V_rel_change_to_final (same for
    V = X W_V on the training inputs); attention_stable_step (on the divergence, kept for old readers),
    attention_jsd_stable_step (on the distance), values_stable_step, V_stable_step."""
    out = {}
    x = sticky.make_data(cfg, "cpu").x.double()  # (1, S, T, d_in): V = X W_V on the training inputs
    for a, arm in enumerate(cfg.arms):
        final_a, final_w = run.tracked[-1][a], run.values[-1][a].double()
        final_v = x[0] @ final_w
        divs = [_js(t[a].double(), final_a.double()) for t in run.tracked]  # each (S, R)
        js = [float(d.mean()) for d in divs]
        jsd = [float(d.clamp_min(0).sqrt().mean()) for d in divs]
        dw = [float((w[a].double() - final_w).norm() / final_w.norm()) for w in run.values]
        dv = [float((x[0] @ w[a].double() - final_v).norm() / final_v.norm()) for w in run.values]
        out[arm] = {"steps": run.checkpoints, "alpha_js_to_final": js, "alpha_jsd_to_final": jsd,
                    "values_rel_change_to_final": dw, "V_rel_change_to_final": dv,
                    "attention_stable_step": _stable(run.checkpoints, js, tol),
                    "attention_jsd_stable_step": _stable(run.checkpoints, jsd, tol),
                    "values_stable_step": _stable(run.checkpoints, dw, tol),
                    "V_stable_step": _stable(run.checkpoints, dv, tol), "tol": tol}
    return out


SERIES = ("alpha_js_to_final", "alpha_jsd_to_final", "values_rel_change_to_final", "V_rel_change_to_final")
STABLE = {"attention_stable_step": "alpha_js_to_final", "attention_jsd_stable_step": "alpha_jsd_to_final",
          "values_stable_step": "values_rel_change_to_final", "V_stable_step": "V_rel_change_to_final"}


def combine(parts):
    """One frame_precision record from several runs' [(seeds, record)]: per arm, each series is the mean
    weighted by seeds, of the series of the runs that train the arm,
    and the stable steps are found again on the combined series. The runs must share checkpoints."""
    out = {}
    for arm in dict.fromkeys(a for _, rec in parts for a in rec):
        have = [(w, rec[arm]) for w, rec in parts if arm in rec]
        steps, tol = have[0][1]["steps"], have[0][1]["tol"]
        if any(r["steps"] != steps or r["tol"] != tol for _, r in have):
            raise ValueError(f"frame records of arm {arm} have different checkpoints or tolerances")
        total = sum(w for w, _ in have)
        rec = {"steps": steps, "tol": tol}
        for key in SERIES:
            rec[key] = [sum(w * r[key][i] for w, r in have) / total for i in range(len(steps))]
        rec.update({key: _stable(steps, rec[series], tol) for key, series in STABLE.items()})
        out[arm] = rec
    return out


def _js(p, q):
    """Jensen–Shannon divergence (nats) of the last-axis distributions p and q."""
    m = 0.5 * (p + q)
    kl = lambda a, b: (a * (torch.log(a.clamp_min(1e-30)) - torch.log(b.clamp_min(1e-30)))).sum(-1)  # noqa: E731
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)
