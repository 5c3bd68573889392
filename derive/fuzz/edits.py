"""Walking and editing terms: corruptions (each returns (new side, what was done) or None) and truth-preserving rewrites."""
from __future__ import annotations

from dataclasses import fields, replace

from derive import mechanisms
from derive.fuzz.grammar import (
    NODES,
    ONE,
    SOFT,
    Add,
    C,
    Const,
    DGrad,
    Div,
    Grad,
    Kron,
    Leaf,
    Loss,
    Mask,
    Mul,
    Pow,
    Q,
    Scalar,
    Size,
    Sum,
    children,
    is_attention,
    leaf,
    leaf_dims,
    mul,
    neg,
    q,
    qdims,
    qlevels,
    show,
    sub,
)
from derive.fuzz.templates import _ce_dz
from derive.fuzz.trace import Untraceable, trace
from derive.model import DIMS, LEVELS

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


def ix_dims(t, mechanism=mechanisms.PAPER):
    """Index ranges of a quantity, leaf or derivative under the claim's mechanism (its options' axis)."""
    if isinstance(t, Q):
        return qdims(t.name, mechanism) or ()
    if isinstance(t, (Kron, Mask)):
        return None
    return leaf_dims(t.name, mechanism) or ()


def claim_dims(mechanism=mechanisms.PAPER):
    """The ranges a claim about this mechanism may name: the model's and the mechanism's own."""
    return DIMS + tuple(mechanisms.get(mechanism).dims)


def uses(t, var):
    return var in names(t)


def involves_model(t):
    return any(isinstance(s, (Q, Leaf, Scalar, DGrad, Loss)) for _, s, _ in walk(t, {}))


class Fresh:
    """New index variable names, never clashing with the claim's."""

    POOL = {"n": "ijprk", "dk": "abh", "dv": "fge", "m": "ywv", "dx": "xtu", "g": "o", "e": "E"}

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


def c_transpose(rng, t, scope, claim):
    mech = claim.mechanism
    spots = [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, (Q, Leaf, DGrad, Grad)) and len(s.ix) == 2
             and len(ix_dims(s, mech)) == 2 and ix_dims(s, mech)[0] == ix_dims(s, mech)[1] and s.ix[0] != s.ix[1]]
    spot = _pick(rng, spots)
    if spot:
        p, s = spot
        new = replace(s, ix=s.ix[::-1])
        return put(t, p, new), f"transpose {show(s)} -> {show(new)}"


def c_reindex(rng, t, scope, claim):
    spots = []
    for p, s, sc in walk(t, scope):
        if isinstance(s, (Q, Leaf, DGrad, Grad)):
            for pos, (v, d) in enumerate(zip(s.ix, ix_dims(s, claim.mechanism))):
                spots += [(p, s, pos, w) for w, dw in sc.items() if dw == d and w != v]
    spot = _pick(rng, spots)
    if spot:
        p, s, pos, w = spot
        new = replace(s, ix=s.ix[:pos] + (w,) + s.ix[pos + 1:])
        return put(t, p, new), f"index swap {show(s)} -> {show(new)}"


def c_wrong_sum(rng, t, scope, claim):
    spots = [(p, s, v) for p, s, sc in walk(t, scope) if isinstance(s, Sum) and uses(s.body, s.var)
             for v, d in sc.items() if d == s.dim and v != s.var and uses(s.body, v)]
    spot = _pick(rng, spots)
    if spot:
        p, s, v = spot
        moved = replace(s, body=rename(s.body, {v: s.var, s.var: v}))
        return put(t, p, moved), f"sum moved across indices: {v} <-> {s.var} under Σ_{s.var}"


def c_drop_factor(rng, t, scope, claim):
    spot = _pick(rng, [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, (Mul, Div))])
    if spot:
        p, s = spot
        keep, gone = (s.a, s.b) if rng.random() < 0.5 or isinstance(s, Div) else (s.b, s.a)
        return put(t, p, keep), f"dropped factor {show(gone)}"


def c_drop_term(rng, t, scope, claim):
    spot = _pick(rng, [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, Add)])
    if spot:
        p, s = spot
        keep, gone = (s.a, s.b) if rng.random() < 0.5 else (s.b, s.a)
        return put(t, p, keep), f"dropped term {show(gone)}"


def c_double(rng, t, scope, claim):
    spot = _pick(rng, [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, (Q, Leaf, DGrad, Scalar))])
    if spot and rng.random() < 0.6:
        p, s = spot
        return put(t, p, Mul(s, s)), f"doubled factor {show(s)} -> {show(s)}^2"
    return Mul(Const(2), t), "factor 2"


def c_scale(rng, t, scope, claim):
    spots = [p for p, s, _ in walk(t, scope) if s == C]
    if spots and rng.random() < 0.5:
        p = rng.choice(spots)
        if rng.random() < 0.5:
            return put(t, p, ONE), "scale c lost"
        return put(t, p, Pow(C, 2)), "c -> c^2"
    return (Mul(C, t), "times c") if rng.random() < 0.5 else (Div(t, C), "divided by c")


