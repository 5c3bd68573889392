"""Figures of the report, redrawn from results.json alone (SVG inline in HTML, PDF for LaTeX)."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import LogLocator, MaxNLocator, NullLocator, StrMethodFormatter  # noqa: E402

matplotlib.rcParams.update({"svg.hashsalt": "report", "figure.dpi": 100, "font.size": 9, "axes.grid": True,
                            "grid.alpha": 0.3, "figure.figsize": (6.4, 3.4)})
COLORS = {"sgd": "#1f77b4", "em_like": "#d62728", "em_mstep": "#2ca02c", "adamw": "#9467bd"}


def loss_curves(r):
    sm = r.get("experiments", {}).get("sticky_markov")
    if not sm:
        return None
    fig, ax = plt.subplots()
    for arm, d in sm["arms"].items():
        c = d["curve"]
        lo = [m - h for m, h in zip(c["mean"], c["ci95"])]
        hi = [m + h for m, h in zip(c["mean"], c["ci95"])]
        label = f"{arm} ({len(d['seeds'])} seeds)" if "seeds" in d else arm
        ax.plot(c["step"], c["mean"], color=COLORS.get(arm), label=label)
        ax.fill_between(c["step"], lo, hi, color=COLORS.get(arm), alpha=0.2, linewidth=0)
    ax.axhline(sm["threshold"], color="k", ls="--", lw=0.8, label="mean final SGD loss")
    ax.axhline(sm["h_min"], color="gray", ls=":", lw=0.8, label=r"$H_{\min}$")
    ax.set(xlabel="step", ylabel="training loss (nats)", title="Sticky chain: loss, mean and 95% CI over seeds")
    ax.legend(fontsize=7)
    return fig


def steps_to_threshold(r):
    sm = r.get("experiments", {}).get("sticky_markov")
    if not sm:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    seeds = [str(s) for s in sm["seeds"]]
    authors = set(map(str, sm.get("paper_seeds", {}).get("seeds", [])))
    bars = ax.bar(seeds, sm["steps_to_threshold"], color=["#8c1515" if s in authors else COLORS["em_like"] for s in seeds])
    if authors:
        bars[next(i for i, s in enumerate(seeds) if s in authors)].set_label("the authors' seeds")
    ax.axhline(sm["paper"]["em_steps"], color="k", ls="--", lw=0.8, label=f"paper: {sm['paper']['em_steps']}")
    ax.tick_params(axis="x", labelrotation=90 if len(seeds) > 8 else 0, labelsize=7)
    ax.set(xlabel="seed", ylabel="EM-like steps", title=f"Steps to the SGD final loss (speedup {sm['speedup']:.2f}x)")
    ax.legend(fontsize=7)
    return fig


def entropy_floor(r):
    sm = r.get("experiments", {}).get("sticky_markov")
    if not sm:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    arms = list(sm["arms"])
    ax.bar(arms, [sm["arms"][a]["final_entropy"] for a in arms], color=[COLORS.get(a) for a in arms])
    ax.axhline(sm["h_min"], color="gray", ls=":", label=rf"$H_{{\min}}$ (paper {sm['paper']['h_min']})")
    ax.axhline(sm["bayes_floor"]["entropy"], color="k", ls="--", label="exact Bayes predictive entropy")
    ax.set(ylabel="final predictive entropy (nats)", ylim=(1.7, None), title="Entropy against the Bayes floor")
    ax.legend(fontsize=7)
    return fig


def frame_precision(r):
    fp = r.get("experiments", {}).get("sticky_markov", {}).get("frame_precision")
    if not fp:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 2.8))
    for arm, d in fp.items():
        axes[0].plot(d["steps"], d["alpha_js_to_final"], color=COLORS.get(arm), label=arm)
        axes[1].plot(d["steps"], d["values_rel_change_to_final"], color=COLORS.get(arm), label=f"{arm} W_V")
        if "V_rel_change_to_final" in d:
            axes[1].plot(d["steps"], d["V_rel_change_to_final"], color=COLORS.get(arm), ls="--", label=f"{arm} V")
    axes[0].set(xlabel="step", ylabel="JS(alpha, final)", title="frame (attention)")
    axes[1].set(xlabel="step", ylabel="relative change to final", title="precision (W_V solid, V dashed)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def lr_sweep(r):
    sw = r.get("experiments", {}).get("lr_ratio_sweep")
    if not sw:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    pts = sw["points"]
    ax.plot([p["ratio"] for p in pts], [p["speedup"] for p in pts], "o-")
    paper = r["experiments"].get("sticky_markov", {}).get("paper")
    if paper:
        ax.axhline(paper["speedup"], color="k", ls="--", lw=0.8, label=f"paper, ratio 10: {paper['speedup']}x")
    ax.set(xscale="log", xlabel="value LR / routing LR", ylabel="speedup vs SGD", title="Learning-rate ratio sweep")
    if paper:
        ax.legend(fontsize=7)
    return fig


def manifold(r):
    wt = r.get("experiments", {}).get("wind_tunnel")
    if not wt:
        return None
    d = wt["arms"]["em_like"]["pca_points"]
    fig, ax = plt.subplots(figsize=(5.0, 3.6))
    sc = ax.scatter(d["pc1"], d["pc2"], c=d["entropy_bits"], s=4, cmap="viridis")
    fig.colorbar(sc, ax=ax, label="Bayes predictive entropy (bits)")
    ax.set(xlabel="PC1", ylabel="PC2", title="Attention outputs (wind tunnel, EM-like arm)")
    return fig


def simulations(r):
    dyn = r.get("experiments", {}).get("dynamics")
    if not dyn:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(7.2, 2.6))
    e6, e7, c9 = dyn["advantage_sign"], dyn["specialisation"], dyn["saturation"]
    axes[0].plot(e6["step_sizes"], e6["scores"], "o-", label="score step")
    axes[0].plot(e6["step_sizes"], e6["queries_keys"], "s-", label="q/k step")
    axes[0].set(xscale="log", xlabel="step size", ylabel="sign agreement", title="E6")
    axes[0].legend(fontsize=6)
    axes[1].plot(e7["steps"], e7["cos_value_signal"], "o-")
    axes[1].set(xlabel="step", ylabel="cos(v_j, signal_j)", title="E7")
    axes[2].plot(c9["max_alpha"], c9["ds_norm"], "o-", label="|dS|")
    axes[2].plot(c9["max_alpha"], c9["dv_norm"], "s-", label="|dV|")
    axes[2].set(xlabel="mean max alpha", title="C9 saturation")
    axes[2].legend(fontsize=6)
    fig.tight_layout()
    return fig


def typicality(r):
    """Per-seed final losses of both arms under both protocols, with the paper's five seeds' means."""
    study = r.get("experiments", {}).get("typicality")
    protocols = (study or {}).get("protocols") or {}
    if not any((e.get(a) or {}).get("final_loss_per_seed") for e in protocols.values() for a in ("sgd", "em_like")):
        return None
    ref = study.get("reference") or {}
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 2.6))
    styles = {"authors": ("#8c1515", "authors' protocol"), "ours": ("#1f77b4", "our protocol")}
    for ax, arm, title in zip(axes, ("sgd", "em_like"), ("SGD", "EM-like")):
        for name, e in protocols.items():
            finals = (e.get(arm) or {}).get("final_loss_per_seed") or []
            color, label = styles.get(name, (None, name))
            if finals:
                ax.hist(finals, bins=min(15, max(3, len(finals) // 3)), color=color, alpha=0.45,
                        label=f"{label} ({len(finals)} seeds)")
        if isinstance(ref.get(f"{arm}_final_loss"), (int, float)):
            ax.axvline(ref[f"{arm}_final_loss"], color="k", ls="--", lw=0.8, label="the paper's five seeds")
        ax.set(xlabel="final training loss (nats)", ylabel="seeds", title=title)
    axes[0].legend(fontsize=6)
    fig.suptitle("Typicality: final loss per seed", fontsize=9)
    fig.tight_layout()
    return fig


def scaling(r):
    rows = r.get("derive", {}).get("scaling")
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    for var in ("n", "d", "m"):
        pts = [x for x in rows if x["varied"] == var]
        ax.plot([p["value"] for p in pts], [p["seconds"] for p in pts], "o-", label=f"vary {var}")
    ax.set(yscale="log", xlabel="size", ylabel="seconds", title="Exact fixed-size proofs: time against size")
    ax.legend(fontsize=7)
    return fig


def benchmark(r):
    rows = [b for b in r.get("benchmarks", []) if b["name"].startswith("numeric/fwd-bwd/module-vs-autograd")]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    labels = [f"n={b['shape']['n']}{' causal' if b['shape']['causal'] else ''}" for b in rows]
    ax.bar(labels, [b["ratio"] for b in rows])
    ax.axhline(1.0, color="k", ls="--", lw=0.8)
    ax.set(ylabel="time / autograd", title="Generated module, forward + backward, float32")
    ax.tick_params(axis="x", labelsize=7)
    return fig


def step_profile(r):
    """The sticky step per component (ms, marked steps), its achieved GFLOP/s beside its matrix products' alone and the
    matrix-product ceilings."""
    p = r.get("experiments", {}).get("step_roofline")
    if not p or not p.get("components_s"):
        return None
    names = list(p["components_s"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(7.2, 2.8), gridspec_kw={"width_ratios": [2, 1]})
    left.barh(names[::-1], [p["components_s"][n] * 1e3 for n in names[::-1]], color="#1f77b4")
    left.set(xlabel="ms per step", title=f"Sticky step, {p['runs']} runs, T = {p['length']}, {p['threads']} threads")
    left.tick_params(axis="y", labelsize=7)
    floor = {"products alone": p["products_gflops"]} if "products_gflops" in p else {}
    ceilings = {f"ceiling: {k.replace('_', ' ')}": c["gflops"] for k, c in p["ceiling"].items()}
    fused = {"fused step": p["fused"]["gflops"]} if p.get("fused") else {}
    bars = {"step": p["gflops"], **fused, **floor, **ceilings}
    right.bar(list(bars), list(bars.values()),
              color=["#d62728"] + ["#2ca02c"] * len(fused) + ["#ff7f0e"] * len(floor) + ["#7f7f7f"] * len(ceilings))
    right.set(ylabel="GFLOP/s (float32)", title="Roofline point")
    right.tick_params(axis="x", labelsize=6, rotation=20)
    return fig


STRUCTURE_COLORS = {True: "#2ca02c", False: "#ff7f0e", None: "#7f7f7f"}  # keys compete (proved) / not / undecided


def mechanism_grid(r):
    """G1 and G2: per mechanism the EM-like schedule's speedup on the sticky chain (95% interval over seeds, the
    identical-arms baseline marked) and the KL to Bayes in the wind tunnel (EM-like arm, 95% interval over seeds),
    coloured by the proved structure (keys compete or not)."""
    mg = r.get("experiments", {}).get("mechanisms")
    if not mg or not mg.get("mechanisms"):
        return None
    comp = mg.get("competition", {})
    names = [m for m, s in mg["mechanisms"].items() if not s.get("failed") and "speedup" in s]
    tunnel = (mg.get("tunnel") or {}).get("mechanisms", {})
    fig, (left, right) = plt.subplots(1, 2, figsize=(7.2, 3.0))
    y = list(range(len(names)))[::-1]
    for yi, m in zip(y, names):
        s, color = mg["mechanisms"][m], STRUCTURE_COLORS[comp.get(m)]
        lo, hi = s["ci95"]
        left.errorbar([s["speedup"]], [yi], xerr=[[s["speedup"] - lo], [hi - s["speedup"]]], fmt="o", color=color,
                      capsize=3, ms=4)
        left.plot([s["baseline"]], [yi], marker="|", color="k", ms=9)
        t = tunnel.get(m)
        if t and not t.get("failed"):
            e = t["arms"]["em_like"]
            lo, hi = e["kl_bits_ci95"]
            right.errorbar([e["kl_bits"]], [yi], xerr=[[max(e["kl_bits"] - lo, 0)], [max(hi - e["kl_bits"], 0)]],
                           fmt="o", color=color, capsize=3, ms=4)
            right.plot([t["arms"]["sgd"]["kl_bits"]], [yi], marker="x", color=color, ms=5, alpha=0.6)
    for ax in (left, right):
        ax.set_yticks(y, names, fontsize=8)
        ax.grid(axis="y", alpha=0)
    left.set(xlabel="speedup of EM-like over SGD (| identical arms)", title=f"G1, sticky chain ({len(mg.get('seeds', []))} seeds)")
    right.set(xlabel="KL to Bayes (bits; o EM-like, x SGD)", title="G2, wind tunnel")
    if tunnel:
        right.set_xscale("log")
        right.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0), numticks=6))
        right.xaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
        right.xaxis.set_minor_locator(NullLocator())
    handles = [plt.Line2D([], [], color=STRUCTURE_COLORS[k], marker="o", ls="", label=lab)
               for k, lab in ((True, "keys compete (proved)"), (False, "keys do not compete (disproved)"))]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.27, top=0.9, wspace=0.45)
    return fig


CONJECTURE_TASKS = ("bijection", "transitions")
CONJECTURE_TITLES = {"bijection": "G3, bijection recall", "transitions": "G3, enlarged wind tunnel"}


def _conjecture(task):
    def draw(r):
        return conjecture(r, task)
    draw.__doc__ = f"G3 on {task}: conjecture(r, {task!r})."
    return draw


def conjecture(r, task):
    """G3 on one task: per position the predictive entropy (bits, mean over held-out sequences and seeds) of every
    mechanism at the schedule G3 judges (g3.schedule), coloured by its content_routing cell, the baselines (the real LSTM) grey, Bayes black;
    the best floor's KL at the queries in the title."""
    entry = (r.get("experiments", {}).get("conjecture") or {}).get(task)
    bayes = (entry or {}).get("bayes_entropy_by_position")
    if not entry or not bayes:
        return None
    labels, base = entry.get("content_routing", {}), set(entry.get("baselines", ()))
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    x = list(range(1, len(bayes) + 1))
    from numeric.experiments.rules.g3 import schedule

    for m, s in entry["mechanisms"].items():
        e = (s.get("arms") or {}).get(schedule(s), {}) if not s.get("failed") else {}
        if "entropy_by_position" not in e:
            continue
        color, ls = (("#7f7f7f", "--") if m in base else (STRUCTURE_COLORS[labels.get(m)], "-"))
        ax.plot(x, e["entropy_by_position"], color=color, ls=ls, lw=1.0, alpha=0.85)
        ax.annotate(m, (x[-1], e["entropy_by_position"][-1]), fontsize=6, color=color, xytext=(2, 0),
                    textcoords="offset points", va="center")
    ax.plot(x, bayes, color="k", lw=1.6)
    ax.set(xlabel="position t", ylabel="predictive entropy (bits)", title=CONJECTURE_TITLES.get(task, task))
    handles = [plt.Line2D([], [], color=STRUCTURE_COLORS[True], label="routes by content (proved)"),
               plt.Line2D([], [], color=STRUCTURE_COLORS[False], label="does not (disproved)"),
               plt.Line2D([], [], color="#7f7f7f", ls="--", label="real LSTM (no cell)"),
               plt.Line2D([], [], color="k", lw=1.6, label="Bayes")]
    ax.legend(handles=handles, fontsize=7, loc="upper right", frameon=False)
    ax.set_xlim(1, len(bayes) * 1.12)
    return fig


