"""Checks shared by the experiments' config dataclasses: each error names the class and the field."""
from __future__ import annotations


def positive_ints(cfg, *names):
    """Raise ValueError unless every named field of `cfg` is a positive integer."""
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{type(cfg).__name__}.{name} must be a positive integer, got {value!r}")


def positive(cfg, *names):
    """Raise ValueError unless every named field of `cfg` is a positive number."""
    for name in names:
        value = getattr(cfg, name)
        if not value > 0:
            raise ValueError(f"{type(cfg).__name__}.{name} must be positive, got {value!r}")
