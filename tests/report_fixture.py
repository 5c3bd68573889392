"""A small results.json covering every section of the report, with failing and skipped checks."""
import json

# X1's witness: a long point (more than the report shows inline) and both sides' certified values.
WITNESS = {"sizes": {"n": 3, "dk": 2, "dv": 2, "m": 3, "dx": 2}, "masked": False, "indices": [0, 1],
           "point": {**{f"v[{i},{a}]": f"{i + 1}/{7 + 4 * a}" for i in range(3) for a in range(2)}, "c": "1/2", "q[0,0]": "-2/5",
                     "k[2,1]": "9/11"},
           "lhs": "0.4123456789012345678", "rhs": "0.1987654321098765432"}
C2_WITNESS = {"sizes": {"n": 2, "dk": 1, "dv": 1, "m": 2, "dx": 1}, "masked": True, "indices": [1],
              "point": {"s[0,1]": "1/3"}, "lhs": "0.25", "rhs": "0.5"}
INCONSISTENCY = {"part": "main", "setting": "masked", "proved_by": "general", "disproved_by": "fixed"}
UNDECIDED = "general path over the 60 s budget at n symbolic"


def proof(claim, path, setting, outcome, measured, witness=None, part="main"):
    """A proof check as derive/stage.py writes it (three-state outcome, status derived from it)."""
    status = {"proved": "pass", "disproved": "fail", "undecided": "skipped"}[outcome]
    return {"id": f"derive/{claim}/{part}/{path}/{setting}", "stage": "derive", "kind": "proof", "claim": claim,
            "status": status, "seconds": 0.1, "measured": measured, "expected": "derived == closed form",
            "detail": f"path {path}", "path": path, "part": part, "setting": setting, "outcome": outcome,
            "witness": witness}


def soundness():
    """derive.fuzz, derive.engine_mutants and derive.rational_bound: one false verdict, one survivor."""
    rates = {"true_decided_rate": 0.9, "false_decided_rate": 0.75, "claims_per_second": 12.5}
    fuzz = {"seed": 7, "claims": 40, "true": 24, "false": 16, "margin": 1e-6, "closest_false_gap": 0.0031,
            "paths": {"general": {"proved": 22, "disproved": 12, "undecided": 6, "false_verdicts": 0, **rates},
                      "rational": {"proved": 24, "disproved": 15, "undecided": 1, "false_verdicts": 1, **rates}},
            "false_verdicts": [{"description": "sum_j alpha_ij v_j = v_i (fuzz #17)", "path": "rational",
                                "verdict": "proved", "truth": "false"}],
            "families": {"softmax-rows": {"claims": 10, "true": 6, "general_decided_rate": 1.0},
                         "chain-rule": {"claims": 30, "true": 18, "general_decided_rate": 0.8}}}
    mutants = {"planted": 2, "killed": 1, "kill_rate": 0.5, "faults": [
        {"id": "ring-drop-exp-derivative", "target": "derive/ring.py", "description": "d exp(s) = 0",
         "killed": True, "killed_by": ["C1 general", "fuzz softmax-rows"]},
        {"id": "sumform-skip-canonical", "target": "derive/sumform.py", "description": "dummy names not canonicalised",
         "killed": False, "killed_by": []}]}
    bound = ("Schwartz-Zippel: a wrong identity of degree d survives one random point mod p = 2^61 − 1 with "
             "probability ≤ d/p; sizes n ≤ 7 are assumed to cover every size-dependent cancellation.")
    return {"fuzz": fuzz, "engine_mutants": mutants, "rational_bound": bound}


