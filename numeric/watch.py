"""Watch the attention of a user's model during training: the closed forms evaluated on its real gradients.

    with watch(model, every=10) as w:
        for batch in data:
            loss = loss_fn(model(batch), target); loss.backward(); opt.step(); opt.zero_grad()
    print(w.summary())

A step is one call of `model.forward` made with grad enabled, outside a backward pass (so one forward
per backward, as in an ordinary training loop; activation checkpointing's recomputation is not a
step); steps are numbered from 0 and steps 0, K, 2K, ... are recorded, and any step after a call of
`w.record_next()` (with every=None, only those). On a recorded step every attention call site is
captured at the call: q, k, v, the mask and the scale, and a hook on the attention output receives
u = dL/do from the real backward pass. From (q, k, v, u, mask, scale) the generated kernels
(numeric.api.attention_routing: attention_backward without dQ and dK) give alpha, B = u v^T, the
advantage A = dL/dS (C1) and dL/dV (C2), so the recorded numbers are the proved closed forms on the
model's own tensors.

Sites:
- torch.nn.functional.scaled_dot_product_attention (SDPA) is intercepted by a TorchFunctionMode, pushed
  for the model's forward on recorded steps only (a mode costs a Python call per torch function). A mode
  sees every call made under it, whatever name the caller imported SDPA under (patching the attribute
  alone would miss `from torch.nn.functional import scaled_dot_product_attention`), and it calls the
  original function with the original arguments, so outputs and gradients are bitwise unchanged.
  A mode does not see calls nested inside another intercepted torch function, so for the same recorded
  forwards the attribute F.scaled_dot_product_attention is also replaced by a wrapper that calls what it
  replaced with the same arguments (Watcher._wrapper): it sees SDPA inside F.multi_head_attention_forward,
  which is how nn.MultiheadAttention computes attention with need_weights=False (as
  nn.TransformerEncoderLayer calls it), with the heads' q, k, v and u as SDPA has them. The mode skips
  the calls the wrapper makes, so no call is seen twice.
- nn.MultiheadAttention with need_weights=True (its default) computes attention without SDPA. It is
  watched by module hooks, added for recorded forwards: q, k, v are recomputed from its in-projection
  and the inputs, the masks merged as the module merges them, and u = (dL/d output) W_out, the
  gradient at the heads' concatenated output.
- Hugging Face transformers models: attn_implementation="sdpa" is SDPA, seen as above; "eager" computes
  attention in its modeling module's eager_attention_forward, which for recorded forwards only is replaced by
  a wrapper calling it with the same arguments (restored when the forward ends): q, k and v (k, v repeated
  to the query heads as eager repeats them), the additive mask, the scaling and u = dL/d(attention output per
  head). TransformerLens attention blocks (HookedTransformer): their hook points hooked for recorded forwards
  (q, k after rotary when there is one, v, the mask from hook_attn_scores, scale 1 / attn_scale, u = dL/d
  hook_z). numeric.watch_hf says how; neither library is imported for a model that is not theirs.
Between recorded steps only the model itself carries hooks (begin and end of a step), so an unrecorded
step runs as an unwatched one. A site is named by the module path of the innermost module of the model
with a method on the call stack at the call ('' for the model itself) and its call index within the
step. SDPA's is_causal (top-left causal mask), attn_mask (bool: True = attend; float: added), scale
(None = 1/sqrt(E)) and enable_gqa (k, v heads repeated as SDPA repeats them) are honoured.

The masks are copied at the call (SDPA's attn_mask once per tensor and version in a recorded forward;
nn.MultiheadAttention's merged mask is a new tensor), so a mask buffer changed in place before the
backward pass (between two forwards whose losses share one backward) is read as the call used it.

Evaluation: when a backward pass has ended (an autograd engine callback), each site it reached has its u
added to the u of the step's earlier passes, and the step's sites are grouped by shape, dtype, device,
scale and mask kind and evaluated, each group at once, concatenated along the head axis (every statistic
is per head, so each head's numbers are its own; one group costs the per-call work of one site), in
chunks of the batch. So a step has one record per site however many backward passes reach it
(loss1.backward(retain_graph=True); loss2.backward() records what a backward of loss1 + loss2 does); a
later pass of the step writes its records again, with the summed u. A step's records are final when the
next step begins or the watcher is left; a backward pass reaching a step after that is not counted (a
WatchWarning says so). Every pass counts, torch.autograd.grad's too: with a gradient penalty
(autograd.grad(loss, params, create_graph=True), then backward of loss + penalty) u is the sum of both
passes' dL/do, not the gradient the optimizer sees, and the record's `passes` is 2.

`w.records` holds one dict per site and recorded step, in step order and within a step in the order of
the forward's calls (not the order backward reaches them):
site, call, step, heads, dropout_p, passes (the backward passes whose u was summed), and lists over heads of
- entropy, saturation: mean over batch and live rows (rows with an attended key) of -sum_j alpha_ij
  log alpha_ij and of 1 - max_j alpha_ij;
- adv_max: max |A_ij| over batch and rows, A = alpha (b - bbar) = dL/dS (C1); adv_row_l1: mean over
  live rows of sum_j |A_ij|;
- resp_max, resp_min: mean over batch of max_j N_j and min_j N_j, N_j = sum_i alpha_ij (C2);
- c9_slack: min over batch and live rows of 4 (1 - max_j alpha_ij) max_j |b_ij| - sum_j |A_ij| (C9; the
  max over attended keys); >= 0 up to rounding;
- dS_norm, dV_norm: Frobenius norms over batch of dL/dS (routing) and dL/dV (values);
- js, v_change: drift from the previous record of the same site: mean over rows live in both of the
  Jensen-Shannon divergence (nats) of alpha rows, (KL(p || m) + KL(q || m)) / 2 with m the rows' mean
  (resolved down to about 1e-8 nats in float32), and ||V - V_prev|| / ||V_prev||. None at a site's first
  record, and when its group (the sites evaluated with it), batch, shape, dtype or device differs from
  the previous record's. A backward pass of losses from several forwards evaluates their steps in order.
A call with no sequence, query or key (an empty batch, L = 0 or S = 0) has None for every quantity.
A call is evaluated in the promoted dtype of q, k, v and u (under autocast they can differ: float32 q and k
after a float32 rotary buffer, bfloat16 v), half precision (float16, bfloat16) in float32.
Reading `w.records` or `w.summary()` while there is no record warns (WatchWarning) with the reason: the
watcher was never entered, no step seen (model.forward(...) called directly, or no forward with grad), no
step recorded, no attention call seen, or no backward pass yet.
torch.compile: the watcher cannot see attention inside a compiled graph. Watching a compiled module (or a
model with a compiled submodule) raises ValueError; a recorded step run under torch.compile (a compiled
wrapper of the watched model, a compiled function calling attention) raises RuntimeError. Watch the
uncompiled module and call it, uncompiled, on the steps to record (every=None and record_next()); the
compiled wrapper may run the other steps, and the site names are those of the uncompiled model.
With dropout_p > 0 the watcher raises unless allow_dropout=True; then the numbers are those of the dropout-free alpha against the real u.
`python -m numeric.watch_bench` measures the overhead.
"""
from __future__ import annotations

