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


def _same(norm, left, right):
    return sp.expand(norm.nf(left) - norm.nf(right)) == 0


def test_an_unused_dummy_keeps_its_size():
    norm, (i, j, p, k, l) = _norm()
    a = sp.IndexedBase("a")
    assert _same(norm, sp.Sum(1, (k, 1, n)), n)
    assert _same(norm, sp.Sum(a[i], (k, 1, n)), n * a[i])
    assert not _same(norm, sp.Sum(a[i], (k, 1, n)), a[i])


def test_a_normalised_row_folds_under_enclosing_sums():
    norm, (i, j, p, k, l) = _norm()
    a = sp.IndexedBase("a")
    z = sp.Sum(a[i, k], (k, 1, n))
    assert _same(norm, sp.Sum(sp.Sum(a[i, j] / z, (j, 1, n)), (i, 1, n)), n)
    assert _same(norm, sp.Sum(sp.Sum(a[i, j] * a[i, l] / z**2, (j, 1, n)), (l, 1, n)), 1)
    assert not _same(norm, sp.Sum(sp.Sum(a[j, i] / z, (j, 1, n)), (i, 1, n)), n)
    assert not _same(norm, sp.Sum(a[i, j] ** 2 / z, (j, 1, n)), 1)


def test_only_the_mask_is_idempotent():
    norm, (i, j, p, k, l) = _norm()
    mask, a = sp.IndexedBase("M"), sp.IndexedBase("a")
    assert _same(norm, mask[i, j] ** 3, mask[i, j])
    assert _same(norm, mask[i, j] * (1 - mask[i, j]), 0)
    assert not _same(norm, a[i, j] ** 2, a[i, j])
    assert not _same(norm, mask[i, j] * mask[j, i], mask[i, j])


def test_the_causal_algebra_is_opt_in():
    i, k = sp.symbols("i k", integer=True)
    mask, a = sp.IndexedBase("M"), sp.IndexedBase("a")
    diagonal = sp.Sum(mask[i, k] * mask[k, i] * a[k], (k, 1, n))
    causal = Normaliser({i: "n", k: "n"}, GeneralBackend.sizes, "causal")
    boolean = Normaliser({i: "n", k: "n"}, GeneralBackend.sizes)
    assert _same(causal, diagonal, a[i]) and _same(causal, mask[i, i], 1)
    assert not _same(boolean, diagonal, a[i]) and not _same(boolean, mask[i, i], 1)
    with pytest.raises(ValueError, match="mask algebra"):
        Normaliser({}, GeneralBackend.sizes, "triangular")


def test_a_free_delta_renames_the_later_index_and_stays():
    norm, (i, j, p, k, l) = _norm()
    a = sp.IndexedBase("a")
    d = sp.KroneckerDelta
    assert _same(norm, d(i, j) * a[j, p], d(i, j) * a[i, p])
    assert _same(norm, d(i, j) * d(j, p) * a[p], d(p, i) * d(i, j) * a[i])
    assert not _same(norm, d(i, j) * a[j, p], a[i, p])
    assert not _same(norm, d(i, j) * a[j, p], d(i, j) * a[i, j])


def test_merged_indices_renormalise_nested_sums():
    norm, (i, j, p, k, l) = _norm()
    q = sp.IndexedBase("q")
    d = sp.KroneckerDelta
    score = lambda x, y: sp.exp(sp.Sum(q[x, l] * q[y, l], (l, 1, n)))
    square = sp.exp(sp.Sum(q[i, l] ** 2, (l, 1, n)))
    assert _same(norm, d(i, j) * score(i, j), d(i, j) * square)
    assert _same(norm, sp.Sum(d(k, i) * score(i, k), (k, 1, n)), square)
    assert not _same(norm, sp.Sum(d(k, j) * score(i, k), (k, 1, n)), square)


def test_an_inverse_delta_is_refused():
    norm, (i, j, p, k, l) = _norm()
    with pytest.raises(UnsupportedNode, match="power -1"):
        norm.nf(1 / sp.KroneckerDelta(i, j))


def test_many_dummies_of_one_range_are_renamed_canonically():
    norm, (i, j, p, k, l) = _norm()
    r, t = sp.symbols("r t", integer=True)
    norm.dims.update({r: "n", t: "n"})
    a, b = sp.IndexedBase("a"), sp.IndexedBase("b")
    chain = lambda x, y, z: sp.Sum(a[i, x] * b[x, y] * b[y, z] * sp.exp(a[z, j]) * b[z, x] ** 2, (x, 1, n), (y, 1, n), (z, 1, n))
    assert _same(norm, chain(k, l, p), chain(t, r, k))
    assert _same(norm, chain(k, l, p), chain(p, k, l))
    assert not _same(norm, chain(k, l, p), chain(k, l, p).subs(j, i))
    star = lambda x, y, z: sp.Sum(a[i, x] * a[i, y] * a[j, z] * b[x, y] * b[y, z], (x, 1, n), (y, 1, n), (z, 1, n))
    assert _same(norm, star(k, l, p), star(r, t, k))
    reversed_edge = sp.Sum(a[i, k] * a[i, l] * a[j, p] * b[k, l] * b[p, l], (k, 1, n), (l, 1, n), (p, 1, n))
    assert not _same(norm, star(k, l, p), reversed_edge)
