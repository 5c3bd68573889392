"""The routing mechanisms' generated kernels against torch.autograd, their mutants rejected, their speed.

Every built-in mechanism has generated kernels (numeric/generated/mechanisms.py, emitted by
`python -m derive.codegen --write` from its logits, weight, content and proved closed forms; derive.kernels.kernel_shape):
the logits, the forward (w, o) and the backward (dS by the routing form, the gradient of each input by the chain rule
through the logits and the content or by responsibility-weighted content; once from the inputs and u, once reusing the
forward's w and o). Attention's shape takes q, k, v (dQ, dK, dV); the options shape takes a mechanism's own inputs (a
gate's or a gated recurrence's logits A and contents H: dH, dS = dL/dA; a router's tokens X, router WR and experts WE: dX,
dWR, dWE, dS = dL/dr). They are compared with torch.autograd through the mechanism's own plain-torch `reference`
(derive/mechanisms/<name>.py: the weights; `reference_content` the options' content, else v; o = sum_j w_ij c_ij,
loss <u, o>), per dtype, masked (attention: causal; a router: a 0/1 selection of experts) and unmasked; a mechanism whose
weights read no mask (the cells) has the unmasked variant only (its masked kernels would be the same functions):

- float64 is the verification tier, float32 is compared with a float64 reference computed from the same rounded
  inputs; tolerances are relative to the largest reference entry, per dtype (numeric.agreement.TOLERANCE).
- dL/ds is autograd's through the reference at inputs whose logits are the given ones: for attention's shape
  (`INVERSIONS`) q = s, k = I for a bilinear score, k = log I for a log-kernel one; for the options shape the logit
  leaf itself (`reference_logits`, else `reference`, reads t[logit_leaf]). Accepted only where it reproduces the
  reference's weights at the real inputs to float64 rounding, and differentiated by s.
- Each routing mutant (a wrong closed form of dS, Mechanism.mutants) is emitted too and must differ from
  autograd's dS beyond the float64 tolerance (in one of its variants).
- The closed forms the kernels compute by (derive.kernels.mechanism_identities: the routing form, content, the
  chain rule through the logits and content, attention's fused baseline) are proved on the general path
  (`forms-proved`), and at logits in the hundreds every output stays finite (`large-scores`: e^s overflows float32).

    python -m numeric.mechanisms [--quick] [--profile quick|default|gpu] [--device cpu|cuda] [--json FILE]

runs the checks and the benchmark (each mechanism's generated forward + backward against autograd on its
reference, float32, threads pinned to 1: attention's shape at n = BENCH_SIZES, the options shape, linear in n, at
n = OPTIONS_BENCH_SIZES tokens with d = 64 and E = BENCH_EXPERTS experts) and prints them.
"""
from __future__ import annotations

import inspect
import json
import math
import sys
import time
import types

import torch

from numeric import bench
from numeric.agreement import TOLERANCE, rel_error
from numeric.reference import causal_mask

DTYPES = (torch.float64, torch.float32)
VARIANTS = ("masked", "unmasked")  # masked: the causal mask (attention), a selection of options (a router)
# (batch dims, n, d_k, d_v, E) of the agreement draws: batch and head dims, d_k != d_v; for the options shape d_k is a
# router's token width d_x and E the size of a mechanism's own free dim (experts; a gate's options are fixed at 2).
SHAPES = (((2,), 9, 5, 4, 3), ((2, 3), 6, 3, 7, 5))
FIELDS = ("alpha", "o", "dS", "dQ", "dK", "dV")  # attention's shape; any shape's: fields(module, name)
LARGE_MAGNITUDE = 12.0  # the logits' inputs scaled so that |s| reaches the hundreds: e^s overflows float32 there
# The benchmark: sizes and repeats per profile (numeric.bench's batch, d, warm-ups and paired timing).
BENCH_SIZES = {"default": (256, 1024), "quick": (64, 128), "gpu": (1024, 2048)}
BENCH_REPEATS = {"default": {256: 20, 1024: 5}, "quick": {64: 7, 128: 5}, "gpu": {1024: 30, 2048: 20}}
# The options shape is linear in n (a gate's two options, a router's E experts per token): timed at long sequences.
OPTIONS_BENCH_SIZES = {"default": (4096, 16384), "quick": (1024, 2048), "gpu": (16384, 65536)}
OPTIONS_BENCH_REPEATS = {"default": {4096: 20, 16384: 5}, "quick": {1024: 5, 2048: 3},
                         "gpu": {16384: 30, 65536: 20}}
