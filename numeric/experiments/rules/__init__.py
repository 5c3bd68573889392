"""The verdicts of the empirical claims E1–E7 (and W1, ours: E4 in a deep model) as pure functions of measurements.

Every rule takes numbers (numpy arrays, lists, dicts of them) and returns a `Rule`: a verdict in
VERDICTS, a reason naming the one branch that fired with its numbers, and the measurements it used.
There is exactly one route to each verdict, tested in order not-reproduced, reproduced, partly (or as
stated per rule); the thresholds are module constants of the claim's own module, each with the reason for its value.
No rule trains, touches torch state or reads files.

Negative controls: for every claim there is an input on which its rule must say `not-reproduced`
(identical arms, a uniform predictor, arms swapped, attention converging at the values' rate,
features independent of the entropy, the opposite sign prediction, values that do not train; for W1
routing drifting at the values' rate, and routing that never stops drifting).
NEGATIVE_CONTROLS holds them on synthetic inputs; `negative_controls(measurements)` derives them from
the measurements of a real run. A rule that does not say `not-reproduced` on its control is not able
to tell the claim from its absence, whatever it says on the real run.

Positive controls: for every claim there is also an input where the phenomenon holds by construction, on
which its rule must say `reproduced` (`positive_controls`, described in POSITIVE_CONTROLS): derived from the
run's own numbers (E1, E2, E3, E7), measured on a constructed run (E4, W1: routing frozen after a few steps
while the values keep learning; E6: the score step under which the claimed sign is exact to first order), or
synthetic (E5). A rule that never says `reproduced` cannot tell the claim from its absence either.

One module per claim family (e1 ... e7, w1, g1, g2, v1), each holding its rule, its named thresholds and its
negative and positive controls side by side; `base` the Rule every rule returns, `synthetic` the inputs on which
every rule says reproduced. This package joins them: every name of every module is importable from here
(`rules.e1`, `rules.E1_RESAMPLES`, `rules.negative_controls`, ...).
"""
from __future__ import annotations

from numeric.experiments.rules import e1 as _e1
from numeric.experiments.rules import e2 as _e2
from numeric.experiments.rules import e3 as _e3
from numeric.experiments.rules import e4 as _e4
from numeric.experiments.rules import e5 as _e5
from numeric.experiments.rules import e6 as _e6
from numeric.experiments.rules import e7 as _e7
from numeric.experiments.rules import w1 as _w1
from numeric.experiments.rules.base import UNDECIDED, VERDICTS, Rule, _ci, _f, _seed, _tol  # noqa: F401
from numeric.experiments.rules.e1 import *  # noqa: F401,F403
from numeric.experiments.rules.e1 import E1_CONTROL_MARGIN, paper_speed_curves, printed_decimals  # noqa: F401
from numeric.experiments.rules.e2 import *  # noqa: F401,F403
from numeric.experiments.rules.e2 import _centred  # noqa: F401
from numeric.experiments.rules.e3 import *  # noqa: F401,F403
from numeric.experiments.rules.e3 import E3_CONTROL_MARGIN, E3_METRICS, _clear_margin  # noqa: F401
from numeric.experiments.rules.e4 import *  # noqa: F401,F403
from numeric.experiments.rules.e5 import *  # noqa: F401,F403
from numeric.experiments.rules.e5 import _abs_lower  # noqa: F401
from numeric.experiments.rules.e6 import *  # noqa: F401,F403
from numeric.experiments.rules.e7 import *  # noqa: F401,F403
from numeric.experiments.rules.e7 import _aligned, _frozen, _swapped  # noqa: F401
from numeric.experiments.rules.g1 import *  # noqa: F401,F403
from numeric.experiments.rules.g2 import *  # noqa: F401,F403
from numeric.experiments.rules.synthetic import _paired_curves, synthetic_measurements  # noqa: F401
from numeric.experiments.rules.v1 import *  # noqa: F401,F403
from numeric.experiments.rules.w1 import *  # noqa: F401,F403
from numeric.experiments.rules.w1 import _held  # noqa: F401

FAMILIES = (_e1, _e2, _e3, _e4, _e5, _e6, _e7, _w1)  # the paper's claims and W1, in the order of their controls

# control id -> (claim, how it is derived from the claim's measurements, the rule on it), every family's
_CONTROLS = {cid: (cid.split("/")[0], fn) for m in FAMILIES for cid, fn in m.NEGATIVE.items()}
# control id -> (claim, how it is built: "derived", "synthetic" or "run", the rule on it)
_POSITIVE = {cid: (cid.split("/")[0], *entry) for m in FAMILIES for cid, entry in m.POSITIVE.items()}
# control id -> what it is (results.json, the report's controls table)
POSITIVE_CONTROLS = {cid: text for m in FAMILIES for cid, text in m.POSITIVE_DESCRIPTIONS.items()}


def negative_controls(measurements):
    """{control id: Rule} for every control whose claim is in `measurements`; each must be
    `not-reproduced`. measurements: {claim: keyword arguments of its rule}, e.g.
    {"E1": {"sgd", "em", "steps", "paper_speedup"}, "E2": {"entropy_sgd", "entropy_em", "h_min", "m"},
     "E3": {"sgd", "em"}, "E4": {"arms"}, "E5": {"arms"}, "E6": {"agreement", "control_agreement"},
     "E7": {"spec"}, "W1": {"optimizers"}}. Derived from the run's own numbers: E1 its SGD curves against themselves; E2 a
    uniform predictor with its seed count, H_min and m; E3 its arms swapped, and SGD against itself; E4
    each arm's attention series replaced by its W_V series; E6 the +A agreement judged as the claim's;
    E7 its initial cosines held to the end (frozen values), and its control judged as the own cosine.
    W1 each head's routing drift replaced by its values' drift, and held at its largest value.
    E5 cannot be decoupled from a summary: seeded random features stand in, one evaluation per arm."""
    return {cid: fn(measurements[claim]) for cid, (claim, fn) in _CONTROLS.items() if claim in measurements}


def _synthetic(cid):
    claim, fn = _CONTROLS[cid]
    return lambda: fn(synthetic_measurements()[claim])


# control id -> a callable returning the rule's Rule on the control derived from synthetic_measurements()
# (on which every rule says reproduced); the claim is the id's part before "/".
NEGATIVE_CONTROLS = {cid: _synthetic(cid) for cid in _CONTROLS}


def positive_controls(measurements, runs=None):
    """{control id: Rule} for every positive control that can be built; each must be `reproduced`.
    measurements: {claim: keyword arguments of its rule} as for negative_controls; the derived controls (E1,
    E2, E3, E7) are built from them and E5's synthetic one when "E5" is present. runs: {claim: keyword
    arguments of its rule measured on a constructed run where the phenomenon holds} for E4 (e4_inputs of a
    sticky-chain run with W_Q, W_K frozen), E6 (dynamics' scores_natural agreement and its control) and W1
    (deep_watch.rule_inputs of the watched model with its routing frozen)."""
    runs = runs or {}
    out = {}
    for cid, (claim, source, fn) in _POSITIVE.items():
        given = runs if source == "run" else measurements
        if claim in given:
            out[cid] = fn(given[claim])
    return out


def evaluate_all(measurements):
    """{claim: Rule} for every claim present in `measurements` (keyed as in negative_controls)."""
    rules = {m.__name__.rsplit(".", 1)[1].upper(): getattr(m, m.__name__.rsplit(".", 1)[1]) for m in FAMILIES}
    return {claim: rules[claim](**kw) for claim, kw in measurements.items() if claim in rules}
