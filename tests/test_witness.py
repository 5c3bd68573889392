"""Certified counterexamples: found where the sides really differ, re-checkable in plain float64."""
import json
import math
from decimal import Decimal
from fractions import Fraction

import pytest

from derive import graph
from derive.claims import Identity, builtin_ids, claims, mutants
from derive.model import ShapeError
from derive.witness import Witness, certified_decimal, find_witness, replay

SIZES = [{"n": 4, "dk": 3, "dv": 2, "m": 5, "dx": 1}]
DISTINCT = [{"n": 3, "dk": 4, "dv": 5, "m": 7, "dx": 6}]


def ident(free, level, derived, closed, **kw):
    return Identity("probe", free, level, derived, closed, "probe", **kw)


HESSIAN_ZERO = ident(("n", "dv", "n", "dv"), "scores",
                     lambda m, j, a, l, b: m.grad(m.derived_grad("v", j, a), "v", l, b), lambda m, *ix: 0)
WO_GRAD_ZERO = ident(("dv", "m"), "readout", lambda m, a, c: m.derived_grad("WO", a, c), lambda m, a, c: 0)


def unit(text):
    return Decimal(1).scaleb(Decimal(text).as_tuple().exponent)


def assert_reproduces(identity, w, derived=None, closed=None):
    """Both printed values agree with a float64 re-evaluation (math.exp, math.log) within their last digit."""
    _, lhs, rhs = replay(identity, w, derived, closed)
    scale = max(abs(float(w.lhs)), abs(float(w.rhs)))
    for printed, node in ((w.lhs, lhs), (w.rhs, rhs)):
        value = graph.float_value(node)
        assert math.isfinite(value)
        assert abs(Decimal(value) - Decimal(printed)) <= unit(printed) + Decimal(1e-12 * scale), (printed, value)


# -- printing ------------------------------------------------------------------------------------
def test_certified_decimals_are_within_half_a_unit():
    third = Fraction(1, 3)
    eps = Fraction(1, 10**70)
    assert certified_decimal(third - eps, third + eps) == "0.333333333333"
    assert certified_decimal(-third - eps, -third + eps) == "-0.333333333333"
    assert certified_decimal(Fraction(0), Fraction(0)) == "0"
    z = certified_decimal(-eps, eps)
    assert Decimal(z) == 0 and unit(z) / 2 >= Decimal(10) ** -70
    wide = certified_decimal(Fraction(1), Fraction(11, 10))  # only the leading digit is certain
    assert Decimal(wide) - unit(wide) / 2 <= 1 and Decimal("1.1") <= Decimal(wide) + unit(wide) / 2
    big = certified_decimal(Fraction(10**40) - 1, Fraction(10**40) + 1)
    assert Decimal(big) == Decimal(10**40)


def test_witness_json_and_one_line_description():
    w = Witness({"n": 2, "dk": 1, "dv": 3, "m": 4, "dx": 5}, True, (0, 1), {"v[0,1]": "1/2", "c": "3/4"}, "0.5", "0.25")
    data = w.to_json()
    assert json.loads(json.dumps(data)) == {"sizes": w.sizes, "masked": True, "indices": [0, 1],
                                            "point": {"v[0,1]": "1/2", "c": "3/4"}, "lhs": "0.5", "rhs": "0.25"}
    line = w.describe()
    assert "\n" not in line and "0.5" in line and "0.25" in line and "n=2" in line and "(0, 1)" in line


# -- finding and certifying ------------------------------------------------------------------------
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
def test_a_second_derivative_counterexample_is_certified_and_reproduces(masked):
    w = find_witness(HESSIAN_ZERO, masked, SIZES, seed=0, context="H = 0")
    assert w is not None and w.sizes == SIZES[0] and w.masked == masked
    assert len(w.indices) == 4 and w.rhs == "0" and Decimal(w.lhs) != 0
    assert all(Fraction(v) == Fraction(v) and "/" in v for v in w.point.values())
    assert any(k.startswith("WO[") for k in w.point) and any(k.startswith("v[") for k in w.point)
    assert_reproduces(HESSIAN_ZERO, w)


def test_every_mutant_witness_reproduces_in_float64():
    by_id = {c.id: c for c in claims()}
    for mu in mutants():
        if mu.closed is None or mu.claim not in builtin_ids():
            continue
        part = by_id[mu.claim].part(mu.part)
        w = find_witness(part, True, DISTINCT, seed=1, derived=mu.derived, closed=mu.closed, context=mu.id)
        assert w is not None, mu.id
        assert Decimal(w.lhs) != Decimal(w.rhs)
        assert_reproduces(part, w, mu.derived, mu.closed)


def test_a_readout_gradient_is_refuted_at_the_full_loss():
    w = find_witness(WO_GRAD_ZERO, False, DISTINCT, seed=0)
    assert w is not None and w.rhs == "0" and any(k.startswith("Y[") for k in w.point)


def test_sizes_with_coincidences_are_used_as_given():
    dk_eq_dv = [{"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}]
    ratio = ident(("n", "dv"), "scores", lambda m, j, a: m.derived_grad("v", j, a),
                  lambda m, j, a: m.dV(j, a) * m.size("dk") / m.size("dv"))
    assert find_witness(ratio, False, dk_eq_dv, seed=0) is None  # true at these sizes
    w = find_witness(ratio, False, dk_eq_dv + DISTINCT, seed=0)
    assert w is not None and w.sizes == DISTINCT[0]


def test_no_witness_for_a_true_identity():
    c1 = next(c for c in claims() if c.id == "C1").part("main")
    assert find_witness(c1, True, DISTINCT, seed=0) is None
    sym = ident(("n", "dv", "n", "dv"), "scores",
                lambda m, j, a, l, b: m.grad(m.derived_grad("v", j, a), "v", l, b),
                lambda m, j, a, l, b: m.grad(m.derived_grad("v", l, b), "v", j, a))
    assert find_witness(sym, False, SIZES, seed=0) is None


def test_no_witness_where_only_the_formal_generators_differ():
    exp_sum = ident(("n", "n"), "scores", lambda m, i, j: m.exp(m.leaf("s", i, j) + m.leaf("s", j, i)),
                    lambda m, i, j: m.exp(m.leaf("s", i, j)) * m.exp(m.leaf("s", j, i)))
    assert find_witness(exp_sum, True, SIZES, seed=0) is None


def test_failures_are_no_witness_but_shape_errors_propagate():
    def boom(m, *ix):
        raise RuntimeError("unsupported")

    assert find_witness(ident(("n",), "scores", boom, lambda m, i: 0), False, SIZES, seed=0) is None
    assert find_witness(ident(("n",), "scores", lambda m, i: abs(m.leaf("s", i, i)), lambda m, i: 0),
                        False, SIZES, seed=0) is None
    class Alarm(Exception):  # like a proof path's time budget: not swallowed
        pass

    def alarm(m, *ix):
        raise Alarm

    with pytest.raises(Alarm):
        find_witness(ident(("n",), "scores", alarm, lambda m, i: 0), False, SIZES, seed=0)
    wrong_range = ident(("n", "dk"), "scores", lambda m, j, a: m.derived_grad("v", j, a), lambda m, j, a: 0)
    with pytest.raises(ShapeError):
        find_witness(wrong_range, False, SIZES, seed=0)


def test_same_seed_same_witness():
    a = find_witness(HESSIAN_ZERO, False, SIZES, seed=5)
    b = find_witness(HESSIAN_ZERO, False, SIZES, seed=5)
    assert a == b
