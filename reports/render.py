"""Render DIR/results.json into DIR/report.html, DIR/report.tex and (with TeX) DIR/report.pdf.

    python -m reports.render DIR [--no-pdf]

The report is rendered from results.json alone: reports/build.py makes it a tree of sections (reports/model.py),
reports/printers.py prints the tree as HTML and as LaTeX, and the templates wrap each in its document shell. HTML
is one self-contained file (KaTeX and its fonts inlined, figures as inline SVG, nothing fetched); LaTeX uses PDF
figures and is compiled with latexmk or pdflatex when one is on PATH."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import jinja2

from reports import build
from reports.figures import render_all
from reports.printers import HtmlPrinter, TexPrinter, tex_escape  # noqa: F401 (tex_escape re-exported)
from reports.views import KEY, math_pieces, mechanisms_view, verdict_class  # noqa: F401 (re-exported)

HERE = Path(__file__).resolve().parent
VENDOR = HERE / "vendor" / "katex"
TEX_MISSING = ("no TeX engine on PATH: install one (Debian: apt-get install --no-install-recommends "
               "texlive-latex-base texlive-latex-recommended latexmk) to get report.pdf")


def _template(name, **delimiters):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False, **delimiters)
    return env.get_template(name)


def render_html(tree, svgs):
    """The tree printed as HTML inside the page's shell (its style and the inlined KaTeX)."""
    printer = HtmlPrinter(svgs)
    assets = {"katex_css": (VENDOR / "katex.inline.min.css").read_text(),
              "katex_js": (VENDOR / "katex.min.js").read_text(), "autorender_js": (VENDOR / "auto-render.min.js").read_text()}
    return _template("report.html.j2").render(blocks=[b for b in map(printer.doprint, tree) if b], **assets)


def render_tex(tree):
    """The tree printed as LaTeX inside the document's preamble."""
    printer = TexPrinter()
    return _template("report.tex.j2", block_start_string="(%", block_end_string="%)", variable_start_string="((",
                     variable_end_string="))", comment_start_string="(#", comment_end_string="#)").render(
        blocks=[b for b in map(printer.doprint, tree) if b])


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
    results = load_results(out_dir)
    t0 = time.perf_counter()
    svgs = render_all(results, out_dir)
    tree = build.report(results, figures=svgs)
    (out_dir / "report.html").write_text(render_html(tree, svgs))
    (out_dir / "report.tex").write_text(render_tex(tree))
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


def load_results(out_dir):
    """DIR/results.json, parsed and shape-checked: FileNotFoundError if absent, derive.results.ResultsError
    (one line naming the file and the problem) if truncated, not JSON, of another schema or wrong-shaped."""
    from derive.results import read_json

    path = Path(out_dir) / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run `python -m derive.all --out {out_dir}` first")
    return read_json(path)


def main(argv=None, prog="python -m reports.render"):
    from derive import options
    from derive.results import ResultsError

    p = options.parser(prog, "render DIR/results.json into DIR/report.html, report.tex and report.pdf",
                       parents=[options.out_dir(help="directory holding results.json; the report is written beside it")])
    p.add_argument("out_dir", nargs="?", default=None, metavar="DIR", help="the same as --out DIR")
    p.add_argument("--no-pdf", action="store_true", help="skip the LaTeX compile")
    args = p.parse_args(argv)
    args.out_dir = args.out_dir or args.out
    try:
        status = render(args.out_dir, pdf=not args.no_pdf)
    except (FileNotFoundError, ResultsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # content of the right outline that the report cannot use: one line, not a traceback
        detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        print(f"error: {Path(args.out_dir) / 'results.json'}: cannot be rendered ({detail})", file=sys.stderr)
        return 2
    return 1 if any(s == "fail" for s, _, _ in status.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
