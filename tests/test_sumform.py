import pytest
import sympy as sp

from derive.general import GeneralBackend
from derive.model import Setting
from derive.sumform import Normaliser, UnsupportedNode

n = GeneralBackend.sizes["n"]


def _norm():
    i, j, p, k, l = sp.symbols("i j p k l", integer=True)
    dims = {s: "n" for s in (i, j, p, k, l)}
    return Normaliser(dims, GeneralBackend.sizes), (i, j, p, k, l)


def test_dummy_names_do_not_matter():
    norm, (i, j, p, k, l) = _norm()
    a = sp.IndexedBase("a")
    assert sp.expand(norm.nf(sp.Sum(a[i, k], (k, 1, n))) - norm.nf(sp.Sum(a[i, l], (l, 1, n)))) == 0


def test_free_index_names_do_matter():
    norm, (i, j, p, k, l) = _norm()
    a = sp.IndexedBase("a")
    assert sp.expand(norm.nf(sp.Sum(a[i, k], (k, 1, n))) - norm.nf(sp.Sum(a[j, k], (k, 1, n)))) != 0


def test_delta_resolution_over_full_range():
    norm, (i, j, p, k, l) = _norm()
    a = sp.IndexedBase("a")
    e = sp.Sum(sp.KroneckerDelta(k, p) * a[i, k], (k, 1, n))
    assert sp.expand(norm.nf(e) - norm.nf(a[i, p])) == 0


def test_nested_sums_flatten_and_swap():
    norm, (i, j, p, k, l) = _norm()
    a, b = sp.IndexedBase("a"), sp.IndexedBase("b")
    left = sp.Sum(sp.Sum(a[i, k] * b[k, l], (l, 1, n)), (k, 1, n))
    right = sp.Sum(sp.Sum(b[l, k] * a[i, l], (l, 1, n)), (k, 1, n))
    assert sp.expand(norm.nf(left) - norm.nf(right)) == 0


def test_softmax_weights_sum_to_one():
    m = GeneralBackend(Setting("scores", "linear", True))
    (i,) = m.free_indices(("n",))
    ok, _ = m.equal(m.sum("n", lambda j: m.alpha(i, j)), 1)
    assert ok
    ok, _ = m.equal(m.sum("n", lambda j: m.alpha(i, j)), 2)
    assert not ok


def test_exp_powers_are_canonical():
    norm, (i, j, p, k, l) = _norm()
    s = sp.IndexedBase("s")
    assert sp.expand(norm.nf(sp.exp(2 * s[i, j])) - norm.nf(sp.exp(s[i, j]) * sp.exp(s[i, j]))) == 0


def test_symmetric_free_slots_are_ordered():
    norm, (i, j, p, k, l) = _norm()
    q = sp.IndexedBase("q")
    left = sp.Sum(q[i, k] * q[j, k], (k, 1, n))
    right = sp.Sum(q[j, l] * q[i, l], (l, 1, n))
    assert sp.expand(norm.nf(left) - norm.nf(right)) == 0


def test_unsupported_nodes_raise():
    norm, (i, j, p, k, l) = _norm()
    with pytest.raises(UnsupportedNode, match="Abs"):
        norm.nf(sp.Abs(sp.IndexedBase("a")[i]))
    with pytest.raises(UnsupportedNode, match="full range"):
        norm.nf(sp.Sum(sp.IndexedBase("a")[k], (k, 2, n)))
