"""Claim fuzzer: random identities of the model's algebra, labelled by an independent float64 oracle
(`numeric.oracle`), sent through every proof path. A path that proves a false identity or disproves a
true one gives a FALSE VERDICT; `undecided` is allowed and counted.

    python -m derive.fuzz [--n N] [--seed S] [--paths general,fixed,rational] [--out FILE] [--jobs J]

A claim is two terms of a small grammar (the dataclasses below). Each term has two interpretations:
`model_eval` over `derive.model.AttentionModel` (what the proof paths see) and
`numeric.oracle.Evaluator` (plain torch on a vectorised forward, autograd for every derivative).
Claims come from true templates (C1–C10 style closed forms, normalisations, first and second
derivatives, readout), rewritten by truth-preserving moves, and about half of them corrupted
(index swaps, dropped or doubled factors, powers of c, dimension substitutions, the mask on the wrong
side, sums over the wrong index, the paper's own mutants). The oracle, not the intent, decides truth.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
import time
from dataclasses import dataclass, fields, replace

from derive.model import DIMS, LEAVES, LEVELS

# -- the grammar ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Q:
    """m.<name>(*ix): a quantity of the model (alpha, u, dS, ...)."""

    name: str
    ix: tuple


@dataclass(frozen=True)
class Leaf:
    """m.leaf(name, *ix): an entry of an independent quantity."""

    name: str
    ix: tuple


@dataclass(frozen=True)
class Scalar:
    name: str  # "c" or "eta"


@dataclass(frozen=True)
class Size:
    dim: str


@dataclass(frozen=True)
class Const:
    value: int


@dataclass(frozen=True)
class Kron:
    """Kronecker delta of two indices of one range."""

    i: str
    j: str


@dataclass(frozen=True)
class Mask:
    i: str
    j: str


@dataclass(frozen=True)
class Add:
    a: object
    b: object


@dataclass(frozen=True)
class Mul:
    a: object
    b: object


@dataclass(frozen=True)
class Div:
    a: object
    b: object


@dataclass(frozen=True)
class Pow:
    a: object
    k: int


@dataclass(frozen=True)
class Sum:
    var: str
    dim: str
    body: object


@dataclass(frozen=True)
class DGrad:
    """m.derived_grad(name, *ix) = dL/d name[ix]."""

    name: str
    ix: tuple


@dataclass(frozen=True)
class Grad:
    """m.grad(f, name, *ix) = d f / d name[ix]."""

    f: object
    name: str
    ix: tuple


@dataclass(frozen=True)
class Loss:
    pass


NODES = (Q, Leaf, Scalar, Size, Const, Kron, Mask, Add, Mul, Div, Pow, Sum, DGrad, Grad, Loss)
C, ETA, ZERO, ONE = Scalar("c"), Scalar("eta"), Const(0), Const(1)

# Index ranges of the model's named quantities, and the levels where the model and the oracle mean
# the same thing by them (e.g. at the readout level o is free and there is no alpha).
QDIMS = {"s": ("n", "n"), "e": ("n", "n"), "alpha": ("n", "n"), "q": ("n", "dk"), "k": ("n", "dk"),
         "v": ("n", "dv"), "o": ("n", "dv"), "z": ("n", "m"), "p": ("n", "m"), "u": ("n", "dv"),
         "b": ("n", "n"), "baseline": ("n",), "dS": ("n", "n"), "dV": ("n", "dv"), "dQ": ("n", "dk"),
         "dK": ("n", "dk"), "baseline_fused": ("n",), "responsibility": ("n",)}
ATT = ("alpha", "scores", "qk", "params")  # levels with an attention forward
SOFT = ("scores", "qk", "params")  # levels where alpha is the softmax of scores
ALL = tuple(LEVELS)
QLEVELS = {name: ATT for name in QDIMS}
QLEVELS.update({"s": SOFT, "e": SOFT, "q": ("qk", "params"), "k": ("qk", "params"), "dQ": ("qk", "params"),
                "dK": ("qk", "params"), "o": ALL, "z": ALL, "p": ALL, "u": ALL})


def q(name, *ix):
    return Q(name, ix)


def leaf(name, *ix):
    return Leaf(name, ix)


def dgrad(name, *ix):
    return DGrad(name, ix)


def grad(f, name, *ix):
    return Grad(f, name, ix)


def mul(*xs):
    return functools.reduce(Mul, xs)


def add(*xs):
    return functools.reduce(Add, xs)


def neg(x):
    return Mul(Const(-1), x)


def sub(a, b):
    return Add(a, neg(b))


def children(node):
    return [(f.name, getattr(node, f.name)) for f in fields(node) if isinstance(getattr(node, f.name), NODES)]


# -- interpretation over the model (what the proof paths see) -----------------------------------


def _power(x, k):
    out = x
    for _ in range(k - 1):
        out = out * x
    return out


def _ix(t, env):
    return [env[v] for v in t.ix]


_MODEL = {
    Q: lambda t, m, env: getattr(m, t.name)(*_ix(t, env)),
    Leaf: lambda t, m, env: m.leaf(t.name, *_ix(t, env)),
    Scalar: lambda t, m, env: getattr(m, t.name),
    Size: lambda t, m, env: m.size(t.dim),
    Const: lambda t, m, env: t.value,
    Kron: lambda t, m, env: m.delta(env[t.i], env[t.j]),
    Mask: lambda t, m, env: m.mask(env[t.i], env[t.j]),
    Add: lambda t, m, env: model_eval(t.a, m, env) + model_eval(t.b, m, env),
    Mul: lambda t, m, env: model_eval(t.a, m, env) * model_eval(t.b, m, env),
    Div: lambda t, m, env: model_eval(t.a, m, env) / model_eval(t.b, m, env),
    Pow: lambda t, m, env: _power(model_eval(t.a, m, env), t.k),
    Sum: lambda t, m, env: m.sum(t.dim, lambda k: model_eval(t.body, m, {**env, t.var: k})),
    DGrad: lambda t, m, env: m.derived_grad(t.name, *_ix(t, env)),
    Grad: lambda t, m, env: m.grad(model_eval(t.f, m, env), t.name, *_ix(t, env)),
    Loss: lambda t, m, env: m.loss(),
}


def model_eval(node, m, env):
    """The term as an expression of the model `m`, free index variables bound by `env`."""
    return _MODEL[type(node)](node, m, env)


def show(t):
    """Compact text of a term (for descriptions and reports)."""
    ix = lambda v: ",".join(v)  # noqa: E731
    if isinstance(t, (Q, Leaf)):
        return f"{t.name}[{ix(t.ix)}]"
    if isinstance(t, Scalar):
        return t.name
    if isinstance(t, Size):
        return f"|{t.dim}|"
    if isinstance(t, Const):
        return str(t.value)
    if isinstance(t, (Kron, Mask)):
        return f"{'δ' if isinstance(t, Kron) else 'M'}[{t.i},{t.j}]"
    if isinstance(t, Mul) and t.a == Const(-1):
        return f"-{show(t.b)}"
    if isinstance(t, (Add, Mul, Div)):
        op = {Add: " + ", Mul: "·", Div: "/"}[type(t)]
        return f"({show(t.a)}{op}{show(t.b)})"
    if isinstance(t, Pow):
        return f"{show(t.a)}^{t.k}"
    if isinstance(t, Sum):
        return f"Σ_{t.var}{show(t.body)}" if isinstance(t.body, (Add, Mul, Div)) else f"Σ_{t.var}({show(t.body)})"
    if isinstance(t, DGrad):
        return f"dL/d{t.name}[{ix(t.ix)}]"
    if isinstance(t, Grad):
        return f"d({show(t.f)})/d{t.name}[{ix(t.ix)}]"
    return "L"


# -- claims --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One generated identity lhs == rhs over the free index variables `free` ((var, dim), ...)."""

    index: int
    level: str
    free: tuple
    lhs: object
    rhs: object
    description: str
    loss: str = "any"
    mask_algebra: str = "boolean"
    intended: bool = True  # what the generator meant; the oracle decides
    family: str = ""  # which generator made it (FAMILIES)

    @property
    def name(self):
        return f"fuzz-{self.index}"

    def text(self):
        return f"{show(self.lhs)} = {show(self.rhs)}"

    def identity(self):
        from derive.claims import Identity

        names = [v for v, _ in self.free]
        derived = lambda m, *ix: model_eval(self.lhs, m, dict(zip(names, ix)))  # noqa: E731
        closed = lambda m, *ix: model_eval(self.rhs, m, dict(zip(names, ix)))  # noqa: E731
        return Identity(self.name, tuple(d for _, d in self.free), self.level, derived, closed, self.text(),
                        loss=self.loss, mask_algebra=self.mask_algebra)