BENCH_EXPERTS = 8  # E of a router in the benchmark
BENCH_WIDTH = 64  # d (d_k = d_v; a router's d_x = d_v)


# -- the generated module -----------------------------------------------------------------------------------------
def generated_module():
    """The committed numeric/generated/mechanisms.py, or a fresh emission when a mechanism is registered that it
    does not cover (a mechanism registered at run time gets kernels without any edit of the code generator)."""
    from derive import mechanisms as registry
    from numeric.generated import mechanisms as committed

    registry.builtin()
    covered = set(committed.MECHANISMS) | set(committed.UNEMITTED)
    if all(name in covered for name in registry.REGISTRY):
        return committed
    return emit_module(list(registry.BUILTIN) + [n for n in registry.REGISTRY if n not in registry.BUILTIN])


def emit_module(names):
    """The mechanisms' kernels for `names`, emitted and loaded now (derive.codegen.emit_mechanisms)."""
    from derive.codegen import emit_mechanisms

    module = types.ModuleType("numeric.generated.fresh_mechanisms")
    exec(compile(emit_mechanisms(names), "<fresh emission of the mechanisms>", "exec"), module.__dict__)
    return module


def kernel(module, name, kind, variant):
    return getattr(module, module.MECHANISMS[name][kind][variant])


def returns(module, name, kind):
    """The names of what a kernel returns, in order (the module's RETURNS; attention's for a module without it)."""
    default = {"scores": ("s",), "forward": ("alpha", "o"), "backward": ("alpha", "dS", "dQ", "dK", "dV"),
               "backward_from_forward": ("dS", "dQ", "dK", "dV")}
    return tuple(getattr(module, "RETURNS", {}).get(name, default)[kind])


def variants(module, name):
    """The variants the mechanism's kernels come in (VARIANTS' order): unmasked only where its weights read no mask."""
    return tuple(v for v in VARIANTS if v in module.MECHANISMS[name]["forward"])


def fields(module, name):
    """Every quantity the kernels of `name` return that autograd gives a reference for (the logits s have none)."""
    return tuple(f for f in ("alpha", "o", *returns(module, name, "backward")[1:]) if f != "s")


def call(fn, env):
    """fn called with the entries of `env` its parameters name (kernels take only what they read)."""
    return fn(**{p: env[p] for p in inspect.signature(fn).parameters})


_SHAPES = {}  # id(mechanism) -> (mechanism, its KernelShape): read once, never inside a timed run


def shape_of(mechanism):
    """derive.kernels.kernel_shape's KernelShape of the mechanism (ValueError with the reason when it has none)."""
    from derive.kernels import kernel_shape

    held = _SHAPES.get(id(mechanism))
    if held is None or held[0] is not mechanism:
        shape, why = kernel_shape(mechanism)
        if shape is None:
            raise ValueError(f"mechanism {mechanism.name} has no kernels: {why}")
        held = _SHAPES[id(mechanism)] = (mechanism, shape)
    return held[1]


def is_options(mechanism):
    return getattr(mechanism, "axis", "n") != "n"


