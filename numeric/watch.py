"""Watch the attention of a user's model during training: the closed forms evaluated on its real gradients.

    with watch(model, every=10) as w:
        for batch in data:
            loss = loss_fn(model(batch), target); loss.backward(); opt.step(); opt.zero_grad()
    print(w.summary())

A step is one call of `model.forward` made with grad enabled (so one forward per backward, as in an
ordinary training loop); steps are numbered from 0 and steps 0, K, 2K, ... are recorded. On a recorded
step every attention call site is captured at the call: q, k, v, the mask and the scale, and a hook on
the attention output receives u = dL/do from the real backward pass. From (q, k, v, u, mask, scale) the
generated kernels (numeric.api.attention_routing: attention_backward without dQ and dK) give alpha,
B = u v^T, the advantage A = dL/dS (C1) and dL/dV (C2), so the recorded numbers are the proved closed
forms on the model's own tensors.

Sites:
- torch.nn.functional.scaled_dot_product_attention (SDPA) is intercepted by a TorchFunctionMode, pushed
  for the model's forward on recorded steps only (a mode costs a Python call per torch function). A mode
  sees every call made under it, whatever name the caller imported SDPA under (patching the attribute
  would miss `from torch.nn.functional import scaled_dot_product_attention`), and it calls the
  original function with the original arguments, so outputs and gradients are bitwise unchanged.
  A mode does not see calls nested inside another intercepted torch function.
- nn.MultiheadAttention computes attention inside F.multi_head_attention_forward (with SDPA only when
  need_weights=False, and then out of a mode's sight). It is watched by module hooks instead: q, k, v
  are recomputed from its in-projection and the inputs, the masks merged as the module merges them,
  and u = (dL/d output) W_out, the gradient at the heads' concatenated output.
A site is named by the module path of the innermost module running it ('' for the root) and its call
index within the step. SDPA's is_causal (top-left causal mask), attn_mask (bool: True = attend; float:
added), scale (None = 1/sqrt(E)) and enable_gqa (k, v heads repeated as SDPA repeats them) are honoured.

`w.records` holds one dict per site and recorded step (written when the backward reaches the site):
site, call, step, heads, dropout_p, and lists over heads of
- entropy, saturation: mean over batch and live rows (rows with an attended key) of -sum_j alpha_ij
  log alpha_ij and of 1 - max_j alpha_ij;
- adv_max: max |A_ij| over batch and rows, A = alpha (b - bbar) = dL/dS (C1); adv_row_l1: mean over
  live rows of sum_j |A_ij|;
- resp_max, resp_min: mean over batch of max_j N_j and min_j N_j, N_j = sum_i alpha_ij (C2);
- c9_slack: min over batch and live rows of 4 (1 - max_j alpha_ij) max_j |b_ij| - sum_j |A_ij| (C9; the
  max over attended keys); >= 0 up to rounding;
- dS_norm, dV_norm: Frobenius norms over batch of dL/dS (routing) and dL/dV (values);
- js, v_change: drift from the previous record of the same site (None at the first): mean over live
  rows of the Jensen-Shannon divergence (nats) of alpha rows, and ||V - V_prev|| / ||V_prev||.
Half-precision (float16, bfloat16) calls are evaluated in float32. Drift is None for a record whose
shape, dtype or device differs from the site's previous record. With dropout_p > 0 the watcher raises
unless allow_dropout=True; then the numbers are those of the dropout-free alpha against the real u.
`python -m numeric.watch_bench` measures the overhead.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from numeric.api import attention_routing

SDPA = F.scaled_dot_product_attention
TINY = 1e-30  # log clamp, as frame._js
HALF = (torch.float16, torch.bfloat16)  # watched in float32


class _SDPAMode(TorchFunctionMode):
    """Passes every torch function through unchanged; SDPA calls are also reported to the watcher."""

    def __init__(self, watcher):
        super().__init__()
        self.watcher = watcher

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is SDPA and self.watcher.recording and not self.watcher.in_mha:
            self.watcher._capture_sdpa(out, *args, **kwargs)
        return out


def _sdpa_inputs(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """q, k, v, mask in the API's semantics (bool True = attend, float additive), dropout_p, scale."""
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention was called with both attn_mask and is_causal=True")
    if enable_gqa and q.shape[-3] != k.shape[-3]:  # SDPA's GQA: each kv head serves a group of q heads
        if q.shape[-3] % k.shape[-3]:
            raise ValueError(f"enable_gqa: q has {q.shape[-3]} heads, not a multiple of k's {k.shape[-3]}")
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
    mask = attn_mask
    if is_causal:  # SDPA's causal mask is top-left aligned: tril of ones (L, S)
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    return q, k, v, mask, float(dropout_p), scale


