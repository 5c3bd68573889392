"""results.json as the report's tree (reports/model.py): the front matter, then one function per section in the
order of views.SECTIONS. The views (reports/views.py) decide what each section says; this module arranges it."""
from __future__ import annotations

import re

from derive.verdict import describe_clash
from reports import views as v
from reports.model import (
    Alarm,
    Alert,
    Badge,
    Bold,
    Break,
    Cell,
    Code,
    Contents,
    Details,
    Emph,
    Figure,
    Glyph,
    Latex,
    Link,
    List,
    Long,
    Math,
    Paragraph,
    Row,
    Section,
    Small,
    SpanRow,
    Table,
    alt,
    html,
    join,
    tex,
)
from reports.views import fmt, pct

NDASH, X, MU, HELLIP, NBSP = Glyph("ndash"), Glyph("x"), Glyph("mu"), Glyph("hellip"), Glyph("nbsp")
FOOT = r"\footnotesize"
FOOT3 = r"\footnotesize\setlength{\tabcolsep}{3pt}"
NOT_RUN = ": not run in this invocation."


def prose(text):
    """Text with inline $...$ math as Math nodes."""
    return [Math(p) if i % 2 else p for i, p in enumerate(re.split(r"\$(.+?)\$", text)) if p]


def badge(word, cls=None, **kw):
    return Badge(word, cls or v.verdict_class(word), **kw)


def status_badge(status):
    return Badge(status, "good" if status == "pass" else ("partial" if status == "skipped" else "bad"))


def kill_badge(word):
    return Badge(word, v.kill_class(word), open=word == "undecided")


def bold_on_the_web(x):
    return alt(Bold(x), x)


def pieces(latexes):
    return join([Math(p) for p in latexes], ", ")


def not_run(what, id=None):
    return Paragraph(what + NOT_RUN, id=id)


def nums(*columns):
    return frozenset(columns)


# -- the front matter: what ran, the banner, the alerts ------------------------------------------------------------
def front(results, sections):
    env, checks = results["environment"], results["checks"]
    counts = {s: sum(1 for c in checks if c["status"] == s) for s in ("pass", "fail", "skipped")}
    dot = [" ", Glyph("middot"), " "]
    commit = env.get("git_commit") or "unknown"
    info = alt(
        Paragraph(["Rendered from results.json", *dot, "profile ", Bold(str(env.get("profile"))), *dot,
                   f"device {env.get('device')}", *dot, f"commit {commit}", *dot,
                   f"torch {env.get('torch')}, sympy {env.get('sympy')}, python {env.get('python')}"], cls="small"),
        Paragraph(["Rendered from ", Code("results.json"), "; profile ", Bold(str(env.get("profile"))),
                   f", device {env.get('device')}, commit ", Code(commit), ". ", f"Checks: {counts['pass']} passed, ",
                   Badge(f"{counts['fail']} failed", "bad" if counts["fail"] else "good"),
                   f", {counts['skipped']} skipped."]))
    incons = inconsistency_alert(results.get("inconsistencies", []))
    failed = [c for c in checks if c["status"] == "fail"]
    skipped = [c for c in checks if c["status"] == "skipped"]
    out = [*info, html(incons), banner(v.overall(results)),
           html(Paragraph([Badge(f"{counts['pass']} checks passed", "good"), "\n",
                           Badge(f"{counts['fail']} failed", "bad" if counts["fail"] else "good"), "\n",
                           Badge(f"{counts['skipped']} skipped", "partial" if counts["skipped"] else "good")],
                          cls="counts")),
           Contents(list(sections)), tex(incons)]
    if failed:
        out.append(Alert("alert", ["Failed checks", html(f" ({len(failed)})")], [List(
            [[Code(c["id"]), f" (claim {c['claim'] or '-'}): ", fmt(c["measured"])] for c in failed])], id="failed"))
    if skipped:
        out.append(Alert("warn", ["Skipped checks", html(f" ({len(skipped)})")], [List(
            [[Code(c["id"]), ": ", fmt(c["measured"]),
              [" ", *alt(Small(f"({c['detail']})"), f"({c['detail']})")] if c["detail"] else []]
             if c["measured"] is not None else [Code(c["id"]), ": ", c["detail"]] for c in skipped])], id="skipped"))
    return out


def inconsistency_alert(inconsistencies):
    if not inconsistencies:
        return None
    items = [[Alarm(f"INTERNAL INCONSISTENCY: {describe_clash(x)}"),
              f" (claim {x['claim']}, identity {x['part']}, {x['setting']})", tex(".")] for x in inconsistencies]
    title = ["INTERNAL INCONSISTENCY", html(f" ({len(inconsistencies)})"),
             ": two proof paths contradict each other, so at least one of them is unsound."]
    return Alert("loud", title, [List(items)], id="inconsistencies")


def banner(o):
    def tally(pairs):
        return join([Badge(word, v.verdict_class(word), mini=True, lead=f"{n} ") for word, n in pairs], alt(" ", ", "))

    body = [Bold("PASS" if o["ok"] else "FAIL"), " ", *alt(Glyph("middot"), Glyph("mdash")), " ",
            f"exit status {o['status']}: {o['meaning']}."]
    for p in o["problems"]:
        body += [Break(), p]
    body += [Break(), Small(["Analytic claims: ", tally(o["analytic"]), alt([" ", Glyph("middot"), " "], "; "),
                             "empirical claims: ", tally(o["empirical"]),
                             " (an empirical claim that does not reproduce is a finding, not a failure)", tex(".")])]
    return Alert("pass" if o["ok"] else "fail", None, [body], id="banner")


