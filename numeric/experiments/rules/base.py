"""What every rule returns (Rule, one of VERDICTS), the entry of an empirical claim (EmpiricalClaim) and the small
helpers the rules share."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

VERDICTS = ("reproduced", "partly-reproduced", "not-reproduced")
# A rule may also say it cannot decide: its inputs are missing or not finite (V1 does; E1-G3 never do).
UNDECIDED = "undecided"


@dataclass(frozen=True)
class Rule:
    verdict: str
    reason: str
    measured: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.verdict not in VERDICTS and self.verdict != UNDECIDED:
            raise ValueError(f"Rule.verdict must be one of {VERDICTS} or {UNDECIDED!r}, got {self.verdict!r}")


def _f(x):
    return float(x)


def _ci(mean, half):
    """[lo, hi] of a mean and its t half-width; a single observation gives [mean, mean]."""
    half = 0.0 if not math.isfinite(half) else half
    return [float(mean - half), float(mean + half)]


def _seed(k):
    return {"seed": k["seed"]} if "seed" in k else {}


def _tol(k):
    return {"tol": k["tol"]} if "tol" in k else {}


@dataclass(frozen=True)
class EmpiricalClaim:
    id: str
    name: str
    statement: str  # what the paper says (LaTeX allowed), shown beside our measurement
    ref: str  # where the paper says it
    figure: dict  # the paper's numbers ({} where the claim is qualitative)
    reads: tuple  # the measured quantities the rule takes
    rule: Callable  # rules.eN: measurements -> rules.Rule
    thresholds: dict = field(default_factory=dict)  # the rule's thresholds by name (rules module constants)
    paper: str = ""  # the paper's number in a few words, for the summary beside the measured one ("" where none)
    headline: Callable = None  # measured dict -> the measured number in a few words (the summary's column)
    # A claim measured from the other experiments' numbers (one module: its CLAIM in numeric/experiments/rules, or
    # a user's claims file): measure(experiments) -> its rule's keyword arguments from results.json `experiments`
    # as the stage has them, None where they were not run; controls(measurement) -> {control id: ("negative" or
    # "positive", Rule)}, at least one of each; constructions: control id -> how it is built; section: what its
    # report section says beside the verdict. The experiments stage evaluates it after every experiment.
    measure: Callable = None
    controls: Callable = None
    constructions: dict = field(default_factory=dict)
    section: str = ""
    # Optional, for its report section: tables(measured) -> [{"caption", "header", "rows"}] (plain values), and the
    # names of reports.figures' figures that show it (drawn from results.json where its data ran).
    tables: Callable = None
    figures: tuple = ()

    def __post_init__(self):
        if not callable(self.rule):
            raise ValueError(f"claim {self.id}: rule must be callable")
        if not self.reads:
            raise ValueError(f"claim {self.id}: a rule reads at least one measured quantity")
        if self.measure is not None:
            if not callable(self.measure) or not callable(self.controls):
                raise ValueError(f"claim {self.id}: measure and controls must be functions (a rule without controls "
                                 "cannot show it can say both verdicts)")

    def catalogue(self):
        """The facts results.json and the report show for the claim."""
        return {"name": self.name, "statement": self.statement, "ref": self.ref, "figure": dict(self.figure),
                "thresholds": dict(self.thresholds), "reads": list(self.reads), "kind": "empirical",
                "paper": self.paper}

    def headline_of(self, measured):
        """The measured number in a few words, or "" when this entry has none or the measurement lacks it."""
        if self.headline is None or not isinstance(measured, dict):
            return ""
        try:
            return self.headline(measured)
        except (KeyError, TypeError, ValueError, IndexError):
            return ""
