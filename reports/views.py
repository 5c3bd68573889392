"""The views of results.json that reports/build.py makes the report's tree from: every decision about what a
section shows (which verdict, which class, which sentence) is made here, in plain data."""
from __future__ import annotations

import re

from derive import verdict
from reports.figures import DEEP_FIGURES

GOOD = {"proved", "confirmed", "reproduced"}
PATHS = ("general", "fixed", "rational")
# holds: a fixed-size path found no difference at the sizes it tried (not a proof at every size)
OUTCOME_CLASS = {"proved": "good", "holds": "good", "disproved": "bad", "undecided": "partial"}
KILL_CLASS = {"rejected": "good", "n/a": "neutral", "not run": "neutral"}  # ACCEPTED and undecided: bad
POINT_HEAD = 8  # witness point entries shown before the full list


def fmt(value, digits=4):
    """Numbers for tables: scientific for tiny or huge values, fixed otherwise."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, float)):
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
            return f"{value:.2e}"
        return f"{value:.{digits}g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {fmt(v)}" for k, v in value.items() if not isinstance(v, (list, dict)))
    if isinstance(value, list):
        return ", ".join(fmt(v) for v in value[:8]) + (" ..." if len(value) > 8 else "")
    return str(value)


def verdict_class(verdict):
    if verdict in GOOD:
        return "good"
    if verdict in ("partly-reproduced", "undecided", "mask-dependent"):
        return "partial"
    return "neutral" if verdict == "not-run" else "bad"


def outcome_class(outcome):
    return OUTCOME_CLASS.get(outcome, "neutral")


def kill_class(cell):
    return KILL_CLASS.get(cell, "bad")


def path_outcomes(claim):
    """{path: outcome} of a claim; results.json before three-state outcomes listed the proving paths."""
    paths = claim.get("paths") or {}
    return {p: "proved" for p in paths} if isinstance(paths, list) else paths


def witness_sizes(w):
    return " ".join(f"{k}={v}" for k, v in w.get("sizes", {}).items())


def witness_brief(w):
    """One line: sizes, mask, free indices, both sides."""
    sizes = witness_sizes(w)
    at = f" at ({', '.join(map(str, w['indices']))})" if w.get("indices") else ""
    return f"{sizes}, {'masked' if w.get('masked') else 'unmasked'}{at}: lhs {w['lhs']} vs rhs {w['rhs']}"


def point_entries(point, limit=None):
    return [f"{k} = {v}" for k, v in list(point.items())[:limit]]


def first_reason(claim):
    return next(iter((claim.get("reasons") or {}).values()), "")


def pct(value):
    return "-" if value is None else f"{100 * value:.1f}%"


def count(value):
    """A count recorded as a number or as the list of what was counted."""
    return len(value) if isinstance(value, (list, dict)) else value


DASH = "\u2013"
AUTHORS_STEPS = 1000  # a full replay of the paper's seeds (a shorter one is the quick profile's)
EXTENDED_HOWTO = "python -m derive.all --only experiments --extended"
VERDICT_LABELS = (("replay", "paper's streams"), ("fresh", "fresh streams"))


def _num(value, digits):
    """Fixed decimals, or a dash for a missing or non-numeric value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return DASH
    return f"{value:.{digits}f}"


def _mean(values):
    values = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(values) / len(values) if values else None


def _pair(values, i):
    return values[i] if isinstance(values, (list, tuple)) and len(values) > i else None


def claim_verdicts(claim):
    """E1-E3 answer two questions: [{label, verdict, reason, detail}] for the paper's streams (the paper's
    seeds replayed) and for fresh streams; empty for a claim with one verdict."""
    out = []
    for key, label in VERDICT_LABELS:
        v = (claim.get("verdicts") or {}).get(key)
        if not isinstance(v, dict):
            continue
        detail = label + (f", {v['seeds']} seeds" if key == "fresh" and v.get("seeds") else
                          ", the paper's seeds replayed" if key == "replay" else "")
        out.append({"label": label, "verdict": v.get("verdict", "not-run"), "reason": v.get("reason", ""),
                    "detail": detail})
    return out


def claim_context(claim):
    """What a two-verdict claim's evidence says beyond its two reasons (other draws of mu, typicality)."""
    fresh = (claim.get("verdicts") or {}).get("fresh") or {}
    reason, evidence = fresh.get("reason"), claim.get("evidence", "")
    if reason and f"{reason}." in evidence:
        return evidence.split(f"{reason}.", 1)[1].strip()
    return "" if reason else evidence


