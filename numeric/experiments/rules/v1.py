"""V1 (ours): the value manifold in any attention model: the rule, its thresholds and its controls.

The measurement (numeric.manifold.measure) per unit, one attention layer's value vectors or its attention outputs on
held-out sequences: PC1's share of the variance and Spearman's rho of the PC1 coordinate with a per-position
entropy (the model's own predictive entropy, or the exact Bayes entropy where the task has one), each with a 95%
bootstrap interval over sequences.

Per unit: `reproduced` when the lower end of PC1's share (the smaller of its interval's lower end and its estimate:
the share is biased upwards in small samples, its percentile interval more so) is >= V1_SHARE and the interval's
lower end of |rho| is >= V1_RHO (a dominant direction, and it orders the positions by entropy); `partly-reproduced`
when only |rho|'s is (the leading direction tracks the entropy but does not dominate the variance);
`not-reproduced` otherwise (a dominant direction unrelated to the entropy is the claim's absence, not half of it);
`undecided` when its measurement is missing or not finite, or was made on fewer than V1_MIN_SEQUENCES sequences.

The claim: some layer carries the axis. `reproduced` when at least one unit is reproduced; otherwise `undecided` if
any unit (or every one) is undecided, since that unit could carry it; otherwise `partly-reproduced` when at least
one unit is; otherwise `not-reproduced`.
"""
from __future__ import annotations

import math

import numpy as np

from numeric import manifold
from numeric.experiments.rules.base import UNDECIDED, Rule
from numeric.experiments.rules.e5 import tunnel_entropies

# A dominant direction: more of the variance than all the other directions together (for the paper's figure,
# 84-90% in the wind tunnel's one-head model, E5 asks E5_EV = 0.8; V1 asks any model's layers only for dominance).
# |Spearman| 0.5 is a strong monotone association for thousands of points, as E5's E5_RHO.
V1_SHARE = 0.5
V1_RHO = 0.5
# PC1's share is biased upwards in small samples (and its bootstrap interval more so, reaching above the estimate):
# the rule reads min(interval lower end, estimate), and decides nothing on fewer sequences than this.
V1_MIN_SEQUENCES = 8
V1_CONTROL_NOISE = 0.25  # the controls' isotropic noise: its total variance as a fraction of the axis's
V1_CONTROL_DIM = 64  # the controls' dimension at most (the run's when smaller; at least 8)
V1_CONTROL_RESAMPLES = 100

REFERENCES = {"model": "the model's predictive entropy", "bayes": "the exact Bayes entropy"}


