"""Torch side of the verifier: generated gradients, agreement checks and benchmarks."""
from numeric.api import AttentionGrads, LossGrads, attention_backward, attention_forward, attention_loss_backward
from numeric.module import AttentionCore, AttentionHead, GeneratedAttention

__all__ = ["AttentionGrads", "LossGrads", "attention_backward", "attention_forward", "attention_loss_backward",
           "AttentionCore", "AttentionHead", "GeneratedAttention"]