# -- inputs and the reference ---------------------------------------------------------------------------------------
def draw(mechanism, batch, n, d_k, d_v, masked, seed, dtype=torch.float64, device="cpu", experts=3):
    """The kernels' inputs, drawn in float64 on a CPU generator, then rounded to `dtype` and moved, so every dtype and
    device sees the same numbers. Attention's shape: q, k, v, u, the mechanism's own leaves (standard normal, x0.5), a
    0/1 causal mask (None unmasked). The options shape: u, then each input of its kernels (derive.kernels.KernelShape:
    the model's leaves standard normal, the mechanism's own x0.5), the mechanism's own free dims of size `experts`
    (a gate's fixed 2 options as they are), d_x = d_k, and a 0/1 mask over (position, option) with each entry 1 with
    probability 1/2 (any selection: rows selecting nothing included). Both: the scale 1/sqrt(d_k) and beta = -log n
    (arXiv 2409.04431's bias)."""
    g = torch.Generator().manual_seed(seed)
    if is_options(mechanism):
        return _draw_options(mechanism, batch, n, d_k, d_v, masked, g, dtype, device, experts)
    sizes = {"n": n, "dk": d_k, "dv": d_v}
    env = {name: torch.randn(batch + (n, d), generator=g, dtype=torch.float64)
           for name, d in (("q", d_k), ("k", d_k), ("v", d_v), ("u", d_v))}
    for leaf, dims in getattr(mechanism, "leaves", {}).items():
        if any(d not in sizes for d in dims):
            raise ValueError(f"mechanism {mechanism.name}: leaf {leaf} ranges over {dims}; only n, dk, dv are drawn")
        env[leaf_arg(leaf)] = 0.5 * torch.randn(batch + tuple(sizes[d] for d in dims), generator=g, dtype=torch.float64)
    env = {k: t.to(dtype=dtype, device=device) for k, t in env.items()}
    env["mask"] = causal_mask(n, device).to(dtype) if masked else None
    env["scale"], env["beta"] = d_k ** -0.5, -math.log(n)
    return env


def _draw_options(mechanism, batch, n, d_k, d_v, masked, g, dtype, device, experts):
    from derive.model import LEAVES

    shape = shape_of(mechanism)
    sizes = {"n": n, "dk": d_k, "dv": d_v, "dx": d_k, **{d: v or experts for d, v in mechanism.dims.items()}}
    leaves = {**LEAVES, **mechanism.leaves}
    env = {"u": torch.randn(batch + (n, d_v), generator=g, dtype=torch.float64)}
    for leaf in shape.inputs:
        scale = 1.0 if leaf in LEAVES else 0.5
        env[leaf_arg(leaf)] = scale * torch.randn(batch + tuple(sizes[d] for d in leaves[leaf]), generator=g,
                                                  dtype=torch.float64)
    selection = (torch.rand(batch + (n, sizes[shape.axis]), generator=g, dtype=torch.float64) < 0.5).double()
    env = {k: t.to(dtype=dtype, device=device) for k, t in env.items()}
    env["mask"] = selection.to(dtype=dtype, device=device) if masked else None
    env["scale"], env["beta"] = d_k ** -0.5, -math.log(n)
    return env


def leaf_arg(leaf):
    """A leaf's argument name in generated code (derive.codegen.arg_name: X -> x, WR -> w_r, ell -> ell)."""
    from derive.codegen import arg_name

    return arg_name(leaf)


def as_float64(env):
    return {k: (t.double() if isinstance(t, torch.Tensor) else t) for k, t in env.items()}


def reference_inputs(mechanism, env):
    """The dict t the mechanism's plain-torch functions read (the model's leaf names) from the kernels' inputs `env`:
    q and k, the mechanism's own leaves and its kernels' inputs where `env` has them, "mask", "c" and "beta"."""
    names = ["q", "k", *getattr(mechanism, "leaves", {})]
    if is_options(mechanism):
        names += [x for x in shape_of(mechanism).inputs if x not in names]
    t = {leaf: env[leaf_arg(leaf)] for leaf in names if leaf_arg(leaf) in env}
    return {**t, "mask": env["mask"], "c": env["scale"], "beta": env["beta"]}


def reference_weights(mechanism, env):
    """The mechanism's plain-torch weights at the inputs in `env` (reference(t) with the model's leaf names, or the
    older reference(q, k, mask, c, beta))."""
    params = inspect.signature(mechanism.reference).parameters
    if len(params) == 1:
        return mechanism.reference(reference_inputs(mechanism, env))
    own = {leaf: env[leaf_arg(leaf)] for leaf in getattr(mechanism, "leaves", {})}
    return mechanism.reference(env["q"], env["k"], env["mask"], env["scale"], env["beta"],
                               **{k: v for k, v in own.items() if k in params})


def mix(mechanism, w, env):
    """o = sum_j w_ij c_ij: the options' content (`reference_content`) or the values v (o = w v)."""
    if getattr(mechanism, "reference_content", None) is None:
        return w @ env["v"]
    return (w.unsqueeze(-1) * mechanism.reference_content(reference_inputs(mechanism, env))).sum(-2)


