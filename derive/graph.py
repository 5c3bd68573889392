"""An expression DAG with exact values modulo a prime, and derivatives of any order.

Every node is built with its value in the field F_p, p = 2**61 - 1, computed at construction:

- `const`: an exact rational (kept as a `Fraction` too, for re-evaluation over the reals);
- `leaf`: a model entry with an exact rational value num/den mapped into F_p;
- `add`, `sub`, `neg`, `mul`, `inv` (x / y is x * inv(y));
- `exp`, `log`: formal generators. Each distinct argument (identified by its value mod p) gets
  its own random nonzero field value, with d exp(x) = exp(x) dx and d log(x) = dx / x.

`Graph.grad(f, label)` differentiates in reverse mode: one sweep over f's DAG builds the adjoint
of every leaf at once as new nodes (memoised per f), so the derivative is itself a node and can
be differentiated again exactly. A denominator that vanishes mod p raises `DenominatorVanishes`
(the caller resamples the point); an exact zero constant in a denominator is a genuine division
by zero (`ZeroDivisionError`).

`RealEvaluator` re-evaluates a DAG over the reals with interval arithmetic (mpmath, real exp
and log), so the value of any node, derivatives of any order included, gets a rigorous
enclosure at the point's exact rationals; `float_value` does the same in plain float64.
"""
from __future__ import annotations

import math
from fractions import Fraction

P = (1 << 61) - 1  # a Mersenne prime

CONST, LEAF, ADD, SUB, NEG, MUL, INV, EXP, LOG = range(9)
OP_NAMES = ("const", "leaf", "add", "sub", "neg", "mul", "inv", "exp", "log")


class DenominatorVanishes(ZeroDivisionError):
    """A denominator is 0 mod p at the sampled point (resample; a true zero is ZeroDivisionError)."""


class Uncertifiable(ArithmeticError):
    """The real (interval) evaluation cannot proceed: a denominator or log argument not bounded away from 0."""


def field(q) -> int:
    """An exact rational (int, Fraction, float) as an element of F_p."""
    q = Fraction(q)
    den = q.denominator % P
    if den == 0:
        raise DenominatorVanishes(f"the denominator of {q} is 0 mod p")
    return q.numerator * pow(den, P - 2, P) % P


class Node:
    """One node of the DAG: op, up to two children, its value mod p, and op data.

    data: the Fraction of a const; (label, Fraction) of a leaf. Nodes compare by identity."""

    __slots__ = ("op", "a", "b", "val", "data")

    def __init__(self, op, a, b, val, data=None):
        self.op = op
        self.a = a
        self.b = b
        self.val = val
        self.data = data

    def __repr__(self):
        if self.op == CONST:
            return f"const({self.data})"
        if self.op == LEAF:
            return f"leaf({self.data[0]})"
        return f"<{OP_NAMES[self.op]} {self.val}>"

    # arithmetic with nodes and exact numbers
    def __add__(self, other):
        return add(self, lift(other))

    def __radd__(self, other):
        return add(lift(other), self)

    def __sub__(self, other):
        return sub(self, lift(other))

    def __rsub__(self, other):
        return sub(lift(other), self)

    def __mul__(self, other):
        return mul(self, lift(other))

    def __rmul__(self, other):
        return mul(lift(other), self)

    def __truediv__(self, other):
        return div(self, lift(other))

    def __rtruediv__(self, other):
        return div(lift(other), self)

    def __neg__(self):
        return neg(self)

    def __pos__(self):
        return self

    def __pow__(self, k):
        if isinstance(k, Node):
            if k.op != CONST:
                raise TypeError("only constant integer powers are supported")
            k = k.data
        if Fraction(k).denominator != 1:
            raise TypeError(f"only integer powers are supported, got {k}")
        k = int(k)
        base = self if k >= 0 else inv(self)
        out, k = ONE, abs(k)
        while k:
            if k & 1:
                out = mul(out, base)
            k >>= 1
            if k:
                base = mul(base, base)
        return out


def const(q) -> Node:
    q = Fraction(q)
    if q == 0:
        return ZERO
    if q == 1:
        return ONE
    return Node(CONST, None, None, field(q), q)


ZERO = Node(CONST, None, None, 0, Fraction(0))
ONE = Node(CONST, None, None, 1, Fraction(1))


def lift(x) -> Node:
    if isinstance(x, Node):
        return x
    if isinstance(x, (int, Fraction, float)):
        return const(x)
    raise TypeError(f"cannot use {type(x).__name__} {x!r} in an expression")


def is_zero(x: Node) -> bool:
    return x is ZERO or (x.op == CONST and x.data == 0)


