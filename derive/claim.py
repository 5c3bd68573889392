"""What a claim is: proof obligations (`Identity`), negative controls (`Mutant`), the `Claim` that
holds them, and the table `REGISTRY` that `register` adds to.

An identity `derived(model, *ix) == closed(model, *ix)` over declared free index ranges is written
against `derive.model.AttentionModel`, so every proof path (and the code generator and the numeric
checks) interprets the same objects. Registering a `Claim` is all it takes to get it proved by each
path, attacked by its mutants and reported. `derive.claims` is the registry with the built-in
claims loaded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from derive.model import DIMS, LEVELS, MASK_ALGEBRAS, READOUTS, Setting


@dataclass(frozen=True)
class Identity:
    """One proof obligation: derived == closed for every value of the free indices."""

    name: str
    free: tuple  # index ranges of the free indices, e.g. ("n", "n")
    level: str  # which quantities are independent (derive.model.LEVELS)
    derived: Callable
    closed: Callable
    latex: str
    # "ce": the full cross-entropy loss on every path. "any": the general path may linearise the loss
    # at o (L = sum_i u_i . o_i) where that is exact (derive.model.AttentionModel.linearisation_exact).
    loss: str = "any"
    # "boolean": the mask is any 0/1 matrix at general size; "causal": also M_ii = 1 and transitivity.
    mask_algebra: str = "boolean"
    # Generated API kernels (derive.kernels) that return the closed side, under the name `output`.
    kernels: tuple = ()
    output: str = ""
    # A model quantity that the API kernels compute by the closed side instead of its definition.
    replaces: str = ""
    # "single": the logits are W_O^T o; "concat": the head is one of several concatenated before W_O, the
    # other heads' share of the logits a free leaf R (derive.model.READOUTS).
    readout: str = "single"
    # How routing logits become weights (derive.mechanisms): "softmax" (the paper), "sigmoid", "linear", ...
    mechanism: str = "softmax"

    def __post_init__(self):
        from derive import mechanisms

        try:
            dims = DIMS + tuple(mechanisms.get(self.mechanism).dims)
        except ValueError as exc:
            raise ValueError(f"identity {self.name!r}: {exc}") from None
        if not isinstance(self.free, tuple) or any(d not in dims for d in self.free):
            raise ValueError(f"identity {self.name!r}: free must be a tuple of dimensions among {dims}, got {self.free!r}")
        if self.level not in LEVELS:
            raise ValueError(f"identity {self.name!r}: unknown level {self.level!r}; expected one of {sorted(LEVELS)}")
        if self.loss not in ("any", "ce"):
            raise ValueError(f"identity {self.name!r}: loss must be 'any' or 'ce', got {self.loss!r}")
        if self.mask_algebra not in MASK_ALGEBRAS:
            raise ValueError(f"identity {self.name!r}: mask_algebra must be one of {MASK_ALGEBRAS}, got {self.mask_algebra!r}")
        if self.readout not in READOUTS:
            raise ValueError(f"identity {self.name!r}: readout must be one of {READOUTS}, got {self.readout!r}")
        for side in ("derived", "closed"):
            if not callable(getattr(self, side)):
                raise ValueError(f"identity {self.name!r}: {side} must be a function of (m, *indices)")
        if not isinstance(self.kernels, tuple) or not all(isinstance(k, str) for k in self.kernels):
            raise ValueError(f"identity {self.name!r}: kernels must be a tuple of kernel names, got {self.kernels!r}")
        if bool(self.kernels) != self.output.isidentifier():
            raise ValueError(f"identity {self.name!r}: kernels and output go together (output a Python name), "
                             f"got kernels={self.kernels!r}, output={self.output!r}")

    def setting(self, loss="ce", masked=True, level=None) -> Setting:
        """The model setting of this identity (every path builds its model from this)."""
        return Setting(level or self.level, loss, masked, self.mask_algebra, self.readout, self.mechanism)


@dataclass(frozen=True)
class Mutant:
    """A deliberately wrong closed form that a careless derivation could produce."""

    id: str
    claim: str
    part: str  # which identity's closed form it replaces ("" for an inequality constant)
    description: str
    closed: Callable | None = None
    constant: float | None = None  # for C9: a bound constant below the tight 4
    derived: Callable | None = None  # when the mistake also changes the derived side


@dataclass(frozen=True)
class Claim:
    id: str
    name: str
    statement: str  # LaTeX
    ref: str  # its source: the paper and the idea it names there; "ours" for our own formulation
    parts: tuple
    kind: str = "identity"  # or "inequality" (C9)
    derivation: str = ""  # the argument, for the report (LaTeX)
    mutants: tuple = field(default_factory=tuple)

    def __post_init__(self):
        if not isinstance(self.parts, tuple) or not self.parts or not all(isinstance(p, Identity) for p in self.parts):
            raise ValueError(f"claim {self.id}: parts must be a non-empty tuple of Identity")
        names = [p.name for p in self.parts]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"claim {self.id}: identity name(s) {', '.join(map(repr, twice))} used twice")
        if self.kind not in ("identity", "inequality"):
            raise ValueError(f"claim {self.id}: kind must be 'identity' or 'inequality', got {self.kind!r}")
        for m in self.mutants:
            if m.constant is None and m.part not in names:
                raise ValueError(f"claim {self.id}: mutant {m.id} replaces identity {m.part!r}, which the claim does not "
                                 f"have (its identities: {', '.join(map(repr, names))})")

    def part(self, name) -> Identity:
        """The identity called `name` (a mutant's `part`, a code-generation rewrite)."""
        for p in self.parts:
            if p.name == name:
                return p
        raise KeyError(f"claim {self.id} has no identity named {name!r}")


REGISTRY: dict = {}


def register(claim: Claim) -> Claim:
    if claim.id in REGISTRY:
        raise ValueError(f"claim {claim.id} is already registered")
    for m in claim.mutants:
        if m.claim != claim.id:
            raise ValueError(f"mutant {m.id} names claim {m.claim}, registered under {claim.id}")
    REGISTRY[claim.id] = claim
    return claim
