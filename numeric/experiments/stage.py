"""The `experiments` stage: E1–E7 measured next to the paper's numbers, with seeds and intervals, and W1
(ours: E4 in a deep model, watched while it trains).

Each experiment's output is cached under DIR/cache by a hash of its config (an interrupted run
resumes where it stopped; files are written atomically). Checks of kind `experiment` assert that
an experiment is valid (exactness, finiteness, bounds); whether a claim reproduces is its verdict."""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import torch

from derive import mechanisms
from derive import profile as profiles
from derive.results import Check, default_threads
from numeric import campaign
from numeric.experiments import chain, deep_watch, dynamics, gpt_tunnel, replay, rules, speed, sticky, typicality, windtunnel
from numeric.experiments import stats as st
from numeric.experiments.cache import Cache
from numeric.experiments.frame import combine as combine_frames
from numeric.experiments.frame import frame_precision
from numeric.experiments.progress import Progress
from numeric.experiments.registry import REGISTRY, STICKY_FIGURES

ARMS_RATIO = {arm: round(lrs[2] / lrs[0]) for arm, (lrs, _) in sticky.ARMS.items()}  # value / routing LR


def configs(sizes, extended=False):
    """The experiments' configs from a profile's `experiments` section (derive.profile.ExperimentSizes).

    `fresh`: one config per group of fresh seeds (`sizes.fresh_groups(extended)`: our streams, the group's draw of
    mu), both arms and, in `mstep_groups`, our C10 arm; `replay`: the paper's seeds on the authors' streams; `typicality`
    (opt-in): both protocols on many further seeds; `sweep` (opt-in in the default profile): the base of
    the LR-ratio sweep, on seeds of the first group."""
    x = sizes
    base = sticky.StickyConfig(length=x.length, steps=x.steps, blocks=x.blocks, checkpoints=x.checkpoints,
                               tracked_rows=x.tracked_rows, arms=("sgd", "em_like"))
    fresh = [dataclasses.replace(base, seeds=g.seeds, mu_rng=g.mu_rng, mu_seed=g.mu_seed,
                                 arms=base.arms + (("em_mstep",) if i in x.mstep_groups else ()))
             for i, g in enumerate(x.fresh_groups(extended))]
    first = dataclasses.replace(fresh[0], arms=base.arms)
    small = dict(length=x.typicality_length, steps=x.typicality_steps)
    return {"fresh": fresh,
            "replay": sticky.StickyConfig(stream="authors", mu_rng="torch-float32", arms=("sgd", "em_like"), checkpoints=1,
                                          blocks=x.blocks, steps=x.replay_steps),
            "typicality": typicality.configs(dataclasses.replace(base, **small), x.typicality_seeds),
            "sweep": dataclasses.replace(first, seeds=x.sweep_seeds),
            "exact": dataclasses.replace(first, steps=x.exact_steps, dtype="float64", checkpoints=1, seeds=x.exact_seeds,
                                         arms=("sgd", "em_like", "em_mstep")),
            "speed": dataclasses.replace(first, seeds=x.speed_seeds), "speed_steps": x.speed_steps,
            "dynamics": dynamics.DynamicsConfig(instances=x.dynamics_instances, train_steps=x.dynamics_train_steps),
            "tunnel": windtunnel.from_sizes(x),
            "deep": deep_watch.DeepConfig.from_sizes(x),
            "manifold": gpt_tunnel.ManifoldConfig.from_sizes(x)}


