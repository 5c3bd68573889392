"""The fuzzer's grammar of terms, their reading over the model, and a generated claim."""
from __future__ import annotations

import functools
from dataclasses import dataclass, fields

from derive import mechanisms
from derive.model import LEAVES, LEVELS

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
class Exp:
    a: object


@dataclass(frozen=True)
class Log:
    a: object


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


NODES = (Q, Leaf, Scalar, Size, Const, Kron, Mask, Add, Mul, Div, Pow, Exp, Log, Sum, DGrad, Grad, Loss)
C, ETA, ZERO, ONE = Scalar("c"), Scalar("eta"), Const(0), Const(1)

# Index ranges of the model's named quantities, and the levels where the model and the oracle mean
# the same thing by them (e.g. at the readout level o is free and there is no alpha).


def quantity_dims(axis="n"):
    """Index ranges of the model's named quantities when the weights range over `axis` (keys: n; a gate's
    options: g; experts: e). content[i, j, a] is what option j offers query i (attention: v_j)."""
    return {"s": ("n", axis), "e": ("n", axis), "alpha": ("n", axis), "q": ("n", "dk"), "k": ("n", "dk"),
            "v": ("n", "dv"), "o": ("n", "dv"), "z": ("n", "m"), "p": ("n", "m"), "u": ("n", "dv"),
            "b": ("n", axis), "baseline": ("n",), "dS": ("n", axis), "dV": (axis, "dv"), "dQ": ("n", "dk"),
            "dK": ("n", "dk"), "baseline_fused": ("n",), "responsibility": (axis,), "content": ("n", axis, "dv")}


QDIMS = quantity_dims()
ATT = ("alpha", "scores", "qk", "params")  # levels with an attention forward
SOFT = ("scores", "qk", "params")  # levels where alpha is the softmax of scores
ALL = tuple(LEVELS)
QLEVELS = {name: ATT for name in QDIMS}
QLEVELS.update({"s": SOFT, "e": SOFT, "q": ("qk", "params"), "k": ("qk", "params"), "dQ": ("qk", "params"),
                "dK": ("qk", "params"), "o": ALL, "z": ALL, "p": ALL, "u": ALL})

# -- the same, for any routing mechanism (derive.mechanisms) ---------------------------------------
# The paper's softmax keeps the tables above. Another mechanism's claims live at the levels where its routing
# is computed or free (`mechanism_levels`); its logits s (and e = exp s) are named only where they are a leaf
# (the scores level), since only there do the model and the oracle mean the same thing by them without the
# mechanism's score; the attention quantities q, k, v, dQ, dK only for mechanisms whose options are keys.
ATTENTION_ONLY = ("q", "k", "v", "dQ", "dK")


def is_attention(mech):
    """Options are the keys and the content is the values v (softmax, sigmoid, linear, SSD)."""
    return mech.axis == "n" and mech.content is None and mech.logit_leaf == "s"


def mechanism_levels(name):
    """The levels at which a mechanism's claims are drawn: where its logits are free or computed."""
    if name == mechanisms.PAPER:
        return ALL
    mech = mechanisms.get(name)
    if is_attention(mech):
        return SOFT
    return tuple(level for level in SOFT if any(level in levels for levels in mech.free.values()))


def qdims(name, mechanism=mechanisms.PAPER):
    """Index ranges of a named quantity under a mechanism (None: not a quantity)."""
    if mechanism == mechanisms.PAPER:
        return QDIMS.get(name)
    return quantity_dims(mechanisms.get(mechanism).axis).get(name)


def qlevels(name, mechanism=mechanisms.PAPER):
    """The levels at which the model and the oracle define the quantity `name` alike, under a mechanism."""
    if mechanism == mechanisms.PAPER:
        return QLEVELS.get(name, ())
    mech, levels = mechanisms.get(mechanism), mechanism_levels(mechanism)
    if name in ("s", "e"):
        return tuple(level for level in levels if level == "scores")
    if name in ATTENTION_ONLY:
        return tuple(level for level in QLEVELS[name] if level in levels) if is_attention(mech) else ()
    return levels if name in QDIMS else ()


def leaf_dims(name, mechanism=mechanisms.PAPER):
    """Index ranges of a leaf of the model or of the mechanism (None: no such leaf)."""
    return {**LEAVES, **mechanisms.get(mechanism).leaves}.get(name)


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
    Exp: lambda t, m, env: m.exp(model_eval(t.a, m, env)),
    Log: lambda t, m, env: m.log(model_eval(t.a, m, env)),
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
    if isinstance(t, (Exp, Log)):
        return f"{type(t).__name__.lower()}({show(t.a)})"
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
    mechanism: str = mechanisms.PAPER  # the routing mechanism of the model it is about (derive.mechanisms)

    @property
    def name(self):
        return f"fuzz-{self.index}"

    def text(self):
        return f"{show(self.lhs)} = {show(self.rhs)}"

    def identity(self):
        from derive.claim import Identity

        names = [v for v, _ in self.free]
        derived = lambda m, *ix: model_eval(self.lhs, m, dict(zip(names, ix)))  # noqa: E731
        closed = lambda m, *ix: model_eval(self.rhs, m, dict(zip(names, ix)))  # noqa: E731
        return Identity(self.name, tuple(d for _, d in self.free), self.level, derived, closed, self.text(),
                        loss=self.loss, mask_algebra=self.mask_algebra, mechanism=self.mechanism)


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
    mechanism: str = mechanisms.PAPER
    intended: bool = True  # false for a comparison the generator does not expect to hold (another form)