@dataclass(frozen=True)
class Template:
    """A true identity (the paper's, or one of the model's algebra) with its known mutants."""

    name: str
    levels: tuple
    free: tuple
    lhs: object
    rhs: object
    loss: str = "any"
    mask_algebra: str = "boolean"
    mutants: tuple = ()  # (description, wrong closed side)


# -- templates: true identities ------------------------------------------------------------------

I, J, L_, F, G, A, X_, Y_ = ("i", "n"), ("j", "n"), ("l", "n"), ("f", "dv"), ("g", "dv"), ("a", "dk"), ("x", "dx"), ("y", "m")


def _alpha(i, j):
    return q("alpha", i, j)


def _b(i, j):
    return q("b", i, j)


def _ce_dz(i, y):
    """p_iy - Y_iy: dL_i/dz_iy under cross-entropy."""
    return sub(q("p", i, y), leaf("Y", i, y))


def _proximal(j, step):
    """C10's J_j: <dL/dv_j, step_j> + N_j / (2 eta) ||step_j||^2."""
    linear = Sum("e", "dv", mul(dgrad("v", j, "e"), step("e")))
    return add(linear, mul(Div(q("responsibility", j), mul(Const(2), ETA)), Sum("e", "dv", Pow(step("e"), 2))))


def _em_step(j):
    return lambda a: neg(Div(mul(ETA, q("dV", j, a)), q("responsibility", j)))


def _c10():
    free_step = lambda a: leaf("Delta", "j", a)  # noqa: E731
    excess = sub(_proximal("j", free_step), _proximal("j", _em_step("j")))
    gap = mul(Div(q("responsibility", "j"), mul(Const(2), ETA)),
              Sum("e", "dv", Pow(sub(leaf("Delta", "j", "e"), _em_step("j")("e")), 2)))
    plain = lambda a: neg(mul(ETA, q("dV", "j", a)))  # noqa: E731
    wrong = mul(Div(q("responsibility", "j"), mul(Const(2), ETA)), Sum("e", "dv", Pow(sub(leaf("Delta", "j", "e"), plain("e")), 2)))
    return Template("C10 EM step: excess = completed square", ("scores", "qk"), (J,), excess, gap,
                    mutants=(("M16 step without 1/N_j in the square", wrong),))


def _paper():
    aij, bij = _alpha("i", "j"), _b("i", "j")
    unmasked = Sum("k", "n", mul(Div(q("e", "i", "k"), Sum("l", "n", q("e", "i", "l"))), _b("i", "k")))
    m6 = Sum("k", "n", mul(_alpha("j", "k"), q("u", "k", "f")))  # sum_i alpha_ji u_i: the wrong index
    wo_form = lambda i, f: Sum("w", "m", mul(leaf("WO", f, "w"), _ce_dz(i, "w")))  # noqa: E731
    wo_grad = Div(Sum("k", "n", mul(q("o", "k", "f"), _ce_dz("k", "y"))), Size("n"))
    return [
        Template("C1 dL/ds = alpha(b - E_alpha b)", ("scores",), (I, J), dgrad("s", "i", "j"), q("dS", "i", "j"), mutants=(
            ("M1 baseline dropped", mul(aij, bij)),
            ("M2 uniform baseline", mul(aij, sub(bij, Div(Sum("k", "n", _b("i", "k")), Size("n"))))),
            ("M3 alpha dropped", sub(bij, q("baseline", "i"))),
            ("M4 sign flipped", neg(q("dS", "i", "j"))),
            ("M5 masked positions in the baseline", mul(aij, sub(bij, unmasked))))),
        Template("C2 dL/dv = sum_i alpha_ij u_i", ("alpha", "scores", "qk"), (J, F), dgrad("v", "j", "f"), q("dV", "j", "f"),
                 mutants=(("M6 sum over the wrong index", m6),)),
        Template("C3 dL/dq = c sum_j dS_ij k_j", ("qk",), (I, A), dgrad("q", "i", "a"), q("dQ", "i", "a"), mutants=(
            ("M7 scale c lost", Sum("l", "n", mul(q("dS", "i", "l"), q("k", "l", "a")))),
            ("M8 q/k transposed", mul(C, Sum("l", "n", mul(q("dS", "l", "i"), q("k", "l", "a"))))))),
        Template("C4 dL/dk = c sum_i dS_ij q_i", ("qk",), (J, A), dgrad("k", "j", "a"), q("dK", "j", "a"),
                 mutants=(("M9 q/k transposed", mul(C, Sum("l", "n", mul(q("dS", "l", "j"), q("k", "l", "a"))))),)),
        Template("C5 dL/do = W_O(p - y)/T", ("readout",), (I, F), dgrad("o", "i", "f"), Div(wo_form("i", "f"), Size("n")),
                 loss="ce", mutants=(("M10 1/T lost", wo_form("i", "f")),)),
        Template("C5 u is dL/do", ("readout",), (I, F), dgrad("o", "i", "f"), q("u", "i", "f"), loss="ce"),
        Template("C6 sum_j dL/ds_ij = 0", ("scores",), (I,), Sum("j", "n", dgrad("s", "i", "j")), ZERO,
                 mutants=(("M11 zero-sum equals the baseline", q("baseline", "i")),)),
        Template("C7 dL/dalpha = b", ("alpha",), (I, J), dgrad("alpha", "i", "j"), bij,
                 mutants=(("M12 extra alpha factor", mul(aij, bij)),)),
        Template("C8 dL/dW_V", ("params",), (X_, F), dgrad("WV", "x", "f"), Sum("j", "n", mul(leaf("X", "j", "x"), q("dV", "j", "f"))),
                 mutants=(("M13 responsibilities transposed", Sum("j", "n", mul(leaf("X", "j", "x"), m6))),)),
        Template("C8 dL/dW_Q", ("params",), (X_, A), dgrad("WQ", "x", "a"), Sum("i", "n", mul(leaf("X", "i", "x"), q("dQ", "i", "a")))),
        Template("C8 dL/dW_K", ("params",), (X_, A), dgrad("WK", "x", "a"), Sum("j", "n", mul(leaf("X", "j", "x"), q("dK", "j", "a")))),
        Template("C8 dL/dW_O", ("readout",), (F, Y_), dgrad("WO", "f", "y"), wo_grad, loss="ce"),
        Template("C8 dL/dW_O through the attention", ATT, (F, Y_), grad(Loss(), "WO", "f", "y"), wo_grad),
        _c10(),
    ]


