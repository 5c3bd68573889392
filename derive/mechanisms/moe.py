"""A top-k mixture-of-experts layer: o_i = sum_e g_ie y_ie with y_ie = x_i W_e (one linear expert per e) and
g_i a softmax of the router logits r_ie = x_i . w_e over the selected experts S_i: g_ie = S_ie e^{r_ie} /
sum_e' S_ie' e^{r_ie'}. The selection S is a given 0/1 matrix (as top-k chooses it): the model's mask M read
over (token, expert), any 0/1 matrix at general size. The experts' weights W_e are the content."""
from derive.mechanisms import register
from derive.mechanisms.base import ContentSpec, Mechanism, Mutant
from derive.mechanisms.forms import advantage, per_key
from derive.mechanisms.layer import Layer, project


def select(m, i, e):
    """S_ie: 1 where token i's top-k chose expert e (the mask entry M_ie; every expert when unmasked)."""
    return m.mask_entry(i, e) if m.setting.masked else 1


def logit(m, i, e):
    """r_ie = x_i . w_e (the router's weights WR are routing parameters)."""
    return m.sum("dx", lambda x: m.leaf("X", i, x) * m.leaf("WR", x, e))


def weight(m, i, e):
    return select(m, i, e) * m.exp(m.s(i, e)) / m.sum("e", lambda f: select(m, i, f) * m.exp(m.s(i, f)))


def content(m, i, e, a):
    """y_ie = x_i W_e."""
    return m.sum("dx", lambda x: m.leaf("X", i, x) * m.leaf("WE", e, x, a))


def reference(t):
    r = t["r"] if "r" in t else t["X"] @ t["WR"]
    if t.get("mask") is None:
        return r.softmax(-1)
    e = (r - r.amax(-1, keepdim=True)).exp() * t["mask"]
    total = e.sum(-1, keepdim=True)
    return e / total.masked_fill(total == 0, 1.0)


def reference_content(t):
    """y_ie = x_i W_e for every expert, (..., n, E, d_v)."""
    return (t["X"].unsqueeze(-3) @ t["WE"]).transpose(-3, -2)


class MoELayer(Layer):
    """Top-2 of 4 linear experts per token: o_t = sum_e g_te x_t W_e, r_te = x_t . w_e; no mixing over positions."""
    experts, top_k = 4, 2
    shared = ("W_O",)
    own = {"W_R": ("d_in", experts), "W_E": (experts, "d_in", "d_v")}
    content = ("W_E",)
    quadratic = False

    def router(self, p, x):
        """Router logits r (A, S, T, E), the top-k selection S (0/1, float) and the gates g (A, S, T, E)."""
        r = project(x, p["W_R"])
        top = r.detach().topk(self.top_k, -1).indices
        sel = r.new_zeros(r.shape).scatter_(-1, top, 1.0)
        return r, sel, r.masked_fill(sel == 0, float("-inf")).softmax(-1)

    def mix(self, p, x):
        """One matmul of (g_t (x) x_t) with the stacked experts."""
        _, _, g = self.router(p, x)
        gx = (g[..., :, None] * x[..., None, :]).flatten(-2)  # (..., T, E d_in)
        return project(gx, p["W_E"].flatten(-3, -2))  # W_E (..., E, d_in, d_v) as (..., E d_in, d_v)

    def tracked(self, p, x, rows):
        """The gates of each tracked token, flattened (A, S, R * E)."""
        return self.router(p, x)[2][..., list(rows), :].flatten(-2)

    def weights(self, p, x, mask):
        _, sel, g = self.router(p, x)
        return {"w": g, "reference": {"X": x.expand(g.shape[:-1] + x.shape[-1:]), "WR": p["W_R"], "mask": sel}}


CONTENT = ContentSpec(
    "WE", ("e",), ("dx", "dv"), "scores",
    lambda m, e, x, a: m.sum("n", lambda i: m.alpha(i, e) * m.leaf("X", i, x) * m.u(i, a)),
    lambda m, e: m.sum("n", lambda i: m.alpha(i, e)), "DeltaE")

MECHANISM = register(Mechanism(
    "moe", "mixture of experts (top-k router)", logit, weight, routing=advantage, reference=reference,
    normalised=True,
    latex=r"o_i=\textstyle\sum_e g_{ie}\,x_iW_e,\ g_{ie}=\frac{S_{ie}e^{r_{ie}}}{\sum_{e'}S_{ie'}e^{r_{ie'}}},\ r_{ie}=x_i\cdot w_e",
    routing_latex=r"\frac{\partial L}{\partial r_{ie}}=g_{ie}\big(b_{ie}-\textstyle\sum_{e'} g_{ie'}b_{ie'}\big),\ b_{ie}=u_i\cdot y_{ie}",
    ref="sparsely-gated mixture of experts (arXiv 1701.06538), Switch/top-k routing (arXiv 2101.03961)",
    mutants=(Mutant("moe-per-key", "routing", "independent gates' per-key form g(1-g)b", per_key),
             Mutant("moe-unselected-baseline", "routing", "the baseline over every expert, selected or not",
                    lambda m, i, e: m.alpha(i, e) * (m.b(i, e) - m.sum("e", lambda f: m.b(i, f)) / m.size("e")))),
    leaves={"r": ("n", "e"), "WR": ("dx", "e"), "WE": ("e", "dx", "dv"), "DeltaE": ("e", "dx", "dv")},
    free={"r": ("scores",), "WE": ("scores", "params"), "WR": ("params",)},
    domains={"r": "real", "WR": "real", "WE": "real", "DeltaE": "real"}, dims={"e": None}, axis="e",
    logit_leaf="r", content=content, content_spec=CONTENT, reference_content=reference_content, layer=MoELayer()))
