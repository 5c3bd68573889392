"""Checks of a mechanism registered from a claims file, before anything runs: every question builds at
general size (known leaves, ranges and primitives), and the weight reads only the logits, the mask and the
mechanism's own routing leaves (never q, k, v or X directly). A failure is a MechanismError naming the
function whose line a claims file reports."""
from __future__ import annotations

import sympy as sp

from derive.model import ShapeError

# What a weight may read at the scores level besides the logits and the mask: the model's scalars.
READS = ("M",)


class MechanismError(ValueError):
    """A malformed mechanism; `function` is the mechanism's function at fault (for its line)."""

    def __init__(self, message, function=None):
        super().__init__(message)
        self.function = function


def check(mechanism):
    """Raise MechanismError unless every question of `mechanism` builds and its weight reads only logits and mask."""
    from derive.general import GeneralBackend
    from derive.mechanisms import questions

    _check_dims(mechanism)
    for name, identity in questions.identities(mechanism.name).items():
        function = {"routing": mechanism.routing}.get(name, mechanism.weight)
        try:
            m = GeneralBackend(identity.setting("linear", True), f"mechanism {mechanism.name} / {name}")
            ix = m.free_indices(identity.free)
            for side in (identity.derived, identity.closed):
                value = side(m, *ix)
                if not isinstance(sp.sympify(value), sp.Basic):
                    raise MechanismError(f"mechanism {mechanism.name}: question {name} gives a {type(value).__name__}, "
                                         f"not an expression of the model", function)
        except MechanismError:
            raise
        except Exception as exc:  # the user's code: a wrong range, an undefined name, a division by zero, ...
            raise MechanismError(f"mechanism {mechanism.name}: question {name}: {_what(exc)}", function) from exc
    try:
        _check_weight_reads(mechanism)
    except MechanismError:
        raise
    except Exception as exc:
        raise MechanismError(f"mechanism {mechanism.name}: weight: {_what(exc)}", mechanism.weight) from exc


def _what(exc):
    """An exception from the user's code as one line ("ShapeError: ..." reads as its message)."""
    return str(exc) if isinstance(exc, ShapeError) else f"{type(exc).__name__}: {exc}"


def _check_dims(mechanism):
    from derive.model import DIMS

    for d, size in mechanism.dims.items():
        if d in DIMS or not d.isidentifier():
            raise MechanismError(f"mechanism {mechanism.name}: its own dim {d!r} must be a new identifier (the "
                                 f"model's are {', '.join(DIMS)})")
        if size is not None and (not isinstance(size, int) or size < 1):
            raise MechanismError(f"mechanism {mechanism.name}: dim {d!r} has size {size!r}; a positive int or None")
    if mechanism.axis not in DIMS + tuple(mechanism.dims):
        raise MechanismError(f"mechanism {mechanism.name}: axis {mechanism.axis!r} is not a dim of the model or "
                             f"of the mechanism")


def _check_weight_reads(mechanism):
    """At the scores level the logits are a leaf: the weight must read nothing else but the mask and the
    mechanism's own leaves (the SSD decays)."""
    from derive.general import GeneralBackend
    from derive.mechanisms import questions

    identity = questions.identities(mechanism.name)["advantage"]
    m = GeneralBackend(identity.setting("linear", True), f"mechanism {mechanism.name} / weight")
    i, j = m.free_indices(("n", mechanism.axis))
    weight = sp.sympify(mechanism.weight(m, i, j))
    allowed = {mechanism.logit_leaf, *READS, *mechanism.leaves}
    read = {str(e.base.label) for e in weight.atoms(sp.Indexed)}
    stray = sorted(read - allowed)
    if stray:
        raise MechanismError(f"mechanism {mechanism.name}: the weight reads {', '.join(stray)}; a weight must be a "
                             f"function of the routing logits ({mechanism.logit_leaf}) and the mask (and the "
                             f"mechanism's own leaves): form what it needs in score()", mechanism.weight)
    if mechanism.logit_leaf not in read:
        raise MechanismError(f"mechanism {mechanism.name}: the weight does not read the logits "
                             f"({mechanism.logit_leaf}): routing needs w to depend on s", mechanism.weight)


def weight_sample(mechanism, masked, seed=0):
    """The mechanism's weights at one random rational point at the q/k level (the inputs `reference` reads):
    (sizes, {entry label: Fraction} of every leaf and scalar the weights read, the logits and the weights as floats,
    one row per query and one column per option). Small sizes, every dim distinct; ZeroDivisionError (or another
    ArithmeticError) at a singular point."""
    from derive import graph
    from derive.fixed import Ix
    from derive.mechanisms import questions
    from derive.rational import RationalBackend

    identity = questions.identities(mechanism.name)["advantage"]
    sizes = {"n": 3, "dk": 2, "dv": 4, "m": 2, "dx": 5}
    m = RationalBackend(identity.setting("linear", masked, level="qk"), sizes, seed=seed,
                        context=f"mechanism {mechanism.name} / reference")
    options = m.sizes[mechanism.axis]
    def table(f):
        return [[graph.float_value(f(Ix("n", i), Ix(mechanism.axis, j))) for j in range(options)]
                for i in range(m.sizes["n"])]

    weights = table(m.alpha)
    return m.sizes, dict(m.graph.values), table(m.s), weights