# -- the sections ------------------------------------------------------------------------------------------------------
def claims_section(results, figures):
    rows = []
    for r in v.claim_rows(results["claims"]):
        verdict = [Badge(r["verdict"], r["cls"])] + [[Break(), Badge(s["verdict"], s["cls"], mini=True,
                                                                     lead=f"{s['label']}: ")] for s in r["subs"]]
        paths = join([Badge(p["outcome"], p["cls"], mini=True, lead=f"{p['path']}: ") for p in r["paths"]], Break())
        evidence = join([[Bold(s["detail"]), f" ({s['verdict']}): {s['reason']}"] for s in r["subs"]], Break())
        if r["context"]:
            evidence += [Break(), Small(r["context"])]
        evidence += r["evidence"]
        if r["witness"]:
            more = f" (and {r['more_witnesses']} more)" if r["more_witnesses"] else ""
            evidence += [Break(), Small(["witness: ", Long(r["witness"]), more])]
        if r["why"]:
            evidence += [Break(), Small(f"why: {r['why']}")]
        rows.append(Row([bold_on_the_web(r["id"]), r["name"], Math(r["statement"]) if r["math"] else r["statement"],
                         verdict, paths, evidence], id=f"claim-{r['id']}"))
    header = ["id", "claim", html("statement (paper)"), "verdict", "paths", alt("evidence (measured vs paper)", "evidence")]
    return [Table(header, rows, tex=r"@{}p{0.6cm}L{2.4cm}L{2.1cm}L{2.8cm}p{7.9cm}@{}")]


def derivations_section(results, figures):
    checks = results["checks"]
    out = []
    for c in (c for c in results["claims"] if v.is_analytic(c) and "parts" in c):
        proofs = [k for k in checks if k["claim"] == c["id"] and k["kind"] == "proof"]
        po = v.path_outcomes(c)
        children = [Paragraph(Math(c["statement"], display=True)),
                    Paragraph(f"{c['ref']}. Proof obligations:", cls="small"),
                    List([[p["name"], ": ", Math(p["latex"])] for p in c["parts"]])]
        if c.get("derivation"):
            children.append(Paragraph(Latex(c["derivation"])))
        children.append(tex(Paragraph(["Paths: ", join([[f"{p} ", Badge(po[p], v.outcome_class(po[p]))]
                                                        for p in v.PATHS if p in po], "; "),
                                       f". {len(proofs)} proof checks, {sum(k['status'] == 'pass' for k in proofs)} passed."])))
        for x in c.get("inconsistencies", []):
            children.append(Paragraph([html(Bold("INTERNAL INCONSISTENCY"), f": {describe_clash(x)}"),
                                       tex(Alarm(f"INTERNAL INCONSISTENCY: {describe_clash(x)}")),
                                       " (", tex("identity "), f"{x['part']}, {x['setting']}).", ], cls="alert"))
        rows = [[Code(k["id"]), Badge(k["outcome"], v.outcome_class(k["outcome"])) if k.get("outcome") else tex(k["status"]),
                 status_badge(k["status"]), fmt(k["seconds"]), fmt(k["measured"])] for k in proofs]
        children.append(Table(["check", "outcome", html("status"), html("seconds"), "measured"], rows, num=nums(3),
                              tex=r"@{}p{6.8cm}p{1.6cm}p{8cm}@{}", tex_pre=FOOT))
        if c.get("witnesses"):
            children.append(witnesses(c["witnesses"]))
        title = [f"{c['id']} {c['name']} ", tex(Glyph("mdash"), " "), badge(c["verdict"])]
        out.append(Section(None, title, children, level=3))
    return out


def witnesses(ws):
    rows = []
    for w in ws:
        pt = w.get("point", {})
        point = [", ".join(v.point_entries(pt, v.POINT_HEAD))]
        if len(pt) > v.POINT_HEAD:
            point += [html(" ", HELLIP, f" ({len(pt)} entries)",
                           Details(f"all {len(pt)} entries", ", ".join(v.point_entries(pt)))),
                      tex(", ", HELLIP, f" (all {len(pt)} entries in ", Code("results.json"), ")")]
        rows += [tex(SpanRow(Code(w["check"]), indent=False)),
                 [Code(w["check"]), v.witness_sizes(w), "yes" if w.get("masked") else "no",
                  ", ".join(map(str, w.get("indices") or [])), point, Cell(str(w["lhs"]), cls="wrap"),
                  Cell(str(w["rhs"]), cls="wrap"), ["lhs ", Long(w["lhs"]), Break(), "rhs ", Long(w["rhs"])]]]
    text = ("A witness is certified by interval arithmetic with the real exp and log: plug the point into any "
            "implementation of both sides to re-check it.")
    header = [html("check"), "sizes", "masked", "indices", "point", html("lhs"), html("rhs"), tex("lhs, rhs")]
    return Section(None, "Witnesses", [Paragraph(text, cls="small"), Table(
        header, rows, tex=r"@{}L{2.2cm}L{1.1cm}L{1.2cm}L{6.6cm}L{3.6cm}@{}", tex_pre=FOOT)], level=4)


def kill_matrix_section(results, figures):
    kill = results.get("derive", {}).get("kill_matrix", {})
    columns = [p for p in (*v.PATHS, "numeric", "adversarial") if any(p in r for r in kill.values())]
    rows = [[Code(mid), row["claim"], row["description"], *[kill_badge(row.get(p, "not run")) for p in columns]]
            for mid, row in kill.items()]
    return [html(Paragraph("Each mutant is a deliberately wrong closed form; every path must reject it.")),
            Table(["mutant", "claim", html("mistake"), *columns], rows,
                  tex="@{}p{3.9cm}p{0.8cm}" + "p{2cm}" * len(columns) + "@{}", tex_pre=FOOT),
            Paragraph([Bold("undecided"), ": the path could not say no to the wrong formula (nor did it prove it)."],
                      cls="small")]


MECH_INTRO = ("The paper's thesis reaches beyond softmax. A routing mechanism gives query $i$ weights $w_{ij}$ over "
              "options $j$ (keys, experts, a gate's inputs) formed from routing logits $s_{ij}$, and mixes what the "
              r"options offer: $o_i = \sum_j w_{ij}\,\mathrm{content}_{ij}$. With $u_i = \partial L/\partial o_i$ and "
              r"the compatibility $b_{ij} = u_i\cdot\mathrm{content}_{ij}$, the paper's conjecture is that a mechanism "
              "routes like softmax attention when")
