"""The value manifold of any attention model: how much of the variance of a layer's value vectors (or attention
outputs) lies on one direction, and whether the coordinate along it tracks the model's predictive entropy.

    cap = capture(model, tokens)                      # one forward pass: per attention layer, values and outputs
    H = predictive_entropy(cap.output)                # (B, L) bits, from the logits
    m = measure_layers(cap.layers, H, seed=0)         # {"blocks.0.attn (values)": {...}, ...}

`measure` is the pure measurement of one set of vectors: points (B, L, d), B sequences of L positions, and a
per-position entropy (B, L). It returns the share of variance on the leading principal direction (PC1) and the
Spearman correlation of the PC1 coordinate with the entropy, each with a 95% percentile interval over bootstrap
replicates that resample whole sequences (the positions of a sequence are dependent, sequences are not); PC1 is
re-estimated in every replicate. PC1's sign is arbitrary: it is oriented so that the full sample's Spearman is
non-negative, and every replicate's PC1 is oriented along the full sample's (otherwise the sign of rho would flip
at random between replicates). Seeded: the same inputs and seed give the same numbers.

`capture` collects, for one forward pass of a torch model, per attention layer:

- `values`: the value vectors as attention reads them, the heads concatenated, (B, S, H * d_head);
- `outputs`: the attention output before any output projection, the heads concatenated, (B, L, H * d_head).

It sees
- torch.nn.functional.scaled_dot_product_attention (SDPA), whoever calls it: a module of one's own,
  nn.MultiheadAttention with need_weights=False (as nn.TransformerEncoderLayer calls it; need_weights=True is
  re-run with need_weights=False for the capture, the same attention), Hugging Face models loaded with
  attn_implementation="sdpa". A TorchFunctionMode sees calls under any imported name; calls nested inside
  another torch function (SDPA inside F.multi_head_attention_forward) are seen by a wrapper put in place of
  F.scaled_dot_product_attention for the forward (as numeric.watch does). A layer is named by the module path
  of the innermost module of the model with a method on the call stack ('' for the model itself); a second
  call from the same module in one forward gets '#1', and so on;
- TransformerLens HookedTransformer (when transformer_lens is importable): its hook points
  blocks.{l}.attn.hook_v and hook_z, named blocks.{l}.attn;
- Hugging Face attention modules that call no SDPA (attn_implementation="eager"): their modeling module's
  eager_attention_forward, wrapped for the forward (as numeric.watch does), recorded as SDPA is: `values` (key/value
  heads repeated to the query heads, as attention reads them) and `outputs` before the output projection, named as
  SDPA's calls are; the same weights give the same capture under "sdpa" and "eager".

Every captured tensor is (B, L, .), batch first, whatever the module's batch_first. SDPA's inputs are read as
(..., H, L, dh), leading batch dimensions flattened, or (B, L, E) as one head; other shapes are refused.
Nothing optional is imported unless the model is of its kind. The capture runs under torch.no_grad() and changes
no output, except that a module with a fused inference path (nn.TransformerEncoderLayer in eval mode under no_grad)
takes its general path, the same math up to rounding. `predictive_entropy` turns logits (..., V) into the entropy of their softmax in bits.
"""
from __future__ import annotations

import math
import sys
import threading
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats
from torch import nn

from numeric import watch

SDPA = torch._C._nn.scaled_dot_product_attention
KINDS = ("values", "outputs")
RESAMPLES = 200  # bootstrap replicates: percentile ends of a 95% interval move by about 0.01 between seeds
LEVEL = 0.95
_GRAM_LIMIT = 2**25  # floats of the per-sequence second moments (B x d x d) kept at most; beyond, replicates recompute


# -- the measurement -----------------------------------------------------------------------------------------------
def _rank(x):
    return stats.rankdata(x)


def spearman(a, b):
    """Spearman's rho of two (N,) arrays (average ranks); nan when either is constant."""
    ra, rb = _rank(a), _rank(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return float(ra @ rb / den) if den > 0 else float("nan")


_spearman = spearman


def _leading(cov):
    """(share of the trace on the top eigenvector, the top eigenvector, the top 3 shares) of a covariance (d, d)."""
    evals, evecs = torch.linalg.eigh(torch.as_tensor(cov, dtype=torch.float64))
    evals = evals.flip(0).clamp_min(0).numpy()
    top = evecs[:, -1].numpy()
    total = float(evals.sum())
    if not total > 0:
        return float("nan"), top, [float("nan")] * min(3, len(evals))
    return float(evals[0] / total), top, [float(x / total) for x in evals[:3]]


def _nan_result(P, why):
    B = P.shape[0] if P.ndim == 3 else 0
    return {"pc1_share": float("nan"), "pc1_share_ci95": [float("nan")] * 2, "spearman": float("nan"),
            "spearman_ci95": [float("nan")] * 2, "abs_spearman_lower": float("nan"), "top3_shares": [],
            "sequences": int(B), "positions": int(P.shape[1]) if P.ndim == 3 else 0,
            "dim": int(P.shape[-1]) if P.ndim >= 1 else 0, "resamples": 0, "level": LEVEL, "finite": False,
            "why": why}


def abs_lower(ci):
    """The lower end of |rho| given an interval [lo, hi] of rho: 0 if it straddles 0, nan if not finite."""
    lo, hi = (float(x) for x in ci)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return float("nan")
    return 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))