def replay_view(experiments):
    """The paper's seeds on the authors' streams: a sentence, a per-seed table (header, rows of cells)."""
    rp = experiments.get("sticky_replay")
    if not rp:
        return None
    rows, steps = rp.get("rows") or [], rp.get("steps")
    paper = (experiments.get("sticky_markov") or {}).get("paper") or {}
    err = rp.get("max_loss_error")
    err_text = f"largest loss difference {err:.1e}" if isinstance(err, (int, float)) else "loss difference not recorded"
    ok = rp.get("ok")
    view = {"steps": steps, "full": steps == AUTHORS_STEPS, "rows": []}
    if view["full"]:
        metric = rp.get("max_metric_error")
        if isinstance(metric, (int, float)) and any("entropy" in r for r in rows):
            err_text += f", largest entropy or accuracy difference {metric:.1e}"
        ours = (f"SGD {_num(rp.get('sgd_final_loss', _mean([r.get('sgd_final') for r in rows])), 3)}, "
                f"EM-like {_num(rp.get('em_like_final_loss', _mean([r.get('em_like_final') for r in rows])), 3)}"
                + (f", speedup {rp['speedup']:.2f}x" if isinstance(rp.get("speedup"), (int, float)) else ""))
        theirs = ""
        if paper:
            theirs = (f", against the paper's {paper.get('sgd_final_loss')}, {paper.get('em_like_final_loss')}"
                      + (f" and {paper.get('speedup')}x" if "speedup" in rp else ""))
        if ok:
            view["summary"] = (f"On the paper's own random streams our trainer ends where the authors' script ends, "
                               f"seed for seed ({err_text}): {ours}{theirs}.")
        else:
            steps_text = (f"; EM-like steps {rp.get('em_steps')} against the script's {rp.get('authors_em_steps')}"
                          if "em_steps" in rp else "")
            view["summary"] = (f"On the paper's own random streams our trainer does not end where the authors' script "
                               f"ends ({err_text}{steps_text}): {ours}{theirs}.")
        if isinstance(rp.get("authors_speedup"), (int, float)) and paper.get("speedup") is not None:
            view["note"] = (f"The authors' script itself gives a speedup of {rp['authors_speedup']:.2f}x on these seeds "
                            f"(EM-like steps {_num(_mean(rp.get('authors_em_steps') or []), 1)} on average); "
                            f"the paper prints {paper['speedup']}x ({paper.get('em_steps')} steps).")
        view["header"] = ["seed", "run", "SGD final", "EM-like final", "SGD at step 0", "entropy SGD",
                          "entropy EM-like", "accuracy SGD", "accuracy EM-like", "EM-like steps"]
        em_steps, authors_em = rp.get("em_steps") or [], rp.get("authors_em_steps") or []
        for i, r in enumerate(rows):
            view["rows"].append({"first": True, "cells": [
                str(r.get("seed", "")), "ours", *_replay_cells(r, ""), str(em_steps[i]) if len(em_steps) == len(rows) else DASH]})
            view["rows"].append({"first": False, "cells": [
                "", "authors' script", *_replay_cells(r, "authors_"),
                str(authors_em[i]) if len(authors_em) == len(rows) else DASH]})
        if rows:
            for label, prefix, em, speed in (("ours", "", em_steps, rp.get("speedup")),
                                             ("authors' script", "authors_", authors_em, rp.get("authors_speedup"))):
                mean = {f"{prefix}{k}": _mean([r.get(prefix + k) for r in rows])
                        for k in ("sgd_final", "em_like_final", "sgd_start")}
                for k in ("entropy", "accuracy"):
                    mean[prefix + k] = [_mean([_pair(r.get(prefix + k), j) for r in rows]) for j in (0, 1)]
                steps_cell = (f"{_num(_mean(em), 1)} ({speed:.2f}x)" if isinstance(speed, (int, float)) and em else DASH)
                view["rows"].append({"first": not prefix, "cells": ["mean" if not prefix else "", label,
                                                                    *_replay_cells(mean, prefix), steps_cell]})
            if paper:
                view["rows"].append({"first": True, "cells": [
                    "paper", "", str(paper.get("sgd_final_loss", DASH)), str(paper.get("em_like_final_loss", DASH)),
                    *[DASH] * 5, f"{paper.get('em_steps', '-')} ({paper.get('speedup', '-')}x)"]})
    else:
        match = "matches" if ok else "does not match"
        view["summary"] = (f"In this profile the replay of the paper's seeds on the authors' streams is shortened to "
                           f"{steps} steps: seed for seed, our trainer {match} the authors' script at step 0 and our "
                           f"full {AUTHORS_STEPS}-step replay at step {steps} ({err_text}). The final losses, entropy, "
                           f"accuracy and EM-like steps need the full replay (python -m derive.all --only experiments).")
        view["header"] = ["seed", "SGD at step 0", "authors' script", f"SGD at step {steps}", "full replay",
                          f"EM-like at step {steps}", "full replay"]
        for r in rows:
            rec = r.get("recorded_at")
            view["rows"].append({"first": True, "cells": [
                str(r.get("seed", "")), _num(r.get("sgd_start"), 6), _num(r.get("authors_sgd_start"), 6),
                _num(r.get("sgd_at"), 6), _num(_pair(rec, 0), 6), _num(r.get("em_like_at"), 6), _num(_pair(rec, 1), 6)]})
    return view


def _replay_cells(r, prefix):
    """Final losses, step-0 SGD loss, entropy and accuracy (SGD, EM-like) of one replay row (ours, or the
    authors' script's with prefix 'authors_')."""
    ent, acc = r.get(prefix + "entropy"), r.get(prefix + "accuracy")
    return [_num(r.get(prefix + "sgd_final"), 6), _num(r.get(prefix + "em_like_final"), 6),
            _num(r.get(prefix + "sgd_start"), 6), _num(_pair(ent, 0), 4), _num(_pair(ent, 1), 4),
            _num(_pair(acc, 0), 4), _num(_pair(acc, 1), 4)]


