"""An independent float64 oracle for fuzzed identities (`derive.fuzz`).

A fuzzed claim is two terms of `derive.fuzz`'s grammar about one routing mechanism (`claim.mechanism`). Here
each term is evaluated with torch on a plain vectorised forward of the model (the conventions of
`numeric.reference`):

    q, k, v = X W_Q, X W_K, X W_V (params level)
    w = the mechanism's plain-torch weights (`Mechanism.reference`; from its free logits at the scores level,
        `Mechanism.reference_logits` or the reference reading its logit leaf), over its options j: the keys,
        a gate's two inputs, the experts; masked: the causal pattern j <= i over (query, option)
    content_ij = what option j offers query i: v_j (attention), the per-position leaf H_ij (gate, glr),
                 x_i W_j (a linear expert, W of dims (options, dx, dv)) -- read from the content leaf's dims
    o_i = sum_j w_ij content_ij     z = o W_O     p = softmax(z)     L = (1/n) sum_i CE(z_i, y_i), Y one-hot

and every derivative by torch.autograd (create_graph, so second derivatives are autograd's too).
The paper's named quantities (b, dS, dV, ...) are their definitions in tensors, u = dL/do by autograd.
Nothing here touches `derive.model` or a proof path: nodes are dispatched by class name, as a printer, and
of a mechanism only its reference weights and declared leaves, dims and axis are read.

A claim is labelled true iff max |lhs - rhs| <= MARGIN * scale at two draws (random sizes with the five
dimensions, and a mechanism's free ones such as the number of experts, pairwise distinct, every size different
between the draws; see `label`), where scale is the largest magnitude of any subterm evaluated on either side.
"""
from __future__ import annotations

import random
from typing import NamedTuple

import torch

from derive import mechanisms
from numeric.reference import causal_mask

MARGIN = 1e-9  # relative; float64 autograd noise is ~1e-15 of the scale, false claims differ by far more
DIMS = ("n", "dk", "dv", "m", "dx")
LEAF_DIMS = {"s": ("n", "n"), "alpha": ("n", "n"), "q": ("n", "dk"), "k": ("n", "dk"), "v": ("n", "dv"),
             "o": ("n", "dv"), "WO": ("dv", "m"), "Y": ("n", "m"), "X": ("n", "dx"), "WQ": ("dx", "dk"),
             "WK": ("dx", "dk"), "WV": ("dx", "dv"), "Delta": ("n", "dv")}


class NT(NamedTuple):
    """A tensor whose axes are named by index variables (distinct names)."""

    t: torch.Tensor
    vars: tuple


def _named(t, ix):
    """Name t's axes by ix; a repeated name takes the diagonal."""
    uniq = tuple(dict.fromkeys(ix))
    if len(uniq) == len(ix):
        return NT(t, tuple(ix))
    letter = {v: chr(97 + n) for n, v in enumerate(uniq)}
    spec = "".join(letter[v] for v in ix) + "->" + "".join(letter[v] for v in uniq)
    return NT(torch.einsum(spec, t), uniq)


def _aligned(x, order):
    """x's tensor with axes in `order` (size-1 axes for names x lacks), for broadcasting."""
    t, cur = x.t, list(x.vars)
    for v in order:
        if v not in cur:
            t, cur = t.unsqueeze(-1), cur + [v]
    return t.permute([cur.index(v) for v in order])


def _binary(op, x, y):
    order = x.vars + tuple(v for v in y.vars if v not in x.vars)
    return NT(op(_aligned(x, order), _aligned(y, order)), order)


# -- the forward -----------------------------------------------------------------------------------


def mechanism_sizes(mech, sizes):
    """Sizes completed with the mechanism's fixed dims (a gate's 2 options); its free dims must be given."""
    out = {**sizes, **{d: v for d, v in mech.dims.items() if v}}
    missing = [d for d in mech.dims if d not in out]
    if missing:
        raise ValueError(f"mechanism {mech.name}: no size for its dim(s) {missing}")
    return out


def draw_in_domain(domain, shape, g):
    """Float64 entries inside one of derive.mechanisms.base.DOMAINS (bounded away from 0 where it is excluded)."""
    r = torch.rand(shape, generator=g, dtype=torch.float64)
    if domain == "real":
        return torch.randn(shape, generator=g, dtype=torch.float64)
    return {"positive": 0.25 + 1.5 * r, "nonnegative": 1.5 * r, "unit": 0.05 + 0.9 * r,
            "negative": -(0.25 + 1.5 * r), "nonpositive": -1.5 * r}[domain]


