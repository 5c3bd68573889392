"""Symbolic side of the verifier: the attention model in index notation, the claim registry,
and three independent proof paths. Never imports torch."""

__version__ = "0.1.0"
