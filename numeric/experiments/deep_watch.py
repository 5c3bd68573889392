"""W1: E4 (frame early, precision late) in a deep model, watched while it trains.

Model: a 2-layer, 4-head causal nn.TransformerEncoder (pre-LN, dropout 0) over token plus learned
position embeddings of the wind tunnel's sequences (windtunnel.sample: a sticky chain whose transition
matrix is drawn per sequence), a final LayerNorm and a linear readout to next-symbol logits; the
exact Bayes predictive is windtunnel.bayes_predictive. Per seed: one data stream and one set of
initial weights, trained by three optimizers:

- `sgd`: plain SGD, one learning rate;
- `em_like`: the paper's two-timescale schedule in this model: SGD whose value learning rate is
  `value_lr_ratio` (10) times the rest. Implemented by editing `.grad` after backward and before
  `step`: the V rows [2E, 3E) of every attention layer's `in_proj_weight` and `in_proj_bias` are
  multiplied by the ratio (`scale_value_grads`), so the Q and K slices and every other parameter
  step exactly as in `sgd`;
- `adamw`: AdamW.

Learning rates (measured in this setting: 800 steps of batch 16, seeds 0 and 1, KL to Bayes in bits at the
end; the initial, near-uniform model is at 0.8): SGD at 1.0 diverged (SGD on both seeds, EM-like on one); 0.1 and 0.3
both end at 0.15-0.16 (SGD) and 0.14-0.15 (EM-like): the chain's sticky prior is learned, the in-context
counts are not yet used; 0.3, the largest stable rate, is taken (attention moves further: entropy 2.3 vs 2.4
nats). AdamW at 1e-3 ends at 0.09, at 3e-3 at 0.07 and at 1e-2 at 0.10-0.11: 3e-3 is taken. The tunnel is
less sticky than E5's (prior 0.5, sticky 1 rather than 1, 4), so that the in-context counts are worth more.

Watching: numeric.watch records every attention layer on a fixed probe batch (held out, the same for
every seed and optimizer) every `every` training steps: a probe pass (forward and backward on the
probe, no optimizer step, gradients discarded) precedes each block of `every` training steps and
follows the last, and only the probe passes are recorded (watch(model, every=None), record_next()).
The same inputs at every record make the drift between records a change of the model alone:
`js` (Jensen-Shannon divergence of attention rows) for routing and `v_change` (relative change of V)
for the values. KL to the Bayes predictive (bits) is measured on held-out sequences at
`checkpoints` evenly spaced steps, with a bootstrap interval over evaluation sequences at the end.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from numeric.experiments import chain
from numeric.experiments import stats as st
from numeric.experiments.config import positive, positive_ints
from numeric.experiments.windtunnel import TunnelConfig, bayes_predictive, sample
from numeric.watch import watch

# What `run` returns, named in the cache key: a cached result of another version is not reused.
EVALUATION = "deep1"
OPTIMIZERS = ("sgd", "em_like", "adamw")
QUANTITIES = ("entropy", "saturation", "adv_max", "adv_row_l1", "resp_max", "resp_min", "c9_slack", "dS_norm",
              "dV_norm", "js", "v_change")
DRIFTS = ("js", "v_change")  # drift from the previous record: none at the first
SERIES_POINTS = 60  # records kept per curve in results.json


@dataclass(frozen=True)
class DeepConfig:
    """The sizes come from the profile (derive.profile.ExperimentSizes deep_*, `from_sizes`); the rest is the
    experiment's own setting."""

    steps: int
    batch: int
    seeds: tuple
    every: int  # training steps between watched probe passes
    d_model: int
    ff: int
    length: int
    probe_batch: int
    eval_batch: int
    checkpoints: int = 5  # KL to Bayes at this many evenly spaced steps (the first at 0, the last at the end)
    heads: int = 4
    layers: int = 2
    symbols: int = 5
    prior: float = 0.5  # less sticky than E5's tunnel (1.0, 4.0): the in-context counts matter more
    sticky: float = 1.0
    sgd_lr: float = 0.3
    value_lr_ratio: float = 10.0
    adamw_lr: float = 3e-3
    weight_decay: float = 0.01
    resamples: int = 1000
    seed: int = 0  # the probe and evaluation sequences

    @classmethod
    def from_sizes(cls, x):
        """The experiment at a profile's sizes (derive.profile.ExperimentSizes)."""
        return cls(steps=x.deep_steps, batch=x.deep_batch, seeds=x.deep_seeds, every=x.deep_every,
                   d_model=x.deep_d_model, ff=x.deep_ff, length=x.deep_length, probe_batch=x.deep_probe_batch,
                   eval_batch=x.deep_eval_batch)

    def validate(self):
        positive_ints(self, "steps", "batch", "every", "checkpoints", "d_model", "heads", "layers", "ff", "symbols",
                      "length", "probe_batch", "eval_batch", "resamples")
        positive(self, "sgd_lr", "value_lr_ratio", "adamw_lr")
        if self.steps % self.every:
            raise ValueError(f"DeepConfig.steps ({self.steps}) must be a multiple of every ({self.every})")
        if self.d_model % self.heads:
            raise ValueError(f"DeepConfig.d_model ({self.d_model}) must be a multiple of heads ({self.heads})")
        if not isinstance(self.seeds, tuple) or not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"DeepConfig.seeds must be a non-empty tuple of distinct seeds, got {self.seeds!r}")
        if self.steps // self.every < 4:
            raise ValueError("DeepConfig: a freeze needs at least 4 watched records (steps // every >= 4)")
        self.tunnel().validate()
        return self

    def tunnel(self):
        return TunnelConfig(symbols=self.symbols, length=self.length, prior=self.prior, sticky=self.sticky, seed=self.seed)

    def sites(self):
        return [f"encoder.layers.{i}.self_attn" for i in range(self.layers)]

    def checkpoint_steps(self):
        return sorted({round(i * self.steps / (self.checkpoints - 1)) for i in range(self.checkpoints)}) \
            if self.checkpoints > 1 else [self.steps]


