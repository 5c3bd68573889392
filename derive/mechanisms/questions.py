"""The structural questions asked of every routing mechanism, decided on every proof path.

Each question is an identity about the mechanism's own weights w (the model's `alpha`), its routing
logits s and its content v, at general size:

- routing:     dL/ds_ij = the mechanism's own closed form (Mechanism.routing), which must be proved
- advantage:   dL/ds_ij = w_ij (b_ij - sum_k w_ik b_ik)   (routing by advantage, the paper's C1)
- competition: sum_j dL/ds_ij = 0                          (keys compete for a fixed budget)
- content:     dL/dv_j = sum_i w_ij u_i                   (responsibility-weighted content, C2)
- em_step:     J_j(Delta) - J_j(Delta*) = N_j/(2 eta) ||Delta - Delta*||^2 with N_j = sum_i w_ij and
               Delta* = -eta sum_i w_ij u_i / N_j         (the EM-normalised content step, C10)

and one property, decided from an identity the same way:

- content_routing: the weight query i puts on position j depends on position j's content relative to the query:
               for weights over positions, d^2 w_ij / dq_ia dk_jb is not identically zero (proved by a certified
               witness where it is not; disproved when the identity d^2 w_ij / dq_ia dk_jb = 0 is proved at
               general size); for weights over a token's own options (a gate's, experts: axis other than n), no
               weight reads another position's logits (sum_j (dw_io/ds_jp)^2 - (dw_io/ds_ip)^2 = 0) is proved, and
               the cell is disproved: a token's own content choosing among its options is not routing between
               positions (CONTENT_ROUTING_CONTROLS: mechanisms built blind must come out disproved)

Each mask setting (none; a mask) is decided on its own: `proved` when the general path proves the identity
and no path has a witness against it, `disproved` when some path has a certified witness, else `undecided`;
a path that proves what another disproves is an inconsistency (`failed`). The cell is their common verdict,
or `mask-dependent` when it holds unmasked and fails under a mask (`combine`). The answer is recorded whichever way it comes out:
the table says what the mechanisms do, it does not assert what they should do.
"""
from __future__ import annotations

from derive import mechanisms
from derive.claim import Identity
from derive.mechanisms.forms import advantage
from derive.prove import PATHS

QUESTIONS = ("routing", "advantage", "competition", "content", "em_step")
# the table's; saturation is an inequality (derive.mechanisms.saturation), content_routing a property decided from
# an identity it negates (content_routing_cell)
COLUMNS = QUESTIONS + ("saturation", "content_routing")
TITLES = {"saturation": "C9's saturation bound", "content_routing": "routes by content between positions",
          "routing": "its exact routing gradient", "advantage": "routes by advantage", "competition": "keys compete",
          "content": "responsibility-weighted content", "em_step": "EM-normalised content step"}
LATEX = {
    "saturation": r"\sum_j\Big|\frac{\partial L}{\partial s_{ij}}\Big|\le 4\,(1-\max_j w_{ij})\max_j|b_{ij}|",
    "advantage": r"\frac{\partial L}{\partial s_{ij}} = w_{ij}\big(b_{ij}-\textstyle\sum_k w_{ik}b_{ik}\big)",
    "competition": r"\textstyle\sum_j \frac{\partial L}{\partial s_{ij}} = 0",
    "content": r"\frac{\partial L}{\partial v_j} = \textstyle\sum_i w_{ij}u_i",
    "content_routing": r"\frac{\partial^2 w_{ij}}{\partial q_{ia}\,\partial k_{jb}} \not\equiv 0",
    "em_step": r"J_j(\Delta_j)-J_j(\Delta^*_j)=\tfrac{N_j}{2\eta}\|\Delta_j-\Delta^*_j\|^2,\ "
               r"\Delta^*_j=-\eta\,\tfrac{\sum_i w_{ij}u_i}{N_j}",
}


def _sum_over(m, dims, body, ix=()):
    """sum over each of `dims` in turn of body(*indices)."""
    if not dims:
        return body(*ix)
    return m.sum(dims[0], lambda k: _sum_over(m, dims[1:], body, ix + (k,)))