def _num(x):
    """A finite float, else None (results.json keeps no nan; an undecided unit says why instead)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _interval(ci):
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    lo, hi = _num(ci[0]), _num(ci[1])
    return None if lo is None or hi is None else [lo, hi]


def v1_unit(m):
    """(verdict, the numbers it read) for one unit's measurement (numeric.manifold.measure's dict, or None)."""
    if not isinstance(m, dict):
        return UNDECIDED, {"why": "no measurement"}
    share, share_ci = _num(m.get("pc1_share")), _interval(m.get("pc1_share_ci95"))
    rho, rho_ci = _num(m.get("spearman")), _interval(m.get("spearman_ci95"))
    entry = {"pc1_share": share, "pc1_share_ci95": share_ci, "spearman": rho, "spearman_ci95": rho_ci}
    if m.get("finite") is False or None in (share, rho) or share_ci is None or rho_ci is None:
        return UNDECIDED, {**entry, "why": m.get("why", "a number is missing or not finite")}
    sequences = m.get("sequences")
    if isinstance(sequences, (int, float)) and sequences < V1_MIN_SEQUENCES:
        return UNDECIDED, {**entry, "why": f"measured on {int(sequences)} sequences, fewer than {V1_MIN_SEQUENCES}"}
    share_lo, rho_lo = min(share_ci[0], share), manifold.abs_lower(rho_ci)
    entry.update(pc1_share_lower=share_lo, abs_spearman_lower=rho_lo)
    if share_lo >= V1_SHARE and rho_lo >= V1_RHO:
        return "reproduced", entry
    if rho_lo >= V1_RHO:
        return "partly-reproduced", entry
    return "not-reproduced", entry


def v1(units, reference="model"):
    """V1 (ours): in at least one attention layer, the value vectors or the attention outputs lie along a dominant
    direction whose coordinate tracks the entropy `reference` ("model": the model's predictive entropy; "bayes": the
    exact Bayes entropy; any other words are used as given).

    units: {"layer (kind)": numeric.manifold.measure output}. Verdicts per unit and for the claim as the module
    docstring says; the reason names every unit with its numbers."""
    what = REFERENCES.get(reference, reference)
    measured = {"reference": reference, "share_at_least": V1_SHARE, "abs_spearman_at_least": V1_RHO, "units": {}}
    per = {}
    for name, m in (units or {}).items():
        v, entry = v1_unit(m)
        per[name] = v
        measured["units"][name] = {"verdict": v, **entry}
    if not per:
        return Rule(UNDECIDED, f"no layer was measured against {what}", measured)
    u = measured["units"]

    def said(name):
        e = u[name]
        if per[name] == UNDECIDED:
            return f"{name}: undecided ({e.get('why')})"
        return (f"{name}: PC1 {100 * e['pc1_share']:.0f}% (CI {100 * e['pc1_share_ci95'][0]:.0f}-"
                f"{100 * e['pc1_share_ci95'][1]:.0f}%), rho {e['spearman']:.2f} (CI {e['spearman_ci95'][0]:.2f} to "
                f"{e['spearman_ci95'][1]:.2f}) -> {per[name]}")

    head = f"against {what}: " + "; ".join(said(n) for n in per)
    carrying = [n for n, v in per.items() if v == "reproduced"]
    measured["carrying"] = carrying
    if carrying:
        return Rule("reproduced", f"{head}: {', '.join(carrying)} lie(s) along a dominant direction (PC1 >= "
                                  f"{V1_SHARE:.0%}) that tracks it (|rho| >= {V1_RHO}; interval lower ends)", measured)
    open_ = [n for n, v in per.items() if v == UNDECIDED]
    if open_:
        return Rule(UNDECIDED, f"{head}: no measured layer carries the axis, and {', '.join(open_)} could not be "
                               f"measured", measured)
    partly = [n for n, v in per.items() if v == "partly-reproduced"]
    if partly:
        return Rule("partly-reproduced", f"{head}: in {', '.join(partly)} the leading direction tracks it (|rho| >= "
                                         f"{V1_RHO}) but does not dominate (PC1's interval reaches below "
                                         f"{V1_SHARE:.0%})", measured)
    return Rule("not-reproduced", f"{head}: no layer's leading direction tracks it (|rho| interval reaching below "
                                  f"{V1_RHO})", measured)


def _sizes(units):
    """(sequences, positions, dim) of the run's first measurement that gives its sizes (finite or not), each
    clamped to the controls' bounds (sequences 8-256, positions 4-64, dim 8-V1_CONTROL_DIM); 64, 24, 8 when none."""
    for m in (units or {}).values():
        if isinstance(m, dict) and m.get("sequences"):
            return (max(8, min(int(m["sequences"]), 256)), max(4, min(int(m["positions"]), 64)),
                    max(8, min(int(m.get("dim", 8)), V1_CONTROL_DIM)))
    return 64, 24, 8


def constructed(kind, seed=0, sequences=64, positions=24, dim=8, noise=V1_CONTROL_NOISE):
    """Constructed vectors (sequences, positions, dim) and an entropy (sequences, positions): the exact Bayes entropy
    of seeded wind-tunnel sequences (rules.e5.tunnel_entropies) and, by `kind`,

    - "isotropic": standard normal vectors, independent of the entropy;
    - "axis-without-entropy": a dominant random direction whose coordinate is drawn independently of the entropy
      (standard normal), plus isotropic noise of `noise` x its variance in all;
    - "entropy-axis": the same direction with the standardised entropy as its coordinate, plus the same noise."""
    H, _ = tunnel_entropies(seed, sequences=sequences, length=positions + 1)
    rng = np.random.default_rng(seed + 1)
    axis = rng.standard_normal(dim)
    axis /= np.linalg.norm(axis)
    eps = math.sqrt(noise / dim) * rng.standard_normal((sequences, positions, dim))
    if kind == "isotropic":
        return rng.standard_normal((sequences, positions, dim)), H
    if kind == "axis-without-entropy":
        return rng.standard_normal((sequences, positions))[..., None] * axis + eps, H
    if kind == "entropy-axis":
        z = (H - H.mean()) / H.std()
        return z[..., None] * axis + eps, H
    raise ValueError(f"constructed: unknown kind {kind!r}")


