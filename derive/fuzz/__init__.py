"""Claim fuzzer: random identities of the model's algebra, labelled by an independent float64 oracle
(`numeric.oracle`), sent through every proof path by `numeric.fuzz`. A path that proves a false identity or
disproves a true one gives a FALSE VERDICT; `undecided` is allowed and counted. This package generates
the claims and never imports torch; the runner and its command line live above it:

    python -m numeric.fuzz [--n N] [--seed S] [--paths general,fixed,rational] [--out FILE] [--jobs J]

A claim is about one routing mechanism (`Claim.mechanism`, every built-in one in turn: `generate.mechanism_of`) and is
two terms of a small grammar (the dataclasses of `derive.fuzz.grammar`). Each term has two interpretations:
`model_eval` over `derive.model.AttentionModel` (what the proof paths see) and
`numeric.oracle.Evaluator` (plain torch on a vectorised forward, autograd for every derivative).
Claims come from true templates (C1–C10 style closed forms, normalisations, first and second
derivatives, readout), rewritten by truth-preserving moves, and about half of them corrupted
(index swaps, dropped or doubled factors, powers of c, dimension substitutions, the mask on the wrong
side, sums over the wrong index, the paper's own mutants). Every mechanism's own identities (its questions,
mutants, routing forms, the chain rule through its score: `derive.fuzz.routing`) are traced into the grammar from
its definitions (`derive.fuzz.trace`). The oracle, not the intent, decides truth.
"""

from derive.fuzz.generate import generate, problems
from derive.fuzz.grammar import Claim, dgrad, grad, leaf, mul, q

__all__ = ["Claim", "dgrad", "generate", "grad", "leaf", "mul", "problems", "q"]
