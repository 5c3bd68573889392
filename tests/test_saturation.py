from fractions import Fraction

import numpy as np

from derive import saturation


def test_tight_family_is_exactly_one_minus_eps():
    for k in range(1, 8):
        eps = Fraction(1, 10**k)
        assert saturation.tight_family_ratio(eps) == 1 - eps


def test_bound_holds_and_is_approached():
    s = saturation.adversarial_search(restarts=20, seed=1)
    assert 0.99 <= s.sup_ratio <= 1 + 1e-12


def test_a_smaller_constant_is_refuted():
    s = saturation.adversarial_search(constant=3.5, restarts=20, seed=1)
    assert s.sup_ratio > 1.0


def test_ratio_of_uniform_attention_is_finite():
    assert saturation.ratio(np.full(4, 0.25), np.array([1.0, -1.0, 0.5, 0.0])) <= 1.0
