"""Softmax attention (the paper): w_ij = M_ij e^{s_ij} / sum_k M_ik e^{s_ik}, s_ij = c q_i . k_j.
Its routing gradient is the advantage w_ij (b_ij - sum_k w_ik b_ik) (C1)."""
from derive.mechanisms import register
from derive.mechanisms.base import Mechanism, Mutant
from derive.mechanisms.forms import advantage, at_logits, per_key
from derive.mechanisms.layer import Layer


def score(m, i, j):
    return m.c * m.sum("dk", lambda a: m.q(i, a) * m.k(j, a))


def weight(m, i, j):
    return m.mask(i, j) * m.e(i, j) / m.Z(i)


def reference(t):
    """softmax over allowed keys; a row with none allowed is 0 (no NaN)."""
    s, mask = t["c"] * t["q"] @ t["k"].mT, t.get("mask")
    if mask is None:
        return s.softmax(-1)
    e = (s - s.masked_fill(mask == 0, float("-inf")).amax(-1, keepdim=True).nan_to_num(0.0, 0.0, 0.0)).exp() * mask
    total = e.sum(-1, keepdim=True)
    return e / total.masked_fill(total == 0, 1.0)


def reference_score(t):
    return t["c"] * t["q"] @ t["k"].mT


class SoftmaxLayer(Layer):
    def block(self, pre, lo, hi, mask):
        return self.scores(pre, lo, hi).masked_fill(~mask, float("-inf")).softmax(-1)


MECHANISM = register(Mechanism(
    "softmax", "softmax attention", score, weight, routing=advantage, reference=reference, normalised=True,
    reference_logits=at_logits(reference), reference_score=reference_score, layer=SoftmaxLayer(),
    latex=r"w_{ij}=\frac{M_{ij}e^{s_{ij}}}{\sum_k M_{ik}e^{s_{ik}}},\ s_{ij}=c\,q_i\cdot k_j",
    routing_latex=r"\frac{\partial L}{\partial s_{ij}}=w_{ij}\big(b_{ij}-\textstyle\sum_k w_{ik}b_{ik}\big)",
    ref="the paper (scaled dot-product attention)",
    mutants=(Mutant("softmax-per-key", "routing", "sigmoid attention's per-key form w(1-w)b", per_key),
             Mutant("softmax-no-baseline", "routing", "the baseline dropped: w b", lambda m, i, j: m.alpha(i, j) * m.b(i, j)))))
