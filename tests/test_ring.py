import pytest
import sympy as sp

from derive.ring import BITS, MASK, MAX_EXPONENT, DiffRing, ExponentOverflow


def test_derivation_matches_sympy_on_a_softmax_entry():
    ring = DiffRing()
    x, y = ring.leaf("x"), ring.leaf("y")
    ex, ey = ring.exp(x), ring.exp(y)
    f = ex / (ex + ey) * ring.log(ex + ey)
    d = ring.d(f, ring.leaf_id("x"))
    # compare with SymPy at a point by substituting generator values
    X, Y = sp.symbols("X Y")
    ref = sp.diff(sp.exp(X) / (sp.exp(X) + sp.exp(Y)) * sp.log(sp.exp(X) + sp.exp(Y)), X)
    vals = {X: sp.Rational(1, 3), Y: sp.Rational(-2, 5)}
    gens = {}
    for g, (kind, payload) in enumerate(ring.gens):
        gens[g] = (kind, payload)

    def value(poly):
        total = 0
        for mono, coeff in poly.terms.items():
            term = sp.Integer(coeff)
            g = 0
            while mono:
                e = mono & MASK
                if e:
                    term *= gen_value(g) ** e
                mono >>= BITS
                g += 1
            total += term
        return total

    def gen_value(g):
        kind, payload = gens[g]
        if kind == "leaf":
            return vals[{"x": X, "y": Y}[payload]]
        if kind == "exp":
            return sp.exp(value(payload))
        if kind == "log":
            return sp.log(value(payload))
        return 1 / value(payload)

    assert abs(sp.N(value(d) - ref.subs(vals), 30)) < 1e-25


def test_clear_inverses_decides_relations():
    ring = DiffRing()
    a, b = ring.leaf("a"), ring.leaf("b")
    z = ring.exp(a) + ring.exp(b)
    one = ring.exp(a) / z + ring.exp(b) / z
    assert ring.is_zero(one - 1)
    assert not ring.is_zero(one - 2)
    assert not ring.is_zero(ring.exp(a) / z)


def test_nested_inverses():
    ring = DiffRing()
    a, b = ring.leaf("a"), ring.leaf("b")
    inner = 1 / (a + b)
    outer = 1 / (a * inner + 1)
    # 1 / (a/(a+b) + 1) = (a+b)/(2a+b)
    assert ring.is_zero(outer - (a + b) / (2 * a + b))


def test_constants_and_interning():
    ring = DiffRing()
    a = ring.leaf("a")
    assert ring.exp(a * 2).terms == ring.exp(a + a).terms
    assert ring.is_zero(a / 3 * 3 - a)


def test_exponent_overflow_raises_instead_of_carrying():
    """x**255 * x would carry into the next generator's field if unchecked: it must raise."""
    ring = DiffRing()
    x, y = ring.leaf("x"), ring.leaf("y")
    p = x
    for _ in range(MAX_EXPONENT - 1):
        p = p * x
    assert p.degree(ring.leaf_id("x")) == MAX_EXPONENT and p.degree(ring.leaf_id("y")) == 0
    assert (p * y).degree(ring.leaf_id("y")) == 1  # other fields still fine at the limit
    with pytest.raises(ExponentOverflow, match="exceeds 255"):
        p * x


def test_overflow_makes_the_fixed_path_undecided():
    from derive.claims import Identity
    from derive.prove import run_path

    big = Identity("power", ("n", "dv"), "scores", lambda m, j, a: m.v(j, a) ** 300, lambda m, j, a: 0, "v^300 = 0")
    out = run_path("fixed", big, False, "overflow", {"grid": [{"n": 2, "dk": 1, "dv": 1, "m": 1, "dx": 1}], "seed": 0})
    assert out.status == "undecided" and "ExponentOverflow" in out.reason


def test_the_zero_test_splits_off_generators_no_denominator_holds():
    """p is a polynomial in the generators outside every inverse's payload (here the leaves x_i, w) over the
    rest: it is zero iff each coefficient is, so the rows of sum_i x_i (softmax row sums - 1) clear one by one,
    and the split decides as clearing p whole does."""
    ring = DiffRing()
    rows = []
    for i in range(3):
        e = [ring.exp(ring.leaf(("s", i, j))) for j in range(3)]
        z = e[0] + e[1] + e[2]
        rows.append((ring.leaf(("x", i)), e, z))
    w = ring.leaf("w")
    zero = sum((x * (sum(ej / z for ej in e) - 1) for x, e, z in rows), ring.const(0)) * w
    assert len(ring.split_free(zero)) == 3 and ring.is_zero(zero)
    not_zero = zero + rows[0][0] * rows[1][1][0] / rows[1][2] - rows[0][0] * rows[0][1][0] / rows[0][2]
    assert not ring.is_zero(not_zero) and ring.clear_inverses(not_zero)
    eta = ring.leaf("eta")  # a leaf inside a denominator is not split off
    ratio = eta / (eta + 1) + 1 / (eta + 1) - 1
    assert ring.split_free(ratio) == [ratio] and ring.is_zero(ratio)
    assert not ring.is_zero(eta / (eta + 1) - 1)
