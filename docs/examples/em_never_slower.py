"""An empirical claim of your own, measured from the experiments' numbers and registered from a claims file.

    python -m derive.all --quick --only experiments,report --claims docs/examples/em_never_slower.py

adds the claim X1 to results.json (`claims`, `experiments.measured_claims.X1`, its checks) and its section to the
report: for every mechanism of the mechanism grid (the sticky chain, both schedules, the same seeds), the EM-like
arm ends below the SGD arm. The rule reads numbers only; its controls are built from the same measurement.
"""
from numeric.experiments.registry import EmpiricalClaim, register
from numeric.experiments.rules.base import Rule

X1_SHARE = 0.5  # fewer than half of the mechanisms ahead under EM-like reads not-reproduced


def measure(experiments):
    """The rule's inputs from results.json `experiments`: {mechanism: (sgd, em_like) final losses, seed means}."""
    grid = experiments.get("mechanisms", {}).get("mechanisms")
    if not grid:
        return None  # the grid did not run
    return {"losses": {m: (r["arms"]["sgd"]["final_loss"], r["arms"]["em_like"]["final_loss"])
                       for m, r in grid.items() if not r.get("failed")}}


def rule(losses):
    ahead = sorted(m for m, (sgd, em) in losses.items() if em < sgd)
    share = len(ahead) / max(1, len(losses))
    measured = {"mechanisms": len(losses), "ahead": len(ahead), "share": share,
                "gap": {m: sgd - em for m, (sgd, em) in losses.items()}}
    if share < X1_SHARE:
        return Rule("not-reproduced", f"EM-like ahead on {len(ahead)} of {len(losses)} mechanisms", measured)
    if share == 1:
        return Rule("reproduced", f"EM-like ahead on every mechanism ({len(losses)})", measured)
    return Rule("partly-reproduced", f"EM-like ahead on {len(ahead)} of {len(losses)}: {', '.join(ahead)}", measured)


def controls(m):
    losses = m["losses"]
    return {
        "X1/identical-arms": ("negative", rule({k: (sgd, sgd) for k, (sgd, _) in losses.items()})),
        "X1/em-behind": ("negative", rule({k: (sgd, sgd + 0.1) for k, (sgd, _) in losses.items()})),
        "X1/em-ahead": ("positive", rule({k: (sgd, sgd - 0.1) for k, (sgd, _) in losses.items()})),
    }


register(EmpiricalClaim(
    "X1", "em-never-slower", "the two-timescale schedule ends below SGD on every mechanism",
    "a claims file (docs/examples/em_never_slower.py)", {}, ("final loss of both arms per mechanism (grid)",),
    rule, {"X1_SHARE": X1_SHARE}, measure=measure, controls=controls,
    constructions={"X1/identical-arms": "every EM-like loss replaced by its SGD loss (derived)",
                   "X1/em-behind": "every EM-like loss set 0.1 above its SGD loss (derived)",
                   "X1/em-ahead": "every EM-like loss set 0.1 below its SGD loss (derived)"},
    section="Per mechanism of the grid, the SGD arm's final loss minus the EM-like arm's (gap; positive: EM-like "
            "ahead)."))
