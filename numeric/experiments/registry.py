"""The empirical claims E1–E7 (and W1, G1, G2, V1: ours), registered as the analytic C1–C10 are (derive.claims).

Each entry holds the paper's facts once (name, statement, where the paper says it, its figure), the
measured quantities its rule reads, the rule (numeric.experiments.rules) and the rule's thresholds by
name, beside the paper's numbers. results.json, the report and the README tables read these entries;
no other module restates them.
"""
from __future__ import annotations

import importlib
import pkgutil

from numeric.experiments import rules
from numeric.experiments.rules.base import EmpiricalClaim
from numeric.experiments.rules.v1 import headline as _v1_headline

PAPER = "arXiv 2512.22473"
PAPER_I = "arXiv 2512.22471"

# The authors' sticky-chain figures (E1–E3), written once.
STICKY_FIGURES = {"sgd_final_loss": 2.03, "em_like_final_loss": 1.93, "speedup": 2.3, "speedup_reruns": [2.2, 2.3],
                  "em_steps": 430, "steps": 1000, "h_min": 1.8292}


def _ci(pair, fmt="{:.2f}", sep="-"):
    """An interval in a few characters: "1.59-2.07"; signed bounds read better with sep=" to "."""
    return f"{fmt.format(pair[0])}{sep}{fmt.format(pair[1])}"


def _arms(measured, fmt, arms=("sgd", "em_like")):
    return ", ".join(f"{a} {fmt(measured['arms'][a])}" for a in arms if a in measured["arms"])


REGISTRY: dict = {}


def register(claim: EmpiricalClaim) -> EmpiricalClaim:
    if claim.id in REGISTRY:
        raise ValueError(f"claim {claim.id} is already registered")
    REGISTRY[claim.id] = claim
    return claim


def claims() -> list:
    return list(REGISTRY.values())


def catalogue() -> dict:
    return {c.id: c.catalogue() for c in REGISTRY.values()}


STICKY = "the sticky Markov chain experiment (8 symbols, T = 2000, 1000 full-batch steps, seeds 42, 2024, 1337, 7777, 9999)"

register(EmpiricalClaim(
    "E1", "em-speedup",
    r"the EM-like schedule reaches the SGD arm's final loss $\sim 2.3\times$ sooner (430 vs 1000 steps)",
    f"{PAPER}, {STICKY}",
    {k: STICKY_FIGURES[k] for k in ("speedup", "em_steps", "steps", "sgd_final_loss", "em_like_final_loss")},
    ("loss curves of both arms per seed (same data and initial weights per seed)",),
    rules.e1, {"E1_RESAMPLES": rules.E1_RESAMPLES, "E1_LEVEL": rules.E1_LEVEL},
    paper="2.3x (430 vs 1000 steps)",
    headline=lambda m: f"{m['speedup']:.2f}x (CI {_ci(m['ci95'])}, {m['n_seeds']} seeds)"))

register(EmpiricalClaim(
    "E2", "entropy-near-bayes",
    r"both arms' predictive entropy is close to $H_{\min} = H(Y_t \mid Y_{t-1}) = 1.8292$ nats",
    f"{PAPER}, {STICKY}", {"h_min": STICKY_FIGURES["h_min"]},
    ("final predictive entropy per seed, both arms", "H_min of the chain", "number of symbols m"),
    rules.e2, {"E2_CLOSE": rules.E2_CLOSE, "E2_FAR": rules.E2_FAR},
    paper="H near H_min = 1.8292 nats",
    headline=lambda m: "H " + _arms(m, lambda a: f"{a['entropy']:.3f}") + " nats"))

register(EmpiricalClaim(
    "E3", "sharper-em", "EM-like ends with lower loss, lower entropy and higher accuracy than SGD",
    f"{PAPER}, {STICKY}", {k: STICKY_FIGURES[k] for k in ("sgd_final_loss", "em_like_final_loss")},
    ("final loss, entropy and accuracy per seed, both arms",),
    rules.e3, {"E3_P": rules.E3_P},
    paper="loss 1.93 vs 2.03 (EM-like vs SGD)",
    headline=lambda m: f"loss {m['loss']['em_like']:.3f} vs {m['loss']['sgd']:.3f} (p {m['loss']['p']:.2g})"))

