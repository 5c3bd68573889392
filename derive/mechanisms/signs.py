"""Is a mechanism's weight nonnegative? A sign analysis of its general-size form, from declared domains only.

C9's chain of inequalities needs w_ij >= 0 (the triangle inequality over the mixture in S1, and w_ij <= 1
from normalisation). The weight is built by the general path (symbolic sizes, the mask a free 0/1 matrix) and
its sign read off by rules that are true of every value the declared domains admit:

    constants by value; c, eta > 0 (the model's); the mask M in {0, 1}; a Kronecker delta in {0, 1};
    a mechanism leaf by its declared domain (derive.mechanisms.base.DOMAINS; undeclared: any real, no sign);
    exp(x) > 0; log(1 + x) >= 0 when x >= 0 (softplus); sums and products of nonnegative terms are
    nonnegative; x**k for even integer k, or x > 0; 1/x for x > 0, and 1/x for x >= 0 only where x != 0,
    an assumption recorded (a weight is only defined where its normaliser is nonzero: a non-empty row).

Anything else (a logit s_ij, beta, an undeclared leaf, a difference, a function it does not know) has no
sign, and the analysis answers None with the sub-expression it stopped at: the saturation cell is then not
proved by C9's chain, whatever the search finds. The rules only ever conclude a sign that holds, so a
`nonnegative` answer is a proof (under the assumptions it lists)."""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

POS, NONNEG = "positive", "nonnegative"
NONZERO = "every denominator of the weight is nonzero where the weight is defined (under a mask: a non-empty row)"


@dataclass(frozen=True)
class Sign:
    """sign: POS, NONNEG or None (unknown); uses: the declared facts it read; assumes: what it assumed;
    stuck: the sub-expression it could not sign (when sign is None)."""

    sign: str | None
    uses: frozenset = frozenset()
    assumes: frozenset = frozenset()
    stuck: str = ""


def _join(signs, combine):
    uses = frozenset().union(*(s.uses for s in signs))
    assumes = frozenset().union(*(s.assumes for s in signs))
    stuck = next((s for s in signs if s.sign is None), None)
    if stuck is not None:
        return Sign(None, uses, assumes, stuck.stuck)
    return Sign(combine([s.sign for s in signs]), uses, assumes)


class SignAnalysis:
    """The sign of SymPy expressions of the general backend, for one mechanism's declared domains."""

    def __init__(self, mechanism):
        self.mechanism = mechanism
        self._memo = {}

    def __call__(self, e) -> Sign:
        if e not in self._memo:
            self._memo[e] = self._rule(e)
        return self._memo[e]

    def _rule(self, e):
        if e.is_Number:
            if e > 0:
                return Sign(POS)
            return Sign(NONNEG) if e == 0 else Sign(None, stuck=str(e))
        if isinstance(e, sp.Indexed):
            return self._leaf(str(e.base.label), e)
        if isinstance(e, sp.KroneckerDelta):
            return Sign(NONNEG)
        if isinstance(e, sp.exp):
            return Sign(POS)
        if isinstance(e, sp.log):
            return self._log(e)
        if isinstance(e, sp.Add):
            return _join([self(a) for a in e.args], lambda s: POS if POS in s else NONNEG)
        if isinstance(e, sp.Mul):
            return _join([self(a) for a in e.args], lambda s: POS if all(x == POS for x in s) else NONNEG)
        if isinstance(e, sp.Pow):
            return self._pow(e)
        if isinstance(e, sp.Sum):  # a sum over a range 1..size, size >= 1: at least one term
            return self(e.function)
        if isinstance(e, sp.Symbol) and e.is_positive:  # c, eta
            return Sign(POS, uses=frozenset({f"{e} > 0"}))
        return Sign(None, stuck=str(e))

    def _leaf(self, name, e):
        if name == "M":
            return Sign(NONNEG, uses=frozenset({"the mask is 0/1"}))
        domain = self.mechanism.domains.get(name) if name in self.mechanism.leaves else None
        if domain in ("positive", "unit"):
            return Sign(POS, uses=frozenset({f"{name} {'> 0' if domain == 'positive' else 'in (0, 1)'} (declared)"}))
        if domain == "nonnegative":
            return Sign(NONNEG, uses=frozenset({f"{name} >= 0 (declared)"}))
        return Sign(None, stuck=f"{e} (no declared sign)")

    def _log(self, e):
        """log(1 + x) >= 0 for x >= 0 (> 0 for x > 0): the argument's constant 1 split off."""
        arg = e.args[0]
        if isinstance(arg, sp.Add) and sp.S.One in arg.args:
            rest = self(sp.Add(*[a for a in arg.args if a != sp.S.One]))
            if rest.sign is not None:
                return Sign(rest.sign, rest.uses, rest.assumes)
        return Sign(None, stuck=str(e))

    def _pow(self, e):
        base, k = e.args
        b = self(base)
        if k.is_Integer and k % 2 == 0:  # an even power of any real
            if k > 0:
                return Sign(POS if b.sign == POS else NONNEG, b.uses, b.assumes)
            return Sign(POS, b.uses, b.assumes | ({NONZERO} if b.sign != POS else set()))
        if b.sign == POS:
            return b
        if b.sign == NONNEG and k.is_positive:
            return b
        if b.sign == NONNEG and k.is_negative:  # 1/x with x >= 0: the weight is only defined where x != 0
            return Sign(POS, b.uses, b.assumes | {NONZERO})
        return Sign(None, b.uses, b.assumes, b.stuck or str(e))


def weight_sign(mechanism_name: str, masked=True) -> Sign:
    """The sign of the mechanism's weight w_ij at general size, at the scores level (logits free)."""
    from derive import mechanisms
    from derive.general import GeneralBackend
    from derive.model import Setting

    mech = mechanisms.get(mechanism_name)
    m = GeneralBackend(Setting("scores", "linear", masked, mechanism=mechanism_name), f"mechanism {mechanism_name} / sign")
    i, j = m.free_indices(("n", mech.axis))
    return SignAnalysis(mech)(sp.sympify(mech.weight(m, i, j)))
