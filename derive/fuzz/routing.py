"""Identities about any routing mechanism (derive.mechanisms) for the fuzzer, traced into the grammar
(`derive.fuzz.trace`) from the mechanism's own definitions, so a mechanism added later is covered as it is:

- its question identities (derive.mechanisms.questions: routing, advantage, competition, content, EM step, and
  its own extra ones such as SSD's decay gradient), with its registered mutants as known wrong closed sides;
- its routing gradient against every routing form in the library: each built-in mechanism's own, the paper's
  advantage, the per-key form w(1 - w)b and every routing mutant (true or false as the oracle finds them);
- the chain rule through its score: a derivative by what the score reads (q, k; W_Q, W_K; the router W_R; c)
  is sum_ij dL/ds_ij ds_ij/dx, with the mechanism's own routing form for dL/ds;
- the algebra of its weights and contents (normalisation, the fused baseline, o and b from the content).

Which of them hold is not assumed: `intended` records what the generator expects, the oracle decides.
"""
from __future__ import annotations

import functools

from derive import mechanisms
from derive.fuzz.edits import Fresh, walk
from derive.fuzz.grammar import (
    ONE,
    ZERO,
    DGrad,
    Grad,
    Leaf,
    Q,
    Scalar,
    Size,
    Sum,
    Template,
    is_attention,
    leaf_dims,
    mechanism_levels,
    mul,
    q,
    sub,
)
from derive.fuzz.trace import Untraceable, trace
from derive.mechanisms import forms, questions
from derive.model import LEVELS


def free_leaves(level, mechanism=mechanisms.PAPER):
    """The leaves a claim at this level may differentiate by that the mechanism's forward reads (the level's
    own and the mechanism's own free leaves; for a mechanism whose options are not keys, the input X at the
    params level and its own leaves only)."""
    if mechanism == mechanisms.PAPER:
        return sorted(LEVELS[level])
    mech = mechanisms.get(mechanism)
    own = {n for n, levels in mech.free.items() if level in levels}
    base = set(LEVELS[level]) if is_attention(mech) else ({"X"} if level == "params" else set())
    return sorted(base | own)


@functools.lru_cache(maxsize=None)
def reads_beta(mechanism):
    """Whether the mechanism's weight reads the bias beta (sigmoid attention)."""
    mech = mechanisms.get(mechanism)
    fresh = Fresh()
    fresh.used |= {"i", "j"}
    weight = _traced(mech.weight, mech, ("i", "j"), fresh)
    return weight is not None and Scalar("beta") in _walk(weight)


def scalar_variables(level, mechanism=mechanisms.PAPER):
    """c where the logits are computed from q and k; beta where the weight reads it."""
    c = ["c"] if level in ("qk", "params") and (mechanism == mechanisms.PAPER or is_attention(mechanisms.get(mechanism))) else []
    return c + (["beta"] if mechanism != mechanisms.PAPER and reads_beta(mechanism) else [])


def variables(level, scalars=True, mechanism=mechanisms.PAPER):
    """What a claim at this level may differentiate by: its free leaves, the readout's, c (and beta)."""
    out = sorted(set(free_leaves(level, mechanism)) | {"WO", "Y"})
    return out + (scalar_variables(level, mechanism) if scalars else [])


def _walk(t):
    return (s for _, s, _ in walk(t, {}))


def _traced(fn, mech, ix, fresh):
    try:
        return trace(fn, mech, ix, fresh)
    except Untraceable:
        return None


@functools.lru_cache(maxsize=None)
def question_templates(name):
    """The mechanism's question identities and extra identities, each with the mutants registered for it."""
    mech, out = mechanisms.get(name), []
    identities = {**questions.identities(name), **questions.extra_identities(name)}
    for question, ident in identities.items():
        fresh = Fresh()
        free = tuple((fresh(d), d) for d in ident.free)
        ix = [v for v, _ in free]
        lhs, rhs = _traced(ident.derived, mech, ix, fresh), _traced(ident.closed, mech, ix, fresh)
        if lhs is None or rhs is None:
            continue
        wrong = tuple((f"{m.id} ({m.description})", w) for m in mech.mutants if m.question == question
                      and (w := _traced(m.closed, mech, ix, fresh)) is not None)
        expected = mech.normalised if question in ("advantage", "competition") else True  # README's table
        out.append(Template(f"{name} {question}", mechanism_levels(name), free, lhs, rhs, ident.loss,
                            ident.mask_algebra, wrong, name, intended=expected))
    return tuple(out)


def library():
    """(label, closed form of dL/ds_ij) for every routing form the mechanisms know."""
    out = [("the paper's advantage", forms.advantage), ("the per-key form w(1-w)b", forms.per_key)]
    for mech in mechanisms.builtin():
        out.append((f"{mech.name}'s routing form", mech.routing))
        out += [(f"mutant {m.id}", m.closed) for m in mech.mutants if m.question == "routing"]
    return out