def fresh_summary(claims, experiments):
    """One sentence on fresh streams from E1's fresh-stream measurement and the main run's final losses."""
    e1 = next((c for c in claims if c.get("id") == "E1"), {})
    fresh = (e1.get("verdicts") or {}).get("fresh") or {}
    m = fresh.get("measured") or {}
    if not isinstance(m.get("speedup"), (int, float)):
        return None
    n = fresh.get("seeds") or m.get("n_seeds")
    ci = m.get("ci95") or []
    text = f"On fresh streams ({n} seeds) the EM-like arm reaches SGD's mean final loss"
    if isinstance(m.get("threshold"), (int, float)):
        text += f" ({m['threshold']:.3f})"
    if isinstance(m.get("em_steps_mean"), (int, float)):
        text += f" after {m['em_steps_mean']:.0f} of {m.get('steps', '?')} steps on average"
    text += f": a speedup of {m['speedup']:.2f}x"
    if len(ci) == 2:
        text += f" (95% CI {ci[0]:.2f}\u2013{ci[1]:.2f}"
        text += f"; identical arms score {m['baseline']:.2f}x)" if isinstance(m.get("baseline"), (int, float)) else ")"
    if m.get("paper_speedup") is not None:
        text += f", against the paper's {m['paper_speedup']}x"
    arms = (experiments.get("sticky_markov") or {}).get("arms") or {}
    if all(isinstance(arms.get(a, {}).get("final_loss"), (int, float)) for a in ("sgd", "em_like")):
        text += f"; final loss SGD {arms['sgd']['final_loss']:.3f}, EM-like {arms['em_like']['final_loss']:.3f}"
    return text + f". Verdict on fresh streams: {fresh.get('verdict', e1.get('verdict', 'not-run'))}."


def _ci(values, digits=3, suffix=""):
    return (f" (95% CI {values[0]:.{digits}f}{suffix}\u2013{values[1]:.{digits}f}{suffix})"
            if isinstance(values, (list, tuple)) and len(values) == 2 else "")


def _range(d, digits=3, suffix=""):
    d = d or {}
    lo, hi = d.get("p2.5"), d.get("p97.5")
    return f"{_num(lo, digits)}{suffix}\u2013{_num(hi, digits)}{suffix}" if lo is not None else DASH


def typicality_view(experiments):
    """The typicality study side by side: [label, authors' protocol, our protocol] rows and the difference."""
    study = experiments.get("typicality")
    if not study:
        return None
    protocols = study.get("protocols") or {}
    names = [p for p in ("authors", "ours") if p in protocols]
    ref = study.get("reference") or {}
    size = study.get("subset_size", 5)

    def cells(fn):
        return [fn(protocols[p]) for p in names]

    def arm(e, key):
        a = e.get(key) or {}
        return _num(a.get("final_loss_mean"), 3) + _ci(a.get("final_loss_ci95"))

    def frac(key):
        return lambda e: _pct_plain(((e.get("subset") or {}).get("fraction_as_favourable") or {}).get(key))

    rows = [["seeds", *cells(lambda e: str(e.get("seeds", DASH)))],
            ["SGD final loss, mean", *cells(lambda e: arm(e, "sgd"))],
            ["EM-like final loss, mean", *cells(lambda e: arm(e, "em_like"))],
            ["speedup", *cells(lambda e: _num(e.get("speedup"), 2) + "x" + _ci(e.get("speedup_ci95"), 2, "x"))],
            [f"{size}-seed subsets, SGD final loss (2.5\u201397.5 percentile)",
             *cells(lambda e: _range((e.get("subset") or {}).get("sgd_final_loss")))],
            [f"{size}-seed subsets, EM-like final loss (2.5\u201397.5 percentile)",
             *cells(lambda e: _range((e.get("subset") or {}).get("em_like_final_loss")))],
            [f"{size}-seed subsets, speedup (2.5\u201397.5 percentile)",
             *cells(lambda e: _range((e.get("subset") or {}).get("speedup"), 2, "x"))],
            [f"{size}-seed subsets with EM-like final loss \u2264 {_num(ref.get('em_like_final_loss'), 3)}",
             *cells(frac("em_like_final_loss"))],
            [f"{size}-seed subsets with SGD final loss \u2264 {_num(ref.get('sgd_final_loss'), 3)}",
             *cells(frac("sgd_final_loss"))],
            [f"{size}-seed subsets with speedup \u2265 {_num(ref.get('speedup'), 2)}x", *cells(frac("speedup"))]]
    seeds = study.get("seeds") or []
    span = f" (seeds {seeds[0]}\u2013{seeds[-1]}, none of the paper's five)" if seeds else ""
    summary = (f"Both arms on {len(seeds) or 'further'} further seeds{span} under two protocols that differ only in how "
               f"each seed's randomness is drawn, with the authors' \u03bc: the authors' protocol (the authors' streams, "
               f"weights and data drawn from one generator) and ours (independent streams). The paper's five seeds on "
               f"the authors' streams give SGD {_num(ref.get('sgd_final_loss'), 3)}, EM-like "
               f"{_num(ref.get('em_like_final_loss'), 3)}, speedup {_num(ref.get('speedup'), 2)}x; the last rows give "
               f"the fraction of {study.get('subsets', 'random')} random {size}-seed subsets at least as favourable.")
    diff = study.get("difference_authors_minus_ours") or {}
    parts = []
    for key, label in (("sgd", "SGD"), ("em_like", "EM-like")):
        d = diff.get(key)
        if isinstance(d, dict) and isinstance(d.get("difference"), (int, float)):
            p = d.get("p_value")
            ci = d.get("ci95") or []
            inside = [f"95% CI {ci[0]:+.4f} to {ci[1]:+.4f}"] if len(ci) == 2 else []
            inside += [f"p = {p:.2g}"] if isinstance(p, (int, float)) else []
            parts.append(f"{label} final loss {d['difference']:+.4f}" + (f" ({', '.join(inside)})" if inside else ""))
    difference = ("Authors' protocol minus ours: " + "; ".join(parts) + ".") if parts else ""
    labels = {"authors": "authors' protocol", "ours": "our protocol"}
    return {"summary": summary, "header": ["", *(labels[p] for p in names)], "rows": rows, "difference": difference}


