"""H1–H5: multi-head attention, registered in `derive.claim.REGISTRY` on import.

H1–H3 are the bias gradients of an nn.MultiheadAttention-style head; H4 and H5 are a head's gradients when
several heads' outputs are concatenated before the output projection.

With q_i = x_i W_Q + b_Q, k_j = x_j W_K + b_K and v_j = x_j W_V + b_V, a bias enters every position's
projection alike, so by the chain rule dL/db_Q = sum_i dL/dq_i, dL/db_K = sum_j dL/dk_j and
dL/db_V = sum_j dL/dv_j. The identities state these sums in closed form at the "qk" level (q, k, v free),
where each proof path differentiates the loss itself.

With H heads, the logits are z_i = [o^1_i; ...; o^H_i] W_O = sum_h W_O^{(h)T} o^h_i. H4 and H5 take the model
as head h, with W_O its block of rows of the projection, and the other heads' share of the logits a free
leaf R (readout "concat", derive.model.READOUTS): every path proves them at the full cross-entropy loss for
any R, so for any number of heads and any values the other heads take. Their mutants include the natural
mistake of treating a head as if its own logits were all of them.

These are our own results, not the paper's: the ids are H ("heads"), never C.
"""
from __future__ import annotations

from derive import paper_claims  # noqa: F401  (registered first: the registry lists C1–C10, then H1–H5)
from derive.claim import Claim, Identity, Mutant, register

IDS = frozenset({"H1", "H2", "H3", "H4", "H5"})
REF = "ours: bias gradients of an nn.MultiheadAttention-style head"
CONCAT_REF = "ours: one head of several concatenated before the output projection"


def _bias_grad(m, name, a):
    """dL/db_name[a] = sum over positions of dL/d name[position, a] (the chain rule through x W + b)."""
    return m.sum("n", lambda j: m.derived_grad(name, j, a))


def _key_mean(m, i, a):
    """kbar_i = sum_l alpha_il k_l: the key that row i attends to on average."""
    return m.sum("n", lambda l: m.alpha(i, l) * m.k(l, a))


def _covariance(m, i, a):
    """Cov_{alpha_i}(b_i., k_.a) = sum_j alpha_ij (b_ij - bbar_i)(k_ja - kbar_ia)."""
    return m.sum("n", lambda j: m.alpha(i, j) * (m.b(i, j) - m.baseline(i)) * (m.k(j, a) - _key_mean(m, i, a)))


def _row_mass(m, i):
    """sum_j alpha_ij: 1 for a row with a key to attend to (0 for a fully masked one)."""
    return m.sum("n", lambda j: m.alpha(i, j))


register(Claim(
    id="H1", name="key-bias-gradient-vanishes",
    statement=r"\frac{\partial L}{\partial b_K} = \sum_j \frac{\partial L}{\partial k_j} = 0",
    ref=REF,
    parts=(Identity("main", ("dk",), "qk", lambda m, a: _bias_grad(m, "k", a), lambda m, a: 0,
                    r"\sum_j \partial L/\partial k_{ja} = 0"),),
    derivation=(
        r"By C4, $\sum_j \partial L/\partial k_j = c\sum_i q_i \sum_j \partial L/\partial s_{ij}$, and every row of "
        r"score gradients sums to zero (C6: adding $c\,q_i\cdot b_K$ to every score of row $i$ leaves its softmax "
        r"unchanged). So the key bias of a softmax attention head never receives a gradient: it is redundant "
        r"(a fully masked row has $\partial L/\partial s_{ij}=0$ for every $j$, so no mask condition is needed)."
    ),
    mutants=(
        Mutant("M17-key-bias-drop-baseline", "H1", "main",
               "baseline dropped in dS (alpha_ij b_ij): c sum_ij alpha_ij b_ij q_i",
               lambda m, a: m.c * m.sum("n", lambda i: m.q(i, a) * m.sum("n", lambda j: m.alpha(i, j) * m.b(i, j)))),
        Mutant("M18-key-bias-alpha-for-dS", "H1", "main", "alpha in place of dS: c sum_ij alpha_ij q_i",
               lambda m, a: m.c * m.sum("n", lambda i: m.q(i, a) * _row_mass(m, i))),
    ),
))