def _mha_inputs(mod, args, kwargs):
    """q, k, v as (N, H, L, hd), the merged additive mask (or None) and dropout_p of an nn.MultiheadAttention call."""
    names = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask")
    given = dict(zip(names, args), **kwargs)
    query, key, value = given["query"], given["key"], given["value"]
    if mod.batch_first:
        query, key, value = (x.transpose(0, 1) for x in (query, key, value))
    if query.dim() != 3:
        raise ValueError(f"watch: unbatched nn.MultiheadAttention input (shape {tuple(query.shape)}) is not supported")
    E, H = mod.embed_dim, mod.num_heads
    if mod._qkv_same_embed_dim:
        ws, bs = mod.in_proj_weight.chunk(3), (mod.in_proj_bias.chunk(3) if mod.in_proj_bias is not None else (None,) * 3)
    else:
        ws = (mod.q_proj_weight, mod.k_proj_weight, mod.v_proj_weight)
        bs = mod.in_proj_bias.split(E) if mod.in_proj_bias is not None else (None,) * 3
    heads = [F.linear(x, w, b) for x, w, b in zip((query, key, value), ws, bs)]  # (L, N, E) each
    q, k, v = (t.reshape(t.shape[0], t.shape[1], H, E // H).permute(1, 2, 0, 3) for t in heads)  # (N, H, L, hd)
    mask = _merged_mask(given.get("attn_mask"), given.get("key_padding_mask"), q)
    return q, k, v, mask, mod.dropout if mod.training else 0.0


def _merged_mask(attn_mask, key_padding_mask, q):
    """MHA's masks (bool True = blocked, float additive) as one additive mask (N or 1, H or 1, L, S)."""
    N, H = q.shape[:2]
    total = None
    for m, shape in ((attn_mask, None), (key_padding_mask, (N, 1, 1, -1))):
        if m is None:
            continue
        add = torch.zeros(m.shape, dtype=q.dtype, device=q.device).masked_fill(m, -math.inf) if m.dtype == torch.bool else m.to(q.dtype)
        if shape is None:
            add = add.view(1, 1, *add.shape) if add.dim() == 2 else add.view(N, H, *add.shape[-2:])
        else:
            add = add.view(shape)
        total = add if total is None else total + add
    return total


CHUNK = 2**18  # score entries per chunk of the batch: the temporaries stay small enough for the cache


def flat_batch(q, k, v, u, mask):
    """q, k, v, u as (B, H, n, d) (batch dims flattened, k and v expanded to q's heads) and the mask as
    (1 or B, 1 or H, L, S), views where possible, so the batch can be processed in chunks.

    SDPA's layout is (N, ..., H, L, E): only a tensor of 4 or more dims has a head axis. A 3-D (N, L, E)
    or 2-D (L, E) call is one head (batch N, or 1), and a 3-D mask (N, L, S) is the batch's."""
    if q.dim() < 4:
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(-3)
        q, k, v, u = (t.unsqueeze(-3) for t in (q, k, v, u))
        while q.dim() < 4:
            q, k, v, u = (t.unsqueeze(0) for t in (q, k, v, u))
    same = q.shape[:-2] == k.shape[:-2] == v.shape[:-2]  # the usual case; torch.broadcast_shapes is slow Python
    batch = q.shape[:-2] if same else torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q, k, v, u = (t.expand(*batch, *t.shape[-2:]).flatten(0, -4) for t in (q, k, v, u))
    if mask is not None:
        mask = mask.reshape((1,) * (len(batch) + 2 - mask.dim()) + tuple(mask.shape))
        lead = mask.shape[:-3]
        mask = mask.reshape(1, *mask.shape[-3:]) if all(n == 1 for n in lead) else \
            mask.expand(*batch[:-1], *mask.shape[-3:]).flatten(0, -4)
    return q, k, v, u, mask


def _chunk_stats(q, k, v, u, mask, scale, prev):
    """Per-head partial sums, maxima and minima of one batch chunk (see Watcher), with alpha and log alpha.
    The kernel's fresh buffers are overwritten in place once read (a fresh large buffer costs page faults)."""
    g = attention_routing(q, k, v, u, mask=mask, scale=scale, validate_inputs=False)
    alpha, b, A = g.alpha.expand(g.A.shape), g.B, g.A  # (c, H, L, S)
    amax = alpha.amax(-1)  # (c, H, L)
    live = amax > 0  # rows with an attended key
    rows = lambda x, keep=live: torch.where(keep, x, 0).sum((0, -1))  # noqa: E731
    log_a = alpha.clamp_min(TINY).log_()
    dS_norm, dV_norm = A.square().sum((0, -2, -1)), g.dV.square().sum((0, -2, -1))
    abs_a = A.abs_()  # A is not read again
    lhs = abs_a.sum(-1)  # sum_j |dL/ds_ij|
    bmax = b.abs_().masked_fill_(alpha == 0, 0).amax(-1)  # max |b_ij| over attended keys
    N = alpha.sum(-2)  # responsibilities (c, H, S)
    out = dict(live=live.sum((0, -1)), entropy=rows(-torch.linalg.vecdot(alpha, log_a)), saturation=rows(1 - amax),
               adv_max=abs_a.amax((0, -2, -1)), adv_row_l1=rows(lhs), resp_max=N.amax(-1).sum(0),
               resp_min=N.amin(-1).sum(0), c9_slack=torch.where(live, 4 * (1 - amax) * bmax - lhs, math.inf).amin((0, -1)),
               dS_norm=dS_norm, dV_norm=dV_norm)
    if prev is not None and _same_kind(prev[0], alpha):
        both = live & (prev[0].sum(-1) > 0)
        out.update(js=rows(_js(alpha, log_a, *prev, buffer=b), both), js_live=both.sum((0, -1)))
    return out, alpha, log_a


def _js(p, log_p, q, log_q, buffer=None):
    """Jensen-Shannon divergence (nats) of last-axis distributions: frame._js's expression, given the logs
    (`buffer`, of their shape, may be overwritten: it saves an allocation)."""
    log_m = torch.lerp(p, q, 0.5).clamp_min_(TINY).log_()
    d = torch.sub(log_p, log_m, out=buffer) if buffer is not None else log_p - log_m
    first = d.mul_(p).sum(-1)
    return torch.sub(log_q, log_m, out=d).mul_(q).sum(-1).add_(first).mul_(0.5)


def head_stats(q, k, v, u, mask, scale, prev=None):
    """Per-head record entries (lists over heads) at one call, from the generated closed forms, computed
    in chunks of the batch; prev = the site's previous (alpha chunks, log alpha chunks, V) for drift.
    Returns the entries and this call's state for the next drift."""
    q, k, v, u, mask = flat_batch(q, k, v, u, mask)
    if q.dtype in HALF:  # statistics in float32 (a half-precision log of 0 would give 0 x -inf = NaN)
        q, k, v, u = (t.float() for t in (q, k, v, u))
        mask = mask.float() if mask is not None and mask.dtype != torch.bool else mask
    step = max(1, CHUNK // (q.shape[1] * q.shape[2] * k.shape[2]))
    parts, alphas, logs = [], [], []
    with torch.no_grad():
        for i, c in enumerate(range(0, q.shape[0], step)):
            sl = slice(c, c + step)
            m = mask if mask is None or mask.shape[0] == 1 else mask[sl]
            old = (prev[0][i], prev[1][i]) if prev is not None and i < len(prev[0]) else None
            part, alpha, log_a = _chunk_stats(q[sl], k[sl], v[sl], u[sl], m, scale, old)
            parts.append(part), alphas.append(alpha), logs.append(log_a)
        out = _combine(parts, q.shape[0])
        out.update(_v_change(prev, v) if "js" in out else dict(v_change=None))
    return out, (alphas, logs, v)


def _combine(parts, batch):
    """Chunk partials -> per-head entries: means over live rows or the batch, maxima, minima, norms."""
    cat = {key: torch.stack([p[key] for p in parts]) for key in parts[0]}
    live = cat["live"].sum(0).clamp_min(1)
    out = {key: cat[key].sum(0) / live for key in ("entropy", "saturation", "adv_row_l1")}
    out.update(adv_max=cat["adv_max"].amax(0), c9_slack=cat["c9_slack"].amin(0),
               resp_max=cat["resp_max"].sum(0) / batch, resp_min=cat["resp_min"].sum(0) / batch,
               dS_norm=cat["dS_norm"].sum(0).sqrt(), dV_norm=cat["dV_norm"].sum(0).sqrt())
    if "js" in cat and len(cat["js"]) == len(parts):
        out["js"] = cat["js"].sum(0) / cat["js_live"].sum(0).clamp_min(1)
    keys = list(out)  # one host copy for every entry (a copy per entry costs more than the entry)
    return dict(zip(keys, torch.stack([out[key].to(torch.float64) for key in keys]).tolist()))


def _same_kind(a, b):
    """Drift is measured between records of one shape, dtype and device (else it is None for that record)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device


def _v_change(prev, v):
    """||V - V_prev|| / ||V_prev|| per head (None when the shapes, dtypes or devices differ)."""
    if not _same_kind(prev[2], v):
        return dict(js=None, v_change=None)
    dims = (0, -2, -1)
    change = torch.linalg.vector_norm(v - prev[2], dim=dims) / torch.linalg.vector_norm(prev[2], dim=dims).clamp_min(1e-30)
    return dict(v_change=change.tolist())


class Watcher:
    """Records attention statistics of `model` every `every` steps; use through `watch`."""

    def __init__(self, model, every=1, allow_dropout=False):
        if not isinstance(model, nn.Module):
            raise TypeError(f"watch needs an nn.Module, got {type(model).__name__}")
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ValueError(f"every must be a positive int, got {every!r}")
        self.model, self.every, self.allow_dropout = model, every, allow_dropout
        self.records, self.step_index, self.recording = [], -1, False
        self._stack, self._mha_depth, self._calls, self._prev, self._handles, self._mode = [], 0, 0, {}, [], None
        self._mha_calls, self._mode_on = {}, False  # module -> (args, kwargs) of its call in progress

    @property
    def in_mha(self):
        return self._mha_depth > 0

    def __enter__(self):
        for name, mod in self.model.named_modules():
            if isinstance(mod, nn.MultiheadAttention) and (mod.bias_k is not None or mod.add_zero_attn):
                raise ValueError(f"watch: nn.MultiheadAttention '{name}' uses add_bias_kv/add_zero_attn, not supported")
        for name, mod in self.model.named_modules():
            if isinstance(mod, nn.MultiheadAttention):
                self._handles += [mod.register_forward_pre_hook(self._mha_pre, with_kwargs=True),
                                  mod.register_forward_hook(self._mha_post, with_kwargs=True)]
            self._handles += [mod.register_forward_pre_hook(self._push(name)), mod.register_forward_hook(self._pop)]
        self._handles += [self.model.register_forward_pre_hook(self._begin_step, prepend=True),
                          self.model.register_forward_hook(self._end_forward)]
        self._mode = _SDPAMode(self)
        return self

    def __exit__(self, *exc):
        self._end_forward()
        for h in self._handles:
            h.remove()
        self._handles, self._mode, self.recording = [], None, False
        return False

    def _begin_step(self, mod, args):
        """A grad-enabled forward of the model is a step; the SDPA mode is pushed for recorded steps only
        (a mode costs a Python call per torch function)."""
        if torch.is_grad_enabled():
            self._end_forward()  # after a forward that raised
            self.step_index += 1
            self.recording, self._calls = self.step_index % self.every == 0, 0
            self._stack, self._mha_depth = [], 0
            if self.recording:
                self._mode.__enter__()
                self._mode_on = True

    def _end_forward(self, *hook_args):
        if self._mode_on:
            self._mode.__exit__(None, None, None)
            self._mode_on = False

    def _push(self, name):
        def hook(mod, args):
            self._stack.append(name)
        return hook

    def _pop(self, mod, args, out):
        self._stack.pop()

    def _mha_pre(self, mod, args, kwargs):
        self._mha_depth += 1
        self._mha_calls[mod] = (args, kwargs) if self.recording else None

    def _mha_post(self, mod, args, kwargs, out):
        self._mha_depth -= 1
        call = self._mha_calls.pop(mod, None)
        if call is None or not out[0].requires_grad:
            return
        with torch.no_grad():
            q, k, v, mask, p = _mha_inputs(mod, *call)
        w_out = mod.out_proj.weight.detach()
        E = mod.embed_dim

        def to_heads(g):  # dL/d(out) -> u at the concatenated heads, (N, H, L, hd)
            g = g if mod.batch_first else g.transpose(0, 1)
            return (g @ w_out).reshape(g.shape[0], g.shape[1], mod.num_heads, E // mod.num_heads).transpose(1, 2)
        self._attach(out[0], q, k, v, mask, None, p, to_heads)

    def _capture_sdpa(self, out, *args, **kwargs):
        if not out.requires_grad:
            return
        q, k, v, mask, p, scale = _sdpa_inputs(*args, **kwargs)
        self._attach(out, q.detach(), k.detach(), v.detach(), mask, scale, p, lambda g: g)

    def _attach(self, out, q, k, v, mask, scale, p, to_u):
        if p > 0 and not self.allow_dropout:
            raise ValueError(f"watch: attention with dropout_p={p} at '{self._stack[-1] if self._stack else ''}': "
                             "the closed forms exclude dropout; set dropout to 0 or pass allow_dropout=True")
        site = (self._stack[-1] if self._stack else "", self._calls)
        self._calls += 1
        step = self.step_index
        mask = mask.detach() if mask is not None else None
        out.register_hook(lambda g: self._record(site, step, q, k, v, to_u(g), mask, scale, p))

    def _record(self, site, step, q, k, v, u, mask, scale, p):
        stats, self._prev[site] = head_stats(q, k, v, u.detach(), mask, scale, self._prev.get(site))
        stats.setdefault("js", None)
        heads = q.shape[-3] if q.dim() >= 4 else 1  # flat_batch: SDPA's head axis exists from 4 dims
        self.records.append(dict(site=site[0], call=site[1], step=step, heads=heads, dropout_p=p, **stats))

    def summary(self):
        """{'site#call': {quantity: mean over heads (c9_slack: min), from the site's last record}}."""
        out = {}
        for rec in self.records:
            key = f"{rec['site'] or '<root>'}#{rec['call']}"
            out[key] = {name: (sum(x) / len(x) if x else None) if isinstance(x, list) else x
                        for name, x in rec.items() if name not in ("site", "call", "heads", "dropout_p")}
            out[key]["c9_slack"] = min(rec["c9_slack"])
        return out


def watch(model, every=1, *, allow_dropout=False):
    """A context manager recording attention statistics of `model` every `every` steps (see the module docstring)."""
    return Watcher(model, every, allow_dropout)
