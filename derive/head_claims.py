"""H1–H3: the bias gradients of an nn.MultiheadAttention-style head, registered in `derive.claim.REGISTRY` on import.

With q_i = x_i W_Q + b_Q, k_j = x_j W_K + b_K and v_j = x_j W_V + b_V, a bias enters every position's
projection alike, so by the chain rule dL/db_Q = sum_i dL/dq_i, dL/db_K = sum_j dL/dk_j and
dL/db_V = sum_j dL/dv_j. The identities state these sums in closed form at the "qk" level (q, k, v free),
where each proof path differentiates the loss itself. They are our own results, not the paper's: the ids
are H ("heads"), never C.
"""
from __future__ import annotations

from derive import paper_claims  # noqa: F401  (registered first: the registry lists C1–C10, then H1–H3)
from derive.claim import Claim, Identity, Mutant, register

IDS = frozenset({"H1", "H2", "H3"})
REF = "ours: bias gradients of an nn.MultiheadAttention-style head"


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
