"""A mechanism's trainable layer: the part of its file the experiments train (numeric.experiments.mechanism_layers).

A layer says which parameters it has (`params`: the sticky model's shared matrices it uses, then `own`, each a
shape in the dims d_in, d_k, d_v, m or fixed sizes), which of them are content (the rest are routing, as in the
paper's EM-like arm), how it prepares its per-position tensors and how it forms one block of weights. Parameters
carry leading dims (arms A, seeds S); x is (1, S, T, d_in). Written with tensor methods, torch imported inside the
functions that need it: derive/ is imported without torch.

`Layer` is a mechanism over keys (weights T x T through the causal mask from q_i = x_i W_Q and k_j = x_j W_K,
mixing v_j = x_j W_V); `Cell` a recurrent cell h_t = keep_t h_{t-1} + write_t x~_t, trained in its quadratic form
w_tj = write_j prod_{s=j+1..t} keep_s or as the scan. A mechanism that mixes per token (the mixture of experts)
sets quadratic = False and writes `mix` itself.
"""
from __future__ import annotations

import math

# The sticky model's four matrices (drawn by numeric.experiments.sticky.seed_params, the same initial values for
# every mechanism that has them) and their shapes.
SHARED = {"W_Q": ("d_in", "d_k"), "W_K": ("d_in", "d_k"), "W_V": ("d_in", "d_v"), "W_O": ("d_v", "m")}
FORMS = ("quadratic", "scan")


def beta(T):
    """Sigmoid attention's bias, -log T (arXiv 2409.04431's choice b = -log n)."""
    return -math.log(T)


def project(x, w):
    """x @ w for per-position rows x (..., T, d) and a matrix w (..., d, k). Where w has a broadcast axis of size 1
    just before its matrix and x a batch there (the wind tunnel's (R, S, 1, d, k) against (1, S, B, T, d)), the
    batch's rows are folded into one product per run: the same values, without a small product per sequence."""
    if w.dim() >= 3 and w.dim() == x.dim() and w.shape[-3] == 1 and x.shape[-3] > 1:
        out = x.reshape(*x.shape[:-3], x.shape[-3] * x.shape[-2], x.shape[-1]) @ w.squeeze(-3)
        return out.unflatten(-2, (x.shape[-3], x.shape[-2]))
    return x @ w


def qkv(p, x):
    return project(x, p["W_Q"]), project(x, p["W_K"]), project(x, p["W_V"])


def cumulative(logs):
    """G (..., T) = cumsum of per-position log-factors, in float64."""
    return logs.double().cumsum(-1)


def logit(p, x, name):
    """x_t . w per position, (A, S, T): one matmul per (arm, seed), so each run's logits do not depend on the others
    in the batch (a summed product over the batch vectorises rows across the runs' boundaries)."""
    return project(x, p[name][..., :, None]).squeeze(-1)


def softplus(a):
    from torch.nn.functional import softplus as f

    return f(a)


def log_decay(pre, lo, hi, dtype):
    """D_ij = G_i - G_j (+ start_j), rows lo:hi, keys 0:hi, in `dtype`: both sides taken relative to G_lo in
    float64 (vectors only) before the cast, so a pair near the diagonal keeps its precision late in a long sequence
    (G reaches about -1400 at T = 2000, where float32's spacing is 1e-4); far pairs have weights e^D that vanish."""
    G = pre["G"]
    ref = G[..., lo:lo + 1]
    a = (G[..., lo:hi] - ref).to(dtype)
    b = G[..., :hi] - ref
    if "start" in pre:
        b = b - pre["start"][..., :hi]
    return a[..., :, None] - b.to(dtype)[..., None, :]


