"""Hand-written torch forward of the model at each level (independent of the code generator).

The derived side of every identity is checked against torch.autograd through this forward.
"""
from __future__ import annotations

import torch


def softmax(s, mask):
    if mask is None:
        return torch.softmax(s, -1)
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)


def loss(level, leaves, mask, scale):
    """Mean cross-entropy per sequence, summed over batch dims; leaves as in derive.model.LEAVES."""
    t = dict(leaves)
    if level == "params":
        t["q"], t["k"], t["v"] = t["X"] @ t["WQ"], t["X"] @ t["WK"], t["X"] @ t["WV"]
    if level in ("params", "qk"):
        t["s"] = scale * t["q"] @ t["k"].transpose(-1, -2)
    if level in ("params", "qk", "scores"):
        t["alpha"] = softmax(t["s"], mask)
    if level != "readout":
        t["o"] = t["alpha"] @ t["v"]
    z = t["o"] @ t["WO"]
    ce = torch.logsumexp(z, -1) - (t["Y"] * z).sum(-1)  # (..., n)
    return ce.mean(-1).sum()