def fixture_results():
    arms = {a: {"seeds": [42, 2024], "final_loss": 2.0 - 0.05 * i, "final_entropy": 2.05 - 0.05 * i, "accuracy": 0.2 + 0.03 * i,
                "heldout_loss": 2.01 - 0.05 * i, "kl_to_bayes_bits": 0.3 - 0.05 * i, "final_loss_ci95": 0.02,
                "curve": {"step": [0, 5, 10], "mean": [2.08, 2.0 - 0.02 * i, 1.98 - 0.05 * i], "ci95": [0.0, 0.01, 0.02]}}
            for i, a in enumerate(("sgd", "em_like"))}
    fp = {a: {"steps": [0, 5, 10], "alpha_js_to_final": [0.02, 0.01, 0.0], "values_rel_change_to_final": [0.5, 0.2, 0.0],
              "attention_stable_step": 5, "values_stable_step": 10} for a in arms}
    checks = [
        proof("C1", "general", "masked", "proved", "normal form of derived - closed = 0"),
        proof("C2", "general", "masked", "proved", "normal form of derived - closed = 0"),
        proof("C2", "fixed", "masked", "disproved", "differs at n=3 & 50% <odd> chars_{x}", C2_WITNESS),
        proof("X1", "general", "unmasked", "proved", "normal form of derived - closed = 0"),
        proof("X1", "rational", "unmasked", "disproved", "sides differ; witness: n=3", WITNESS),
        proof("X2", "general", "masked", "undecided", UNDECIDED),
        {"id": "derive/M1-drop-baseline/general", "stage": "derive", "kind": "negative-control", "claim": "C1",
         "status": "pass", "seconds": 0.0, "measured": "rejected", "expected": "rejected", "detail": "", "path": "general",
         "part": "main", "setting": "masked", "outcome": "disproved", "witness": None},
        {"id": "numeric/api-vs-autograd/float64", "stage": "numeric", "kind": "numeric", "claim": "C1", "status": "pass",
         "seconds": 0.3, "measured": {"max_rel_error": 1.2e-15}, "expected": {"tolerance": 1e-12}, "detail": ""},
        {"id": "experiments/wind-tunnel", "stage": "experiments", "kind": "experiment", "claim": "E5", "status": "skipped",
         "seconds": 0.0, "measured": None, "expected": None, "detail": "not run in this fixture"},
    ]
    claims = [
        {"id": "C1", "name": "score-advantage", "verdict": "proved", "evidence": "proved by 3 paths",
         "statement": r"\frac{\partial L}{\partial s_{ij}} = \alpha_{ij}\Big(b_{ij} - \sum_k \alpha_{ik} b_{ik}\Big)",
         "ref": "PAPER.md C1", "derivation": r"Direct: $\partial\alpha_{ik}/\partial s_{ij} = \alpha_{ik}(\delta_{jk}-\alpha_{ij})$.",
         "paths": {"general": "proved", "fixed": "proved", "rational": "proved"},
         "parts": [{"name": "main", "latex": r"\partial L/\partial s_{ij} = A_{ij}"}]},
        {"id": "C2", "name": "value-responsibility", "verdict": "failed",
         "evidence": "INTERNAL INCONSISTENCY: general proved and fixed disproved main (masked)",
         "statement": r"\frac{\partial L}{\partial v_j} = \sum_i \alpha_{ij} u_i", "ref": "PAPER.md C2", "derivation": "",
         "paths": {"general": "proved", "fixed": "disproved"}, "parts": [{"name": "main", "latex": r"\partial L/\partial v_{ja}"}],
         "witnesses": [{"check": "derive/C2/main/fixed/masked", **C2_WITNESS}], "reasons": {},
         "inconsistencies": [INCONSISTENCY]},
        {"id": "X1", "name": "user-row-sum", "verdict": "disproved", "evidence": "disproved by rational: sides differ",
         "statement": r"\sum_j A_{ij} = 1", "ref": "my note", "derivation": "", "kind": "identity",
         "paths": {"general": "proved", "fixed": "undecided", "rational": "disproved"},
         "parts": [{"name": "main", "latex": r"\sum_j A_{ij}=1"}],
         "witnesses": [{"check": "derive/X1/main/rational/unmasked", **WITNESS}], "reasons": {}, "inconsistencies": []},
        {"id": "X2", "name": "user-slow", "verdict": "undecided", "evidence": "general path undecided",
         "statement": r"\sum_{i,j}\alpha_{ij} = n", "ref": "my note", "derivation": "", "kind": "identity",
         "paths": {"general": "undecided"}, "parts": [{"name": "main", "latex": r"\sum_{i,j}\alpha_{ij}=n"}],
         "witnesses": [], "reasons": {"derive/X2/main/general/masked": UNDECIDED}, "inconsistencies": []},
        {"id": "E1", "name": "em-speedup", "verdict": "partly-reproduced", "evidence": "speedup 1.96x vs paper 2.3x",
         "statement": r"reaches SGD's final loss $\sim 2.3\times$ sooner"},
        {"id": "E2", "name": "entropy-near-bayes", "verdict": "not-run", "evidence": "stage not run", "statement": ""},
    ]
    return {
        "schema_version": 1,
        "environment": {"python": "3.11", "torch": "2.13.0", "sympy": "1.14.0", "device": "cpu", "profile": "quick",
                        "seeds": [0], "git_commit": None},
        "stages": {"derive": {"status": "fail", "seconds": 1.0, "checks": 3}},
        "checks": checks, "claims": claims, "inconsistencies": [{"claim": "C2", **INCONSISTENCY}],
        "benchmarks": [{"name": "numeric/fwd-bwd/module-vs-autograd/n=64/full", "device": "cpu", "dtype": "float32",
                        "shape": {"batch": 8, "n": 64, "d": 64, "causal": False}, "ours_s": 0.0007,
                        "reference": "autograd", "reference_s": 0.0007, "ratio": 1.02}],
        "derive": {"kill_matrix": {"M1-drop-baseline": {"claim": "C1", "description": "baseline dropped",
                                                        "general": "rejected", "fixed": "rejected", "rational": "ACCEPTED",
                                                        "numeric": "rejected", "adversarial": "n/a"},
                                     "M2-half-mask": {"claim": "C2", "description": "mask applied twice",
                                                      "general": "rejected", "fixed": "undecided", "rational": "rejected"}},
                   **soundness(),
                   "scaling": [{"varied": "n", "value": 2, "seconds": 0.01}, {"varied": "n", "value": 3, "seconds": 0.03}]},
        "experiments": {
            "sticky_markov": {"h_min": 1.8292, "speedup": 1.96, "speedup_ci95": [1.8, 2.1], "steps_to_threshold": [5, 6],
                              "threshold": 1.99, "paired_t": 7.5, "p_value": 0.002, "seeds": [42, 2024], "steps": 10,
                              "length": 200, "bayes_floor": {"loss": 1.85, "entropy": 1.83, "accuracy": 0.34},
                              "arms": arms, "frame_precision": fp,
                              "paper": {"sgd_final_loss": 2.03, "em_like_final_loss": 1.93, "speedup": 2.3,
                                        "speedup_reruns": [2.2, 2.3], "em_steps": 430, "steps": 1000, "h_min": 1.8292},
                              "paper_seeds": {"seeds": [42], "speedup": 1.917, "speedup_ci95": [1.7, 2.2],
                                              "sgd_final_loss": 2.04, "em_like_final_loss": 1.97},
                              "mu_draws": {"seeds": [42, 2024], "speedup_mean": 2.2, "speedup_ci95": [1.9, 2.5],
                                           "draws": [{"mu_rng": "numpy-legacy", "mu_seed": 0, "sgd_final_loss": 2.05,
                                                      "em_like_final_loss": 1.98, "speedup": 2.45,
                                                      "speedup_ci95": [2.1, 2.9]}]}},
            "lr_ratio_sweep": {"points": [{"ratio": r, "speedup": 1 + r / 20, "final_loss": 2.0} for r in (1, 10, 50)]},
            "speed_vs_sequential": {"speedup": 4.5, "speedup_per_round": [4.25, 4.5, 4.75], "method": "timed over 20 steps",
                                    "max_abs_loss_difference": 1e-7},
            "dynamics": {"advantage_sign": {"step_sizes": [1e-3, 1e-1], "scores": [0.9, 0.9], "queries_keys": [0.8, 0.8]},
                         "specialisation": {"steps": [0, 10], "cos_value_signal": [0.0, 0.8]},
                         "saturation": {"max_alpha": [0.3, 0.9], "ds_norm": [1.0, 0.5], "dv_norm": [1.0, 2.0]}},
            "wind_tunnel": {"arms": {"em_like": {"pca_points": {"pc1": [0.0, 1.0, 2.0], "pc2": [1.0, 0.0, 1.0],
                                                                "entropy_bits": [1.0, 1.5, 2.0]}}}},
        },
    }


def legacy_results():
    """The fixture as results.json was before three-state outcomes: no paths, witnesses, fuzzer or mutants."""
    r = fixture_results()
    del r["inconsistencies"]
    for key in ("fuzz", "engine_mutants", "rational_bound"):
        del r["derive"][key]
    for c in r["checks"]:
        for key in ("path", "part", "setting", "outcome", "witness"):
            c.pop(key, None)
    for c in r["claims"]:
        for key in ("witnesses", "reasons", "inconsistencies"):
            c.pop(key, None)
        if "paths" in c:
            c["paths"] = [p for p, o in c["paths"].items() if o == "proved"]  # the old list of proving paths
    return r


def write_fixture(out_dir, results=None):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results or fixture_results()))
    return out_dir