import functools
import math
import sys
import threading
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from numeric import watch_hf
from numeric.api import attention_routing

SDPA = torch._C._nn.scaled_dot_product_attention  # the builtin (F's attribute may be replaced, see Watcher)
MHA_ARGS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask")  # its positional order
TINY = 1e-30  # log clamp, as frame._js
HALF = (torch.float16, torch.bfloat16)  # watched in float32
COMPILED = ("the watcher cannot see attention calls inside a torch.compile graph: watch the uncompiled module "
            "(compiled = torch.compile(model); with watch(model, every=None) as w: ...) and call the uncompiled `model` "
            "on the steps to record (after w.record_next()), the compiled one on the others; a compiled function "
            "that calls attention inside the model's forward must run uncompiled on the recorded steps")


class WatchWarning(UserWarning):
    """A watcher's records were read while it had recorded nothing; the message says why and what to do."""


def _compiled_module(mod):
    """mod is torch.compile's wrapper (an OptimizedModule) or was compiled in place (Module.compile())."""
    dynamo = sys.modules.get("torch._dynamo.eval_frame")  # not imported: nothing was compiled
    return dynamo is not None and (isinstance(mod, dynamo.OptimizedModule) or getattr(mod, "_compiled_call_impl", None) is not None)


def _compiling():
    """Running under torch.compile: being traced, or run eagerly inside a compiled region (dynamo's frame
    callback is set; torch.compile's wrapper runs the root module's hooks so)."""
    if torch.compiler.is_compiling():
        return True
    callback = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)
    return callback is not None and bool(callback.get_eval_frame_callback())


def _copy(mask):
    """A copy of `mask` as it is now, of its shape; broadcast (stride-0) dims are copied once, not expanded."""
    mask = mask.detach()
    if mask.is_contiguous():
        return mask.clone()
    small = mask[tuple(slice(0, 1) if st == 0 else slice(None) for st in mask.stride())]
    return small.clone().expand(mask.shape)


class _SDPAMode(TorchFunctionMode):
    """Passes every torch function through unchanged; SDPA calls are also reported to the watcher."""

    def __init__(self, watcher):
        super().__init__()
        self.watcher = watcher

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is SDPA and not self.watcher._in_wrapper:
            self.watcher._capture_sdpa(out, args, kwargs)
        return out


def _remove_mode(mode):
    """Take `mode` off the torch function mode stack wherever it is (modes pushed after it stay, in order)."""
    stack = torch.overrides._get_current_function_mode_stack()
    if not any(m is mode for m in stack):
        return
    above = []
    while (top := torch.overrides._pop_mode()) is not mode:
        above.append(top)
    for m in reversed(above):
        torch.overrides._push_mode(m)


def _live(fn):
    """fn, or what it wraps when it is a watcher's wrapper whose recorded forward has ended (skipped, so a
    chain of wrappers left by forwards that did not end in order is unlinked)."""
    while getattr(fn, "_watcher", None) is not None and not fn._active():
        fn = fn._previous
    return fn