def _pct_plain(value):
    return DASH if not isinstance(value, (int, float)) else f"{100 * value:.1f}%"


OPTIMIZER_LABELS = {"sgd": "SGD", "em_like": "EM-like", "adamw": "AdamW"}


def deep_view(experiments, claims):
    """W1's section: a sentence on the run, the verdict with its reason, a row per optimizer, the figures."""
    dw = experiments.get("deep_watch")
    if not dw:
        return None
    w1 = next((c for c in claims if c.get("id") == "W1"), {})
    cfg = dw.get("config") or {}
    rows = []
    for name, o in (dw.get("optimizers") or {}).items():
        ci = o.get("kl_bits_ci95") or []
        lr = _num(o.get("lr"), 4) + (f" (V {_num(o['value_lr'], 3)})" if "value_lr" in o else "")
        rows.append([OPTIMIZER_LABELS.get(name, name), lr, _num(o.get("final_loss"), 4),
                     _num(o.get("kl_bits"), 4) + (f" ({ci[0]:.4f}{DASH}{ci[1]:.4f})" if len(ci) == 2 else ""),
                     f"{o.get('heads_frozen', DASH)}/{o.get('units', DASH)}", _num(o.get("median_freeze_step"), 0),
                     _pct_plain(o.get("frame_first_fraction")),
                     f"{_num(o.get('routing_end_ratio_median'), 2)}, {_num(o.get('values_end_ratio_median'), 2)}",
                     o.get("verdict", DASH)])
    seconds = dw.get("train_seconds")
    summary = (f"A {dw.get('layers')}-layer, {dw.get('heads')}-head causal nn.TransformerEncoder (d_model "
               f"{cfg.get('d_model', DASH)}, feed-forward {cfg.get('ff', DASH)}, pre-LN, no dropout) predicts the next "
               f"symbol of the sticky wind tunnel's sequences ({cfg.get('symbols', DASH)} symbols, length "
               f"{cfg.get('length', DASH)}). Each of {len(dw.get('seeds', []))} seeds "
               f"({', '.join(map(str, dw.get('seeds', [])))}) draws one data stream and one set of initial weights, "
               f"trained {dw.get('steps')} steps (batch {cfg.get('batch', DASH)}) by SGD, the EM-like schedule and "
               f"AdamW; every {dw.get('every')} steps the watcher records every head on a fixed probe batch"
               + (f" ({seconds:.0f} s in all)" if isinstance(seconds, (int, float)) else "") + ". KL to the exact Bayes "
               f"predictive (entropy {_num(dw.get('bayes_entropy_bits'), 3)} bits) is measured on "
               f"{cfg.get('eval_batch', DASH)} held-out sequences, its 95% interval by bootstrap over them; final loss "
               f"is the mean training loss of the last {dw.get('tail_steps', DASH)} steps. Smallest C9 slack over every "
               f"record: {fmt(dw.get('min_c9_slack'), 3)}.")
    return {"summary": summary, "verdict": w1.get("verdict", "not-run"), "reason": w1.get("evidence", ""),
            "header": ["optimizer", "LR", "final loss (nats)", "KL to Bayes (bits, 95% CI)", "routing froze",
                       "median freeze step", "froze before values settled", "drift at end / early (routing, values)",
                       "verdict"],
            "rows": rows, "figures": list(DEEP_FIGURES)}


MANIFOLD_REFERENCES = (("rule", "model's entropy"), ("rule_bayes", "Bayes entropy"))


def manifold_view(experiments, claims):
    """V1's section as a measured claim's entry (reports.build.measured_claim): a sentence on the run, the verdict
    against the model's entropy with its reason, one table row per layer, kind and entropy."""
    vm = experiments.get("value_manifold")
    if not vm or not isinstance(vm.get("rule"), dict):
        return None
    v1 = next((c for c in claims if c.get("id") == "V1"), {})
    cfg = vm.get("config") or {}
    rows = []
    for key, label in MANIFOLD_REFERENCES:
        for name, u in ((vm.get(key) or {}).get("measured", {}).get("units") or {}).items():
            share, rho = u.get("pc1_share_ci95"), u.get("spearman_ci95")
            rows.append([name, label, _num(u.get("pc1_share"), 3), _interval(share, 3), _num(u.get("spearman"), 3),
                         _interval(rho, 3), u.get("verdict", DASH)])
    seconds = vm.get("train_seconds")
    section = (f"A {cfg.get('layers', DASH)}-block GPT-2-style model (d_model {cfg.get('d_model', DASH)}, "
               f"{cfg.get('heads', DASH)} heads, pre-LN, scaled_dot_product_attention, tied readout; "
               f"{vm.get('parameters', DASH)} parameters) trained {cfg.get('steps', DASH)} AdamW steps of "
               f"{cfg.get('batch', DASH)} wind-tunnel sequences of length {cfg.get('length', DASH)} (E5's task)"
               + (f" in {seconds:.1f} s" if isinstance(seconds, (int, float)) else "")
               + f"; final loss {_num(vm.get('final_loss'), 4)} nats, KL to Bayes {_num(vm.get('kl_bits'), 4)} bits, "
               f"entropy error {_num(vm.get('entropy_mae_bits'), 3)} bits, Spearman of its entropy with Bayes's "
               f"{_num(vm.get('spearman_model_bayes_entropy'), 3)}, on {cfg.get('eval_batch', DASH)} held-out "
               f"sequences. Per layer the value vectors and the attention outputs (heads concatenated, before the "
               f"output projection) are captured in one forward pass (numeric.manifold.capture) and measured against "
               f"the model's predictive entropy (the claim's verdict) and the exact Bayes entropy (beside it): PC1's "
               f"share of the variance and Spearman of the PC1 coordinate, 95% intervals over "
               f"{cfg.get('resamples', DASH)} bootstrap resamples of the sequences. Against the Bayes entropy: "
               f"{vm['rule_bayes'].get('verdict', DASH)}.")
    return {"verdict": v1.get("verdict", vm["rule"].get("verdict", "not-run")),
            "reason": vm["rule"].get("reason", ""), "section": section, "measured": {},
            "tables": [{"caption": f"PC1 share and Spearman per layer (reproduced: both interval lower ends at or "
                                   f"above the thresholds, PC1 {_pct_plain(vm['rule']['measured'].get('share_at_least'))}, "
                                   f"|rho| {vm['rule']['measured'].get('abs_spearman_at_least', DASH)})",
                        "header": ["layer (kind)", "entropy", "PC1 share", "95% interval", "Spearman",
                                   "95% interval", "verdict"], "rows": rows}]}


