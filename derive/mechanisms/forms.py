"""Closed forms of the routing gradient that the mechanisms' claims and mutants share."""


def advantage(m, i, j):
    """w_ij (b_ij - sum_k w_ik b_ik): routing by advantage (the paper's C1), with the model's own weights."""
    return m.alpha(i, j) * (m.b(i, j) - m.baseline(i))


def per_key(m, i, j):
    """w_ij (1 - w_ij) b_ij: the derivative of an unnormalised logistic weight (a per-key baseline)."""
    return m.alpha(i, j) * (1 - m.alpha(i, j)) * m.b(i, j)


def at_logits(reference):
    """A bilinear mechanism's weights from free logits t["s"] (the scores level): its `reference` at q = s,
    k = I and c = 1, so that c q k^T = s."""
    def weights(t):
        s = t["s"]
        return reference({**t, "q": s, "k": s.new_ones(s.shape[-1]).diag(), "c": 1.0})
    return weights
