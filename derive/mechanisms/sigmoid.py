"""Sigmoid attention: w_ij = M_ij sigma(s_ij + beta), s_ij = c q_i . k_j, beta a free bias (arXiv
2409.04431 takes beta = -log n). No normalisation: dL/ds_ij = w_ij (1 - w_ij) b_ij, a per-key
baseline, and the keys do not compete."""
from derive.mechanisms import register
from derive.mechanisms.base import Mechanism, Mutant
from derive.mechanisms.forms import advantage, at_logits, per_key
from derive.mechanisms.layer import Layer
from derive.mechanisms.softmax import score


def sigma(m, x):
    """The logistic function e^x / (1 + e^x), written with the model's exp (every path knows it)."""
    e = m.exp(x)
    return e / (1 + e)


def weight(m, i, j):
    return m.mask(i, j) * sigma(m, m.s(i, j) + m.beta)


def reference(t):
    w = (t["c"] * t["q"] @ t["k"].mT + t["beta"]).sigmoid()
    return w if t.get("mask") is None else w * t["mask"]


class SigmoidLayer(Layer):
    """beta = -log T."""

    def block(self, pre, lo, hi, mask):
        return (self.scores(pre, lo, hi) + pre["beta"]).sigmoid() * mask


MECHANISM = register(Mechanism(
    "sigmoid", "sigmoid attention", score, weight, routing=per_key, reference=reference, normalised=False,
    reference_logits=at_logits(reference), layer=SigmoidLayer(),
    latex=r"w_{ij}=M_{ij}\,\sigma(s_{ij}+\beta),\ s_{ij}=c\,q_i\cdot k_j",
    routing_latex=r"\frac{\partial L}{\partial s_{ij}}=w_{ij}(1-w_{ij})\,b_{ij}",
    ref="sigmoid attention, arXiv 2409.04431",
    mutants=(Mutant("sigmoid-advantage", "routing", "the paper's softmax form w(b - sum_k w b) applied to sigmoid",
                    advantage),
             Mutant("sigmoid-no-saturation", "routing", "the factor 1 - w dropped: w b",
                    lambda m, i, j: m.alpha(i, j) * m.b(i, j)))))
