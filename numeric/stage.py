"""The `numeric` stage: generated code against autograd, finite differences and SDPA; mutants
rejected numerically; benchmarks. Every check records its measured error and tolerance."""
from __future__ import annotations

import time
import types

import torch

from derive import claims as registry
from derive.results import Check, slug
from numeric import agreement, bench, identities

IDENTITY_SHAPES = [({"n": 4, "dk": 3, "dv": 2, "m": 3, "dx": 3}, (), "causal"),
                   ({"n": 5, "dk": 2, "dv": 3, "m": 2, "dx": 2}, (2,), "padding"),
                   ({"n": 3, "dk": 1, "dv": 1, "m": 2, "dx": 1}, (2, 3), "none"),
                   ({"n": 6, "dk": 4, "dv": 3, "m": 4, "dx": 2}, (3,), "causal")]


class NumericStage:
    def __init__(self, results, profile, device: str, seed: int, log=print):
        """`profile`: a derive.profile.Profile; the stage reads its `numeric` section."""
        self.results = results
        self.profile = profile.for_device(device).numeric
        self.device = device
        self.seed = seed
        self.log = log

    def run(self):
        torch.set_num_threads(1)  # pinned, so the benchmark ratios (ours / reference, one process) compare like with like
        gen = generated_module()
        self.identities(gen)
        self.mutants(gen)
        self.mechanisms()
        self.api_agreement()
        self.special_cases()
        self.sdpa_dropin()
        self.benchmarks()
        self.fuzz()
        self.mechanism_fuzz()

    def _check(self, cid, claim, ok, seconds, measured, expected, kind="numeric", detail=""):
        self.results.record(Check(cid, "numeric", kind, claim, "pass" if ok else "fail", round(seconds, 4),
                                  measured, expected, detail), self.log)
        return ok

    # -- registry-driven ------------------------------------------------------------------------
    def identities(self, gen):
        tol = identities.TOL_FLOAT64
        for claim, identity, fn in identities.cases(gen, "identity"):
            if fn is None:
                self._unemitted(gen, f"numeric/{claim.id}/{slug(identity.name)}/float64", claim.id, (claim.id, identity.name))
                continue
            t0 = time.perf_counter()
            worst = max(identities.evaluate(fn, identity, sizes, batch, mask, self.seed + k, self.device)[0]
                        for k, (sizes, batch, mask) in enumerate(IDENTITY_SHAPES[: self.profile.identity_draws]))
            self._check(f"numeric/{claim.id}/{slug(identity.name)}/float64", claim.id, worst <= tol,
                        time.perf_counter() - t0, {"max_rel_error": worst}, {"tolerance": tol},
                        detail="generated derived side (autograd grads) vs generated closed side")

    def mutants(self, gen):
        sizes, batch, mask = IDENTITY_SHAPES[0]
        for mutant, identity, fn in identities.cases(gen, "mutant"):
            if fn is None:
                self._unemitted(gen, f"numeric/{mutant.id}", mutant.claim, mutant.id, "negative-control", mutant.description)
                continue
            t0 = time.perf_counter()
            err = identities.evaluate(fn, identity, sizes, batch, mask, self.seed, self.device)[0]
            rejected = err > identities.TOL_FLOAT64
            self._check(f"numeric/{mutant.id}", mutant.claim, rejected, time.perf_counter() - t0,
                        {"max_rel_error": err}, {"rejected_if_above": identities.TOL_FLOAT64}, kind="negative-control",
                        detail=mutant.description)
        for mutant in registry.mutants():  # a bound constant has no closed form to emit: recorded as such
            if mutant.constant is not None:
                self._unemitted(gen, f"numeric/{mutant.id}", mutant.claim, mutant.id, "negative-control", mutant.description)

    def mechanisms(self):
        """Each routing mechanism's generated kernels (numeric/generated/mechanisms.py) against autograd through its
        plain-torch reference, float64 and float32, per variant (masked: attention's causal mask, a router's selection;
        unmasked; a cell's weights read no mask: unmasked only); every routing mutant rejected; a mechanism or mutant
        with no kernels recorded as skipped with the reason; forward + backward timed against autograd (results.json
        `benchmarks`, numeric/mechanisms/<name>/n=N)."""
        from derive import mechanisms as known
        from numeric import mechanisms

        module = mechanisms.generated_module()
        for c in mechanisms.run_checks(module, self.seed, self.device):
            self.results.record(Check(c["id"], "numeric", c["kind"], "", "pass" if c["ok"] else "fail", round(c["seconds"], 4),
                                      c["measured"], c["expected"], c["detail"]), self.log, note=c["note"])
        for key, reason in module.UNEMITTED.items():
            is_mechanism = key in known.REGISTRY
            self.results.record(Check(f"numeric/mechanisms/{key}", "numeric", "numeric" if is_mechanism else "negative-control",
                                      "", "skipped", 0.0, f"not emitted: {reason}", "generated kernels",
                                      "a mechanism without a kernel shape" if is_mechanism else "a mutant without a kernel"),
                                self.log)
        rows = mechanisms.benchmark(module, self.profile.bench, self.device, threads=1, log=self.log)
        self.results.benchmarks.extend(rows)

    def _unemitted(self, gen, cid, claim, key, kind="numeric", detail=""):
        reason = identities.unemitted(gen, key)
        self.results.record(Check(cid, "numeric", kind, claim, "skipped", 0.0, f"not emitted: {reason}",
                                  "generated kernel", detail), self.log)

    # -- the public API -------------------------------------------------------------------------------
    def api_agreement(self):
        cases = agreement.random_cases(self.profile.api_cases, self.seed)
        dtypes = [torch.float64, torch.float32, torch.bfloat16]
        for dtype in dtypes:
            t0 = time.perf_counter()
            worst, label, finite = 0.0, "", True
            for case in cases:
                err, _, fin = agreement.compare_api(case, dtype, self.device)
                finite = finite and fin
                if err > worst:
                    worst, label = err, case.label()
            tol = agreement.TOLERANCE[dtype]
            name = str(dtype).removeprefix("torch.")
            self._check(f"numeric/api-vs-autograd/{name}", "C1", worst <= tol and finite, time.perf_counter() - t0,
                        {"max_rel_error": worst, "worst_case": label, "cases": len(cases), "finite": finite},
                        {"tolerance": tol}, detail="alpha, B, dS, dQ, dK, dV over random shapes, batch/head dims and masks")

    def special_cases(self):
        tol = agreement.TOLERANCE[torch.float64]
        case = agreement.Case((2,), 16, 8, 8, "causal", self.seed + 7)
        t0 = time.perf_counter()
        err, _, finite = agreement.compare_api(case, torch.float64, self.device, magnitude=12.0)
        self._check("numeric/large-scores/float64", "C1", err <= tol and finite, time.perf_counter() - t0,
                    {"max_rel_error": err, "finite": finite, "max_abs_score": self._max_score(case, 12.0)},
                    {"tolerance": tol})
        t0 = time.perf_counter()  # far beyond: agreement is ill-conditioned (dS ~ rounding of b), but no overflow
        err, _, finite = agreement.compare_api(case, torch.float64, self.device, magnitude=30.0)
        self._check("numeric/huge-scores-finite/float64", "C1", finite, time.perf_counter() - t0,
                    {"finite": finite, "max_abs_score": self._max_score(case, 30.0), "max_rel_error": err},
                    {"finite": True}, detail="every output finite (agreement not asserted: ill-conditioned)")
        self._timed("numeric/fully-masked-rows-zero", "C1", lambda: agreement.fully_masked_rows_are_zero(self.device),
                    "alpha, dS, dQ rows exactly 0 and everything finite")
        # checks of the generated API as a whole (dQ, dK, dV together: C1-C4), not of one claim
        self._timed("numeric/gradcheck-generated-backward", "", lambda: agreement.gradcheck_core(self.device),
                    "torch.autograd.gradcheck passes (float64, finite differences)")
        for kind in ("causal", "none"):
            t0 = time.perf_counter()
            err = agreement.sdpa_error(agreement.Case((2, 3), 9, 5, 4, kind, self.seed + 3), self.device)
            self._check(f"numeric/sdpa-backward/{kind}", "", err <= tol, time.perf_counter() - t0,
                        {"max_rel_error": err}, {"tolerance": tol}, detail="dQ, dK, dV of the generated API vs SDPA")
        t0 = time.perf_counter()
        err = agreement.loss_variant_error(self.device, self.seed + 5)
        self._check("numeric/full-loss-variant", "C8", err <= tol, time.perf_counter() - t0, {"max_rel_error": err},
                    {"tolerance": tol}, detail="loss, u (C5), dW_Q, dW_K, dW_V, dW_O (C8) vs autograd")
        t0 = time.perf_counter()
        err = agreement.training_matches_autograd(self.device)
        self._check("numeric/module-training-steps", "", err <= tol, time.perf_counter() - t0,
                    {"max_rel_error": err}, {"tolerance": tol}, detail="3 SGD steps of GeneratedAttention vs autograd")

    def sdpa_dropin(self):
        """numeric.sdpa.scaled_dot_product_attention against torch's on random calls of every kind, per dtype;
        a drop-in that ignores the scale must fail the same sweep (negative control)."""
        from numeric import sdpa_sweep

        t0 = time.perf_counter()
        out = sdpa_sweep.sweep(self.profile.sdpa_cases, self.seed + 11, self.device)
        seconds = (time.perf_counter() - t0) / len(out)
        for name, entry in out.items():
            half = name in ("float16", "bfloat16")
            expected = ({"our_error_at_most": f"{sdpa_sweep.HALF_RATIO} x torch's + half an ulp"} if half
                        else {"tolerance": sdpa_sweep.TOLERANCE[getattr(torch, name)]})
            self._check(f"numeric/sdpa-dropin/{name}", "", not entry["failures"] and entry["cases"] > 0, seconds,
                        entry, expected, detail="o, dq, dk, dv of numeric.sdpa vs torch's SDPA: GQA, is_causal, "
                        "every mask kind, broadcasting, scales" + (" (errors against float64)" if half else ""))
        t0 = time.perf_counter()
        bad = sdpa_sweep.sweep(max(8, self.profile.sdpa_cases // 5), self.seed + 12, self.device,
                               fn=sdpa_sweep.forgets_the_scale)
        caught = sum(len(e["failures"]) for e in bad.values())
        self._check("numeric/sdpa-dropin/negative-control", "", caught > 0, time.perf_counter() - t0,
                    {"failing_calls": caught, "cases": sum(e["cases"] for e in bad.values())},
                    {"failing_calls": "> 0"}, kind="negative-control", detail="a drop-in that ignores the scale")

    def _max_score(self, case, magnitude):
        q, k = agreement.make_inputs(case, torch.float64, self.device, magnitude)[:2]
        return float((q @ k.mT).abs().max()) * q.shape[-1] ** -0.5

    def _timed(self, cid, claim, fn, expected):
        t0 = time.perf_counter()
        try:
            ok, measured = bool(fn()), "ok"
        except Exception as exc:  # gradcheck raises on mismatch
            ok, measured = False, f"{type(exc).__name__}: {exc}"[:300]
        self._check(cid, claim, ok, time.perf_counter() - t0, measured, expected)

    # -- the proof paths against an independent oracle ------------------------------------------------
    def fuzz(self):
        """Random true and false identities about every routing mechanism through every proof path; any false verdict
        fails the run. The summary (per path, per family, per mechanism) is results.json `derive.fuzz`."""
        from numeric import fuzz

        t0 = time.perf_counter()
        # Dask workers of a local cluster (0 in the profile: one per CPU); one worker runs in this process, sparing
        # the cluster's start-up (about 3 s) on a handful of claims
        workers = {0: None, 1: 0}.get(self.profile.fuzz_jobs, self.profile.fuzz_jobs)
        # one claim per task: claims take from a fraction of a second to the paths' budgets, and tasks of several
        # claims leave one straggling chunk running alone; a round trip costs far less than a claim
        summary = fuzz.run(self.profile.fuzz_claims, self.seed, workers=workers, log=self.log,
                           budget_s=self.profile.fuzz_budget_s, chunk=1)
        summary.pop("rows", None)  # every claim's outcome: `python -m numeric.fuzz --out FILE` keeps them
        self.results.derive["fuzz"] = summary
        wrong = summary["false_verdicts"]
        self._check("numeric/claim-fuzzer", "", not wrong and not summary["failed_tasks"], time.perf_counter() - t0,
                    {"claims": summary["claims"], "false_verdicts": len(wrong), "failed_tasks": summary["failed_tasks"],
                     "general_decided_on_true": summary["paths"]["general"]["true_decided_rate"],
                     # per mechanism: its claims and each path's share of its cases decided as the oracle labels them
                     "mechanisms": {name: {"claims": m["claims"], **{p: r["decided_rate"] for p, r in m["paths"].items()}}
                                    for name, m in summary.get("mechanisms", {}).items()}},
                    {"false_verdicts": 0}, kind="negative-control",
                    detail="proved false / disproved true identities against the float64 autograd oracle")

    def mechanism_fuzz(self):
        """Random user-style mechanisms through the mechanisms table, every cell's verdict against the independent
        torch oracle (numeric.mechanism_fuzz); any false verdict fails the run. results.json `derive.mechanism_fuzz`."""
        from numeric import mechanism_fuzz

        t0 = time.perf_counter()
        workers = {0: None, 1: 0}.get(self.profile.fuzz_jobs, self.profile.fuzz_jobs)
        summary = mechanism_fuzz.run(self.profile.mechanism_fuzz, self.seed, workers=workers, log=self.log)
        summary.pop("rows", None)  # `python -m numeric.mechanism_fuzz --out FILE` keeps every mechanism's cells
        self.results.derive["mechanism_fuzz"] = summary
        wrong = summary["false_verdicts"]
        self._check("numeric/mechanism-fuzzer", "", not wrong and not summary["failed_tasks"], time.perf_counter() - t0,
                    {"mechanisms": summary["mechanisms"], "cells": summary["cells"], "false_verdicts": len(wrong),
                     "verdicts": summary["verdicts"], "errors": summary["error_count"],
                     "failed_tasks": summary["failed_tasks"], "seconds": summary["seconds"]},
                    {"false_verdicts": 0}, kind="negative-control",
                    detail="random user-style mechanisms: every cell against a float64 autograd oracle that imports "
                           "nothing from derive/")

    # -- speed ------------------------------------------------------------------------------------------
    def benchmarks(self):
        t0 = time.perf_counter()
        rows = bench.run(self.profile.bench, self.device, threads=1, log=self.log)
        self.results.benchmarks.extend(bench.as_benchmarks(rows))
        agree = max(r.max_rel_diff for r in rows)
        worst = max(r.ratio("ours", "autograd") for r in rows)
        goal = all(r.ratio("ours", "autograd") <= 1.0 for r in rows)
        self._check("numeric/benchmark", "", agree <= 1e-4, time.perf_counter() - t0,
                    {"max_module_ratio_vs_autograd": worst, "goal_met_at_every_size": goal, "max_rel_diff": agree},
                    {"outputs_agree_float32": 1e-4, "goal_ratio": 1.0}, kind="benchmark",
                    detail="fails if the benchmarked implementations disagree; the speed goal is reported, not asserted")
        self.watch_overhead()

    def watch_overhead(self):
        """The watcher's cost on a training step (numeric.watch_bench, CPU, one thread) for each setup,
        recorded as a benchmark beside its memory; the 10% goal at every = 10 (stated for the demonstration
        experiment's model and the Hugging Face GPT-2 `hf`) is reported, not asserted. A setup that cannot run here
        (`hf` without transformers) is recorded as a skipped check saying why."""
        from numeric import watch_bench

        every = 10
        for setup in self.profile.watch_setups:
            shape = watch_bench.SETUPS[setup][1]
            reason = watch_bench.skip_reason(setup)
            if reason:
                self.results.record(Check(f"numeric/watch-overhead/{setup}/every={every}", "numeric", "benchmark", "",
                                          "skipped", 0.0, f"not run: {reason}", "the same training step unwatched",
                                          f"the watcher's overhead on {shape['model']}"), self.log)
                continue
            r = watch_bench.benchmark(setup, every=every, steps=20, repeats=self.profile.watch_repeats,
                                      min_seconds=self.profile.watch_min_seconds)
            self.results.benchmarks.append({
                "name": f"numeric/watch-overhead/{setup}/every={every}", "device": "cpu", "dtype": "float32",
                "shape": shape, "ours_s": r["step_watched_s"], "reference": "the same training step unwatched",
                "reference_s": r["step_s"], "ratio": r["ratio"], "ratio_quartiles": r["ratio_quartiles"],
                "goal_ratio": 1.1 if setup in ("demo", "hf") else None,
                "peak_rss_increase_mib": r["peak_rss_increase_mib"], "held_between_records_mib": r["held_mib"],
                "pairs": r["pairs"], "steps_per_block": r["steps_per_block"], "enter_exit_s": r["enter_exit_s"]})
            self.log(f"  watch overhead {setup} every={every}: step {r['step_s'] * 1e3:.1f} ms -> "
                     f"{r['step_watched_s'] * 1e3:.1f} ms, ratio {r['ratio']:.3f} (quartiles {r['ratio_quartiles'][0]:.3f}-"
                     f"{r['ratio_quartiles'][1]:.3f}, {r['pairs']} pairs); "
                     f"peak RSS +{r['peak_rss_increase_mib']:.1f} MiB")


def generated_module():
    """The committed generated module, or a fresh emission when extra claims are registered (an extra
    claim whose sides have no kernel form is left out; its UNEMITTED entry says why)."""
    from numeric.generated import attention

    if not registry.extra_ids():
        return attention
    from derive.codegen import emit

    module = types.ModuleType("numeric.generated.fresh")
    exec(compile(emit(include_extra=True), "<fresh emission>", "exec"), module.__dict__)
    return module