register(Claim(
    id="H2", name="query-bias-gradient",
    statement=(r"\frac{\partial L}{\partial b_Q} = \sum_i \frac{\partial L}{\partial q_i} = c\sum_i\sum_j "
               r"\frac{\partial L}{\partial s_{ij}}\, k_j = c\sum_i \sum_j \alpha_{ij}\,(b_{ij}-\bar b_i)(k_j-\bar k_i),"
               r"\ \bar k_i = \sum_l \alpha_{il} k_l"),
    ref=REF,
    parts=(
        Identity("main", ("dk",), "qk", lambda m, a: _bias_grad(m, "q", a),
                 lambda m, a: m.c * m.sum("n", lambda i: m.sum("n", lambda j: m.dS(i, j) * m.k(j, a))),
                 r"\sum_i \partial L/\partial q_{ia} = c\sum_{ij} \partial_{s_{ij}}L\, k_{ja}"),
        # Per query row (summed over i it is the bias gradient): a sum over rows of per-row rational
        # functions would make the fixed-size path clear every row's denominators at once.
        Identity("row covariance", ("n", "dk"), "qk", lambda m, i, a: m.derived_grad("q", i, a),
                 lambda m, i, a: m.c * _covariance(m, i, a),
                 r"\partial L/\partial q_{ia} = c\,\mathrm{Cov}_{\alpha_i}(b_{i\cdot}, k_{\cdot a})"),
    ),
    derivation=(
        r"Sum C3 over $i$. Since $\sum_j \partial L/\partial s_{ij}=0$ (C6), the keys may be centred at their "
        r"attention mean $\bar k_i$ for free: each row contributes $c$ times the covariance, under $\alpha_i$, of "
        r"the compatibility $b_{ij}$ and the key $k_j$. Unlike the key bias, the query bias learns."
    ),
    mutants=(
        Mutant("M19-query-bias-lose-scale", "H2", "main", "scale c lost: sum_ij dS_ij k_j",
               lambda m, a: m.sum("n", lambda i: m.sum("n", lambda j: m.dS(i, j) * m.k(j, a)))),
        Mutant("M20-query-bias-alpha-for-dS", "H2", "main", "alpha in place of dS: c sum_ij alpha_ij k_j",
               lambda m, a: m.c * m.sum("n", lambda i: m.sum("n", lambda j: m.alpha(i, j) * m.k(j, a)))),
        Mutant("M21-query-bias-uncentred", "H2", "row covariance", "neither b nor k centred: c sum_j alpha_ij b_ij k_j",
               lambda m, i, a: m.c * m.sum("n", lambda j: m.alpha(i, j) * m.b(i, j) * m.k(j, a))),
    ),
))

register(Claim(
    id="H3", name="value-bias-gradient",
    statement=(r"\frac{\partial L}{\partial b_V} = \sum_j \frac{\partial L}{\partial v_j} = "
               r"\sum_i u_i \sum_j \alpha_{ij} = \sum_i u_i \text{ when every row has a key to attend to}"),
    ref=REF,
    parts=(
        Identity("row mass", ("dv",), "qk", lambda m, a: _bias_grad(m, "v", a),
                 lambda m, a: m.sum("n", lambda i: m.u(i, a) * _row_mass(m, i)),
                 r"\sum_j \partial L/\partial v_{ja} = \sum_i u_{ia}\sum_j\alpha_{ij}"),
        Identity("attended rows", ("dv",), "qk", lambda m, a: _bias_grad(m, "v", a),
                 lambda m, a: m.sum("n", lambda i: m.u(i, a)),
                 r"\sum_j \partial L/\partial v_{ja} = \sum_i u_{ia}", mask_algebra="causal"),
    ),
    derivation=(
        r"Sum C2 over $j$: $\sum_j\sum_i\alpha_{ij}u_i = \sum_i u_i\sum_j\alpha_{ij}$. A row with a key to attend "
        r"to has $\sum_j\alpha_{ij}=1$ (causal attention: $M_{ii}=1$), so the value bias receives the sum of the "
        r"upstream gradients, whatever the attention pattern; a fully masked row attends nowhere and contributes 0."
    ),
    mutants=(
        Mutant("M22-value-bias-count", "H3", "row mass", "every alpha counted as 1: sum_i u_i sum_j M_ij",
               lambda m, a: m.sum("n", lambda i: m.u(i, a) * m.sum("n", lambda j: m.mask(i, j)))),
        Mutant("M23-value-bias-responsibility", "H3", "attended rows",
               "weighted by the responsibility of the row's own position: sum_j N_j u_j",
               lambda m, a: m.sum("n", lambda j: m.responsibility(j) * m.u(j, a))),
    ),
))