# W1: one small-multiples figure per watched quantity (layers x heads panels, one curve per optimizer):
# name -> (quantities drawn solid then dashed, title, log scale)
DEEP_FIGURES = {
    "deep_entropy": (("entropy",), "attention entropy (nats)", False),
    "deep_saturation": (("saturation",), r"saturation $1 - \max_j \alpha_{ij}$", False),
    "deep_adv_row_l1": (("adv_row_l1",), r"advantage row mass $\sum_j |A_{ij}|$", True),
    "deep_resp_max": (("resp_max",), r"largest responsibility $\max_j N_j$", False),
    "deep_c9_slack": (("c9_slack",), "C9 slack (>= 0: the bound holds)", False),
    "deep_grad_norms": (("dS_norm", "dV_norm"), r"$\|dL/dS\|$ (solid) and $\|dL/dV\|$ (dashed)", True),
    "deep_js": (("js",), "routing drift: JS divergence of attention rows since the last record (nats)", True),
    "deep_v_change": (("v_change",), r"value drift: $\|V - V_{prev}\| / \|V_{prev}\|$", True),
}
DRIFTS = ("js", "v_change")  # recorded from the second record on
FIXED_LAYOUT = {*DEEP_FIGURES, "mechanism_grid"}  # laid out by themselves: saved without bbox_inches="tight"


