"""Registry-driven numeric checks: every identity's generated derived side (autograd grads as
inputs) against its generated closed side, and every mutant, in float64."""
from __future__ import annotations

import inspect

import torch

from derive import claims as registry
from derive.codegen import ARG_NAMES, _fn_name
from derive.model import LEAVES, LEVELS
from numeric import reference

CODE_TO_LEAF = {code: leaf for leaf, code in ARG_NAMES.items()}
TOL_FLOAT64 = 1e-12  # relative; float64 unit roundoff is 1.1e-16, these kernels lose at most a few digits


def draw_inputs(fn, level, sizes, batch, mask_kind, gen_):
    """Random float64 inputs for every argument of a generated kernel, plus the boolean mask."""
    n = sizes["n"]
    mask = make_mask(mask_kind, batch, n, gen_)
    leaves, scalars = {}, {}
    for name in inspect.signature(fn).parameters:
        if name.startswith("grad_") or name == "mask":
            continue
        if name in ("scale", "eta"):
            scalars[name] = float(torch.empty(()).uniform_(0.3, 1.5, generator=gen_))
            continue
        leaf = CODE_TO_LEAF.get(name, name)
        shape = batch + tuple(sizes[d] for d in LEAVES[leaf])
        if leaf in ("WO", "WQ", "WK", "WV"):
            shape = tuple(sizes[d] for d in LEAVES[leaf])
        if leaf == "Y":
            cls = torch.randint(0, sizes["m"], batch + (n,), generator=gen_)
            leaves[leaf] = torch.nn.functional.one_hot(cls, sizes["m"]).double()
        else:
            leaves[leaf] = torch.randn(shape, generator=gen_, dtype=torch.float64)
    for leaf in LEVELS[level]:  # the loss may need free leaves the closed side does not mention
        if leaf not in leaves:
            shape = batch + tuple(sizes[d] for d in LEAVES[leaf]) if leaf not in ("WQ", "WK", "WV") else \
                tuple(sizes[d] for d in LEAVES[leaf])
            leaves[leaf] = torch.randn(shape, generator=gen_, dtype=torch.float64)
    for leaf in ("WO", "Y"):
        if leaf not in leaves:
            leaves[leaf] = torch.randn(tuple(sizes[d] for d in LEAVES[leaf]), generator=gen_, dtype=torch.float64) \
                if leaf == "WO" else torch.nn.functional.one_hot(
                    torch.randint(0, sizes["m"], batch + (n,), generator=gen_), sizes["m"]).double()
    return leaves, scalars, mask


def make_mask(kind, batch, n, gen_):
    if kind == "causal":
        return torch.ones(n, n, dtype=torch.bool).tril()
    if kind == "padding":  # keys beyond a random length per sequence are masked (every row keeps one key)
        lengths = torch.randint(1, n + 1, batch + (1, 1), generator=gen_)
        return torch.arange(n).expand(batch + (n, n)) < lengths
    return None


def autograd_grads(fn, level, leaves, mask, scale):
    wanted = [p.removeprefix("grad_") for p in inspect.signature(fn).parameters if p.startswith("grad_")]
    if not wanted:
        return {}
    params = {k: (v.clone().requires_grad_(k in wanted)) for k, v in leaves.items()}
    loss = reference.loss(level, params, mask, scale)
    grads = torch.autograd.grad(loss, [params[w] for w in wanted], allow_unused=True)
    return {f"grad_{w}": (g if g is not None else torch.zeros_like(params[w])) for w, g in zip(wanted, grads)}


def evaluate(fn, level, sizes, batch, mask_kind, seed):
    """(relative error, scale) of derived vs closed for one random draw."""
    g = torch.Generator().manual_seed(seed)
    leaves, scalars, mask = draw_inputs(fn, level, sizes, batch, mask_kind, g)
    scale = scalars.get("scale", 1.0)
    grads = autograd_grads(fn, level, leaves, mask, scale)
    args = {}
    for name in inspect.signature(fn).parameters:
        if name.startswith("grad_"):
            args[name] = grads[name]
        elif name == "mask":
            args[name] = (mask if mask is not None else torch.ones(sizes["n"], sizes["n"], dtype=torch.bool)).double()
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
    """(claim or mutant, identity, generated function) for every registered identity / mutant."""
    out = []
    for claim in registry.claims():
        for identity in claim.parts if kind == "identity" else ():
            out.append((claim, identity, getattr(module, _fn_name("identity", claim.id, identity.name))))
        for m in claim.mutants if kind == "mutant" else ():
            if m.constant is None:
                identity = next(p for p in claim.parts if p.name == m.part)
                out.append((m, identity, getattr(module, _fn_name("mutant", m.id))))
    return out