def _em(spec):
    """C10's completed square for one content unit: J(Delta) - J(Delta*) = N/(2 eta) ||Delta - Delta*||^2 with
    J(step) = <dL/dcontent, step> + N/(2 eta) ||step||^2, N the unit's mass, Delta* = -eta closed / N."""
    def star(m, unit, comps):
        return -m.eta * spec.closed(m, *unit, *comps) / spec.mass(m, *unit)

    def free(m, unit, comps):
        return m.leaf(spec.delta, *unit, *comps)

    def proximal(m, unit, step):
        linear = _sum_over(m, spec.comps, lambda *c: m.derived_grad(spec.leaf, *unit, *c) * step(m, unit, c))
        return linear + spec.mass(m, *unit) / (2 * m.eta) * _sum_over(m, spec.comps, lambda *c: step(m, unit, c) ** 2)

    def excess(m, *unit):
        return proximal(m, unit, free) - proximal(m, unit, star)

    def gap(m, *unit):
        return spec.mass(m, *unit) / (2 * m.eta) * _sum_over(
            m, spec.comps, lambda *c: (free(m, unit, c) - star(m, unit, c)) ** 2)

    return excess, gap


def identities(mechanism: str):
    """The question identities for one mechanism (by name), keyed by question."""
    mech = mechanisms.get(mechanism)
    axis, logit, spec = mech.axis, mech.logit_leaf, mech.content_spec
    excess, gap = _em(spec)
    return {
        "routing": Identity("routing", ("n", axis), "scores", lambda m, i, j: m.derived_grad(logit, i, j),
                            mech.routing, mech.routing_latex, mechanism=mechanism),
        "advantage": Identity("advantage", ("n", axis), "scores", lambda m, i, j: m.derived_grad(logit, i, j),
                              advantage, LATEX["advantage"], mechanism=mechanism),
        "competition": Identity("competition", ("n",), "scores",
                                lambda m, i: m.sum(axis, lambda j: m.derived_grad(logit, i, j)), lambda m, i: 0,
                                LATEX["competition"], mechanism=mechanism),
        "content": Identity("content", spec.unit + spec.comps, spec.level,
                            lambda m, *ix: m.derived_grad(spec.leaf, *ix), spec.closed, LATEX["content"],
                            mechanism=mechanism),
        "em_step": Identity("em_step", spec.unit, "scores", excess, gap, LATEX["em_step"], mechanism=mechanism),
    }


def extra_identities(mechanism: str):
    """The mechanism's own further identities (Mechanism.extra), keyed by name."""
    mech = mechanisms.get(mechanism)
    return {name: Identity(name, free, level, derived, closed, latex, mechanism=mechanism)
            for name, free, level, derived, closed, latex in mech.extra}


def _setting(outcomes):
    """One mask setting's verdict from {path: Outcome}: (verdict, witness or None, reason)."""
    witnesses = [(p, o.witness) for p, o in outcomes.items() if o.status == "disproved"]
    general = outcomes.get("general")
    if witnesses and general is not None and general.status == "proved":
        return "failed", None, f"inconsistent: general proved, {witnesses[0][0]} disproved"
    held = [(p, q) for p, o in outcomes.items() if o.status == "holds" for q, w in outcomes.items()
            if w.status == "disproved" and w.witness is not None and w.witness.sizes in o.scope]
    if held:  # a fixed-size path found it holds at the very sizes of another path's witness
        return "failed", None, f"inconsistent: {held[0][0]} holds at the sizes where {held[0][1]} disproved it"
    if witnesses:
        return "disproved", witnesses[0][1], ""
    if general is not None and general.status == "proved":
        return "proved", None, ""
    reasons = [o.reason for o in outcomes.values() if o.status == "undecided" and o.reason]
    return "undecided", None, reasons[0] if reasons else "the general path did not prove it"