CONTENT_ROUTING_TEXT = (
    "Beside (a)-(d), the cell `content_routing` asks the paper's own partition: does the weight query $i$ puts on "
    "position $j$ depend on the content at $j$ relative to the query? For weights over positions it is proved by a "
    r"certified point where $\partial^2 w_{ij}/\partial q_{ia}\,\partial k_{jb} \ne 0$ (the witness below) and "
    r"disproved when $\partial^2 w_{ij}/\partial q_{ia}\,\partial k_{jb} = 0$ is proved at general size. For weights "
    "over a token's own options (a gate's two inputs, experts) it is disproved when no weight reads another "
    "position's logits: a token's own content choosing among its options is not routing between positions. "
    "Mechanisms built to answer it one way show that it can say both (below).")
WITNESS_TEXT = ("Every witness is certified by interval arithmetic with the real exp and log. An identity's witness: "
                "evaluate both sides at the exact point (0-based entries, `c` and `eta` the scalars, the targets `Y` "
                "free), at the sizes, under the full cross-entropy loss, with the causal mask $j \\le i$ where masked, "
                "at the free indices given. A bound's witness (C9's saturation): the query row given (indices), at the "
                "exact point (every entry the weights read, every row), the left side $\\sum_j|\\partial L/\\partial "
                "s_{ij}|$ from the true gradient of the mechanism's weight under the linear loss $L=\\langle U,o\\rangle$, "
                "compatibilities $b_{ij}=U_i\\cdot c_{ij}$.")


def with_code(text):
    """prose() with `...` as code."""
    return [Code(p) if i % 2 else prose(p) for i, p in enumerate(text.split("`"))]


def mechanisms_section(results, figures):
    mech = v.mechanisms_view(results)
    if not mech:
        return [Paragraph(["Which mechanisms route by advantage: not in this ", alt("results.json", Code("results.json")),
                           " (the mechanism table is written by the derive stage, which did not run in this invocation "
                           "or predates it)."], id="mechanisms-absent")]
    cj = mech["conjecture"]
    items = []
    for c in cj["claims"]:
        said = []
        if c["proved"]:
            said += [" ", Badge("proved", "good", mini=True), f" for {c['proved']}"]
        if c["disproved"]:
            said += [";" if c["proved"] else "", " ", Badge("disproved", "bad", mini=True), f" for {c['disproved']}"]
        if c["open"]:
            said += [";" if c["proved"] or c["disproved"] else "", " ", Badge("undecided", "partial", mini=True),
                     f" for {c['open']}"]
        items.append([pieces(c["latex"]), f" ({c['text']}, question ", Code(c["question"]), "):", said, "."])
    summary = []
    if cj["holds"]:
        summary += ["All four are proved for ", Bold(cj["holds"]), ": these route like softmax attention. "]
    if cj["refuted"]:
        summary += ["Certified counterexamples refute the conjecture for ",
                    join([[Bold(x["name"]), f" (to {x['failed']})"] for x in cj["refuted"]], ", "), ". "]
    if cj["open"]:
        summary.append(f"Not decided either way for {cj['open']}. ")
    summary.append("Each identity is decided at general size by the general path (the numbers of positions, widths and "
                   "options symbolic) and checked by the fixed and rational paths, masked and unmasked")
    if mech["seconds"] is not None:
        summary += [f", {fmt(mech['seconds'], 3)}", NBSP, "s for the whole table"]
        if mech["path_seconds"]:
            summary += [" (", join([[f"{p} {fmt(s, 3)}", NBSP, "s"] for p, s in mech["path_seconds"].items()], ", "), ")"]
    summary.append(".")
    questions = Table(["question", "asks", "identity, at general size"], [
        [[Code(q["id"]), f" ({q['letter']})" if q["letter"] else ""], q["title"],
         pieces(q["latex"]) if q["latex"] else
         "the mechanism's own routing gradient (below)" if q["id"] == "routing" else NDASH] for q in mech["questions"]],
        id="mech-questions", tex=r"@{}L{2.6cm}L{3.6cm}L{10.4cm}@{}", tex_pre=r"\footnotesize\renewcommand{\arraystretch}{1.3}")
    legend = [Bold("proved"), ": the general path proved it, masked and unmasked, and no path found a witness against it; ",
              Bold("disproved"), ": some path found a certified witness (", alt("below", "listed below"), "); ",
              Bold("mask-dependent"), ": proved unmasked, disproved under the causal mask (witness below); ",
              Bold("error"), ": the cell could not be decided (a failure in the mechanism's code", html(", its message shown"),
              "), counted as a failing check; ", Bold("undecided"), ": neither.",
              html(" Hover over a cell for each path's outcome.")]
    out = [Paragraph(prose(MECH_INTRO)),
           List(items, labels=[f"({c['letter']})" for c in cj["claims"]], id="mech-conjecture"),
           Paragraph(summary, id="mech-summary"),
           Paragraph(prose(CONTENT_ROUTING_TEXT), id="mech-content-routing"),
           Paragraph("This is a one-step analysis: for a recurrent mechanism it says how one step (one cell update) routes "
                     "its gradient, not what the recurrence does to that gradient across time steps.", cls="small"),
           questions,
           tex(Paragraph(["Each mechanism's row gives its verdicts; beneath it, its weight and its routing gradient. ",
                          legend])),
           mechanism_table(mech)]
    out += [Paragraph(["Why ", c["verdict"], ", ", Code(r["name"]), " / ", Code(c["question"]), ": ", c["reason"]],
                      cls="small", id=c["why_anchor"]) for r in mech["rows"] for c in r["cells"] if c["reason"]]
    out.append(html(Paragraph(legend, cls="small")))
    if mech["extras"]:
        out.append(Paragraph(["Further identities: ", join([[Code(e["mechanism"]), f" {e['name']} ", pieces(e["latex"]), " ",
                                                             Badge(e["verdict"], e["cls"], mini=True)]
                                                            for e in mech["extras"]], "; "), "."]))
    out.append(Section("mech-witnesses", "Counterexamples", mechanism_witnesses(mech), level=3))
    out.append(Section("mech-mutants", "Mechanism mutants", mechanism_mutants(mech), level=3))
    return out


def mechanism_table(mech):
    qs = mech["questions"]
    header = ["mechanism", html("weight ", Math("w"), " and its routing gradient"),
              *[Cell([Code(q["id"]), f" ({q['letter']})" if q["letter"] else ""], title=q["title"]) for q in qs]]
    rows = []
    for i, r in enumerate(mech["rows"]):
        weights = ("weights " + ("normalised" if r["normalised"] else "not normalised") + " over the options"
                   if r["normalised"] is not None else "")
        about = [r["title"], f"; {weights}" if weights else "", f"; {r['ref']}" if r["ref"] else ""]
        cells = [[Badge(c["verdict"], c["cls"]), [Break(), Link(c["anchor"], "witness")] if c["anchor"] else [],
                  html(Break(), Link(c["why_anchor"], "why")) if c["reason"] else []] for c in r["cells"]]
        rows.append(Row([Cell([Bold(Code(r["name"])), html(Break(), Small(about))], cls="mech"),
                         Cell([pieces(r["latex"]), Break(), Small("routing gradient:"), " ", pieces(r["routing_latex"])],
                              cls="formula"),
                         *[Cell(c, cls="v", title=x["tooltip"] or None) for c, x in zip(cells, r["cells"])]],
                        id=f"mech-{r['name']}", rule=i > 0, keep=True))
        rows.append(tex(SpanRow([r["title"], f", {weights}" if weights else "", ": ", pieces(r["latex"]), "; routing gradient ",
                                 pieces(r["routing_latex"]), ".", [" ", Small(r["ref"])] if r["ref"] else []])))
    width = "%.2f" % (12.4 / max(len(qs), 1))
    return Table(header, rows, id="mech-table", tex="@{}L{2.9cm}" + f"L{{{width}cm}}" * len(qs) + "@{}",
                 tex_pre=r"\footnotesize\setlength{\tabcolsep}{4pt}")


def mechanism_witnesses(mech):
    if not mech["witnesses"]:
        return [Paragraph("No cell has a certified witness.")]
    head = v.POINT_HEAD
    rows = []
    for i, w in enumerate(mech["witnesses"]):
        n = w["point_count"]
        rows.append(Row([Code(w["mechanism"]), w["question"], w["sizes"], w["mask"], w["indices"],
                         Cell(Long(w["lhs"]), cls="nowrap"), Cell(Long(w["rhs"]), cls="nowrap")],
                        id=w["anchor"], rule=i > 0, keep=True, target=True))
        at = f"at {w['setting']}" if w["kind"] == "bound" else ""
        rows.append(SpanRow([
            html(f"{at}: " if at else "", Details(f"exact point: {n} entries",
                                                  join([Code(e, nowrap=True) for e in w["point"]], ", "))),
            tex(f"{at}; " if at else "", f"point ({n} entries",
                [", the first 8 shown, all in ", Code("results.json")] if n > head else [], "): ",
                Code(", ".join(w["point"][:head])), [", ", HELLIP] if n > head else [])]))
    text = Paragraph([with_code(WITNESS_TEXT), tex(f" Points longer than {head} entries are cut here; ",
                                                   Code("results.json"), " holds them all.")], cls="small")
    return [text, Table(["mechanism", "question", "sizes", "mask", "indices", "left side", "right side"], rows,
                        id="mech-witness-table", tex=r"@{}L{1.6cm}L{1.8cm}L{3.0cm}L{2.0cm}L{1.1cm}L{2.9cm}L{2.9cm}@{}",
                        tex_pre=FOOT3)]


def content_routing_controls(mech):
    cs = mech["content_routing_controls"]
    if not cs:
        return []
    rows = [[Code(c["name"]), c["description"], c["expected"], c["verdict"],
             Badge("as built" if c["ok"] else "NOT as built", "good" if c["ok"] else "bad")] for c in cs]
    return [Paragraph([Code("content_routing"), " on mechanisms built to answer it one way: each must come out as built."]),
            Table(["control", "mechanism", "built to be", "the cell says", "result"], rows, id="mech-cr-controls",
                  tex=r"@{}L{2.4cm}L{7.6cm}L{1.8cm}L{1.8cm}L{1.8cm}@{}", tex_pre=FOOT3)]


def mechanism_mutants(mech):
    ms = mech["mutants"]
    if not ms:
        return [Paragraph("No mechanism carries mutants in this run."), *content_routing_controls(mech)]
    paths = mech["mutant_paths"]
    said = Badge(f"{mech['rejected']} of {len(ms)} rejected by every path", "good" if mech["rejected"] == len(ms) else "bad")
    rows = [[[Code(m["id"], breaks="-"), tex(f" ({m['question']})") if m["question"] else []], m["mechanism"],
             m["question"], m["description"], *map(kill_badge, m["cells"]),
             Badge("rejected" if m["all_rejected"] else "NOT rejected", "good" if m["all_rejected"] else "bad")] for m in ms]
    mistake = "%.2f" % max(2.5, 11.3 - 2.0 * (1 + len(paths)))
    return [Paragraph(["Each mechanism carries deliberately wrong closed forms for its questions; every path must reject "
                       "each", alt(". ", ": "), said, tex(".")]),
            Table([alt("mutant", "mutant (question)"), "mechanism", html("question"), "mistake", *paths, "every path"],
                  rows, id="mech-mutant-table", tex_pre=FOOT3,
                  tex="@{}L{2.9cm}L{1.45cm}" + f"L{{{mistake}cm}}" + "L{1.95cm}" * len(paths) + "L{1.95cm}@{}"),
            *content_routing_controls(mech)]


def soundness_section(results, figures):
    derive = results.get("derive", {})
    out = [Paragraph("Beyond the kill matrix: random claims whose truth is known (the fuzzer), faults planted in the "
                     "proof engine itself, and the bound on the probabilistic path.")]
    fz = derive.get("fuzz")
    out.append(Section("fuzz", "Random claims", fuzz(fz), level=3) if fz else not_run("Random claims (fuzzer)", "fuzz"))
    em = derive.get("engine_mutants")
    if em:
        killed = Badge(alt(f"{em['killed']} killed ({pct(em['kill_rate'])})", f"{em['killed']} killed, {pct(em['kill_rate'])}"),
                       "good" if em["killed"] == em["planted"] else "bad")
        rows = [[Code(f["id"]), f["target"], f["description"],
                 Badge("killed" if f["killed"] else "survived", "good" if f["killed"] else "bad"),
                 ", ".join(f["killed_by"])] for f in em["faults"]]
        out.append(Section("engine-mutants", "Faults planted in the proof engine", [
            Paragraph([f"{em['planted']} faults planted; ", killed, tex(".")]),
            Table(["fault", "target", "description", "result", "killed by"], rows,
                  tex=r"@{}L{3.7cm}L{2.5cm}L{5.1cm}L{1.3cm}L{3.2cm}@{}", tex_pre=FOOT)], level=3))
    else:
        out.append(not_run("Faults planted in the proof engine", "engine-mutants"))
    if derive.get("rational_bound"):
        out.append(Section("rational-bound", "The probabilistic (rational) path", [Paragraph(derive["rational_bound"])],
                           level=3))
    else:
        out.append(not_run("Rational-path bound", "rational-bound"))
    return out