def add(a: Node, b: Node) -> Node:
    if a.op == CONST:
        if b.op == CONST:
            return const(a.data + b.data)
        if a.data == 0:
            return b
    elif b.op == CONST and b.data == 0:
        return a
    return Node(ADD, a, b, (a.val + b.val) % P)


def sub(a: Node, b: Node) -> Node:
    if b.op == CONST:
        if a.op == CONST:
            return const(a.data - b.data)
        if b.data == 0:
            return a
    elif a.op == CONST and a.data == 0:
        return neg(b)
    return Node(SUB, a, b, (a.val - b.val) % P)


def neg(a: Node) -> Node:
    if a.op == CONST:
        return const(-a.data)
    if a.op == NEG:
        return a.a
    return Node(NEG, a, None, (-a.val) % P)


def mul(a: Node, b: Node) -> Node:
    if a.op == CONST:
        if b.op == CONST:
            return const(a.data * b.data)
        q = a.data
        if q == 0:
            return ZERO
        if q == 1:
            return b
        if q == -1:
            return neg(b)
    elif b.op == CONST:
        q = b.data
        if q == 0:
            return ZERO
        if q == 1:
            return a
        if q == -1:
            return neg(a)
    return Node(MUL, a, b, a.val * b.val % P)


def inv(a: Node) -> Node:
    if a.op == CONST:
        if a.data == 0:
            raise ZeroDivisionError("division by an exact zero")
        return const(1 / a.data)
    if a.val == 0:
        raise DenominatorVanishes("a denominator is 0 mod p at this point")
    return Node(INV, a, None, pow(a.val, P - 2, P))


def div(a: Node, b: Node) -> Node:
    return mul(a, inv(b))


