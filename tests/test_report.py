"""The report: rendered from results.json alone, failures shown, offline HTML, a compiling PDF."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from report_fixture import write_fixture

from reports.render import main as render_main
from reports.render import render, tex_escape

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = write_fixture(tmp_path_factory.mktemp("report"))
    status = render(out, pdf=True, log=lambda *a: None)
    return out, status


def test_html_shows_failures_prominently(rendered):
    out, _ = rendered
    html = (out / "report.html").read_text()
    alert = html[html.index('id="failed"'):html.index('id="claims"')]
    assert "derive/C2/main/fixed/masked" in alert
    assert 'id="skipped"' in html and "experiments/wind-tunnel" in html
    assert "ACCEPTED" in html and 'class="badge bad">failed' in html
    assert "&lt;odd&gt;" in html  # escaped, not injected


def test_html_is_self_contained(rendered):
    out, _ = rendered
    html = (out / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//)""", html)
    assert "url(http" not in html and "@import" not in html
    assert html.count("<svg") >= 5  # figures inline


def test_paper_seed_subset_is_shown_beside_the_full_seed_set(rendered):
    out, _ = rendered
    html = (out / "report.html").read_text()
    tex = (out / "report.tex").read_text()
    assert "On the authors' 1 seeds alone: speedup 1.92x (95% CI 1.7&ndash;2.2)" in html
    assert "On the authors' 1 seeds alone: speedup 1.92$\\times$ (95\\% CI 1.7--2.2)" in tex
    assert "final loss SGD 2.04, EM-like 1.97 (paper 2.03, 1.93)" in html
    assert "<td>numpy-legacy</td><td class=\"num\">0</td>" in html and "95% CI over draws 1.9&ndash;2.5" in html
    assert "numpy-legacy & 0 & 2.05 & 1.98 & 2.45 & 2.1--2.9" in tex
    assert "<td>paper</td><td></td><td class=\"num\">2.03</td><td class=\"num\">1.93</td><td class=\"num\">2.2&ndash;2.3</td>" in html
    assert "paper & & 2.03 & 1.93 & 2.2--2.3" in tex  # the paper's figures come from results.json
    assert "<b>4.5x</b> (per round 4.25&ndash;4.75)" in html
    assert "(paper 2.03, 1.93).\n\n\\begin{tabular}" in tex  # a paragraph, not text wrapped around the table


def test_tex_escapes_and_sections(rendered):
    out, _ = rendered
    tex = (out / "report.tex").read_text()
    assert r"n=3 \& 50\% \textless{}odd\textgreater{} chars\_\{x\}" in tex
    for section in ("Claims at a glance", "Derivations", "Negative controls", "Numeric agreement", "Benchmarks",
                    "Experiments", "Reproduction"):
        assert f"\\section{{{section}}}" in tex


@pytest.mark.skipif(not shutil.which("pdflatex"), reason="TeX is installed by .ci/run; not on this machine")
def test_pdf_compiles_with_expected_sections(rendered):
    out, status = rendered
    assert status["pdf"][0] == "pass", status["pdf"]
    text = subprocess.run(["pdftotext", str(out / "report.pdf"), "-"], capture_output=True, text=True, check=True).stdout
    for section in ("Claims at a glance", "Derivations", "Negative controls", "Numeric agreement", "Experiments"):
        assert section in text
    assert "derive/C2/main/fixed/masked" in text


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is installed by .ci/run; not on this machine")
def test_browser_renders_every_formula_offline(rendered, tmp_path):
    out, _ = rendered
    url = (out / "report.html").as_uri()
    # Any page request beyond file:/data: is blocked by the page's CSP and by the resolver rule, and
    # either way shows up in the console, which must stay silent.
    p = subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
                        "--v=0", "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=5000", "--dump-dom", url],
                       capture_output=True, text=True, timeout=120)
    dom = p.stdout
    assert "katex" in dom
    visible = re.sub(r'<span class="katex">.*?</annotation></semantics></math></span>', "", dom, flags=re.S)
    visible = re.sub(r"<script.*?</script>|<style.*?</style>|<svg.*?</svg>|<!--.*?-->", "", visible, flags=re.S)
    for raw in (r"\(", r"\[", r"\frac", r"\alpha", "$"):
        assert raw not in visible, f"raw TeX {raw!r} left in the page"
    assert "Uncaught" not in p.stderr and "CONSOLE" not in p.stderr.upper().replace("CONSOLE_", "")
    assert "Content-Security-Policy" in dom and "default-src 'none'" in dom
    source = re.sub(r"<script.*?</script>|<style.*?</style>|<svg.*?</svg>", "", (out / "report.html").read_text(), flags=re.S)
    expected = source.count(r"\(") + source.count(r"\[") + source.count("$") // 2
    assert expected >= 8 and dom.count('class="katex"') == expected  # every formula typeset
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-first-screen.png"
    subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1280,1000",
                    "--virtual-time-budget=5000", f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000


def test_render_cli(tmp_path):
    assert render_main([str(tmp_path)]) == 2  # no results.json
    write_fixture(tmp_path)
    assert render_main([str(tmp_path), "--no-pdf"]) == 0
    assert (tmp_path / "report.html").exists() and not (tmp_path / "report.pdf").exists()


def test_missing_tex_is_a_note_not_a_crash(tmp_path, monkeypatch):
    import reports.render as rr

    monkeypatch.setattr(rr.shutil, "which", lambda name: None)
    status, msg = rr.compile_pdf(tmp_path)
    assert status == "skipped" and "apt-get install" in msg


def test_latex_errors_are_surfaced(tmp_path):
    if not shutil.which("pdflatex"):
        pytest.skip("no TeX here")
    import reports.render as rr

    (tmp_path / "report.tex").write_text("\\documentclass{article}\\begin{document}\\undefinedmacro\\end{document}")
    status, msg = rr.compile_pdf(tmp_path)
    assert status == "fail" and "Undefined control sequence" in msg


def test_tex_escape_covers_specials():
    assert tex_escape("a_b%c&d#e$f{g}h~i^j\\k") == (r"a\_b\%c\&d\#e\$f\{g\}h\textasciitilde{}i\textasciicircum{}j"
                                                      r"\textbackslash{}k")



def test_renders_results_with_nothing_run(tmp_path):
    from derive.results import Results

    Results({"profile": "quick", "device": "cpu"}).write(tmp_path)
    status = render(tmp_path, pdf=False, log=lambda *a: None)
    html = (tmp_path / "report.html").read_text()
    assert status["html"][0] == "pass" and "not-run" in html and "E7" in html
