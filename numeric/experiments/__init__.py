"""Experiments that reproduce the paper's empirical claims (E1–E7)."""
