"""Normalised linear attention (arXiv 2006.16236): w_ij = M_ij kappa_ij / sum_l M_il kappa_il with the
positive kernel kappa_ij = phi(q_i) . phi(k_j), phi = exp elementwise. Its routing logit is
s_ij = log kappa_ij, so the weight is a softmax of the logits and it routes by advantage."""
from derive.mechanisms import register
from derive.mechanisms.base import Mechanism, Mutant
from derive.mechanisms.forms import advantage, per_key
from derive.mechanisms.layer import Layer
from derive.mechanisms.softmax import weight


def score(m, i, j):
    """log kappa_ij = log sum_a e^{q_ia} e^{k_ja} (the feature map phi = exp keeps kappa positive)."""
    return m.log(m.sum("dk", lambda a: m.exp(m.q(i, a)) * m.exp(m.k(j, a))))


def reference(t):
    """kappa = phi(q) phi(k)^T with phi = exp, normalised over allowed keys (a row with none is 0)."""
    kappa = t["q"].exp() @ t["k"].exp().mT
    if t.get("mask") is not None:
        kappa = kappa * t["mask"]
    total = kappa.sum(-1, keepdim=True)
    return kappa / total.masked_fill(total == 0, 1.0)


def reference_logits(t):
    """The weights from free logits t["s"] = log kappa (the scores level): `reference` with phi(q) = e^s, phi(k) = I."""
    s = t["s"]
    return reference({**t, "q": s, "k": s.new_ones(s.shape[-1]).diag().log()})


def log_kernel(q, k):
    """log kappa_ij = log sum_a e^{q_ia} e^{k_ja}, each row max-shifted (finite wherever kappa is)."""
    mq, mk = q.detach().amax(-1, keepdim=True), k.detach().amax(-1, keepdim=True)
    return ((q - mq).exp() @ (k - mk).exp().mT).log() + mq + mk.mT


class LinearLayer(Layer):
    """exp(q) . exp(k) is not a dot product of q and k (a zero column adds e^0 to it): q and k are not padded."""
    padded = ("v",)

    def block(self, pre, lo, hi, mask):
        return log_kernel(pre["q"][..., lo:hi, :], pre["k"][..., :hi, :]).masked_fill(~mask, float("-inf")).softmax(-1)


MECHANISM = register(Mechanism(
    "linear", "normalised linear attention", score, weight, routing=advantage, reference=reference, normalised=True,
    reference_logits=reference_logits, layer=LinearLayer(),
    latex=r"w_{ij}=\frac{M_{ij}\kappa_{ij}}{\sum_l M_{il}\kappa_{il}},\ \kappa_{ij}=\phi(q_i)\cdot\phi(k_j),\ "
          r"\phi=\exp,\ s_{ij}=\log\kappa_{ij}",
    routing_latex=r"\frac{\partial L}{\partial \log\kappa_{ij}}=w_{ij}\big(b_{ij}-\textstyle\sum_k w_{ik}b_{ik}\big)",
    ref="normalised linear attention, arXiv 2006.16236",
    mutants=(Mutant("linear-per-key", "routing", "sigmoid attention's per-key form w(1-w)b", per_key),
             Mutant("linear-kernel-not-logit", "routing", "the advantage times kappa (the kernel taken for its log)",
                    lambda m, i, j: advantage(m, i, j) * m.exp(m.s(i, j))))))