def autograd(mechanism, env):
    """w, o and the gradient of every input of the mechanism's kernels by torch.autograd through the reference,
    o = sum_j w_ij c_ij, L = <u, o>: dQ, dK, dV for attention's shape, d<leaf> for each of the options shape's."""
    grads = {"q": "dQ", "k": "dK", "v": "dV"}
    if is_options(mechanism):
        grads = {g.leaf: g.name for g in shape_of(mechanism).grads}
    leaves = {leaf_arg(x): env[leaf_arg(x)].detach().clone().requires_grad_(True) for x in grads}
    at = {**env, **leaves}
    w = reference_weights(mechanism, at)
    o = mix(mechanism, w, at)
    (o * env["u"]).sum().backward()
    return {"alpha": w.detach(), "o": o.detach(), **{name: leaves[leaf_arg(x)].grad for x, name in grads.items()}}


def _bilinear(env, s):
    return {**env, "q": s, "k": torch.eye(s.shape[-1], dtype=s.dtype, device=s.device), "scale": 1.0}


def _log_kernel(env, s):
    return {**env, "q": s, "k": torch.eye(s.shape[-1], dtype=s.dtype, device=s.device).log(), "scale": 1.0}


# Inputs at which a score equals given logits s: c q.k with q = s, k = I, c = 1; log(e^q . e^k) with k = log I.
INVERSIONS = {"bilinear": _bilinear, "log-kernel": _log_kernel}


def _at_logits(mechanism, env, s):
    """The weights at free logits s: the options shape's logit leaf t[logit_leaf] = s."""
    t = {**reference_inputs(mechanism, env), mechanism.logit_leaf: s}
    return (mechanism.reference_logits or mechanism.reference)(t)


def logit_gradient(mechanism, env, s, weights):
    """(dL/ds by autograd through the reference, the inversion used) at logits s (float64), or (None, why): an
    inversion is used only where the reference there reproduces `weights`, its value at the real inputs."""
    if is_options(mechanism):
        with torch.no_grad():
            w = _at_logits(mechanism, env, s)
        if w.shape != weights.shape or not bool(torch.isfinite(w).all()) or rel_error(w, weights) > TOLERANCE[torch.float64]:
            return None, f"the reference at its logit leaf {mechanism.logit_leaf} does not reproduce its weights"
        leaf = s.detach().clone().requires_grad_(True)
        (mix(mechanism, _at_logits(mechanism, env, leaf), env) * env["u"]).sum().backward()
        return leaf.grad, "logit-leaf"
    for name, invert in INVERSIONS.items():
        with torch.no_grad():
            w = reference_weights(mechanism, invert(env, s))
        if w.shape != weights.shape or not bool(torch.isfinite(w).all()) or rel_error(w, weights) > TOLERANCE[torch.float64]:
            continue
        leaf = s.detach().clone().requires_grad_(True)
        o = reference_weights(mechanism, invert(env, leaf)) @ env["v"]
        (o * env["u"]).sum().backward()
        return leaf.grad, name
    return None, f"no inversion of the score ({', '.join(INVERSIONS)}) reproduces the reference's weights"


# -- agreement ------------------------------------------------------------------------------------------------------
def ours(module, name, variant, env):
    """Every generated output: the forward, the backward from the inputs and u, and the backward from the forward's
    w and o."""
    s = call(kernel(module, name, "scores", variant), env)
    alpha, o = call(kernel(module, name, "forward", variant), env)
    back = dict(zip(returns(module, name, "backward"), call(kernel(module, name, "backward", variant), env)))
    reuse = dict(zip(returns(module, name, "backward_from_forward"),
                     call(kernel(module, name, "backward_from_forward", variant), {**env, "alpha": alpha, "o": o})))
    out = {"s": s, "alpha": alpha, "o": o}
    out.update({f"backward/{k}": t for k, t in back.items()})
    out.update({f"from_forward/{k}": t for k, t in reuse.items()})
    return out


def _scaled(mechanism, env, magnitude):
    """env with the inputs the logits read scaled so that the logits (bilinear in two of them, or one leaf) grow by
    magnitude^2 (attention: q and k, each x magnitude)."""
    if magnitude == 1.0:
        return env
    inputs = shape_of(mechanism).logit_inputs
    factor = magnitude ** (2 / len(inputs))
    return {**env, **{leaf_arg(x): env[leaf_arg(x)] * factor for x in inputs}}


