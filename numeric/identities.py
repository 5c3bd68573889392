"""Registry-driven numeric checks: every identity's generated derived side (autograd grads as
inputs) against its generated closed side, and every mutant, in float64."""
from __future__ import annotations

import inspect

import torch

from derive import claims as registry
from derive.codegen import ARG_NAMES
from derive.model import LEAVES, LEVELS
from numeric import reference
from numeric.agreement import TOLERANCE

CODE_TO_LEAF = {code: leaf for leaf, code in ARG_NAMES.items()}
TOL_FLOAT64 = TOLERANCE[torch.float64]  # the verification tier, relative (see numeric.agreement)


SHARED = ("WO", "WQ", "WK", "WV")  # parameters: one copy for every sequence in the batch
SCALARS = ("scale", "eta")


def draw_leaf(leaf, sizes, batch, g):
    """A random float64 value for one leaf of derive.model.LEAVES (targets Y one-hot)."""
    if leaf == "Y":
        return torch.nn.functional.one_hot(torch.randint(0, sizes["m"], batch + (sizes["n"],), generator=g),
                                           sizes["m"]).double()
    lead = () if leaf in SHARED else batch
    return torch.randn(lead + tuple(sizes[d] for d in LEAVES[leaf]), generator=g, dtype=torch.float64)


def draw_inputs(fn, level, sizes, batch, mask_kind, g, readout="single"):
    """Random float64 values for the kernel's arguments and for every leaf the loss needs (R, the other heads'
    logits, under readout "concat", whether the kernel reads it or not), plus the mask."""
    mask = reference.make_mask(mask_kind, batch, sizes["n"], g)
    params = inspect.signature(fn).parameters
    scalars = {name: float(torch.empty(()).uniform_(0.3, 1.5, generator=g)) for name in params if name in SCALARS}
    wanted = [CODE_TO_LEAF.get(p, p) for p in params if not p.startswith("grad_") and p not in SCALARS + ("mask",)]
    wanted += [leaf for leaf in (*sorted(LEVELS[level]), "WO", "Y") if leaf not in wanted]
    if readout == "concat" and "R" not in wanted:
        wanted.append("R")
    elif readout != "concat" and "R" in wanted:
        raise ValueError(f"{fn.__name__} reads the other heads' logits R, but its identity's readout is {readout!r}")
    return {leaf: draw_leaf(leaf, sizes, batch, g) for leaf in wanted}, scalars, mask


def autograd_grads(fn, level, leaves, mask, scale):
    wanted = [p.removeprefix("grad_") for p in inspect.signature(fn).parameters if p.startswith("grad_")]
    if not wanted:
        return {}
    params = {k: (v.clone().requires_grad_(k in wanted)) for k, v in leaves.items()}
    loss = reference.loss(level, params, mask, scale)
    grads = torch.autograd.grad(loss, [params[w] for w in wanted], allow_unused=True)
    return {f"grad_{w}": (g if g is not None else torch.zeros_like(params[w])) for w, g in zip(wanted, grads)}


def evaluate(fn, identity, sizes, batch, mask_kind, seed, device="cpu"):
    """(relative error, scale) of derived vs closed of `identity` (its level and readout: R, the other heads'
    logits, is drawn for readout "concat") for one random draw, computed on `device` (drawn on a
    CPU generator and moved, so every device checks the same numbers)."""
    g = torch.Generator().manual_seed(seed)
    level = identity.level
    leaves, scalars, mask = draw_inputs(fn, level, sizes, batch, mask_kind, g, identity.readout)
    leaves = {k: v.to(device) for k, v in leaves.items()}
    mask = mask.to(device) if mask is not None else None
    scale = scalars.get("scale", 1.0)
    grads = autograd_grads(fn, level, leaves, mask, scale)
    args = {}
    for name in inspect.signature(fn).parameters:
        if name.startswith("grad_"):
            args[name] = grads[name]
        elif name == "mask":
            args[name] = (mask if mask is not None else torch.ones(sizes["n"], sizes["n"], dtype=torch.bool,
                                                                   device=device)).double()
        elif name in scalars:
            args[name] = scalars[name]
        else:
            args[name] = leaves[CODE_TO_LEAF.get(name, name)]
    derived, closed = fn(**args)
    derived, closed = torch.as_tensor(derived, dtype=torch.float64), torch.as_tensor(closed, dtype=torch.float64)
    derived, closed = _sum_batch(derived, closed), _sum_batch(closed, derived)
    magnitude = max([float(t.abs().max()) for t in (derived, closed, *grads.values()) if t.numel()] + [1e-300])
    err = float((derived - closed).abs().max()) if derived.numel() else 0.0
    return err / magnitude, magnitude


def _sum_batch(t, other):
    """Shared parameters: dL/dW sums the per-sequence closed forms over the batch dims."""
    extra = t.dim() - other.dim()
    return t.sum(dim=tuple(range(extra))) if extra > 0 else t


def cases(module, kind):
    """(claim or mutant, identity, its check function or None) per identity / equality mutant, from the
    generated module's MANIFEST."""
    out = []
    for claim in registry.claims():
        for identity in claim.parts if kind == "identity" else ():
            out.append((claim, identity, _function(module, (claim.id, identity.name))))
        for m in claim.mutants if kind == "mutant" else ():
            if m.constant is None:
                out.append((m, claim.part(m.part), _function(module, m.id)))
    return out


def unemitted(module, key):
    """Why the generated module has no check function for an identity (claim id, name) or a mutant id."""
    return module.UNEMITTED.get(key, "not in the generated module's MANIFEST")


def _function(module, key):
    name = module.MANIFEST.get(key)
    return None if name is None else getattr(module, name)