def measure(points, entropy, resamples=RESAMPLES, seed=0, level=LEVEL):
    """PC1's share of the variance of `points` (B, L, d) and Spearman(PC1 coordinate, `entropy` (B, L)), with
    percentile intervals over `resamples` bootstrap replicates of whole sequences (seeded).

    Returns {"pc1_share", "pc1_share_ci95", "spearman", "spearman_ci95", "abs_spearman_lower" (the interval's
    lower end of |rho|: 0 when it straddles 0), "top3_shares", "sequences", "positions", "dim", "resamples",
    "level", "finite"}; with non-finite inputs, fewer than two sequences or no variance, every number is nan,
    "finite" is False and "why" says which."""
    return measure_many(points, {"": entropy}, resamples=resamples, seed=seed, level=level)[""]


def measure_many(points, entropies, resamples=RESAMPLES, seed=0, level=LEVEL):
    """`measure` of one set of points against several entropies {name: (B, L)} on the same bootstrap replicates
    (PC1 is estimated once per replicate): {name: measurement}, each as `measure` returns it. The linear algebra
    runs on one torch thread (d x d eigenproblems: more threads only contend; measured 100x slower on a busy 2-core
    machine with 2), the caller's thread count restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure_many(points, entropies, resamples, seed, level)
    finally:
        torch.set_num_threads(threads)


def _measure_many(points, entropies, resamples, seed, level):
    P = np.asarray(points, dtype=np.float64)
    Es = {k: np.asarray(e, dtype=np.float64) for k, e in entropies.items()}
    for k, E in Es.items():
        if P.ndim != 3 or E.shape != P.shape[:2]:
            raise ValueError(f"measure: points must be (B, L, d) and entropy {k!r} (B, L), got {P.shape} and {E.shape}")
    if not np.isfinite(P).all():
        return {k: _nan_result(P, "non-finite points") for k in Es}
    out = {k: _nan_result(P, "non-finite entropy") for k, E in Es.items() if not np.isfinite(E).all()}
    B, L, d = P.shape
    if B < 2 or L < 1 or d < 1:
        return {k: _nan_result(P, "fewer than two sequences, or no position or dimension") for k in Es}
    X = P.reshape(-1, d)
    Xc = torch.from_numpy(X - X.mean(0))
    share, pc1, top3 = _leading(Xc.T @ Xc / len(X))
    if not math.isfinite(share):
        return {k: _nan_result(P, "the points do not vary") for k in Es}
    signs = {}
    for k, E in Es.items():
        if k in out:
            continue
        rho = _spearman(X @ pc1, E.reshape(-1))
        if not math.isfinite(rho):
            out[k] = _nan_result(P, "the entropy (or the PC1 coordinate) is constant")
        else:
            signs[k] = (1.0 if rho >= 0 else -1.0, abs(rho))
    if not signs:
        return {k: out[k] for k in Es}
    shares, rhos = _replicates(P, {k: Es[k] for k in signs}, pc1, resamples, seed)
    q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
    ci_share = [float(x) for x in np.nanpercentile(shares, q)]
    for k, (sign, rho) in signs.items():
        ci_rho = sorted(float(sign * x) for x in np.nanpercentile(rhos[k], q))  # PC1 oriented: rho >= 0
        out[k] = {"pc1_share": share, "pc1_share_ci95": ci_share, "spearman": rho, "spearman_ci95": ci_rho,
                  "abs_spearman_lower": abs_lower(ci_rho), "top3_shares": top3, "sequences": int(B),
                  "positions": int(L), "dim": int(d), "resamples": int(resamples), "level": level, "finite": True}
    return {k: out[k] for k in Es}


def _replicates(P, Es, pc1, resamples, seed):
    """PC1's share (R,) and, per entropy of `Es`, Spearman(PC1 coordinate, entropy) (R,) in `resamples` bootstrap
    replicates of whole sequences, every replicate's PC1 oriented along `pc1`.

    A replicate is the original positions weighted by how often their sequence was drawn: its covariance is the
    count-weighted sum of per-sequence moments, its ranks are weighted average ranks (tied entropies share one),
    so no replicate is materialised. The points are centred on the full sample's mean first (a shift changes no
    covariance), so far-from-origin points lose no precision to raw second moments. Computed in torch (float64), batched over replicates."""
    B, L, d = P.shape
    P = P - P.reshape(-1, d).mean(0)  # centred: no covariance or rank changes, and no cancellation of raw moments
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, B, B), minlength=B) for _ in range(resamples)]).astype(np.float64)
    Pt, X = torch.from_numpy(P), torch.from_numpy(P.reshape(-1, d))
    S = Pt.sum(1)  # (B, d)
    G = torch.einsum("bld,ble->bde", Pt, Pt).reshape(B, d * d) if B * d * d <= _GRAM_LIMIT else None
    seq = torch.arange(B).repeat_interleave(L)  # the sequence of every position
    groups = {}
    for k, E in Es.items():
        uniq, inv = np.unique(E.reshape(-1), return_inverse=True)
        groups[k] = (torch.from_numpy(inv.reshape(-1)), len(uniq))
    direction = torch.from_numpy(pc1)
    shares, rhos = [], {k: [] for k in Es}
    chunk = max(1, min(resamples, _GRAM_LIMIT // max(1, d * d), _GRAM_LIMIT // max(1, 8 * B * L)))
    for start in range(0, resamples, chunk):
        C = torch.from_numpy(counts[start:start + chunk])  # (c, B)
        c, n = C.shape[0], C.sum(1, keepdim=True) * L  # (c, 1)
        m = C @ S / n  # (c, d)
        W = C[:, seq]  # (c, N) the weight of every position
        if G is not None:
            cov = (C @ G).reshape(c, d, d) / n[..., None]
        else:
            cov = torch.stack([(X * w[:, None]).T @ X for w in W]) / n[..., None]
        cov = cov - m[:, :, None] * m[:, None, :]
        evals, evecs = torch.linalg.eigh(cov)
        evals = evals.clamp_min(0)
        total = evals.sum(-1)
        shares.append(torch.where(total > 0, evals[:, -1] / total.clamp_min(1e-300), torch.full_like(total, float("nan"))))
        v = evecs[:, :, -1]
        v = v * torch.where(v @ direction < 0, -1.0, 1.0)[:, None]
        Z = (X @ v.T).T  # (c, N)
        order = Z.argsort(1)
        Ws = W.gather(1, order)
        rz = torch.empty_like(W).scatter_(1, order, Ws.cumsum(1) - (Ws - 1) / 2)  # scores' weighted average ranks
        for k, (inv, u) in groups.items():
            rhos[k].append(_weighted_spearman(rz, W, inv, u))
    return torch.cat(shares).numpy(), {k: torch.cat(r).numpy() for k, r in rhos.items()}


def _weighted_spearman(rz, W, inv, groups):
    """Per row r: the weighted Pearson correlation of the score ranks rz[r] (N,) with the weighted average ranks of
    an entropy given by its tie groups `inv` (N,), every position counted W[r] times."""
    cnt = torch.zeros(W.shape[0], groups, dtype=W.dtype).scatter_add_(1, inv.expand_as(W), W)
    re = (cnt.cumsum(1) - (cnt - 1) / 2).gather(1, inv.expand_as(W))
    sw = W.sum(1, keepdim=True)
    rz = rz - (W * rz).sum(1, keepdim=True) / sw
    re = re - (W * re).sum(1, keepdim=True) / sw
    num = (W * rz * re).sum(1)
    den = ((W * rz * rz).sum(1) * (W * re * re).sum(1)).sqrt()
    return torch.where(den > 0, num / den.clamp_min(1e-300), torch.full_like(num, float("nan")))


def measure_layers(layers, entropy, kinds=KINDS, resamples=RESAMPLES, seed=0, level=LEVEL):
    """`measure` on every layer and kind of a capture ({layer: {kind: (B, L, d)}}, Capture.layers) against an
    entropy (B, L): {"layer (kind)": measurement}; against several, {name: (B, L)}: {name: {"layer (kind)":
    measurement}}, on the same replicates. Captured layers are always (B, L, .), batch first, whatever the
    module's batch_first: the entropy must be (B, L) too. A kind whose positions are not the entropy's
    (cross-attention values over another sequence) is left out; ValueError, naming the shapes, when no unit is."""
    many = isinstance(entropy, dict)
    Es = {k: np.asarray(e, dtype=np.float64) for k, e in (entropy.items() if many else {"": entropy}.items())}
    shape = next(iter(Es.values())).shape
    out = {k: {} for k in Es}
    for name, got in layers.items():
        for kind in kinds:
            if kind in got and tuple(np.shape(got[kind])[:2]) == shape:
                res = measure_many(_numpy(got[kind]), Es, resamples=resamples, seed=seed, level=level)
                for k in Es:
                    out[k][unit(name, kind)] = res[k]
    if layers and not any(out.values()):
        seen = sorted({tuple(np.shape(got[kind])) for got in layers.values() for kind in kinds if kind in got})
        raise ValueError(f"measure_layers: no layer's (B, L) matches the entropy's {shape}; captured shapes {seen} "
                         "(captured layers are (B, L, d), batch first)")
    return out if many else out[""]


def unit(layer, kind):
    """The name of one measured set of vectors: "blocks.0.attn (values)"."""
    return f"{layer or '(model)'} ({kind})"


def _numpy(x):
    return x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)


def predictive_entropy(logits):
    """The entropy in bits of softmax(logits) over the last axis: (..., V) -> (...), computed in float64."""
    z = torch.as_tensor(logits).detach().double()
    logp = torch.log_softmax(z, -1)
    return -(logp.exp() * logp).sum(-1) / math.log(2)


# -- the capture ---------------------------------------------------------------------------------------------------
@dataclass
class Capture:
    """What `capture` returns: the model's output and, per attention layer (in call order), {kind: tensor}."""

    output: object
    layers: dict = field(default_factory=dict)
    source: str = ""  # how the layers were found: "sdpa", "eager" (both: "sdpa+eager"), "transformer_lens"


