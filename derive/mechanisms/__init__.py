"""Routing mechanisms: how routing logits become weights, one file each.

A mechanism is a value (`Mechanism`) that `derive.model.AttentionModel` asks for two things: the
routing logit s_ij of query i and key j at the q/k level (`score`) and the weight w_ij as a function of
the logits and the mask (`weight`). The projections, the mixing o_i = sum_j w_ij v_j, the readout and
the loss stay written once in the model, so every proof path interprets every mechanism. Each file
also holds the mechanism's structural claims (derive.mechanisms.questions) and their mutants, its plain-torch
reference, the domains of its own leaves and, when it is trained, its layer (derive.mechanisms.layer): the
experiments loop over the registered mechanisms and never name one.

A built-in mechanism is a file here and its name in `BUILTIN`; a user's is a file loaded with `--claims`
(docs/mechanisms.md), which may hold a layer too.
"""
from __future__ import annotations

import importlib

from derive.mechanisms.base import ContentSpec, Mechanism, Mutant  # noqa: F401  (what a mechanism file needs)

BUILTIN = ("softmax", "sigmoid", "linear", "ssd", "gate", "glr", "moe")
PAPER = "softmax"  # the paper's own mechanism: the claims' default, the yardstick of relative costs
REGISTRY: dict = {}


def register(mechanism: Mechanism) -> Mechanism:
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"register takes a Mechanism, got {type(mechanism).__name__}")
    if mechanism.name in REGISTRY and REGISTRY[mechanism.name] is not mechanism:
        if mechanism.name in BUILTIN:
            raise ValueError(f"mechanism {mechanism.name}: the name is taken by a built-in mechanism; choose another")
        raise ValueError(f"mechanism {mechanism.name}: the name is registered already; choose another")
    REGISTRY[mechanism.name] = mechanism
    return mechanism


def get(name: str) -> Mechanism:
    """The mechanism called `name` (built-ins are loaded on first use)."""
    if name not in REGISTRY and name in BUILTIN:
        importlib.import_module(f"derive.mechanisms.{name}")
    if name not in REGISTRY:
        known = ", ".join(sorted(set(BUILTIN) | set(REGISTRY)))
        raise ValueError(f"unknown mechanism {name!r}; the known ones are {known}")
    return REGISTRY[name]


def builtin():
    """Every built-in mechanism, in table order."""
    return [get(name) for name in BUILTIN]


def registered():
    """The built-in mechanisms, then those a claims file registered."""
    return builtin() + [m for name, m in REGISTRY.items() if name not in BUILTIN]