register(EmpiricalClaim(
    "E4", "frame-precision", "attention (the frame) stabilises early while values (the precision) keep refining",
    f"{PAPER}, {STICKY} (qualitative)", {},
    ("JS distance of tracked attention rows to their final state per checkpoint",
     "relative change of W_V to its final state per checkpoint"),
    rules.e4, {"E4_TOL": rules.E4_TOL},
    paper="qualitative",
    headline=lambda m: "stable step attention/values: " + _arms(
        m, lambda a: f"{a['attention_stable_step']}/{a['values_stable_step']}")))

register(EmpiricalClaim(
    "E5", "value-manifold",
    "values collapse onto a low-dimensional manifold whose leading coordinate tracks posterior entropy "
    "(Paper I: PC1 explains 84-90%)",
    f"{PAPER}; the figure from {PAPER_I} (Bayesian wind tunnels)", {"pc1_explained": [0.84, 0.90]},
    ("explained variance of PC1 of attention outputs", "Spearman rho of PC1 and the Bayes entropy",
     "bootstrap intervals over evaluation sequences"),
    rules.e5, {"E5_EV": rules.E5_EV, "E5_RHO": rules.E5_RHO},
    paper="PC1 84-90%",
    headline=lambda m: "PC1 " + _arms(m, lambda a: f"{100 * a['pc1_explained']:.0f}%")))

register(EmpiricalClaim(
    "E6", "advantage-predicts-routing",
    r"the sign of $-A_{ij}$ predicts the sign of the change of $\alpha_{ij}$ after a small step",
    f"{PAPER}, small simulations (qualitative)", {},
    ("sign agreement of -A and the change of alpha per step size", "the same for a control predictor"),
    rules.e6, {"E6_ALL": rules.E6_ALL, "E6_MOST": rules.E6_MOST},
    paper="qualitative",
    headline=lambda m: f"sign agreement {100 * m['agreement']:.1f}% (control {100 * m['control_agreement']:.1f}%)"))

register(EmpiricalClaim(
    "E7", "specialisation", "values specialise toward the error signals of the queries that route to them",
    f"{PAPER}, small simulations (qualitative)", {},
    ("cosine of value updates and of values with the routed error signal, with a control",),
    rules.e7, {"E7_RISE": rules.E7_RISE, "E7_FINAL": rules.E7_FINAL},
    paper="qualitative",
    headline=lambda m: f"cos {m['own_initial']:.2f} -> {m['own_final']:.2f} (control {m['control_final']:.2f})"))

# -- ours: the paper's E4 asked of a deep model -------------------------------------------------------------
register(EmpiricalClaim(
    "W1", "frame-precision-deep",
    "attention routing freezes while the values keep refining, in every attention head of a deep model under "
    "SGD, the EM-like schedule and AdamW",
    "ours: E4 in a 2-layer, 4-head nn.TransformerEncoder on the sticky wind tunnel", {},
    ("drift of attention rows (JS distance) between watcher records on a fixed probe batch, per layer x head",
     "relative change of V between the same records, per layer x head",
     "three optimizers on the same data stream and initial weights per seed"),
    rules.w1, {"W1_TOL": rules.W1_TOL, "W1_EARLY": rules.W1_EARLY, "W1_HOLD": rules.W1_HOLD,
               "W1_MOST": rules.W1_MOST, "W1_SOME": rules.W1_SOME},
    headline=lambda m: "routing froze first: " + ", ".join(
        f"{o} {100 * r['frame_first_fraction']:.0f}%" for o, r in m["optimizers"].items())))

