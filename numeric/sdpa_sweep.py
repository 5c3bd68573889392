"""The drop-in scaled_dot_product_attention against torch's on random calls of every kind, per dtype.

float64/float32: |ours - torch| relative to the problem's scale (the largest entry of o, dq, dk, dv),
within TOLERANCE, plus 4 eps |m| for a float mask whose largest finite entry is |m|: adding -1e9 to a score
rounds it to eps * 1e9, so the result is only defined to that (float64: 2e-7), however it is computed.
float16/bfloat16: our error against a float64 computation from the same inputs at most HALF_RATIO times
torch's own, plus half an ulp of the quantity (the one rounding) and float32's noise.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from numeric.sdpa import scaled_dot_product_attention

F64, F32, F16, BF16 = torch.float64, torch.float32, torch.float16, torch.bfloat16
HALF = (F16, BF16)
DTYPES = (F64, F32, F16, BF16)
TOLERANCE = {F64: 1e-12, F32: 2e-5}
HALF_RATIO = 1.5
MASK_KINDS = ("none", "causal", "bool", "float", "neg-inf-row", "large-negative")


def _pick(seq, g):
    return seq[int(torch.randint(len(seq), (1,), generator=g))]


def _coin(p, g):
    return float(torch.rand(1, generator=g)) < p


def random_call(g):
    """q, k, v and SDPA's keywords: dtype, rank 2-5, broadcast batch dims, GQA, L != S (sometimes 0), a mask
    of every kind (bool, additive with -inf entries, a -inf row, a row of -1e5/-1e9/float32's minimum in a
    float32 mask), scale None/positive/negative/0/0-d tensor."""
    dtype, rank = _pick(DTYPES, g), _pick((2, 3, 4, 4, 5), g)
    L, S, E, Ev = (_pick((0, 1, 2, 3, 5, 8), g) if i < 2 and _coin(0.1, g) else _pick((1, 2, 3, 5, 8, 13), g)
                   for i in range(4))
    batch = [_pick((1, 2, 3), g) for _ in range(rank - 2)]
    gqa = rank >= 3 and _coin(0.3, g)
    qb = batch[:-1] + [batch[-1] * 2 if gqa else batch[-1]] if rank >= 3 else []

    def kv_batch():
        b = [x if _coin(0.7, g) else 1 for x in batch]
        return b if gqa else b[len(b) - _pick(range(len(b) + 1), g):]  # fewer leading dims broadcast too

    kb = kv_batch()
    shapes = (qb + [L, E], kb + [S, E], (list(kb) if gqa else kv_batch()) + [S, Ev])
    if gqa and _coin(0.5, g):  # key and value heads may differ
        shapes[2][-3] = 1
    q, k, v = (torch.randn(sh, generator=g, dtype=F64).to(dtype) for sh in shapes)
    return q, k, v, _keywords(g, dtype, qb + [L, S], gqa)


def _keywords(g, dtype, score, gqa):
    kind = _pick(MASK_KINDS, g)
    kw = {"enable_gqa": gqa}
    mshape = [x if _coin(0.6, g) else 1 for x in score]
    mshape = mshape[_pick(range(len(mshape) - 1), g):]  # leading dims may be dropped
    if kind == "causal":
        kw["is_causal"] = True
    elif kind == "bool":
        kw["attn_mask"] = torch.rand(mshape, generator=g) < 0.7
    elif kind != "none":
        mdtype = F32 if dtype in HALF and _coin(0.7, g) else dtype
        m = torch.randn(mshape, generator=g, dtype=F64).masked_fill(torch.rand(mshape, generator=g) < 0.2, -math.inf)
        fill = {"float": None, "neg-inf-row": -math.inf,
                "large-negative": _pick((-1e5, -1e9, torch.finfo(F32).min), g)}[kind]
        if fill is not None and mshape[-2] > 0:
            m[..., int(torch.randint(mshape[-2], (1,), generator=g)), :] = fill
        kw["attn_mask"] = m.to(mdtype)
    scale = _pick((None, None, 0.7, -0.3, 0.0, 2, "tensor"), g)
    kw["scale"] = torch.tensor(0.45) if scale == "tensor" else scale
    return kw


def run(fn, q, k, v, kw, u, dtype=None):
    """[o, dq, dk, dv] of fn for the upstream gradient u, at inputs cast to dtype (as given when None)."""
    leaves = [t.detach().to(dtype or t.dtype).requires_grad_(True) for t in (q, k, v)]
    kwargs = dict(kw)
    mask = kwargs.get("attn_mask")
    if dtype is not None and mask is not None and mask.is_floating_point():
        kwargs["attn_mask"] = mask.to(dtype)
    o = fn(*leaves, **kwargs)
    if o.numel() == 0:
        return [o.detach()] + [torch.zeros_like(t) for t in leaves]
    grads = torch.autograd.grad(o, leaves, u.to(o.dtype), allow_unused=True)
    return [o.detach()] + [torch.zeros_like(t) if d is None else d for t, d in zip(leaves, grads)]


def largest(x):
    return float(x.abs().max()) if x.numel() else 0.0


def _largest_finite(mask):
    """The largest finite |entry| of a float mask (0 for none or bool): the scale its addition rounds at."""
    if mask is None or not mask.is_floating_point():
        return 0.0
    return largest(mask[torch.isfinite(mask)].double())


def compare(q, k, v, kw, g, device="cpu", fn=None):
    """One call on device: per quantity (ours error, torch error, bound) for half, (relative diff, tolerance)
    otherwise; plus whether every output's finiteness, shape and dtype match torch's."""
    q, k, v = (t.to(device) for t in (q, k, v))
    kw = {a: b.to(device) if torch.is_tensor(b) and a == "attn_mask" else b for a, b in kw.items()}
    u = torch.randn(F.scaled_dot_product_attention(q, k, v, **kw).shape, generator=g, dtype=F64).to(device)
    ours = run(fn or scaled_dot_product_attention, q, k, v, kw, u)
    theirs = run(F.scaled_dot_product_attention, q, k, v, kw, u)
    alike = all(a.shape == b.shape and a.dtype == b.dtype and bool(torch.isfinite(a).all()) == bool(torch.isfinite(b).all())
                for a, b in zip(ours, theirs))
    scale = max(largest(b.double()) for b in theirs) or 1.0  # a gradient 0 up to rounding is compared at this scale
    if q.dtype in TOLERANCE:
        tol = TOLERANCE[q.dtype] + 4 * torch.finfo(q.dtype).eps * _largest_finite(kw.get("attn_mask"))
        return alike, [(largest(a.double() - b.double()) / max(largest(b.double()), scale), tol)
                       for a, b in zip(ours, theirs)]
    exact = run(F.scaled_dot_product_attention, q, k, v, kw, u, dtype=F64)
    rows = []
    for a, b, r in zip(ours, theirs, exact):
        e_ours, e_torch = largest(a.double() - r), largest(b.double() - r)
        floor = 0.5 * torch.finfo(q.dtype).eps * largest(r) + TOLERANCE[F32] * scale
        rows.append((e_ours, e_torch, HALF_RATIO * e_torch + floor))
    return alike, rows


def sweep(cases, seed, device="cpu", fn=None):
    """Per dtype: calls, failures (a bound exceeded or an output unlike torch's), the worst relative
    difference from torch (float64/float32) or the worst and median ratio of our error to torch's (half)."""
    g = torch.Generator().manual_seed(seed)
    out = {str(d).removeprefix("torch."): {"cases": 0, "failures": [], "worst": 0.0} for d in DTYPES}
    for i in range(cases):
        q, k, v, kw = random_call(g)
        alike, rows = compare(q, k, v, kw, g, device, fn)
        entry = out[str(q.dtype).removeprefix("torch.")]
        entry["cases"] += 1
        bad = not alike or any(row[0] > row[-1] for row in rows)
        if bad:
            entry["failures"].append(i)
        if q.dtype in TOLERANCE:  # calls with a large finite mask entry reported apart (see the module docstring)
            key = "worst" if rows[0][1] == TOLERANCE[q.dtype] else "worst_with_large_mask"
            entry[key] = max([entry.get(key, 0.0)] + [row[0] for row in rows])
        else:
            ratios = [row[0] / row[1] for row in rows if row[1] > 0]
            entry["worst"] = max([entry["worst"]] + ratios)
            entry.setdefault("ratios", []).extend(ratios)
    for entry in out.values():
        ratios = sorted(entry.pop("ratios", []))
        if ratios:
            entry["median_ratio"], entry["ratios_counted"] = ratios[len(ratios) // 2], len(ratios)
    return out


def forgets_the_scale(q, k, v, scale=None, **kw):
    """A deliberately wrong drop-in (the negative control): the scale is ignored (1/sqrt(E) always)."""
    return scaled_dot_product_attention(q, k, v, **kw)
