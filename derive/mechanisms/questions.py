"""The structural questions asked of every routing mechanism, decided on every proof path.

Each question is an identity about the mechanism's own weights w (the model's `alpha`), its routing
logits s and its content v, at general size:

- routing:     dL/ds_ij = the mechanism's own closed form (Mechanism.routing), which must be proved
- advantage:   dL/ds_ij = w_ij (b_ij - sum_k w_ik b_ik)   (routing by advantage, the paper's C1)
- competition: sum_j dL/ds_ij = 0                          (keys compete for a fixed budget)
- content:     dL/dv_j = sum_i w_ij u_i                   (responsibility-weighted content, C2)
- em_step:     J_j(Delta) - J_j(Delta*) = N_j/(2 eta) ||Delta - Delta*||^2 with N_j = sum_i w_ij and
               Delta* = -eta sum_i w_ij u_i / N_j         (the EM-normalised content step, C10)

A cell is `proved` when the general path proves the identity (masked and unmasked) and no path has a
witness against it, `disproved` when some path has a certified witness, else `undecided`; a path that
proves what another disproves is an inconsistency. The answer is recorded whichever way it comes out:
the table says what the mechanisms do, it does not assert what they should do.
"""
from __future__ import annotations

from derive import mechanisms
from derive.claim import Identity
from derive.mechanisms.forms import advantage
from derive.prove import PATHS

QUESTIONS = ("routing", "advantage", "competition", "content", "em_step")
TITLES = {"routing": "its exact routing gradient", "advantage": "routes by advantage", "competition": "keys compete",
          "content": "responsibility-weighted content", "em_step": "EM-normalised content step"}
LATEX = {
    "advantage": r"\frac{\partial L}{\partial s_{ij}} = w_{ij}\big(b_{ij}-\textstyle\sum_k w_{ik}b_{ik}\big)",
    "competition": r"\textstyle\sum_j \frac{\partial L}{\partial s_{ij}} = 0",
    "content": r"\frac{\partial L}{\partial v_j} = \textstyle\sum_i w_{ij}u_i",
    "em_step": r"J_j(\Delta_j)-J_j(\Delta^*_j)=\tfrac{N_j}{2\eta}\|\Delta_j-\Delta^*_j\|^2,\ "
               r"\Delta^*_j=-\eta\,\tfrac{\sum_i w_{ij}u_i}{N_j}",
}


def _proximal(m, j, step):
    linear = m.sum("dv", lambda a: m.derived_grad("v", j, a) * step(j, a))
    return linear + m.responsibility(j) / (2 * m.eta) * m.sum("dv", lambda a: step(j, a) * step(j, a))


def _em_step(m, j, a):
    return -m.eta * m.dV(j, a) / m.responsibility(j)


def _em_excess(m, j):
    return _proximal(m, j, lambda j_, a: m.leaf("Delta", j_, a)) - _proximal(m, j, lambda j_, a: _em_step(m, j_, a))


def _em_gap(m, j):
    return m.responsibility(j) / (2 * m.eta) * m.sum("dv", lambda a: (m.leaf("Delta", j, a) - _em_step(m, j, a)) ** 2)


def identities(mechanism: str):
    """The question identities for one mechanism (by name), keyed by question."""
    mech = mechanisms.get(mechanism)
    build = {
        "routing": lambda: Identity("routing", ("n", "n"), "scores", lambda m, i, j: m.derived_grad("s", i, j),
                                    mech.routing, mech.routing_latex, mechanism=mechanism),
        "advantage": lambda: Identity("advantage", ("n", "n"), "scores", lambda m, i, j: m.derived_grad("s", i, j),
                                      advantage, LATEX["advantage"], mechanism=mechanism),
        "competition": lambda: Identity("competition", ("n",), "scores",
                                        lambda m, i: m.sum("n", lambda j: m.derived_grad("s", i, j)), lambda m, i: 0,
                                        LATEX["competition"], mechanism=mechanism),
        "content": lambda: Identity("content", ("n", "dv"), "qk", lambda m, j, a: m.derived_grad("v", j, a),
                                    lambda m, j, a: m.dV(j, a), LATEX["content"], mechanism=mechanism),
        "em_step": lambda: Identity("em_step", ("n",), "scores", _em_excess, _em_gap, LATEX["em_step"],
                                    mechanism=mechanism),
    }
    return {q: build[q]() for q in QUESTIONS}


def cell(outcomes):
    """The cell's verdict from {(path, masked): Outcome}: (verdict, witness or None, reason)."""
    witnesses = [(p, o.witness) for (p, _), o in outcomes.items() if o.status == "disproved"]
    general = [o.status for (p, _), o in outcomes.items() if p == "general"]
    if witnesses and "proved" in general:
        return "failed", None, f"inconsistent: general proved, {witnesses[0][0]} disproved"
    if witnesses:
        return "disproved", witnesses[0][1], ""
    if general and all(s == "proved" for s in general):
        return "proved", None, ""
    reasons = [o.reason for (p, _), o in outcomes.items() if o.status == "undecided" and o.reason]
    return "undecided", None, reasons[0] if reasons else "the general path did not prove it"


def decide(mechanism: str, run, masks=(False, True)):
    """{question: {verdict, witness, reason, paths, seconds}}; run(path, identity, masked, context) -> Outcome."""
    table = {}
    for question, identity in identities(mechanism).items():  # noqa: B007
        outcomes = {(p, masked): run(p, identity, masked, f"mechanism {mechanism} / {question}")
                    for p in PATHS for masked in masks}
        verdict, witness, reason = cell(outcomes)
        table[question] = {
            "verdict": verdict, "witness": witness.to_json() if witness else None, "reason": reason,
            "paths": {p: {("masked" if k else "unmasked"): o.status for (q, k), o in outcomes.items() if q == p}
                      for p in PATHS},
            "seconds": round(sum(o.seconds for o in outcomes.values()), 4)}
    return table
