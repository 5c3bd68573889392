"""The claim registry with the paper's claims C1–C10 (`derive.paper_claims`) loaded.

A claims file (`--claims FILE`, loaded by `derive.claimfile`) imports `Claim`, `Identity`,
`Mutant` and `register` from here; `claims()` lists the built-in claims first, then the user's.
"""
from __future__ import annotations

from derive import paper_claims
from derive.claim import REGISTRY, Claim, Identity, Mutant, register

__all__ = ["REGISTRY", "Claim", "Identity", "Mutant", "register", "claims", "mutants", "builtin_ids", "extra_ids"]


def claims() -> list:
    return list(REGISTRY.values())


def mutants() -> list:
    return [m for c in claims() for m in c.mutants]


def builtin_ids() -> frozenset:
    return paper_claims.IDS


def extra_ids() -> list:
    """Claims registered beyond the paper's (e.g. with --claims FILE)."""
    return [cid for cid in REGISTRY if cid not in builtin_ids()]