def _first_order():
    def hq(i, j):  # q_i . k_j
        return Sum("h", "dk", mul(q("q", i, "h"), q("k", j, "h")))

    return [
        Template("dL/dX through q, k and v", ("params",), (I, X_), dgrad("X", "i", "x"), add(
            Sum("h", "dk", mul(q("dQ", "i", "h"), leaf("WQ", "x", "h"))),
            Sum("h2", "dk", mul(q("dK", "i", "h2"), leaf("WK", "x", "h2"))),
            Sum("e", "dv", mul(q("dV", "i", "e"), leaf("WV", "x", "e"))))),
        Template("dL/dc = sum_ij dS_ij q_i.k_j", ("qk", "params"), (), dgrad("c"),
                 Sum("i", "n", Sum("j", "n", mul(q("dS", "i", "j"), hq("i", "j"))))),
        Template("c dL/dc = sum_ij dS_ij s_ij", ("qk", "params"), (), mul(C, dgrad("c")),
                 Sum("i", "n", Sum("j", "n", mul(q("dS", "i", "j"), q("s", "i", "j"))))),
        Template("dL/dc = 0 where c is not in the forward", ("alpha", "scores", "readout"), (), dgrad("c"), ZERO),
        Template("dL/deta = 0", ALL, (), dgrad("eta"), ZERO),
        Template("dL/dY = -z/T", ALL, (I, Y_), grad(Loss(), "Y", "i", "y"), neg(Div(q("z", "i", "y"), Size("n")))),
        Template("Euler in q_i: sum_a q_ia dL/dq_ia = sum_j dS_ij s_ij", ("qk",), (I,),
                 Sum("a", "dk", mul(q("q", "i", "a"), dgrad("q", "i", "a"))), Sum("j", "n", mul(q("dS", "i", "j"), q("s", "i", "j")))),
        Template("c dL/dc = sum_ia q_ia dL/dq_ia", ("qk",), (), mul(C, dgrad("c")),
                 Sum("i", "n", Sum("a", "dk", mul(q("q", "i", "a"), dgrad("q", "i", "a"))))),
        Template("sum_j dL/dv_j = sum_i u_i", ("scores", "qk"), (F,), Sum("j", "n", dgrad("v", "j", "f")), Sum("i", "n", q("u", "i", "f"))),
    ]


def _algebra():
    return [
        Template("softmax rows sum to 1", SOFT, (I,), Sum("j", "n", _alpha("i", "j")), ONE),
        Template("sum_i sum_j alpha_ij = n", SOFT, (), Sum("i", "n", Sum("j", "n", _alpha("i", "j"))), Size("n")),
        Template("responsibilities sum to n", SOFT, (), Sum("j", "n", q("responsibility", "j")), Size("n")),
        Template("C1 fused baseline", ATT, (I,), q("baseline", "i"), q("baseline_fused", "i")),
        Template("class probabilities sum to 1", ALL, (I,), Sum("y", "m", q("p", "i", "y")), ONE),
        Template("sum_i sum_y p_iy = n", ALL, (), Sum("i", "n", Sum("y", "m", q("p", "i", "y"))), Size("n")),
        Template("advantages sum to 0 over j", SOFT, (I,), Sum("j", "n", q("dS", "i", "j")), ZERO),
        Template("C9 S1 baseline as mixture", SOFT, (I, J), sub(_b("i", "j"), q("baseline", "i")),
                 Sum("k", "n", mul(_alpha("i", "k"), sub(_b("i", "j"), _b("i", "k")))),
                 mutants=(("M14 uniform mixture weights", Div(Sum("k", "n", sub(_b("i", "j"), _b("i", "k"))), Size("n"))),)),
        Template("C9 S3 off-diagonal mass", SOFT, (I, J), Sum("k", "n", mul(_alpha("i", "k"), sub(ONE, Kron("j", "k")))),
                 sub(ONE, _alpha("i", "j"))),
        Template("logits z = W_O^T o", ALL, (I, Y_), q("z", "i", "y"), Sum("e", "dv", mul(leaf("WO", "e", "y"), q("o", "i", "e")))),
        Template("trace of delta over dk", ALL, (), Sum("h", "dk", Sum("h2", "dk", mul(Kron("h", "h2"), C))), mul(Size("dk"), C)),
        Template("trace of delta over m", ALL, (), Sum("w", "m", Sum("w2", "m", mul(Kron("w", "w2"), ETA))), mul(Size("m"), ETA)),
        Template("mask idempotence M alpha = alpha", SOFT, (I, J), mul(Mask("i", "j"), _alpha("i", "j")), _alpha("i", "j")),
        Template("causal: only the diagonal is attended both ways", SOFT, (I,),
                 Sum("j", "n", mul(Mask("i", "j"), Mask("j", "i"), _alpha("i", "j"))), _alpha("i", "i"), mask_algebra="causal"),
    ]


