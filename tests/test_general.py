"""The general path on the model: softmax folds, the mask algebras, free deltas, scalar gradients.

Each true identity below needs one of the normal form's rules; each near miss next to it is false
and must stay unproved. `test_normal_form_keeps_values` reads normal forms back numerically."""
import functools
import itertools
import math
import random

import pytest
import sympy as sp

from derive.claims import Identity
from derive.general import Derivative, GeneralBackend
from derive.model import LEAVES, Setting
from derive.prove import run_path
from derive.sumform import Exp, Log, SumAtom


def _equal(build, free=(), level="scores", masked=True, loss="linear", algebra="boolean"):
    m = GeneralBackend(Setting(level, loss, masked, algebra))
    lhs, rhs = build(m, *m.free_indices(free))
    return m.equal(lhs, rhs)[0]


def _rows(m, f):
    return m.sum("n", f)


# -- softmax normalisation under enclosing sums ---------------------------------------------------
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
def test_attention_sums_to_the_number_of_rows(masked):
    total = lambda m: _rows(m, lambda i: _rows(m, lambda j: m.alpha(i, j)))
    assert _equal(lambda m: (total(m), m.size("n")), masked=masked)
    assert not _equal(lambda m: (total(m), 1), masked=masked)
    assert not _equal(lambda m, j: (_rows(m, lambda i: m.alpha(i, j)), 1), ("n",), masked=masked)  # columns do not


@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
def test_value_gradients_sum_to_the_upstream_gradients(masked):
    derived = lambda m, a: _rows(m, lambda j: m.derived_grad("v", j, a))
    assert _equal(lambda m, a: (derived(m, a), _rows(m, lambda i: m.u(i, a))), ("dv",), masked=masked)
    transposed = lambda m, a: _rows(m, lambda j: _rows(m, lambda i: m.alpha(j, i) * m.u(i, a)))
    assert not _equal(lambda m, a: (derived(m, a), transposed(m, a)), ("dv",), masked=masked)


def test_products_of_normalised_rows():
    assert _equal(lambda m, i: (_rows(m, lambda j: _rows(m, lambda l: m.alpha(i, j) * m.alpha(i, l))), 1), ("n",))
    assert _equal(lambda m, i: (_rows(m, lambda j: m.alpha(i, j) * m.baseline(i)), m.baseline(i)), ("n",))
    assert _equal(lambda m: (_rows(m, lambda j: m.responsibility(j)), m.size("n")))
    assert not _equal(lambda m, i: (_rows(m, lambda j: m.alpha(i, j) ** 2), 1), ("n",))
    assert not _equal(lambda m, i: (_rows(m, lambda j: m.alpha(i, j) * m.e(i, j)), 1), ("n",))  # a look-alike numerator
    assert _equal(lambda m, i: (_rows(m, lambda j: _rows(m, lambda l: m.alpha(i, j) * m.alpha(j, l))), 1), ("n",))
    assert not _equal(lambda m, i: (_rows(m, lambda j: _rows(m, lambda l: m.alpha(i, j) * m.alpha(l, j))), 1), ("n",))


def test_class_probabilities_normalise_under_enclosing_sums():
    ce = dict(level="readout", loss="ce")
    assert _equal(lambda m: (_rows(m, lambda i: m.sum("m", lambda c: m.p(i, c))), m.size("n")), **ce)
    assert not _equal(lambda m, i: (m.sum("m", lambda c: m.p(i, c) ** 2), 1), ("n",), **ce)
    assert not _equal(lambda m, c: (_rows(m, lambda i: m.p(i, c)), 1), ("m",), **ce)
    derived = lambda m, a: m.sum("m", lambda c: m.derived_grad("WO", a, c))
    closed = lambda m, a: _rows(m, lambda i: m.o(i, a) * (1 - m.sum("m", lambda c: m.leaf("Y", i, c)))) / m.size("n")
    assert _equal(lambda m, a: (derived(m, a), closed(m, a)), ("dv",), **ce)
    assert not _equal(lambda m, a: (derived(m, a), 0), ("dv",), **ce)  # targets are free, not one-hot


