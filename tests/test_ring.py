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


def test_a_long_product_checks_the_budget_between_its_rows():
    """A single product of thousands of terms by thousands runs for seconds: `check` is called inside it, not only
    before, so a budget that runs out mid-product stops it."""
    from derive.ring import CHECK_EVERY

    calls = []

    def check():
        calls.append(1)
        if armed and len(calls) > 3:
            raise TimeoutError("budget")

    armed = False
    ring = DiffRing(check)
    a = ring.add_all(ring.leaf(("a", i)) for i in range(300))
    b = ring.add_all(ring.leaf(("b", i)) for i in range(300))
    assert len(a) * len(b) > 4 * CHECK_EVERY
    calls.clear()
    armed = True
    with pytest.raises(TimeoutError):
        a * b
    armed = False
    assert len(a * b) == 300 * 300  # unchecked to the end, the same product


def test_in_place_arithmetic_matches_the_term_by_term_definition():
    """Products, sums, differences and the zero test, accumulated in place, against the definitions on terms."""
    import random

    rng = random.Random(0)
    ring = DiffRing()
    gens = [ring.leaf(("x", i)) for i in range(4)] + [ring.exp(ring.leaf("y"))]
    inv = 1 / (gens[0] + gens[4])

    def poly():
        return ring.add_all(rng.randint(-3, 3) * gens[rng.randrange(5)] ** rng.randint(0, 3) * gens[rng.randrange(5)]
                            for _ in range(rng.randint(0, 8)))

    def product(a, b):
        out = {}
        for m1, c1 in a.items():
            for m2, c2 in b.items():
                out[m1 + m2] = out.get(m1 + m2, 0) + c1 * c2
        return {m: c for m, c in out.items() if c}

    def combined(a, b, sign):
        out = dict(a)
        for m, c in b.items():
            out[m] = out.get(m, 0) + sign * c
        return {m: c for m, c in out.items() if c}

    for _ in range(200):
        a, b, c = (ring.const(0) + poly() for _ in range(3))  # a Poly even where the sum is of ints only
        assert (a * b).terms == product(a.terms, b.terms)
        assert (a - b).terms == combined(a.terms, b.terms, -1) and (a + b).terms == combined(a.terms, b.terms, 1)
        assert ring.add_all([a, 2, b, -2, c]).terms == combined(combined(a.terms, b.terms, 1), c.terms, 1)
        assert all(0 not in p.terms.values() for p in (a * b, a - b, ring.add_all([a, -a, b])))
        assert ring.is_zero(a * b - b * a) and ring.is_zero(a * inv * (gens[0] + gens[4]) - a)
        assert ring.is_zero(b + a * inv - a * inv - b)
        mixed = c * inv + b + a * gens[1] * inv
        assert ring.is_zero(mixed) == (not ring.clear_inverses(mixed))  # split, as clearing it whole decides
    assert ring.add_all([1, 2]) == 3 and ring.add_all([]) == 0