def _second_order():
    wo = lambda f, w: leaf("WO", f, w)  # noqa: E731
    mean_wo = lambda f, w: Sum(w, "m", mul(wo(f, w), q("p", "i", w)))  # noqa: E731
    hess_o = Div(mul(Kron("i", "j"), sub(Sum("w", "m", mul(wo("f", "w"), wo("g", "w"), q("p", "i", "w"))),
                                         mul(mean_wo("f", "w"), mean_wo("g", "w2")))), Size("n"))
    return [
        Template("score-Hessian rows sum to 0", ("scores",), (I, L_, ("r", "n")),
                 Sum("j", "n", grad(dgrad("s", "i", "j"), "s", "l", "r")), ZERO),
        Template("d/dv of the score zero-sum", ("scores",), (I, L_, F), Sum("j", "n", grad(dgrad("s", "i", "j"), "v", "l", "f")), ZERO),
        Template("d(dL/do)/dY = -delta W_O / T", ("readout",), (I, F, J, Y_), grad(dgrad("o", "i", "f"), "Y", "j", "y"),
                 neg(Div(mul(Kron("i", "j"), wo("f", "y")), Size("n"))), loss="ce"),
        Template("d(dL/dv)/dY = -alpha W_O / T", ("alpha", "scores", "qk"), (J, F, L_, Y_), grad(dgrad("v", "j", "f"), "Y", "l", "y"),
                 neg(Div(mul(_alpha("l", "j"), wo("f", "y")), Size("n")))),
        Template("d(dL/dW_O)/dY = -delta o / T", ALL, (F, Y_, I, ("w", "m")), grad(grad(Loss(), "WO", "f", "y"), "Y", "i", "w"),
                 neg(Div(mul(Kron("y", "w"), q("o", "i", "f")), Size("n")))),
        Template("CE Hessian in o", ("readout",), (I, F, J, G), grad(dgrad("o", "i", "f"), "o", "j", "g"), hess_o, loss="ce"),
    ]


PAPER, FIRST_ORDER, ALGEBRA, SECOND_ORDER = _paper(), _first_order(), _algebra(), _second_order()
LIFTABLE = PAPER + FIRST_ORDER + ALGEBRA  # any true identity stays true differentiated on both sides


# -- walking and editing terms -------------------------------------------------------------------


def walk(t, scope, path=()):
    """(path, subterm, index variables in scope there: {var: dim}) for every subterm."""
    yield path, t, scope
    inner = {**scope, t.var: t.dim} if isinstance(t, Sum) else scope
    for name, child in children(t):
        yield from walk(child, inner, path + (name,))


def put(t, path, new):
    if not path:
        return new
    return replace(t, **{path[0]: put(getattr(t, path[0]), path[1:], new)})


def rename(t, mapping):
    """Apply a permutation of index variable names everywhere in t (binders included)."""
    changes = {}
    for f in fields(t):
        value = getattr(t, f.name)
        if isinstance(value, NODES):
            changes[f.name] = rename(value, mapping)
        elif f.name == "ix":
            changes[f.name] = tuple(mapping.get(v, v) for v in value)
        elif f.name in ("i", "j", "var"):
            changes[f.name] = mapping.get(value, value)
    return replace(t, **changes)


def names(t):
    out = set()
    for _, s, _ in walk(t, {}):
        out.update(getattr(s, "ix", ()))
        out.update(getattr(s, a) for a in ("i", "j", "var") if hasattr(s, a))
    return out


def ix_dims(t):
    if isinstance(t, Q):
        return QDIMS[t.name]
    if isinstance(t, (Kron, Mask)):
        return None
    return LEAVES.get(t.name, ())


def uses(t, var):
    return var in names(t)


def involves_model(t):
    return any(isinstance(s, (Q, Leaf, Scalar, DGrad, Loss)) for _, s, _ in walk(t, {}))


class Fresh:
    """New index variable names, never clashing with the claim's."""

    POOL = {"n": "ijprk", "dk": "abh", "dv": "fge", "m": "ywv", "dx": "xtu"}

    def __init__(self, *terms, free=()):
        self.used = set().union(*(names(t) for t in terms)) | {v for v, _ in free}

    def __call__(self, dim):
        for n in range(100):
            for letter in self.POOL[dim]:
                name = f"{letter}{n or ''}"
                if name not in self.used:
                    self.used.add(name)
                    return name
        raise RuntimeError("out of index names")


# -- corruptions: each returns (new side, what was done) or None --------------------------------


def _pick(rng, items):
    return rng.choice(items) if items else None


def c_transpose(rng, t, scope, level):
    spots = [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, (Q, Leaf, DGrad, Grad)) and len(s.ix) == 2
             and ix_dims(s)[0] == ix_dims(s)[1] and s.ix[0] != s.ix[1]]
    spot = _pick(rng, spots)
    if spot:
        p, s = spot
        new = replace(s, ix=s.ix[::-1])
        return put(t, p, new), f"transpose {show(s)} -> {show(new)}"


def c_reindex(rng, t, scope, level):
    spots = []
    for p, s, sc in walk(t, scope):
        if isinstance(s, (Q, Leaf, DGrad, Grad)):
            for pos, (v, d) in enumerate(zip(s.ix, ix_dims(s))):
                spots += [(p, s, pos, w) for w, dw in sc.items() if dw == d and w != v]
    spot = _pick(rng, spots)
    if spot:
        p, s, pos, w = spot
        new = replace(s, ix=s.ix[:pos] + (w,) + s.ix[pos + 1:])
        return put(t, p, new), f"index swap {show(s)} -> {show(new)}"


def c_wrong_sum(rng, t, scope, level):
    spots = [(p, s, v) for p, s, sc in walk(t, scope) if isinstance(s, Sum) and uses(s.body, s.var)
             for v, d in sc.items() if d == s.dim and v != s.var and uses(s.body, v)]
    spot = _pick(rng, spots)
    if spot:
        p, s, v = spot
        moved = replace(s, body=rename(s.body, {v: s.var, s.var: v}))
        return put(t, p, moved), f"sum moved across indices: {v} <-> {s.var} under Σ_{s.var}"


def c_drop_factor(rng, t, scope, level):
    spot = _pick(rng, [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, (Mul, Div))])
    if spot:
        p, s = spot
        keep, gone = (s.a, s.b) if rng.random() < 0.5 or isinstance(s, Div) else (s.b, s.a)
        return put(t, p, keep), f"dropped factor {show(gone)}"