def combine(per):
    """The cell's verdict from each mask setting's {masked: (verdict, witness, reason)}.

    The unmasked model is the all-ones mask, so "proved unmasked, disproved under a mask" is a fact about the
    mechanism (`mask-dependent`), while "proved under every mask, disproved unmasked" is an inconsistency."""
    verdicts = {k: v for k, (v, _, _) in per.items()}
    witness = next((w for _, w, _ in per.values() if w is not None), None)
    if "failed" in verdicts.values():
        return "failed", None, next(r for v, _, r in per.values() if v == "failed")
    if len(set(verdicts.values())) == 1:
        return verdicts[next(iter(verdicts))], witness, next(iter(per.values()))[2]
    if verdicts.get(False) == "proved" and verdicts.get(True) == "disproved":
        return "mask-dependent", per[True][1], "holds unmasked (proved), fails under a mask (certified witness)"
    if verdicts.get(True) == "proved" and verdicts.get(False) == "disproved":
        return "failed", None, "inconsistent: proved under every 0/1 mask, disproved without one (the all-ones mask)"
    if "disproved" in verdicts.values():
        k = next(k for k, v in verdicts.items() if v == "disproved")
        other = per[not k]
        return "disproved", per[k][1], (f"{'masked' if k else 'unmasked'}: disproved; "
                                        f"{'unmasked' if k else 'masked'}: {other[0]} {other[2]}".strip())
    return "undecided", None, "; ".join(f"{'masked' if k else 'unmasked'}: {v} {r}".strip()
                                        for k, (v, _, r) in sorted(per.items()))


def cell(outcomes):
    """The cell's verdict from {(path, masked): Outcome}: (verdict, witness or None, reason), and each mask
    setting's verdict."""
    per = {masked: _setting({p: o for (p, k), o in outcomes.items() if k == masked})
           for masked in sorted({k for _, k in outcomes})}
    verdict, witness, reason = combine(per)
    return verdict, witness, reason, {("masked" if k else "unmasked"): v for k, (v, _, _) in per.items()}


def decide(mechanism: str, run, masks=(False, True), which=None):
    """{question: {verdict, witness, reason, paths, seconds}}; run(path, identity, masked, context) -> Outcome.
    which: the identities to decide (default: the questions)."""
    table = {}
    for question, identity in (which or identities(mechanism)).items():
        outcomes = {(p, masked): run(p, identity, masked, f"mechanism {mechanism} / {question}")
                    for p in PATHS for masked in masks}
        verdict, witness, reason, settings = cell(outcomes)
        table[question] = {
            "verdict": verdict, "witness": witness.to_json() if witness else None, "reason": reason,
            "settings": settings,
            "paths": {p: {("masked" if k else "unmasked"): o.status for (q, k), o in outcomes.items() if q == p}
                      for p in PATHS},
            "seconds": round(sum(o.seconds for o in outcomes.values()), 4),
            "path_seconds": {p: round(sum(o.seconds for (q, _), o in outcomes.items() if q == p), 4) for p in PATHS}}
    return table


def blind(mechanism: str):
    """The identity whose proof says the mechanism does not route by content between positions (content_routing).
    Over positions (axis n), at the q/k level: d^2 w_ij / dq_ia dk_jb = 0. Over a token's own options, at the scores
    level: sum_j (dw_io/ds_jp)^2 - (dw_io/ds_ip)^2 = 0, no weight reads another position's logits (a sum of squares:
    no cancellation between positions)."""
    mech = mechanisms.get(mechanism)
    if mech.axis == "n":
        return Identity("content_routing", ("n", "n", "dk", "dk"), "qk",
                        lambda m, i, j, a, b: m.grad(m.grad(m.alpha(i, j), "k", j, b), "q", i, a),
                        lambda m, i, j, a, b: 0, r"\frac{\partial^2 w_{ij}}{\partial q_{ia}\partial k_{jb}} = 0",
                        mechanism=mechanism)
    axis, logit = mech.axis, mech.logit_leaf

    def other_rows(m, i, o, p):
        d = lambda j: m.grad(m.alpha(i, o), logit, j, p)
        return m.sum("n", lambda j: d(j) ** 2) - d(i) ** 2

    return Identity("content_routing", ("n", axis, axis), "scores", other_rows, lambda m, i, o, p: 0,
                    r"\sum_{j\ne i}\big(\partial w_{io}/\partial s_{jp}\big)^2 = 0", mechanism=mechanism)


