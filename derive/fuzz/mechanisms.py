"""Random user-style routing mechanisms as plain data, and the Mechanism each one renders to.

The claim fuzzer draws identities about the built-in mechanisms; this draws the mechanisms themselves, the way a
user writes one from the guide: a function f of the routing logit, an optional leaf of the mechanism's own (a prior
P_ij, a per-query temperature tau_i or shift a_i) declared in some domain, a normaliser (over the allowed keys,
over every key whatever the mask, or none), an optional sink e^beta in the normaliser, and a declared routing form
that may be wrong. A spec is a JSON-able dict, a function of (seed, index) alone (`draw`), so that the independent
torch oracle (numeric.mechanism_oracle, which imports nothing from derive/) builds the same weight from the same
data. `render` gives the derive Mechanism (score: softmax's c q . k; the torch `reference` is not the oracle's
business and is not rendered):

    g_ij = f(s_ij) P_ij  |  f(tau_i s_ij)  |  f(s_ij + a_i)  |  f(s_ij)          (+ beta inside f when unnormalised)
    w_ij = M_ij g_ij / (sum_k M_ik g_ik [+ e^beta])   (keys)
         = M_ij g_ij / (sum_k g_ik [+ e^beta])          (all_keys: the mask only on top)
         = M_ij g_ij                                    (none)

The functions include some that are not positive (f(x) = x) or are singular at 0 (their normalisers vanish), so
domains and singular points are exercised; declared forms are the advantage form, the per-key form w(1 - w) b, the
plain w b and the tempered advantage tau_i w (b - baseline).
"""
from __future__ import annotations

import random

from derive.mechanisms.base import DOMAINS

FUNCTIONS = ("exp", "softplus", "square", "sigmoid", "identity", "cube_exp")
ROLES = (None, "prior", "temperature", "shift")
NORMS = ("keys", "all_keys", "none")
FORMS = ("advantage", "per_key", "plain", "tempered")
LEAF = {"prior": ("P", ("n", "n")), "temperature": ("tau", ("n",)), "shift": ("a", ("n",))}


def draw(seed: int, index: int) -> dict:
    """Spec `index` of the seed's stream."""
    rng = random.Random(f"mechanism-fuzz/{seed}/{index}")
    role = rng.choice(ROLES)
    norm = rng.choices(NORMS, weights=(5, 2, 3))[0]
    spec = {"name": f"fz{seed}_{index}", "f": rng.choice(FUNCTIONS), "role": role,
            "domain": rng.choice(sorted(DOMAINS)) if role else None, "norm": norm,
            "sink": norm != "none" and rng.random() < 0.25,
            "routing": rng.choice(FORMS if role == "temperature" else FORMS[:3])}
    return spec


def _f(m, name, x):
    if name == "exp":
        return m.exp(x)
    if name == "softplus":
        return m.log(1 + m.exp(x))
    if name == "square":
        return x ** 2
    if name == "sigmoid":
        return m.exp(x) / (1 + m.exp(x))
    if name == "identity":
        return x
    if name == "cube_exp":  # x^3 e^x: changes sign at 0
        return x ** 3 * m.exp(x)
    raise ValueError(f"unknown function {name!r}")


def render(spec: dict):
    """The derive Mechanism of a spec (not registered)."""
    from derive.mechanisms.base import Mechanism
    from derive.mechanisms.forms import advantage, per_key
    from derive.mechanisms.softmax import score

    role, norm, f = spec["role"], spec["norm"], spec["f"]
    leaf, dims = LEAF.get(role, (None, None))

    def g(m, i, k):
        s = m.s(i, k)
        if norm == "none":
            s = s + m.beta
        if role == "prior":
            return _f(m, f, s) * m.leaf("P", i, k)
        if role == "temperature":
            return _f(m, f, m.leaf("tau", i) * s)
        if role == "shift":
            return _f(m, f, s + m.leaf("a", i))
        return _f(m, f, s)

    def weight(m, i, j):
        if norm == "none":
            return m.mask(i, j) * g(m, i, j)
        inside = (lambda k: m.mask(i, k) * g(m, i, k)) if norm == "keys" else (lambda k: g(m, i, k))
        total = m.sum("n", inside) + (m.exp(m.beta) if spec["sink"] else 0)
        return m.mask(i, j) * g(m, i, j) / total

    forms = {"advantage": advantage, "per_key": per_key, "plain": lambda m, i, j: m.alpha(i, j) * m.b(i, j),
             "tempered": lambda m, i, j: m.leaf("tau", i) * advantage(m, i, j)}

    def reference(t):
        raise NotImplementedError("a fuzzed mechanism is checked against numeric.mechanism_oracle, not a reference")

    extra = {"leaves": {leaf: dims}, "free": {leaf: ("scores", "qk", "params")}, "domains": {leaf: spec["domain"]}} \
        if leaf else {}
    return Mechanism(spec["name"], f"fuzzed {spec['name']}", score, weight, routing=forms[spec["routing"]],
                     reference=reference, normalised=norm != "none" and not spec["sink"], latex="", routing_latex="",
                     ref="derive.fuzz.mechanisms", **extra)