def c_drop_term(rng, t, scope, level):
    spot = _pick(rng, [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, Add)])
    if spot:
        p, s = spot
        keep, gone = (s.a, s.b) if rng.random() < 0.5 else (s.b, s.a)
        return put(t, p, keep), f"dropped term {show(gone)}"


def c_double(rng, t, scope, level):
    spot = _pick(rng, [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, (Q, Leaf, DGrad, Scalar))])
    if spot and rng.random() < 0.6:
        p, s = spot
        return put(t, p, Mul(s, s)), f"doubled factor {show(s)} -> {show(s)}^2"
    return Mul(Const(2), t), "factor 2"


def c_scale(rng, t, scope, level):
    spots = [p for p, s, _ in walk(t, scope) if s == C]
    if spots and rng.random() < 0.5:
        p = rng.choice(spots)
        if rng.random() < 0.5:
            return put(t, p, ONE), "scale c lost"
        return put(t, p, Pow(C, 2)), "c -> c^2"
    return (Mul(C, t), "times c") if rng.random() < 0.5 else (Div(t, C), "divided by c")


def c_size(rng, t, scope, level):
    spots = [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, Size)]
    d1, d2 = rng.sample(DIMS, 2)
    if spots and rng.random() < 0.7:
        p, s = rng.choice(spots)
        other = rng.choice([d for d in DIMS if d != s.dim])
        return put(t, p, Size(other)), f"size |{s.dim}| -> |{other}|"
    if rng.random() < 0.5:
        return Div(Mul(t, Size(d1)), Size(d2)), f"times |{d1}|/|{d2}|"
    return Mul(t, Size(d1)), f"times |{d1}|"


def c_mask(rng, t, scope, level):
    masks = [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, Mask) and s.i != s.j]
    pairs = [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, Q) and ix_dims(s) == ("n", "n") and s.ix[0] != s.ix[1]]
    if masks and rng.random() < 0.6:
        p, s = rng.choice(masks)
        if rng.random() < 0.6:
            return put(t, p, Mask(s.j, s.i)), f"mask transposed {show(s)}"
        return put(t, p, ONE), f"mask {show(s)} dropped"
    if pairs:
        p, s = rng.choice(pairs)
        return put(t, p, Mul(Mask(s.ix[1], s.ix[0]), s)), f"mask on the wrong side: M[{s.ix[1]},{s.ix[0]}]·{show(s)}"


def c_sign(rng, t, scope, level):
    return neg(t), "sign flipped"


SIBLINGS = [("alpha", "dS", "b", "s", "e"), ("q", "k", "dQ", "dK"), ("u", "o", "dV", "v"),
            ("baseline", "baseline_fused", "responsibility"), ("z", "p")]


def c_sibling(rng, t, scope, level):
    spots = []
    for p, s, _ in walk(t, scope):
        group = next((g for g in SIBLINGS if isinstance(s, Q) and s.name in g), ())
        spots += [(p, s, other) for other in group if other != s.name and level in QLEVELS[other]]
        if isinstance(s, (Leaf, DGrad)) and s.name in ("WQ", "WK", "q", "k"):
            swap = {"WQ": "WK", "WK": "WQ", "q": "k", "k": "q"}[s.name]
            if isinstance(s, Leaf) or swap in LEVELS[level]:
                spots.append((p, s, swap))
    spot = _pick(rng, spots)
    if spot:
        p, s, other = spot
        return put(t, p, replace(s, name=other)), f"{s.name} -> {other} in {show(s)}"


def c_split_sum(rng, t, scope, level):
    spots = [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, Sum) and isinstance(s.body, Mul)
             and uses(s.body.a, s.var) and uses(s.body.b, s.var)]
    spot = _pick(rng, spots)
    if spot:
        p, s = spot
        other = Fresh(t, free=[(v, d) for v, d in scope.items()])(s.dim)
        new = Mul(Sum(s.var, s.dim, s.body.a), Sum(other, s.dim, rename(s.body.b, {s.var: other, other: s.var})))
        return put(t, p, new), f"sum of a product split into a product of sums over {s.var}"


CORRUPTIONS = (c_transpose, c_reindex, c_wrong_sum, c_drop_factor, c_drop_term, c_double, c_scale, c_size,
               c_mask, c_sign, c_sibling, c_split_sum)


# -- truth-preserving rewrites -------------------------------------------------------------------


def definition(s, level, fresh):
    """The model's own definition of a named quantity, one level down (None where it is a leaf)."""
    n, ix = s.name, s.ix
    if n in ("q", "k", "v") and level == "params":
        w, x = {"q": "WQ", "k": "WK", "v": "WV"}[n], fresh("dx")
        return Sum(x, "dx", mul(leaf("X", ix[0], x), leaf(w, x, ix[1])))
    if n == "s" and level in ("qk", "params"):
        h = fresh("dk")
        return mul(C, Sum(h, "dk", mul(q("q", ix[0], h), q("k", ix[1], h))))
    if n == "alpha" and level in SOFT:
        k = fresh("n")
        return Div(mul(Mask(*ix), q("e", *ix)), Sum(k, "n", mul(Mask(ix[0], k), q("e", ix[0], k))))
    if n == "o" and level != "readout":
        k = fresh("n")
        return Sum(k, "n", mul(q("alpha", ix[0], k), q("v", k, ix[1])))
    return _closed_form(n, ix, fresh)


def _closed_form(n, ix, fresh):
    k, e, w = fresh("n"), fresh("dv"), fresh("m")
    forms = {
        "b": lambda i, j: Sum(e, "dv", mul(q("u", i, e), q("v", j, e))),
        "baseline": lambda i: Sum(k, "n", mul(q("alpha", i, k), q("b", i, k))),
        "dS": lambda i, j: mul(q("alpha", i, j), sub(q("b", i, j), q("baseline", i))),
        "dV": lambda j, a: Sum(k, "n", mul(q("alpha", k, j), q("u", k, a))),
        "dQ": lambda i, a: mul(C, Sum(k, "n", mul(q("dS", i, k), q("k", k, a)))),
        "dK": lambda j, a: mul(C, Sum(k, "n", mul(q("dS", k, j), q("q", k, a)))),
        "baseline_fused": lambda i: Sum(e, "dv", mul(q("u", i, e), q("o", i, e))),
        "responsibility": lambda j: Sum(k, "n", q("alpha", k, j)),
        "z": lambda i, y: Sum(e, "dv", mul(leaf("WO", e, y), q("o", i, e))),
        "u": lambda i, a: Div(Sum(w, "m", mul(leaf("WO", a, w), _ce_dz(i, w))), Size("n")),
    }
    return forms[n](*ix) if n in forms else None


