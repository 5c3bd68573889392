"""Is the paper's 1.93 typical of the authors' protocol, or of their five seeds?

The study trains both arms on many further seeds under two protocols that differ only in how each
seed's randomness is drawn, with the same symbol means mu (the authors' draw):
- "authors": the authors' script's streams (one CPU generator seeded with the seed for the chain and
  the noise, re-seeded with it for the initial weights: weights and data are coupled);
- "ours": independent float64 streams for the chain, the noise and the weights.
For each protocol it reports the distribution of both arms' final losses and of the speedup over all
seeds, and over random 5-seed subsets (the size of the paper's experiment), with the fraction of those
subsets that come out at least as favourable as the authors' five seeds did.

It is opt-in in the default profile (`python -m derive.all --only experiments --extended`): 2 x 50 seeds of
1000 steps at T = 2000. It runs as a Dask campaign (numeric.campaign): one task per protocol and group of
SEEDS_PER_TASK seeds (`train_task`, pure: the group's batched run on one thread), cached under
DIR/cache/typicality/, so an interrupted study resumes; the experiments stage reads the cached tasks whenever
they are all present.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from numeric.experiments import stats as st

PROTOCOLS = ("authors", "ours")
SUBSET = 5  # seeds per subset: the paper's experiment
SUBSETS = 10_000
SEEDS_PER_TASK = 5  # seeds batched in one campaign task (the trainer is batched over seeds)
LABEL = "typicality"


def train_task(cfg, seeds):
    """A campaign task: `cfg` (one protocol's config) on `seeds`, both arms batched, torch on one thread; the
    loss curves (A, S, steps + 1) as nested lists. Pure: the same numbers for the same arguments in any process."""
    import torch

    from numeric.experiments import sticky

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = sticky.train(dataclasses.replace(cfg, seeds=tuple(seeds)), "cpu", log=lambda *a: None)
        return {"seeds": list(seeds), "losses": run.losses.double().tolist()}
    finally:
        torch.set_num_threads(threads)


def tasks(cfgs, seeds_per_task=SEEDS_PER_TASK):
    """One task per protocol and group of seeds, named by the protocol, the seeds and a hash of the config."""
    import hashlib

    from derive import __version__
    from numeric import campaign

    out = []
    for protocol, cfg in cfgs.items():
        key = hashlib.sha256(repr((dataclasses.replace(cfg, seeds=()), __version__)).encode()).hexdigest()[:12]
        seeds = list(cfg.seeds)
        for i in range(0, len(seeds), seeds_per_task):
            group = tuple(seeds[i:i + seeds_per_task])
            out.append(campaign.Task(f"{LABEL}/{protocol}/seeds={group[0]}-{group[-1]}/{key}", train_task, (cfg, group)))
    return out


def run(cfgs, cache_dir=None, workers=None, scheduler=None, log=print, cluster=None):
    """The study's loss curves {protocol: (2, S, steps + 1) array}, trained as a campaign (numeric.campaign.run's
    workers, scheduler or cluster); None when a task failed twice."""
    from numeric import campaign

    todo = tasks(cfgs)
    outcome = campaign.run(todo, scheduler=scheduler, workers=workers, cache_dir=cache_dir, log=log, label=LABEL,
                           cluster=cluster)
    if outcome.failed:
        return None
    out = {}
    for protocol in cfgs:
        parts = [r for t, r in zip(todo, outcome.results) if t.name.startswith(f"{LABEL}/{protocol}/")]
        out[protocol] = np.concatenate([np.asarray(p["losses"], float) for p in parts], axis=1)
    return out


def configs(base, seeds):
    """One config per protocol: `base` (the paper's two arms) on `seeds`, mu as the authors draw it."""
    out = {}
    for protocol in PROTOCOLS:
        out[protocol] = dataclasses.replace(base, seeds=tuple(seeds), arms=("sgd", "em_like"), stream=protocol,
                                            mu_rng="torch-float32", mu_seed=0, checkpoints=1)
    return out


def analyse(losses, steps, reference, seed=0):
    """losses: protocol -> (2, S, steps + 1) curves of (sgd, em_like). reference: the authors' five
    seeds' figures {"sgd_final_loss", "em_like_final_loss", "speedup"} to place in each distribution."""
    rng = np.random.default_rng(seed)
    out = {"subset_size": SUBSET, "subsets": SUBSETS, "reference": reference, "protocols": {}}
    for protocol, L in losses.items():
        L = np.asarray(L, float)
        sgd, em = L[0], L[1]
        S = sgd.shape[0]
        entry = {"seeds": S}
        for arm, curves in (("sgd", sgd), ("em_like", em)):
            finals = curves[:, -1]
            mean, half = st.mean_ci(finals)
            entry[arm] = {"final_loss_mean": mean, "final_loss_ci95": [mean - half, mean + half],
                          "final_loss_sd": float(finals.std(ddof=1)),
                          "final_loss_percentiles": dict(zip(("p5", "p50", "p95"), np.percentile(finals, [5, 50, 95]).tolist())),
                          "final_loss_per_seed": finals.tolist()}
        speed, threshold, hits = st.speedup(sgd, em, steps)
        entry["speedup"] = speed
        entry["speedup_ci95"] = list(st.bootstrap_speedup_expanded(sgd, em, steps, seed=seed))
        entry["em_steps_to_threshold"] = hits.tolist()
        idx = np.stack([rng.choice(S, SUBSET, replace=False) for _ in range(SUBSETS)])  # (subsets, 5)
        sgd_means, em_means = sgd[idx, -1].mean(1), em[idx, -1].mean(1)
        below = st.first_passage(em, sgd_means)  # (S, subsets)
        sub_hits = np.take_along_axis(below, idx.T, 0).mean(0)
        sub_speed = steps / sub_hits
        entry["subset"] = {
            key: dict(zip(("p2.5", "p50", "p97.5"), np.percentile(v, [2.5, 50, 97.5]).tolist()))
            for key, v in (("sgd_final_loss", sgd_means), ("em_like_final_loss", em_means), ("speedup", sub_speed))}
        entry["subset"]["fraction_as_favourable"] = {
            "em_like_final_loss": float(np.mean(em_means <= reference["em_like_final_loss"])),
            "sgd_final_loss": float(np.mean(sgd_means <= reference["sgd_final_loss"])),
            "speedup": float(np.mean(sub_speed >= reference["speedup"]))}
        out["protocols"][protocol] = entry
    if set(PROTOCOLS) <= set(losses):
        a, o = out["protocols"]["authors"], out["protocols"]["ours"]
        out["difference_authors_minus_ours"] = {
            arm: _welch(a[arm]["final_loss_per_seed"], o[arm]["final_loss_per_seed"]) for arm in ("sgd", "em_like")}
    return out


def _welch(a, b):
    """Difference of means a - b with a 95% Welch interval."""
    from scipy import stats

    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = float(np.sqrt(va + vb))
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    d = float(a.mean() - b.mean())
    half = float(stats.t.ppf(0.975, df)) * se
    return {"difference": d, "ci95": [d - half, d + half], "p_value": float(stats.ttest_ind(a, b, equal_var=False).pvalue)}


def summary(study):
    """One sentence per protocol for E1-E3's evidence."""
    parts = []
    for protocol, e in study["protocols"].items():
        sub = e["subset"]
        frac = sub["fraction_as_favourable"]
        parts.append(
            f"{protocol} protocol, {e['seeds']} seeds: final loss SGD {e['sgd']['final_loss_mean']:.3f} "
            f"(95% CI {e['sgd']['final_loss_ci95'][0]:.3f}-{e['sgd']['final_loss_ci95'][1]:.3f}), EM-like "
            f"{e['em_like']['final_loss_mean']:.3f} ({e['em_like']['final_loss_ci95'][0]:.3f}-"
            f"{e['em_like']['final_loss_ci95'][1]:.3f}), speedup {e['speedup']:.2f}x "
            f"({e['speedup_ci95'][0]:.2f}-{e['speedup_ci95'][1]:.2f}); of random 5-seed subsets, "
            f"{100 * frac['em_like_final_loss']:.1f}% reach EM-like <= {study['reference']['em_like_final_loss']:.3f} and "
            f"{100 * frac['speedup']:.1f}% a speedup >= {study['reference']['speedup']:.2f}x")
    diff = study.get("difference_authors_minus_ours")
    if diff:
        parts.append("authors' minus our protocol: " + ", ".join(
            f"{arm} {d['difference']:+.3f} (95% CI {d['ci95'][0]:+.3f} to {d['ci95'][1]:+.3f}, p {d['p_value']:.2g})"
            for arm, d in diff.items()))
    return "; ".join(parts)