def compare(module, mechanism, variant, dtype, shape, seed, device="cpu", magnitude=1.0):
    """{field: relative error} of every generated output against autograd through the reference (float64, from the
    same rounded inputs), whether all outputs are finite, and the inversion that gave dL/ds (or why none)."""
    batch, n, d_k, d_v, experts = shape
    env = draw(mechanism, batch, n, d_k, d_v, variant == "masked", seed, dtype, device, experts)
    env = _scaled(mechanism, env, magnitude)
    got = ours(module, mechanism.name, variant, env)
    ref64 = as_float64(env)
    ref = autograd(mechanism, ref64)
    s64 = call(kernel(module, mechanism.name, "scores", variant), ref64)
    ref["dS"], inversion = logit_gradient(mechanism, ref64, s64, ref["alpha"])
    errors = {}
    for field, t in got.items():
        base = field.split("/")[-1]
        if base in ref and ref[base] is not None:
            errors[field] = rel_error(t, ref[base])
    finite = all(bool(torch.isfinite(t).all()) for t in got.values())
    return errors, finite, inversion, float(s64.abs().max())


def agreement(module, mechanism, variant, dtype, seed, device="cpu"):
    """The worst error over SHAPES, per field; (worst, errors, finite, inversion)."""
    errors, finite, inversion = {}, True, ""
    for k, shape in enumerate(SHAPES):
        errs, fin, inversion, _ = compare(module, mechanism, variant, dtype, shape, seed + k, device)
        finite = finite and fin
        for f, e in errs.items():
            errors[f] = max(errors.get(f, 0.0), e)
    return max(errors.values()), errors, finite, inversion


def large_scores(module, mechanism, dtype, seed, device="cpu"):
    """Logits in the hundreds (their inputs scaled by LARGE_MAGNITUDE), masked where the mechanism has a masked
    variant: (every output finite, worst error, max |s|)."""
    variant = variants(module, mechanism.name)[0]
    errors, finite, _, top = compare(module, mechanism, variant, dtype, SHAPES[0], seed, device, LARGE_MAGNITUDE)
    return finite, max(errors.values()), top


def mutant_errors(module, mutant_id, seed, device="cpu"):
    """{variant: relative error of the mutant's dS against autograd's} (float64), or {variant: None} without an
    autograd dS."""
    from derive import mechanisms as registry

    entry = module.MUTANTS[mutant_id]
    mechanism = registry.get(entry["mechanism"])
    out = {}
    for variant in (v for v in VARIANTS if v in entry):
        batch, n, d_k, d_v, experts = SHAPES[0]
        env = draw(mechanism, batch, n, d_k, d_v, variant == "masked", seed, torch.float64, device, experts)
        weights = autograd(mechanism, env)["alpha"]
        dS, _ = logit_gradient(mechanism, env, call(kernel(module, mechanism.name, "scores", variant), env), weights)
        wrong = call(getattr(module, entry[variant]), env)
        out[variant] = None if dS is None else rel_error(wrong, dS)
    return out


def forms_proved(name, seed=0):
    """{quantity: {variant: outcome}} of the general path on each closed form the kernels compute by
    (derive.kernels.mechanism_identities: the routing form, content, the chain rule through the logits and content,
    attention's fused baseline), and whether every one is proved, masked and unmasked."""
    from derive.kernels import mechanism_identities
    from derive.prove import run_path

    out = {}
    for quantity, identity in mechanism_identities(name).items():
        out[quantity] = {variant: run_path("general", identity, variant == "masked",
                                           f"mechanism {name} kernel form {quantity}", {"seed": seed}).status
                         for variant in VARIANTS}
    return out, all(s == "proved" for row in out.values() for s in row.values())