def fuzz(fz):
    fv = fz.get("false_verdicts", [])
    out = [Paragraph([f"{fz['claims']} random claims (seed {fz['seed']}): {fz['true']} true and {fz['false']} false "
                      f"identities. Oracle margin {fmt(fz['margin'])}; closest false gap {fmt(fz['closest_false_gap'])}. "
                      "False verdicts: ", Badge(str(len(fv)), "bad" if fv else "good"), tex(".")])]
    if fv:
        said = List([["path ", f["path"], " said ", Bold(f["verdict"]), ", truth ", f["truth"], ": ",
                      Code(f["description"])] for f in fv])
        out += [html(Alert("alert", f"False verdicts ({len(fv)}): a path proved a false claim (or found it holds at "
                                    "sizes where it is false) or disproved a true one", [said], id="false-verdicts")),
                tex(said)]
    rows = []
    for p, d in fz["paths"].items():
        n = v.count(d["false_verdicts"])
        rows.append([p, str(d["proved"]), str(d.get("holds", 0)), str(d["disproved"]), str(d["undecided"]),
                     pct(d["true_decided_rate"]), pct(d["false_decided_rate"]), Badge(str(n), "bad" if n else "good"),
                     fmt(d["claims_per_second"], 3)])
    out.append(Table(["path", "proved", "holds", "disproved", "undecided",
                      ["decided (true", html(" claims"), ")"], ["decided (false", html(" claims"), ")"],
                      "false verdicts", "claims/s"], rows, num=nums(*range(1, 9)), tex_pre=FOOT,
                     tex=r"@{}L{1.5cm}L{1.1cm}L{1.0cm}L{1.3cm}L{1.4cm}L{1.7cm}L{1.7cm}L{1.3cm}L{1.3cm}@{}"))
    if fz.get("families"):
        out.append(Table(["family", "claims", "true", "general path decided"],
                         [[name, str(d["claims"]), str(d["true"]), pct(d["general_decided_rate"])]
                          for name, d in fz["families"].items()], num=nums(1, 2, 3), tex="@{}lrrr@{}", long=False))
    return out


def numeric_section(results, figures):
    rows = [[Code(k["id"]), k["claim"], alt(Badge(k["status"], "good" if k["status"] == "pass" else "bad"), k["status"]),
             fmt(k["measured"]), fmt(k["expected"])] for k in results["checks"]
            if k["stage"] == "numeric" and k["kind"] in ("numeric", "negative-control")]
    return [Table(["check", "claim", "status", "measured", html("expected")], rows,
                  tex=r"@{}p{6.5cm}p{0.8cm}p{1cm}p{7.5cm}@{}")]


def benchmarks_section(results, figures):
    rows = [[Code(b["name"]), b["device"], b["dtype"], fmt(b["ours_s"]), b["reference"], fmt(b["reference_s"]),
             fmt(b["ratio"], 3)] for b in results.get("benchmarks", [])]
    return [*(html(Figure(n)) for n in ("benchmark", "scaling") if n in figures),
            Table(["name", "device", "dtype", "ours (s)", html("reference"), alt("reference (s)", "ref (s)"), "ratio"],
                  rows, num=nums(3, 5, 6), tex=r"@{}p{7.2cm}p{1cm}p{1.4cm}p{1.6cm}p{1.6cm}p{1.2cm}@{}")]


def _step_floor(rf):
    """The sentence on the step's products alone (roofline.floor) and the speed bound they set, if measured."""
    if "products_s" not in rf:
        return ""
    text = (f" The step's matrix products alone, every other operation left out, take {fmt(rf['products_s'] * 1e3, 3)} "
            f"ms ({fmt(100 * rf['products_share'], 2)}% of the step, {fmt(rf['products_gflops'], 3)} GFLOP/s)")
    if "speedup_bound" in rf:
        text += (f": against the sequential loop's {fmt(rf['sequential_step_s'] * 1e3, 3)} ms per step, no step built "
                 f"of these products runs more than {fmt(rf['speedup_bound'], 2)}x faster than it")
    return text + "."


def _fused_step(f):
    """The sentence on the fused CPU step (the step as trained there), if measured."""
    if not f:
        return ""
    return (f" That is the generated kernels' step, whole-tile tensor operations; on the CPU the experiments train "
            f"with the fused step instead (the same closed forms applied four query rows at a time, held to the "
            f"generated kernels by the tests): {fmt(f['step_s'] * 1e3, 3)} ms per step, "
            f"{fmt(f['speedup_over_generated'], 3)}x faster, {fmt(f['gflops'], 3)} GFLOP/s at the model's own widths, "
            f"{fmt(100 * f['fraction_of_step_shape_ceiling'], 2)}% of the step-shape ceiling and "
            f"{fmt(100 * f['fraction_of_square_ceiling'], 2)}% of the square one. Per component: "
            + ", ".join(f"{k} {fmt(v * 1e3, 2)} ms" for k, v in f["components_s"].items()) + ".")


