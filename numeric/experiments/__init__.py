"""Experiments that reproduce the paper's empirical claims (E1–E7), and W1 (ours: E4 in a deep model)."""