def _interval(values, digits):
    return f"{values[0]:.{digits}f}{DASH}{values[1]:.{digits}f}" if isinstance(values, list) and len(values) == 2 else DASH


def grid_view(experiments, claims):
    """G1 and G2's section: every mechanism trained on the sticky chain and in the wind tunnel under both arms; the
    verdicts with their reasons, a row per mechanism, the figure, the campaign's figures."""
    mg = experiments.get("mechanisms")
    if not mg or not mg.get("mechanisms"):
        return None
    verdict = {c.get("id"): c for c in claims if c.get("id") in ("G1", "G2")}
    comp, tunnel = mg.get("competition", {}), (mg.get("tunnel") or {})
    routes = mg.get("content_routing", {})
    tm = tunnel.get("mechanisms", {})
    steps = mg.get("step_seconds", {})
    base = steps.get(mg.get("step_reference", "softmax"))  # the paper's mechanism, as the stage names it
    rows = []
    for m, s in mg["mechanisms"].items():
        if s.get("failed"):
            rows.append([m, "failed"] + [DASH] * 10)
            continue
        a, t = s.get("arms", {}), tm.get(m, {})
        te = (t.get("arms") or {}) if not t.get("failed") else {}
        kl = lambda arm, te=te: (f"{_num(te[arm]['kl_bits'], 4)} ({_interval(te[arm]['kl_bits_ci95'], 4)})"  # noqa: E731
                                 if arm in te else DASH)
        step = steps.get(m)
        yes_no = lambda x: {True: "yes (proved)", False: "no (disproved)"}.get(x, "undecided")  # noqa: E731
        share = (mg.get("content_share") or {}).get(m)
        rows.append([m, yes_no(comp.get(m)), yes_no(routes.get(m)), _num(share, 2) if share is not None else DASH,
                     f"{_num(a.get('sgd', {}).get('final_loss'), 4)} / {_num(a.get('em_like', {}).get('final_loss'), 4)}",
                     f"{_num(s.get('speedup'), 2)} ({_interval(s.get('ci95'), 2)})",
                     f"{s.get('excess', 0):+.2f} ({_interval(s.get('excess_ci95'), 2)})" if "excess" in s else DASH,
                     _num(a.get("em_like", {}).get("heldout_kl_to_bayes_bits"), 4),
                     kl("sgd"), kl("em_like"),
                     (s.get("frame_precision") or {}).get("verdict", DASH),
                     f"{step / base:.2f}" if isinstance(step, (int, float)) and base else DASH])
    camp = mg.get("campaign", {})
    tcfg = (tunnel.get("config") or {}).get("tunnel", {})
    summary = (f"Every routing mechanism of the table above as a trainable layer (the same projections, readout and "
               f"loss; its own routing and content parameters), trained on the sticky chain ({mg.get('grid')}: T = "
               f"{mg.get('length')}, {mg.get('steps')} full-batch steps, seeds {', '.join(map(str, mg.get('seeds', [])))}) "
               f"under SGD (every parameter at lr 0.01) and the EM-like schedule (the content at 10x), every mechanism "
               f"on the same data and seeds; and in the wind tunnel (E5's task: "
               f"{tcfg.get('steps', DASH)} steps of {tcfg.get('batch', DASH)} fresh sequences, lr {tcfg.get('lr', DASH)}, "
               f"content {tcfg.get('value_lr_ratio', DASH)}x under EM-like; seeds "
               f"{', '.join(map(str, (tunnel.get('config') or {}).get('seeds', [])))}). Each mechanism and group of seeds "
               f"is one Dask task ({camp.get('computed', DASH)} computed, {camp.get('cached', DASH)} from the cache, "
               f"{camp.get('workers', DASH)} workers, {_num(camp.get('wall_s'), 1)} s). Competition labels: "
               f"{mg.get('labels_source', DASH)}.")
    return {"summary": summary,
            "verdicts": [{"id": cid, "verdict": verdict.get(cid, {}).get("verdict", "not-run"),
                          "reason": verdict.get(cid, {}).get("evidence", ""),
                          "statement": verdict.get(cid, {}).get("statement", "")} for cid in ("G1", "G2")],
            "header": ["mechanism", "keys compete", "routes by content", "share of parameters at the content rate",
                       "final loss SGD / EM-like (nats)", "speedup (95% CI)",
                       "excess over identical arms (95% CI)", "held-out KL to Bayes, EM-like (bits)",
                       "tunnel KL, SGD (bits, 95% CI)", "tunnel KL, EM-like (bits, 95% CI)",
                       "E4: frame settles first", "step time / softmax's"],
            "rows": rows, "figures": ["mechanism_grid"]}