class Layer:
    """Weights over keys from q_i and k_j, mixing the values. shared: the sticky model's matrices it uses, own: its
    own parameters and their shapes, content: those that are content, forms: the forms it trains in, quadratic:
    weights T x T through the causal mask (mixed in query blocks), padded: the per-position tensors that may be
    widened with zero columns (exact: see numeric.experiments.mechanism_layers)."""
    shared = tuple(SHARED)
    own: dict = {}
    content = ("W_V",)
    forms = ("quadratic",)
    quadratic = True
    padded = ("v", "q", "k")

    name = ""

    def validate(self, name):
        """Refuse a layer the trainers cannot run, naming what is wrong; it takes its mechanism's name."""
        bad = [n for n in self.shared if n not in SHARED]
        if bad:
            raise ValueError(f"mechanism {name}: layer.shared names {bad}, not among the shared {list(SHARED)}")
        if "W_O" not in self.params:
            raise ValueError(f"mechanism {name}: the layer must have the readout W_O (shared or own)")
        if not self.content or set(self.content) - set(self.params):
            raise ValueError(f"mechanism {name}: layer.content {self.content!r} must name some of its parameters "
                             f"{self.params!r}")
        for n, shape in self.own.items():
            if not all(d in ("d_in", "d_k", "d_v", "m") or (isinstance(d, int) and d > 0) for d in shape):
                raise ValueError(f"mechanism {name}: layer.own[{n!r}] = {shape!r}: each dim is one of d_in, d_k, "
                                 "d_v, m or a positive int")
        if set(self.forms) - set(FORMS) or "quadratic" not in self.forms:
            raise ValueError(f"mechanism {name}: layer.forms {self.forms!r} must include 'quadratic', within {FORMS}")
        own = "block" if self.quadratic else "mix"
        if getattr(type(self), own) is getattr(Layer, own, None):
            raise ValueError(f"mechanism {name}: its layer must define {own}(...)")
        self.name = name

    def mix(self, p, x):
        """A layer that is not quadratic: its output o (A, S, T, d_v) itself."""
        raise NotImplementedError

    @property
    def params(self):
        return (*self.shared, *self.own)

    @property
    def routing(self):
        return tuple(p for p in self.params if p not in self.content)

    def shapes(self, dims):
        """{parameter: shape} without the leading (A, S), dims giving d_in, d_k, d_v and m."""
        spec = {**{n: SHARED[n] for n in self.shared}, **self.own}
        return {n: tuple(dims[d] if isinstance(d, str) else d for d in shape) for n, shape in spec.items()}

    def prepare(self, p, x):
        """What every query block reads: per-position tensors (A, S, T, .) or (A, S, T), and the constants."""
        q, k, v = qkv(p, x)
        return {"q": q, "k": k, "v": v, "c": 1.0 / math.sqrt(q.shape[-1]), "beta": beta(x.shape[-2])}

    def scores(self, pre, lo, hi):
        """s_ij = c q_i . k_j for query rows lo:hi over keys 0:hi."""
        return (pre["q"][..., lo:hi, :] @ pre["k"][..., :hi, :].mT) * pre["c"]

    def block(self, pre, lo, hi, mask):
        """The weights of query rows lo:hi over keys 0:hi (A, S, hi - lo, hi); mask (hi - lo, hi) True where seen."""
        raise NotImplementedError

    def reference_inputs(self, p, x, mask, pre):
        """The inputs of the mechanism's reference(t) that give this layer's weights."""
        return {"q": pre["q"], "k": pre["k"], "mask": mask.to(x.dtype), "c": pre["c"], "beta": pre["beta"]}

    def weights(self, p, x, mask):
        pre = self.prepare(p, x)
        return {"w": self.block(pre, 0, x.shape[-2], mask), "reference": self.reference_inputs(p, x, mask, pre)}

    def tracked(self, p, x, rows):
        """Row r's weights over keys 0..r for each tracked query row, flattened (A, S, sum_r (r + 1))."""
        import torch

        pre = self.prepare(p, x)
        one = torch.ones(1, 1, dtype=torch.bool, device=x.device)
        return torch.cat([self.block(pre, r, r + 1, one.expand(1, r + 1)).flatten(-2) for r in rows], -1)


class Cell(Layer):
    """A recurrent cell h_t = keep_t h_{t-1} + write_t x~_t (x~ = x W_V) from h_{-1} = 0."""
    shared = ("W_V", "W_O")
    forms = FORMS
    padded = ("v",)

    def logits(self, p, x):
        """The option logits A (A, S, T, 2) of derive's cell: w_io over (previous state, new content)."""
        raise NotImplementedError

    def steps(self, p, x):
        """(keep, write), each (A, S, T)."""
        raise NotImplementedError

    def logs(self, p, x):
        """(log keep, log write) from the logits, without forming 1 - g: log(1 - sigma(a)) = -softplus(a)."""
        raise NotImplementedError

    def prepare(self, p, x):
        log_keep, log_write = self.logs(p, x)
        return {"v": project(x, p["W_V"]), "G": cumulative(log_keep), "start": log_write.double()}

    def block(self, pre, lo, hi, mask):
        return log_decay(pre, lo, hi, pre["v"].dtype).masked_fill(~mask, float("-inf")).exp()

    def scan(self, p, x):
        """The recurrence as written, one step per position."""
        import torch

        keep, write = self.steps(p, x)
        v = project(x, p["W_V"])
        h = v.new_zeros(v[..., 0, :].shape)
        out = []
        for t in range(v.shape[-2]):
            h = keep[..., t, None] * h + write[..., t, None] * v[..., t, :]
            out.append(h)
        return torch.stack(out, -2)

    def weights(self, p, x, mask):
        import torch

        keep, write = self.steps(p, x)
        return {"w": torch.stack([keep, write], -1), "reference": {"A": self.logits(p, x)},
                "unrolled": self.block(self.prepare(p, x), 0, x.shape[-2], mask)}
