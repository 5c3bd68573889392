"""Symbolic side of the verifier: the attention model in index notation, the claim registry,
and three independent proof paths. The proof paths never import torch; the command line
(`derive.all`) and the claim fuzzer's oracle (`numeric.oracle`) do."""

__version__ = "0.1.0"