def deep_grid(r, quantities, title, log):
    """A layers x heads grid of panels, each with every optimizer's curve (mean over seeds) over steps. Panels
    share the y axis within a layer and the x axis throughout (few tick labels: a figure renders in well under a
    second, eight of them are drawn)."""
    dw = r.get("experiments", {}).get("deep_watch")
    if not dw:
        return None
    L, H = dw["layers"], dw["heads"]
    fig, axes = plt.subplots(L, H, figsize=(7.2, 1.4 * L + 0.8), sharex=True, sharey="row", squeeze=False)
    for name, o in dw["optimizers"].items():
        s = o["series"]
        for q, ls in zip(quantities, ("-", "--")):
            steps = s["drift_steps"] if q in DRIFTS else s["steps"]
            for layer in range(L):
                for h in range(H):
                    axes[layer][h].plot(steps, s[q][layer][h], color=COLORS.get(name), ls=ls, lw=1,
                                        label=name if ls == "-" else None)
    for h, ax in enumerate(axes[0]):
        ax.set_title(f"head {h}", fontsize=7, pad=2)
    for layer, row in enumerate(axes):
        row[0].set_ylabel(f"layer {layer}", fontsize=7, labelpad=1)
        _ticks(row[0], log)  # the row shares its y axis
        for ax in row:
            ax.tick_params(labelsize=6, pad=1)
            ax.yaxis.get_offset_text().set_fontsize(6)
            ax.xaxis.set_major_locator(MaxNLocator(3, integer=True))
    for ax in axes[-1]:
        ax.set_xlabel("step", fontsize=7, labelpad=1)
    axes[0][0].legend(fontsize=6)
    height = 1.4 * L + 0.8
    fig.suptitle(f"W1, {len(dw['seeds'])} seeds: {title}", fontsize=8)
    fig.subplots_adjust(left=0.1, right=0.99, bottom=0.4 / height, top=1 - 0.5 / height, wspace=0.1, hspace=0.15)
    return fig