def _synthetic(kind, sizes, seed):
    P, H = constructed(kind, seed, *sizes)
    return v1({f"constructed ({kind})": manifold.measure(P, H, resamples=V1_CONTROL_RESAMPLES, seed=seed)},
              reference="the constructed entropy")


def v1_controls(measurement):
    """{control id: (kind, Rule)} on a V1 measurement {"units": {unit: measurement}, optional "shuffled": the run's
    own vectors measured against the model's entropy permuted over every position, optional "seed"}: the negative
    controls (isotropic vectors; a dominant direction unrelated to the entropy; the run's vectors against the shuffled
    entropy, where measured), which must be not-reproduced, and the positive control (vectors along an axis
    proportional to the entropy, plus noise), which must be reproduced; the constructed ones at the run's sizes
    (sequences and positions, dimension up to V1_CONTROL_DIM)."""
    sizes, seed = _sizes(measurement.get("units")), int(measurement.get("seed", 0))
    out = {"V1/isotropic": ("negative", _synthetic("isotropic", sizes, seed)),
           "V1/axis-without-entropy": ("negative", _synthetic("axis-without-entropy", sizes, seed))}
    if measurement.get("shuffled"):
        out["V1/entropy-shuffled"] = ("negative", v1(measurement["shuffled"], reference="the model's predictive "
                                                                                         "entropy, shuffled"))
    out["V1/entropy-axis"] = ("positive", _synthetic("entropy-axis", sizes, seed))
    return out


V1_CONSTRUCTIONS = {
    "V1/isotropic": "standard normal vectors at the run's sizes against the Bayes entropy of seeded wind-tunnel "
                    "sequences, independent of it (synthetic)",
    "V1/axis-without-entropy": "a dominant random direction with a standard normal coordinate drawn independently "
                               "of the entropy, plus isotropic noise of 25% of its variance (synthetic)",
    "V1/entropy-shuffled": "the run's own value vectors and attention outputs against the model's predictive "
                           "entropy permuted over every held-out position (derived)",
    "V1/entropy-axis": "vectors along a random direction with the standardised Bayes entropy of seeded wind-tunnel "
                       "sequences as coordinate, plus isotropic noise of 25% of its variance (synthetic)"}
V1_EXPECTED = {"V1/isotropic": "not-reproduced", "V1/axis-without-entropy": "not-reproduced",
               "V1/entropy-shuffled": "not-reproduced", "V1/entropy-axis": "reproduced"}


def headline(measured):
    """The unit with the largest lower end of |rho|, in a few words."""
    units = {n: e for n, e in measured["units"].items() if e.get("abs_spearman_lower") is not None}
    if not units:
        return "undecided"
    name = max(units, key=lambda n: (units[n]["abs_spearman_lower"], units[n]["pc1_share_lower"]))
    e = units[name]
    return (f"{name}: PC1 {100 * e['pc1_share']:.0f}% (from {100 * e['pc1_share_lower']:.0f}%), "
            f"|rho| from {e['abs_spearman_lower']:.2f}")


__all__ = ["V1_SHARE", "V1_RHO", "V1_MIN_SEQUENCES", "V1_CONTROL_NOISE", "V1_CONTROL_DIM", "V1_CONTROL_RESAMPLES", "v1", "v1_unit",
           "v1_controls", "constructed", "V1_CONSTRUCTIONS", "V1_EXPECTED"]
