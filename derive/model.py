"""Single-head attention with a cross-entropy readout, in index notation (the paper's setting).

The model is written once against a small set of primitives (`leaf`, `sum`, `exp`, `log`,
`grad`, ...). Each proof path supplies a backend that interprets those primitives:

- `derive.general.GeneralBackend`  symbolic sizes, SymPy `IndexedBase`/`Sum`
- `derive.fixed.RingBackend`       fixed sizes, every entry a generator of a differential ring
- `derive.rational.RationalBackend` an exact expression graph at random rational points

Indices are typed by the range they run over (a "dim"); using an index of the wrong range
raises `ShapeError` naming the offending index.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

# The ranges of the model: positions (T = n), key/query width, value width, classes, input width.
DIMS = ("n", "dk", "dv", "m", "dx")

# Every indexed quantity the model can treat as an independent variable, with its index ranges.
LEAVES = {
    "s": ("n", "n"),  # scores s_ij
    "alpha": ("n", "n"),  # attention weights (C7 treats them as free)
    "q": ("n", "dk"),
    "k": ("n", "dk"),
    "v": ("n", "dv"),
    "o": ("n", "dv"),  # attention outputs (readout level)
    "U": ("n", "dv"),  # upstream gradient u_i as a free quantity (linear loss)
    "WO": ("dv", "m"),
    "Y": ("n", "m"),  # one-hot targets e_{y_i}
    "X": ("n", "dx"),
    "WQ": ("dx", "dk"),
    "WK": ("dx", "dk"),
    "WV": ("dx", "dv"),
    "M": ("n", "n"),  # causal mask as a free 0/1 multiplier over full ranges (triangular ranges are unsound with delta resolution)
    "Delta": ("n", "dv"),  # a free value step (C10)
    "R": ("n", "m"),  # the other heads' share of the logits (readout "concat" only)
}

# Which quantities are independent at each level of the model.
LEVELS = {
    "alpha": {"alpha", "v"},
    "scores": {"s", "v"},
    "qk": {"q", "k", "v"},
    "params": {"X", "WQ", "WK", "WV"},
    "readout": {"o", "WO"},
}
LOSSES = ("linear", "ce")
# Scalar symbols a claim may use or differentiate by (m.c, m.eta, m.beta; m.grad(f, "c")). beta is a
# mechanism's free bias (sigmoid attention's sigma(s + beta)); the softmax model does not read it.
SCALARS = ("c", "eta", "beta")
# Leaves downstream of the attention output o (and U, the linearised loss's own): a claim that
# touches them, or differentiates by them or by o, is proved at the full cross-entropy loss.
READOUT_LEAVES = ("WO", "Y", "U", "R")
LINEARISABLE = tuple(n for n in (*LEAVES, *SCALARS) if n not in READOUT_LEAVES + ("o",))
MASK_ALGEBRAS = ("boolean", "causal")
# The size of a mechanism's own free dim (experts) on the fixed-size paths when a grid does not give one.
MECHANISM_DIM_SIZE = 3
# "single": the logits are z_i = W_O^T o_i (one head). "concat": the head is one of several whose outputs are
# concatenated before the output projection, z_i = [o^1_i; ...; o^H_i] W_O = sum_h W_O^{(h)T} o^h_i; the model
# is head h, with W_O its block of the projection, and the leaf R_i = sum_{h' != h} W_O^{(h')T} o^{h'}_i the
# other heads' share of the logits. R is free: the other heads' scores and values are independent of this
# head's, so one free R covers every number of heads and every value they take, for derivatives by this
# head's own quantities (s, alpha, q, k, v, o, its W_Q, W_K, W_V, its block W_O). What every head shares (the
# input X, the scale c) also moves R, so derivatives by it are refused under "concat".
READOUTS = ("single", "concat")
# What every head shares: the other heads' logits R depend on it, so under readout "concat" (R held fixed) a
# derivative by it would miss the other heads' paths; it is refused there.
SHARED_ACROSS_HEADS = ("X", "c")


class ShapeError(ValueError):
    """An index of the wrong range, or a free index the claim does not declare."""


@dataclass(frozen=True)
class Setting:
    """Where a model instance lives: which variables are free, which loss, masked or not."""

    level: str
    loss: str
    masked: bool
    mask_algebra: str = "boolean"  # "causal": the general path may also use M_ii = 1 and transitivity
    readout: str = "single"  # "concat": the logits also receive the other heads' share R (READOUTS)
    mechanism: str = "softmax"  # how routing logits become weights (derive.mechanisms)

    def __post_init__(self):
        from derive import mechanisms

        mechanisms.get(self.mechanism)  # a ValueError naming the known ones
        if self.readout not in READOUTS:
            raise ValueError(f"unknown readout {self.readout!r}; expected one of {READOUTS}")
        if self.mask_algebra not in MASK_ALGEBRAS:
            raise ValueError(f"unknown mask algebra {self.mask_algebra!r}; expected one of {MASK_ALGEBRAS}")
        if self.level not in LEVELS:
            raise ValueError(f"unknown level {self.level!r}; expected one of {sorted(LEVELS)}")
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}; expected one of {LOSSES}")


def memo(method):
    """Cache a model quantity per index tuple (quantities are pure functions of their indices).

    Backends may intercept through `_quantity` (the code generator materialises quantities)."""

    @functools.wraps(method)
    def cached(self, *ix):
        return self._quantity(method.__name__, ix, lambda *args: method(self, *args))

    return cached


class AttentionModel:
    """The paper's quantities, defined once in terms of a backend's primitives."""

    def __init__(self, setting: Setting, context: str = ""):
        from derive import mechanisms

        self.setting = setting
        self.mechanism = mechanisms.get(setting.mechanism)
        self.context = context  # names the claim in error messages
        self._cache = {}
        # What the claim touched (see `linearisation_exact`): public loss / grad uses, derived names.
        self.usage = set()

    # -- primitives a backend provides -------------------------------------------------------
    def entry(self, name, *ix):  # pragma: no cover - abstract
        raise NotImplementedError

    def scalar(self, name):  # pragma: no cover - abstract
        raise NotImplementedError

    def _size(self, dim):  # pragma: no cover - abstract
        raise NotImplementedError

    def _sum(self, dim, body):  # pragma: no cover - abstract
        raise NotImplementedError

    def exp(self, x):  # pragma: no cover - abstract
        raise NotImplementedError

    def log(self, x):  # pragma: no cover - abstract
        raise NotImplementedError

    def _grad(self, f, name, ix):  # pragma: no cover - abstract
        """d f / d name[ix]: name a leaf of LEAVES (ix its indices) or a scalar of SCALARS (ix = ())."""
        raise NotImplementedError

    def dim_of(self, ix):  # pragma: no cover - abstract
        raise NotImplementedError

    def mask_entry(self, i, j):  # pragma: no cover - abstract
        raise NotImplementedError

    def _delta(self, i, j):  # pragma: no cover - abstract
        raise NotImplementedError

    def _quantity(self, name, ix, compute):
        key = (name, ix)
        if key not in self._cache:
            self._cache[key] = compute(*ix)
        return self._cache[key]

    # -- typed access ----------------------------------------------------------------------
    def dims(self):
        """The model's index ranges and the mechanism's own (e.g. experts e, a gate's options g)."""
        return DIMS + tuple(self.mechanism.dims)

    def mechanism_sizes(self, sizes):
        """Fixed sizes completed with the mechanism's own dims: a fixed size (a gate's 2 options) or, for a
        dim the mechanism leaves free (experts), MECHANISM_DIM_SIZE unless `sizes` gives one."""
        return {**{d: (v or MECHANISM_DIM_SIZE) for d, v in self.mechanism.dims.items()}, **dict(sizes),
                **{d: v for d, v in self.mechanism.dims.items() if v}}

    def _check_dim(self, dim):
        if dim not in self.dims():
            raise ShapeError(f"{self.context}: unknown dimension {dim!r}; the model's are {', '.join(self.dims())}")

    def leaves(self):
        """The model's leaves and the mechanism's own (e.g. the SSD decays ell_t), name -> index ranges."""
        return {**LEAVES, **self.mechanism.leaves}

    def _check_indices(self, name, ix, what):
        leaves = self.leaves()
        if name not in leaves:
            known = ", ".join(list(leaves) + list(SCALARS))
            raise ShapeError(f"{self.context}: unknown leaf {name!r} in {what}; the model's are {known}")
        dims = leaves[name]
        if len(ix) != len(dims):
            raise ShapeError(f"{self.context}: {name} takes {len(dims)} indices, got {len(ix)} in {what}")
        for pos, (i, want) in enumerate(zip(ix, dims)):
            got = self.dim_of(i)
            if got != want:
                raise ShapeError(
                    f"{self.context}: index {i} ranges over {got} but position {pos + 1} "
                    f"of {name} ranges over {want}"
                )

    def leaf(self, name, *ix):
        """An entry of a named quantity, after checking each index's range."""
        if name in READOUT_LEAVES:
            self.usage.add(f"leaf:{name}")
        self._check_indices(name, ix, f"leaf {name}")
        if name == "R" and self.setting.readout != "concat":
            raise ShapeError(f"{self.context}: leaf R (the other heads' share of the logits) exists only under "
                             f"readout 'concat'; this identity's readout is {self.setting.readout!r}")
        return self.entry(name, *ix)

    def size(self, dim):
        """The size of a dimension (n = T for positions)."""
        self._check_dim(dim)
        return self._size(dim)

    def sum(self, dim, body):
        """sum over one index of range `dim` of body(index)."""
        self._check_dim(dim)
        return self._sum(dim, body)

    def grad(self, f, name, *ix):
        """d f / d name[ix] for any expression f of the model: name a leaf, or "c" / "eta" with no index.

        Differentiating anything but the loss (a second derivative, a Jacobian) makes every path
        use the full cross-entropy loss."""
        self._check_variable(name, ix, "grad")
        self._check_free_variable(name, "grad")
        self.usage.add("grad")
        return self._grad(f, name, tuple(ix))

    def variables(self):
        """What a derivative may be taken by: the level's free quantities, the leaves every level's loss reads
        (W_O, the targets Y), the free step Delta, and c, eta. Never the mask, nor a quantity the level derives;
        under readout "concat" never what every head shares (SHARED_ACROSS_HEADS)."""
        own = {name for name, levels in self.mechanism.free.items() if self.setting.level in levels}
        free = sorted(LEVELS[self.setting.level] | own | {"WO", "Y", "Delta"}) + list(SCALARS)
        return [n for n in free if n not in SHARED_ACROSS_HEADS] if self.setting.readout == "concat" else free

    def _check_free_variable(self, name, what):
        if self.setting.readout == "concat" and name in SHARED_ACROSS_HEADS:
            raise ShapeError(f"{self.context}: {what} by {name}: under readout 'concat' the other heads' logits R "
                             f"are held fixed, but every head shares {name}, so R depends on it; differentiate by "
                             f"this head's own quantities only")
        if name not in self.variables():
            raise ShapeError(f"{self.context}: {what} by {name}: {name} is not a free variable at level "
                             f"{self.setting.level}; free there: {', '.join(self.variables())}")

    def _check_variable(self, name, ix, what):
        if name in SCALARS:
            if ix:
                raise ShapeError(f"{self.context}: scalar {name} takes no indices, got {len(ix)} in {what}")
            return
        self._check_indices(name, ix, f"{what} d/d{name}")

    def linearisation_exact(self):
        """(exact, reason): may the loss be replaced by <U, o> for what this claim touched?

        Exact for first derivatives of the loss with respect to quantities upstream of o, which
        reach the loss only through o (the chain rule), read through u."""
        bad = sorted(self.usage - {"derived:" + n for n in LINEARISABLE})
        return (not bad, ", ".join(bad))

    def _is_free(self, name):
        return name in LEVELS[self.setting.level] or self.setting.level in self.mechanism.free.get(name, ())

    # -- the forward model (the paper's setting) ---------------------------------------------
    @property
    def c(self):
        return self.scalar("c")

    @property
    def eta(self):
        return self.scalar("eta")

    @property
    def beta(self):
        return self.scalar("beta")

    def mask(self, i, j):
        """M_ij: 1 where position i may attend to j (free 0/1 symbol when masked)."""
        self._same_range("mask", (i, j), "n")
        return self.mask_entry(i, j) if self.setting.masked else 1

    def delta(self, i, j):
        """Kronecker delta of two indices of the same range."""
        self._same_range("delta", (i, j), self.dim_of(i))
        return self._delta(i, j)

    def _same_range(self, what, ix, want):
        for i in ix:
            if self.dim_of(i) != want:
                raise ShapeError(f"{self.context}: {what}({', '.join(map(str, ix))}): index {i} ranges over "
                                 f"{self.dim_of(i)}, not {want}")

    def _projected(self, name, weight, i, a):
        """q, k, v are leaves, or X W_Q, X W_K, X W_V at the parameter level."""
        if self.setting.level == "params":
            return self.sum("dx", lambda x: self.leaf("X", i, x) * self.leaf(weight, x, a))
        return self.leaf(name, i, a)

    @memo
    def q(self, i, a):
        return self._projected("q", "WQ", i, a)

    @memo
    def k(self, j, a):
        return self._projected("k", "WK", j, a)

    @memo
    def v(self, j, a):
        return self._projected("v", "WV", j, a)

    @memo
    def s(self, i, j):
        """The routing logit s_ij of query i for option j (a key, an expert, a gate's input): the mechanism's
        score (softmax: c q_i . k_j), or its logit leaf at the scores level."""
        if self.setting.level == "scores":
            return self.leaf(self.mechanism.logit_leaf, i, j)
        return self.mechanism.score(self, i, j)

    @memo
    def e(self, i, j):
        return self.exp(self.s(i, j))

    @memo
    def Z(self, i):
        """Softmax normaliser over allowed positions."""
        return self.sum("n", lambda k: self.mask(i, k) * self.e(i, k))

    @memo
    def alpha(self, i, j):
        """The routing weight: the mechanism's function of the logits and the mask (softmax:
        alpha_ij = M_ij exp(s_ij) / sum_k M_ik exp(s_ik))."""
        if self.setting.level == "alpha":
            return self.leaf("alpha", i, j)
        return self.mechanism.weight(self, i, j)

    @memo
    def content(self, i, j, a):
        """What option j offers query i (component a): v_j for attention, the mechanism's own otherwise."""
        return self.mechanism.content(self, i, j, a) if self.mechanism.content else self.v(j, a)

    @memo
    def o(self, i, a):
        """o_i = sum_j alpha_ij v_j (sum over the mechanism's options of weight times content)."""
        if self.setting.level == "readout":
            return self.leaf("o", i, a)
        return self.sum(self.mechanism.axis, lambda j: self.alpha(i, j) * self.content(i, j, a))

    def z_head(self, i, c):
        """This head's share of the logits, W_O^T o_i (all of them under readout "single")."""
        return self.sum("dv", lambda a: self.leaf("WO", a, c) * self.o(i, a))

    @memo
    def z(self, i, c):
        """Logits z_i = W_O^T o_i, plus the other heads' share R_i under readout "concat"."""
        if self.setting.readout == "concat":
            return self.z_head(i, c) + self.entry("R", i, c)  # the model's own leaf: not a use of R by the claim
        return self.z_head(i, c)

    @memo
    def G(self, i):
        return self.sum("m", lambda c: self.exp(self.z(i, c)))

    @memo
    def p(self, i, c):
        """Class probabilities p_i = softmax(z_i)."""
        return self.exp(self.z(i, c)) / self.G(i)

    def loss(self):
        """L, the loss itself (a claim that reads it is proved at the full cross-entropy loss)."""
        self.usage.add("loss")
        return self._loss()

    @memo
    def _loss(self):
        """L: mean cross-entropy, or <U, o> (the chain rule's linearisation at the outputs)."""
        if self.setting.loss == "linear":
            return self.sum("n", lambda i: self.sum("dv", lambda a: self.entry("U", i, a) * self.o(i, a)))
        per_position = lambda i: self.log(self.G(i)) - self.sum("m", lambda c: self.leaf("Y", i, c) * self.z(i, c))  # noqa: E731
        return self.sum("n", per_position) / self.size("n")

    # -- the paper's named quantities (closed forms) -----------------------------------------
    @memo
    def u(self, i, a):
        """u_i = dL/do_i: free under the linear loss, the C5 closed form under cross-entropy."""
        if self.setting.loss == "linear":
            return self.entry("U", i, a)  # the linearisation's own leaf: not a use of U by the claim
        return self.sum("m", lambda c: self.leaf("WO", a, c) * (self.p(i, c) - self.leaf("Y", i, c))) / self.size("n")

    @memo
    def b(self, i, j):
        """Compatibility b_ij = u_i . v_j (u_i . the content of option j)."""
        return self.sum("dv", lambda a: self.u(i, a) * self.content(i, j, a))

    @memo
    def baseline(self, i):
        """The alpha-weighted mean compatibility E_{alpha_i}[b]."""
        return self.sum(self.mechanism.axis, lambda k: self.alpha(i, k) * self.b(i, k))

    @memo
    def dS(self, i, j):
        """C1: dL/ds_ij = alpha_ij (b_ij - E_{alpha_i}[b]) — the advantage A_ij."""
        return self.alpha(i, j) * (self.b(i, j) - self.baseline(i))

    @memo
    def dV(self, j, a):
        """C2: dL/dv_j = sum_i alpha_ij u_i."""
        return self.sum("n", lambda i: self.alpha(i, j) * self.u(i, a))

    @memo
    def dQ(self, i, a):
        """C3: dL/dq_i = c sum_j dS_ij k_j."""
        return self.c * self.sum("n", lambda j: self.dS(i, j) * self.k(j, a))

    @memo
    def dK(self, j, a):
        """C4: dL/dk_j = c sum_i dS_ij q_i."""
        return self.c * self.sum("n", lambda i: self.dS(i, j) * self.q(i, a))

    @memo
    def baseline_fused(self, i):
        """u_i . o_i: the baseline without the n x n sum (C1, identity "fused baseline")."""
        return self.sum("dv", lambda a: self.u(i, a) * self.o(i, a))

    @memo
    def responsibility(self, j):
        """N_j = sum_i alpha_ij: the soft count of queries routed to position j."""
        return self.sum("n", lambda i: self.alpha(i, j))

    def derived_grad(self, name, *ix):
        """dL/d(name)[ix], differentiated by the backend from the loss: a free leaf, or "c" / "eta"."""
        self._check_variable(name, ix, "derived_grad")
        self._check_free_variable(name, "derived_grad")
        self.usage.add(f"derived:{name}")
        return self._grad(self._loss(), name, tuple(ix))