# -- ours: the conjecture on data, every routing mechanism under both schedules -------------------------------------
register(EmpiricalClaim(
    "G1", "benefit-follows-structure",
    "the EM-like schedule's gain follows the proved routing structure: trained on the same task, data and seeds "
    "under SGD and under the two-timescale schedule, the mechanisms whose keys compete (softmax, normalised linear "
    "attention, the convex gate, the mixture of experts) gain more than those whose keys do not (sigmoid attention, "
    "SSD, the gated linear recurrence's independent gates)",
    "ours: the sticky chain of E1-E3 with every routing mechanism of derive/mechanisms, the competition labels "
    "from the mechanisms table", {},
    ("loss curves of sgd and em_like per mechanism and seed (the same seeds and data for every mechanism)",
     "each mechanism's competition cell (proved or disproved) from the mechanisms table"),
    rules.g1, {"G1_RESAMPLES": rules.G1_RESAMPLES, "G1_LEVEL": rules.G1_LEVEL, "G1_MARGIN": rules.G1_MARGIN,
               "G1_PERM_P": rules.G1_PERM_P},
    headline=lambda m: f"excess speedup difference {m['difference']:+.2f} (CI {_ci(m['difference_ci95'], '{:+.2f}', ' to ')}, "
                       f"perm. p {m['permutation_p']:.2f})"))


register(EmpiricalClaim(
    "G2", "bayes-gap-follows-structure",
    "the Bayes gap follows the proved routing structure: trained in the Bayesian wind tunnel on the same sequences "
    "and seeds under the two-timescale schedule, the mechanisms whose keys compete end closer to the exact Bayes "
    "posterior (a smaller KL) than those whose keys do not",
    "ours: E5's wind tunnel with every routing mechanism of derive/mechanisms, the competition labels from the "
    "mechanisms table", {},
    ("KL from the Bayes predictive to each mechanism's, EM-like arm, per seed (the same seeds, training and "
     "evaluation sequences for every mechanism)",
     "each mechanism's competition cell (proved or disproved) from the mechanisms table"),
    rules.g2, {"G2_RESAMPLES": rules.G2_RESAMPLES, "G2_LEVEL": rules.G2_LEVEL, "G2_RATIO": rules.G2_RATIO,
               "G2_PERM_P": rules.G2_PERM_P},
    headline=lambda m: f"KL ratio others/competing {m['ratio']:.2f}x (CI {_ci(m['ratio_ci95'])}, "
                       f"perm. p {m['permutation_p']:.2f})"))


# -- ours: E5's measurement as a diagnostic of any model's layers ---------------------------------------------
register(EmpiricalClaim(
    "V1", "value-manifold-any-model",
    "in at least one attention layer of a trained model, the value vectors or the attention outputs lie along a "
    "dominant direction whose coordinate tracks the model's predictive entropy (E5 asked of every layer of a deep "
    "model; the Bayes entropy judged beside it)",
    "ours: numeric.manifold on a 2-block GPT-2-style model trained in E5's wind tunnel "
    "(numeric.experiments.gpt_tunnel)", {},
    ("per attention layer, the value vectors and the attention outputs on held-out sequences",
     "PC1's share of their variance and Spearman rho of the PC1 coordinate with the model's predictive entropy "
     "and with the exact Bayes entropy",
     "bootstrap intervals over the held-out sequences"),
    rules.v1, {"V1_SHARE": rules.V1_SHARE, "V1_RHO": rules.V1_RHO, "V1_MIN_SEQUENCES": rules.V1_MIN_SEQUENCES},
    headline=_v1_headline))


def discover(package=rules):
    """Register the CLAIM of every module of `package` (numeric/experiments/rules) that declares one, an
    EmpiricalClaim measured from the other experiments' numbers: a new claim is one module there, and nothing else
    names it. The families above are registered by their entries here."""
    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        claim = getattr(module, "CLAIM", None)
        if isinstance(claim, EmpiricalClaim) and claim.id not in REGISTRY:
            found.append(register(claim).id)
    return found


discover()
IDS = tuple(REGISTRY)