def _ticks(ax, log):
    """Few y ticks in plain text (mathtext labels are slow to draw): decades on a log axis spanning more than
    one, else 1-2-5 steps; three ticks on a linear axis."""
    if not log:
        ax.yaxis.set_major_locator(MaxNLocator(3))
        return
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    wide = lo > 0 and hi / lo > 12
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0,) if wide else (1.0, 2.0, 5.0), numticks=5))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:.0e}"))
    ax.yaxis.set_minor_locator(NullLocator())


def _deep(name):
    return lambda r: deep_grid(r, *DEEP_FIGURES[name])


FIGURES = {"loss_curves": loss_curves, "steps_to_threshold": steps_to_threshold, "entropy_floor": entropy_floor,
           "frame_precision": frame_precision, "lr_sweep": lr_sweep, "manifold": manifold,
           "simulations": simulations, "typicality": typicality, "scaling": scaling, "benchmark": benchmark,
           "step_profile": step_profile, "mechanism_grid": mechanism_grid,
           **{f"conjecture_{task}": _conjecture(task) for task in CONJECTURE_TASKS},
           **{name: _deep(name) for name in DEEP_FIGURES}}


def render_all(results, out_dir):
    """{name: svg text} for the HTML, and a PDF per figure under out_dir/figures for LaTeX."""
    out = {}
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    for name, fn in FIGURES.items():
        fig = fn(results)
        if fig is None:
            continue
        buf = io.StringIO()
        bbox = None if name in FIXED_LAYOUT else "tight"  # "tight" draws the figure twice per file
        fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches=bbox)
        fig.savefig(fig_dir / f"{name}.pdf", metadata={"CreationDate": None, "ModDate": None}, bbox_inches=bbox)
        plt.close(fig)
        svg = buf.getvalue()
        out[name] = svg[svg.index("<svg"):]
    return out
