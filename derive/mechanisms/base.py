"""What a routing mechanism is: the logit it routes by, the weight it forms from the logits, the exact
routing gradient that holds for it, and deliberately wrong forms (negative controls)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

# What a mechanism's own leaf may be declared to range over (Mechanism.domains; a leaf not named is "real"). Proofs
# use only what is declared: the rational path and every witness search draw each leaf inside its domain, and the
# saturation cell's proof (derive.mechanisms.signs) reads the declared signs.
DOMAINS = {"real": "any real", "positive": "> 0", "nonnegative": ">= 0", "unit": "in (0, 1)",
           "negative": "< 0", "nonpositive": "<= 0"}


@dataclass(frozen=True)
class Mutant:
    """A wrong closed form for one of the mechanism's questions (derive.mechanisms.questions): every proof
    path must disprove it with a certified witness."""

    id: str
    question: str
    description: str
    closed: Callable


@dataclass(frozen=True)
class ContentSpec:
    """Where a mechanism's content lives, for the content and EM questions: the content leaf, its unit
    (the free dims of one content item: a value v_j, an expert W_e, a cell's input H_io) and components
    (the dims summed in the EM objective), the level at which the leaf is free, the responsibility-weighted
    closed form closed(m, *unit, *comps), the mass N(m, *unit) its weights sum to, and the free step leaf."""

    leaf: str
    unit: tuple
    comps: tuple
    level: str
    closed: Callable
    mass: Callable
    delta: str


ATTENTION_CONTENT = ContentSpec("v", ("n",), ("dv",), "qk", lambda m, j, a: m.dV(j, a),
                                lambda m, j: m.responsibility(j), "Delta")


@dataclass(frozen=True)
class Mechanism:
    """score(m, i, j): the routing logit s_ij at the q/k level (m the model, i and j position indices).
    weight(m, i, j): w_ij from the model's logits m.s and the mask m.mask (never from q, k directly).
    routing(m, i, j): the closed form of dL/ds_ij that holds for this mechanism (proved on every path).
    reference(t): the weights (..., n, options) in plain torch from a dict of tensors named as the model's
    leaves (q, k, X, ... and the mechanism's own), "mask" a 0/1 float mask (or None), "c" and "beta",
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
    # Leaves of the mechanism's own (name -> index ranges) and the levels at which each is a free variable.
    leaves: dict = field(default_factory=dict)
    free: dict = field(default_factory=dict)
    # Its own index ranges: name -> a fixed size (a gate's 2 options) or None (symbolic, like experts).
    dims: dict = field(default_factory=dict)
    # What the weights range over ("n": keys), the logit leaf at the scores level, and content(m, i, j, a):
    # what option j offers query i (None: the values v_j, shared by every query).
    axis: str = "n"
    logit_leaf: str = "s"
    content: Callable = None
    # The content question: which leaf is the content, per unit (free dims) and component (summed dims);
    # None: attention's (v_j, components a in dv, level qk). See derive.mechanisms.questions.
    content_spec: ContentSpec = ATTENTION_CONTENT
    # Further identities of the mechanism's own, each proved on every path (SSD: the decay gradient):
    # (name, free dims, level, derived(m, *ix), closed(m, *ix), latex).
    extra: tuple = ()
    # reference_logits(t): the weights from free routing logits t[logit_leaf] (the scores level, where the
    # logits are a leaf), plain torch like `reference`; None: `reference` reads t[logit_leaf] itself when given.
    reference_logits: Callable = None
    # reference_content(t): what each option offers each position, (..., n, options, d_v), plain torch like
    # `reference` (the numeric oracle's o_i = sum_j w_ij c_ij); None: the values v_j, shared by every query.
    reference_content: Callable = None
    # The domain of each of its own leaves (name -> a key of DOMAINS); a leaf not named is any real.
    domains: dict = field(default_factory=dict)
    # reference_score(t): the routing logits in plain torch from q, k and c, for claims that name s at the q/k
    # levels (None: s is named at the scores level only).
    reference_score: Callable = None
    # Its trainable layer (a derive.mechanisms.layer.Layer): what the experiments train on the sticky chain and in
    # the wind tunnel. None: the mechanism is proved and checked, not trained.
    layer: object = None

    @property
    def ordered(self):
        """Dims whose values the mask pattern reads (positions; the axis when it is not positions)."""
        return ("n",) if self.axis == "n" else ("n", self.axis)

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"mechanism name must be an identifier, got {self.name!r}")
        for what in ("score", "weight", "routing", "reference"):
            if not callable(getattr(self, what)):
                raise ValueError(f"mechanism {self.name}: {what} must be a function of (m, i, j)")
        if self.layer is not None:
            from derive.mechanisms.layer import Layer

            if not isinstance(self.layer, Layer):
                raise ValueError(f"mechanism {self.name}: layer must be a derive.mechanisms.layer.Layer (or Cell), "
                                 f"got {type(self.layer).__name__}")
            self.layer.validate(self.name)
        for leaf, domain in self.domains.items():
            if leaf not in self.leaves:
                raise ValueError(f"mechanism {self.name}: domains names {leaf!r}, which is not one of its own leaves "
                                 f"({', '.join(self.leaves) or 'it has none'})")
            if domain not in DOMAINS:
                raise ValueError(f"mechanism {self.name}: leaf {leaf!r} has domain {domain!r}; expected one of "
                                 f"{', '.join(DOMAINS)}")

    def domain(self, leaf):
        """The declared domain of one of its own leaves ("real" when not declared)."""
        return self.domains.get(leaf, "real")