# -- the mask -------------------------------------------------------------------------------------
def test_mask_entries_are_idempotent():
    assert _equal(lambda m, i, j: (m.mask(i, j) * (1 - m.mask(i, j)), 0), ("n", "n"))
    assert _equal(lambda m, i: (_rows(m, lambda j: m.alpha(i, j) * m.mask(i, j)), 1), ("n",))
    assert not _equal(lambda m, i, j: (m.mask(i, j) * (1 - m.mask(j, i)), 0), ("n", "n"))
    assert not _equal(lambda m, i: (_rows(m, lambda j: m.alpha(i, j) * m.mask(j, i)), 1), ("n",))


CAUSAL_ONLY = {
    "diagonal": (("n",), lambda m, i: (m.mask(i, i), 1)),
    "transitivity": (("n",) * 3, lambda m, i, j, l: (m.mask(i, j) * m.mask(j, l) * m.mask(i, l), m.mask(i, j) * m.mask(j, l))),
    "antisymmetry": (("n",) * 2, lambda m, i, j: (m.mask(i, j) * m.mask(j, i), m.delta(i, j))),
    "cycle": (("n",) * 3, lambda m, i, j, l: (m.mask(i, j) * m.mask(j, l) * m.mask(l, i), m.delta(i, j) * m.delta(i, l))),
    "attention at the diagonal": (("n",), lambda m, i: (_rows(m, lambda j: m.alpha(i, j) * m.mask(j, i)), m.alpha(i, i))),
    "implied entry under a sum": (("n",) * 2, lambda m, i, l: (_rows(m, lambda j: m.alpha(i, j) * m.mask(j, l) * m.mask(i, l)),
                                                               _rows(m, lambda j: m.alpha(i, j) * m.mask(j, l)))),
}


@pytest.mark.parametrize("name", CAUSAL_ONLY)
def test_causal_identities_need_the_causal_algebra(name):
    free, build = CAUSAL_ONLY[name]
    assert _equal(build, free, algebra="causal")
    assert not _equal(build, free, algebra="boolean")


NEAR_MISSES = {
    "converse of transitivity": (("n",) * 3, lambda m, i, j, l: (m.mask(i, j) * m.mask(j, l), m.mask(i, l))),
    "symmetry": (("n",) * 2, lambda m, i, j: (m.mask(i, j), m.mask(j, i))),
    "antisymmetry without the delta": (("n",) * 2, lambda m, i, j: (m.mask(i, j) * m.mask(j, i), 1)),
    "diagonal mass": (("n",), lambda m, i: (_rows(m, lambda j: m.mask(i, j) * m.mask(j, i)), m.size("n"))),
    "totality without the diagonal": (("n",) * 2, lambda m, i, j: (m.mask(i, j) + m.mask(j, i), 1)),
}


@pytest.mark.parametrize("name", NEAR_MISSES)
def test_causal_near_misses_stay_unproved(name):
    free, build = NEAR_MISSES[name]
    assert not _equal(build, free, algebra="causal")


def test_the_backend_hands_the_mask_algebra_to_the_normal_form():
    assert GeneralBackend(Setting("scores", "linear", True, "causal")).normaliser().causal
    assert not GeneralBackend(Setting("scores", "linear", True)).normaliser().causal


def test_a_causal_identity_is_proved_on_the_general_path():
    diagonal = Identity("attention at the diagonal", ("n",), "scores", lambda m, i: _rows(m, lambda j: m.alpha(i, j) * m.mask(j, i)),
                        lambda m, i: m.alpha(i, i), r"\sum_j \alpha_{ij} M_{ji} = \alpha_{ii}", mask_algebra="causal")
    assert run_path("general", diagonal, True, "causal-diagonal", {}).equal  # unmasked, M is 1 and the claim is false


