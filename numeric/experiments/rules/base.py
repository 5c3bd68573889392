"""What every rule returns (Rule, one of VERDICTS) and the small helpers the rules share."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

VERDICTS = ("reproduced", "partly-reproduced", "not-reproduced")


@dataclass(frozen=True)
class Rule:
    verdict: str
    reason: str
    measured: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"Rule.verdict must be one of {VERDICTS}, got {self.verdict!r}")


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
