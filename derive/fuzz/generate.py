"""Generating claims: a mechanism, a template, rewrites, and about half of the time a corruption; deterministic per
(seed, index).

The mechanism of claim `index` is `mechanism_of(index)`: the paper's softmax takes 4 slots of every 10 and the other
built-in mechanisms share the rest evenly (`schedule`), so the first 6 claims cover five mechanisms and any 10
consecutive ones cover them all. A softmax claim comes from the paper's algebra (C1-C10 closed forms, ...; `_base`) three times in
four, else from the mechanism templates every mechanism has (`derive.fuzz.routing`).
"""
from __future__ import annotations

import functools
import random
from dataclasses import replace

from derive import mechanisms
from derive.fuzz import routing
from derive.fuzz.edits import (
    CORRUPTIONS,
    REWRITES,
    Fresh,
    involves_model,
    ix_dims,
    side_name,
    walk,
)
from derive.fuzz.grammar import (
    ZERO,
    Claim,
    DGrad,
    Div,
    Grad,
    Kron,
    Leaf,
    Mask,
    Q,
    Sum,
    leaf_dims,
    mechanism_levels,
    qdims,
    qlevels,
    show,
)
from derive.fuzz.routing import free_leaves, scalar_variables, variables
from derive.fuzz.templates import ALGEBRA, FIRST_ORDER, LIFTABLE, PAPER, SECOND_ORDER
from derive.model import LEVELS
from derive.model import SCALARS as MODEL_SCALARS

# -- generation ----------------------------------------------------------------------------------

SCALARS = ("c", "eta")


def schedule():
    """One round of mechanism slots: softmax, two others, softmax, two others, ... (softmax 4 of 10 with the
    six other built-ins)."""
    others = [m.name for m in mechanisms.builtin() if m.name != mechanisms.PAPER]
    out = []
    for n in range(0, len(others), 2):
        out += [mechanisms.PAPER, *others[n:n + 2]]
    return tuple(out + [mechanisms.PAPER])


def mechanism_of(index):
    """The mechanism claim number `index` is about."""
    slots = schedule()
    return slots[index % len(slots)]


def _var_ix(var, fresh, share=(), mechanism=mechanisms.PAPER):
    return tuple(share[n] if n < len(share) else fresh(d) for n, d in enumerate(leaf_dims(var, mechanism) or ()))


@functools.lru_cache(maxsize=None)
def _levels(t):
    """The levels of a template at which it is a well-formed claim."""
    return tuple(level for level in t.levels
                 if not problems(Claim(-1, level, t.free, t.lhs, t.rhs, t.name, t.loss, t.mask_algebra,
                                       mechanism=t.mechanism)))


def _from_template(rng, index, pool):
    pool = [t for t in pool if _levels(t)]
    t = rng.choice(pool)
    level = rng.choice(_levels(t))
    loss = "ce" if t.loss == "ce" or rng.random() < 0.15 else "any"
    return Claim(index, level, t.free, t.lhs, t.rhs, f"{t.name} [{level}]", loss, t.mask_algebra,
                 intended=t.intended, mechanism=t.mechanism), t


def _lift(rng, index, pool=LIFTABLE):
    claim, t = _from_template(rng, index, pool)
    mech = claim.mechanism
    var = rng.choice(variables(claim.level, mechanism=mech) + ["eta"])
    ix = _var_ix(var, Fresh(claim.lhs, claim.rhs, free=claim.free), mechanism=mech)
    rhs = Grad(claim.rhs, var, ix) if involves_model(claim.rhs) else ZERO
    return replace(claim, free=claim.free + tuple(zip(ix, leaf_dims(var, mech) or ())), lhs=Grad(claim.lhs, var, ix),
                   rhs=rhs, description=f"d/d{var} of both sides of {claim.description}"), t


def _hessian(rng, index, mechanism=mechanisms.PAPER):
    """Symmetry of a second derivative of L, or one that vanishes because L does not depend on c or eta."""
    level = rng.choice(mechanism_levels(mechanism))
    xs = free_leaves(level, mechanism) + scalar_variables(level, mechanism)
    x, y = rng.choice(xs), rng.choice(xs)
    fresh = Fresh()
    dims = lambda v: leaf_dims(v, mechanism) or ()  # noqa: E731
    p = _var_ix(x, fresh, mechanism=mechanism)
    share = p[:1] if rng.random() < 0.3 and dims(y)[:1] == dims(x)[:1] and dims(x) else ()
    qv = _var_ix(y, fresh, share, mechanism)
    free = tuple(dict.fromkeys(list(zip(p, dims(x))) + list(zip(qv, dims(y)))))
    loss = "ce" if level == "readout" or rng.random() < 0.15 else "any"
    if rng.random() < 0.25:
        z = "eta" if level in ("qk", "params") or rng.random() < 0.5 else "c"
        return Claim(index, level, tuple(zip(p, dims(x))), Grad(DGrad(x, p), z, ()), ZERO,
                     f"d(dL/d{x})/d{z} = 0 [{level}]", loss, mechanism=mechanism), None
    return Claim(index, level, free, Grad(DGrad(x, p), y, qv), Grad(DGrad(y, qv), x, p),
                 f"Hessian symmetry d2L/d{x} d{y} [{level}]", loss, mechanism=mechanism), None


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