# -- free deltas ----------------------------------------------------------------------------------
def test_a_delta_between_free_indices_renames_inside_sums_and_exponentials():
    assert _equal(lambda m, i, j: (m.delta(i, j) * m.alpha(i, j), m.delta(j, i) * m.alpha(j, j)), ("n", "n"), level="qk")
    assert not _equal(lambda m, i, j: (m.delta(i, j) * m.alpha(i, j), m.alpha(i, i)), ("n", "n"), level="qk")
    assert not _equal(lambda m, i, j: (m.delta(i, j), 1), ("n", "n"))


def test_jacobians_with_free_deltas():
    dz = lambda m, i, r, l: m.grad(m.Z(i), "s", r, l)
    assert _equal(lambda m, i, r, l: (dz(m, i, r, l), m.delta(i, r) * m.mask(r, l) * m.e(r, l)), ("n",) * 3)
    assert not _equal(lambda m, i, r, l: (dz(m, i, r, l), m.mask(r, l) * m.e(r, l)), ("n",) * 3)
    closed = lambda m, i, j, r, l: m.delta(i, r) * m.alpha(r, j) * (m.delta(j, l) - m.alpha(r, l))
    assert _equal(lambda m, i, j, r, l: (m.grad(m.alpha(i, j), "s", r, l), closed(m, i, j, r, l)), ("n",) * 4)
    assert not _equal(lambda m, i, j, r, l: (m.grad(m.alpha(i, j), "s", r, l), closed(m, i, j, l, r)), ("n",) * 4)


# -- gradients by scalars -------------------------------------------------------------------------
@pytest.mark.parametrize("level", ["qk", "params"])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
def test_gradient_by_the_scale(level, masked):
    closed = lambda m: m.sum("n", lambda i: m.sum("n", lambda j: m.dS(i, j) * m.s(i, j))) / m.c
    assert _equal(lambda m: (m.derived_grad("c"), closed(m)), level=level, masked=masked)
    assert not _equal(lambda m: (m.derived_grad("c"), closed(m) * m.c), level=level, masked=masked)
    assert _equal(lambda m: (m.derived_grad("eta"), 0), level=level, masked=masked)


@pytest.mark.parametrize("level,first,second", [("scores", "s", "v"), ("qk", "c", None), ("params", "WK", None), ("readout", "WO", "o")])
def test_the_chain_rule_agrees_with_sympy(level, first, second):
    m = GeneralBackend(Setting(level, "ce", True))
    variable = lambda name: m.c if name == "c" else m.entry(name, *m.free_indices(LEAVES[name]))
    xs = [variable(name) for name in (first, second) if name]
    assert m.equal(functools.reduce(lambda f, x: Derivative(x)(f), xs, m.loss()), sp.diff(m.loss(), *xs))[0]


