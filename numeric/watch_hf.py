"""The watcher's sites in Hugging Face `transformers` models and TransformerLens `HookedTransformer`s.

Neither library is imported here: a model of theirs has imported it already, so the watcher looks them up in
sys.modules and, for any other model, nothing changes and nothing is imported. `require` is for code that
builds such a model itself (the `hf` overhead benchmark, the tests): a missing extra is an ImportError that
names `pip install -e '.[hf]'`.

Hugging Face, attn_implementation="sdpa": attention is torch's SDPA, which the watcher sees as it sees any
other call of it (numeric.watch). attn_implementation="eager": attention is computed by a function of the
model's modeling module, `eager_attention_forward(module, query, key, value, attention_mask, scaling,
dropout, **kwargs)`, looked up by name when the attention module runs; for a recorded forward the watcher
replaces that attribute of each modeling module of the model's attention modules (eager_modules) by a
wrapper calling the original with the same arguments (Watcher._eager_wrapper), and reads the call as eager
computes it (eager_inputs): q, k and v with k, v repeated to q's heads (repeat_kv), the additive mask (a
bool mask added as 0/1, as eager's addition does), the scaling (None = 1/sqrt(head dim)), dropout as
nn.functional.dropout applies it (training mode only); u is the gradient at the (batch, L, heads, head dim)
output, transposed to the heads' layout.

TransformerLens: an attention block (AbstractAttention) is watched from its hook points (lens_hooks in
numeric.watch): q from hook_rot_q when the model is rotary (else hook_q), k likewise, v from hook_v (k and v
repeated to the query heads as its grouped-query attention repeats them, cfg.n_key_value_heads), the scale
1 / attn_scale (the block's, from cfg.attn_scale, cfg.use_attn_scale and scale_attn_by_inverse_layer_idx),
the mask from hook_attn_scores (lens_mask) and u = dL/d hook_z (z = pattern @ v per head).
"""
from __future__ import annotations

import inspect
import math
import sys

import torch

EXTRA = "pip install -e '.[hf]'"


def require(name):
    """Import an optional dependency (`transformers` or `transformer_lens`); a missing one is an ImportError
    naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ImportError(f"{name} is not installed: it is an optional dependency of this project; install it "
                          f"with `{EXTRA}` (or pip install 'attention-gradient-verifier[hf]')") from exc


# -- Hugging Face eager attention ------------------------------------------------------------------------
def is_hf_module(mod):
    return "transformers" in sys.modules and type(mod).__module__.startswith("transformers.")


def eager_modules(model):
    """The modeling modules (module objects) defining `eager_attention_forward` that the model's submodules'
    classes come from, each once."""
    if "transformers" not in sys.modules:
        return []
    found = {}
    for sub in model.modules():
        name = type(sub).__module__
        if name.startswith("transformers.") and name not in found:
            module = sys.modules.get(name)
            found[name] = module if callable(getattr(module, "eager_attention_forward", None)) else None
    return [m for m in found.values() if m is not None]


def check_hf(model):
    """ValueError for a Hugging Face attention the watcher would read wrongly: GPT-2's
    reorder_and_upcast_attn under eager attention computes attention in a method of its own."""
    if "transformers" not in sys.modules:
        return
    for name, sub in model.named_modules():
        config = getattr(sub, "config", None)
        if (getattr(sub, "reorder_and_upcast_attn", False) and config is not None
                and getattr(config, "_attn_implementation", None) == "eager" and is_hf_module(sub)):
            raise ValueError(f"watch: '{name}' uses reorder_and_upcast_attn with eager attention, which computes "
                             "attention outside eager_attention_forward; not supported (use attn_implementation='sdpa')")


_SIGNATURES = {}
EAGER_ORDER = ("module", "query", "key", "value", "attention_mask", "scaling", "dropout")  # transformers' order
EAGER_KNOWN = EAGER_ORDER + ("position_bias",)  # the arguments eager_inputs reads


def _bound(fn, args, kwargs):
    """The call's arguments by name: by fn's signature when it names eager attention's parameters, else in
    transformers' order (fn may be a wrapper taking *args, **kwargs)."""
    sig = _SIGNATURES.get(fn)
    if sig is None:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = False
        if sig and not {"query", "key", "value"} <= set(sig.parameters):
            sig = False
        _SIGNATURES[fn] = sig
    if not sig:
        return {**dict(zip(EAGER_ORDER, args)), **kwargs}
    bound = sig.bind(*args, **kwargs)
    given = dict(bound.arguments)
    for name, param in sig.parameters.items():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            given.update(given.pop(name, {}))
        elif name not in given and param.default is not inspect.Parameter.empty:
            given[name] = param.default
    return given