class DeepTunnel(nn.Module):
    """Token + learned position embeddings, a causal pre-LN nn.TransformerEncoder, LayerNorm, linear readout."""

    def __init__(self, cfg):
        super().__init__()
        n = cfg.length - 1  # inputs y_0..y_{T-2} predict y_1..y_{T-1}
        self.embed = nn.Embedding(cfg.symbols, cfg.d_model)
        self.position = nn.Parameter(0.02 * torch.randn(n, cfg.d_model))
        layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.heads, cfg.ff, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.d_model)
        self.readout = nn.Linear(cfg.d_model, cfg.symbols)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(n), persistent=False)

    def forward(self, y):  # (B, n) symbols -> (B, n, K) next-symbol logits
        n = y.shape[1]
        h = self.embed(y) + self.position[:n]  # (B, n, d)
        h = self.encoder(h, mask=self.mask[:n, :n], is_causal=True)
        return self.readout(self.norm(h))


def scale_value_grads(model, ratio):
    """Multiply the gradient of every attention layer's V projection (rows [2E, 3E) of in_proj_weight and
    in_proj_bias) by `ratio`, in place: with SGD, the value learning rate becomes ratio x the rest."""
    for mod in model.modules():
        if isinstance(mod, nn.MultiheadAttention):
            if not mod._qkv_same_embed_dim:
                raise ValueError("scale_value_grads: needs a packed in_proj_weight (q, k, v of one embedding size)")
            E = mod.embed_dim
            for p in (mod.in_proj_weight, mod.in_proj_bias):
                if p is not None and p.grad is not None:
                    p.grad[2 * E:].mul_(ratio)


def optimizer(name, model, cfg):
    if name in ("sgd", "em_like"):
        return torch.optim.SGD(model.parameters(), lr=cfg.sgd_lr)
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=cfg.adamw_lr, weight_decay=cfg.weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")