MECHANISM_FAMILIES = ("mechanism questions", "routing forms", "chain rule", "mechanism algebra",
                      "differentiated identities", "Hessian symmetry")


def _mechanism_base(rng, index, mechanism):
    """A claim about a mechanism from its templates (derive.fuzz.routing), lifted, or a Hessian symmetry."""
    pools = routing.templates(mechanism)
    r = rng.random()
    if r < 0.3:
        family = "mechanism questions"
    elif r < 0.5:
        family = "routing forms"
    elif r < 0.6 and any(_levels(t) for t in pools["chain rule"]):
        family = "chain rule"
    elif r < 0.7:
        family = "mechanism algebra"
    elif r < 0.88:
        claim, t = _lift(rng, index, [t for pool in pools.values() for t in pool])
        return replace(claim, family="differentiated identities"), t
    else:
        claim, t = _hessian(rng, index, mechanism)
        return replace(claim, family="Hessian symmetry"), t
    claim, t = _from_template(rng, index, pools[family])
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
            out += _node_problems(s, sc, claim.level, claim.mechanism)
    return out


def _model_variables(level, mechanism):
    """What the model lets a claim differentiate by (derive.model.AttentionModel.variables)."""
    own = {n for n, levels in mechanisms.get(mechanism).free.items() if level in levels}
    return LEVELS[level] | own | {"WO", "Y", "Delta", "c", "eta", "beta"}


def _leaves_ok(level, mechanism):
    """Leaves whose entries the model and the oracle both read as independent draws at this level."""
    if mechanism == mechanisms.PAPER:
        return LEVELS[level] | {"WO", "Y", "Delta"}
    return LEVELS[level] | {"WO", "Y", "Delta", "X"} | set(mechanisms.get(mechanism).leaves)


def _node_problems(s, sc, level, mechanism=mechanisms.PAPER):
    out = []
    if isinstance(s, Grad) and not involves_model(s.f):
        out.append(f"{show(s)}: derivative of a constant")
    if isinstance(s, (Kron, Mask)):
        dims = {sc.get(s.i), sc.get(s.j)}
        if None in dims or len(dims) != 1 or (isinstance(s, Mask) and dims != {"n"}):
            out.append(f"{show(s)}: indices out of scope or of different ranges")
    elif hasattr(s, "ix"):
        known = (qdims(s.name, mechanism) if isinstance(s, Q) else
                 () if isinstance(s, (DGrad, Grad)) and s.name in MODEL_SCALARS else leaf_dims(s.name, mechanism))
        want = ix_dims(s, mechanism)
        if known is None:
            out.append(f"{show(s)}: no such quantity or leaf")
        elif len(want) != len(s.ix) or any(sc.get(v) != d for v, d in zip(s.ix, want)):
            out.append(f"{show(s)}: index out of scope or of the wrong range")
    if isinstance(s, Q) and level not in qlevels(s.name, mechanism):
        out.append(f"{s.name} is not defined the same way at level {level}")
    if isinstance(s, DGrad) and s.name not in (LEVELS[level] | set(SCALARS) if mechanism == mechanisms.PAPER
                                               else _model_variables(level, mechanism) - {"WO", "Y", "Delta"}):
        out.append(f"{s.name} is not free at level {level}")
    if isinstance(s, Grad) and s.name not in _model_variables(level, mechanism):
        out.append(f"d/d{s.name}: {s.name} is not free at level {level}")
    if isinstance(s, Leaf) and s.name not in _leaves_ok(level, mechanism):
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
        step = rng.choice(CORRUPTIONS)(rng, getattr(claim, side), dict(claim.free), claim)
        if step and step[0] != getattr(claim, side):
            new = replace(claim, **{side: step[0]}, intended=False,
                          description=f"{claim.description}; corrupt {side_name(side)}: {step[1]}")
            if not problems(new):
                return new
    return claim


def generate_one(seed, index):
    """Claim number `index` of the run with this seed (independent of every other claim)."""
    rng = random.Random(f"derive.fuzz:{seed}:{index}")
    mechanism = mechanism_of(index)
    if mechanism == mechanisms.PAPER and rng.random() < 0.75:
        claim, template = _base(rng, index)
    else:
        claim, template = _mechanism_base(rng, index, mechanism)
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