def _sdpa_inputs(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """q, k, v, mask in the API's semantics (bool True = attend, float additive), dropout_p, scale (SDPA's
    parameter names: a call may pass any of them by keyword)."""
    q, k, v = query, key, value
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention was called with both attn_mask and is_causal=True")
    if enable_gqa and q.shape[-3] != k.shape[-3]:  # SDPA's GQA: each kv head serves a group of q heads
        if q.shape[-3] % k.shape[-3]:
            raise ValueError(f"enable_gqa: q has {q.shape[-3]} heads, not a multiple of k's {k.shape[-3]}")
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
    mask = attn_mask
    if is_causal:
        mask = _causal(q.shape[-2], k.shape[-2], q.device)
    return q, k, v, mask, float(dropout_p), scale


@functools.lru_cache(maxsize=16)
def _causal(L, S, device):
    """SDPA's causal mask, top-left aligned: tril of ones (L, S). One object per size, so that the sites of a
    step share it (group_stats then keeps it unexpanded); never written to."""
    return torch.ones(L, S, dtype=torch.bool, device=device).tril()


def _mha_inputs(mod, args, kwargs):
    """q, k, v as (N, H, L, hd), the merged additive mask (or None) and dropout_p of an nn.MultiheadAttention call."""
    given = dict(zip(MHA_ARGS, args), **kwargs)
    query, key, value = given["query"], given["key"], given["value"]
    if mod.batch_first:
        query, key, value = (x.transpose(0, 1) for x in (query, key, value))
    if query.dim() != 3:
        raise ValueError(f"watch: unbatched nn.MultiheadAttention input (shape {tuple(query.shape)}) is not supported")
    E, H = mod.embed_dim, mod.num_heads
    if mod._qkv_same_embed_dim and given["query"] is given["key"] is given["value"]:  # self-attention: one packed
        heads = F.linear(query, mod.in_proj_weight, mod.in_proj_bias).chunk(3, -1)  # projection, as the module makes
    else:
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
        add = torch.zeros(m.shape, dtype=q.dtype, device=q.device).masked_fill(m, -math.inf) if m.dtype == torch.bool \
            else m.to(q.dtype, copy=True)  # a copy: the caller may change its mask before the backward pass
        if shape is None:
            add = add.view(1, 1, *add.shape) if add.dim() == 2 else add.view(N, H, *add.shape[-2:])
        else:
            add = add.view(shape)
        total = add if total is None else total + add
    return total


def _from_seq_major(g):
    """u at the heads, (N, H, L, hd), from the gradient at a (N, L, H, hd) attention output."""
    return g.detach().transpose(-3, -2).clone()


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


ENTRIES = ("entropy", "saturation", "adv_row_l1", "adv_max", "c9_slack", "resp_max", "resp_min", "dS_norm", "dV_norm",
           "js", "v_change")  # a record's per-head lists (None: not measured)
SUMS = ("live", "ent", "amax", "l1", "resp_max", "resp_min", "dS2", "dV2")  # per-head partial sums of a chunk
DRIFT_SUMS = ("js", "js_live", "dv2", "v2")  # and with a previous record: JS over rows live in both, ||V - V_prev||^2, ||V_prev||^2
ROW_MAX_MIN_REMAINDER = 8  # see _max_width


def _max_width(S, device):
    """Row width of the buffer the row maxima are taken over. ATen's CPU max reduction handles the last S mod 32
    entries of each row in scalar code (a row of 31 costs several times one of 32), so
    on CPU rows are zero-padded to a multiple of 32 when that remainder exceeds ROW_MAX_MIN_REMAINDER."""
    if device.type == "cpu" and S % 32 > ROW_MAX_MIN_REMAINDER:
        return S + 32 - S % 32
    return max(S, 1)


def _chunk_stats(q, k, v, u, mask, scale, prev):
    """Per-head partials of one batch chunk, as one (K, H) tensor: the sums of SUMS, then of DRIFT_SUMS when
    `prev` (the chunk's previous state) is given and of the same kind, then the maximum of |A| and the minimum
    C9 slack; and this chunk's state for the next drift (alpha, log alpha, live rows, V).
    The kernel's fresh buffers are overwritten once read (a fresh large buffer costs page faults)."""
    g = attention_routing(q, k, v, u, mask=mask, scale=scale, validate_inputs=False)
    alpha, b, A = g.alpha.expand(g.A.shape), g.B, g.A  # (c, H, L, S)
    S = alpha.shape[-1]
    log_a = torch.clamp_min(alpha, TINY).log_()  # log alpha, finite where alpha = 0 (kept for the next drift)
    plogp = torch.linalg.vecdot(alpha, log_a)  # sum_j alpha_ij log alpha_ij: 0 on a row with no attended key
    abs_a = A.abs_()  # |A|; A is read only through it
    # the row maxima of alpha and of |b| over attended keys (alpha > 0), in one reduction; both are >= 0, so
    # zero padding (_max_width) leaves them unchanged
    width = _max_width(S, alpha.device)
    rows = (alpha.new_zeros if width != S else alpha.new_empty)(*alpha.shape[:-1], 2, width)
    rows[..., 0, :S].copy_(alpha)
    torch.sign(alpha, out=rows[..., 1, :S]).mul_(b.abs_())
    amax, bmax = rows.amax(-1).unbind(-1)  # (c, H, L) each
    live = amax > 0  # rows with an attended key
    lhs = abs_a.sum(-1)  # sum_j |dL/ds_ij|
    adv_max = abs_a.amax((0, -2, -1))
    resp = torch.stack(torch.aminmax(alpha.sum(-2), dim=-1))  # min_j, max_j of N_j = sum_i alpha_ij, (2, c, H)
    per_row = [live.to(alpha.dtype), plogp.neg(), amax, lhs, resp[1], resp[0], abs_a.square_().sum(-1),
               torch.linalg.vecdot(g.dV, g.dV)]
    if prev is not None and _same_kind(prev[0], alpha) and _same_kind(prev[3], v):
        both = live & prev[2]
        js = _js(alpha, log_a, prev[0], prev[1], buffer=b).masked_fill_(~both, 0)
        dv = v - prev[3]
        per_row += [js, both.to(js.dtype), torch.linalg.vecdot(dv, dv), torch.linalg.vecdot(prev[3], prev[3])]
    sums = torch.stack([x.sum(0) if x.dim() == 2 else x.sum((0, -1)) for x in per_row])
    c9 = torch.addcmul(lhs.neg(), 1 - amax, bmax, value=4).masked_fill_(~live, math.inf).amin((0, -1))
    return torch.cat([sums, adv_max[None], c9[None]]), (alpha, log_a, live, v)


def _js(p, log_p, q, log_q, buffer=None):
    """Jensen-Shannon divergence (nats) of last-axis distributions, (KL(p || m) + KL(q || m)) / 2 with
    m = (p + q) / 2: frame._js's expression, given the logs (`buffer`, of their shape, may be overwritten:
    it saves an allocation). Each KL term is a sum of p (log p - log m), accurate for nearby rows (the
    difference of entropies H(m) - (H(p) + H(q)) / 2 loses about 1e-7 nats to rounding in float32)."""
    log_m = torch.lerp(p, q, 0.5).clamp_min_(TINY).log_()
    d = torch.sub(log_p, log_m, out=buffer) if buffer is not None else log_p - log_m
    first = d.mul_(p).sum(-1)
    return torch.sub(log_q, log_m, out=d).mul_(q).sum(-1).add_(first).mul_(0.5)


def _as_bool(mask):
    """An additive mask whose entries are all 0 or -inf as the equivalent bool mask (True = attend): the
    generated masked kernel is then used, which is faster than the additive path; any other mask unchanged."""
    if mask is None or mask.dtype == torch.bool:
        return mask
    keep = mask == 0
    return keep if bool((keep | torch.isneginf(mask)).all()) else mask


def _prepare(q, k, v, u, mask):
    """One call's q, k, v, u, mask as the statistics read them: flat_batch's layout, in one dtype (the promoted
    dtype of q, k, v and u: under autocast they can differ, e.g. float32 q, k after a float32 rotary buffer and
    bfloat16 v), half precision in float32 (a half-precision log of 0 would give 0 x -inf = NaN), a float mask
    in that dtype, a 0/-inf additive mask as bool."""
    q, k, v, u, mask = flat_batch(q, k, v, u, mask)
    dtype = q.dtype
    if not dtype == k.dtype == v.dtype == u.dtype:
        dtype = functools.reduce(torch.promote_types, (k.dtype, v.dtype, u.dtype), dtype)
    if dtype in HALF:
        dtype = torch.float32
    if dtype != q.dtype or not q.dtype == k.dtype == v.dtype == u.dtype:
        q, k, v, u = (t.to(dtype) for t in (q, k, v, u))
    if mask is not None and mask.dtype != torch.bool and mask.dtype != dtype:
        mask = mask.to(dtype)
    return q, k, v, u, _as_bool(mask)


def _group_key(q, k, v, u, mask, scale):
    """Prepared calls with equal keys are evaluated together, concatenated along the head axis."""
    kind = None if mask is None else (mask.dtype, mask.shape[0] != 1)
    return q.shape[0], q.shape[2], k.shape[2], q.shape[3], v.shape[3], q.dtype, q.device, scale, kind


def group_stats(calls, prev=None):
    """Per-head record entries for prepared calls (q, k, v, u, mask, scale) of one _group_key, evaluated
    together: concatenated along the head axis (each head's numbers are its own: every statistic is per
    head), in chunks of the batch. prev = the group's previous state (one per chunk, see _chunk_stats) for
    drift. Returns a list of entries (lists over each call's heads) and the group's state."""
    heads = [c[0].shape[1] for c in calls]
    q, k, v, u, mask, scale = calls[0]
    if len(calls) == 1:
        v = v.clone()  # kept for the next drift: the caller's V may be overwritten in place (a parameter)
    else:
        q, k, v, u = (torch.cat([c[i] for c in calls], 1) for i in range(4))
        masks = [c[4] for c in calls]
        if mask is not None and not (mask.shape[1] == 1 and all(m is mask for m in masks)):
            mask = torch.cat([m.expand(m.shape[0], h, q.shape[2], k.shape[2]) for m, h in zip(masks, heads)], 1)
    step = max(1, CHUNK // (q.shape[1] * q.shape[2] * k.shape[2]))
    if prev is not None and len(prev) != -(-q.shape[0] // step):
        prev = None  # another batch size: no drift (each chunk's own shape could still agree)
    parts, states = [], []
    with torch.no_grad():
        for i, c in enumerate(range(0, q.shape[0], step)):
            sl = slice(c, c + step)
            m = mask if mask is None or mask.shape[0] == 1 else mask[sl]
            old = prev[i] if prev is not None and i < len(prev) else None
            part, state = _chunk_stats(q[sl], k[sl], v[sl], u[sl], m, scale, old)
            parts.append(part), states.append(state)
        out = _combine(parts, q.shape[0])
    ends = [sum(heads[:i + 1]) for i in range(len(heads))]
    return [{key: x[end - h:end] if isinstance(x, list) else x for key, x in out.items()}
            for h, end in zip(heads, ends)], states


def _combine(parts, batch):
    """Chunk partials -> per-head entries (means over live rows or the batch, maxima, minima, norms); one
    host copy for all of them (a copy per entry costs more than the entry)."""
    K = len(SUMS) + len(DRIFT_SUMS)
    drift = all(len(p) == K + 2 for p in parts)
    if len(parts) == 1:
        total = parts[0]
    else:
        n = K if drift else len(SUMS)
        cat = torch.stack([torch.cat([p[:n], p[-2:]]) for p in parts])
        total = torch.cat([cat[:, :n].sum(0), cat[:, -2].amax(0)[None], cat[:, -1].amin(0)[None]])
    *sums, adv_max, c9 = total.to(torch.float64).tolist()
    t = dict(zip(SUMS + DRIFT_SUMS, sums))
    live = [max(n, 1) for n in t["live"]]
    out = dict(entropy=[e / n for e, n in zip(t["ent"], live)],
               saturation=[(n - a) / d for n, a, d in zip(t["live"], t["amax"], live)],
               adv_row_l1=[x / n for x, n in zip(t["l1"], live)], adv_max=adv_max, c9_slack=c9,
               resp_max=[x / batch for x in t["resp_max"]], resp_min=[x / batch for x in t["resp_min"]],
               dS_norm=[math.sqrt(x) for x in t["dS2"]], dV_norm=[math.sqrt(x) for x in t["dV2"]])
    if drift:
        out["js"] = [x / max(n, 1) for x, n in zip(t["js"], t["js_live"])]
        out["v_change"] = [math.sqrt(d) / max(math.sqrt(p), 1e-30) for d, p in zip(t["dv2"], t["v2"])]
    else:
        out["js"] = out["v_change"] = None
    return out


def _same_kind(a, b):
    """Drift is measured between records of one shape, dtype and device (else it is None for that record)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device


class Watcher:
    """Records attention statistics of `model` every `every` steps; use through `watch`."""

    def __init__(self, model, every=1, allow_dropout=False):
        if not isinstance(model, nn.Module):
            raise TypeError(f"watch needs an nn.Module, got {type(model).__name__}")
        if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
            raise ValueError(f"every must be a positive int or None (record only after record_next()), got {every!r}")
        self.model, self.every, self.allow_dropout = model, every, allow_dropout
        self._records, self.step_index, self.recording = [], -1, False
        self._mha_depth, self._calls, self._prev, self._handles, self._mode, self._names = 0, 0, {}, [], None, {}
        self._mha_calls = {}  # module -> (args, kwargs) of its call in progress
        self._mode_on, self._step_handles, self._in_wrapper, self._token = False, [], 0, None
        self._eager = []  # (modeling module, its eager_attention_forward) replaced for the recorded forward
        self._pending = {}  # graph task id -> the sites its backward pass has reached
        self._next = False  # record_next() was called
        self._open = {}  # step -> {site: [call, u summed over passes, passes]} and its groups' states, until closed
        self._closed = set()  # steps whose records are final (a later step began, or the watcher was left)
        self._masks = {}  # id -> (mask, version, copy): the recorded forward's masks, copied once
        self._entered, self._recorded, self._captured = False, 0, 0  # for the warning when nothing was recorded

    @property
    def records(self):
        """One dict per site and recorded step, in step order and within a step in forward call order (see the
        module docstring). Warns (WatchWarning) when there is none, saying why."""
        if not self._records:
            warnings.warn(f"watch: no records: {self._why_empty()}", WatchWarning, stacklevel=2)
        return self._records

    def _why_empty(self):
        if not self._entered:
            return "the watcher was never entered; use it as `with watch(model) as w:` around the training steps"
        if self.step_index < 0:
            return ("it saw no step: inside `with watch(model)`, call the model as model(...) with grad enabled "
                    "(model.forward(...) bypasses the hooks the watcher counts steps by; a forward under "
                    "torch.no_grad() is not a step)")
        if not self._recorded:
            return (f"none of its {self.step_index + 1} steps was recorded (with every=None, only the step after "
                    "w.record_next() is)")
        if not self._captured:
            return ("its recorded steps made no attention call it could see (F.scaled_dot_product_attention or "
                    "nn.MultiheadAttention inside model's forward)")
        return "no backward pass has reached the attention outputs of a recorded step yet (call loss.backward())"

    def __enter__(self):
        for name, mod in self.model.named_modules():
            if isinstance(mod, nn.MultiheadAttention) and (mod.bias_k is not None or mod.add_zero_attn):
                raise ValueError(f"watch: nn.MultiheadAttention '{name}' uses add_bias_kv/add_zero_attn, not supported")
            if _compiled_module(mod):
                raise ValueError(f"watch: {f'submodule {name!r}' if name else 'the model'} is compiled; {COMPILED}")
            if watch_hf.is_lens_attention(mod):
                watch_hf.check_lens(name, mod)
        watch_hf.check_hf(self.model)
        # Only the model itself is hooked throughout: a module with hooks takes Module.__call__'s slow path
        # (hooks on every module, as an earlier version had, cost 2.4% of every step of the demonstration
        # model). What a recorded step needs is added for its forward and removed after it.
        self._handles = [self.model.register_forward_pre_hook(self._begin_step, prepend=True)]
        self._handles += self._mha_hooks(self.model)  # a root's own hooks added during its call would not run
        self._handles.append(self.model.register_forward_hook(self._end_forward, always_call=True))  # also when it raises
        self._mode = _SDPAMode(self)
        self._entered = True
        return self

    def _mha_hooks(self, mod):
        if not isinstance(mod, nn.MultiheadAttention):
            return []
        return [mod.register_forward_pre_hook(self._mha_pre, with_kwargs=True),
                mod.register_forward_hook(self._mha_post, with_kwargs=True)]

    def __exit__(self, *exc):
        self._end_forward()
        self._close()
        for h in self._handles:
            h.remove()
        self._handles, self._mode, self.recording = [], None, False
        return False

    def _begin_step(self, mod, args):
        """A grad-enabled forward of the model is a step. It closes the records of the steps before it. For a
        recorded step's forward only: the SDPA mode is pushed (a mode costs a Python call per torch function),
        F's SDPA attribute replaced, the nn.MultiheadAttention submodules hooked and the module paths looked
        up afresh."""
        if torch._C._current_graph_task_id() != -1:
            return  # a forward run by a backward pass (activation checkpointing's recomputation) is not a step
        self._pending.clear()  # outside every backward pass, sites still pending are from passes that raised
        if torch.is_grad_enabled():
            self._end_forward()  # after a forward that raised
            recording = (self.every is not None and (self.step_index + 1) % self.every == 0) or self._next
            if recording and _compiling():
                raise RuntimeError(f"watch: step {self.step_index + 1} is to be recorded but the model runs under "
                                   f"torch.compile; {COMPILED}")
            self.step_index += 1
            if self._open:
                self._close()
            self.recording, self._next, self._calls, self._mha_depth = recording, False, 0, 0
            if self.recording:
                self._recorded += 1
                self._masks.clear()
                self._names = {id(sub): (name, sub) for name, sub in self.model.named_modules()}
                for name, sub in self._names.values():
                    if sub is not self.model:
                        self._step_handles += self._mha_hooks(sub)
                    if watch_hf.is_lens_attention(sub):
                        self._step_handles += self._lens_hooks(name, sub)
                self._prev_sdpa = F.scaled_dot_product_attention
                F.scaled_dot_product_attention = self._wrapper()
                for module in watch_hf.eager_modules(self.model):
                    self._eager.append((module, module.eager_attention_forward))
                    module.eager_attention_forward = self._eager_wrapper(module.eager_attention_forward)
                torch.overrides._push_mode(self._mode)
                self._mode_on = True

    def record_next(self):
        """Record the next step whatever `every` says (with every=None, the only steps recorded)."""
        self._next = True

    def _end_forward(self, *hook_args):
        if self._mode_on:
            self._mode_on = False
            _remove_mode(self._mode)
            if getattr(F.scaled_dot_product_attention, "_watcher", None) is self:
                F.scaled_dot_product_attention = _live(self._prev_sdpa)
            for module, previous in self._eager:
                if getattr(module.eager_attention_forward, "_watcher", None) is self:
                    module.eager_attention_forward = _live(previous)
            self._eager = []
        for h in self._step_handles:
            h.remove()
        self._step_handles = []

    def _wrapper(self):
        """F.scaled_dot_product_attention while a recorded step's forward runs. nn.MultiheadAttention with
        need_weights=False (as nn.TransformerEncoderLayer calls it) runs SDPA inside
        F.multi_head_attention_forward, under the name F.scaled_dot_product_attention and out of the mode's
        sight (a mode does not see calls nested in a function it intercepted): the wrapper sees it there,
        with the heads' q, k, v as SDPA receives them, and u from SDPA's own output. It calls the function
        it replaced with the same arguments; the mode skips the call it makes, so nothing is seen twice."""
        previous, owner, token = self._prev_sdpa, threading.get_ident(), object()
        self._token = token

        def active():  # this recorded forward is still running (a wrapper left by another is passed through)
            return self._mode_on and self._token is token

        def scaled_dot_product_attention(*args, **kwargs):
            if threading.get_ident() != owner or not active():
                return previous(*args, **kwargs)
            self._in_wrapper += 1
            try:
                out = previous(*args, **kwargs)
            finally:
                self._in_wrapper -= 1
            self._capture_sdpa(out, args, kwargs)
            return out
        scaled_dot_product_attention.__doc__, scaled_dot_product_attention._watcher = previous.__doc__, self
        scaled_dot_product_attention._previous, scaled_dot_product_attention._active = previous, active
        return scaled_dot_product_attention

    def _eager_wrapper(self, previous):
        """A Hugging Face modeling module's eager_attention_forward while a recorded step's forward runs: calls
        the function it replaced with the same arguments and reads the call (watch_hf.eager_inputs)."""
        owner, token = threading.get_ident(), self._token

        def active():
            return self._mode_on and self._token is token

        @functools.wraps(previous)
        def eager_attention_forward(*args, **kwargs):
            if threading.get_ident() != owner or not active():
                return previous(*args, **kwargs)
            out = previous(*args, **kwargs)
            self._capture_eager(previous, out, args, kwargs)
            return out
        eager_attention_forward._watcher, eager_attention_forward._previous = self, previous
        eager_attention_forward._active = active
        return eager_attention_forward

    def _capture_eager(self, fn, out, args, kwargs):
        attn = out[0] if isinstance(out, tuple) else out
        if not self.recording or not isinstance(attn, torch.Tensor) or not attn.requires_grad:
            return
        module, q, k, v, mask, scale, p = watch_hf.eager_inputs(fn, args, kwargs)
        given = kwargs["attention_mask"] if "attention_mask" in kwargs else args[4] if len(args) > 4 else None
        if mask is not None and mask is given:
            mask = self._frozen(mask)  # the caller's (a sliced or converted mask is a new tensor)
        found = self._names.get(id(module))
        name = found[0] if found is not None and found[1] is module else self._site_name()
        self._attach(attn, name, q.detach(), k.detach(), v.detach(), mask, scale, p, _from_seq_major)

    def _lens_hooks(self, name, mod):
        """A TransformerLens attention block's hook points, hooked for a recorded forward: q, k, v (after
        rotary when it has it) and the scores are kept, and the call is read at hook_z (watch_hf)."""
        state = {}

        def keep(key):
            def hook(point, args, out):
                state[key] = out
            return hook
        keys = ("q", "k", "v", "attn_scores") + (("rot_q", "rot_k") if mod.cfg.positional_embedding_type == "rotary" else ())
        handles = [getattr(mod, f"hook_{key}").register_forward_hook(keep(key)) for key in keys]
        handles.append(mod.hook_z.register_forward_hook(lambda point, args, z: self._capture_lens(name, mod, state, z)))
        return handles

    def _capture_lens(self, name, mod, state, z):
        got = dict(state)
        state.clear()
        if not self.recording or not z.requires_grad or "attn_scores" not in got:
            return
        q = watch_hf.lens_heads(got["rot_q"] if "rot_q" in got else got["q"])
        k = watch_hf.lens_heads(got["rot_k"] if "rot_k" in got else got["k"])
        v = watch_hf.lens_heads(got["v"])
        if k.shape[-3] != q.shape[-3]:  # grouped-query attention: its key/value heads repeated, as it repeats them
            rep = q.shape[-3] // k.shape[-3]
            k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
        scale = watch_hf.lens_scale(mod)
        mask = watch_hf.lens_mask(mod, got["attn_scores"], q, k, scale, _causal)
        self._attach(z, name, q, k, v, mask, scale, 0.0, _from_seq_major)

    def _site_name(self):
        """The module path of the innermost module of the model with a method on the call stack (its
        forward, or a method it calls): '' for the model itself, or when none is found."""
        f = sys._getframe(2)
        while f is not None:
            code = f.f_code
            if code.co_argcount and code.co_varnames[0] == "self":
                obj = f.f_locals.get("self")
                found = self._names.get(id(obj))
                if found is not None and found[1] is obj:
                    return found[0]
            f = f.f_back
        return ""

    def _mha_pre(self, mod, args, kwargs):
        """nn.MultiheadAttention with need_weights=True computes attention without SDPA: watched from its inputs."""
        given = dict(zip(MHA_ARGS, args), **kwargs)
        watched = self.recording and given.get("need_weights", True)
        self._mha_calls[mod] = (args, kwargs) if watched else None
        self._mha_depth += bool(watched)  # SDPA inside it is then not a site of its own

    def _mha_post(self, mod, args, kwargs, out):
        call = self._mha_calls.pop(mod, None)
        if call is None:
            return
        self._mha_depth -= 1
        if not out[0].requires_grad:
            return
        with torch.no_grad():
            q, k, v, mask, p = _mha_inputs(mod, *call)
        w_out = mod.out_proj.weight.detach()
        E = mod.embed_dim

        def to_heads(g):  # dL/d(out) -> u at the concatenated heads, (N, H, L, hd)
            g = g if mod.batch_first else g.transpose(0, 1)
            dtype = torch.promote_types(g.dtype, w_out.dtype)  # under autocast, a bfloat16 g and a float32 W_out
            u = g.to(dtype) @ w_out.to(dtype)
            return u.reshape(g.shape[0], g.shape[1], mod.num_heads, E // mod.num_heads).transpose(1, 2)
        name = self._names[id(mod)][0] if id(mod) in self._names else ""
        self._attach(out[0], name, q, k, v, mask, None, p, to_heads)

    def _capture_sdpa(self, out, args, kwargs):
        if self._mha_depth or not self.recording or not out.requires_grad:
            return
        q, k, v, mask, p, scale = _sdpa_inputs(*args, **kwargs)
        if mask is not None and mask is (kwargs["attn_mask"] if "attn_mask" in kwargs else args[3] if len(args) > 3 else None):
            mask = self._frozen(mask)  # the caller's (not _causal's)
        self._attach(out, self._site_name(), q.detach(), k.detach(), v.detach(), mask, scale, p, None)

    def _frozen(self, mask):
        """The mask as it is at its call: a bool mask buffer changed in place between this forward and the
        backward pass that reaches the call (a later forward's) would otherwise be read as changed. One copy
        per tensor and version in a recorded forward, so calls that share a mask share its copy."""
        got = self._masks.get(id(mask))
        if got is not None and got[0] is mask and got[1] == mask._version:
            return got[2]
        copied = _copy(mask)
        self._masks[id(mask)] = (mask, mask._version, copied)
        return copied

    def _attach(self, out, name, q, k, v, mask, scale, p, to_u):
        if p > 0 and not self.allow_dropout:
            raise ValueError(f"watch: attention with dropout_p={p} at '{name}': "
                             "the closed forms exclude dropout; set dropout to 0 or pass allow_dropout=True")
        if _compiling():
            raise RuntimeError(f"watch: the attention call at '{name}' runs under torch.compile; {COMPILED}")
        site = (name, self._calls)
        self._calls += 1
        self._captured += 1
        step = self.step_index
        mask = mask.detach() if mask is not None else None
        out.register_hook(lambda g: self._pend(site, step, q, k, v, to_u(g) if to_u else g.detach().clone(), mask, scale, p))

    def _pend(self, *call):
        """A site's u has arrived: added to its step's when this backward pass ends (_flush). Sites are kept
        per backward pass (graph task), so a backward run inside another (a custom Function's backward calling
        autograd.grad) flushes only its own, and a pass that raises adds nothing."""
        task = torch._C._current_graph_task_id()
        if task not in self._pending:
            self._pending[task] = []
            torch.autograd.Variable._execution_engine.queue_callback(lambda: self._flush(task))
        self._pending[task].append(call)

    def _flush(self, task):
        """A backward pass has ended: each site's u is added to the u of its step's earlier passes (one record
        per site and step, however many backward passes reach it: loss1.backward(retain_graph=True);
        loss2.backward() records what a backward of loss1 + loss2 does) and the steps it reached are
        evaluated again, with the later open steps (whose drift is against them), in step order."""
        first, late = None, set()
        for site, step, q, k, v, u, mask, scale, p in self._pending.pop(task, []):
            if step in self._closed:
                late.add(step)
                continue
            sites = self._open.setdefault(step, {"calls": {}, "states": []})["calls"]
            got = sites.get(site)
            if got is None:
                sites[site] = [(site, step, q, k, v, u, mask, scale, p), u, 1]
            else:
                got[1] = got[1] + u
                got[2] += 1
            first = step if first is None else min(first, step)
        if late:
            warnings.warn(f"watch: a backward pass reached attention of step(s) {sorted(late)} after their records "
                          "were closed (a later step had begun, or the watcher was left); its gradient is not in them",
                          WatchWarning, stacklevel=2)
        if first is not None:
            self._evaluate_open(first)

    def _evaluate_open(self, first):
        """Evaluate the open steps from `first` on, in step order, each against the drift states of the closed
        steps and of the open steps before it; their records replace the ones they had."""
        prev = dict(self._prev)
        for step in sorted(self._open):
            entry = self._open[step]
            if step >= first:
                calls = sorted(entry["calls"].values(), key=lambda c: c[0][0][1])  # forward call order
                records, entry["states"] = self._evaluate(calls, prev)
                self._place(step, records)
            _advance(prev, entry["states"])

    def _close(self):
        """The open steps' records are final: their drift states become the ones later steps drift against."""
        for step in sorted(self._open):
            _advance(self._prev, self._open.pop(step)["states"])
            self._closed.add(step)

    def _place(self, step, records):
        """A step's records into self._records, replacing the step's earlier ones, after the records of earlier
        steps and before those of later ones."""
        recs = self._records
        hi = len(recs)
        while hi and recs[hi - 1]["step"] > step:
            hi -= 1
        lo = hi
        while lo and recs[lo - 1]["step"] == step:
            lo -= 1
        recs[lo:hi] = records

    def _evaluate(self, calls, prev):
        """Records of one step's sites ([call, u, passes] in forward call order), grouped (_group_key) and
        evaluated a group at a time: one pass of the kernels and reductions per group instead of per site (the
        per-call cost paid once per group), and the groups' drift states."""
        prepared = [(*_prepare(q, k, v, u, mask), scale) for (_, _, q, k, v, _, mask, scale, _), u, _ in calls]
        groups, stats, states = {}, [None] * len(calls), []
        for i, (q, k, *_) in enumerate(prepared):
            if 0 in (q.shape[0], q.shape[2], k.shape[2]):  # no sequence, query or key: nothing to measure
                stats[i] = dict.fromkeys(ENTRIES)
            else:
                groups.setdefault(_group_key(*prepared[i]), []).append(i)
        for members in groups.values():
            sites = tuple(calls[i][0][0] for i in members)
            outs, state = group_stats([prepared[i] for i in members], prev.get(sites))
            states.append((sites, state))
            for i, out in zip(members, outs):
                stats[i] = out
        records = []
        for ((site, step, q, *_, p), _, passes), out in zip(calls, stats):
            heads = q.shape[-3] if q.dim() >= 4 else 1  # flat_batch: SDPA's head axis exists from 4 dims
            records.append(dict(site=site[0], call=site[1], step=step, heads=heads, dropout_p=p, passes=passes, **out))
        return records, states

    def summary(self):
        """{'site#call': {'step': ..., quantity: mean over heads (c9_slack: min; None when not measured), from
        the site's last record}}."""
        out = {}
        records = self._records
        if not records:
            warnings.warn(f"watch: no records: {self._why_empty()}", WatchWarning, stacklevel=2)
        for rec in records:
            key = f"{rec['site'] or '<root>'}#{rec['call']}"
            out[key] = {"step": rec["step"], **{name: (min(x) if name == "c9_slack" else sum(x) / len(x)) if x else x
                                                for name, x in ((n, rec[n]) for n in ENTRIES)}}
        return out


def _advance(prev, states):
    """Drift states {group sites: state} after a step whose groups had `states`: a site's state lives in one
    group's, so the groups it was in before are dropped."""
    for sites, state in states:
        for key in [key for key in prev if set(key) & set(sites)]:
            del prev[key]
        prev[sites] = state


def watch(model, every=1, *, allow_dropout=False):
    """A context manager recording attention statistics of `model` every `every` steps, and after
    `record_next()` (every=None: only then; see the module docstring)."""
    return Watcher(model, every, allow_dropout)
