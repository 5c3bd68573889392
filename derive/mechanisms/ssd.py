"""Decayed unnormalised linear attention: the scalar-decay form of Mamba-2's state-space duality and of
RetNet. o_i = sum_j M_ij exp(G_i - G_j) s_ij v_j with s_ij = c C_i . B_j (C, B the query and key
projections) and G_i = sum_t M_it ell_t the cumulative log-decay of data-dependent leaves ell_t <= 0
(e.g. ell_t = -softplus(Delta_t) a_t): the scan written at general length through the causal mask M,
not unrolled. The weight is linear in the logit, so dL/ds_ij = M_ij exp(G_i - G_j) b_ij: no baseline,
no competition."""
from derive.mechanisms import register
from derive.mechanisms.base import Mechanism, Mutant
from derive.mechanisms.forms import advantage, at_logits, per_key
from derive.mechanisms.layer import Layer, cumulative, log_decay, logit, softplus
from derive.mechanisms.softmax import score


def decay(m, i, j):
    """exp(G_i - G_j), G_i = sum_t M_it ell_t: the product of the decays between key j and query i."""
    return m.exp(m.sum("n", lambda t: (m.mask(i, t) - m.mask(j, t)) * m.leaf("ell", t)))


def weight(m, i, j):
    return m.mask(i, j) * decay(m, i, j) * m.s(i, j)


def routing(m, i, j):
    return m.mask(i, j) * decay(m, i, j) * m.b(i, j)


def decay_gradient(m, t):
    """dL/d ell_t = sum_ij w_ij b_ij (M_it - M_jt): the decays route by the compatibility of the pairs they span."""
    return m.sum("n", lambda i: m.sum("n", lambda j: m.alpha(i, j) * m.b(i, j) * (m.mask(i, t) - m.mask(j, t))))


def reference(t):
    """The quadratic (masked) form: w_ij = M_ij exp(G_i - G_j) c q_i . k_j, G = M ell."""
    s = t["c"] * t["q"] @ t["k"].mT
    m = t["mask"] if t.get("mask") is not None else s.new_ones(s.shape[-2:])
    G = m @ t["ell"].unsqueeze(-1)  # (..., n, 1)
    return m * (G - G.mT).exp() * s


def decays(p, x):
    """The layer's data-dependent log-decays ell_t = -softplus(x_t . w_ell) <= 0, (A, S, T)."""
    return -softplus(logit(p, x, "w_ell"))


class SSDLayer(Layer):
    own = {"w_ell": ("d_in",)}

    def prepare(self, p, x):
        return {**super().prepare(p, x), "G": cumulative(decays(p, x))}

    def block(self, pre, lo, hi, mask):
        s = self.scores(pre, lo, hi)
        return log_decay(pre, lo, hi, s.dtype).masked_fill(~mask, float("-inf")).exp() * s

    def reference_inputs(self, p, x, mask, pre):
        return {**super().reference_inputs(p, x, mask, pre), "ell": decays(p, x)}


MECHANISM = register(Mechanism(
    "ssd", "state-space duality (Mamba-2, RetNet)", score, weight, routing=routing, reference=reference,
    normalised=False, reference_logits=at_logits(reference), layer=SSDLayer(),
    latex=r"w_{ij}=M_{ij}\,e^{G_i-G_j}\,s_{ij},\ s_{ij}=c\,C_i\cdot B_j,\ G_i=\textstyle\sum_t M_{it}\ell_t",
    routing_latex=r"\frac{\partial L}{\partial s_{ij}}=M_{ij}\,e^{G_i-G_j}\,b_{ij}",
    ref="Mamba-2 (arXiv 2405.21060), RetNet (arXiv 2307.08621)",
    mutants=(Mutant("ssd-advantage", "routing", "the paper's softmax form applied to SSD", advantage),
             Mutant("ssd-per-key", "routing", "sigmoid attention's per-key form w(1-w)b", per_key),
             Mutant("ssd-no-decay", "routing", "the decay dropped: M b", lambda m, i, j: m.mask(i, j) * m.b(i, j))),
    leaves={"ell": ("n",)}, free={"ell": ("scores", "qk", "params")}, domains={"ell": "nonpositive"},
    extra=(("decay gradient", ("n",), "scores", lambda m, t: m.derived_grad("ell", t), decay_gradient,
            r"\frac{\partial L}{\partial \ell_t}=\sum_{ij}w_{ij}b_{ij}(M_{it}-M_{jt})"),)))