# The blind identity's verdict -> the content_routing cell's: a certified witness against blindness proves the
# mechanism routes by content; a proof of blindness disproves it.
_NEGATED = {"proved": "disproved", "disproved": "proved"}


def content_routing_cell(mechanism: str, run):
    """The content_routing cell: the blind identity decided as every question is, its verdict negated, with why."""
    mech = mechanisms.get(mechanism)
    cell = decide(mechanism, run, which={"content_routing": blind(mechanism)})["content_routing"]
    verdict = cell["verdict"]
    if mech.axis != "n" and verdict == "disproved":
        # weights over options that read other positions' logits: routing between positions of some kind, but not
        # the query/key relation the question is about: said as undecided, with why
        return {**cell, "verdict": "undecided", "witness": None, "settings": dict.fromkeys(cell["settings"], "undecided"),
                "reason": f"its weights are over its own options ({mech.axis}) yet read other positions' logits "
                          "(certified); whether that is content-based routing is not decided here"}
    out = {**cell, "verdict": _NEGATED.get(verdict, verdict),
           "settings": {k: _NEGATED.get(v, v) for k, v in cell["settings"].items()}}
    if verdict == "disproved":
        out["reason"] = "a certified point where d^2 w_ij / dq_ia dk_jb is not zero (the witness)"
    elif verdict == "proved":
        out["reason"] = ("d^2 w_ij / dq_ia dk_jb = 0 proved at general size: no weight depends on a key relative to "
                         "its query" if mech.axis == "n" else
                         f"its weights are over its own options ({mech.axis}), never over positions, and no weight "
                         "reads another position's logits (proved at general size)")
    elif verdict == "mask-dependent":
        out["reason"] = "blind to the keys' content unmasked (proved), routes by content under a mask (certified witness)"
    return out


# Mechanisms built to answer the content_routing question one way, so the cell is seen to say both (negative and
# positive controls): (name, its weight's logit, axis, expected verdict, what it is).
def _key_only(m, i, j):
    return m.c * m.sum("dk", lambda a: m.k(j, a))


def _query_only(m, i, j):
    return m.c * m.sum("dk", lambda a: m.q(i, a) ** 2)


def _factored(m, i, j):
    return m.c * m.sum("dk", lambda a: m.q(i, a)) * m.sum("dk", lambda a: m.k(j, a))


CONTENT_ROUTING_CONTROLS = (
    ("key-only", _key_only, "disproved", "softmax over s_ij = c sum_a k_ja: each key's logit ignores the query"),
    ("query-only", _query_only, "disproved", "softmax over s_ij = c |q_i|^2: every key alike for a query"),
    ("factored", _factored, "proved", "softmax over s_ij = c (sum_a q_ia)(sum_b k_jb): a rank-one query-key relation"),
    ("options-over-rows", None, "undecided",
     "a two-option gate normalised over every position's options: reads other rows' logits"),
)


def content_routing_controls(run):
    """{control: {verdict, expected, description, reason}}: each control mechanism registered for the decision only."""
    from dataclasses import replace

    from derive.mechanisms.gate import MECHANISM as GATE
    from derive.mechanisms.softmax import MECHANISM as SOFTMAX

    out = {}
    for name, score, expected, description in CONTENT_ROUTING_CONTROLS:
        key = "content_routing_control_" + name.replace("-", "_")
        base, changes = (SOFTMAX, {"score": score}) if score is not None else (GATE, {"weight": _over_rows})
        mech = replace(base, name=key, title=description, mutants=(), extra=(), layer=None, **changes)
        mechanisms.REGISTRY[key] = mech
        try:
            cell = content_routing_cell(key, run)
        finally:
            del mechanisms.REGISTRY[key]
        out[name] = {"verdict": cell["verdict"], "expected": expected, "description": description,
                     "reason": cell["reason"]}
    return out


def _over_rows(m, i, o):
    return m.exp(m.s(i, o)) / m.sum("n", lambda k: m.sum("g", lambda p: m.exp(m.s(k, p))))
