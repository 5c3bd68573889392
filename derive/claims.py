"""The claim registry with the built-in claims loaded: the paper's C1–C10 (`derive.paper_claims`), then our
H1–H5, multi-head attention: bias gradients and heads concatenated before the output projection (`derive.head_claims`).

A claims file (`--claims FILE`, loaded by `derive.claimfile`) imports `Claim`, `Identity`,
`Mutant` and `register` from here; `claims()` lists the built-in claims first, then the user's.
"""
from __future__ import annotations

from derive import head_claims, paper_claims  # noqa: F401  (head_claims imports paper_claims first: C1–C10, then H1–H5)
from derive.claim import REGISTRY, Claim, Identity, Mutant, register

__all__ = ["REGISTRY", "Claim", "Identity", "Mutant", "register", "claims", "mutants", "builtin_ids", "paper_ids", "extra_ids"]


def claims() -> list:
    return list(REGISTRY.values())


def mutants() -> list:
    return [m for c in claims() for m in c.mutants]


def builtin_ids() -> frozenset:
    """The claims this project registers itself: the paper's and ours (a claims file may not reuse them)."""
    return paper_claims.IDS | head_claims.IDS


def paper_ids() -> frozenset:
    """The paper's claims C1–C10 (each cites arXiv 2512.22473)."""
    return paper_claims.IDS


def extra_ids() -> list:
    """Claims registered beyond the built-in ones (e.g. with --claims FILE)."""
    return [cid for cid in REGISTRY if cid not in builtin_ids()]