@functools.lru_cache(maxsize=None)
def routing_templates(name):
    """dL/ds_ij (the mechanism's logit leaf) against every form of the library that types for its options."""
    mech, out, seen = mechanisms.get(name), [], set()
    fresh = Fresh()
    free = (("i", "n"), ("j", mech.axis))
    fresh.used |= {"i", "j"}
    own = _traced(mech.routing, mech, ("i", "j"), fresh)
    for label, form in library():
        rhs = _traced(form, mech, ("i", "j"), fresh)
        if rhs is None or rhs in seen:
            continue
        seen.add(rhs)
        out.append(Template(f"{name}: dL/d{mech.logit_leaf} = {label}", ("scores",), free,
                            DGrad(mech.logit_leaf, ("i", "j")), rhs, mechanism=name, intended=rhs == own))
    return tuple(out)


def _reads(term, level):
    """The leaves and scalars a term depends on at a level (q, k, v through W_Q, W_K, W_V at the params level)."""
    through = {"q": ("q", "WQ"), "k": ("k", "WK"), "v": ("v", "WV")}
    out = set()
    for s in _walk(term):
        if isinstance(s, Leaf):
            out.add(s.name)
        elif isinstance(s, Scalar):
            out.add(s.name)
        elif isinstance(s, Q) and s.name in through:
            own, weight = through[s.name]
            out |= {"X", weight} if level == "params" else {own}
    return out


@functools.lru_cache(maxsize=None)
def chain_templates(name):
    """dL/dx = sum_ij dL/ds_ij ds_ij/dx for what the score reads and the content does not (at q/k and params)."""
    mech, out = mechanisms.get(name), []
    for level in ("qk", "params"):
        if level not in mechanism_levels(name):
            continue
        fresh = Fresh()
        i, j = fresh("n"), fresh(mech.axis)
        score = _traced(mech.score, mech, (i, j), fresh)
        own = _traced(mech.routing, mech, (i, j), fresh)
        content = q("v", j, "a0") if mech.content is None else _traced(mech.content, mech, (i, j, "a0"), fresh)
        if score is None or own is None or content is None:
            continue
        reads = _reads(score, level) - _reads(content, level)
        for x in variables(level, mechanism=name):
            if x not in reads:
                continue
            ix = tuple(fresh(d) for d in (leaf_dims(x, name) or ()))
            rhs = Sum(i, "n", Sum(j, mech.axis, mul(own, Grad(score, x, ix))))
            out.append(Template(f"{name} chain rule through the score: dL/d{x}", (level,),
                                tuple(zip(ix, leaf_dims(x, name) or ())), DGrad(x, ix), rhs, mechanism=name))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def algebra_templates(name):
    """Identities of the weights and contents (normalisation ones intended only for normalised mechanisms)."""
    mech = mechanisms.get(name)
    ax, levels, norm = mech.axis, mechanism_levels(name), mech.normalised
    I, J, A = ("i", "n"), ("j", ax), ("a", "dv")
    out = [
        Template(f"{name} weights sum to 1 over the options", levels, (I,), Sum("k", ax, q("alpha", "i", "k")), ONE,
                 mechanism=name, intended=norm),
        Template(f"{name} advantages sum to 0", levels, (I,), Sum("k", ax, q("dS", "i", "k")), ZERO,
                 mechanism=name, intended=norm),
        Template(f"{name} total mass is n", levels, (), Sum("k", ax, q("responsibility", "k")), Size("n"),
                 mechanism=name, intended=norm),
        Template(f"{name} fused baseline", levels, (I,), q("baseline", "i"), q("baseline_fused", "i"), mechanism=name),
        Template(f"{name} compatibility of the content", levels, (I, J), q("b", "i", "j"),
                 Sum("f", "dv", mul(q("u", "i", "f"), q("content", "i", "j", "f"))), mechanism=name),
        Template(f"{name} output mixes the content", levels, (I, A), q("o", "i", "a"),
                 Sum("k", ax, mul(q("alpha", "i", "k"), q("content", "i", "k", "a"))), mechanism=name),
        Template(f"{name} advantage as a mixture", levels, (I, J), sub(q("b", "i", "j"), q("baseline", "i")),
                 Sum("k", ax, mul(q("alpha", "i", "k"), sub(q("b", "i", "j"), q("b", "i", "k")))),
                 mechanism=name, intended=norm),
    ]
    fresh = Fresh()
    fresh.used |= {"i", "j"}
    weight = _traced(mech.weight, mech, ("i", "j"), fresh)
    if weight is not None:
        out.append(Template(f"{name} weight from the logits", ("scores",), (I, J), q("alpha", "i", "j"), weight,
                            mechanism=name))
    return tuple(out)


def templates(name):
    """Every template for the mechanism, by generator family."""
    return {"mechanism questions": question_templates(name), "routing forms": routing_templates(name),
            "chain rule": chain_templates(name), "mechanism algebra": algebra_templates(name)}