class ExperimentStage:
    def __init__(self, results, profile, device, seed, out_dir, log=print, extended=False, threads=None):
        """`profile`: a derive.profile.Profile (or its name). `extended`: also train the opt-in studies
        (the profile's `opt_in`: the typicality study, the LR-ratio sweep); otherwise their cached results
        are read when present. `threads`: torch threads for the stage (default: see `thread_count`)."""
        profile = profiles.get(profile) if isinstance(profile, str) else profile
        self.results, self.device, self.seed, self.log = results, device, seed, log
        self.profile = profile.for_device(device)
        self.sizes = self.profile.experiments
        self.extended, self.threads = extended, threads
        self.cfgs = configs(self.sizes, extended)
        for key in ("replay", "sweep", "exact", "speed", "dynamics", "tunnel", "deep", "manifold"):
            self.cfgs[key].validate()
        for cfg in (*self.cfgs["fresh"], *self.cfgs["typicality"].values()):
            cfg.validate()
        self.cache = Cache(out_dir)
        self.data = results.experiments
        self._measurements = {}  # claim -> the keyword arguments of its rule (numeric.experiments.rules), for the controls
        self._constructed = {}  # claim -> its rule's keyword arguments on a constructed run (the positive controls)
        self._cluster = None  # the campaigns' Dask cluster, started on first use (`campaign`)

    def campaign(self):
        """The stage's Dask cluster (numeric.campaign.Cluster), started on first use and shared by its campaigns
        (the typicality study, the mechanism grid, the wind tunnel per mechanism): a local cluster with one worker
        per thread the stage may use, closed at the end of the stage."""
        if self._cluster is None:
            from numeric import campaign

            self._cluster = campaign.Cluster(workers=self.thread_count()).__enter__()
        return self._cluster

    def thread_count(self):
        """The `threads` given, else derive.results.default_threads() (the user's OMP/MKL setting, or 2)."""
        return int(self.threads) if self.threads else default_threads()

    @property
    def side(self):
        """The smaller trainings, each a pure function fn(cfg, device, **keywords) of the current configs: {job:
        (cache name, cfg, fn, keywords)}. `prefetch` runs them as one campaign; each experiment reads its own from
        the cache (`_side`)."""
        deep, tunnel = self.cfgs["deep"], self.cfgs["tunnel"]
        frozen = dataclasses.replace(deep, layers=1)  # W1's constructed run (`_frozen_deep`)
        return {
            "manifold": (f"value-manifold-{gpt_tunnel.EVALUATION}", self.cfgs["manifold"], _manifold_run, {}),
            "deep": (f"deep-watch-{deep_watch.EVALUATION}", deep, _deep_run, {}),
            "deep-frozen": (f"deep-watch-{deep_watch.EVALUATION}-frozen-routing-{frozen.every}", frozen, _deep_run,
                            {"freeze_routing": frozen.every}),
            **{f"tunnel-{arm}": (f"tunnel-{windtunnel.EVALUATION}-{arm}", tunnel, _tunnel_arm, {"arm": arm})
               for arm in ("sgd", "em_like")}}

    def prefetch(self):
        """The smaller trainings (`side`: V1's model, W1's deep model and its frozen-routing control, E5's two arms)
        as one campaign on the stage's cluster, each task on one thread, the longest first: these small models gain
        little from a second thread, so two side by side, one thread each, finish sooner than one after another on
        both (at the default sizes on 2 CPU cores: 150 s against 183 s). Results go to the stage's cache, where each
        experiment finds its own; a task that fails is trained again by its experiment, in this process. Only on a
        CPU device with at least 2 threads (elsewhere each trains where it is read). results.json
        experiments.side_trainings: the campaign's figures."""
        if str(self.device) != "cpu" or self.thread_count() < 2:
            return
        side = self.side
        todo = {job: entry for job, entry in side.items()  # a corrupt entry is found, and retrained, by its experiment
                if not self.cache.key(entry[0], entry[1], self.device).exists()}
        if not todo:
            return
        order = list(side)  # priority: the order of `side`, its longest job first
        tasks = [campaign.Task(f"side/{job}", _on_one_thread, (fn, cfg, self.device, kw), priority=len(order) - order.index(job))
                 for job, (_, cfg, fn, kw) in todo.items()]
        t0 = time.perf_counter()
        outcome = campaign.run(tasks, cluster=self.campaign, log=self.log, label="side-trainings")
        for (name, cfg, _, _), result in zip(todo.values(), outcome.results):
            if result is not None:
                sticky.save_atomic(result, self.cache.key(name, cfg, self.device))
        self.data["side_trainings"] = {"jobs": list(todo), "workers": outcome.workers, "computed": outcome.computed,
                                       "failed": outcome.failed, "wall_s": time.perf_counter() - t0}

    def _side(self, job, bar=None):
        """The job's result from the cache, or trained here on the stage's threads (and cached). `bar`: (steps, what)
        of a progress bar shown while it trains here."""
        name, cfg, fn, kw = self.side[job]

        def run():
            if bar is None:
                return fn(cfg, self.device, **kw)
            progress = Progress(*bar, self.log)
            try:
                return fn(cfg, self.device, **kw, progress=lambda: progress.update(1))
            finally:
                progress.close()

        return self.cache.get_or_run(name, cfg, self.device, run, self.log)

    def run(self):
        try:
            self._run()
        finally:
            self.close()

    def close(self):
        """Stop the campaigns' cluster, if one was started."""
        if self._cluster is not None:
            self._cluster.__exit__(None, None, None)
            self._cluster = None

    def _run(self):
        torch.set_num_threads(self.thread_count())
        self.results.environment.setdefault("threads", torch.get_num_threads())
        self.sticky_replay()
        self.typicality()
        self.sticky_fresh()
        self.exactness()
        self.sweep()
        self.speed()
        self.simulations()
        self.prefetch()
        self.tunnel()
        self.deep_model()
        self.value_manifold()
        self.mechanisms()
        self.conjecture()
        self.measured_claims()
        self.negative_controls()
        self.positive_controls()

    def _opt_in(self, job):
        return job in self.sizes.opt_in and not self.extended

    def _check(self, cid, claim, ok, seconds, measured, expected, detail=""):
        self.results.record(Check(cid, "experiments", "experiment", claim, "pass" if ok else "fail", round(seconds, 3),
                                  measured, expected, detail), self.log, note="")

    def _train(self, name, cfg):
        partial = self.cache.key(name, cfg, self.device).with_suffix(".partial")

        def run():
            desc = f"{name} ({len(cfg.arms)} arms x {len(cfg.seeds)} seeds)"
            bar = None

            def start(step):  # after the saved state was read: the bar counts from the resumed step
                nonlocal bar
                if step:
                    self.log(f"  resuming {name} at step {step}/{cfg.steps} from {partial.name}")
                bar = Progress(cfg.steps, desc, self.log, initial=step)

            t0 = time.perf_counter()
            r = sticky.train(cfg, self.device, progress=lambda s: bar.update(1), state_path=partial, on_start=start,
                             log=self.log)
            bar.close()
            partial.unlink(missing_ok=True)
            return {"run": r, "seconds": time.perf_counter() - t0}

        return self.cache.get_or_run(name, cfg, self.device, run, self.log)

    # -- E1-E4 -----------------------------------------------------------------------------------------
    def sticky_replay(self):
        """The paper's five seeds on the authors' streams, both arms, batched as the main run: per-seed
        losses (and, for a full run, entropy, accuracy and the EM-like steps) against the authors' script."""
        cfg = self.cfgs["replay"]
        t0 = time.perf_counter()
        out = self._train("sticky-replay", cfg)
        run = out["run"]
        L = run.losses.numpy()
        full = cfg.steps == replay.AUTHORS_STEPS
        ev = (self.cache.get_or_run("sticky-replay-eval", cfg, self.device,
                                    lambda: sticky.evaluate(cfg, run.params, self.device), self.log) if full else None)
        cmp = replay.compare(list(cfg.seeds), cfg.steps, L, *((ev["entropy"].tolist(), ev["accuracy"].tolist())
                                                              if ev else ()))
        data = {"seeds": list(cfg.seeds), "steps": cfg.steps, "length": cfg.length, "stream": cfg.stream,
                "train_seconds": out["seconds"], **cmp}
        if full:
            sgd, em = L[cfg.arms.index("sgd")], L[cfg.arms.index("em_like")]
            data.update(sgd_final_loss=float(sgd[:, -1].mean()), em_like_final_loss=float(em[:, -1].mean()),
                        arms={a: {"final_loss_per_seed": L[i, :, -1].tolist(),
                                  "final_entropy_per_seed": ev["entropy"][i].tolist(),
                                  "accuracy_per_seed": ev["accuracy"][i].tolist(), "curve": st.curve(run.losses[i])}
                              for i, a in enumerate(cfg.arms)})
        self.data["sticky_replay"] = data
        self._check("experiments/sticky/replay", "E1", cmp["ok"], time.perf_counter() - t0,
                    {"max_loss_error": cmp["max_loss_error"], "max_metric_error": cmp["max_metric_error"],
                     **({"em_steps": cmp["em_steps"], "speedup": cmp["speedup"]} if "em_steps" in cmp else {})},
                    {"loss_tolerance": replay.LOSS_TOL, "metric_tolerance": replay.METRIC_TOL, "reference": cmp["reference"],
                     **({"em_steps": cmp["authors_em_steps"], "speedup": cmp["authors_speedup"]} if "em_steps" in cmp else {})},
                    detail=f"the paper's seeds on the authors' random streams, {cfg.steps} steps, both arms batched")

    def typicality(self):
        """Both protocols on many further seeds (opt-in); the cached study is read whenever present."""
        cfgs = self.cfgs["typicality"]
        t0 = time.perf_counter()
        cache = self.cache.root / typicality.LABEL
        if self._opt_in("typicality") and not campaign.all_cached(typicality.tasks(cfgs), cache):
            return  # opt-in and not all cached: nothing trained unasked
        losses = typicality.run(cfgs, cache_dir=cache, cluster=self.campaign, log=self.log)
        if losses is None:
            return
        ref = self.data.get("sticky_replay", {})
        reference = {"sgd_final_loss": ref.get("sgd_final_loss", replay.authors_mean(0)),
                     "em_like_final_loss": ref.get("em_like_final_loss", replay.authors_mean(1)),
                     "speedup": ref.get("speedup", replay.authors_speedup())}
        study = typicality.analyse(losses, cfgs["authors"].steps, reference, seed=self.seed)
        study["seeds"] = list(cfgs["authors"].seeds)
        self.data["typicality"] = study
        finite = all(np.isfinite(L).all() for L in losses.values())
        self._check("experiments/sticky/typicality", "E1", finite, time.perf_counter() - t0,
                    {p: {"sgd": e["sgd"]["final_loss_mean"], "em_like": e["em_like"]["final_loss_mean"],
                         "speedup": e["speedup"]} for p, e in study["protocols"].items()}, {"finite": True},
                    detail=f"both protocols on {len(study['seeds'])} further seeds, the authors' mu")

    def _runs(self, job, named):
        """The trained runs of `named` [(cache name, cfg)], or None when `job` is opt-in and not every run is
        cached and readable (an opt-in study is reported only whole, and never retrained unasked)."""
        if not self._opt_in(job):
            return [self._train(name, cfg) for name, cfg in named]
        cached = [self.cache.load(self.cache.key(name, cfg, self.device), self.log) for name, cfg in named]
        return None if any(c is None for c in cached) else cached

    def sticky_fresh(self):
        """Both arms (and, where the profile says, our M-step arm) on fresh streams: every group of seeds
        under its draw of mu, one batched run per group, evaluated on its training and held-out sequences."""
        t0 = time.perf_counter()
        groups = []  # (cfg, run, evaluation on the training sequences, on held-out ones, seconds)
        for i, cfg in enumerate(self.cfgs["fresh"]):
            name = f"sticky-fresh-{i}"
            out = self._train(name, cfg)
            run = out["run"]
            ev, held = [self.cache.get_or_run(f"{name}-{kind}", cfg, self.device,
                                              lambda c=cfg, r=run, h=heldout: sticky.evaluate(c, r.params, self.device, heldout=h),
                                              self.log) for kind, heldout in (("eval", False), ("heldout", True))]
            groups.append((cfg, run, ev, held, out["seconds"]))
        self._groups = groups
        report = self._sticky_report(groups)
        report["mu_draws"] = self._mu_draws(groups)
        self.data["sticky_markov"] = report
        losses = [g[1].losses for g in groups]
        finite = all(bool(torch.isfinite(L).all()) for L in losses)
        start = float(torch.cat([L[..., 0].flatten() for L in losses]).mean())
        symbols = groups[0][0].symbols
        self._check("experiments/sticky/valid", "E1", finite and abs(start - math.log(symbols)) < 0.05,
                    time.perf_counter() - t0,
                    {"finite": finite, "start_loss": start, "train_seconds": [g[4] for g in groups]},
                    {"start_loss": f"ln {symbols} = {math.log(symbols):.4f}"},
                    detail=f"{len(groups)} groups of fresh seeds, each under its own draw of mu")
        self._verdicts_e1_e4(report)

    def _arm(self, arm):
        """(losses (S, steps + 1), per-seed evaluation dicts, held-out dicts, seeds) of `arm` over the groups."""
        rows = [(cfg, run.losses[cfg.arms.index(arm)], ev, held, cfg.arms.index(arm))
                for cfg, run, ev, held, _ in self._groups if arm in cfg.arms]
        losses = torch.cat([r[1] for r in rows])
        ev = {k: np.concatenate([np.asarray(r[2][k][r[4]]) for r in rows]) for k in ("loss", "entropy", "accuracy", "kl_bits")}
        held = {k: np.concatenate([np.asarray(r[3][k][r[4]]) for r in rows]) for k in ("loss", "entropy", "accuracy", "kl_bits")}
        return losses, ev, held, [s for r in rows for s in r[0].seeds]

    def _sticky_report(self, groups):
        cfg0 = groups[0][0]
        arms = {}
        for name in dict.fromkeys(a for g in groups for a in g[0].arms):
            L, ev, held, seeds = self._arm(name)
            arms[name] = {
                "seeds": seeds,
                "final_loss": float(L[:, -1].mean()), "final_loss_per_seed": L[:, -1].tolist(),
                "final_entropy": float(ev["entropy"].mean()), "final_entropy_per_seed": ev["entropy"].tolist(),
                "accuracy": float(ev["accuracy"].mean()), "accuracy_per_seed": ev["accuracy"].tolist(),
                "heldout_loss": float(held["loss"].mean()), "heldout_loss_per_seed": held["loss"].tolist(),
                "heldout_entropy": float(held["entropy"].mean()), "heldout_accuracy": float(held["accuracy"].mean()),
                "kl_to_bayes_bits": float(ev["kl_bits"].mean()), "heldout_kl_to_bayes_bits": float(held["kl_bits"].mean()),
                "final_loss_ci95": st.mean_ci(L[:, -1].numpy())[1],
                "curve": st.curve(L),
            }
        sgd, _, _, seeds = self._arm("sgd")
        em = self._arm("em_like")[0]
        sgd, em = sgd.numpy(), em.numpy()
        weights = np.array([len(g[0].seeds) for g in groups], float)

        def floor(part):  # the exact Bayes predictive's metrics, averaged over every fresh seed
            return {k: float(np.average([float(torch.as_tensor(g[part]["bayes"][k]).double().mean()) for g in groups], weights=weights))
                    for k in groups[0][2]["bayes"]}

        out = {"h_min": chain.conditional_entropy(chain.transition_matrix(cfg0.symbols, cfg0.self_prob, cfg0.off_mass)),
               **st.arm_comparison(sgd, em, cfg0.steps, self.seed), "seeds": seeds, "steps": cfg0.steps,
               "length": cfg0.length, "train_seconds": sum(g[4] for g in groups),
               "groups": [{"mu_rng": g[0].mu_rng, "mu_seed": g[0].mu_seed, "seeds": list(g[0].seeds),
                           "arms": list(g[0].arms), "train_seconds": g[4]} for g in groups],
               "bayes_floor": floor(2), "bayes_floor_heldout": floor(3), "arms": arms, "paper": STICKY_FIGURES}
        paper = [seeds.index(s) for s in profiles.PAPER_SEEDS if s in seeds]
        if paper and len(paper) < len(seeds):  # the authors' five seeds alone (our streams), beside the full set
            out["paper_seeds"] = {"seeds": [seeds[i] for i in paper], **st.arm_comparison(sgd[paper], em[paper], cfg0.steps, self.seed),
                                  "sgd_final_loss": float(sgd[paper, -1].mean()),
                                  "em_like_final_loss": float(em[paper, -1].mean())}
        if "em_mstep" in arms:  # same seed = same data and initial weights
            mstep, _, _, mseeds = self._arm("em_mstep")
            out["speedup_em_mstep"] = st.speedup(sgd[[seeds.index(s) for s in mseeds]], mstep.numpy(), cfg0.steps)[0]
        out["frame_precision"] = combine_frames([(len(g[0].seeds), frame_precision(g[0], g[1])) for g in groups])
        return out

    def _mu_draws(self, groups):
        """Each group's two arms under its draw of mu (the authors' draw is torch float32, seed 0): means over
        the group's seeds, and the range of the per-group speedups. The groups have different seeds, so a
        difference between groups is mu's and the seeds' together; no interval is put over groups."""
        out = []
        for cfg, run, *_ in groups:
            L = run.losses.numpy()
            sgd, em = L[cfg.arms.index("sgd")], L[cfg.arms.index("em_like")]
            out.append({"mu_rng": cfg.mu_rng, "mu_seed": cfg.mu_seed, "seeds": list(cfg.seeds),
                        "sgd_final_loss": float(sgd[:, -1].mean()), "em_like_final_loss": float(em[:, -1].mean()),
                        **st.arm_comparison(sgd, em, cfg.steps, self.seed)})
        speedups = [d["speedup"] for d in out]
        return {"seeds_per_draw": [len(d["seeds"]) for d in out], "draws": out, "speedup_mean": float(np.mean(speedups)),
                "speedup_range": [min(speedups), max(speedups)],
                "sgd_final_loss_range": [min(d["sgd_final_loss"] for d in out), max(d["sgd_final_loss"] for d in out)],
                "em_like_final_loss_range": [min(d["em_like_final_loss"] for d in out),
                                             max(d["em_like_final_loss"] for d in out)]}

    def _verdicts_e1_e4(self, r):
        """E1-E3 answer two questions, each by the same rule (numeric.experiments.rules): do the paper's
        numbers come out of the paper's own streams (the replay), and does the effect hold on fresh
        streams (every fresh seed)? The claim's verdict is the fresh one; both are recorded."""
        sgd, em = self._arm("sgd")[0].numpy(), self._arm("em_like")[0].numpy()
        cfg = self.cfgs["fresh"][0]
        arms, pp = r["arms"], r["paper"]
        per_seed = {a: {"loss": arms[a]["final_loss_per_seed"], "entropy": arms[a]["final_entropy_per_seed"],
                        "accuracy": arms[a]["accuracy_per_seed"]} for a in ("sgd", "em_like")}
        m = self._measurements
        m["E1"] = {"sgd": sgd, "em": em, "steps": cfg.steps, "paper_speedup": pp["speedup"]}
        m["E2"] = {"entropy_sgd": per_seed["sgd"]["entropy"], "entropy_em": per_seed["em_like"]["entropy"],
                   "h_min": r["h_min"], "m": cfg.symbols}
        m["E3"] = {"sgd": per_seed["sgd"], "em": per_seed["em_like"]}
        fresh = {cid: REGISTRY[cid].rule(**m[cid], **({"seed": self.seed} if cid == "E1" else {})) for cid in ("E1", "E2", "E3")}
        # each fresh seed's draw of mu (its group), for E2's positive control only (the rule reads no groups)
        m["E2"]["groups"] = [i for i, g in enumerate(self._groups) for _ in g[0].seeds]
        replayed = self._replay_verdicts(r)
        mu, study = r["mu_draws"], self.data.get("typicality")
        context = {
            "E1": f" Per draw of mu ({len(mu['draws'])} groups of {'/'.join(map(str, sorted(set(mu['seeds_per_draw']))))} seeds): speedup "
                  f"{mu['speedup_range'][0]:.2f}-{mu['speedup_range'][1]:.2f}x."
                  + (f" Typicality study: {typicality.summary(study)}." if study else ""),
            "E2": f" Exact Bayes floor {r['bayes_floor']['entropy']:.4f} nats.",
            "E3": f" Held-out loss EM-like {arms['em_like']['heldout_loss']:.3f} vs SGD {arms['sgd']['heldout_loss']:.3f}."}
        n = len(r["seeds"])
        for cid in ("E1", "E2", "E3"):
            f, (rv, rwhy) = fresh[cid], replayed[cid]
            self._rule_check(cid, "replay", rv, rwhy,
                             on=f"Paper's streams (seeds {', '.join(map(str, sticky.PAPER_SEEDS))} replayed)")
            self._rule_check(cid, "fresh", f.verdict, f.reason, f.measured, on=f"Fresh streams ({n} seeds)",
                             seeds=n, context=context[cid].strip())
        fp = r["frame_precision"]
        m["E4"] = {"arms": rules.e4_inputs(fp)}
        e4 = REGISTRY["E4"].rule(**m["E4"])
        self._rule_check("E4", "rule", e4.verdict, e4.reason, e4.measured)

    def conjecture(self):
        """Every mechanism and the real LSTM on the conjecture's tasks (`conjecture_tasks`: bijection recall, the
        enlarged wind tunnel; the mechanism tunnel's campaign, cached under DIR/cache/mechanism-tunnel), each arm at
        the rate chosen on validation sequences, with the floors beside them and the content_routing and competition
        labels of the mechanisms table: results.json experiments.conjecture.<task>, G3's inputs
        (numeric/experiments/rules/g3.py)."""
        from numeric.experiments import mechanism_grid as mg
        from numeric.experiments import mechanism_layers as ml
        from numeric.experiments import mechanism_tunnel as mt

        z = self.sizes
        table = self.results.derive.get("mechanisms")
        labels, source = mg.content_routing_labels(table, ml.names())
        competition, _ = mg.structural_labels(table, ml.names(), "competition")
        out = {}
        cfgs = [mt.conjecture_config(z, name) for name in z.conjecture_tasks]
        t0 = time.perf_counter()  # every task's models in one campaign: no worker waits between two tasks
        summaries, outcome = mt.run_all(cfgs, cache_dir=self.cache.root / mt.LABEL, cluster=self.campaign, log=self.log)
        wall = time.perf_counter() - t0
        for name, cfg, summary in zip(z.conjecture_tasks, cfgs, summaries):
            task = cfg.tunnel
            failed = {k: v for k, v in outcome.failed.items() if k.endswith(f"/{cfg.key()}")}
            ok = [m for m, x in summary.items() if not x.get("failed") and x["finite"]]
            floors = next((summary[m]["floors"] for m in ok), {})
            out[name] = {
                "config": dataclasses.asdict(cfg), "mechanisms": summary, "floors": floors, "content_routing": labels,
                "competition": competition, "labels_source": source, "baselines": list(ml.baselines()),
                "parameters": {m: _parameter_count(cfg, m) for m in cfg.mechanisms},
                "bayes_entropy_by_position": next((summary[m].get("bayes_entropy_by_position") for m in ok), None),
                "campaign": {"workers": outcome.workers, "computed": outcome.computed, "cached": outcome.cached,
                             "failed": failed, "wall_s": wall, "tasks": list(z.conjecture_tasks),
                             "train_s": float(sum(x.get("timing", 0.0) for x in summary.values()))}}
            self._check(f"experiments/conjecture/{name}-valid", "G3", len(ok) == len(cfg.mechanisms) and not failed,
                        wall, {"valid": ok, "failed_tasks": failed, "tasks_computed": outcome.computed},
                        {"finite": True}, detail=f"{len(cfg.mechanisms)} models x {len(cfg.seeds)} seeds x 2 arms x "
                                                 f"{len(cfg.rates())} rates, {task.steps} Adam steps of {task.batch} "
                                                 f"sequences ({name})")
            for m, x in summary.items():  # training time per mechanism against the paper's mechanism's
                if "timing" in x and mechanisms.PAPER in summary and "timing" in summary[mechanisms.PAPER]:
                    ref = summary[mechanisms.PAPER]["timing"]
                    self.results.benchmarks.append({
                        "name": f"experiments/conjecture/{name}/{m}", "device": "cpu", "dtype": cfg.dtype,
                        "shape": {"steps": task.steps, "batch": task.batch, "seeds": len(cfg.seeds),
                                  "rates": len(cfg.rates())}, "threads": 1,
                        "ours_s": x["timing"], "reference": f"{mechanisms.PAPER}'s training (same task, 1 thread)",
                        "reference_s": ref, "ratio": x["timing"] / ref if ref else float("nan")})
        self.data["conjecture"] = _plain(out)

    def measured_claims(self):
        """The claims measured from the other experiments' numbers (a module's CLAIM in numeric/experiments/rules, a
        user's claims file): each rule on its measurement, with its controls (results.json
        experiments.measured_claims, one report section each)."""
        out = {}
        for claim in REGISTRY.values():
            if claim.measure is not None:
                entry = _measured_claim(self, claim)
                if entry is not None:
                    out[claim.id] = entry
        if out:
            self.data["measured_claims"] = out

    def _rule_check(self, cid, label, verdict, reason, measured=None, on="", **extra):
        """The verdict of claim `cid`'s rule on one question (`label`), recorded as a check: derive.verdict
        turns a claim's checks into its verdict. It fails when the rule's measurements are not finite."""
        measured = _plain(measured or {})
        finite = all(math.isfinite(x) for x in _numbers(measured))
        self.results.record(Check(f"experiments/{cid}/verdict/{label}", "experiments", "rule", cid,
                                  "pass" if finite else "fail", 0.0,
                                  {"verdict": verdict, "reason": reason, "measured": measured, **extra},
                                  {"thresholds": _plain(REGISTRY[cid].thresholds)}, on), self.log, note=verdict)

    def _replay_verdicts(self, r):
        """(verdict, reason) per E1-E3 on the authors' streams. A shortened replay (quick profile) checks the
        streams only; a replay that does not end where the authors' script ends decides nothing."""
        rp = self.data.get("sticky_replay", {})
        if "arms" not in rp:
            why = (f"replay shortened to {rp.get('steps')} steps in this profile: the streams were checked "
                   f"(losses equal the script's and our full replay's to {rp.get('max_loss_error', float('nan')):.1e}), "
                   f"the verdict needs the full 1000 steps")
            return {cid: ("not-run", why) for cid in ("E1", "E2", "E3")}
        if not rp["ok"]:
            why = (f"our replay does not end where the authors' script ends (largest loss error "
                   f"{rp['max_loss_error']:.1e}, EM-like steps {rp.get('em_steps')} vs {rp.get('authors_em_steps')})")
            return {cid: ("not-reproduced", why) for cid in ("E1", "E2", "E3")}
        pp, a = r["paper"], rp["arms"]
        rule = rules.e1_replay(rp, pp)
        e1 = (rule.verdict, f"{rule.reason}; seed for seed equal to the authors' script (largest loss error "
                            f"{rp['max_loss_error']:.1e})")
        e2 = REGISTRY["E2"].rule(a["sgd"]["final_entropy_per_seed"], a["em_like"]["final_entropy_per_seed"], r["h_min"],
                      self.cfgs["replay"].symbols)
        e3 = REGISTRY["E3"].rule(*({"loss": a[arm]["final_loss_per_seed"], "entropy": a[arm]["final_entropy_per_seed"],
                         "accuracy": a[arm]["accuracy_per_seed"]} for arm in ("sgd", "em_like")))
        return {"E1": e1, "E2": (e2.verdict, e2.reason), "E3": (e3.verdict, e3.reason)}

    def negative_controls(self):
        """Every E-rule on inputs where it must say not-reproduced, derived from this run's own numbers
        where a control can be (rules.negative_controls), as the analytic claims have mutants."""
        t0 = time.perf_counter()
        controls = rules.negative_controls(self._measurements)
        seconds = (time.perf_counter() - t0) / max(1, len(controls))
        for cid, rule in controls.items():
            claim = cid.split("/")[0]
            self.results.record(Check(f"experiments/negative-control/{cid}", "experiments", "negative-control", claim,
                                      "pass" if rule.verdict == "not-reproduced" else "fail", round(seconds, 3),
                                      {"verdict": rule.verdict, "reason": rule.reason}, {"verdict": "not-reproduced"}),
                                self.log, note=rule.verdict)

    def positive_controls(self):
        """Every E-rule on an input where its phenomenon holds by construction; each must say reproduced
        (rules.positive_controls): derived from this run's numbers (E1, E2, E3, E7), synthetic (E5), or measured
        on a constructed run (E6: the natural-gradient score step of the same simulation; E4 and W1: trained
        here, `_frozen_sticky` and `_frozen_deep`). Recorded as the negative controls are, with status pass
        when the rule says reproduced."""
        runs, extra, built = dict(self._constructed), {}, {}
        for claim, make in (("E4", self._frozen_sticky), ("W1", self._frozen_deep)):
            if claim in self._measurements:
                t0 = time.perf_counter()
                runs[claim], extra[claim] = make()
                built[claim] = time.perf_counter() - t0
        report = {}
        for claim in REGISTRY:
            t0 = time.perf_counter()
            controls = rules.positive_controls({claim: self._measurements[claim]} if claim in self._measurements else {},
                                               {claim: runs[claim]} if claim in runs else {})
            seconds = built.get(claim, 0.0) + time.perf_counter() - t0
            for cid, rule in controls.items():
                ok = rule.verdict == "reproduced"
                self.results.record(Check(f"experiments/positive-control/{cid}", "experiments", "negative-control", claim,
                                          "pass" if ok else "fail", round(seconds / len(controls), 3),
                                          {"verdict": rule.verdict, "reason": rule.reason}, {"verdict": "reproduced"},
                                          rules.POSITIVE_CONTROLS[cid]), self.log, note=rule.verdict)
                report[cid] = {"claim": claim, "construction": rules.POSITIVE_CONTROLS[cid], "verdict": rule.verdict,
                               "reason": rule.reason, "seconds": seconds / len(controls), **extra.get(claim, {}),
                               "measured": _plain(rule.measured)}
        self.data["positive_controls"] = report

    def _frozen_sticky(self):
        """E4's constructed run: the first fresh group's first seed, both arms, the profile's steps at a length of
        at most 1000 (a control need not be the experiment's size: a quarter of its cost), with W_Q and W_K frozen
        after a tenth of the steps (sticky.train's freeze_routing); the E4 rule's input is its frame-precision
        curves. Returns (rule input, what results.json keeps)."""
        base = self.cfgs["fresh"][0]
        cfg = dataclasses.replace(base, seeds=base.seeds[:1], arms=("sgd", "em_like"), length=min(base.length, 1000))
        freeze = max(1, cfg.steps // 10)

        def run():
            bar = Progress(cfg.steps, f"sticky-frozen-routing ({len(cfg.arms)} arms x {len(cfg.seeds)} seeds)", self.log)
            t0 = time.perf_counter()
            r = sticky.train(cfg, self.device, progress=lambda s: bar.update(1), freeze_routing=freeze)
            bar.close()
            return {"run": r, "seconds": time.perf_counter() - t0}

        out = self.cache.get_or_run(f"sticky-frozen-routing-{freeze}", cfg, self.device, run, self.log)
        inputs = rules.e4_inputs(frame_precision(cfg, out["run"]))
        return {"arms": inputs}, {"seeds": list(cfg.seeds), "steps": cfg.steps, "length": cfg.length,
                                  "freeze_after_step": freeze, "train_seconds": out["seconds"], "curves": inputs}

    def _frozen_deep(self):
        """W1's constructed run: the watched model at the profile's sizes with one layer (from the second layer on,
        attention reads the earlier layers' values, which keep learning: no parameter freeze fixes it there),
        every optimizer and seed, its routing (deep_watch.routing_parameters) frozen after the first watched
        interval; the W1 rule's input is its drifts. Returns (rule input, what results.json keeps)."""
        _, cfg, _, kw = self.side["deep-frozen"]
        freeze = kw["freeze_routing"]
        out = self._side("deep-frozen", (cfg.steps * len(cfg.seeds) * len(deep_watch.OPTIMIZERS),
                                         f"deep-watch-frozen-routing ({len(deep_watch.OPTIMIZERS)} optimizers x "
                                         f"{len(cfg.seeds)} seeds, 1 layer)"))
        return {"optimizers": deep_watch.rule_inputs(out, cfg)}, {
            "seeds": list(cfg.seeds), "steps": cfg.steps, "layers": cfg.layers, "heads": cfg.heads,
            "freeze_after_step": freeze, "train_seconds": out["seconds"], "finite": deep_watch.finite(out)}

    # -- exactness, sweep, speed ----------------------------------------------------------------------
    def exactness(self):
        cfg = self.cfgs["exact"]
        t0 = time.perf_counter()
        run = sticky.train(cfg, self.device)
        worst = 0.0
        for a, arm in enumerate(cfg.arms):
            for s in range(len(cfg.seeds)):
                ref, _ = sticky.reference_run(cfg, arm, s, cfg.steps, self.device)
                worst = max(worst, float((torch.tensor(ref, dtype=torch.float64) - run.losses[a, s, : cfg.steps]).abs().max()))
        self._check("experiments/sticky/batched-equals-sequential", "E1", worst <= 1e-10, time.perf_counter() - t0,
                    {"max_abs_loss_difference": worst, "steps": cfg.steps, "runs": len(cfg.arms) * len(cfg.seeds)},
                    {"tolerance": 1e-10, "dtype": "float64"},
                    detail="batched block-causal generated gradients vs one-run-at-a-time dense autograd, step by step")

    def sweep(self):
        """Value/routing LR ratios (ratio 1 is plain SGD), one batched run over seeds per ratio (a single run
        over every ratio was measured slower on 2 cores: a larger working set). Ratios 1 and 10 are the two
        arms of the first fresh group on these seeds, read from it. Opt-in where the profile says so."""
        base = self.cfgs["sweep"]
        t0 = time.perf_counter()
        group, (_, run, *_) = self.cfgs["fresh"][0], self._groups[0]
        rows = [group.seeds.index(s) for s in base.seeds]
        reuse = {1: group.arms.index("sgd"), ARMS_RATIO["em_like"]: group.arms.index("em_like")}
        trained = [r for r in self.sizes.sweep_ratios if r not in reuse]
        named = [(f"lr-ratio-{r}", dataclasses.replace(base, arms=("em_like",), value_lrs=(0.01 * r,))) for r in trained]
        runs = self._runs("sweep", named)
        if runs is None:
            return
        got = {r: out["run"].losses[0].numpy() for r, out in zip(trained, runs)}  # (seeds, steps + 1)
        ratios = sorted(self.sizes.sweep_ratios)
        curves = [got[r] if r in got else run.losses[reuse[r]][rows].numpy() for r in ratios]
        sgd = curves[0]
        points = [{"ratio": r, "speedup": st.speedup(sgd, c, base.steps)[0], "final_loss": float(c[:, -1].mean())}
                  for r, c in zip(ratios, curves)]
        self.data["lr_ratio_sweep"] = {"points": points, "seeds": list(base.seeds), "steps": base.steps}
        ok = all(math.isfinite(p["final_loss"]) and math.isfinite(p["speedup"]) for p in points)
        self._check("experiments/lr-ratio-sweep", "E1", ok, time.perf_counter() - t0, points,
                    {"ratios": ratios}, detail="speedup of each ratio against ratio 1 (SGD)")

    def speed(self):
        cfg, steps = self.cfgs["speed"], self.cfgs["speed_steps"]
        t0 = time.perf_counter()
        res = speed.compare(cfg, steps, self.device)
        main = self.data["sticky_markov"]
        res["our_main_run_seconds"] = main["train_seconds"]
        res["our_main_run_runs"] = sum(len(c.arms) * len(c.seeds) for c in self.cfgs["fresh"])
        self.data["speed_vs_sequential"] = res
        self.results.benchmarks.append({
            "name": "experiments/sticky-chain-vs-sequential-loop", "device": self.device, "dtype": cfg.dtype,
            "shape": {"length": cfg.length, "seeds": len(cfg.seeds), "arms": len(cfg.arms), "steps": cfg.steps},
            "ours_s": res["ours_full_run_s"], "reference": "sequential autograd loop, one seed and arm at a time",
            "reference_s": res["sequential_full_run_s"], "ratio": res["ours_full_run_s"] / res["sequential_full_run_s"]})
        self._check("experiments/speed-vs-sequential", "E1", res["max_abs_loss_difference"] <= 1e-4,
                    time.perf_counter() - t0, res, {"same_numbers_float32": 1e-4, "goal_speedup": 4.0})
        if self.device == "cpu":  # where the step's time goes, against the machine's matrix-product rate
            from numeric.experiments import roofline

            t0 = time.perf_counter()
            point = roofline.roofline(cfg, min(steps, 10), min_seconds=self.sizes.roofline_min_seconds)
            # the sequential loop's step (speed.compare, same runs and process) over the products' floor: no step built
            # of these products runs faster than that against it
            point["sequential_step_s"] = res["sequential_timed_s"] / res["timed_steps"]
            point["speedup_bound"] = point["sequential_step_s"] / point["products_s"]
            self.data["step_roofline"] = point
            self.results.benchmarks.append({
                "name": "experiments/sticky-step-roofline", "device": "cpu", "dtype": cfg.dtype,
                "shape": {"length": cfg.length, "runs": point["runs"]}, "threads": point["threads"],
                "ours_s": point["step_s"], "gflops": point["gflops"],
                "reference": "the step's FLOPs at the float32 product rate of its largest shape (same threads)",
                "reference_gflops": point["ceiling"]["step_shape"]["gflops"],
                "reference_s": point["flops"] / (point["ceiling"]["step_shape"]["gflops"] * 1e9),
                "ratio": 1.0 / point["fraction_of_step_shape_ceiling"]})
            if point.get("fused"):  # the step as trained on the CPU, against the generated kernels' step
                self.results.benchmarks.append({
                    "name": "experiments/sticky-step-fused", "device": "cpu", "dtype": cfg.dtype,
                    "shape": {"length": cfg.length, "runs": point["runs"]}, "threads": point["fused"]["threads"],
                    "ours_s": point["fused"]["step_s"], "gflops": point["fused"]["gflops"],
                    "reference": "the generated kernels' step (whole-tile tensor operations), same process",
                    "reference_s": point["step_s"], "ratio": point["fused"]["step_s"] / point["step_s"]})
            self._check("experiments/step-roofline", "E1", point["flops"] == point["counted_flops"],
                        time.perf_counter() - t0, {k: point[k] for k in ("step_s", "flops", "counted_flops", "gflops",
                                                                          "thread_idle_share",
                                                                          "fraction_of_step_shape_ceiling",
                                                                          "fraction_of_square_ceiling")},
                        {"flops": "the count from the shapes equals torch's FLOP counter on one step"},
                        detail="the sticky step per component, its FLOPs and the ceiling")

    # -- E5-E7 ----------------------------------------------------------------------------------------
    def simulations(self):
        cfg = self.cfgs["dynamics"]
        t0 = time.perf_counter()
        e6 = dynamics.advantage_sign_agreement(cfg, self.device)
        e7 = dynamics.specialisation(cfg, self.device)
        c9 = dynamics.saturation(cfg, self.device)
        self.data["dynamics"] = {"advantage_sign": e6, "specialisation": e7, "saturation": c9}
        worst = max(c9["worst_bound_ratio"])
        self._check("experiments/saturation-bound", "C9", worst <= 1 + 1e-9, time.perf_counter() - t0,
                    {"worst_ratio_to_bound": worst, "ds_norm": c9["ds_norm"], "dv_norm": c9["dv_norm"]},
                    {"ratio_at_most": 1.0})
        self._measurements["E6"] = {"agreement": e6["scores"][0], "control_agreement": e6["scores_control"][0]}
        self._constructed["E6"] = {"agreement": e6["scores_natural"][0], "control_agreement": e6["scores_natural_control"][0]}
        self._measurements["E7"] = {"spec": e7}
        for cid in ("E6", "E7"):
            rule = REGISTRY[cid].rule(**self._measurements[cid])
            self._rule_check(cid, "rule", rule.verdict, rule.reason, rule.measured)

    def tunnel(self):
        cfg = self.cfgs["tunnel"]
        t0 = time.perf_counter()
        out = {}
        for arm in ("sgd", "em_like"):
            out[arm] = self._side(f"tunnel-{arm}")
        self.data["wind_tunnel"] = {"config": dataclasses.asdict(cfg), "arms": out}
        finite = all(math.isfinite(out[a]["kl_bits"]) for a in out)
        self._check("experiments/wind-tunnel", "E5", finite, time.perf_counter() - t0,
                    {a: {k: out[a][k] for k in ("kl_bits", "entropy_mae_bits", "explained_variance", "spearman_pc1_entropy",
                                                "within_symbol")} for a in out}, {"finite": True})
        self._measurements["E5"] = {"arms": out}
        rule = REGISTRY["E5"].rule(out)
        self._rule_check("E5", "rule", rule.verdict, rule.reason, rule.measured)

    def _mechanism_tunnel(self, labels, source, routes=None):
        """Every mechanism in E5's wind tunnel under both arms (numeric.experiments.mechanism_tunnel, a campaign on
        the stage's cluster, cached under DIR/cache/mechanism-tunnel; --extended: E5's own steps and batch), and the
        G2 rule on the EM-like arm's KL to Bayes against the competition labels, with its controls."""
        from numeric.experiments import mechanism_tunnel as mt

        cfg = mt.from_sizes(self.sizes, self.cfgs["tunnel"], self.extended)
        t0 = time.perf_counter()
        summary, outcome = mt.run(cfg, cache_dir=self.cache.root / mt.LABEL, cluster=self.campaign, log=self.log)
        wall = time.perf_counter() - t0
        ok = [m for m, s in summary.items() if not s.get("failed") and s["finite"]]
        kl = {m: summary[m]["arms"][rules.G2_ARM]["kl_bits_per_seed"] for m in ok}
        measurement = {"kl": kl, "competition": labels, "seed": self.seed}
        rule = REGISTRY["G2"].rule(**measurement)
        by_content = REGISTRY["G2"].rule(**{**measurement, "competition": routes or {}}, group="content-routing")
        controls = rules.g2_controls(measurement)
        self.data["mechanisms"]["tunnel"] = _plain({
            "config": dataclasses.asdict(cfg), "mechanisms": summary, "labels_source": source,
            "rule": {"verdict": rule.verdict, "reason": rule.reason, "measured": rule.measured},
            "rule_by_content_routing": {"verdict": by_content.verdict, "reason": by_content.reason,
                                        "measured": by_content.measured},
            "controls": {cid: {"kind": kind, "construction": rules.G2_CONSTRUCTIONS[cid], "verdict": r.verdict,
                               "reason": r.reason} for cid, (kind, r) in controls.items()},
            "campaign": {"workers": outcome.workers, "computed": outcome.computed, "cached": outcome.cached,
                         "failed": outcome.failed, "seconds": outcome.seconds, "wall_s": wall}})
        which = "E5's sizes, --extended" if self.extended else f"the {self.profile.name} profile's tunnel"
        on = (f"{len(cfg.mechanisms)} mechanisms x {len(cfg.seeds)} seeds x 2 arms, {cfg.tunnel.steps} steps of "
              f"{cfg.tunnel.batch} sequences ({which})")
        self._check("experiments/mechanisms/tunnel-valid", "G2", len(ok) == len(cfg.mechanisms) and not outcome.failed,
                    wall, {"valid": ok, "failed_tasks": outcome.failed, "tasks_computed": outcome.computed,
                           "tasks_cached": outcome.cached}, {"finite": True}, detail=on)
        self._rule_check("G2", "rule", rule.verdict, rule.reason, rule.measured, on=on, seeds=len(cfg.seeds),
                         context=f"Competition labels: {source}.")
        self._rule_check("G2", "content-routing", by_content.verdict, by_content.reason, by_content.measured,
                         on="the same runs, partitioned by the content_routing cell (the paper's partition)",
                         seeds=len(cfg.seeds))
        _record_controls(self, "G2", controls, rules.G2_CONSTRUCTIONS)

    # -- W1: E4 in a deep model ---------------------------------------------------------------------------
    def deep_model(self):
        """Three optimizers on each seed's stream and initial weights, watched on a fixed probe batch; the W1
        rule on the watcher's routing and value drifts per layer x head."""
        cfg = self.cfgs["deep"]
        t0 = time.perf_counter()
        out = self._side("deep", (cfg.steps * len(cfg.seeds) * len(deep_watch.OPTIMIZERS),
                                  f"deep-watch ({len(deep_watch.OPTIMIZERS)} optimizers x {len(cfg.seeds)} seeds)"))
        self._measurements["W1"] = {"optimizers": deep_watch.rule_inputs(out, cfg)}
        rule = REGISTRY["W1"].rule(**self._measurements["W1"])
        data = deep_watch.summarise(out, cfg, rule.measured["optimizers"])
        data.update(config=dataclasses.asdict(cfg), train_seconds=out["seconds"], verdict=rule.verdict)
        self.data["deep_watch"] = data
        opts = data["optimizers"]
        self._check("experiments/deep-watch", "W1", deep_watch.finite(out), time.perf_counter() - t0,
                    {"train_seconds": out["seconds"], "min_c9_slack": data["min_c9_slack"],
                     **{n: {"final_loss": o["final_loss"], "kl_bits": o["kl_bits"]} for n, o in opts.items()}},
                    {"finite": True, "kl_bits_at_least": 0.0},
                    detail=f"{cfg.layers} layers x {cfg.heads} heads, {len(cfg.seeds)} seeds x {len(opts)} optimizers, "
                           f"{cfg.steps} steps, watched every {cfg.every}")
        self._rule_check("W1", "rule", rule.verdict, rule.reason, rule.measured,
                         on=f"Deep model ({len(cfg.seeds)} seeds x {len(opts)} optimizers)", seeds=len(cfg.seeds))


    # -- V1 (ours): the value manifold of a GPT-2-style model ----------------------------------------------------------
    def value_manifold(self):
        """A small GPT-2-style model trained in E5's wind tunnel (numeric.experiments.gpt_tunnel, on the stage's
        threads, cached), the manifold diagnostic (numeric.manifold) on every layer's value vectors and attention outputs on
        held-out sequences, and the V1 rule against the model's predictive entropy (the claim's verdict) and against
        the exact Bayes entropy, with its controls: results.json experiments.value_manifold."""
        cfg = self.cfgs["manifold"]
        t0 = time.perf_counter()
        out = _plain(self._side("manifold"))
        by_model = REGISTRY["V1"].rule(out["model"], reference="model")
        by_bayes = REGISTRY["V1"].rule(out["bayes"], reference="bayes")
        controls = rules.v1_controls({"units": out["model"], "shuffled": out["shuffled"], "seed": self.seed})
        self.data["value_manifold"] = _plain({
            **out, "sites": cfg.sites(),
            "rule": {"verdict": by_model.verdict, "reason": by_model.reason, "measured": by_model.measured},
            "rule_bayes": {"verdict": by_bayes.verdict, "reason": by_bayes.reason, "measured": by_bayes.measured},
            "controls": {cid: {"kind": kind, "construction": rules.V1_CONSTRUCTIONS[cid], "verdict": r.verdict,
                               "reason": r.reason} for cid, (kind, r) in controls.items()},
            "seconds": time.perf_counter() - t0})
        found = sorted(out["layers"])
        finite = math.isfinite(out["kl_bits"]) and math.isfinite(out["final_loss"])
        on = (f"{cfg.layers} blocks x {cfg.heads} heads, d_model {cfg.d_model}, {cfg.steps} AdamW steps of {cfg.batch} "
              f"sequences (length {cfg.length}), {cfg.eval_batch} held-out sequences, {cfg.resamples} resamples")
        self._check("experiments/value-manifold", "V1", finite and found == sorted(cfg.sites()), time.perf_counter() - t0,
                    {"layers_captured": found, "final_loss": out["final_loss"], "kl_bits": out["kl_bits"],
                     "entropy_mae_bits": out["entropy_mae_bits"], "train_seconds": out["train_seconds"]},
                    {"layers": cfg.sites(), "finite": True}, detail=on)
        self._rule_check("V1", "model-entropy", by_model.verdict, by_model.reason, by_model.measured,
                         on=f"against the model's predictive entropy ({on})")
        self._rule_check("V1", "bayes-entropy", by_bayes.verdict, by_bayes.reason, by_bayes.measured,
                         on="the same vectors against the exact Bayes entropy")
        _record_controls(self, "V1", controls, rules.V1_CONSTRUCTIONS)

    # -- G1 (ours): every routing mechanism under both schedules -------------------------------------------------
    def mechanisms(self):
        """Every routing mechanism on the sticky chain under sgd and em_like (numeric.experiments.
        mechanism_grid: one Dask task per mechanism and group of seeds, on CPU workers whatever --device says,
        cached under DIR/cache/mechanism-grid), the G1 rule on their curves against the mechanisms table's
        competition labels, its negative and positive controls, and each mechanism's step time against softmax's.
        The profile's reduced grid, or with --extended the full one (the sticky experiment's sizes)."""
        from numeric.experiments import mechanism_grid as mg

        full = self.extended
        cfg = mg.from_sizes(self.sizes.mechanism_grid_extended if full else self.sizes.mechanism_grid)
        which = "full grid, --extended" if full else f"the {self.profile.name} profile's grid"
        t0 = time.perf_counter()
        merged, outcome = mg.run(cfg, cache_dir=self.cache.root / mg.LABEL, cluster=self.campaign, log=self.log)
        wall = time.perf_counter() - t0
        summary = mg.summarise(cfg, merged)
        labels, source = mg.competition_labels(self.results.derive.get("mechanisms"), cfg.mechanisms)
        routes, _ = mg.content_routing_labels(self.results.derive.get("mechanisms"), cfg.mechanisms)
        measurement = {"curves": mg.curves(merged), "competition": labels, "steps": cfg.steps, "seed": self.seed,
                       "shares": mg.content_shares(cfg)}
        rule = REGISTRY["G1"].rule(**measurement)
        # the paper's partition: the same rule with the content_routing cell's labels (restated, not the claim's own)
        by_content = REGISTRY["G1"].rule(**{**measurement, "competition": routes}, group="content-routing")
        for m, x in rule.measured["mechanisms"].items():
            summary[m].update({k: x[k] for k in ("competition", "speedup", "ci95", "baseline", "excess", "excess_ci95",
                                                 "gains", "content_share", "excess_share_residual")})
        controls = rules.g1_controls(measurement)
        times = mg.step_times(cfg, steps=self.sizes.mechanism_bench_steps, forms=True, log=self.log)
        T = cfg.length - 1
        self.data["mechanisms"] = _plain({
            "grid": which, "config": dataclasses.asdict(cfg), "length": T, "steps": cfg.steps,
            "seeds": list(cfg.seeds), "arms": list(cfg.arms), "learning_rates": mg.ARMS,
            "routing": {m: list(mg.ml.routing(m)) for m in cfg.mechanisms},
            "content": {m: list(mg.ml.content(m)) for m in cfg.mechanisms},
            "content_share": mg.content_shares(cfg), "parameter_counts": mg.parameter_counts(cfg),
            "competition": labels, "content_routing": routes, "labels_source": source, "mechanisms": summary,
            "rule": {"verdict": rule.verdict, "reason": rule.reason, "measured": rule.measured},
            "rule_by_content_routing": {"verdict": by_content.verdict, "reason": by_content.reason,
                                        "measured": by_content.measured},
            "controls": {cid: {"kind": kind, "construction": rules.G1_CONSTRUCTIONS[cid], "verdict": r.verdict,
                               "reason": r.reason} for cid, (kind, r) in controls.items()},
            "campaign": {"workers": outcome.workers, "computed": outcome.computed, "cached": outcome.cached,
                         "failed": outcome.failed, "seconds": outcome.seconds, "wall_s": wall},
            "step_seconds": {k: v["median_s"] for k, v in times.items()}, "step_reference": mechanisms.PAPER,
            "roofline": _roofline_points(cfg, times)})
        ok = [m for m in cfg.mechanisms if merged.get(m) is not None and merged[m]["finite"]
              and abs(float(np.mean([row[0] for row in merged[m]["losses"][0]])) - math.log(cfg.base.symbols)) < 0.1]
        self._check("experiments/mechanisms/valid", "G1", len(ok) == len(cfg.mechanisms) and not outcome.failed, wall,
                    {"valid": ok, "failed_tasks": outcome.failed,
                     "tasks_computed": outcome.computed, "tasks_cached": outcome.cached, "workers": outcome.workers},
                    {"finite": True, "start_loss": f"within 0.1 of ln {cfg.base.symbols}"},
                    detail=f"{len(cfg.mechanisms)} mechanisms x {len(cfg.seeds)} seeds x {len(cfg.arms)} arms, T = {T}, "
                           f"{cfg.steps} steps ({which})")
        self._rule_check("G1", "rule", rule.verdict, rule.reason, rule.measured,
                         on=f"{len(rule.measured['mechanisms'])} mechanisms x {len(cfg.seeds)} seeds, T = {T}, "
                            f"{cfg.steps} steps ({which})", seeds=len(cfg.seeds),
                         context=f"Competition labels: {source}.")
        self._rule_check("G1", "content-routing", by_content.verdict, by_content.reason, by_content.measured,
                         on="the same runs, partitioned by the content_routing cell (the paper's partition)",
                         seeds=len(cfg.seeds))
        _record_controls(self, "G1", controls, rules.G1_CONSTRUCTIONS)  # as the E-rules' controls are
        self._mechanism_tunnel(labels, source, routes)
        base = times[mechanisms.PAPER]["median_s"] if mechanisms.PAPER in times else float("nan")
        for name, t in times.items():
            mech, _, form = name.partition("/")
            ref, ref_s = (("its quadratic form (same sizes, 1 thread)", times[mech]["median_s"]) if form else
                          (f"{mechanisms.PAPER}'s training step (same sizes, 1 thread)", base))
            self.results.benchmarks.append({
                "name": f"experiments/mechanism-step/{name}", "device": "cpu", "dtype": cfg.base.dtype,
                "shape": {"length": T, "arms": len(cfg.arms), "seeds": 1, "blocks": cfg.blocks}, "threads": 1,
                "ours_s": t["median_s"], "rounds_s": t["rounds_s"], "reference": ref, "reference_s": ref_s,
                "ratio": t["median_s"] / ref_s})


def _manifold_run(cfg, device):
    """V1's model trained and measured (gpt_tunnel.run) on the threads torch has here: the stage's, or one in
    `prefetch`'s tasks."""
    return gpt_tunnel.run(cfg, device, torch.get_num_threads())


def _tunnel_arm(cfg, device, arm):
    """E5's model trained on one arm, then evaluated: what the stage keeps per arm."""
    model, curve = windtunnel.train(cfg, arm, device)
    return {"curve": curve[:: max(1, len(curve) // 200)], **windtunnel.evaluate(cfg, model)}


def _deep_run(cfg, device, freeze_routing=None, progress=None):
    """The watched deep model, every optimizer and seed (deep_watch.run), with its training seconds."""
    t0 = time.perf_counter()
    out = deep_watch.run(cfg, device, progress=progress, freeze_routing=freeze_routing)
    return {**out, "seconds": time.perf_counter() - t0}


def _on_one_thread(fn, cfg, device, kw):
    """fn(cfg, device, **kw) on one torch thread, the caller's count restored after: a task of `prefetch`."""
    from numeric.experiments.mechanism_grid import large_allocations

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    large_allocations()  # a Dask worker's malloc thresholds otherwise about double a step (mechanism_grid)
    try:
        return fn(cfg, device, **kw)
    finally:
        torch.set_num_threads(threads)


def _roofline_points(cfg, times):
    """Every grid mechanism's training step as a roofline point against the square product's rate on one thread (the
    threads the steps were timed on)."""
    from numeric.experiments import roofline

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        square = roofline.square_rate()
        return {"threads": 1, "square_gflops": square, "mechanisms": roofline.mechanism_points(cfg, times, square)}
    finally:
        torch.set_num_threads(threads)


def _parameter_count(cfg, mechanism):
    """One run's parameters at the tunnel config's sizes (mechanism_layers.parameter_count) and the share under the
    content rate."""
    from numeric.experiments import mechanism_layers as ml

    K, t = cfg.tunnel.symbols, cfg.tunnel
    n = ml.parameter_count(mechanism, 2 * K, t.d_k, t.d_v, K)
    return {**n, "content_share": n["content"] / n["all"]}


def _measured_claim(stage, claim):
    """One claim measured from the other experiments' numbers (EmpiricalClaim.measure): its rule and controls as
    checks, its entry of results.json experiments.measured_claims; None where its inputs were not run. A claim
    whose own code raises fails its check and leaves the others be."""
    cid = claim.id
    try:
        measurement = claim.measure(stage.data)
        if measurement is None:
            stage.results.record(Check(f"experiments/{cid}/measure", "experiments", "experiment", cid, "skipped", 0.0,
                                       None, None, "its inputs were not measured in this run"), stage.log)
            return None
        rule = claim.rule(**measurement)
        controls = claim.controls(measurement)
        kinds = {kind for kind, _ in controls.values()}
        if not {"negative", "positive"} <= kinds or kinds - {"negative", "positive"}:
            raise ValueError(f"controls must be negative or positive, at least one of each; got {sorted(kinds)}")
    except Exception as exc:  # the claim's own code: its failure is its check's, never the stage's
        stage.results.record(Check(f"experiments/{cid}/measure", "experiments", "experiment", cid, "fail", 0.0,
                                   None, None, f"{type(exc).__name__}: {exc}"), stage.log)
        return None
    stage._rule_check(cid, "rule", rule.verdict, rule.reason, rule.measured)
    _record_controls(stage, cid, controls, {c: claim.constructions.get(c, "") for c in controls})
    tables = []
    if getattr(claim, "tables", None) is not None:
        try:
            tables = _plain(claim.tables(rule.measured))
        except Exception as exc:  # a table the claim cannot build is its own check's failure, not the stage's
            stage.results.record(Check(f"experiments/{cid}/tables", "experiments", "experiment", cid, "fail", 0.0,
                                       None, None, f"{type(exc).__name__}: {exc}"), stage.log)
    return {"verdict": rule.verdict, "reason": rule.reason, "measured": _plain(rule.measured),
            "tables": tables, "figures": list(getattr(claim, "figures", ())),
            "section": claim.section, "controls": {c: {"kind": kind, "construction": claim.constructions.get(c, ""),
                                                       "verdict": r.verdict, "reason": r.reason}
                                                   for c, (kind, r) in controls.items()}}


def _record_controls(stage, claim, controls, constructions):
    """A rule's controls recorded as checks (kind negative-control): negative ones must say not-reproduced,
    positive ones reproduced."""
    for cid, (kind, r) in controls.items():
        expected = "not-reproduced" if kind == "negative" else "reproduced"
        stage.results.record(Check(f"experiments/{kind}-control/{cid}", "experiments", "negative-control", claim,
                                   "pass" if r.verdict == expected else "fail", 0.0,
                                   {"verdict": r.verdict, "reason": r.reason}, {"verdict": expected},
                                   constructions[cid]), stage.log, note=r.verdict)


def _numbers(obj):
    """Every float in a plain JSON value (bools and ints are exact)."""
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, list):
        return [x for v in obj for x in _numbers(v)]
    return [obj] if isinstance(obj, float) else []


def _plain(obj):
    """numpy scalars and arrays as plain JSON values."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj
