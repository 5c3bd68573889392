"""Generating claims: a template, rewrites, and about half of the time a corruption; deterministic per (seed, index)."""
from __future__ import annotations

import random
from dataclasses import replace

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
    ALL,
    QLEVELS,
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
    show,
)
from derive.fuzz.templates import ALGEBRA, FIRST_ORDER, LIFTABLE, PAPER, SECOND_ORDER
from derive.model import LEAVES, LEVELS

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