def _heads(x):
    """SDPA's (B, H, L, dh) -> (B, L, H * dh); (B, L, E), which SDPA reads as one head, as it is; more leading batch
    dimensions (..., H, L, dh) are flattened into B. ValueError for fewer than 3 dimensions."""
    if x.dim() == 3:
        return x
    if x.dim() < 3:
        raise ValueError(f"capture: cannot read attention inputs of shape {tuple(x.shape)} as (B, L, E) or (B, H, L, dh)")
    x = x.reshape(-1, *x.shape[-3:])
    B, H, L, dh = x.shape
    return x.transpose(1, 2).reshape(B, L, H * dh)


class _Recorder:
    def __init__(self, model, kinds):
        self.model, self.kinds = model, tuple(kinds)
        self.layers, self.calls, self._in_wrapper, self.sdpa, self.eager = {}, {}, 0, 0, 0
        self._names = {id(m): (n, m) for n, m in model.named_modules()}
        self.owner = threading.get_ident()

    # numeric.watch's site naming and SDPA mode, shared: the mode reports to _capture_sdpa unless _in_wrapper
    _name = watch.Watcher._site_name

    def _capture_sdpa(self, out, args, kwargs):
        self.record(out, args, kwargs)

    def _put(self, name, got):
        k = self.calls.get(name, 0)
        self.calls[name] = k + 1
        self.layers[name if k == 0 else f"{name}#{k}"] = got

    def record(self, out, args, kwargs):
        if threading.get_ident() != self.owner:
            return
        value = kwargs["value"] if "value" in kwargs else args[2]
        q = kwargs["query"] if "query" in kwargs else args[0]
        if kwargs.get("enable_gqa") and value.shape[-3] != q.shape[-3]:
            value = value.repeat_interleave(q.shape[-3] // value.shape[-3], -3)
        got = {}
        if "values" in self.kinds:
            got["values"] = _heads(value.detach()).cpu()
        if "outputs" in self.kinds:
            got["outputs"] = _heads(out.detach()).cpu()
        self.sdpa += 1
        self._put(self._name(), got)

    def record_eager(self, fn, out, args, kwargs):
        """A call of a Hugging Face eager_attention_forward: its q, k, v (GQA repeated) and its output (B, L, H, dh)
        before the output projection, recorded as SDPA's would be."""
        if threading.get_ident() != self.owner:
            return
        from numeric import watch_hf

        _, q, _, v, _, _, _ = watch_hf.eager_inputs(fn, args, kwargs)
        attn = out[0] if isinstance(out, tuple) else out
        got = {}
        if "values" in self.kinds:
            got["values"] = _heads(v.detach()).cpu()
        if "outputs" in self.kinds:
            a = attn.detach()
            got["outputs"] = a.reshape(*a.shape[:2], -1).cpu()
        self.eager += 1
        self._put(self._name(), got)

    def eager_wrapper(self, previous):
        def eager_attention_forward(*args, **kwargs):
            out = previous(*args, **kwargs)
            self.record_eager(previous, out, args, kwargs)
            return out

        eager_attention_forward.__wrapped__ = previous
        return eager_attention_forward

    def wrapper(self, previous):
        def scaled_dot_product_attention(*args, **kwargs):
            self._in_wrapper += 1
            try:
                out = previous(*args, **kwargs)
            finally:
                self._in_wrapper -= 1
            self.record(out, args, kwargs)
            return out

        scaled_dot_product_attention.__doc__ = previous.__doc__
        return scaled_dot_product_attention


def _is_hooked_transformer(model):
    mod = sys.modules.get("transformer_lens")
    if mod is None and type(model).__module__.startswith("transformer_lens"):
        import transformer_lens as mod  # noqa: F811  only when the model is one of its
    return mod is not None and isinstance(model, getattr(mod, "HookedTransformer", ()))


def _transformer_lens(model, args, kwargs, kinds):
    hooks = {"values": "hook_v", "outputs": "hook_z"}
    wanted = {hooks[k] for k in kinds}
    output, cache = model.run_with_cache(*args, names_filter=lambda n: n.rsplit(".", 1)[-1] in wanted
                                         and n.startswith("blocks."), **kwargs)
    layers = {}
    for l in range(model.cfg.n_layers):  # noqa: E741
        got = {}
        for kind in kinds:
            key = f"blocks.{l}.attn.{hooks[kind]}"
            if key in cache:
                t = cache[key].detach()  # (B, L, H, d_head)
                got[kind] = t.reshape(*t.shape[:2], -1).cpu()
        layers[f"blocks.{l}.attn"] = got
    return Capture(output, layers, "transformer_lens")


def _eager_modules(model):
    if "transformers" not in sys.modules:
        return []
    from numeric import watch_hf

    watch_hf.check_hf(model)
    return watch_hf.eager_modules(model)


def capture(model, *args, kinds=KINDS, **kwargs):
    """One forward pass `model(*args, **kwargs)` under torch.no_grad(), with the value vectors and/or attention
    outputs (`kinds`) of every attention layer it runs (see the module docstring for what is seen and how layers
    are named). Returns a Capture: .output the model's output, .layers {layer: {kind: tensor (B, L, d)}} in call
    order (CPU tensors in the model's dtype), .source how they were found."""
    kinds = tuple(kinds)
    if not kinds or set(kinds) - set(KINDS):
        raise ValueError(f"capture: kinds must be among {KINDS}, got {kinds!r}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"capture needs an nn.Module, got {type(model).__name__}")
    with torch.no_grad():
        if _is_hooked_transformer(model):
            return _transformer_lens(model, args, kwargs, kinds)
        rec = _Recorder(model, kinds)
        handles = []

        def mha_post(mod, a, kw, out):  # need_weights=True computes attention without SDPA: run it again with it
            given = dict(zip(("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask"), a), **kw)
            if given.get("need_weights", True) and not getattr(mod, "_manifold_rerun", False):
                given["need_weights"] = False
                mod._manifold_rerun = True
                try:
                    mod(**given)
                finally:
                    mod._manifold_rerun = False

        for _, m in model.named_modules():
            if isinstance(m, nn.MultiheadAttention):
                handles.append(m.register_forward_hook(mha_post, with_kwargs=True))
        eager = [(m, m.eager_attention_forward) for m in _eager_modules(model)]
        previous = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = rec.wrapper(previous)
        mode = watch._SDPAMode(rec)
        try:
            for m, fn in eager:
                m.eager_attention_forward = rec.eager_wrapper(fn)
            with mode:
                output = model(*args, **kwargs)
        finally:
            F.scaled_dot_product_attention = previous
            for m, fn in eager:
                m.eager_attention_forward = fn
            for h in handles:
                h.remove()
        source = [s for s, n in (("sdpa", rec.sdpa), ("eager", rec.eager)) if n]
        layers = {k: v for k, v in rec.layers.items() if v}
        if not layers:
            warnings.warn(f"capture: no attention call was seen in {type(model).__name__}'s forward; nothing was "
                          "captured", RuntimeWarning, stacklevel=2)
        return Capture(output, layers, "+".join(source))


__all__ = ["KINDS", "RESAMPLES", "LEVEL", "measure", "measure_many", "measure_layers", "unit", "abs_lower", "spearman", "predictive_entropy",
           "Capture", "capture"]