class World:
    """One random draw: leaves, scalars, mask and every forward quantity, at one level, for one mechanism."""

    def __init__(self, level, sizes, masked, one_hot, seed, mechanism=mechanisms.PAPER):
        g = torch.Generator().manual_seed(seed)
        self.mech = mechanisms.get(mechanism)
        self.sizes, self.level = mechanism_sizes(self.mech, sizes), level
        self.dims = {**LEAF_DIMS, **self.mech.leaves}
        self.leaves = {name: self._draw(name, one_hot, g).requires_grad_() for name in self.dims}
        self.scalars = {name: torch.tensor(self._away_from_one(g), dtype=torch.float64, requires_grad=True)
                        for name in ("c", "eta")}
        self.scalars["beta"] = torch.randn((), generator=g, dtype=torch.float64).requires_grad_()  # any real
        n, options = self.sizes["n"], self.sizes[self.mech.axis]
        self.mask = causal_mask(n) if masked else None
        # the same pattern over (query, option): keys j <= i, experts e <= i (what the fixed sizes' mask is)
        self.option_mask = torch.ones(n, options, dtype=torch.float64).tril() if masked else None
        self.q = self._forward()

    def _draw(self, name, one_hot, g):
        shape = tuple(self.sizes[d] for d in self.dims[name])  # e.g. (n, dk)
        if name == "Y" and one_hot:
            return torch.nn.functional.one_hot(torch.randint(0, shape[1], (shape[0],), generator=g), shape[1]).double()
        if name == "alpha":  # free attention weights (C7): positive, not normalised
            return 0.1 + torch.rand(shape, generator=g, dtype=torch.float64)
        # the projections and the router, expert weights (through x) scaled: scores O(1), no saturation
        std = 1 / self.sizes["dx"] ** 0.5 if name in ("WQ", "WK", "WV", "WR", "WE") else 1.0
        if name in self.mech.leaves:  # a mechanism's own leaf, inside its declared domain (an SSD's log-decays <= 0)
            return std * draw_in_domain(self.mech.domain(name), shape, g)
        return std * torch.randn(shape, generator=g, dtype=torch.float64)

    @staticmethod
    def _away_from_one(g):
        """c and eta in [0.35, 0.75] or [1.3, 1.8]: a wrong power of c is never off by a tiny factor."""
        r = float(torch.rand((), generator=g, dtype=torch.float64))
        return 0.35 + 0.8 * r if r < 0.5 else 1.3 + (r - 0.5)

    def _forward(self):
        t, c, level, mech = dict(self.leaves), self.scalars["c"], self.level, self.mech
        if level == "params":
            t["q"], t["k"], t["v"] = t["X"] @ t["WQ"], t["X"] @ t["WK"], t["X"] @ t["WV"]  # (n, dk), (n, dk), (n, dv)
        if level in ("qk", "params") and mech.reference_score is not None:
            t["s"] = mech.reference_score({**t, "c": c})  # (n, n): logits a mechanism names at these levels
        if level in ("scores", "qk", "params"):
            if level == "scores":
                t["s"] = t[mech.logit_leaf]  # the free logits (n, options)
            t["alpha"] = self._weights(t, level)  # (n, options)
            if "s" in t:
                t["e"] = torch.exp(t["s"])
        if level != "readout":
            t["content"] = self._content(t)  # (n, options, dv)
            t["o"] = torch.einsum("ij,ija->ia", t["alpha"], t["content"])  # (n, dv)
        t["z"] = t["o"] @ t["WO"]  # (n, m)
        t["p"] = torch.softmax(t["z"], -1)
        self.loss = (torch.logsumexp(t["z"], -1) - (t["Y"] * t["z"]).sum(-1)).mean()
        t["u"] = torch.autograd.grad(self.loss, t["o"], create_graph=True)[0]  # dL/do, (n, dv)
        if level != "readout":
            self._named_quantities(t, c)
        return t

    def _weights(self, t, level):
        """The mechanism's reference weights from the level's leaves (its logit leaf only at the scores level)."""
        mech = self.mech
        given = {name: x for name, x in t.items() if name != mech.logit_leaf or level == "scores"}
        given.update(mask=self.option_mask, c=self.scalars["c"], beta=self.scalars["beta"])
        if level == "scores" and mech.reference_logits is not None:
            return mech.reference_logits(given)
        return mech.reference(given)

    def _content(self, t):
        """content[i, j, a]: what option j offers query i, read from the content leaf's dims: the values v_j
        (attention), a leaf per (position, option) (a cell's inputs), or a linear map of x_i per option (experts)."""
        mech, n = self.mech, self.sizes["n"]
        if mech.content is None:
            return t["v"].unsqueeze(0).expand(n, -1, -1)
        name = mech.content_spec.leaf
        dims = self.dims[name]
        if dims == ("n", mech.axis, "dv"):
            return t[name]
        if dims == (mech.axis, "dx", "dv"):
            return torch.einsum("ix,jxa->ija", t["X"], t[name])
        raise NotImplementedError(f"mechanism {mech.name}: no oracle for a content leaf {name} of dims {dims}")

    def _named_quantities(self, t, c):
        """The paper's quantities, by their definitions (over the mechanism's options j)."""
        alpha, u = t["alpha"], t["u"]
        t["b"] = torch.einsum("ia,ija->ij", u, t["content"])  # (n, options) compatibility
        t["baseline"] = (alpha * t["b"]).sum(-1)  # (n,)
        t["dS"] = alpha * (t["b"] - t["baseline"][:, None])  # (n, options) advantage
        t["dV"] = alpha.T @ u  # (options, dv)
        t["baseline_fused"] = (u * t["o"]).sum(-1)  # (n,)
        t["responsibility"] = alpha.sum(0)  # (options,)
        if self.mech.axis == "n":  # options are the keys: the paper's C3, C4 (as defined, whatever the mechanism)
            t["dQ"] = c * t["dS"] @ t["k"]  # (n, dk)
            t["dK"] = c * t["dS"].T @ t["q"]  # (n, dk)


# -- the interpreter -------------------------------------------------------------------------------


class Evaluator:
    """Evaluates grammar terms in one World; records the largest magnitude of any subterm."""

    def __init__(self, world):
        self.w = world
        self.peak = 0.0

    def __call__(self, node, env):
        out = getattr(self, "_" + type(node).__name__)(node, env)
        magnitudes = out.t.detach().abs()
        magnitudes = magnitudes[torch.isfinite(magnitudes)]
        if magnitudes.numel():
            self.peak = max(self.peak, float(magnitudes.max()))
        return out

    def _variable(self, name):
        return self.w.scalars[name] if name in self.w.scalars else self.w.leaves[name]

    def _Q(self, node, env):
        return _named(self.w.q[node.name], node.ix)

    def _Leaf(self, node, env):
        return _named(self.w.leaves[node.name], node.ix)

    def _Scalar(self, node, env):
        return NT(self.w.scalars[node.name], ())

    def _Size(self, node, env):
        return NT(torch.tensor(float(self.w.sizes[node.dim]), dtype=torch.float64), ())

    def _Const(self, node, env):
        return NT(torch.tensor(float(node.value), dtype=torch.float64), ())

    def _Kron(self, node, env):
        if node.i == node.j:
            return NT(torch.tensor(1.0, dtype=torch.float64), ())
        return NT(torch.eye(self.w.sizes[env[node.i]], dtype=torch.float64), (node.i, node.j))

    def _Mask(self, node, env):
        if self.w.mask is None:
            return NT(torch.tensor(1.0, dtype=torch.float64), ())
        return _named(self.w.mask.double(), (node.i, node.j))

    def _Add(self, node, env):
        return _binary(torch.add, self(node.a, env), self(node.b, env))

    def _Mul(self, node, env):
        return _binary(torch.mul, self(node.a, env), self(node.b, env))

    def _Div(self, node, env):
        return _binary(torch.div, self(node.a, env), self(node.b, env))

    def _Pow(self, node, env):
        x = self(node.a, env)
        return NT(x.t ** node.k, x.vars)

    def _Exp(self, node, env):
        x = self(node.a, env)
        return NT(torch.exp(x.t), x.vars)

    def _Log(self, node, env):
        x = self(node.a, env)
        return NT(torch.log(x.t), x.vars)

    def _Sum(self, node, env):
        body = self(node.body, {**env, node.var: node.dim})
        if node.var not in body.vars:  # a body free of the index: n copies
            return NT(body.t * self.w.sizes[node.dim], body.vars)
        axis = body.vars.index(node.var)
        return NT(body.t.sum(axis), body.vars[:axis] + body.vars[axis + 1:])

    def _Loss(self, node, env):
        return NT(self.w.loss, ())

    def _DGrad(self, node, env):
        return self._jacobian(NT(self.w.loss, ()), node.name, node.ix)

    def _Grad(self, node, env):
        return self._jacobian(self(node.f, env), node.name, node.ix)

    def _jacobian(self, f, name, ix):
        """d f[vars] / d name[ix] for every entry of f, by autograd (graph kept for a further derivative)."""
        x = self._variable(name)
        rows = []
        for entry in f.t.reshape(-1):
            g = None
            if entry.requires_grad:
                g = torch.autograd.grad(entry, x, retain_graph=True, create_graph=True, allow_unused=True)[0]
            rows.append(torch.zeros_like(x) if g is None else g)
        jac = torch.stack(rows).reshape(f.t.shape + x.shape) if rows else torch.zeros(f.t.shape + x.shape, dtype=torch.float64)
        return _named(jac, f.vars + tuple(ix))


