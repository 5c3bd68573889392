"""The sticky-chain experiment (E1–E4): every seed and arm trained as one batched tensor program.

Parameters are stacked with leading dims (arms A, seeds S); the data (S, T, d) broadcast over arms.
Gradients come from the generated kernels (numeric/generated: C1–C5, C8), computed block-causally:
query block b attends to the key prefix up to its own end, so the upper triangle is never formed
(about (nb + 1) / (2 nb) of the dense work). `reference_run` is the plain way: one seed and arm at a
time, dense masked attention, torch.autograd; the exactness check compares the two step by step.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from derive.results import atomic_write
from numeric.device import synchronize
from numeric.experiments import chain, fused
from numeric.experiments.config import positive, positive_ints
from numeric.generated import attention as gen
from numeric.reference import causal_mask

# Arm -> learning rate per parameter (W_Q, W_K, W_V, W_O) and whether the W_V step is the
# responsibility-normalised M-step (C10: dV_j / N_j, pulled back to W_V by the chain rule; ours).
ARMS = {
    "sgd": ((0.01, 0.01, 0.01, 0.01), False),
    "em_like": ((0.01, 0.01, 0.1, 0.01), False),
    "em_mstep": ((0.01, 0.01, 0.1, 0.01), True),
}
PAPER_SEEDS = (42, 2024, 1337, 7777, 9999)
# "ours": per seed, independent float64 streams for the chain, the noise and the weights
# (chain.sample, seed_params). "authors": the draws of the authors' public script, seed for seed
# (chain.authors_sequence, chain.authors_weights): float32, one CPU generator seeded with the seed for
# the data and re-seeded with it for the weights, mu from "torch-float32" with mu_seed.
STREAMS = ("ours", "authors")


@dataclass(frozen=True)
class StickyConfig:
    """The authors' settings by default; the profiles (derive.profile) shrink sizes, not code paths."""

    length: int = 2000
    steps: int = 1000
    seeds: tuple = PAPER_SEEDS
    arms: tuple = ("sgd", "em_like", "em_mstep")
    symbols: int = 8
    d_in: int = 20
    d_k: int = 10
    d_v: int = 15
    init_std: float = 0.1
    self_prob: float = 0.3
    off_mass: float = 0.7
    mu_seed: int = 0
    mu_rng: str = "torch-float64"  # how mu is drawn from mu_seed (chain.MU_RNGS)
    stream: str = "ours"  # how each seed's data and initial weights are drawn (STREAMS)
    heldout_seed_offset: int = 1_000_003
    blocks: int = 16
    checkpoints: int = 11
    tracked_rows: int = 32
    dtype: str = "float32"
    value_lrs: tuple = ()  # per-arm W_V learning rate overriding the arm's (the LR-ratio sweep)
    # how a step's gradients are computed (numeric.experiments.fused): "auto" is the fused CPU kernel where it
    # runs (numba installed, a CPU device) and the generated kernels elsewhere; "fused" or "generated" insist
    kernel: str = "auto"

    def validate(self):
        positive_ints(self, "length", "steps", "symbols", "d_in", "d_k", "d_v", "blocks", "checkpoints", "tracked_rows")
        if self.length < 3:
            raise ValueError(f"StickyConfig.length must be >= 3, got {self.length}")
        for name in ("self_prob", "off_mass"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"StickyConfig.{name} must lie in [0, 1], got {getattr(self, name)}")
        positive(self, "init_std")
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown or not self.arms:
            raise ValueError(f"StickyConfig.arms: unknown {unknown}; choose from {sorted(ARMS)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"StickyConfig.seeds must be distinct and non-empty, got {self.seeds}")
        if self.value_lrs and (len(self.value_lrs) != len(self.arms) or min(self.value_lrs) <= 0):
            raise ValueError(f"StickyConfig.value_lrs must give one positive LR per arm, got {self.value_lrs}")
        if not isinstance(self.mu_seed, int) or self.mu_seed < 0:
            raise ValueError(f"StickyConfig.mu_seed must be a non-negative integer, got {self.mu_seed!r}")
        if self.mu_rng not in chain.MU_RNGS:
            raise ValueError(f"StickyConfig.mu_rng must be one of {chain.MU_RNGS}, got {self.mu_rng!r}")
        if self.stream not in STREAMS:
            raise ValueError(f"StickyConfig.stream must be one of {STREAMS}, got {self.stream!r}")
        if self.stream == "authors" and self.mu_rng != "torch-float32":
            raise ValueError(f"StickyConfig.stream='authors' draws mu as the authors do (mu_rng='torch-float32'), "
                             f"got mu_rng={self.mu_rng!r}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"StickyConfig.dtype must be float32 or float64, got {self.dtype}")
        if self.kernel not in fused.KERNELS:
            raise ValueError(f"StickyConfig.kernel must be one of {fused.KERNELS}, got {self.kernel!r}")
        return self

    @property
    def torch_dtype(self):
        return getattr(torch, self.dtype)


@dataclass
class Data:
    x: torch.Tensor  # (1, S, T, d_in)
    y: torch.Tensor  # (S, T) targets
    onehot: torch.Tensor  # (1, S, T, m)
    P: torch.Tensor
    mu: torch.Tensor


def make_data(cfg, device, seed_offset=0, seeds=None):
    """The sequences of `seeds` (default: all of cfg.seeds); each seed's sequence does not depend on
    which other seeds are sampled with it. Every draw is made on the CPU and then moved to `device`,
    so a run on another device trains on the same data."""
    mu = chain.symbol_means(cfg.symbols, cfg.d_in, cfg.mu_seed, cfg.mu_rng)
    seeds = [s + seed_offset for s in (seeds or cfg.seeds)]
    if cfg.stream == "authors":
        P32 = chain.authors_transition_matrix(cfg.symbols, cfg.self_prob, cfg.off_mass)
        P = P32.double()
        pairs = [chain.authors_sequence(P32, mu.float(), cfg.length, s) for s in seeds]
        x, y = torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    else:
        P = chain.transition_matrix(cfg.symbols, cfg.self_prob, cfg.off_mass)
        x, y = chain.sample(P, mu, cfg.length, seeds)
    dt = cfg.torch_dtype
    onehot = torch.nn.functional.one_hot(y, cfg.symbols).to(dt)
    return Data(x[None].to(device, dt), y.to(device), onehot[None].to(device), P, mu)


def seed_params(cfg, seed):
    """W_Q, W_K, W_V, W_O ~ N(0, init_std^2) for one seed, returned in float64 (for the authors'
    stream the float32 draws, exactly)."""
    shapes = ((cfg.d_in, cfg.d_k), (cfg.d_in, cfg.d_k), (cfg.d_in, cfg.d_v), (cfg.d_v, cfg.symbols))
    if cfg.stream == "authors":
        return [w.double() for w in chain.authors_weights(shapes, cfg.init_std, seed)]
    g = torch.Generator().manual_seed(int(seed))
    return [torch.randn(sh, generator=g, dtype=torch.float64) * cfg.init_std for sh in shapes]


def init_params(cfg, device):
    """Stacked (A, S, ., .) parameters; every arm of a seed starts from the same point."""
    per_seed = [seed_params(cfg, s) for s in cfg.seeds]
    A = len(cfg.arms)
    return [torch.stack([w[p] for w in per_seed]).expand(A, *([-1] * 3)).clone().to(device, cfg.torch_dtype)
            for p in range(4)]  # each (A, S, ., .)


# The inner widths d_k and d_v are padded with zero columns to a multiple of LANE while training (`padded`): the
# step's products alpha @ V and dS @ K then have 16 columns, which a CPU's matrix kernels run several times faster
# than 10 or 15 (their vector lanes are full). The padding is exact: the padded columns of Q, K and V and the
# padded row of W_O are zero, so the scores, outputs and loss are those of the unpadded model, and every gradient
# on them is zero (dQ = dS K, dK = dS^T Q, dV = alpha^T u with u = (p - y) W_O^T / n, dW_O = o^T (p - y) / n), so
# they stay zero. A run's record holds the unpadded parameters.
LANE = 16


def lane_width(width):
    """`width` rounded up to a multiple of LANE (the width a padded product runs at)."""
    return -(-width // LANE) * LANE


def padded(params, cfg):
    """W_Q, W_K, W_V (..., d_in, d) with zero columns up to a multiple of LANE, W_O (..., d_v, m) with zero rows."""
    out = []
    for p, (dim, width) in zip(params, ((-1, cfg.d_k), (-1, cfg.d_k), (-1, cfg.d_v), (-2, cfg.d_v))):
        pad = lane_width(width) - width
        if not pad:
            out.append(p)
            continue
        shape = list(p.shape)
        shape[dim] = pad
        out.append(torch.cat([p, p.new_zeros(shape)], dim))
    return out


def unpadded(params, cfg):
    """The parameters of `padded` without their zero columns and rows."""
    return [params[0][..., :cfg.d_k], params[1][..., :cfg.d_k], params[2][..., :cfg.d_v], params[3][..., :cfg.d_v, :]]


def learning_rates(cfg, device):
    lrs = torch.tensor([ARMS[a][0] for a in cfg.arms], dtype=cfg.torch_dtype, device=device)  # (A, 4)
    for a, lr in enumerate(cfg.value_lrs):
        lrs[a, 2] = lr
    flags = [ARMS[a][1] for a in cfg.arms]
    # None when no arm takes the M-step: decided here, once per run, not by reading the device every step
    mstep = torch.tensor(flags, device=device) if any(flags) else None
    return [lrs[:, p].view(-1, 1, 1, 1) for p in range(4)], mstep


def _blocks(T, nb, device="cpu"):
    """Query blocks (lo, hi, upper): block lo:hi attends to the key prefix 0:hi, and only its diagonal
    part lo:hi needs a mask (`upper`, True where j > i). Built once per run."""
    edges = [round(T * b / nb) for b in range(nb + 1)]
    return [(lo, hi, torch.ones(hi - lo, hi - lo, dtype=torch.bool, device=device).triu(1))
            for lo, hi in zip(edges[:-1], edges[1:]) if hi > lo]


def _block_attention(q, k, v, lo, hi, upper, scale, out=None):
    """alpha (..., hi - lo, hi) and o for query block lo:hi over keys 0:hi, the causal mask applied to
    the diagonal part only (the prefix 0:lo is visible to every query of the block). With `out`, a
    flat buffer, the scores and then alpha are written into it in place (no n x n allocation)."""
    qb, kt = q[..., lo:hi, :], (scale * k[..., :hi, :]).mT
    if out is None:
        s = qb @ kt
    else:
        shape = torch.broadcast_shapes(qb.shape[:-1], kt.shape[:-2] + (1,)) + (hi,)
        s = torch.matmul(qb, kt, out=out[:math.prod(shape)].view(shape))
    s[..., lo:hi].masked_fill_(upper, float("-inf"))  # every row keeps its diagonal: no empty rows
    alpha = torch.softmax(s, -1, out=s)
    return alpha, alpha @ v[..., :hi, :]


def workspace(cfg, blocks, device="cpu"):
    """The buffer `gradients` writes each block's alpha into (allocated once per run: a fresh large
    buffer per block costs page faults: ~15% of a step on this 2-core CPU)."""
    rows = max(hi - lo for lo, hi, _ in blocks)
    return torch.empty(len(cfg.arms) * len(cfg.seeds) * rows * blocks[-1][1], dtype=cfg.torch_dtype, device=device)


def forward(params, data, scale, blocks):
    """Block-causal attention forward: q, k, v and o (A, S, T, .)."""
    q, k, v = (data.x @ w for w in params[:3])  # (A, S, T, d)
    return q, k, v, torch.cat([_block_attention(q, k, v, lo, hi, upper, scale)[1] for lo, hi, upper in blocks], -2)


def gradients(params, data, scale, blocks, mstep, work=None, mark=None):
    """Loss (A, S) and dL/dW for every run, from the generated closed forms (C5, C1–C4, C2, C8).

    The readout is per position (u_i depends on o_i only), so each query block runs forward, readout
    and backward in turn while its alpha tile is still in cache; the generated readout averages over
    the rows it is given, so its per-block outputs are rescaled from 1/(hi - lo) to 1/T.
    `mark(component)`, when given, is called after each component's work (numeric.experiments.roofline's
    profile: the time since the previous mark is that component's)."""
    mark = mark or _no_mark
    x = data.x
    q, k, v = (x @ w for w in params[:3])  # (A, S, T, d)
    mark("projections")
    T = x.shape[-2]
    # dK, dV accumulate over blocks transposed, (.., d, T): the generated kernels return them as
    # transposed views of contiguous products, so each block adds contiguous rows
    dQ, dKT, dVT = torch.empty_like(q), torch.zeros_like(k.mT), torch.zeros_like(v.mT)
    loss, dW_O = 0.0, 0.0
    any_mstep = mstep is not None  # a per-run constant (learning_rates): no host sync in the step
    resp = torch.zeros(v.shape[:-1], dtype=v.dtype, device=v.device) if any_mstep else None  # N_j = sum_i alpha_ij
    mark("allocation")
    for lo, hi, upper in blocks:
        alpha, o = _block_attention(q, k, v, lo, hi, upper, scale, work)
        mark("attention forward")
        _, u, dw_o, block_loss = gen.readout_backward(o, params[3], data.onehot[..., lo:hi, :])
        share = (hi - lo) / T
        u, loss, dW_O = u.mul_(share), loss + share * block_loss, dW_O + share * dw_o
        mark("readout")
        dq, dk, dv = gen.attention_grads_from_forward(q[..., lo:hi, :], k[..., :hi, :], v[..., :hi, :], alpha, o, u,
                                                      scale)
        dQ[..., lo:hi, :] = dq
        dKT[..., :hi] += dk.mT
        dVT[..., :hi] += dv.mT
        if any_mstep:
            resp[..., :hi] += alpha.sum(-2)
        mark("attention backward")
    dK, dV = dKT.mT, dVT.mT
    if any_mstep:  # C10: responsibility-normalised value step for the M-step arm
        norm = torch.where(mstep.view(-1, 1, 1), resp.clamp_min(1e-12), torch.ones_like(resp))
        dV = dV / norm[..., None]
    dW_Q, dW_K, dW_V = gen.params_backward(x, dQ, dK, dV)
    mark("parameter gradients")
    return loss, [dW_Q, dW_K, dW_V, dW_O]


def _no_mark(component):
    pass


def descend(params, data, scale, blocks, mstep, lrs, work=None, first=0, mark=None, step=None):
    """One training step of every run in place: `gradients` (or `step`, a fused.Step, when given: the same closed
    forms fused per run, on unpadded parameters), then each parameter from index `first` on (2: W_Q and W_K frozen)
    moved by its arm's rate. Returns the loss (A, S) before the step. `mark` as in `gradients`, and
    mark("optimizer") after the update."""
    out = step(params, data, scale, mstep, mark) if step is not None else None
    if out is None:  # no fused step, or a non-finite input it leaves to the generated kernels
        out = gradients(params, data, scale, blocks, mstep, work, mark)
    loss, grads = out
    for p, g, lr in zip(params[first:], grads[first:], lrs[first:]):
        p.sub_(lr * g)
    if mark is not None:
        mark("optimizer")
    return loss


def probabilities(params, data, scale, blocks):
    """Model predictive distribution p (A, S, T, m) at the current parameters."""
    o = forward(params, data, scale, blocks)[3]
    return torch.softmax(o @ params[3], -1)


def track_alpha(params, data, scale, rows):
    """Attention rows for a fixed set of query positions (E4: how the frame moves)."""
    x = data.x
    q, k = x[..., rows, :] @ params[0], x @ params[1]
    mask = torch.arange(x.shape[-2], device=x.device)[None, :] <= rows[:, None]
    s = scale * q @ k.mT
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1)


def reference_run(cfg, arm, seed_index, steps, device="cpu", timing=None):
    """The authors' way: one seed and arm, dense masked attention, torch.autograd, a Python loop.

    Returns the loss after each step's forward (steps values) and the final parameters. With a dict
    `timing`, timing["loop_seconds"] is the wall time of the step loop alone (set-up excluded, the
    device synchronised at both ends)."""
    seed = cfg.seeds[seed_index]  # only this run's data and parameters, as a one-run script makes them
    data = make_data(cfg, device, seeds=(seed,))
    x, y = data.x[0, 0], data.y[0]
    params = [p.to(device, cfg.torch_dtype).requires_grad_(True) for p in seed_params(cfg, seed)]
    lrs, mstep = ARMS[arm]
    T = x.shape[0]
    mask = causal_mask(T, device)  # the plain masked softmax below is the authors' form: the speed baseline
    losses = []
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        q, k, v = x @ params[0], x @ params[1], x @ params[2]
        alpha = torch.softmax((q @ k.T / math.sqrt(cfg.d_k)).masked_fill(~mask, float("-inf")), -1)
        if mstep:
            v = _mstep_values(v, alpha.detach())
        loss = torch.nn.functional.cross_entropy((alpha @ v) @ params[3], y)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g, lr in zip(params, grads, lrs):
                p -= lr * g
        losses.append(loss.detach())
    synchronize(device)
    if timing is not None:
        timing["loop_seconds"] = time.perf_counter() - t0
    return [float(x) for x in losses], [p.detach() for p in params]


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; backward divides the value gradient of row j by N_j (C10's M-step)."""

    @staticmethod
    def forward(ctx, v, resp):
        ctx.save_for_backward(resp)
        return v.view_as(v)

    @staticmethod
    def backward(ctx, g):
        (resp,) = ctx.saved_tensors
        return g / resp.clamp_min(1e-12)[:, None], None


def _mstep_values(v, alpha):
    return _ScaleGrad.apply(v, alpha.sum(0))


@dataclass
class Run:
    """Everything the experiment reports and the report redraws."""

    losses: torch.Tensor  # (A, S, steps + 1): loss before each step, and after the last
    params: list
    checkpoints: list  # step indices
    tracked: list  # per checkpoint: alpha rows (A, S, R, T)
    values: list  # per checkpoint: W_V (A, S, d_in, d_v)
    loop_seconds: float = float("nan")  # wall time of the training steps alone (set-up and final loss excluded)


def train(cfg, device="cpu", progress=None, state_path=None, save_every=100, on_start=None, log=print,
          freeze_routing=None):
    """All seeds and arms at once. `progress(step)` is called after every step. With `state_path`,
    the state is saved atomically every `save_every` steps and a run finds and resumes it (training
    is deterministic full-batch descent, so a resumed run equals an uninterrupted one); a state that
    cannot be read or does not fit `cfg` is reported through `log`, deleted, and training starts over.
    `on_start(step)` is called once with the step training starts from (0, or the resumed step).
    `freeze_routing`: a number of steps after which W_Q and W_K are no longer updated in any arm (E4's
    positive control: the attention rows, on fixed inputs, stop moving while W_V and W_O keep learning)."""
    cfg.validate()
    if freeze_routing is not None and not (isinstance(freeze_routing, int) and 0 <= freeze_routing <= cfg.steps):
        raise ValueError(f"train: freeze_routing must be a step in 0..{cfg.steps}, got {freeze_routing!r}")
    data = make_data(cfg, device)
    params = init_params(cfg, device)
    lrs, mstep = learning_rates(cfg, device)
    T = data.x.shape[-2]
    scale, blocks = 1.0 / math.sqrt(cfg.d_k), _blocks(T, cfg.blocks, device)
    work = workspace(cfg, blocks, device)
    rows = torch.linspace(0, T - 1, min(cfg.tracked_rows, T), device=device).round().long()
    marks = sorted({round(cfg.steps * c / (cfg.checkpoints - 1)) for c in range(cfg.checkpoints)}) if cfg.checkpoints > 1 \
        else [cfg.steps]
    losses, tracked, values, start = [], [], [], 0
    saved = _resume(state_path, params, marks, cfg.steps, log) if state_path is not None else None
    if saved is not None:
        params = [p.to(device, cfg.torch_dtype) for p in saved["params"]]
        losses, tracked, values, start = saved["losses"], saved["tracked"], saved["values"], saved["step"]
    step_kernel = fused.step_for(cfg, device)
    if step_kernel is None:  # the generated kernels run at lane-padded widths; the fused step at the model's own
        params = padded(params, cfg)
    if on_start:
        on_start(start)
    synchronize(device)
    t0, loop = time.perf_counter(), 0.0
    for step in range(start, cfg.steps + 1):
        if state_path is not None and step > start and step % save_every == 0:
            state = {"params": [p.cpu().contiguous() for p in unpadded(params, cfg)], "losses": [x.cpu() for x in losses],
                     "tracked": tracked, "values": values, "step": step}
            save_atomic(state, state_path)
        if step in marks:
            tracked.append(track_alpha(params, data, scale, rows).cpu())
            values.append(params[2][..., :cfg.d_v].detach().cpu().clone())
        if step == cfg.steps:
            synchronize(device)
            loop = time.perf_counter() - t0
            losses.append(probabilities_loss(params, data, scale, blocks))
            break
        first = 2 if freeze_routing is not None and step >= freeze_routing else 0  # W_Q, W_K frozen from here
        loss = descend(params, data, scale, blocks, mstep, lrs, work, first, step=step_kernel)
        losses.append(loss.detach())  # kept on the device; copied once at the end and at saves
        if progress:
            progress(step)
    return Run(torch.stack([x.to(device) for x in losses], -1).double().cpu(),
               [p.cpu().contiguous() for p in unpadded(params, cfg)], marks, tracked, values, loop)


def save_atomic(obj, path):
    """torch.save to a temporary file beside `path`, then rename: a reader never sees half a file. The file
    gets the usual mode (umask respected); a temporary an interrupted save leaves is removed by the next run."""
    return atomic_write(path, lambda fh: torch.save(obj, fh), binary=True)


# What a cache entry or saved state may hold besides tensors and plain data: the Run record and numpy
# scalars and arrays (evaluation dicts hold numpy floats). Loads are weights_only: nothing else is unpickled.
_NP_CORE = getattr(np, "_core", None) or np.core
_NP_DTYPES = list(dict.fromkeys(type(np.dtype(code)) for code in "?bhilqpBHILQPefdgFDGUSMm"))  # not object
SAFE_GLOBALS = [Run, _NP_CORE.multiarray.scalar, _NP_CORE.multiarray._reconstruct, np.ndarray, np.dtype, *_NP_DTYPES]


def load(path):
    """torch.load of a cache entry or saved state, restricted to tensors, plain data and SAFE_GLOBALS."""
    safe = getattr(torch.serialization, "safe_globals", None)
    if safe is None:  # torch < 2.5: the allow-list is process-wide
        torch.serialization.add_safe_globals(SAFE_GLOBALS)
        return torch.load(path, map_location="cpu", weights_only=True)
    with safe(SAFE_GLOBALS):
        return torch.load(path, map_location="cpu", weights_only=True)


def discard_corrupt(path, exc, log=print):
    """Report and delete a corrupt cache entry (a `.pt` or a `.partial`), so that it is recomputed."""
    text = str(exc)
    if "WeightsUnpickler error:" in text:  # torch's message leads with advice; the reason follows this marker
        text = text.split("WeightsUnpickler error:", 1)[1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = f"{type(exc).__name__}: {lines[0] if lines else 'no detail'}"[:200]
    log(f"  discarding corrupt cache entry {Path(path).name}: {reason}")
    Path(path).unlink(missing_ok=True)


def _resume(state_path, params, marks, steps, log):
    """The state saved at `state_path` if there is one that fits this run; a corrupt one is discarded."""
    path = Path(state_path)
    if not path.exists():
        return None
    try:
        saved = load(path)
        _check_state(saved, params, marks, steps)
    except Exception as exc:
        discard_corrupt(path, exc, log)
        return None
    return saved


def _check_state(saved, params, marks, steps):
    if not isinstance(saved, dict) or not {"params", "losses", "tracked", "values", "step"} <= set(saved):
        raise ValueError("not a saved training state")
    step = saved["step"]
    if not isinstance(step, int) or not 0 < step <= steps:
        raise ValueError(f"step {step!r} outside 1..{steps}")
    got = saved["params"]
    if (not isinstance(got, list) or len(got) != len(params)
            or any(not isinstance(g, torch.Tensor) or g.shape != p.shape for g, p in zip(got, params))):
        raise ValueError("parameters do not fit this configuration")
    if not isinstance(saved["losses"], list) or len(saved["losses"]) != step:
        raise ValueError(f"{len(saved['losses'])} losses for step {step}")
    seen = sum(1 for m in marks if m < step)
    if any(not isinstance(saved[k], list) or len(saved[k]) != seen for k in ("tracked", "values")):
        raise ValueError(f"checkpoints do not fit step {step}")


def probabilities_loss(params, data, scale, blocks):
    p = probabilities(params, data, scale, blocks)
    return -torch.log(p.gather(-1, data.y[None, ..., None].expand(p.shape[0], -1, -1, 1)).squeeze(-1)).mean(-1)


def evaluate(cfg, params, device="cpu", heldout=False):
    """Loss, entropy, accuracy (A, S) on the training sequences or on fresh held-out ones, plus
    the exact Bayes predictive on the same inputs and each run's KL to it (bits)."""
    data = make_data(cfg, device, seed_offset=cfg.heldout_seed_offset if heldout else 0)
    params = [p.to(device) for p in params]
    T = data.x.shape[-2]
    probs = probabilities(params, data, 1.0 / math.sqrt(cfg.d_k), _blocks(T, cfg.blocks, device)).double().cpu()
    ce, ent, acc = chain.predictive_metrics(probs, data.y[None].cpu().expand(probs.shape[:-1]))
    bayes = chain.bayes_predictive(data.P, data.mu, data.x[0].cpu())  # (S, T, m)
    b_ce, b_ent, b_acc = chain.predictive_metrics(bayes, data.y.cpu())
    kl = chain.kl_bits(bayes[None], probs)
    return {"loss": ce, "entropy": ent, "accuracy": acc, "kl_bits": kl,
            "bayes": {"loss": b_ce, "entropy": b_ent, "accuracy": b_acc}}
