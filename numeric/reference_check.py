"""A mechanism's plain-torch `reference` against its own symbolic weight, before anything runs on it.

The numeric side trusts `Mechanism.reference` (and `reference_logits`) as the weights of the mechanism: the
generated kernels, the oracle of the fuzzer and the experiments are all compared with it. A reference that
returns the wrong shape, or other weights than the mechanism's `weight`, would make every later comparison
meaningless (or crash a stage with a torch shape error), so a mechanism from a user's file is checked here at
load (`derive.all` refuses the file):

- at one random rational point of the q/k level (derive.mechanisms.check.weight_sample: small sizes, every dim
  distinct), unmasked and under the causal pattern over (query, option), the reference's output must be a tensor
  of shape (n, options), and (..., n, options) with a leading batch dim of 2;
- it must agree with the symbolic weight evaluated in float64 to TOLERANCE relative to the largest weight, and
  so must `reference_logits` (when given) at the very logits of that point.

Every failure is a MechanismError (derive.mechanisms.check) naming the function at fault, so the claims file's
loader reports `FILE:LINE: mechanism NAME: what is wrong`.
"""
from __future__ import annotations

import re

import torch

from derive.mechanisms.check import MechanismError, weight_sample
from derive.model import LEAVES
from numeric.oracle import draw_in_domain

TOLERANCE = 1e-9  # float64, relative to the largest weight (the two sides differ by rounding, ~1e-15)
SEEDS = (0, 1, 2)  # a point where the weight is singular is skipped; every one singular: nothing to check
ENTRY = re.compile(r"^(\w+)\[([\d,]+)\]$")


def inputs(mechanism, sizes, point, masked, seed=0):
    """The dict `reference` reads: every leaf of the model and those of the mechanism the weight reads (the
    point's entries, the rest random in the leaf's domain), the scalars c and beta, and the 0/1 mask over (query, option) or None."""
    g = torch.Generator().manual_seed(seed)
    dims = {**LEAVES, **mechanism.leaves}
    read = {m.group(1) for m in map(ENTRY.match, point) if m}
    t = {}
    for name, ranges in dims.items():
        if name in ("M", "R", "alpha", "s", "o", "Delta") or any(d not in sizes for d in ranges):
            continue
        if name in mechanism.leaves and name not in read:  # e.g. a router's free logits r: not an input at this level
            continue
        t[name] = draw_in_domain(mechanism.domain(name) if name in mechanism.leaves else "real",
                                 tuple(sizes[d] for d in ranges), g)
    for label, value in point.items():
        match = ENTRY.match(label)
        if match and match.group(1) in t:
            t[match.group(1)][tuple(int(x) for x in match.group(2).split(","))] = float(value)
    for name in ("c", "beta"):
        t[name] = torch.tensor(float(point[name]) if name in point else 0.75, dtype=torch.float64)
    n, options = sizes["n"], sizes[mechanism.axis]
    t["mask"] = torch.ones(n, options, dtype=torch.float64).tril() if masked else None
    return t


def _batched(t):
    """Every leaf with a leading batch dim of 2 (two copies); scalars and the mask broadcast."""
    return {k: (v.expand(2, *v.shape).clone() if isinstance(v, torch.Tensor) and v.dim() and k != "mask" else v)
            for k, v in t.items()}


def _compare(mechanism, function, what, t, want, batch_too=True):
    n, options = want.shape
    try:
        got = function(dict(t))
        batched = function(_batched(t)) if batch_too else None
    except Exception as exc:
        raise MechanismError(f"mechanism {mechanism.name}: {what} raised {type(exc).__name__}: {exc}", function) from exc
    for value, shape in ((got, (n, options)), (batched, (2, n, options))):
        if value is None and not batch_too:
            continue
        if not isinstance(value, torch.Tensor):
            raise MechanismError(f"mechanism {mechanism.name}: {what} returns a {type(value).__name__}, not a tensor "
                                 f"of weights (..., n, options)", function)
        if tuple(value.shape) != shape:
            raise MechanismError(f"mechanism {mechanism.name}: {what} returns shape {tuple(value.shape)} for {n} "
                                 f"queries and {options} options; expected (..., {n}, {options})", function)
    scale = max(1.0, float(want.abs().max()))
    for value in (got, batched[0], batched[1]):
        gap = float((value.double() - want).abs().max())
        if not gap <= TOLERANCE * scale:  # NaN fails too
            i, j = divmod(int((value.double() - want).abs().nan_to_num(float("inf")).argmax()), options)
            raise MechanismError(f"mechanism {mechanism.name}: {what} disagrees with its weight in float64: "
                                 f"w[{i},{j}] = {float(want[i, j]):.6g} from the weight, {float(value[i, j]):.6g} from "
                                 f"the reference (max gap {gap:.3g}, tolerance {TOLERANCE:g} x {scale:.3g})", function)


def check_reference(mechanism):
    """Raise MechanismError unless `reference` (and `reference_logits`) give the mechanism's own weights."""
    checked = 0
    for masked in (False, True):
        for seed in SEEDS:
            try:
                sizes, point, logits, weights = weight_sample(mechanism, masked, seed)
            except (ArithmeticError, ValueError):  # a singular point of the weight: try another
                continue
            want = torch.tensor(weights, dtype=torch.float64)
            if not torch.isfinite(want).all():
                continue
            t = inputs(mechanism, sizes, point, masked, seed)
            _compare(mechanism, mechanism.reference, "reference", t, want)
            if mechanism.reference_logits is not None:
                at = {**t, mechanism.logit_leaf: torch.tensor(logits, dtype=torch.float64)}
                _compare(mechanism, mechanism.reference_logits, "reference_logits", at, want)
            checked += 1
            break
    return checked
