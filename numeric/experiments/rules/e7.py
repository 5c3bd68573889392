"""E7: values specialise toward the errors routed to them: the rule, its thresholds, its negative and positive controls."""
from __future__ import annotations

import numpy as np

from numeric.experiments import stats as st
from numeric.experiments.rules.base import Rule, _ci, _f

# A rise of 0.3 in mean cosine is far beyond initialisation noise (the initial cosine is ~0 +- 0.1);
# ending above 0.5 means the values point mostly along their own error signal.
E7_RISE = 0.3
E7_FINAL = 0.5


def e7(spec):
    """E7: cos(v_j, m_j) rises during training and beats the control cos(v_j, m_pi(j)) (another key's
    signal), dynamics.specialisation's output.

    Uses cos_value_signal_{initial,final}_per_instance and cos_value_control_final_per_instance
    (means over keys per instance); intervals are 95% t-intervals over instances. The margin is own
    minus control at the end. Verdict: reproduced if the own cosine rises by > E7_RISE, ends > E7_FINAL
    and the margin's interval lies above 0; else partly-reproduced if it rises by > E7_RISE (but does
    not end high or does not beat the control); else not-reproduced."""
    own0 = np.asarray(spec["cos_value_signal_initial_per_instance"], float)
    own1 = np.asarray(spec["cos_value_signal_final_per_instance"], float)
    ctl1 = np.asarray(spec["cos_value_control_final_per_instance"], float)
    ctl0 = np.asarray(spec.get("cos_value_control_initial_per_instance", np.full_like(ctl1, np.nan)), float)
    rise, rise_half = st.mean_ci(own1 - own0)
    margin, margin_half = st.mean_ci(own1 - ctl1)
    final = float(own1.mean())
    margin_ci = _ci(margin, margin_half)
    measured = {"own_initial": _f(own0.mean()), "own_final": final, "control_initial": _f(ctl0.mean()),
                "control_final": _f(ctl1.mean()), "rise": rise, "rise_ci95": _ci(rise, rise_half),
                "margin": margin, "margin_ci95": margin_ci, "instances": int(own1.size)}
    if "steps" in spec:
        measured["steps"] = int(spec["steps"][-1])
    head = (f"cos(v_j, own signal) {measured['own_initial']:.2f} -> {final:.2f} (rise {rise:+.2f}), control "
            f"cos(v_j, another key's signal) ends {measured['control_final']:.2f}, margin {margin:+.2f} "
            f"(CI {margin_ci[0]:+.2f} to {margin_ci[1]:+.2f}, {own1.size} instances)")
    if rise > E7_RISE and final > E7_FINAL and margin_ci[0] > 0:
        return Rule("reproduced", f"{head}: rises by > {E7_RISE}, ends > {E7_FINAL} and beats the control", measured)
    if rise > E7_RISE:
        failed = [w for w, ok in ((f"does not end > {E7_FINAL}", final > E7_FINAL),
                                  ("does not beat the control", margin_ci[0] > 0)) if not ok]
        return Rule("partly-reproduced", f"{head}: rises by > {E7_RISE} but {' and '.join(failed)}", measured)
    return Rule("not-reproduced", f"{head}: does not rise by > {E7_RISE}", measured)


def _frozen(spec):
    """What training with a value learning rate of 0 would measure: nothing moves, every checkpoint
    repeats the first."""
    out = dict(spec)
    out["cos_value_signal_final_per_instance"] = list(spec["cos_value_signal_initial_per_instance"])
    if "cos_value_control_initial_per_instance" in spec:
        out["cos_value_control_final_per_instance"] = list(spec["cos_value_control_initial_per_instance"])
    for key in ("cos_value_signal", "cos_value_control"):
        if key in spec:
            out[key] = [spec[key][0]] * len(spec[key])
    return out


def _swapped(spec):
    """The control cosine as 'own' and the own cosine as the control."""
    out = dict(spec)
    for a, b in (("cos_value_signal", "cos_value_control"),
                 ("cos_value_signal_initial_per_instance", "cos_value_control_initial_per_instance"),
                 ("cos_value_signal_final_per_instance", "cos_value_control_final_per_instance")):
        if a in spec and b in spec:
            out[a], out[b] = spec[b], spec[a]
    return out


def _aligned(spec):
    """E7's positive control: every value ends on its own routed error signal (final own cosine 1); the control
    then reads cos(m_j, m_pi(j)) (dynamics.specialisation's cos_signal_control_final_per_instance; the run's
    own control cosine where that is not measured); the initial cosines are the run's."""
    out = dict(spec)
    n = len(spec["cos_value_signal_final_per_instance"])
    control = list(spec.get("cos_signal_control_final_per_instance", spec["cos_value_control_final_per_instance"]))
    out["cos_value_signal_final_per_instance"] = [1.0] * n
    out["cos_value_control_final_per_instance"] = control
    for key, last in (("cos_value_signal", 1.0), ("cos_value_control", float(np.mean(control)))):
        if key in spec:
            out[key] = [*list(spec[key])[:-1], last]
    return out


# negative controls: control id (its claim before the /) -> the rule on the control derived from the claim's measurements
NEGATIVE = {
    # values that do not train (a learning rate of 0): every checkpoint is the first
    "E7/frozen-values": (lambda k: e7(_frozen(k["spec"]))),
    # another key's error signal judged as the value's own
    "E7/control-as-own": (lambda k: e7(_swapped(k["spec"]))),
}

# positive controls: control id -> (how it is built: derived, synthetic or run, the rule on it)
POSITIVE = {
    "E7/aligned-values": ("derived", lambda k: e7(_aligned(k["spec"]))),
}
POSITIVE_DESCRIPTIONS = {
    "E7/aligned-values": "every value ending on its own routed error signal, the control reading another key's "
                         "signal; initial cosines the run's (derived)",
}

__all__ = ["E7_RISE", "E7_FINAL", "e7"]
