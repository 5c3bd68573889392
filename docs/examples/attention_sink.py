"""A mechanism of your own: softmax attention with an attention sink, registered from a claims file.

    python -m derive.all --only derive --claims docs/examples/attention_sink.py

adds the row `sink` to the mechanisms table (results.json `mechanisms`, the report). Every query may also
attend to a sink: a key with logit beta and a zero value, so w_ij = M_ij e^{s_ij} / (e^beta + sum_k M_ik
e^{s_ik}) and the weights of the real keys sum to less than 1.

Its `layer` (optional) makes it trainable too: the experiments stage then trains it on the sticky chain beside
the built-ins (the mechanism grid, results.json `experiments.mechanism_grid`) and in the wind tunnel. The layer
forms the same weights for a block of query rows; the sink's logit is beta = -log T, the layers' shared bias.
"""
from derive.mechanisms import Mechanism, Mutant, register
from derive.mechanisms.forms import advantage, per_key
from derive.mechanisms.layer import Layer
from derive.mechanisms.softmax import score


def weight(m, i, j):
    return m.mask(i, j) * m.exp(m.s(i, j)) / (m.exp(m.beta) + m.sum("n", lambda k: m.mask(i, k) * m.exp(m.s(i, k))))


def reference(t):
    """The same weights in plain torch (tensor methods only): a softmax over the keys and the sink, the sink's
    share dropped."""
    s = t["c"] * t["q"] @ t["k"].mT
    if t.get("mask") is not None:
        s = s.masked_fill(t["mask"] == 0, float("-inf"))
    top = s.amax(-1, keepdim=True).clamp(min=float(t["beta"]))
    e = (s - top).exp()
    return e / (e.sum(-1, keepdim=True) + (float(t["beta"]) - top).exp())


class SinkLayer(Layer):
    """Query rows lo:hi over keys 0:hi: the reference's max-shifted softmax over the keys and the sink."""

    def block(self, pre, lo, hi, mask):
        s = self.scores(pre, lo, hi).masked_fill(~mask, float("-inf"))
        top = s.amax(-1, keepdim=True).clamp(min=pre["beta"])
        e = (s - top).exp()
        return e / (e.sum(-1, keepdim=True) + (pre["beta"] - top).exp())


register(Mechanism(
    "sink", "softmax with an attention sink", score, weight, routing=advantage, reference=reference,
    normalised=False, layer=SinkLayer(),
    latex=r"w_{ij}=\frac{M_{ij}e^{s_{ij}}}{e^{\beta}+\sum_k M_{ik}e^{s_{ik}}}",
    routing_latex=r"\frac{\partial L}{\partial s_{ij}}=w_{ij}\big(b_{ij}-\textstyle\sum_k w_{ik}b_{ik}\big)",
    ref="attention sinks (arXiv 2309.17453)",
    mutants=(Mutant("sink-per-key", "routing", "sigmoid attention's per-key form", per_key),)))
