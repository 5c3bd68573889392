"""Render DIR/results.json into DIR/report.html, DIR/report.tex and (with TeX) DIR/report.pdf.

    python -m reports.render DIR [--no-pdf]

The report is rendered from results.json alone. HTML is one self-contained file (KaTeX and its
fonts inlined, figures as inline SVG, nothing fetched); LaTeX uses PDF figures and is compiled with
latexmk or pdflatex when one is on PATH."""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jinja2

from reports.figures import render_all

HERE = Path(__file__).resolve().parent
VENDOR = HERE / "vendor" / "katex"
GOOD = {"proved", "confirmed", "reproduced"}
PATHS = ("general", "fixed", "rational")
OUTCOME_CLASS = {"proved": "good", "disproved": "bad", "undecided": "partial"}
KILL_CLASS = {"rejected": "good", "n/a": "neutral", "not run": "neutral"}  # ACCEPTED and undecided: bad
POINT_HEAD = 8  # witness point entries shown before the full list
LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}
TEX_MISSING = ("no TeX engine on PATH: install one (Debian: apt-get install --no-install-recommends "
               "texlive-latex-base texlive-latex-recommended latexmk) to get report.pdf")


def tex_escape(value):
    return re.sub(r"[\\&%$#_{}~^<>|]", lambda m: LATEX_SPECIALS[m.group(0)], str(value))


def tex_breakable(value, every=10):
    """Escaped; long words (decimals) may break every few characters, for narrow columns."""
    def word(w):
        return r"\allowbreak{}".join(tex_escape(w[i:i + every]) for i in range(0, len(w), every))
    return " ".join(word(w) for w in str(value).split(" "))


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
    if verdict in ("partly-reproduced", "undecided"):
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


def context(results):
    checks = results["checks"]
    counts = {s: sum(1 for c in checks if c["status"] == s) for s in ("pass", "fail", "skipped")}
    claims = results["claims"]
    analytic = [c for c in claims if c["id"].startswith("C") or "parts" in c]  # paper and user claims
    proofs = {c["id"]: [k for k in checks if k["claim"] == c["id"] and k["kind"] == "proof"] for c in analytic}
    kill = results.get("derive", {}).get("kill_matrix", {})
    columns = [p for p in (*PATHS, "numeric", "adversarial") if any(p in r for r in kill.values())]
    env = results["environment"]
    return {
        "env": env, "counts": counts, "claims": claims, "analytic": analytic, "proofs": proofs,
        "failed": [c for c in checks if c["status"] == "fail"], "skipped": [c for c in checks if c["status"] == "skipped"],
        "kill": kill, "kill_columns": columns, "inconsistencies": results.get("inconsistencies", []),
        "path_names": PATHS, "point_head": POINT_HEAD,
        "numeric": [c for c in checks if c["stage"] == "numeric" and c["kind"] in ("numeric", "negative-control")],
        "benchmarks": results.get("benchmarks", []), "experiments": results.get("experiments", {}),
        "experiment_checks": [c for c in checks if c["stage"] == "experiments"],
        "stages": results.get("stages", {}), "derive": results.get("derive", {}),
        "commands": [f"python -m derive.all{' --quick' if env.get('profile') == 'quick' else ''} --out DIR",
                     "python -m reports.render DIR", "pip install torch==2.13.0 -e '.[test]' && pytest"],
    }


FILTERS = {"verdict_class": verdict_class, "outcome_class": outcome_class, "kill_class": kill_class,
           "path_outcomes": path_outcomes, "witness_brief": witness_brief, "witness_sizes": witness_sizes,
           "point_entries": point_entries, "first_reason": first_reason, "count": count}


def environment():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(fmt=fmt, pct=pct, **FILTERS)
    return env


def latex_environment():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), block_start_string="(%",
                             block_end_string="%)", variable_start_string="((", variable_end_string="))",
                             comment_start_string="(#", comment_end_string="#)", undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters.update(e=tex_escape, fmt=lambda v, d=4: tex_escape(fmt(v, d)), pct=lambda v: tex_escape(pct(v)),
                       breakable=tex_breakable, **FILTERS)
    return env


def render_html(ctx, svgs):
    assets = {"katex_css": (VENDOR / "katex.inline.min.css").read_text(),
              "katex_js": (VENDOR / "katex.min.js").read_text(), "autorender_js": (VENDOR / "auto-render.min.js").read_text()}
    return environment().get_template("report.html.j2").render(**ctx, svgs=svgs, **assets)


def render_tex(ctx, figures):
    return latex_environment().get_template("report.tex.j2").render(**ctx, figures=figures)


def compile_pdf(out_dir, timeout=180):
    """(status, message): 'pass' with the PDF, 'skipped' without TeX, 'fail' with the first errors."""
    if shutil.which("latexmk"):
        cmd = ["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "-quiet", "report.tex"]
    elif shutil.which("pdflatex"):
        cmd = ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "report.tex"]
    else:
        return "skipped", TEX_MISSING
    runs = 1 if cmd[0] == "latexmk" else 2
    for _ in range(runs):
        p = subprocess.run(cmd, cwd=out_dir, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            log = (out_dir / "report.log").read_text(errors="replace") if (out_dir / "report.log").exists() else p.stdout
            errors = [line for line in log.splitlines() if line.startswith("!")][:5]
            return "fail", "LaTeX failed: " + (" | ".join(errors) or p.stdout[-500:])
    return "pass", str(out_dir / "report.pdf")


def render(out_dir, pdf=True, log=print):
    """Render the report from DIR/results.json; returns {artifact: (status, message, seconds)}."""
    out_dir = Path(out_dir)
    path = out_dir / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run `python -m derive.all --out {out_dir}` first")
    results = json.loads(path.read_text())
    t0 = time.perf_counter()
    ctx = context(results)
    svgs = render_all(results, out_dir)
    (out_dir / "report.html").write_text(render_html(ctx, svgs))
    (out_dir / "report.tex").write_text(render_tex(ctx, sorted(svgs)))
    status = {"html": ("pass", str(out_dir / "report.html"), time.perf_counter() - t0)}
    status["tex"] = ("pass", str(out_dir / "report.tex"), 0.0)
    if pdf:
        t1 = time.perf_counter()
        s, msg = compile_pdf(out_dir)
        status["pdf"] = (s, msg, time.perf_counter() - t1)
        if s != "pass":
            log(f"  note: {msg}")
    log(f"  report rendered in {time.perf_counter() - t0:.2f}s -> {out_dir / 'report.html'}")
    return status


def run_stage(results, out_dir, log=print):
    """The `report` stage of derive.all: render from the results.json just written, record checks."""
    from derive.results import Check

    results.write(out_dir)
    try:
        status = render(out_dir, log=log)
    except Exception as exc:  # a rendering bug is a failed check, reported, not a traceback
        results.add(Check("report/html", "report", "report", "", "fail", 0.0, f"{type(exc).__name__}: {exc}", "rendered"))
        log(f"  FAIL report: {type(exc).__name__}: {exc}")
        return
    for name, (s, msg, seconds) in status.items():
        results.add(Check(f"report/{name}", "report", "report", "", s, round(seconds, 3), msg,
                          "rendered" if name != "pdf" else "compiled with latexmk/pdflatex"))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m reports.render", description="render DIR/results.json into a report")
    p.add_argument("out_dir", help="directory holding results.json")
    p.add_argument("--no-pdf", action="store_true", help="skip the LaTeX compile")
    args = p.parse_args(argv)
    try:
        status = render(args.out_dir, pdf=not args.no_pdf)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 1 if any(s == "fail" for s, _, _ in status.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
