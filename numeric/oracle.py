"""An independent float64 oracle for fuzzed identities (`derive.fuzz`).

A fuzzed claim is two terms of `derive.fuzz`'s grammar. Here each term is evaluated with torch on a
plain vectorised forward of the model (the paper's setting; the conventions of `numeric.reference`):

    q, k, v = X W_Q, X W_K, X W_V (params level)     s = c q k^T
    alpha = softmax_j(s) over allowed j (causal: j <= i, diagonal included)
    o = alpha v     z = o W_O     p = softmax(z)     L = (1/n) sum_i CE(z_i, y_i), targets Y one-hot

and every derivative by torch.autograd (create_graph, so second derivatives are autograd's too).
The paper's named quantities (b, dS, dV, ...) are their definitions in tensors, u = dL/do by autograd.
Nothing here touches `derive.model` or a proof path: nodes are dispatched by class name, as a printer.

A claim is labelled true iff max |lhs - rhs| <= MARGIN * scale at two draws (random sizes with the five
dimensions pairwise distinct, every size different between the draws; see `label`), where scale is the
largest magnitude of any subterm evaluated on either side.
"""
from __future__ import annotations

import random
from typing import NamedTuple

import torch

from numeric.reference import causal_mask, softmax

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


class World:
    """One random draw: leaves, scalars, mask and every forward quantity, at one level."""

    def __init__(self, level, sizes, masked, one_hot, seed):
        g = torch.Generator().manual_seed(seed)
        self.sizes, self.level = sizes, level
        self.leaves = {name: self._draw(name, one_hot, g).requires_grad_() for name in LEAF_DIMS}
        self.scalars = {name: torch.tensor(self._away_from_one(g), dtype=torch.float64, requires_grad=True)
                        for name in ("c", "eta")}
        n = sizes["n"]
        self.mask = causal_mask(n) if masked else None
        self.q = self._forward()

    def _draw(self, name, one_hot, g):
        shape = tuple(self.sizes[d] for d in LEAF_DIMS[name])  # e.g. (n, dk)
        if name == "Y" and one_hot:
            return torch.nn.functional.one_hot(torch.randint(0, shape[1], (shape[0],), generator=g), shape[1]).double()
        if name == "alpha":  # free attention weights (C7): positive, not normalised
            return 0.1 + torch.rand(shape, generator=g, dtype=torch.float64)
        std = 1 / self.sizes["dx"] ** 0.5 if name in ("WQ", "WK", "WV") else 1.0  # keeps scores O(1): no saturation
        return std * torch.randn(shape, generator=g, dtype=torch.float64)

    @staticmethod
    def _away_from_one(g):
        """c and eta in [0.35, 0.75] or [1.3, 1.8]: a wrong power of c is never off by a tiny factor."""
        r = float(torch.rand((), generator=g, dtype=torch.float64))
        return 0.35 + 0.8 * r if r < 0.5 else 1.3 + (r - 0.5)

    def _forward(self):
        t, c, level = dict(self.leaves), self.scalars["c"], self.level
        if level == "params":
            t["q"], t["k"], t["v"] = t["X"] @ t["WQ"], t["X"] @ t["WK"], t["X"] @ t["WV"]  # (n, dk), (n, dk), (n, dv)
        if level in ("qk", "params"):
            t["s"] = c * t["q"] @ t["k"].T  # (n, n)
        if level in ("scores", "qk", "params"):
            t["e"] = torch.exp(t["s"])
            t["alpha"] = softmax(t["s"], self.mask)  # (n, n)
        if level != "readout":
            t["o"] = t["alpha"] @ t["v"]  # (n, dv)
        t["z"] = t["o"] @ t["WO"]  # (n, m)
        t["p"] = torch.softmax(t["z"], -1)
        self.loss = (torch.logsumexp(t["z"], -1) - (t["Y"] * t["z"]).sum(-1)).mean()
        t["u"] = torch.autograd.grad(self.loss, t["o"], create_graph=True)[0]  # dL/do, (n, dv)
        if level != "readout":
            self._named_quantities(t, c)
        return t

    @staticmethod
    def _named_quantities(t, c):
        """The paper's quantities, by their definitions (the paper's definitions)."""
        alpha, u = t["alpha"], t["u"]
        t["b"] = u @ t["v"].T  # (n, n) compatibility
        t["baseline"] = (alpha * t["b"]).sum(-1)  # (n,)
        t["dS"] = alpha * (t["b"] - t["baseline"][:, None])  # (n, n) advantage
        t["dV"] = alpha.T @ u  # (n, dv)
        t["baseline_fused"] = (u * t["o"]).sum(-1)  # (n,)
        t["responsibility"] = alpha.sum(0)  # (n,)
        if "s" in t:
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
        if out.t.numel():
            self.peak = max(self.peak, float(out.t.detach().abs().max()))
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


def distinct_sizes(rng, avoid=None):
    """Sizes 2..7 with the five dimensions pairwise distinct (and each unlike `avoid`'s)."""
    while True:
        sizes = dict(zip(DIMS, rng.sample(range(2, 8), len(DIMS))))
        if avoid is None or all(sizes[d] != avoid[d] for d in DIMS):
            return sizes


def gap(claim, masked, sizes, one_hot, seed):
    """(max |lhs - rhs| / scale, scale) at one draw; scale = largest magnitude of any subterm."""
    world = World(claim.level, sizes, masked, one_hot, seed)
    ev = Evaluator(world)
    env = dict(claim.free)
    names = tuple(v for v, _ in claim.free)
    shape = tuple(sizes[d] for _, d in claim.free)
    lhs, rhs = (_aligned(ev(t, env), names).expand(shape) for t in (claim.lhs, claim.rhs))
    diff = float((lhs - rhs).detach().abs().max()) if lhs.numel() else 0.0
    if diff != diff:  # NaN: never "equal"
        return float("inf"), ev.peak
    return (diff / ev.peak if ev.peak else diff), ev.peak


def label(claim, masked, seed):
    """Truth of `claim` (masked: under the causal mask) at two draws with one-hot targets, as the model
    defines Y (a point with other Y is no input of the model); a third draw with free real targets at
    the first sizes only flags claims true for one-hot targets alone (`one_hot_only`: no path that
    treats Y as a free variable can prove them, and none may disprove them).

    Returns {true, gap, gaps, sizes, one_hot_only}; `gap` is the larger relative gap of the two labelling draws."""
    rng = random.Random(f"numeric.oracle:{seed}")
    first = distinct_sizes(rng)
    second = distinct_sizes(rng, avoid=first)
    with torch.enable_grad():
        rel = [gap(claim, masked, first, True, 3 * seed)[0], gap(claim, masked, second, True, 3 * seed + 1)[0]]
        free_y = gap(claim, masked, first, False, 3 * seed + 2)[0]
    true = all(g <= MARGIN for g in rel)
    return {"true": true, "gap": max(rel), "gaps": rel, "sizes": [first, second], "one_hot_only": true and free_y > MARGIN}
