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


def test_each_inequality_step_of_c9s_written_chain_holds():
    """C9's derivation: |dS_ij| <= 2B alpha_ij (1 - alpha_ij) (triangle inequality over the mixture S1-S3), then
    sum_j alpha_ij (1 - alpha_ij) <= 2 (1 - max alpha); the steps multiply to the bound with constant 4."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(2, 9))
        logits = rng.normal(size=n) * rng.uniform(0.1, 12.0)
        alpha = np.exp(logits - logits.max())
        alpha /= alpha.sum()
        b = rng.normal(size=n) * rng.uniform(0.1, 3.0)
        ds, big_b = alpha * (b - alpha @ b), np.abs(b).max()
        assert np.all(np.abs(ds) <= 2 * big_b * alpha * (1 - alpha) + 1e-12)
        assert (alpha * (1 - alpha)).sum() <= 2 * (1 - alpha.max()) + 1e-12
        assert saturation.ratio(alpha, b) <= 1 + 1e-9