# -- speed ----------------------------------------------------------------------------------------------------------
def _runners(module, mechanism):
    name = mechanism.name
    forward = kernel(module, name, "forward", "unmasked")
    backward = kernel(module, name, "backward_from_forward", "unmasked")
    # The gradient of every input, in the inputs' order: dQ, dK, dV; a router's dX, dWR, dWE; a cell's dS (= dL/dA, its
    # logits an input) and dH. Both runners compute all of them.
    inputs, name_of = ("q", "k", "v"), {"q": "dQ", "k": "dK", "v": "dV"}
    if is_options(mechanism):
        shape = shape_of(mechanism)
        inputs, name_of = shape.inputs, {mechanism.logit_leaf: "dS", **{g.leaf: g.name for g in shape.grads}}
    order = [returns(module, name, "backward_from_forward").index(name_of[x]) for x in inputs]
    args = [leaf_arg(x) for x in inputs]

    def run_ours(env):
        alpha, o = call(forward, env)
        out = call(backward, {**env, "alpha": alpha, "o": o})
        return tuple(out[k] for k in order)

    def run_autograd(env):
        leaves = {x: env[x].detach().requires_grad_(True) for x in args}
        at = {**env, **leaves}
        mix(mechanism, reference_weights(mechanism, at), at).backward(env["u"])
        return tuple(leaves[x].grad for x in args)

    return {"ours": run_ours, "autograd": run_autograd}


def benchmark(module, profile="default", device="cpu", threads=1, log=print, names=None):
    """results.json `benchmarks` rows: each mechanism's generated forward + backward (the forward kernel, then the
    backward reusing its w and o) against autograd through its reference, float32, unmasked, threads pinned,
    timed by numeric.bench's interleaved medians. Attention's shape at n = BENCH_SIZES; the options shape (linear in n)
    at n = OPTIONS_BENCH_SIZES tokens, E = BENCH_EXPERTS experts for a router; d = BENCH_WIDTH."""
    if profile not in BENCH_SIZES:
        raise ValueError(f"unknown benchmark profile {profile!r}; choose from {', '.join(BENCH_SIZES)}")
    from derive import mechanisms as registry

    torch.set_num_threads(threads)
    rows = []
    for name in names or module.MECHANISMS:
        mechanism = registry.get(name)
        runners = _runners(module, mechanism)
        options = is_options(mechanism)
        sizes, repeats = (OPTIONS_BENCH_SIZES, OPTIONS_BENCH_REPEATS) if options else (BENCH_SIZES, BENCH_REPEATS)
        for n in sizes[profile]:
            batch, d = bench.BATCH[profile], BENCH_WIDTH
            env = draw(mechanism, (batch,), n, d, d, False, 0, torch.float32, device, BENCH_EXPERTS)
            ref = runners["autograd"](env)
            diff = max(rel_error(a, b) for a, b in zip(runners["ours"](env), ref))
            seconds = bench.time_runs((env,), device, repeats[profile][n], bench.WARMUPS[profile], runners)
            shape = {"batch": batch, "n": n, "d": d, "causal": False}
            if options:
                shape["options"] = {dim: size or BENCH_EXPERTS for dim, size in mechanism.dims.items()}[mechanism.axis]
            row = {"name": f"numeric/mechanisms/{name}/n={n}", "device": str(device), "dtype": "float32",
                   "shape": shape, "ours_s": seconds["ours"],
                   "reference": f"autograd through derive.mechanisms.{name}.reference", "reference_s": seconds["autograd"],
                   "ratio": seconds["ours"] / seconds["autograd"], "max_rel_diff": diff,
                   "repeats": repeats[profile][n], "ours_what": "generated forward + backward_from_forward"}
            rows.append(row)
            log(f"  bench mechanism {name:8} n={n:5}: generated {seconds['ours'] * 1e3:8.2f} ms  autograd "
                f"{seconds['autograd'] * 1e3:8.2f} ms  ratio {row['ratio']:.2f}  max rel diff {diff:.1e}")
    return rows


