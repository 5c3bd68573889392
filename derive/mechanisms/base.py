"""What a routing mechanism is: the logit it routes by, the weight it forms from the logits, the exact
routing gradient that holds for it, and deliberately wrong forms (negative controls)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Mutant:
    """A wrong closed form for one of the mechanism's questions (derive.mechanisms.questions): every proof
    path must disprove it with a certified witness."""

    id: str
    question: str
    description: str
    closed: Callable


@dataclass(frozen=True)
class Mechanism:
    """score(m, i, j): the routing logit s_ij at the q/k level (m the model, i and j position indices).
    weight(m, i, j): w_ij from the model's logits m.s and the mask m.mask (never from q, k directly).
    routing(m, i, j): the closed form of dL/ds_ij that holds for this mechanism (proved on every path).
    reference(q, k, mask, c, beta): the weights (..., L, S) in plain torch from tensors q (..., L, d_k),
    k (..., S, d_k), a 0/1 float mask broadcastable to the scores (or None), the scale c and bias beta,
    written with tensor methods only (derive/ never imports torch): the independent oracle the numeric
    side checks generated code and the fuzzer's claims against.
    normalised: whether sum_j w_ij = 1 over allowed keys. latex/routing_latex: the formulas; ref: source."""

    name: str
    title: str
    score: Callable
    weight: Callable
    routing: Callable
    reference: Callable
    normalised: bool
    latex: str
    routing_latex: str
    ref: str
    mutants: tuple = field(default_factory=tuple)

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"mechanism name must be an identifier, got {self.name!r}")
        for what in ("score", "weight", "routing", "reference"):
            if not callable(getattr(self, what)):
                raise ValueError(f"mechanism {self.name}: {what} must be a function of (m, i, j)")