# -- H4, H5: one head of several, concatenated before the output projection ---------------------------------
def _error(m, i, c):
    """(p_ic - y_ic) / n: the error at the logits, shared by every head (p from all heads' logits)."""
    return (m.p(i, c) - m.leaf("Y", i, c)) / m.size("n")


def _solo_error(m, i, c):
    """The error as if this head's logits W_O^T o_i were all of them (the other heads forgotten)."""
    p = m.exp(m.z_head(i, c)) / m.sum("m", lambda d: m.exp(m.z_head(i, d)))
    return (p - m.leaf("Y", i, c)) / m.size("n")


def _through_block(m, i, a, error):
    """W_O^{(h)} error_i: an error at the logits brought back through this head's block of the projection."""
    return m.sum("m", lambda c: m.leaf("WO", a, c) * error(m, i, c))


def _advantage(m, i, j, u):
    """alpha_ij (b_ij - bbar_i) with b_ij = u_i . v_j for a given upstream signal u."""
    b = lambda k: m.sum("dv", lambda a: u(m, i, a) * m.v(k, a))  # noqa: E731
    return m.alpha(i, j) * (b(j) - m.sum("n", lambda k: m.alpha(i, k) * b(k)))


def _routed_error(m, j, c):
    """sum_i alpha_ij (p_ic - y_ic) / n: the errors of the queries routed to key j, weighted by their weights."""
    return m.sum("n", lambda i: m.alpha(i, j) * _error(m, i, c))


def _solo_u(m, i, a):
    return _through_block(m, i, a, _solo_error)


register(Claim(
    id="H4", name="per-head-advantage",
    statement=(r"z_i = \sum_h W_O^{(h)\top} o^h_i:\ \frac{\partial L}{\partial s^h_{ij}} = \alpha^h_{ij}\big(b^h_{ij} - "
               r"\textstyle\sum_k \alpha^h_{ik} b^h_{ik}\big),\ b^h_{ij} = u^h_i\cdot v^h_j,\ "
               r"u^h_i = \tfrac1n W_O^{(h)}(p_i - y_i)"),
    ref=CONCAT_REF,
    parts=(
        Identity("main", ("n", "n"), "scores", lambda m, i, j: m.derived_grad("s", i, j), lambda m, i, j: m.dS(i, j),
                 r"\partial L/\partial s^h_{ij} = \alpha^h_{ij}(b^h_{ij}-\bar b^h_i)", loss="ce", readout="concat"),
        Identity("head upstream", ("n", "dv"), "readout", lambda m, i, a: m.derived_grad("o", i, a),
                 lambda m, i, a: m.u(i, a),  # C5's closed form, W_O (p - y) / n, with p from every head's logits
                 r"\partial L/\partial o^h_i = \tfrac1n W_O^{(h)}(p_i - y_i)", loss="ce", readout="concat"),
    ),
    derivation=(
        r"Concatenating the heads and projecting by $W_O$ is summing each head's output projected by its own block "
        r"of rows: $z_i = \sum_h W_O^{(h)\top} o^h_i$. Head $h$'s scores reach the loss only through $o^h$, so C1 "
        r"holds for the head as it stands, with its upstream signal $u^h_i = \partial L/\partial o^h_i = "
        r"\tfrac1n W_O^{(h)}(p_i-y_i)$ (C5 through the head's block). The error $p_i - y_i$ is computed from all "
        r"heads' logits: every head's advantage reads the same error, seen through its own block. Proved with the "
        r"other heads' share of the logits a free quantity $R_i$, so for any number of heads."
    ),
    mutants=(
        Mutant("M24-head-alone-advantage", "H4", "main",
               "the head's own logits taken for all of them: p_i = softmax(W_O^T o_i), the other heads forgotten",
               lambda m, i, j: _advantage(m, i, j, _solo_u)),
        Mutant("M25-head-alone-upstream", "H4", "head upstream",
               "u from the head's own logits only: W_O (softmax(W_O^T o_i) - y_i) / n", _solo_u),
    ),
))