def topo(roots, consts=False, known=()):
    """The nodes reachable from `roots`, children before parents (constants only if asked); nodes in `known`
    (already evaluated) are neither listed nor traversed."""
    seen = set()
    order = []
    stack = [(r, False) for r in reversed(roots)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if node in seen or node in known:
            continue
        seen.add(node)
        stack.append((node, True))
        for child in (node.b, node.a):
            if child is not None and child not in seen and child not in known and (consts or child.op != CONST):
                stack.append((child, False))
    if not consts:
        order = [n for n in order if n.op != CONST]
    return order


# num's range for a denominator den, per domain: num / den then lies in the domain.
SAMPLE_RANGES = {"real": lambda d: (-d, d), "positive": lambda d: (1, d), "nonnegative": lambda d: (0, d),
                 "unit": lambda d: (1, d - 1), "negative": lambda d: (-d, -1), "nonpositive": lambda d: (-d, 0)}


class Graph:
    """The nodes of one random point: its leaves, its exp/log generators and the gradient memo.

    `sample(positive)` draws a leaf value num/den with den uniform in [2**29, 2**30] and num uniform
    in [-den, den] (or [1, den] when positive): for each den at most one num maps to a given element
of F_p, so no element has probability above 2**-29 (the Schwartz–Zippel bound's per-entry term)."""

    DEN_LO, DEN_HI = 1 << 29, 1 << 30

    def __init__(self, rng, values=None):
        self.rng = rng
        self.values = dict(values or {})  # label -> Fraction fixed in advance (a witness replayed)
        self.leaves = {}  # label -> Node
        self._generators = {}  # (op, argument value mod p) -> field value
        self._adjoints = {}  # f -> {label: adjoint node}

    def sample(self, positive=False, domain="real") -> Fraction:
        """num/den in the domain (derive.mechanisms.base.DOMAINS): num's range has at least den - 1 values, so the
        per-entry bound 2**-29 holds in every domain."""
        den = self.rng.randint(self.DEN_LO, self.DEN_HI)
        lo, hi = SAMPLE_RANGES["positive" if positive else domain](den)
        return Fraction(self.rng.randint(lo, hi), den)

    def leaf(self, label, positive=False, domain="real") -> Node:
        node = self.leaves.get(label)
        if node is None:
            q = self.values.get(label)
            if q is None:
                q = self.values[label] = self.sample(positive, domain)
            q = Fraction(q)
            node = self.leaves[label] = Node(LEAF, None, None, field(q), (label, q))
        return node

    def _generator(self, op, x: Node) -> int:
        key = (op, x.val)
        g = self._generators.get(key)
        if g is None:
            g = self._generators[key] = self.rng.randint(1, P - 1)
        return g

    def exp(self, x) -> Node:
        x = lift(x)
        return Node(EXP, x, None, self._generator(EXP, x))

    def log(self, x) -> Node:
        x = lift(x)
        if x.op == CONST and x.data <= 0:
            raise ValueError(f"log of the non-positive constant {x.data}")
        return Node(LOG, x, None, self._generator(LOG, x))

    def gradients(self, f) -> dict:
        """{leaf label: d f / d leaf} for every leaf f depends on, in one reverse sweep (memoised)."""
        f = lift(f)
        cached = self._adjoints.get(f)
        if cached is not None:
            return cached
        out = {}
        if f.op != CONST:
            adj = {f: ONE}
            pop = adj.pop

            def acc(x, term):
                if x.op == CONST or is_zero(term):
                    return
                prev = adj.get(x)
                adj[x] = term if prev is None else add(prev, term)

            for node in reversed(topo([f])):
                g = pop(node, None)
                if g is None:
                    continue
                op = node.op
                if op == LEAF:
                    out[node.data[0]] = g
                elif op == ADD:
                    acc(node.a, g)
                    acc(node.b, g)
                elif op == SUB:
                    acc(node.a, g)
                    acc(node.b, neg(g))
                elif op == NEG:
                    acc(node.a, neg(g))
                elif op == MUL:
                    acc(node.a, mul(g, node.b))
                    acc(node.b, mul(g, node.a))
                elif op == INV:
                    acc(node.a, neg(mul(g, mul(node, node))))
                elif op == EXP:
                    acc(node.a, mul(g, node))
                elif op == LOG:
                    acc(node.a, div(g, node.a))
        self._adjoints[f] = out
        return out

    def grad(self, f, label) -> Node:
        """d f / d (the leaf called `label`): a node, exact, differentiable again."""
        return self.gradients(f).get(label, ZERO)


def leaves_of(roots) -> dict:
    """{label: Fraction} of the leaves the roots depend on."""
    return {n.data[0]: n.data[1] for n in topo(list(roots)) if n.op == LEAF}


class RealEvaluator:
    """Enclosures of node values over the reals (real exp and log), by interval arithmetic at `prec` bits.

    Raises `Uncertifiable` where an interval reaches a pole (a denominator or log argument containing 0)."""

    def __init__(self, prec=200):
        from mpmath.ctx_iv import MPIntervalContext

        self.ctx = MPIntervalContext()
        self.ctx.prec = prec
        self.memo = {}

    def _rational(self, q):
        ctx = self.ctx
        return ctx.mpf(q.numerator) / ctx.mpf(q.denominator) if q.denominator != 1 else ctx.mpf(q.numerator)

    def __call__(self, root):
        memo = self.memo
        root = lift(root)
        if root in memo:
            return memo[root]
        ctx = self.ctx
        for node in topo([root], consts=True):
            if node in memo:
                continue
            op = node.op
            if op == CONST:
                v = self._rational(node.data)
            elif op == LEAF:
                v = self._rational(node.data[1])
            elif op == ADD:
                v = memo[node.a] + memo[node.b]
            elif op == SUB:
                v = memo[node.a] - memo[node.b]
            elif op == NEG:
                v = -memo[node.a]
            elif op == MUL:
                v = memo[node.a] * memo[node.b]
            elif op == INV:
                x = memo[node.a]
                if 0 in x:
                    raise Uncertifiable("a denominator's enclosure contains 0")
                v = 1 / x
            elif op == EXP:
                v = ctx.exp(memo[node.a])
            else:  # LOG
                x = memo[node.a]
                if not bounds(x)[0] > 0:
                    raise Uncertifiable("a logarithm's argument is not bounded away from 0")
                v = ctx.log(x)
            lo, hi = bounds(v)
            if lo is None:
                raise Uncertifiable("an enclosure is not finite")
            memo[node] = v
        return memo[root]


def _mpf_fraction(t):
    sign, man, exp, bc = t
    if man == 0:
        return Fraction(0) if exp == 0 else None  # inf / nan
    v = Fraction(man) * (Fraction(2) ** exp)
    return -v if sign else v


def bounds(iv):
    """(lo, hi) of an mpmath interval as exact Fractions, (None, None) if not finite."""
    a, b = iv._mpi_
    lo, hi = _mpf_fraction(a), _mpf_fraction(b)
    if lo is None or hi is None:
        return None, None
    return lo, hi


def float_value(root, memo=None) -> float:
    """The value of a node over the reals in plain float64 (math.exp, math.log)."""
    memo = {} if memo is None else memo
    root = lift(root)
    if root in memo:
        return memo[root]
    for node in topo([root], consts=True, known=memo):
        op = node.op
        if op == CONST:
            v = float(node.data)
        elif op == LEAF:
            v = float(node.data[1])
        elif op == ADD:
            v = memo[node.a] + memo[node.b]
        elif op == SUB:
            v = memo[node.a] - memo[node.b]
        elif op == NEG:
            v = -memo[node.a]
        elif op == MUL:
            v = memo[node.a] * memo[node.b]
        elif op == INV:
            v = 1.0 / memo[node.a]
        elif op == EXP:
            v = math.exp(memo[node.a])
        else:
            v = math.log(memo[node.a])
        memo[node] = v
    return memo[root]
