import pytest

from derive.fixed import Ix, RingBackend
from derive.general import GeneralBackend
from derive.model import Setting, ShapeError

SIZES = {"n": 2, "dk": 2, "dv": 2, "m": 2, "dx": 2}


def test_wrong_range_index_names_claim_and_index():
    m = GeneralBackend(Setting("qk", "linear", False), "CZ (bad)")
    i, a = m.free_indices(("n", "dv"))
    with pytest.raises(ShapeError, match=r"CZ \(bad\): index a_dv ranges over dv but position 2 of q ranges over dk"):
        m.q(i, a)


def test_wrong_arity():
    m = RingBackend(Setting("scores", "ce", False), SIZES, "CZ")
    with pytest.raises(ShapeError, match="takes 2 indices"):
        m.leaf("s", Ix("n", 0))


def test_grad_of_a_quantity_that_is_not_free_at_this_level():
    m = GeneralBackend(Setting("qk", "linear", False), "CZ")
    i, j = m.free_indices(("n", "n"))
    with pytest.raises(ShapeError, match="s is not a free variable at level qk"):
        m.derived_grad("s", i, j)


def test_undeclared_free_index_is_named():
    m = GeneralBackend(Setting("scores", "linear", False), "CZ")
    (i,) = m.free_indices(("n",))
    (j,) = m.free_indices(("n",))
    with pytest.raises(ShapeError, match="free index j_n"):
        m.check_free(m.alpha(i, j), [i], "the closed form")


def test_bad_setting():
    with pytest.raises(ValueError, match="unknown level"):
        Setting("nope", "ce", False)
    with pytest.raises(ValueError, match="unknown loss"):
        Setting("scores", "mse", False)


def test_causal_mask_includes_the_diagonal():
    m = RingBackend(Setting("scores", "ce", True), SIZES)
    assert m.mask(Ix("n", 1), Ix("n", 1)) == 1
    assert m.mask(Ix("n", 0), Ix("n", 1)) == 0
    assert m.mask(Ix("n", 1), Ix("n", 0)) == 1
