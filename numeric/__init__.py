"""Torch side of the verifier: generated gradients, agreement checks and benchmarks."""
