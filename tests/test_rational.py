from fractions import Fraction

import pytest

from derive.fixed import Ix
from derive.model import Setting
from derive.rational import Dual, DualBackend


def test_dual_arithmetic_is_exact():
    x = Dual(Fraction(1, 3), {"x": Fraction(1)})
    y = x * x / (x + 1)
    # d/dx x^2/(x+1) = (x^2 + 2x)/(x+1)^2 at 1/3 = (1/9 + 2/3) / (16/9) = 7/16
    assert y.grad["x"] == Fraction(7, 16)
    with pytest.raises(ZeroDivisionError):
        x / (x - Fraction(1, 3))


def test_exp_is_a_consistent_formal_generator():
    m = DualBackend(Setting("scores", "ce", False), {"n": 2, "dk": 1, "dv": 1, "m": 2, "dx": 1}, seed=3)
    s = m.leaf("s", Ix("n", 0), Ix("n", 1))
    e1, e2 = m.exp(s), m.exp(s)
    assert e1.val == e2.val > 0
    assert e1.grad[("s", 0, 1)] == e1.val


def test_same_seed_same_point():
    sizes = {"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}
    a = DualBackend(Setting("scores", "ce", True), sizes, seed=7).loss().val
    b = DualBackend(Setting("scores", "ce", True), sizes, seed=7).loss().val
    c = DualBackend(Setting("scores", "ce", True), sizes, seed=8).loss().val
    assert a == b != c