# The paper's conjecture, as the mechanism table's questions (derive/mechanisms/questions.py): a mechanism routes
# like softmax attention when (a)-(d) hold. The LaTeX is a fallback where results.json lacks a question's own.
CONJECTURE = (("a", "advantage", "routes by advantage", r"\frac{\partial L}{\partial s_{ij}} = w_{ij}\big(b_{ij}-\sum_k w_{ik}b_{ik}\big)"),
              ("b", "competition", "keys compete", r"\sum_j \frac{\partial L}{\partial s_{ij}} = 0"),
              ("c", "content", "responsibility-weighted content", r"\frac{\partial L}{\partial v_j} = \sum_i w_{ij}u_i"),
              ("d", "em_step", "the EM-normalised content step exists: C10's completed square",
               r"J(\Delta)-J(\Delta^*)=\tfrac{N}{2\eta}\|\Delta-\Delta^*\|^2,\ \Delta^*=-\eta\,\tfrac{\sum_i w_{ij}u_i}{N}"))
MUTANT_LABELS = {"disproved": "rejected", "proved": "ACCEPTED", "holds": "ACCEPTED (holds)"}


def math_pieces(latex):
    """A formula split at its top-level ",\\ " separators (outside braces and brackets), so each piece is
    typeset on its own and a long formula wraps between pieces (inline math only breaks after relations)."""
    pieces, depth, start, i = [], 0, 0, 0
    text = str(latex or "")
    while i < len(text):
        ch = text[i]
        if ch == "\\":  # a control sequence or an escaped brace: never a separator, never a group
            i += 2
            continue
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        elif depth == 0 and text.startswith(",\\ ", i):
            pieces.append(text[start:i].strip())
            i += 3
            start = i
            continue
        i += 1
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def _names(names):
    return ", ".join(names) if names else ""


def _anchor(*parts):
    """An id for HTML and a hyperref target: letters, digits and hyphens."""
    return re.sub(r"[^A-Za-z0-9-]", "-", "-".join(map(str, parts)))


def _cell_paths(cell):
    """'general: proved (unmasked), proved (masked); ...' for a cell's tooltip."""
    out = []
    for path, o in (cell.get("paths") or {}).items():
        if isinstance(o, dict):
            out.append(f"{path}: " + ", ".join(f"{v} ({k})" for k, v in o.items()))
        else:
            out.append(f"{path}: {o}")
    steps = cell.get("steps")
    if isinstance(steps, dict):
        out.append("C9's steps: " + ", ".join(f"{k} {v}" for k, v in steps.items()))
    return "; ".join(out)


def _witness_view(mechanism, question, w):
    """A disproved cell's witness for both outputs: an identity's (sizes, mask, indices, point, both sides) or
    a bound's (saturation: one query row at given logits and compatibilities, both sides' certified bounds)."""
    base = {"mechanism": mechanism, "question": question, "anchor": _anchor("mech-witness", mechanism, question),
            "sizes": witness_sizes(w) if isinstance(w.get("sizes"), dict) else str(w.get("sizes", DASH))}
    point = w.get("point") if isinstance(w.get("point"), dict) else {}
    if "lhs_at_least" in w or "rhs_at_most" in w:
        setting = [f"query row {w['row']}" if "row" in w else None,
                   f"{w['options']} options" if "options" in w else None,
                   f"b ({', '.join(map(str, w.get('b', [])))})" if "b" in w else None,
                   f"weights ≈ ({', '.join(map(str, w.get('weights', [])))})" if "weights" in w else None]
        return {**base, "kind": "bound", "mask": "causal mask" if w.get("masked") else "unmasked",
                "indices": str(w["row"]) if "row" in w else DASH, "lhs": f"≥ {w.get('lhs_at_least', DASH)}",
                "rhs": f"≤ {w.get('rhs_at_most', DASH)}", "setting": "; ".join(s for s in setting if s),
                "point": point_entries(point), "point_count": len(point)}
    return {**base, "kind": "identity", "mask": "causal mask" if w.get("masked") else "unmasked",
            "indices": "(" + ", ".join(map(str, w.get("indices") or [])) + ")", "lhs": str(w.get("lhs", DASH)),
            "rhs": str(w.get("rhs", DASH)), "setting": "", "point": point_entries(point), "point_count": len(point)}


def _obj(value):
    """A results.json object, or {} for anything else (a hand-edited or partial file)."""
    return value if isinstance(value, dict) else {}


