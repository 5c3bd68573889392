"""Tracing: a function of the model (a mechanism's routing form, its mutants, its question identities, its score)
run on a stand-in for `derive.model.AttentionModel` that builds the fuzzer's grammar terms instead of
expressions. The terms then have both of the grammar's readings: over the model (the proof paths) and in
plain torch (`numeric.oracle`), which computes every named quantity its own way.

What a function may use: the model's named quantities (alpha, b, baseline, u, dV, ...: grammar `Q` nodes),
leaves, sums, exp and log, the mask, Kronecker deltas, sizes, the scalars c, eta and beta, derived_grad,
grad and the loss. Anything else (the setting, a raw mask entry) raises `Untraceable`: the fuzzer then
leaves that function out rather than guess what it means.
"""
from __future__ import annotations

from fractions import Fraction

from derive.fuzz.grammar import (
    QDIMS,
    Add,
    Const,
    DGrad,
    Div,
    Exp,
    Grad,
    Kron,
    Leaf,
    Log,
    Loss,
    Mask,
    Mul,
    Pow,
    Q,
    Scalar,
    Size,
    Sum,
)


class Untraceable(Exception):
    """The function reads something the grammar has no term for."""


def _term(x):
    if isinstance(x, T):
        return x.node
    if isinstance(x, bool):
        raise Untraceable("a boolean")
    if isinstance(x, int):
        return Const(x)
    if isinstance(x, Fraction):
        return Const(x.numerator) if x.denominator == 1 else Div(Const(x.numerator), Const(x.denominator))
    raise Untraceable(f"a constant of type {type(x).__name__}")


class T:
    """A grammar term with Python's arithmetic (what a model expression supports)."""

    __slots__ = ("node",)

    def __init__(self, node):
        self.node = node

    def __add__(self, other):
        return T(Add(self.node, _term(other)))

    def __radd__(self, other):
        return T(Add(_term(other), self.node))

    def __sub__(self, other):
        return T(Add(self.node, Mul(Const(-1), _term(other))))

    def __rsub__(self, other):
        return T(Add(_term(other), Mul(Const(-1), self.node)))

    def __mul__(self, other):
        return T(Mul(self.node, _term(other)))

    def __rmul__(self, other):
        return T(Mul(_term(other), self.node))

    def __truediv__(self, other):
        return T(Div(self.node, _term(other)))

    def __rtruediv__(self, other):
        return T(Div(_term(other), self.node))

    def __neg__(self):
        return T(Mul(Const(-1), self.node))

    def __pow__(self, k):
        if not isinstance(k, int) or k < 1:
            raise Untraceable(f"a power {k!r}")
        return T(Pow(self.node, k))


class Tracer:
    """The model's interface, building terms. `fresh(dim)` names the bound index of each sum."""

    def __init__(self, mechanism, fresh):
        self.mechanism = mechanism
        self._fresh = fresh

    def __getattr__(self, name):
        if name in QDIMS:
            return lambda *ix: T(Q(name, tuple(ix)))
        raise Untraceable(f"the model's {name}")

    @property
    def setting(self):
        raise Untraceable("the model's setting")

    c = property(lambda self: T(Scalar("c")))
    eta = property(lambda self: T(Scalar("eta")))
    beta = property(lambda self: T(Scalar("beta")))

    def leaf(self, name, *ix):
        return T(Leaf(name, tuple(ix)))

    def sum(self, dim, body):
        var = self._fresh(dim)
        return T(Sum(var, dim, _term(body(var))))

    def exp(self, x):
        return T(Exp(_term(x)))

    def log(self, x):
        return T(Log(_term(x)))

    def size(self, dim):
        return T(Size(dim))

    def mask(self, i, j):
        return T(Mask(i, j))

    def delta(self, i, j):
        return T(Kron(i, j))

    def derived_grad(self, name, *ix):
        return T(DGrad(name, tuple(ix)))

    def grad(self, f, name, *ix):
        return T(Grad(_term(f), name, tuple(ix)))

    def loss(self):
        return T(Loss())


def trace(fn, mechanism, ix, fresh):
    """The term fn(model, *ix) builds, the free indices named `ix`; Untraceable when it reads what the grammar
    cannot say."""
    try:
        return _term(fn(Tracer(mechanism, fresh), *ix))
    except Untraceable:
        raise
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        raise Untraceable(f"{type(exc).__name__}: {exc}") from None