# -- labelling -------------------------------------------------------------------------------------


def distinct_sizes(rng, avoid=None, dims=DIMS):
    """Sizes 2..7 with the dimensions pairwise distinct (and each unlike `avoid`'s); at most six dims."""
    while True:
        sizes = dict(zip(dims, rng.sample(range(2, 8), len(dims))))
        if avoid is None or all(sizes[d] != avoid[d] for d in dims):
            return sizes


def drawn_dims(mechanism=mechanisms.PAPER):
    """The dims the oracle draws for a claim: the model's and the mechanism's free ones (experts)."""
    return DIMS + tuple(d for d, v in mechanisms.get(mechanism).dims.items() if not v)


def gap(claim, masked, sizes, one_hot, seed):
    """(max |lhs - rhs| / scale, scale) at one draw over the entries where both sides are defined (finite);
    scale = largest finite magnitude of any subterm. The gap is None where no entry is defined: a side divides
    by 0 there (a mixture of experts' EM step for an expert no token selected), and an identity says nothing
    where it is undefined, as no proof path claims it there."""
    world = World(claim.level, sizes, masked, one_hot, seed, getattr(claim, "mechanism", mechanisms.PAPER))
    ev = Evaluator(world)
    env = dict(claim.free)
    names = tuple(v for v, _ in claim.free)
    shape = tuple(world.sizes[d] for _, d in claim.free)
    lhs, rhs = (_aligned(ev(t, env), names).expand(shape) for t in (claim.lhs, claim.rhs))
    lhs, rhs = lhs.detach(), rhs.detach()
    defined = torch.isfinite(lhs) & torch.isfinite(rhs)
    if lhs.numel() and not defined.any():
        return None, ev.peak
    diff = float((lhs - rhs)[defined].abs().max()) if lhs.numel() else 0.0
    return (diff / ev.peak if ev.peak else diff), ev.peak


def label(claim, masked, seed):
    """Truth of `claim` (masked: under the causal mask) at two draws with one-hot targets, as the model
    defines Y (a point with other Y is no input of the model); a third draw with free real targets at
    the first sizes only flags claims true for one-hot targets alone (`one_hot_only`: no path that
    treats Y as a free variable can prove them, and none may disprove them).

    Returns {true, gap, gaps, sizes, one_hot_only}; `gap` is the larger relative gap of the two labelling draws.
    `true` is None (undefined) when neither draw has an entry where both sides are defined (see `gap`)."""
    rng = random.Random(f"numeric.oracle:{seed}")
    dims = drawn_dims(getattr(claim, "mechanism", mechanisms.PAPER))
    first = distinct_sizes(rng, dims=dims)
    second = distinct_sizes(rng, avoid=first, dims=dims)
    with torch.enable_grad():
        rel = [gap(claim, masked, first, True, 3 * seed)[0], gap(claim, masked, second, True, 3 * seed + 1)[0]]
        free_y = gap(claim, masked, first, False, 3 * seed + 2)[0]
    defined = [g for g in rel if g is not None]
    true = all(g <= MARGIN for g in defined) if defined else None
    return {"true": true, "gap": max(defined) if defined else None, "gaps": rel, "sizes": [first, second],
            "one_hot_only": bool(true) and free_y is not None and free_y > MARGIN}