def mechanisms_view(results):
    """results.json's `mechanisms` (derive.mechanisms.table) for both outputs, or None where it is absent: the
    paper's conjecture as (a)-(d) with who satisfies each, the mechanism x question table, every disproved cell's
    witness, the mutants."""
    data = _obj(results.get("mechanisms"))
    meta, table = _obj(data.get("questions")), {k: v for k, v in _obj(data.get("table")).items() if isinstance(v, dict)}
    if not table:
        return None
    order = list(meta)
    for row in table.values():
        order += [q for q in _obj(row.get("questions")) if q not in order]
    letters = {q: letter for letter, q, _, _ in CONJECTURE}
    fallback = {q: latex for _, q, _, latex in CONJECTURE}
    questions = [{"id": q, "title": _obj(meta.get(q)).get("title") or q, "letter": letters.get(q, ""),
                  "latex": math_pieces(_obj(meta.get(q)).get("latex") or fallback.get(q, ""))} for q in order]
    rows, witnesses, mutants, extras = [], [], [], []
    for name, row in table.items():
        cells = []
        for q in order:
            cell = _obj(row.get("questions")).get(q)
            if not isinstance(cell, dict):
                cells.append({"question": q, "verdict": "not asked", "cls": "neutral", "reason": "", "tooltip": "",
                              "anchor": "", "why_anchor": ""})
                continue
            verdict = cell.get("verdict", "undecided")
            w = cell.get("witness")
            anchor = ""
            if isinstance(w, dict):  # a counterexample (content_routing's: the point that proves it routes)
                witnesses.append(_witness_view(name, q, w))
                anchor = witnesses[-1]["anchor"]
            reason = cell.get("reason") or ""
            cells.append({"question": q, "verdict": verdict, "cls": verdict_class(verdict), "anchor": anchor,
                          "reason": reason if verdict not in ("proved", "disproved") else "",
                          "why_anchor": _anchor("mech-why", name, q),
                          "tooltip": "; ".join(x for x in (reason, _cell_paths(cell)) if x)})
        rows.append({"name": name, "title": row.get("title", ""), "ref": row.get("ref", ""),
                     "normalised": row.get("normalised"), "latex": math_pieces(row.get("latex")),
                     "routing_latex": math_pieces(row.get("routing_latex")), "cells": cells,
                     "verdicts": {c["question"]: c["verdict"] for c in cells}})
        for mid, m in _obj(row.get("mutants")).items():
            paths = _obj(_obj(m).get("paths"))
            mutants.append({"id": mid, "mechanism": name, "question": _obj(m).get("question", ""),
                            "description": _obj(m).get("description", ""), "paths": paths,
                            "all_rejected": bool(paths) and all(v == "disproved" for v in paths.values())})
        for ename, e in _obj(row.get("extra")).items():
            verdict = _obj(e).get("verdict", "undecided")
            extras.append({"mechanism": name, "name": ename, "latex": math_pieces(_obj(e).get("latex")),
                           "verdict": verdict, "cls": verdict_class(verdict)})
    mutant_paths = [p for p in PATHS if any(p in m["paths"] for m in mutants)]
    mutant_paths += sorted({p for m in mutants for p in m["paths"]} - set(mutant_paths))
    for m in mutants:
        m["cells"] = [MUTANT_LABELS.get(m["paths"].get(p), m["paths"].get(p, "not run")) for p in mutant_paths]
    return {"questions": questions, "rows": rows, "witnesses": witnesses, "mutants": mutants,
            "mutant_paths": mutant_paths, "extras": extras, "conjecture": _conjecture(rows, meta),
            "rejected": sum(m["all_rejected"] for m in mutants), "seconds": data.get("seconds"),
            "content_routing_controls": [{"name": n, "description": _obj(c).get("description", ""),
                                          "expected": _obj(c).get("expected", ""), "verdict": _obj(c).get("verdict", ""),
                                          "ok": _obj(c).get("verdict") == _obj(c).get("expected")}
                                         for n, c in _obj(data.get("content_routing_controls")).items()],
            "path_seconds": {p: s for p, s in _obj(data.get("path_seconds")).items()
                             if isinstance(s, (int, float)) and not isinstance(s, bool)}}


def _conjecture(rows, meta):
    """(a)-(d) with the mechanisms each was proved and disproved for, and who satisfies all four."""
    claims = []
    for letter, q, text, fallback in CONJECTURE:
        by = {v: [r["name"] for r in rows if r["verdicts"].get(q) == v] for v in ("proved", "disproved")}
        by["open"] = [r["name"] for r in rows if r["verdicts"].get(q) not in ("proved", "disproved")]
        claims.append({"letter": letter, "question": q, "text": text,
                       "latex": math_pieces(_obj(meta.get(q)).get("latex") or fallback),
                       "proved": _names(by["proved"]), "disproved": _names(by["disproved"]), "open": _names(by["open"])})
    holds, refuted, open_ = [], [], []
    for r in rows:
        failed = [letter + (", under a mask" if r["verdicts"].get(q) == "mask-dependent" else "")
                  for letter, q, _, _ in CONJECTURE if r["verdicts"].get(q) in ("disproved", "mask-dependent")]
        if failed:
            refuted.append({"name": r["name"], "failed": " and ".join(f"({x})" for x in failed)})
        elif all(r["verdicts"].get(q) == "proved" for _, q, _, _ in CONJECTURE):
            holds.append(r["name"])
        else:
            open_.append(r["name"])
    return {"claims": claims, "holds": _names(holds), "refuted": refuted, "open": _names(open_)}


def claim_rows(claims):
    """The claims table, decided here so that the templates only print: per claim its verdict (and, for E1-E3,
    the two sub-verdicts), each path's outcome, the evidence lines, a witness in one line and, for an undecided
    claim, why."""
    rows = []
    for c in claims:
        statement = c.get("statement", "")
        paths = path_outcomes(c)
        witnesses = c.get("witnesses") or []
        why = first_reason(c)
        subs = claim_verdicts(c)
        rows.append({
            "id": c["id"], "name": c.get("name", ""), "statement": statement,
            "math": bool(statement) and (c["id"].startswith("C") or "parts" in c),
            "verdict": c["verdict"], "cls": verdict_class(c["verdict"]),
            "subs": [{**v, "cls": verdict_class(v["verdict"])} for v in subs],
            "paths": [{"path": p, "outcome": paths[p], "cls": outcome_class(paths[p])} for p in PATHS if p in paths],
            "evidence": [] if subs else [c.get("evidence", "")],
            "context": claim_context(c) if subs else "",
            "witness": witness_brief(witnesses[0]) if witnesses else "",
            "more_witnesses": max(0, len(witnesses) - 1),
            "why": why if c["verdict"] == "undecided" and why and why not in c.get("evidence", "") else "",
        })
    return rows