def eager_inputs(fn, args, kwargs):
    """(module, q, k, v, mask, scale, dropout_p) of a call fn(*args, **kwargs) of an eager_attention_forward,
    as it computes attention: softmax(q k^T * scaling + mask) v over q's heads."""
    given = _bound(fn, args, kwargs)
    module, q, k, v = given["module"], given["query"], given["key"], given["value"]
    sig = _SIGNATURES.get(fn)
    named = [n for n, prm in sig.parameters.items() if prm.kind not in (prm.VAR_KEYWORD, prm.VAR_POSITIONAL)] \
        if sig else []
    # Any other argument the function names (softcap, sinks, a sliding window, ...) may change the scores: refused when
    # given, as are attention sinks passed through **kwargs (s_aux)
    for key in [n for n in named if n not in EAGER_KNOWN] + ["s_aux"]:
        if given.get(key) is not None:
            raise ValueError(f"watch: eager attention at {type(module).__name__} with {key}: not supported")
    if k.shape[-3] != q.shape[-3]:  # repeat_kv: each key/value head serves a group of query heads
        if q.shape[-3] % k.shape[-3]:
            raise ValueError(f"watch: eager attention with {q.shape[-3]} query heads and {k.shape[-3]} key heads")
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
    mask = given.get("attention_mask")
    if mask is not None:
        if mask.shape[-1] != k.shape[-2]:
            mask = mask[..., :k.shape[-2]]
        if mask.dtype == torch.bool or not mask.is_floating_point():
            mask = mask.to(q.dtype)  # eager adds it as it is: True (or 1) adds 1
    bias = given.get("position_bias")
    if bias is not None:  # T5's family: a relative-position bias added to the scores before the mask
        mask = bias if mask is None else bias + mask
    scale = given.get("scaling")
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    p = float(given.get("dropout") or 0.0) if module.training else 0.0
    return module, q, k, v, mask, scale, p


# -- TransformerLens ------------------------------------------------------------------------------------
def is_lens_attention(mod):
    abstract = sys.modules.get("transformer_lens.components.abstract_attention")
    return abstract is not None and isinstance(mod, abstract.AbstractAttention)


LENS_ARCH_NORMED = ("OlmoeForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM")


def check_lens(name, mod):
    """ValueError for a TransformerLens attention block whose hook points do not give the scores'
    q and k, or whose scores are not q k^T / attn_scale plus a mask or a bias."""
    cfg = mod.cfg
    why = None
    soft = getattr(cfg, "attn_scores_soft_cap", -1.0)
    if soft is not None and soft > 0:
        why = "attn_scores_soft_cap (the scores are soft-capped)"
    elif getattr(cfg, "use_attention_sinks", False):
        why = "use_attention_sinks (a sink column joins the softmax)"
    elif getattr(cfg, "use_logn_attn", False):
        why = "use_logn_attn (q is rescaled after its hook points)"
    elif getattr(cfg, "clip_qkv", None) is not None:
        why = "clip_qkv (q, k and v are clamped after their hook points, whatever the positional embedding)"
    elif cfg.positional_embedding_type != "rotary" and (
            getattr(cfg, "use_qk_norm", False) or getattr(cfg, "original_architecture", None) in LENS_ARCH_NORMED):
        why = "q and k normalised after hook_q and hook_k"
    elif not all(hasattr(mod, f"hook_{h}") for h in ("q", "k", "v", "attn_scores", "z")):
        why = "no hook_q, hook_k, hook_v, hook_attn_scores and hook_z"
    if why:
        raise ValueError(f"watch: TransformerLens attention '{name}' uses {why}; not supported")


def lens_heads(t):
    """(batch, pos, heads, d_head) -> (batch, heads, pos, d_head), detached."""
    return t.detach().transpose(-3, -2)


def lens_mask(mod, scores, q, k, scale, causal):
    """The mask the block applied, from its scores at hook_attn_scores (batch, heads, L, S): with an ALiBi or
    relative-position bias, the additive bias scores - q k^T * scale (-inf where masked); otherwise bool (True =
    attend: the entries not -inf, as its causal mask, local window and padding set them), reduced to one head
    and one batch row where all agree, None where every key is attended, and the shared top-left causal mask
    object `causal(L, S)` where it is exactly that and cfg.attention_dir is 'causal'."""
    scores = scores.detach()
    if mod.cfg.positional_embedding_type in ("alibi", "relative_positional_bias"):
        with torch.no_grad():
            return scores - (q.to(scores.dtype) @ k.to(scores.dtype).transpose(-2, -1)) * scale
    attend = ~torch.isneginf(scores)
    if bool(attend.all()):
        return None
    if bool((attend == attend[:, :1]).all()):
        attend = attend[:, :1]
    if bool((attend == attend[:1]).all()):
        attend = attend[:1]
        L, S = attend.shape[-2:]
        if mod.cfg.attention_dir == "causal" and L == S:
            tril = causal(L, S, attend.device)
            if torch.equal(attend[0, 0], tril):
                return tril
    return attend


def lens_scale(mod):
    scale = mod.attn_scale
    scale = float(scale.item() if isinstance(scale, torch.Tensor) else scale)
    return 1.0 / scale if scale else math.inf