# -- the command line -----------------------------------------------------------------------------------------------
def run_checks(module, seed=0, device="cpu"):
    """Every check of the numeric stage's `mechanisms` step, in order, as dicts: id, ok, measured, expected, kind
    (numeric, proof or negative-control), detail, note (a short summary for the log) and seconds."""
    from derive import mechanisms as registry

    out = []

    def timed(cid, fn, *args):
        t0 = time.perf_counter()
        try:
            check = fn(*args)
        except Exception as exc:  # a kernel or reference that cannot run on the drawn inputs: a failure, with why
            why = f"{type(exc).__name__}: {exc}"[:300]
            check = {"ok": False, "measured": why, "expected": "runs", "kind": "numeric", "note": why, "detail": cid}
        out.append({"id": cid, "seconds": time.perf_counter() - t0, **check})

    def forms(name, mechanism):
        outcomes, proved = forms_proved(name, seed)
        return {"ok": proved, "measured": outcomes, "expected": "proved (general path, masked and unmasked)",
                "kind": "proof", "note": "proved" if proved else "not proved",
                "detail": f"{mechanism.title}: {', '.join(outcomes)} as the kernels compute them"}

    def agree(mechanism, variant, dtype):
        worst, errors, finite, inversion = agreement(module, mechanism, variant, dtype, seed, device)
        compared = {f.split("/")[-1] for f in errors}
        missing = [f for f in fields(module, mechanism.name) if f not in compared]
        return {"ok": worst <= TOLERANCE[dtype] and finite and not missing,
                "measured": {"max_rel_error": worst, "errors": errors, "finite": finite, "dS_reference": inversion},
                "expected": {"tolerance": TOLERANCE[dtype]}, "kind": "numeric",
                "note": f"max rel error {worst:.2e} (tolerance {TOLERANCE[dtype]:g})"
                        + (f"; no reference for {', '.join(missing)}: {inversion}" if missing else ""),
                "detail": f"{mechanism.title}: generated {', '.join(fields(module, mechanism.name))} vs autograd "
                          "through the reference"}

    def large(mechanism, dtype):
        finite, err, top = large_scores(module, mechanism, dtype, seed + 7, device)
        return {"ok": finite, "measured": {"finite": finite, "max_rel_error": err, "max_abs_score": top},
                "expected": {"finite": True}, "kind": "numeric", "note": f"finite {finite}, |s| up to {top:.0f}",
                "detail": f"{mechanism.title}: every output finite at logits in the hundreds (agreement not asserted)"}

    def mutant(mutant_id, entry):
        errors = mutant_errors(module, mutant_id, seed, device)
        tol = TOLERANCE[torch.float64]
        return {"ok": any(e is not None and e > tol for e in errors.values()), "measured": {"max_rel_error": errors},
                "expected": {"rejected_if_above": tol, "in": "one of its variants (masked, unmasked)"},
                "kind": "negative-control", "note": ", ".join(
                    f"{v} {'n/a' if e is None else f'{e:.1e}'}" for v, e in errors.items()),
                "detail": f"{entry['mechanism']}: a wrong routing form's dS against autograd's"}

    for name in module.MECHANISMS:
        mechanism = registry.get(name)
        timed(f"numeric/mechanisms/{name}/forms-proved", forms, name, mechanism)
        for dtype in DTYPES:
            label = str(dtype).removeprefix("torch.")
            for variant in variants(module, name):
                timed(f"numeric/mechanisms/{name}/{label}/{variant}", agree, mechanism, variant, dtype)
            timed(f"numeric/mechanisms/{name}/{label}/large-scores", large, mechanism, dtype)
    for mutant_id, entry in module.MUTANTS.items():
        timed(f"numeric/mechanisms/{mutant_id}", mutant, mutant_id, entry)
    return out


def main(argv=None, prog="python -m numeric.mechanisms"):
    from derive import options
    from numeric import device as devices

    p = options.parser(prog, __doc__, parents=[
        options.profile(tuple(BENCH_SIZES), help="benchmark sizes"),
        options.device(default="cpu", help="torch device (auto: CUDA when torch sees one)"), options.seed(),
        options.json_file("write the checks and benchmark rows to this file")])
    p.add_argument("--no-bench", action="store_true", help="the checks only")
    args = p.parse_args(argv)
    try:
        args.device, _ = devices.resolve(args.device)
    except (RuntimeError, ValueError) as exc:
        p.error(f"--device: {exc}")
    torch.set_num_threads(1)
    module = generated_module()
    checks = []
    for c in run_checks(module, args.seed, args.device):
        checks.append({"id": c["id"], "status": "pass" if c["ok"] else "fail", "measured": c["measured"],
                       "expected": c["expected"]})
        print(f"  {'PASS' if c['ok'] else 'FAIL'} {c['id']:56} {c['seconds']:7.3f}s  {c['note']}")
    rows = [] if args.no_bench else benchmark(module, args.profile, args.device)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"checks": checks, "benchmarks": rows}, fh, indent=1)
    return 0 if all(c["status"] == "pass" for c in checks) else 1


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    print(f"  {time.perf_counter() - t0:.1f} s")
    sys.exit(code)
