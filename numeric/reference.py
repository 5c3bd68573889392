"""Hand-written torch forward of the model at each level (independent of the code generator).

The derived side of every identity is checked against torch.autograd through this forward.
"""
from __future__ import annotations

import torch

MASK_KINDS = ("none", "causal", "padding", "random", "fully-masked-row", "broadcast")


def causal_mask(n, device="cpu"):
    """The causal mask (n, n), True where query i may attend to key j <= i."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def softmax(s, mask):
    """Masked softmax over the last axis; a fully masked row is 0, with no NaN in its backward."""
    if mask is None:
        return torch.softmax(s, -1)
    live = mask.any(-1, keepdim=True)
    return torch.softmax(s.masked_fill(~mask, float("-inf")).masked_fill(~live, 0.0), -1) * live


def make_mask(kind, batch, n, g):
    """A boolean mask (True = may attend) of one kind, drawn with generator g:
    causal (n, n); padding: keys past a random length per sequence (every row keeps key 0);
    random: 70% of entries plus the diagonal, per sequence; fully-masked-row: random with row n // 2
    empty; broadcast: random, shared across the trailing batch (head) dims."""
    if kind not in MASK_KINDS:
        raise ValueError(f"unknown mask kind {kind!r}; choose from {MASK_KINDS}")
    if kind == "none":
        return None
    if kind == "causal":
        return causal_mask(n)
    if kind == "padding":
        lengths = torch.randint(1, n + 1, batch + (1, 1), generator=g)
        return torch.arange(n).expand(batch + (n, n)) < lengths
    shape = (batch[:1] + (1,) * len(batch[1:]) if kind == "broadcast" else batch) + (n, n)
    m = (torch.rand(shape, generator=g) < 0.7) | torch.eye(n, dtype=torch.bool)
    if kind == "fully-masked-row":
        m[..., n // 2, :] = False
    return m


def loss(level, leaves, mask, scale):
    """Mean cross-entropy per sequence, summed over batch dims; leaves as in derive.model.LEAVES (with R, the
    other heads' share of the logits, added to them: readout "concat")."""
    t = dict(leaves)
    if level == "params":
        t["q"], t["k"], t["v"] = t["X"] @ t["WQ"], t["X"] @ t["WK"], t["X"] @ t["WV"]
    if level in ("params", "qk"):
        t["s"] = scale * t["q"] @ t["k"].transpose(-1, -2)
    if level in ("params", "qk", "scores"):
        t["alpha"] = softmax(t["s"], mask)
    if level != "readout":
        t["o"] = t["alpha"] @ t["v"]
    z = t["o"] @ t["WO"] + t["R"] if "R" in t else t["o"] @ t["WO"]
    ce = torch.logsumexp(z, -1) - (t["Y"] * z).sum(-1)  # (..., n)
    return ce.mean(-1).sum()