def c_size(rng, t, scope, claim):
    dims = claim_dims(claim.mechanism)
    spots = [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, Size)]
    d1, d2 = rng.sample(dims, 2)
    if spots and rng.random() < 0.7:
        p, s = rng.choice(spots)
        other = rng.choice([d for d in dims if d != s.dim])
        return put(t, p, Size(other)), f"size |{s.dim}| -> |{other}|"
    if rng.random() < 0.5:
        return Div(Mul(t, Size(d1)), Size(d2)), f"times |{d1}|/|{d2}|"
    return Mul(t, Size(d1)), f"times |{d1}|"


def c_mask(rng, t, scope, claim):
    masks = [(p, s) for p, s, _ in walk(t, scope) if isinstance(s, Mask) and s.i != s.j]
    pairs = [(p, s) for p, s, _ in walk(t, scope)
             if isinstance(s, Q) and ix_dims(s, claim.mechanism) == ("n", "n") and s.ix[0] != s.ix[1]]
    if masks and rng.random() < 0.6:
        p, s = rng.choice(masks)
        if rng.random() < 0.6:
            return put(t, p, Mask(s.j, s.i)), f"mask transposed {show(s)}"
        return put(t, p, ONE), f"mask {show(s)} dropped"
    if pairs:
        p, s = rng.choice(pairs)
        return put(t, p, Mul(Mask(s.ix[1], s.ix[0]), s)), f"mask on the wrong side: M[{s.ix[1]},{s.ix[0]}]·{show(s)}"


def c_sign(rng, t, scope, claim):
    return neg(t), "sign flipped"


SIBLINGS = [("alpha", "dS", "b", "s", "e"), ("q", "k", "dQ", "dK"), ("u", "o", "dV", "v"),
            ("baseline", "baseline_fused", "responsibility"), ("z", "p")]


def c_sibling(rng, t, scope, claim):
    spots, level = [], claim.level
    for p, s, _ in walk(t, scope):
        group = next((g for g in SIBLINGS if isinstance(s, Q) and s.name in g), ())
        spots += [(p, s, other) for other in group if other != s.name and level in qlevels(other, claim.mechanism)]
        if isinstance(s, (Leaf, DGrad)) and s.name in ("WQ", "WK", "q", "k"):
            swap = {"WQ": "WK", "WK": "WQ", "q": "k", "k": "q"}[s.name]
            if isinstance(s, Leaf) or swap in LEVELS[level]:
                spots.append((p, s, swap))
    spot = _pick(rng, spots)
    if spot:
        p, s, other = spot
        return put(t, p, replace(s, name=other)), f"{s.name} -> {other} in {show(s)}"


def c_split_sum(rng, t, scope, claim):
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


def definition(s, level, fresh, mechanism=mechanisms.PAPER):
    """The model's own definition of a named quantity, one level down (None where it is a leaf)."""
    n, ix = s.name, s.ix
    if n in ("q", "k", "v") and level == "params":
        w, x = {"q": "WQ", "k": "WK", "v": "WV"}[n], fresh("dx")
        return Sum(x, "dx", mul(leaf("X", ix[0], x), leaf(w, x, ix[1])))
    if mechanism != mechanisms.PAPER:
        return _mechanism_definition(s, level, fresh, mechanisms.get(mechanism))
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
        "content": lambda i, j, a: q("v", j, a),
    }
    return forms[n](*ix) if n in forms else None


def _mechanism_definition(s, level, fresh, mech):
    """Another mechanism's quantities: over its options (axis), of its content; the weight from its own function
    of the logits where the logits are a leaf (traced; None where it reads what the grammar cannot say)."""
    n, ix, axis = s.name, s.ix, mech.axis
    if n == "alpha":
        if level != "scores":
            return None
        try:
            return trace(mech.weight, mech, ix, fresh)
        except Untraceable:
            return None
    if n == "content":
        if mech.content is None:
            return q("v", ix[1], ix[2])
        try:
            return trace(mech.content, mech, ix, fresh)
        except Untraceable:
            return None
    k, e = fresh(axis), fresh("dv")
    forms = {
        "o": lambda i, a: Sum(k, axis, mul(q("alpha", i, k), q("content", i, k, a))),
        "b": lambda i, j: Sum(e, "dv", mul(q("u", i, e), q("content", i, j, e))),
        "baseline": lambda i: Sum(k, axis, mul(q("alpha", i, k), q("b", i, k))),
    }
    if n in forms:
        return forms[n](*ix)
    if n in ("dQ", "dK") and not is_attention(mech):
        return None
    return _closed_form(n, ix, fresh)


def r_unfold(rng, claim, side):
    t, fresh = getattr(claim, side), Fresh(claim.lhs, claim.rhs, free=claim.free)
    spots = [(p, s) for p, s, _ in walk(t, {}) if isinstance(s, Q)]
    spots = [(p, s, d) for p, s in spots if (d := definition(s, claim.level, fresh, claim.mechanism)) is not None]
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
    masks_weights = claim.mechanism == mechanisms.PAPER or is_attention(mechanisms.get(claim.mechanism))  # w = M w
    spot = _pick(rng, spots) if claim.level in SOFT and masks_weights else None
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
        f = rng.choice([C, Size(rng.choice(claim_dims(claim.mechanism))), Const(3)])
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