register(Claim(
    id="H5", name="per-head-value-gradient",
    statement=(r"z_i = \sum_h W_O^{(h)\top} o^h_i:\ \frac{\partial L}{\partial v^h_j} = \sum_i \alpha^h_{ij} u^h_i = "
               r"W_O^{(h)} \sum_i \alpha^h_{ij} \tfrac{p_i - y_i}{n},\ \frac{\partial L}{\partial W_O^{(h)}} = "
               r"\sum_i o^h_i \tfrac{(p_i - y_i)^\top}{n}"),
    ref=CONCAT_REF,
    parts=(
        Identity("main", ("n", "dv"), "scores", lambda m, j, a: m.derived_grad("v", j, a),
                 lambda m, j, a: _through_block(m, j, a, _routed_error),
                 r"\partial L/\partial v^h_j = W_O^{(h)}\sum_i \alpha^h_{ij}(p_i-y_i)/n", loss="ce", readout="concat"),
        Identity("output block", ("dv", "m"), "readout", lambda m, a, c: m.derived_grad("WO", a, c),
                 lambda m, a, c: m.sum("n", lambda i: m.o(i, a) * _error(m, i, c)),
                 r"\partial L/\partial W^{(h)}_{O,ac} = \sum_i o^h_{ia}(p_{ic}-y_{ic})/n", loss="ce", readout="concat"),
    ),
    derivation=(
        r"By C2 for head $h$, $\partial L/\partial v^h_j = \sum_i \alpha^h_{ij} u^h_i$, and by H4 $u^h_i = "
        r"\tfrac1n W_O^{(h)}(p_i-y_i)$. The sum over queries moves inside the head's block: value $j$ of head $h$ "
        r"receives the errors of the queries that route to it, weighted by their attention (total weight the "
        r"responsibility $N^h_j = \sum_i\alpha^h_{ij}$), seen through the head's block of $W_O$. The block's own "
        r"gradient reads only this head's outputs against the shared error. Proved for any other heads' logits."
    ),
    mutants=(
        Mutant("M26-head-alone-values", "H5", "main",
               "the head's own logits taken for all of them: W_O sum_i alpha_ij (softmax(W_O^T o_i) - y_i) / n",
               lambda m, j, a: _through_block(m, j, a, lambda m_, j_, c: m_.sum(
                   "n", lambda i: m_.alpha(i, j_) * _solo_error(m_, i, c)))),
        Mutant("M27-values-routing-transposed", "H5", "main", "routing read the wrong way: sum_i alpha_ji u_i",
               lambda m, j, a: m.sum("n", lambda i: m.alpha(j, i) * _through_block(m, i, a, _error))),
        Mutant("M28-output-block-head-alone", "H5", "output block",
               "the block's gradient from the head's own logits: sum_i o_i (softmax(W_O^T o_i) - y_i)^T / n",
               lambda m, a, c: m.sum("n", lambda i: m.o(i, a) * _solo_error(m, i, c))),
    ),
))
