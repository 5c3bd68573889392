"""A scalar convex gate, one step: h_i = (1 - g_i) h_prev_i + g_i x~_i with one scalar g_i = sigma(a_i) per position
from the current input alone (the form of GRU's update gate with the reset path and hidden-state input removed; not
Mamba-1's selective scan, whose input-dependent step drives a matrix state and a per-channel decay). Written as
weights over two options o (dim g, size 2: o = 0 the previous state, o = 1 the candidate) with logits A_i0, A_i1:
w_io = e^{A_io} / (e^{A_i0} + e^{A_i1}), so g_i = sigma(A_i1 - A_i0) (a_i = A_i1 - A_i0; fixing A_i0 = 0 gives the
one-logit gate). The contents H_i0 = h_prev_i, H_i1 = x~_i are the cell's own per position."""
from derive.mechanisms import register
from derive.mechanisms.base import ContentSpec, Mechanism, Mutant
from derive.mechanisms.forms import per_key
from derive.mechanisms.layer import Cell, softplus
from derive.mechanisms.layer import logit as token_logit


def logit(m, i, o):
    return m.leaf("A", i, o)


def weight(m, i, o):
    return m.exp(m.s(i, o)) / m.sum("g", lambda p: m.exp(m.s(i, p)))


def content(m, i, o, a):
    return m.leaf("H", i, o, a)


def reference(t):
    return t["A"].softmax(-1)


def reference_content(t):
    """H: each position's own two options, (..., n, 2, d_v)."""
    return t["H"]


def options_content(leaf, delta):
    """A cell's content question: dL/dH_ioa = w_io u_ia, each option's content used by its own position."""
    return ContentSpec(leaf, ("n", "g"), ("dv",), "scores", lambda m, i, o, a: m.alpha(i, o) * m.u(i, a),
                       lambda m, i, o: m.alpha(i, o), delta)


def advantage(m, i, j):
    return m.alpha(i, j) * (m.b(i, j) - m.baseline(i))


class GateLayer(Cell):
    """g_t = sigma(x_t w_g): keep 1 - g, write g; w_io a softmax over (previous, candidate) of (0, a_t)."""
    own = {"w_g": ("d_in",)}

    def logits(self, p, x):
        import torch

        a = token_logit(p, x, "w_g")
        return torch.stack([torch.zeros_like(a), a], -1)

    def steps(self, p, x):
        g = token_logit(p, x, "w_g").sigmoid()
        return 1 - g, g

    def logs(self, p, x):
        a = token_logit(p, x, "w_g")
        return -softplus(a), -softplus(-a)


CELL_LEAVES = {"A": ("n", "g"), "H": ("n", "g", "dv"), "DeltaH": ("n", "g", "dv")}

MECHANISM = register(Mechanism(
    "gate", "scalar convex gate per position (sigma(x_t w) between state and input)", logit, weight, routing=advantage, reference=reference,
    normalised=True,
    latex=r"h_i=(1-g_i)\,h^{\mathrm{prev}}_i+g_i\,\tilde x_i,\ g_i=\sigma(a_i):\ w_{io}=\frac{e^{A_{io}}}{\sum_p e^{A_{ip}}},"
          r"\ a_i=A_{i1}-A_{i0}",
    routing_latex=r"\frac{\partial L}{\partial A_{io}}=w_{io}\big(b_{io}-\textstyle\sum_p w_{ip}b_{ip}\big),\ "
                  r"\frac{\partial L}{\partial a_i}=g_i(1-g_i)\big(u_i\cdot\tilde x_i-u_i\cdot h^{\mathrm{prev}}_i\big)",
    ref="the form of GRU's update gate (arXiv 1406.1078), with the gate of x_t only",
    mutants=(Mutant("gate-per-key", "routing", "independent gates' per-key form w(1-w)b", per_key),
             Mutant("gate-no-baseline", "routing", "the baseline dropped: w b", lambda m, i, j: m.alpha(i, j) * m.b(i, j))),
    leaves=CELL_LEAVES, free={"A": ("scores",), "H": ("scores",)}, domains=dict.fromkeys(CELL_LEAVES, "real"),
    dims={"g": 2}, axis="g", logit_leaf="A",
    content=content, content_spec=options_content("H", "DeltaH"), reference_content=reference_content,
    layer=GateLayer()))