def next_symbol_loss(model, y):
    """Cross-entropy (nats) of the model's next-symbol predictions on sequences y (B, T)."""
    logits = model(y[:, :-1])  # (B, T-1, K)
    return nn.functional.cross_entropy(logits.flatten(0, 1), y[:, 1:].flatten())


def kl_to_bayes_bits(model, y, bayes):
    """Per sequence: mean over positions of KL(Bayes || model), in bits, (B,); y (B, T), bayes (B, T-1, K)."""
    device = next(model.parameters()).device
    with torch.no_grad():
        p = torch.softmax(model(y[:, :-1].to(device)).double(), -1).cpu()  # (B, T-1, K)
    return chain.kl_bits(bayes, p)


def _probe(model, y):
    """A watched forward and backward on the probe sequences; its gradients are discarded."""
    model.zero_grad(set_to_none=True)
    next_symbol_loss(model, y).backward()
    model.zero_grad(set_to_none=True)


def routing_parameters(model):
    """What the attention rows read, as (parameter, rows) pairs (rows: a slice of the first dim): the Q and K
    rows [0, 2E) of every attention layer's in_proj_weight and in_proj_bias, and what feeds them from below
    the first layer: the token and position embeddings and every layer's pre-attention LayerNorm (norm1). In
    a one-layer model these fix the attention rows on fixed inputs exactly; from the second layer on the rows
    also read the earlier layers' values, which this does not fix."""
    whole = slice(None)
    out = [(model.embed.weight, whole), (model.position, whole)]
    for layer in model.encoder.layers:
        out += [(p, whole) for p in layer.norm1.parameters()]
        mod = layer.self_attn
        if not mod._qkv_same_embed_dim:
            raise ValueError("routing_parameters: needs a packed in_proj_weight (q, k, v of one embedding size)")
        out += [(p, slice(0, 2 * mod.embed_dim)) for p in (mod.in_proj_weight, mod.in_proj_bias) if p is not None]
    return out