def experiments_section(results, figures):
    ex, claims, checks = results.get("experiments", {}), results["claims"], results["checks"]
    sm = ex.get("sticky_markov")
    out = [Section("replay", "The paper's seeds on the authors' streams", replay(v.replay_view(ex)), level=3)]
    fresh = v.fresh_summary(claims, ex)
    if fresh:
        out.append(Paragraph(fresh, id="fresh-summary"))
    if sm:
        out.append(Section("fresh", "Fresh streams", fresh_streams(sm), level=3))
    out.append(Section("typicality", "Typicality of the paper's five seeds", typicality(v.typicality_view(ex), figures),
                       level=3))
    if sm and sm.get("mu_draws"):
        out.append(Section("mu-draws", ["The fresh seeds by draw of the symbol means ", MU],
                           mu_draws(sm, v.mu_groups_text(sm["mu_draws"])), level=3))
    out += [html(Figure(n, id=f"fig-{n}")) for n in ("loss_curves", "steps_to_threshold", "entropy_floor",
                                                     "frame_precision", "lr_sweep", "manifold", "simulations")
            if n in figures]
    if not ex.get("lr_ratio_sweep"):
        out.append(Paragraph(["LR-ratio sweep: not run in this profile. It is opt-in: ", Code(v.EXTENDED_HOWTO),
                              "; the report reads the cached sweep whenever it is present."], id="sweep-howto"))
    sp = ex.get("speed_vs_sequential")
    if sp:
        per = sp.get("speedup_per_round")
        out.append(html(Paragraph(["Speed against the sequential loop of the same math: ", Bold(f"{fmt(sp['speedup'], 3)}x"),
                                   [f" (per round {fmt(min(per), 3)}", NDASH, f"{fmt(max(per), 3)})"] if per else [],
                                   f" ({sp['method']}; max loss difference {fmt(sp['max_abs_loss_difference'])})."])))
    rf = ex.get("step_roofline")
    if rf:
        ceil = rf["ceiling"]
        out.append(html(Paragraph([
            f"Where the step's time goes ({rf['runs']} runs at once, T = {rf['length']}, {rf['threads']} threads): "
            f"{fmt(rf['step_s'] * 1e3, 3)} ms per step, {fmt(rf['flops'] / 1e9, 3)} GFLOP of matrix products "
            f"({fmt(rf['useful_flops'] / 1e9, 3)} at the model's own widths), so ", Bold(f"{fmt(rf['gflops'], 3)} GFLOP/s"),
            f": {fmt(100 * rf['fraction_of_step_shape_ceiling'], 2)}% of the float32 product at the step's largest "
            f"shape ({fmt(ceil['step_shape']['gflops'], 3)} GFLOP/s) and {fmt(100 * rf['fraction_of_square_ceiling'], 2)}% "
            f"of a {ceil['square']['shape'][0]}-square product ({fmt(ceil['square']['gflops'], 3)} GFLOP/s), measured in "
            f"the same run; the threads idle {fmt(100 * rf['thread_idle_share'], 2)}% of the time. Per component: "
            + ", ".join(f"{k} {fmt(v * 1e3, 2)} ms" for k, v in rf["components_s"].items()) + "." + _step_floor(rf)
            + _fused_step(rf.get("fused"))],
            id="step-roofline")))
        if "step_profile" in figures:
            out.append(html(Figure("step_profile", id="fig-step_profile")))
    deep, grid = v.deep_view(ex, claims), v.grid_view(ex, claims)
    out.append(Section("deep-watch", "W1: frame and precision in a deep model, watched while it trains",
                       deep_watch(deep, figures), level=3))
    vm = v.manifold_view(ex, claims)
    out.append(Section("value-manifold", "V1: the value manifold in every layer of a GPT-2-style model",
                       measured_claim(vm, next((c for c in claims if c.get("id") == "V1"), {}), figures) if vm
                       else [Paragraph("V1 (the value manifold of a GPT-2-style model): results.json has no "
                                       "experiments.value_manifold (the experiments stage writes it).",
                                       id="value-manifold-absent")],
                       level=3))
    out.append(Section("mechanism-grid", "G1, G2: does the two-timescale benefit follow the proved structure?",
                       mechanism_grid(grid, figures), level=3))
    by_id = {c["id"]: c for c in claims}
    out += [Section(f"measured-{cid}", f"{cid}: {by_id.get(cid, {}).get('name', cid)}",
                    measured_claim(entry, by_id.get(cid, {}), figures), level=3)
            for cid, entry in ex.get("measured_claims", {}).items()]
    out += [tex(Section(None, "Experiment checks", level=3)), Table(
        [alt("experiment check", "check"), "status", "seconds", "measured"],
        [[Code(k["id"]), alt(status_badge(k["status"]), k["status"]), fmt(k["seconds"]),
          fmt(k["measured"]) if k["measured"] is not None else k.get("detail", "")]
         for k in checks if k["stage"] == "experiments" and k["kind"] != "negative-control"],
        num=nums(2), tex=r"@{}p{6.2cm}p{1cm}p{1.2cm}p{7.6cm}@{}", tex_pre=FOOT)]
    controls = [k for k in checks if k["stage"] == "experiments" and k["kind"] == "negative-control"]
    out.append(Section("experiment-controls", "Negative controls of the empirical verdict rules",
                       experiment_controls(controls), level=3))
    shown = set(deep["figures"] if deep else []) | set(grid["figures"] if grid else [])
    out += [tex(Figure(n, width=0.85)) for n in figures if n not in shown]
    return out


def replay(rp):
    if not rp:
        return [Paragraph("The paper's seeds on the authors' streams" + NOT_RUN)]
    out = [Paragraph(rp["summary"])]
    if rp.get("note"):
        out.append(Paragraph(rp["note"], cls="small"))
    if rp["rows"]:
        k = 2 if rp["full"] else 1
        rows = [Row([bold_on_the_web(r["cells"][0]) if r["first"] else r["cells"][0], *r["cells"][1:]],
                    rule=r["first"] and i > 0) for i, r in enumerate(rp["rows"])]
        width = "1.25cm" if rp["full"] else "1.9cm"
        out.append(Table(rp["header"], rows, id="replay-table", num=nums(*range(k, len(rp["header"]))), tex_pre=FOOT,
                         tex="@{}" + "l" * k + (r">{\raggedleft\arraybackslash}p{%s}" % width) * (len(rp["header"]) - k)
                         + "@{}"))
    return out