# -- soundness: a normal form has the value of what it normalises ---------------------------------
SIZES = {"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}
READ_BACK = {
    "rows of attention": ("scores", (), lambda m: _rows(m, lambda i: _rows(m, lambda j: m.alpha(i, j)))),
    "two rows at once": ("scores", ("n",), lambda m, i: _rows(m, lambda j: _rows(m, lambda l: m.alpha(i, j) * m.alpha(i, l) * m.s(i, j)))),
    "class probabilities": ("readout", (), lambda m: _rows(m, lambda i: m.sum("m", lambda c: m.p(i, c)))),
    "a look-alike numerator": ("scores", ("n",), lambda m, i: _rows(m, lambda j: m.alpha(i, j) * m.e(i, j))),
    "value gradients": ("scores", ("dv",), lambda m, a: _rows(m, lambda j: m.derived_grad("v", j, a))),
    "mask times attention": ("scores", ("n", "n"), lambda m, i, l: _rows(m, lambda j: m.alpha(i, j) * m.mask(j, l) * m.mask(i, l))),
    "mask cycle": ("scores", ("n",) * 3, lambda m, i, j, l: m.mask(i, j) * m.mask(j, l) * m.mask(l, i) * m.leaf("s", i, l)),
    "diagonal under a sum": ("scores", ("n",) * 2, lambda m, i, l: _rows(m, lambda j: m.mask(i, j) * m.mask(j, i) * m.leaf("s", j, l))),
    "delta into exponentials": ("qk", ("n", "n"), lambda m, i, j: m.delta(i, j) * m.alpha(i, j)),
    "attention Jacobian": ("scores", ("n",) * 4, lambda m, i, j, r, l: m.grad(m.alpha(i, j), "s", r, l)),
    "scale gradient": ("qk", (), lambda m: m.derived_grad("c")),
}


OPS = {sp.Add: sum, sp.Mul: math.prod, sp.Pow: lambda a: a[0] ** a[1], sp.KroneckerDelta: lambda a: float(a[0] == a[1]),
       sp.exp: lambda a: math.exp(a[0]), Exp: lambda a: math.exp(a[0]), sp.log: lambda a: math.log(a[0]), Log: lambda a: math.log(a[0])}


def _value(e, env, table):
    """e at concrete indices and sizes (env) and entries (table), read independently of the normal form."""
    if isinstance(e, SumAtom):
        return _atom_value(e, env, table)
    if isinstance(e, sp.Symbol):
        return env[e]
    if e.is_Number:
        return float(e)
    if isinstance(e, sp.Sum):
        ks, ranges = [k for k, _, _ in e.limits], [range(1, int(_value(hi, env, table)) + 1) for _, _, hi in e.limits]
        return sum(_value(e.function, {**env, **dict(zip(ks, vals))}, table) for vals in itertools.product(*ranges))
    if isinstance(e, sp.Indexed):
        return table(e.base.name, tuple(int(_value(i, env, table)) for i in e.indices))
    op = next(op for cls, op in OPS.items() if isinstance(e, cls))
    return op([_value(a, env, table) for a in e.args])


def _atom_value(atom, env, table):
    """The atom's own summand, summed over its dummies: what the template stands for."""
    cls = atom.func
    outer = {**env, **dict(zip(cls._slots, (_value(a, env, table) for a in atom.args)))}
    total = 0.0
    for vals in itertools.product(*[range(1, SIZES[d] + 1) for d in cls._dummy_dims]):
        inner = {**outer, **dict(zip(cls._dummies, vals))}
        total += math.prod(_value(b, inner, table) ** p for b, p in cls._body)
    return total


def _masks(algebra, rng):
    n = SIZES["n"]
    yield {(i, j): float(j <= i) for i in range(1, n + 1) for j in range(1, n + 1)}
    if algebra == "boolean":
        for _ in range(2):
            mask = {(i, j): float(rng.random() < 0.5) for i in range(1, n + 1) for j in range(1, n + 1)}
            yield {**mask, **{(i, rng.randint(1, n)): 1.0 for i in range(1, n + 1)}}  # every row attends somewhere


@pytest.mark.parametrize("algebra", ["boolean", "causal"])
@pytest.mark.parametrize("name", READ_BACK)
def test_normal_form_keeps_values(name, algebra):
    level, free, build = READ_BACK[name]
    m = GeneralBackend(Setting(level, "linear", True, algebra))
    ix = m.free_indices(free)
    expr = build(m, *ix)
    nf = m.normaliser().nf(expr)
    rng = random.Random(0)
    for mask in _masks(algebra, rng):
        entries = {("M", ij): v for ij, v in mask.items()}
        table = lambda name, ix, entries=entries: entries.setdefault((name, ix), rng.uniform(-1, 1))
        env = {**{m.sizes[d]: SIZES[d] for d in SIZES}, m.c: 0.7, m.eta: 0.3}
        env.update({i: rng.randint(1, SIZES[m.index_dims[i]]) for i in ix})
        assert _value(nf, env, table) == pytest.approx(_value(expr, env, table), rel=1e-9, abs=1e-12)