def train(cfg, name, init, batches, probe, evaluation, device="cpu", progress=None, freeze_routing=None):
    """One optimizer from the initial weights `init` on `batches` (steps, B, T), watched on `probe`.
    Returns the loss curve, the watcher's series per quantity (layers, heads, records) and KL at checkpoints.

    freeze_routing: a number of steps after which the routing parameters (routing_parameters: Q and K
    in-projections, embeddings, pre-attention LayerNorms) stop changing (the W1 positive control): they are
    restored after every optimizer step from then on, so no optimizer (AdamW's moments and weight decay
    included) moves them; the values and every other parameter keep training."""
    if freeze_routing is not None and not (isinstance(freeze_routing, int) and 0 < freeze_routing <= cfg.steps):
        raise ValueError(f"train: freeze_routing must be a step in 1..{cfg.steps}, got {freeze_routing!r}")
    model = DeepTunnel(cfg).to(device)
    model.load_state_dict(init)
    opt = optimizer(name, model, cfg)
    frozen = None
    y_eval, bayes = evaluation
    ckpt, kl, losses = cfg.checkpoint_steps(), [], []
    probe = probe.to(device)
    with watch(model, every=None) as w:
        for step in range(cfg.steps + 1):
            if step % cfg.every == 0:
                w.record_next()
                _probe(model, probe)
            if step in ckpt:
                kl.append(kl_to_bayes_bits(model, y_eval, bayes))
            if step == cfg.steps:
                break
            loss = next_symbol_loss(model, batches[step].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if name == "em_like":
                scale_value_grads(model, cfg.value_lr_ratio)
            opt.step()
            if freeze_routing is not None and step + 1 >= freeze_routing:
                with torch.no_grad():
                    if frozen is None:  # the routing as it stands after `freeze_routing` steps
                        frozen = [(p, rows, p[rows].clone()) for p, rows in routing_parameters(model)]
                    for p, rows, value in frozen:
                        p[rows] = value
            losses.append(loss.detach())
            if progress:
                progress()
    return {"losses": torch.stack(losses).cpu().tolist(), "series": series(w.records, cfg), "kl_steps": ckpt,
            "kl_bits": [k.tolist() for k in kl]}


def series(records, cfg):
    """{quantity: (layers, heads, records) array} from the watcher's records; drifts start at the second record."""
    sites = cfg.sites()
    by_site = {s: [r for r in records if r["site"] == s] for s in sites}
    expected = cfg.steps // cfg.every + 1
    for s, recs in by_site.items():
        if len(recs) != expected or any(r["heads"] != cfg.heads for r in recs):
            raise RuntimeError(f"deep_watch: site {s}: {len(recs)} records with heads {sorted({r['heads'] for r in recs})}, "
                               f"expected {expected} records of {cfg.heads} heads")
    out = {}
    for q in QUANTITIES:
        first = 1 if q in DRIFTS else 0
        out[q] = np.array([[r[q] for r in by_site[s][first:]] for s in sites]).transpose(0, 2, 1)  # (layers, heads, R)
    return out


def data(cfg, seed):
    """Seed `seed`'s stream (steps, B, T) and initial weights: the same for every optimizer."""
    tunnel = cfg.tunnel()
    g = torch.Generator().manual_seed(1000 + seed)
    batches = sample(tunnel, cfg.steps * cfg.batch, g).view(cfg.steps, cfg.batch, cfg.length)
    with torch.random.fork_rng(devices=[]):  # the caller's global generator is left as it was
        torch.manual_seed(seed)
        init = copy.deepcopy(DeepTunnel(cfg).state_dict())
    return batches, init


def fixed_sequences(cfg):
    """The probe sequences and the evaluation sequences with their Bayes predictive (one set for every run)."""
    tunnel = cfg.tunnel()
    probe = sample(tunnel, cfg.probe_batch, torch.Generator().manual_seed(cfg.seed + 55))
    y = sample(tunnel, cfg.eval_batch, torch.Generator().manual_seed(cfg.seed + 99))
    return probe, (y, bayes_predictive(tunnel, y))


def run(cfg, device="cpu", progress=None, freeze_routing=None):
    """Every optimizer on every seed: {optimizer: [per-seed train output]}, plus the Bayes floor.
    freeze_routing: see `train` (the W1 positive control)."""
    cfg.validate()
    probe, evaluation = fixed_sequences(cfg)
    out = {name: [] for name in OPTIMIZERS}
    for seed in cfg.seeds:
        batches, init = data(cfg, seed)
        for name in OPTIMIZERS:
            out[name].append(train(cfg, name, init, batches, probe, evaluation, device, progress, freeze_routing))
    bayes = evaluation[1]
    entropy = -(bayes * bayes.log()).sum(-1) / math.log(2)
    return {"runs": out, "bayes_entropy_bits": float(entropy.mean())}


def rule_inputs(out, cfg):
    """The W1 rule's input: per optimizer the record steps of the drifts and, per (seed, layer, head, record),
    the routing drift (square root of the JS divergence: a distance, linear in a small change, the scale
    of v_change) and the values' drift (relative change of V)."""
    steps = [cfg.every * i for i in range(1, cfg.steps // cfg.every + 1)]
    return {name: {"steps": steps,
                   "routing": np.sqrt(np.clip([r["series"]["js"] for r in runs], 0, None)).tolist(),
                   "values": [r["series"]["v_change"].tolist() for r in runs]}
            for name, runs in out["runs"].items()}


def summarise(out, cfg, per_optimizer):
    """results.json's `experiments.deep_watch`: per optimizer, per seed final loss and KL to Bayes (with
    bootstrap intervals over evaluation sequences), the W1 rule's per-head results (`per_optimizer`: w1's
    measured["optimizers"]) and the watcher's series (mean over seeds, down-sampled) for the figures."""
    tail = max(1, cfg.steps // 10)  # final loss: the mean training loss of the last tenth of the steps
    opts = {name: {**_optimizer(runs, cfg, name, k, tail), **per_optimizer[name], "series": _series_view(runs, cfg)}
            for k, (name, runs) in enumerate(out["runs"].items())}
    min_slack = min(float(np.min(r["series"]["c9_slack"])) for runs in out["runs"].values() for r in runs)
    return {"seeds": list(cfg.seeds), "steps": cfg.steps, "every": cfg.every, "layers": cfg.layers, "heads": cfg.heads,
            "sites": cfg.sites(), "optimizers": opts, "bayes_entropy_bits": out["bayes_entropy_bits"],
            "tail_steps": tail, "min_c9_slack": min_slack}


def _optimizer(runs, cfg, name, k, tail):
    """Learning rates, final loss and KL to Bayes (bits) per seed and pooled, with bootstrap intervals."""
    final = np.array([np.mean(r["losses"][-tail:]) for r in runs])
    kl_end = np.array([r["kl_bits"][-1] for r in runs])  # (seeds, evaluation sequences)
    lr = cfg.adamw_lr if name == "adamw" else cfg.sgd_lr
    return {"lr": lr, **({"value_lr": lr * cfg.value_lr_ratio} if name == "em_like" else {}),
            "final_loss": float(final.mean()), "final_loss_per_seed": final.tolist(),
            "kl_bits": float(kl_end.mean()), "kl_bits_ci95": st.bootstrap_mean_ci(kl_end, cfg.resamples, cfg.seed + k),
            "kl_bits_per_seed": kl_end.mean(1).tolist(),
            "kl_bits_per_seed_ci95": [st.bootstrap_mean_ci(row, cfg.resamples, cfg.seed + k) for row in kl_end],
            "kl_checkpoints": {"steps": runs[0]["kl_steps"],
                               "kl_bits": np.mean([[np.mean(x) for x in r["kl_bits"]] for r in runs], 0).tolist()},
            "loss_curve": st.curve(np.array([r["losses"] for r in runs]))}


def _series_view(runs, cfg):
    """Every watched quantity, mean over seeds, (layers, heads, records) at no more than SERIES_POINTS records."""
    steps = [cfg.every * i for i in range(cfg.steps // cfg.every + 1)]
    keep = np.unique(np.linspace(0, len(steps) - 1, min(SERIES_POINTS, len(steps))).round().astype(int))
    drift = np.array([i - 1 for i in keep if i > 0])  # drifts are recorded from the second record on
    out = {"steps": [steps[i] for i in keep], "drift_steps": [steps[i + 1] for i in drift]}
    for q in QUANTITIES:
        mean = np.mean([r["series"][q] for r in runs], 0)
        out[q] = mean[..., drift if q in DRIFTS else keep].tolist()
    return out


def benchmark_setup(seed=0):
    """numeric.watch_bench's `demo` setup: this experiment's model at the default profile's sizes and its SGD
    training step on one batch of wind-tunnel sequences: () -> (model, step)."""
    from derive.profile import DEFAULT

    cfg = DeepConfig.from_sizes(DEFAULT.experiments)
    batches, init = data(replace(cfg, steps=1), seed)
    model = DeepTunnel(cfg)
    model.load_state_dict(init)
    opt = optimizer("sgd", model, cfg)
    y = batches[0]

    def step(model):
        opt.zero_grad(set_to_none=True)
        next_symbol_loss(model, y).backward()
        opt.step()
    return model, step


def finite(out):
    """Every loss, KL and watched number of every run is finite, and KL is >= 0 up to rounding."""
    for runs in out["runs"].values():
        for r in runs:
            if not np.isfinite(r["losses"]).all() or not all(np.isfinite(x).all() for x in r["series"].values()):
                return False
            if min(min(k) for k in r["kl_bits"]) < -1e-9:
                return False
    return True


__all__ = ["DeepConfig", "DeepTunnel", "OPTIMIZERS", "QUANTITIES", "scale_value_grads", "routing_parameters", "train", "run",
           "rule_inputs", "summarise", "kl_to_bayes_bits"]
