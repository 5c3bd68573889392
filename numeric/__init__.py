"""Torch side of the verifier: generated gradients, agreement checks and benchmarks."""
from numeric.api import (
    AttentionGrads,
    AttentionRouting,
    LossGrads,
    attention_backward,
    attention_forward,
    attention_loss_backward,
    attention_routing,
)
from numeric.module import AttentionCore, AttentionHead, GeneratedAttention

__all__ = ["AttentionGrads", "AttentionRouting", "LossGrads", "attention_backward", "attention_forward",
           "attention_loss_backward", "attention_routing",
           "AttentionCore", "AttentionHead", "GeneratedAttention"]