def fresh_streams(sm):
    paper = sm["paper"]
    text = [f"Sticky chain, {len(sm['seeds'])} seeds, {sm['steps']} steps", html(f", T = {sm['length']}"), ". ",
            Math(r"H_{\min}"), f" = {fmt(sm['h_min'], 5)} nats (paper {paper['h_min']})",
            html(f"; exact Bayes predictive: loss {fmt(sm['bayes_floor']['loss'])}, entropy "
                 f"{fmt(sm['bayes_floor']['entropy'])}"),
            ". Speedup ", bold_on_the_web([fmt(sm["speedup"], 3), X]), f" (95% CI {fmt(sm['speedup_ci95'][0], 3)}", NDASH,
            f"{fmt(sm['speedup_ci95'][1], 3)}; paper {paper['speedup']}", X, *alt("); paired t", ["), paired ", Math("t")]),
            f" = {fmt(sm['paired_t'], 3)}, ", alt("p", Math("p")), f" = {fmt(sm['p_value'], 3)}."]
    ps = sm.get("paper_seeds")
    if ps:
        text += [f" On the authors' {len(ps['seeds'])} seeds alone: speedup {fmt(ps['speedup'], 3)}", X,
                 f" (95% CI {fmt(ps['speedup_ci95'][0], 3)}", NDASH, f"{fmt(ps['speedup_ci95'][1], 3)}), final loss SGD "
                 f"{fmt(ps['sgd_final_loss'])}, EM-like {fmt(ps['em_like_final_loss'])} (paper {paper['sgd_final_loss']}, "
                 f"{paper['em_like_final_loss']})."]
    rows = [[arm, str(len(d["seeds"])), [fmt(d["final_loss"]), html(" ", Glyph("plusmn"), " ", fmt(d["final_loss_ci95"], 2))],
             str(paper[f"{arm}_final_loss"]) if f"{arm}_final_loss" in paper else NDASH, fmt(d["final_entropy"]),
             fmt(d["accuracy"]), fmt(d["heldout_loss"]), fmt(d["kl_to_bayes_bits"])] for arm, d in sm["arms"].items()]
    return [Paragraph(text), Table(
        ["arm", "seeds", "final loss", html("paper"), "entropy", "accuracy", "held-out loss", "KL to Bayes (bits)"], rows,
        num=nums(*range(1, 8)), tex="@{}lrrrrrr@{}", long=False)]


def typicality(t, figures):
    if not t:
        return [Paragraph(["Typicality study: not run. It is opt-in: ", Code(v.EXTENDED_HOWTO), " (with the LR-ratio "
                           "sweep: about 50 minutes on 2 CPU cores); the report reads the cached study whenever it is "
                           "present."], id="typicality-howto")]
    n = len(t["header"])
    out = [Paragraph(t["summary"]),
           Table(t["header"], t["rows"], id="typicality-table", num=nums(*range(1, n)), tex_pre=FOOT,
                 tex="@{}L{6.2cm}" + r">{\raggedleft\arraybackslash}p{4.3cm}" * (n - 1) + "@{}")]
    if t["difference"]:
        out.append(Paragraph(t["difference"]))
    if "typicality" in figures:
        out.append(html(Figure("typicality", id="fig-typicality")))
    return out


def mu_draws(sm, groups):
    md, paper = sm["mu_draws"], sm["paper"]
    text = ["The fresh seeds come in groups, each under its own draw of the symbol means ", MU, " (the authors' draw is "
            f"torch float32, seed 0), {groups['per_group']} seeds per group; a difference between groups is ", MU,
            f"'s and the seeds' together. Speedup {fmt(md['speedup_mean'], 3)}", X, f" on average ({groups['label']} "
            f"{fmt(groups['lo'], 3)}", NDASH, f"{fmt(groups['hi'], 3)})."]
    rows = []
    for d in md["draws"]:
        ci = d.get("speedup_ci95")
        authors = " (the authors' draw)" if d["mu_rng"] == "torch-float32" and d["mu_seed"] == 0 else ""
        rows.append([d["mu_rng"] + authors, str(d["mu_seed"]), ", ".join(map(str, d.get("seeds", []))),
                     fmt(d["sgd_final_loss"]), fmt(d["em_like_final_loss"]), fmt(d["speedup"], 3),
                     [fmt(ci[0], 3), NDASH, fmt(ci[1], 3)] if ci else ""])
    rows.append(["paper", Cell(""), Cell(""), str(paper["sgd_final_loss"]), str(paper["em_like_final_loss"]),
                 join(list(map(str, paper["speedup_reruns"])), NDASH), Cell("")])
    header = [[MU, " generator"], alt([MU, " seed"], "seed"), html("seeds"), alt("SGD final loss", "SGD final"),
              alt("EM-like final loss", "EM-like final"), "speedup", alt("95% CI over seeds", "95% CI")]
    return [Paragraph(text), Table(header, rows, num=nums(1, 3, 4, 5, 6), tex="@{}lrrrrr@{}", long=False)]


def deep_watch(deep, figures):
    if not deep:
        return [not_run("W1 (the watched deep model)", "deep-watch-howto")]
    n = len(deep["header"])
    rows = [[*r[:-1], Cell(badge(r[-1]))] for r in deep["rows"]]
    return [Paragraph(deep["summary"]),
            Paragraph(["Verdict: ", badge(deep["verdict"]), tex("."), " ", deep["reason"]], id="deep-verdict"),
            Table(deep["header"], rows, id="deep-table", num=nums(*range(1, n - 1)), tex_pre=FOOT3,
                  tex=r"@{}L{1.3cm}L{1.5cm}L{1.2cm}L{2.6cm}L{1.2cm}L{1.3cm}L{1.5cm}L{1.7cm}L{1.9cm}@{}"),
            html(Paragraph(["A head's routing froze when its drift between records (the JS distance of its attention rows "
                            "on the probe batch) stays within the rule's tolerance of its early level to the end; it froze "
                            "before its values settled when the values' drift (relative change of V) settles later or "
                            "never. Each figure below is a grid of layers ", Glyph("times"), " heads, one curve per "
                            "optimizer (mean over seeds)."], cls="small")),
            *[Figure(n, id=f"fig-{n}") for n in deep["figures"] if n in figures]]