# The words a verdict can be, and what each means (the report's key; the same words in results.json).
KEY = (
    ("analytic claims and proof paths", (
        ("proved", "good", "the general path proved it at every size, masked and unmasked, and no path has a witness against it"),
        ("holds", "good", "a fixed-size path found it true at the sizes it tried, and no more (the sizes are in the check's scope)"),
        ("disproved", "bad", "a path found a witness: sizes, indices and an exact point where the two sides provably differ"),
        ("undecided", "partial", "no path could decide it within its budget; the reason is given"),
        ("failed", "bad", "a check of the claim failed, or two paths contradict each other (an internal inconsistency)"),
        ("not-run", "neutral", "no check of this run names the claim"))),
    ("empirical claims", (
        ("reproduced", "good", "the rule's test passes on the measurements, with the stated seeds and intervals"),
        ("partly-reproduced", "partial", "part of the claim holds (a direction, an arm, a margin); the evidence says which"),
        ("not-reproduced", "bad", "the measurements contradict the claim, or do not resolve it at the rule's margin"))),
    ("negative controls (kill matrix)", (
        ("rejected", "good", "the path disproved the deliberately wrong formula, with a witness"),
        ("ACCEPTED", "bad", "the path accepted a wrong formula: the path is unsound"),
        ("undecided", "partial", "the path could not say no (nor did it prove it)"))),
    ("faults planted in the engine", (
        ("killed", "good", "some probe's outcome changed: the verifier notices the fault"),
        ("survived", "bad", "no probe noticed the fault: a blind spot of the verifier"))),
    ("mechanisms table", (
        ("mask-dependent", "partial", "proved unmasked, disproved under the causal mask (witness given)"),
        ("error", "bad", "the mechanism's own code raised while the cell was decided (a failing check)"))),
)

# The report's sections, in order: (anchor, title); the table of contents and the headings read them.
SECTIONS = (("claims", "Claims at a glance"), ("derivations", "Derivations"),
            ("kill-matrix", "Negative controls: the kill matrix"), ("mechanisms", "Which mechanisms route by advantage?"),
            ("soundness", "How far the verdicts can be trusted"), ("numeric", "Numeric agreement"),
            ("benchmarks", "Benchmarks"), ("experiments", "Experiments"), ("key", "Key to the verdicts"),
            ("reproduce", "Environment and reproduction"))

def is_analytic(claim):
    """An analytic claim (the paper's C*, ours, a user's), not an empirical one: by the kind results.json records;
    a file written before it recorded kinds is read by the ids and parts it has."""
    if claim.get("kind"):
        return claim["kind"] != "empirical"
    return claim["id"].startswith("C") or "parts" in claim


def overall(results):
    """The banner: the exit status `python -m derive.all` gives these results (derive.verdict.exit_status), what it
    means, and the counts."""
    checks, claims = results["checks"], results["claims"]
    failed = [c["id"] for c in checks if c["status"] == "fail"]
    analytic = [c for c in claims if is_analytic(c)]
    open_ = [c["id"] for c in analytic if c["verdict"] in verdict.OPEN]
    status = verdict.exit_status(failed, results.get("inconsistencies"), [c["verdict"] for c in analytic])
    tally = lambda cs: [(v, sum(c["verdict"] == v for c in cs)) for v in dict.fromkeys(c["verdict"] for c in cs)]
    empirical = [c for c in claims if not is_analytic(c)]
    problems = []
    if results.get("inconsistencies"):
        problems.append(f"{len(results['inconsistencies'])} internal inconsistencies")
    if failed:
        problems.append(f"{len(failed)} failed checks ({', '.join(failed[:3])}{', ...' if len(failed) > 3 else ''})")
    if open_:
        problems.append("claims not proved: " + ", ".join(open_))
    return {"status": status, "ok": status == 0, "meaning": verdict.EXIT_MEANING[status], "problems": problems,
            "analytic": tally(analytic), "empirical": tally(empirical)}


def mu_groups_text(md):
    """Seeds per group of the fresh seeds ("3/3/3/2") and the speedup's spread over the groups: its range where
    the groups are few, else its interval (label, low, high)."""
    per = md.get("seeds_per_draw") or [len(md.get("seeds", []))]
    if md.get("speedup_range"):
        label, (lo, hi) = "range over draws", md["speedup_range"][:2]
    else:
        label, (lo, hi) = "95% CI over draws", (md.get("speedup_ci95") or [None, None])[:2]
    return {"per_group": "/".join(map(str, per)), "label": label, "lo": lo, "hi": hi}


def flat_numbers(measured, prefix=""):
    """[(dotted key, number)] of every number in a rule's measured dict, lists of up to 8 entries by index: the
    table of a claim measured from the other experiments (longer lists are curves, shown by their own figures)."""
    out = []
    items = measured.items() if isinstance(measured, dict) else (
        enumerate(measured) if isinstance(measured, list) and len(measured) <= 8 else ())
    for k, x in items:
        key = f"{prefix}{k}"
        if isinstance(x, bool) or not isinstance(x, (int, float, dict, list)):
            continue
        if isinstance(x, (dict, list)):
            out += flat_numbers(x, key + ".")
        else:
            out.append((key, x))
    return out
