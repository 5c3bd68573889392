"""A gated linear recurrence, one step: c_i = f_i c_prev_i + i_i g~_i, f_i = sigma(a_f), i_i = sigma(a_i), with both
gates computed from the current input alone. It is the LSTM's cell update without the LSTM's hidden-state feedback,
tanh or output gate, so it is not an LSTM (numeric.experiments.lstm trains the real one). Written as weights over two
options o (dim g, size 2: o = 0 the previous cell state, o = 1 the candidate) with logits A_i0 = a_f, A_i1 = a_i:
w_io = sigma(A_io), unnormalised, so each gate has its own per-key baseline and the two do not compete."""
from derive.mechanisms import register
from derive.mechanisms.base import Mechanism, Mutant
from derive.mechanisms.forms import per_key
from derive.mechanisms.gate import CELL_LEAVES, advantage, content, logit, options_content, reference_content
from derive.mechanisms.layer import Cell, softplus
from derive.mechanisms.layer import logit as token_logit
from derive.mechanisms.sigmoid import sigma


def weight(m, i, o):
    return sigma(m, m.s(i, o))


def reference(t):
    return t["A"].sigmoid()


class GLRLayer(Cell):
    """The recurrence, as derive analyses it: c_t = f_t c_{t-1} + i_t g~_t read out directly (no tanh, no output
    gate, so the output stays linear in the content like every other mechanism's); f_t = sigma(x_t w_f) keeps,
    i_t = sigma(x_t w_i) writes."""
    own = {"w_f": ("d_in",), "w_i": ("d_in",)}

    def _logits(self, p, x):
        return token_logit(p, x, "w_f"), token_logit(p, x, "w_i")

    def logits(self, p, x):
        import torch

        return torch.stack(self._logits(p, x), -1)

    def steps(self, p, x):
        a_f, a_i = self._logits(p, x)
        return a_f.sigmoid(), a_i.sigmoid()

    def logs(self, p, x):
        a_f, a_i = self._logits(p, x)
        return -softplus(-a_f), -softplus(-a_i)


MECHANISM = register(Mechanism(
    "glr", "gated linear recurrence (independent forget and input gates of x_t)", logit, weight, routing=per_key, reference=reference,
    normalised=False,
    latex=r"c_i=f_i\,c^{\mathrm{prev}}_i+\iota_i\,\tilde g_i,\ f_i=\sigma(A_{i0}),\ \iota_i=\sigma(A_{i1}):\ w_{io}=\sigma(A_{io})",
    routing_latex=r"\frac{\partial L}{\partial A_{io}}=w_{io}(1-w_{io})\,b_{io}",
    ref="the LSTM's cell update (Hochreiter and Schmidhuber 1997; forget gate: Gers et al. 2000) with gates of x_t only",
    mutants=(Mutant("glr-advantage", "routing", "the paper's softmax form applied to the recurrence's gates", advantage),
             Mutant("glr-no-saturation", "routing", "the factor 1 - w dropped: w b",
                    lambda m, i, j: m.alpha(i, j) * m.b(i, j))),
    leaves=CELL_LEAVES, free={"A": ("scores",), "H": ("scores",)}, domains=dict.fromkeys(CELL_LEAVES, "real"),
    dims={"g": 2}, axis="g", logit_leaf="A",
    content=content, content_spec=options_content("H", "DeltaH"), reference_content=reference_content,
    layer=GLRLayer()))