def r_unfold(rng, claim, side):
    t, fresh = getattr(claim, side), Fresh(claim.lhs, claim.rhs, free=claim.free)
    spots = [(p, s) for p, s, _ in walk(t, {}) if isinstance(s, Q)]
    spots = [(p, s, d) for p, s in spots if (d := definition(s, claim.level, fresh)) is not None]
    spot = _pick(rng, spots)
    if spot:
        p, s, d = spot
        return replace(claim, **{side: put(t, p, d)}), f"unfold {show(s)} on the {side_name(side)}"


def r_commute(rng, claim, side):
    t = getattr(claim, side)
    spot = _pick(rng, [(p, s) for p, s, _ in walk(t, {}) if isinstance(s, (Add, Mul))])
    if spot:
        p, s = spot
        return replace(claim, **{side: put(t, p, replace(s, a=s.b, b=s.a))}), "commute an operation"


def r_mask_in(rng, claim, side):
    t = getattr(claim, side)
    spots = [(p, s) for p, s, _ in walk(t, {}) if isinstance(s, Q) and s.name == "alpha"]
    spot = _pick(rng, spots) if claim.level in SOFT else None
    if spot:
        p, s = spot
        return replace(claim, **{side: put(t, p, Mul(Mask(*s.ix), s))}), f"mask on the right side of {show(s)}"


def r_pull_out(rng, claim, side):
    t = getattr(claim, side)
    spots = [(p, s, k) for p, s, _ in walk(t, {}) if isinstance(s, Sum) and isinstance(s.body, Mul)
             for k in ("a", "b") if not uses(getattr(s.body, k), s.var)]
    spot = _pick(rng, spots)
    if spot:
        p, s, k = spot
        other = "b" if k == "a" else "a"
        new = Mul(getattr(s.body, k), replace(s, body=getattr(s.body, other)))
        return replace(claim, **{side: put(t, p, new)}), f"factor {show(getattr(s.body, k))} pulled out of Σ_{s.var}"


def r_both(rng, claim, side):
    """Scale, shift or sum both sides alike."""
    choice = rng.randrange(3)
    if choice == 0:
        f = rng.choice([C, Size(rng.choice(DIMS)), Const(3)])
        return replace(claim, lhs=Mul(f, claim.lhs), rhs=Mul(f, claim.rhs)), f"both sides times {show(f)}"
    if choice == 1:
        f = mul(C, Size(rng.choice(DIMS)))
        return replace(claim, lhs=Add(claim.lhs, f), rhs=Add(claim.rhs, f)), f"{show(f)} added to both sides"
    if claim.free:
        var, dim = rng.choice(claim.free)
        free = tuple(p for p in claim.free if p[0] != var)
        return replace(claim, free=free, lhs=Sum(var, dim, claim.lhs), rhs=Sum(var, dim, claim.rhs)), f"both sides summed over {var}"


def side_name(side):
    return "derived side" if side == "lhs" else "closed side"


REWRITES = (r_unfold, r_unfold, r_commute, r_mask_in, r_pull_out, r_both)


# -- generation ----------------------------------------------------------------------------------

SCALARS = ("c", "eta")


def variables(level, scalars=True):
    """What a claim at this level may differentiate by: its free leaves, the readout's, c and eta."""
    out = sorted(LEVELS[level] | {"WO", "Y"})
    return out + (["c"] if level in ("qk", "params") and scalars else [])


def _var_ix(var, fresh, share=()):
    return tuple(share[n] if n < len(share) else fresh(d) for n, d in enumerate(LEAVES.get(var, ())))


def _from_template(rng, index, pool):
    t = rng.choice(pool)
    level = rng.choice(t.levels)
    loss = "ce" if t.loss == "ce" or rng.random() < 0.15 else "any"
    return Claim(index, level, t.free, t.lhs, t.rhs, f"{t.name} [{level}]", loss, t.mask_algebra), t


def _lift(rng, index):
    claim, t = _from_template(rng, index, LIFTABLE)
    var = rng.choice(variables(claim.level) + ["eta"])
    ix = _var_ix(var, Fresh(claim.lhs, claim.rhs, free=claim.free))
    rhs = Grad(claim.rhs, var, ix) if involves_model(claim.rhs) else ZERO
    return replace(claim, free=claim.free + tuple(zip(ix, LEAVES.get(var, ()))), lhs=Grad(claim.lhs, var, ix),
                   rhs=rhs, description=f"d/d{var} of both sides of {claim.description}"), t


def _hessian(rng, index):
    """Symmetry of a second derivative of L, or one that vanishes because L does not depend on c or eta."""
    level = rng.choice(ALL)
    xs = sorted(LEVELS[level]) + (["c"] if level in ("qk", "params") else [])
    x, y = rng.choice(xs), rng.choice(xs)
    fresh = Fresh()
    p = _var_ix(x, fresh)
    share = p[:1] if rng.random() < 0.3 and LEAVES.get(y, ("",))[0] == LEAVES.get(x, ("-",))[0] else ()
    qv = _var_ix(y, fresh, share)
    free = tuple(dict.fromkeys(list(zip(p, LEAVES.get(x, ()))) + list(zip(qv, LEAVES.get(y, ())))))
    loss = "ce" if level == "readout" or rng.random() < 0.15 else "any"
    if rng.random() < 0.25:
        z = "eta" if level in ("qk", "params") or rng.random() < 0.5 else "c"
        return Claim(index, level, tuple(zip(p, LEAVES.get(x, ()))), Grad(DGrad(x, p), z, ()), ZERO,
                     f"d(dL/d{x})/d{z} = 0 [{level}]", loss), None
    return Claim(index, level, free, Grad(DGrad(x, p), y, qv), Grad(DGrad(y, qv), x, p),
                 f"Hessian symmetry d2L/d{x} d{y} [{level}]", loss), None


FAMILIES = ("paper closed forms", "first derivatives", "normalisations", "second derivatives",
            "differentiated identities", "Hessian symmetry")


def _base(rng, index):
    r = rng.random()
    if r < 0.3:
        claim, t = _from_template(rng, index, PAPER)
    elif r < 0.45:
        claim, t = _from_template(rng, index, FIRST_ORDER)
    elif r < 0.6:
        claim, t = _from_template(rng, index, ALGEBRA)
    elif r < 0.7:
        claim, t = _from_template(rng, index, SECOND_ORDER)
    else:
        claim, t = _lift(rng, index) if r < 0.87 else _hessian(rng, index)
    family = FAMILIES[sum(r >= edge for edge in (0.3, 0.45, 0.6, 0.7, 0.87))]
    return replace(claim, family=family), t