def mechanism_grid(grid, figures):
    if not grid:
        return [not_run("G1, G2 (every mechanism under both schedules)", "mechanism-grid-absent")]
    out = [Paragraph(grid["summary"])]
    out += [Paragraph([Bold(g["id"]), *alt(f" ({g['statement']}): ", f", {g['statement']}: "), badge(g["verdict"]),
                       tex("."), " ", g["reason"]], id=f"grid-{g['id']}") for g in grid["verdicts"]]
    rows = [[Code(r[0]), *r[1:10], Cell(badge(r[10])), *r[11:]] for r in grid["rows"]]  # the eleventh: E4's verdict
    out += [Table(grid["header"], rows, id="grid-table", num=nums(*range(3, len(grid["header"]))), tex_pre=FOOT3,
                  tex=r"@{}L{1.1cm}L{1.1cm}L{1.1cm}L{1.0cm}L{1.4cm}L{1.3cm}L{1.5cm}L{1.1cm}L{1.7cm}L{1.7cm}L{1.4cm}L{0.9cm}@{}"),
            html(Paragraph("Speedup: E1's definition (steps to SGD's mean final loss) of EM-like over SGD; the excess "
                           "subtracts SGD's speedup over itself on the same resampled seeds (identical arms score about "
                           "1.1, not 1). G1 also regresses each mechanism's excess on its share of parameters at the "
                           "content rate and compares the groups on the residuals (the share-controlled difference in "
                           "its reason). E4 per mechanism: the relative change of the weights at the tracked query rows (the "
                           "routing frame) against that of the content parameters, each to its final state, under E4's "
                           "rule. The verdicts are the rules' (numeric/experiments/rules.py: g1, g2), their negative and "
                           "positive controls below.", cls="small")),
            *[Figure(n, id=f"fig-{n}") for n in grid["figures"] if n in figures]]
    return out


def measured_claim(entry, claim, figures=()):
    """A claim measured from the other experiments' numbers (results.json experiments.measured_claims): its
    statement, what its section says, its verdict and reason, its own tables and figures where it has them, and
    every number it measured; its controls are in the controls table."""
    out = [Paragraph([Emph(claim.get("statement", "")), " (", claim.get("ref", ""), ")."])] if claim else []
    if entry.get("section"):
        out.append(Paragraph(entry["section"]))
    out.append(Paragraph([badge(entry["verdict"]), " ", entry["reason"]]))
    for tab in entry.get("tables", ()):
        if tab.get("caption"):
            out.append(Paragraph(Emph(tab["caption"])))
        width = 16.4 / max(1, len(tab["header"]))  # the text width shared by the columns, in cm
        out.append(Table(list(tab["header"]), [[fmt(x) if isinstance(x, float) else str(x) for x in row]
                                               for row in tab["rows"]], tex_pre=FOOT,
                         tex="@{}" + "".join(f"L{{{width:.2f}cm}}" for _ in tab["header"]) + "@{}"))
    out += [Figure(n, id=f"fig-{n}") for n in entry.get("figures", ()) if n in figures]
    flat = [] if entry.get("tables") else v.flat_numbers(entry.get("measured", {}))  # its tables show its numbers
    if flat:
        out.append(Table(["measured", "value"], [[Code(k), fmt(x)] for k, x in flat], num=nums(1), tex_pre=FOOT,
                         tex=r"@{}L{8cm}r@{}"))
    return out


def experiment_controls(controls):
    if not controls:
        return [Paragraph("Negative controls of the empirical verdict rules" + NOT_RUN)]
    text = ("Each empirical claim's verdict rule is fed inputs where the effect is absent (`experiments/negative-control/…`, "
            "built from this run's own numbers where possible); it must say not-reproduced. Its positive controls "
            "(`experiments/positive-control/…`) are inputs where the effect holds by construction (derived from this "
            "run's numbers, a constructed run, or synthetic, as stated beside each); there it must say reproduced: the "
            "pair shows the rule can say both.")
    rows = []
    for k in controls:
        m = k["measured"] if isinstance(k["measured"], dict) else {}
        rows.append([Code(k["id"], breaks="/"), k["claim"], m.get("verdict", "-"),
                     Badge(k["status"], "good" if k["status"] == "pass" else "bad"),
                     Cell([[Emph(k["detail"]), ": "] if k.get("detail") else [], m.get("reason", "")], cls="small")])
    return [Paragraph(with_code(text)),
            Table(["control", "claim", "verdict said", "result", "reason"], rows, id="controls-table", tex_pre=FOOT,
                  tex=r"@{}L{4.6cm}p{0.8cm}L{2cm}p{0.9cm}L{6.4cm}@{}")]


def key_section(results, figures):
    rows = [[where if i == 0 else "", Badge(word, cls), meaning]
            for where, words in v.KEY for i, (word, cls, meaning) in enumerate(words)]
    return [Table(["where", "word", "meaning"], rows, id="verdict-key", tex=r"@{}L{3.6cm}L{3cm}L{9.8cm}@{}")]


def reproduce_section(results, figures):
    env = results["environment"]
    rows = [[Cell(str(k), th=True), str(val)] for k, val in env.items()]
    rows += [[Cell(f"stage {s}", th=True), f"{i['status']}, {i['seconds']} s, {i['checks']} checks"]
             for s, i in results.get("stages", {}).items()]
    commands = [f"python -m derive.all{' --quick' if env.get('profile') == 'quick' else ''} --out DIR",
                "agv render --out DIR", "pip install torch==2.13.0 -e '.[test]' && pytest"]
    return [html(Table(None, rows)), List([Code(c) for c in commands])]


SECTION_BUILDERS = {"claims": claims_section, "derivations": derivations_section, "kill-matrix": kill_matrix_section,
                    "mechanisms": mechanisms_section, "soundness": soundness_section, "numeric": numeric_section,
                    "benchmarks": benchmarks_section, "experiments": experiments_section, "key": key_section,
                    "reproduce": reproduce_section}
TEX_TITLES = {"kill-matrix": "Negative controls", "reproduce": "Reproduction"}  # the PDF's shorter headings


def report(results, figures=()):
    """The whole report: the front matter's blocks, then one Section per entry of views.SECTIONS. `figures`: the
    names of the figures drawn for this run."""
    figures = sorted(figures)
    sections = [Section(anchor, title, SECTION_BUILDERS[anchor](results, figures), tex_title=TEX_TITLES.get(anchor))
                for anchor, title in v.SECTIONS]
    return front(results, v.SECTIONS) + sections