def problems(claim):
    """Why a generated claim is ill-formed (empty when it is a well-typed identity)."""
    free, out = dict(claim.free), []
    if len(free) != len(claim.free):
        out.append("repeated free index")
    if not involves_model(claim.lhs):
        out.append("derived side is a constant")
    for side in (claim.lhs, claim.rhs):
        for _, s, sc in walk(side, free):
            out += _node_problems(s, sc, claim.level)
    return out


def _node_problems(s, sc, level):
    out = []
    if isinstance(s, Grad) and not involves_model(s.f):
        out.append(f"{show(s)}: derivative of a constant")
    if isinstance(s, (Kron, Mask)):
        dims = {sc.get(s.i), sc.get(s.j)}
        if None in dims or len(dims) != 1 or (isinstance(s, Mask) and dims != {"n"}):
            out.append(f"{show(s)}: indices out of scope or of different ranges")
    elif hasattr(s, "ix"):
        want = ix_dims(s)
        if len(want) != len(s.ix) or any(sc.get(v) != d for v, d in zip(s.ix, want)):
            out.append(f"{show(s)}: index out of scope or of the wrong range")
    if isinstance(s, Q) and level not in QLEVELS[s.name]:
        out.append(f"{s.name} is not defined the same way at level {level}")
    if isinstance(s, DGrad) and s.name not in LEVELS[level] | set(SCALARS):
        out.append(f"{s.name} is not free at level {level}")
    if isinstance(s, Leaf) and s.name not in LEVELS[level] | {"WO", "Y", "Delta"}:
        out.append(f"leaf {s.name} is not part of the forward at level {level}")
    if isinstance(s, Div) and not involves_model(s.a):
        out.append(f"{show(s)}: constant numerator")
    if isinstance(s, Sum) and s.var in sc:
        out.append(f"Σ_{s.var} shadows an index")
    return out


def _rewrite(rng, claim):
    for _ in range(rng.choice((0, 1, 1, 2, 2, 3))):
        for _ in range(5):
            step = rng.choice(REWRITES)(rng, claim, rng.choice(("lhs", "rhs")))
            if step and not problems(step[0]):
                claim = replace(step[0], description=f"{step[0].description}; {step[1]}")
                break
    return claim


def _corrupt(rng, claim):
    for _ in range(20):
        side = "rhs" if involves_model(claim.rhs) and rng.random() < 0.7 else "lhs"  # a zero side stays zero
        step = rng.choice(CORRUPTIONS)(rng, getattr(claim, side), dict(claim.free), claim.level)
        if step and step[0] != getattr(claim, side):
            new = replace(claim, **{side: step[0]}, intended=False,
                          description=f"{claim.description}; corrupt {side_name(side)}: {step[1]}")
            if not problems(new):
                return new
    return claim


def generate_one(seed, index):
    """Claim number `index` of the run with this seed (independent of every other claim)."""
    rng = random.Random(f"derive.fuzz:{seed}:{index}")
    claim, template = _base(rng, index)
    corrupt = rng.random() < 0.5
    if corrupt and template is not None and template.mutants and claim.rhs == template.rhs and rng.random() < 0.4:
        desc, wrong = rng.choice(template.mutants)
        claim, corrupt = replace(claim, rhs=wrong, intended=False, description=f"{claim.description}; paper mutant {desc}"), False
    claim = _rewrite(rng, claim)
    claim = _corrupt(rng, claim) if corrupt else claim
    bad = problems(claim)
    if bad:
        raise AssertionError(f"generator produced an ill-formed claim {claim.description}: {bad}")
    return claim


def generate(n, seed):
    return [generate_one(seed, i) for i in range(n)]


# -- running the paths against the oracle --------------------------------------------------------

PATHS = ("general", "fixed", "rational")
# Small to large, dimensions pairwise distinct in each: most false claims fail fast at n = 2; what survives
# it meets n = 3 (the quick profile's distinct size), where the exact zero test of a false claim can be slow.
FIXED_GRID = ({"n": 2, "dk": 3, "dv": 4, "m": 5, "dx": 6}, {"n": 3, "dk": 4, "dv": 5, "m": 7, "dx": 6})
BUDGET_S = 8.0  # seconds per path per claim: over it the path is undecided (the fixed path's exact zero test is the slow one)
PROGRESS_EVERY = 50


def _status(out):
    return getattr(out, "status", None) or ("proved" if out.equal else "undecided")


def _verdict(status, true):
    return (status == "proved" and not true) or (status == "disproved" and true)


def run_one(claim, paths, seed, budget_s=BUDGET_S):
    """The oracle's labels and every selected path's outcome, masked and unmasked, for one claim."""
    from derive.model import ShapeError
    from derive.prove import run_path
    from numeric import oracle

    identity = claim.identity()
    options = {"grid": list(FIXED_GRID), "points": 2, "seed": seed * 100_003 + claim.index, "budget_s": budget_s}
    row = {"index": claim.index, "name": claim.name, "family": claim.family, "level": claim.level, "description": claim.description,
           "claim": claim.text(), "intended": claim.intended, "cases": []}
    for masked in (False, True):
        lab = oracle.label(claim, masked, seed * 100_003 + claim.index)
        case = {"masked": masked, "true": lab["true"], "gap": lab["gap"], "one_hot_only": lab["one_hot_only"], "paths": {}}
        for path in paths:
            try:
                out = run_path(path, identity, masked, claim.name, options)
                res = {"status": _status(out), "seconds": out.seconds, "measured": out.measured[:400]}
            except ShapeError as exc:  # the generator's bug, not the path's
                res = {"status": "ill-formed", "seconds": 0.0, "measured": str(exc)[:400]}
            res["false_verdict"] = _verdict(res["status"], lab["true"])
            case["paths"][path] = res
        row["cases"].append(case)
    return row


def _work(job):
    seed, index, paths, budget_s = job
    return run_one(generate_one(seed, index), paths, seed, budget_s)


def _rows(n, seed, paths, jobs, budget_s):
    work = [(seed, i, tuple(paths), budget_s) for i in range(n)]
    if jobs <= 1:
        yield from map(_work, work)
        return
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(jobs, initializer=_quiet_worker) as pool:
        yield from pool.imap_unordered(_work, work, chunksize=1)


def _quiet_worker():
    import torch

    torch.set_num_threads(1)  # one core per worker (2-core machines)


def summarise(rows, paths, seconds):
    """The run's figures. A case is one claim in one setting (unmasked, masked): the unit a path decides
    and the oracle labels; `true` / `false` count claims (true: true in both settings)."""
    cases = [(r, c) for r in rows for c in r["cases"]]
    true_cases = [c for _, c in cases if c["true"]]
    closest = min(((c["gap"], r) for r, c in cases if not c["true"]), key=lambda x: x[0], default=(None, {}))
    n_true = sum(all(c["true"] for c in r["cases"]) for r in rows)
    return {
        "claims": len(rows), "true": n_true, "false": len(rows) - n_true, "cases": len(cases),
        "cases_true": len(true_cases), "cases_false": len(cases) - len(true_cases),
        "claims_intended_false": sum(not r["intended"] for r in rows),
        "one_hot_only": sum(c["one_hot_only"] for _, c in cases),
        "margin": _margin(), "closest_false_gap": closest[0],
        "closest_false_claim": f"{closest[1].get('name')}: {closest[1].get('description')}" if closest[1] else None,
        "largest_true_gap": max((c["gap"] for c in true_cases), default=None),
        "paths": {p: _path_summary(p, cases, len(rows)) for p in paths},
        "families": _families(rows, paths),
        "false_verdicts": [_false_verdict(r, c, p) for r, c in cases for p in paths if c["paths"][p]["false_verdict"]],
        "ill_formed": sum(c["paths"][p]["status"] == "ill-formed" for _, c in cases for p in paths),
        "seconds": round(seconds, 2), "claims_per_second": round(len(rows) / seconds, 3) if seconds else None}


def _margin():
    from numeric.oracle import MARGIN

    return MARGIN


def _rate(hits, total):
    return round(hits / total, 4) if total else None


def _path_summary(path, cases, n_claims):
    res = [(c["true"], c["paths"][path]) for _, c in cases]
    count = lambda status, truth=None: sum(r["status"] == status and (truth is None or t == truth) for t, r in res)  # noqa: E731
    seconds = sum(r["seconds"] for _, r in res)
    n_true = sum(t for t, _ in res)
    return {"proved": count("proved"), "disproved": count("disproved"), "undecided": count("undecided"),
            "ill_formed": count("ill-formed"), "timeouts": sum("budget" in r["measured"] for _, r in res),
            "true_decided_rate": _rate(count("proved", True), n_true),
            "false_decided_rate": _rate(count("disproved", False), len(res) - n_true),
            "false_verdicts": sum(r["false_verdict"] for _, r in res),
            "seconds": round(seconds, 2), "claims_per_second": round(n_claims / seconds, 3) if seconds else None}


def _families(rows, paths):
    """Per generator family: claims, true claims, and each path's share of cases decided correctly."""
    out = {}
    for family in dict.fromkeys(r["family"] for r in rows):
        mine = [r for r in rows if r["family"] == family]
        cases = [c for r in mine for c in r["cases"]]
        d = {"claims": len(mine), "true": sum(all(c["true"] for c in r["cases"]) for r in mine)}
        for p in paths:
            right = sum(c["paths"][p]["status"] == ("proved" if c["true"] else "disproved") for c in cases)
            d[f"{p}_decided_rate"] = _rate(right, len(cases))
        out[family] = d
    return out


def _false_verdict(row, case, path):
    res = case["paths"][path]
    return {"claim": row["name"], "path": path, "masked": case["masked"], "verdict": res["status"],
            "truth": "true" if case["true"] else "false", "gap": case["gap"], "level": row["level"], "family": row["family"],
            "description": f"{row['description']}: {row['claim']}", "measured": res["measured"]}


def run(n=2000, seed=0, paths=PATHS, jobs=1, log=print, budget_s=BUDGET_S):
    """Generate n claims, label them, run the paths; returns the summary dict (see `summarise`)."""
    paths = tuple(paths)
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise ValueError(f"unknown proof path(s) {unknown}; expected some of {PATHS}")
    t0, rows = time.perf_counter(), []
    for row in _rows(n, seed, paths, jobs, budget_s):
        rows.append(row)
        if len(rows) % PROGRESS_EVERY == 0 or len(rows) == n:
            _progress(rows, n, paths, time.perf_counter() - t0, log)
    rows.sort(key=lambda r: r["index"])
    summary = summarise(rows, paths, time.perf_counter() - t0)
    summary.update(seed=seed, selected_paths=list(paths), jobs=jobs, fixed_grid=list(FIXED_GRID), budget_s=budget_s, rows=rows)
    return summary


def _progress(rows, n, paths, seconds, log):
    cases = [c for r in rows for c in r["cases"]]
    bad = sum(c["paths"][p]["false_verdict"] for c in cases for p in paths)
    true = sum(c["true"] for c in cases)
    log(f"fuzz: {len(rows)}/{n} claims  {len(rows) / seconds:.2f} claims/s  cases true {true} false {len(cases) - true}  "
        f"false verdicts {bad}")


def report(summary, log=print):
    """The final summary, as text."""
    o = summary
    log(f"fuzz: {o['claims']} claims ({o['true']} true in both settings, {o['false']} false in one or both), "
        f"{o['cases']} unmasked/masked cases ({o['cases_true']} true, {o['cases_false']} false; {o['one_hot_only']} true "
        f"only for one-hot targets) in {o['seconds']} s, {o['claims_per_second']} claims/s")
    log(f"oracle: margin {o['margin']:g} relative; largest error on a true case {_g(o['largest_true_gap'])}; "
        f"closest false case {_g(o['closest_false_gap'])} ({o['closest_false_claim']})")
    for path, s in summary["paths"].items():
        log(f"  {path:8s} proved {s['proved']:5d}  disproved {s['disproved']:5d}  undecided {s['undecided']:5d} "
            f"(timeouts {s['timeouts']})  decided: true {_pct(s['true_decided_rate'])} false {_pct(s['false_decided_rate'])}  "
            f"false verdicts {s['false_verdicts']}  {s['claims_per_second']} claims/s")
    for v in summary["false_verdicts"]:
        log(f"FALSE VERDICT {v['path']} {v['verdict']} a {v['truth']} identity ({'masked' if v['masked'] else 'unmasked'}, "
            f"gap {v['gap']:.2g}): {v['claim']} {v['description'][:400]}")


def _g(x):
    return "n/a" if x is None else f"{x:.3g}"


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m derive.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="number of claims (default 2000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ",".join(PATHS))
    ap.add_argument("--out", help="write the summary (and every claim's outcomes) as JSON here")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: one per CPU)")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help=f"seconds per path per claim (default {BUDGET_S:g}; over it: undecided)")
    args = ap.parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    if args.n < 1 or args.jobs < 1 or any(p not in PATHS for p in paths) or not paths:
        ap.error(f"--n and --jobs must be >= 1 and --paths a subset of {','.join(PATHS)}")
    summary = run(args.n, args.seed, paths, args.jobs, budget_s=args.budget)
    report(summary)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(summary, fh, indent=1)
    return 1 if summary["false_verdicts"] else 0


if __name__ == "__main__":
    sys.exit(main())
