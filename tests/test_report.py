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
    assert "On the authors&#39; 1 seeds alone: speedup 1.92x (95% CI 1.7&ndash;2.2)" in html
    assert "On the authors' 1 seeds alone: speedup 1.92$\\times$ (95\\% CI 1.7--2.2)" in tex
    assert "final loss SGD 2.04, EM-like 1.97 (paper 2.03, 1.93)" in html
    assert "<td>torch-float64</td><td class=\"num\">1</td><td>2024</td>" in html and "range over draws 1.9&ndash;2.5" in html
    assert "torch-float64 & 1 & 2.05 & 1.98 & 2.45 & 2.1--2.9" in tex
    assert ("<td>paper</td><td></td><td></td><td class=\"num\">2.03</td><td class=\"num\">1.93</td>"
            "<td class=\"num\">2.2&ndash;2.3</td>") in html
    assert "paper & & 2.03 & 1.93 & 2.2--2.3" in tex  # the paper's figures come from results.json
    assert "<b>4.5x</b> (per round 4.25&ndash;4.75)" in html
    assert "(paper 2.03, 1.93).\n\n\\begin{tabular}" in tex  # a paragraph, not text wrapped around the table


def test_tex_escapes_and_sections(rendered):
    out, _ = rendered
    tex = (out / "report.tex").read_text()
    assert r"n=3 \& 50\% \textless{}odd\textgreater{} chars\_\{x\}" in tex
    for section in ("Claims at a glance", "Derivations", "Negative controls", "Which mechanisms route by advantage?",
                    "How far the verdicts can be trusted", "Numeric agreement", "Benchmarks", "Experiments", "Reproduction"):
        assert f"\\section{{{section}}}" in tex


@pytest.mark.skipif(not shutil.which("pdflatex"), reason="TeX is installed by .ci/run; not on this machine")
def test_pdf_compiles_with_expected_sections(rendered):
    out, status = rendered
    assert status["pdf"][0] == "pass", status["pdf"]
    text = subprocess.run(["pdftotext", str(out / "report.pdf"), "-"], capture_output=True, text=True, check=True).stdout
    for section in ("Claims at a glance", "Derivations", "Negative controls", "Which mechanisms route by advantage?",
                    "How far the verdicts can be trusted", "Numeric agreement", "Experiments"):
        assert section in text
    assert "derive/C2/main/fixed/masked" in text and "INTERNAL INCONSISTENCY" in text and "Witnesses" in text


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
    from derive.all import claim_catalogue
    from derive.results import Results

    Results({"profile": "quick", "device": "cpu"}, catalogue=claim_catalogue()).write(tmp_path)
    status = render(tmp_path, pdf=False, log=lambda *a: None)
    html = (tmp_path / "report.html").read_text()
    assert status["html"][0] == "pass" and "not-run" in html and "E7" in html


def _render(tmp_path, results):
    write_fixture(tmp_path, results)
    render(tmp_path, pdf=False, log=lambda *a: None)
    return (tmp_path / "report.html").read_text(), (tmp_path / "report.tex").read_text()


def test_claims_show_per_path_outcomes_witness_and_reason(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    row = html[html.index('id="claim-X1"'):html.index('id="claim-X2"')]
    assert '<span class="badge bad">disproved</span>' in row
    assert '"badge mini good">general: proved' in row and '"badge mini partial">fixed: undecided' in row
    assert '"badge mini bad">rational: disproved' in row
    assert "witness: n=3 dk=2 dv=2 m=3 dx=2, unmasked at (0, 1): lhs 0.4123456789012345678 vs rhs 0.1987654321098765432" in row
    assert "why: general path over the 60 s budget" in html[html.index('id="claim-X2"'):html.index('id="claim-E1"')]
    x1 = tex[tex.index("\nX1 & "):tex.index("\nX2 & ")]
    assert r"rational: \verdict{bad}{disproved}" in x1 and r"fixed: \verdict{partial}{undecided}" in x1
    assert "witness: n=3 dk=2 dv=2 m=3 dx=2, unmasked at (0, 1): lhs 0.41234567\\allowbreak{}" in x1
    assert "why: general path over the 60 s budget" in tex[tex.index("\nX2 & "):tex.index("\nE1 & ")]
    assert "<td>undecided</td>" not in html and r"\verdict{partial}{undecided}" in tex


def test_derivations_show_outcomes_and_witness_tables(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    derivations = html[html.index('id="derivations"'):html.index('id="kill-matrix"')]
    assert "<h3>X1 user-row-sum" in derivations and "<h3>X2 user-slow" in derivations  # user claims too
    assert '<td><code>derive/X2/main/general/masked</code></td><td><span class="badge partial">undecided</span>' in derivations
    assert '<td><code>derive/X1/main/rational/unmasked</code></td><td><span class="badge bad">disproved</span>' in derivations
    assert derivations.count("<h4>Witnesses</h4>") == 2 and "interval arithmetic with the real exp and log" in derivations
    assert "q[0,0] = -2/5 &hellip; (9 entries)" in derivations and "k[2,1] = 9/11</details>" in derivations
    assert "<td>n=3 dk=2 dv=2 m=3 dx=2</td><td>no</td><td>0, 1</td>" in derivations
    assert '<td class="wrap">0.4123456789012345678</td><td class="wrap">0.1987654321098765432</td>' in derivations
    assert tex.count(r"\paragraph{Witnesses}") == 2 and "interval arithmetic with the real exp and log" in tex
    assert r"\texttt{derive/X2/main/general/masked} & \verdict{partial}{undecided}" in tex
    assert r"q[0,0] = -2/5, \ldots{} (all 9 entries in \texttt{results.json})" in tex and "k[2,1]" not in tex
    assert r"n=3 dk=2 dv=2 m=3 dx=2 & no & 0, 1 &" in tex and r"\subsection*{X1 user-row-sum" in tex


def test_kill_matrix_undecided_is_bad_but_distinct(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    assert '<span class="badge bad open">undecided</span>' in html and '<span class="badge bad">ACCEPTED</span>' in html
    assert r"\verdict{bad}{undecided}" in tex and r"\verdict{bad}{ACCEPTED}" in tex


def test_soundness_section_in_both_outputs(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    sound = html[html.index('id="soundness"'):html.index('id="numeric"')]
    assert "40 random claims (seed 7): 24 true and 16 false identities" in sound
    assert "Oracle margin 1.00e-06; closest false gap 0.0031" in sound
    assert 'id="false-verdicts"' in sound and "sum_j alpha_ij v_j = v_i (fuzz #17)" in sound
    # holds: 0 where results.json predates the outcome (a fixed-size path's "true at the sizes it tried")
    assert ('<td>rational</td><td class="num">24</td><td class="num">0</td><td class="num">15</td><td class="num">1</td>'
            '<td class="num">90.0%</td>') in sound
    assert '<span class="badge bad">1</span></td><td class="num">12.5</td>' in sound
    assert '<td>chain-rule</td><td class="num">30</td><td class="num">18</td><td class="num">80.0%</td>' in sound
    assert '<span class="badge bad">1 killed (50.0%)</span>' in sound and ">survived</span>" in sound
    assert "<td>C1 general, fuzz softmax-rows</td>" in sound and "Schwartz-Zippel" in sound
    assert "not run in this invocation" not in html
    assert r"\section{How far the verdicts can be trusted}" in tex
    assert r"rational & 24 & 0 & 15 & 1 & 90.0\% & 75.0\% & \verdict{bad}{1} & 12.5" in tex
    assert r"chain-rule & 30 & 18 & 80.0\%" in tex and r"(fuzz \#17)" in tex
    assert r"\verdict{bad}{1 killed, 50.0\%}" in tex and r"\verdict{bad}{survived}" in tex
    assert r"p = 2\textasciicircum{}61 − 1 with probability ≤ d/p" in tex  # TeX gets the Unicode via the preamble


def test_no_false_verdicts_is_green(tmp_path):
    from report_fixture import fixture_results

    r = fixture_results()
    r["derive"]["fuzz"]["false_verdicts"] = []
    r["derive"]["fuzz"]["paths"]["rational"]["false_verdicts"] = 0
    html, tex = _render(tmp_path, r)
    assert "False verdicts: <span class=\"badge good\">0</span>" in html and 'id="false-verdicts"' not in html
    assert r"False verdicts: \verdict{good}{0}." in tex


def test_inconsistency_alert_only_when_paths_contradict(rendered, tmp_path):
    from report_fixture import fixture_results

    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    alert = html[html.index('id="inconsistencies"'):html.index('id="failed"')]
    assert html.index('id="inconsistencies"') < html.index('class="counts"')  # at the top, above everything
    assert ("INTERNAL INCONSISTENCY: path general proved what path fixed disproved with a witness "
            "(claim C2, identity main, masked)") in alert
    assert "INTERNAL INCONSISTENCY: path general proved what path fixed disproved with a witness}} (claim C2" in tex
    assert r"\fcolorbox{bad}" in tex
    r = fixture_results()
    r["inconsistencies"] = []
    r["claims"][1]["inconsistencies"] = []
    html, tex = _render(tmp_path, r)
    assert 'id="inconsistencies"' not in html and "INTERNAL INCONSISTENCY: path" not in html
    assert r"\fcolorbox{bad}" not in tex and "INTERNAL INCONSISTENCY: path" not in tex


def test_skipped_box_shows_the_reason(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    skipped = html[html.index('id="skipped"'):html.index('id="claims"')]
    assert "<code>derive/X2/main/general/masked</code>: general path over the 60 s budget at n symbolic" in skipped
    assert r"\texttt{derive/X2/main/general/masked}: general path over the 60 s budget at n symbolic (path general)" in tex


def test_renders_results_written_before_three_state_outcomes(tmp_path):
    from report_fixture import legacy_results

    html, tex = _render(tmp_path, legacy_results())
    assert 'id="inconsistencies"' not in html and "<h4>Witnesses</h4>" not in html
    assert '"badge mini good">general: proved' in html  # the old list of proving paths
    for what in ("Random claims (fuzzer)", "Faults planted in the proof engine", "Rational-path bound"):
        assert f"{what}: not run in this invocation." in html and f"{what}: not run in this invocation." in tex
    assert r"Paths: general \verdict{good}{proved}; fixed \verdict{good}{proved}; rational \verdict{good}{proved}." in tex
    assert "95% CI over draws 1.9&ndash;2.5" in html and "95\\% CI over draws 1.9--2.5" in tex  # an interval once
    for text in (html, tex):
        assert "The paper's seeds on the authors' streams: not run in this invocation." in text.replace("&#39;", "'")
        assert "Negative controls of the empirical verdict rules: not run in this invocation." in text


def test_two_verdicts_for_the_paper_s_streams_and_fresh_streams(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    row = html[html.index('id="claim-E1"'):html.index('id="claim-E2"')]
    assert '<span class="badge partial">partly-reproduced</span>' in row  # the claim's verdict is the fresh one
    assert '<span class="badge mini good">paper&#39;s streams: reproduced</span>' in row
    assert '<span class="badge mini partial">fresh streams: partly-reproduced</span>' in row
    assert ("<b>paper&#39;s streams, the paper&#39;s seeds replayed</b> (reproduced): SGD final loss 2.0310 (paper 2.03)"
            in row)
    assert "<b>fresh streams, 2 seeds</b> (partly-reproduced): speedup 1.96x (95% expanded CI 1.80-2.10" in row
    assert '<span class="small">Other draws of mu (2 draws, 2 seeds each): speedup 1.90-2.50x.</span>' in row
    e1 = tex[tex.index("\nE1 & "):tex.index("\nE2 & ")]
    assert r"\verdict{partial}{partly-reproduced}\newline{\footnotesize paper's streams: \verdict{good}{reproduced}}" in e1
    assert r"\newline{\footnotesize fresh streams: \verdict{partial}{partly-reproduced}}" in e1
    assert r"\textbf{paper's streams, the paper's seeds replayed} (reproduced): SGD final loss 2.0310" in e1
    assert r"\textbf{fresh streams, 2 seeds} (partly-reproduced): speedup 1.96x" in e1
    assert "Fresh streams (2 seeds):" not in row and "Fresh streams (2 seeds):" not in e1  # no reason twice


def test_replay_of_the_paper_s_seeds_per_seed(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    sentence = ("On the paper&#39;s own random streams our trainer ends where the authors&#39; script ends, seed for seed "
                "(largest loss difference 4.0e-07, largest entropy or accuracy difference 1.0e-05): SGD 2.031, "
                "EM-like 1.932, speedup 2.18x, against the paper&#39;s 2.03, 1.93 and 2.3x.")
    assert sentence in html and sentence.replace("&#39;", "'") in tex
    table = html[html.index('id="replay-table"'):html.index("</table>", html.index('id="replay-table"'))]
    cells = lambda *xs: "".join(f'<td class="num">{x}</td>' for x in xs)  # noqa: E731
    assert ("<td><b>2024</b></td><td>ours</td>" + cells("2.003688", "1.911325", "2.082882", "2.0309", "1.9419",
                                                         "0.2046", "0.2836", "282")) in table
    assert "<td></td><td>authors&#39; script</td>" + cells("2.064712", "1.980183", "2.077939", "2.0750") in table
    assert "<td><b>mean</b></td><td>ours</td>" + cells("2.030977") in table and cells("457.8 (2.18x)") in table
    assert "<td><b>paper</b></td><td></td>" + cells("2.03", "1.93") in table and cells("430 (2.3x)") in table
    assert "2024 & ours & 2.003688 & 1.911325 & 2.082882 & 2.0309 & 1.9419 & 0.2046 & 0.2836 & 282 \\\\" in tex
    assert " & authors' script & 2.064712 & 1.980183 & 2.077939 & 2.0750 & 2.0160 & 0.1521 & 0.2341 & 746 \\\\" in tex
    fresh = ("On fresh streams (2 seeds) the EM-like arm reaches SGD&#39;s mean final loss (1.990) after 6 of 10 steps on "
             "average: a speedup of 1.96x (95% CI 1.80–2.10; identical arms score 1.05x), against the paper&#39;s 2.3x; "
             "final loss SGD 2.000, EM-like 1.950. Verdict on fresh streams: partly-reproduced.")
    assert fresh in html and fresh.replace("&#39;", "'").replace("%", "\\%") in tex
    assert html.index('id="replay"') < html.index('id="fresh-summary"') < html.index('id="fresh"')
    assert "\\subsection*{The paper's seeds on the authors' streams}" in tex


def test_shortened_replay_says_so_and_shows_its_rows(tmp_path):
    from report_fixture import fixture_results, replay_quick

    r = fixture_results()
    r["experiments"]["sticky_replay"] = replay_quick()
    html, tex = _render(tmp_path, r)
    said = ("In this profile the replay of the paper&#39;s seeds on the authors&#39; streams is shortened to 20 steps: "
            "seed for seed, our trainer matches the authors&#39; script at step 0 and our full 1000-step replay at "
            "step 20 (largest loss difference 4.5e-07).")
    assert said in html and said.replace("&#39;", "'") in tex
    assert "(python -m derive.all -{}-only experiments)" in tex  # two hyphens, not an en dash
    assert ("<th>seed</th><th class=\"num\">SGD at step 0</th><th class=\"num\">authors&#39; script</th>"
            "<th class=\"num\">SGD at step 20</th><th class=\"num\">full replay</th>") in html
    assert ('<td><b>1337</b></td><td class="num">2.080775</td><td class="num">2.080775</td>'
            '<td class="num">2.079684</td><td class="num">2.079684</td><td class="num">2.076902</td>') in html
    assert "1337 & 2.080775 & 2.080775 & 2.079684 & 2.079684 & 2.076902 & 2.076902 \\\\" in tex


def test_typicality_side_by_side(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    t = html[html.index('id="typicality-table"'):html.index("</table>", html.index('id="typicality-table"'))]
    assert '<th class="num">authors&#39; protocol</th><th class="num">our protocol</th>' in t
    row = lambda label, a, o: f'<tr><td>{label}</td><td class="num">{a}</td><td class="num">{o}</td></tr>'  # noqa: E731
    assert row("EM-like final loss, mean", "1.951 (95% CI 1.947–1.955)", "1.962 (95% CI 1.958–1.966)") in t
    assert row("speedup", "2.05x (95% CI 1.85x–2.35x)", "1.93x (95% CI 1.73x–2.23x)") in t
    assert row("5-seed subsets, EM-like final loss (2.5–97.5 percentile)", "1.937–1.966", "1.948–1.977") in t
    assert row("5-seed subsets with EM-like final loss ≤ 1.932", "2.1%", "0.4%") in t
    assert row("5-seed subsets with speedup ≥ 2.18x", "35.0%", "20.0%") in t
    diff = ("Authors&#39; protocol minus ours: SGD final loss -0.0060 (95% CI -0.0110 to -0.0010, p = 0.018); "
            "EM-like final loss -0.0110 (95% CI -0.0190 to -0.0030, p = 0.008).")
    assert diff in html and diff.replace("&#39;", "'").replace("%", "\\%") in tex
    assert 'id="fig-typicality"' in html and "typicality-howto" not in html
    assert "\\subsection*{Typicality of the paper's five seeds}" in tex
    assert r" & authors' protocol & our protocol \\" in tex
    assert r"EM-like final loss, mean & 1.951 (95\% CI 1.947–1.955) & 1.962 (95\% CI 1.958–1.966) \\" in tex
    assert r"5-seed subsets with speedup ≥ 2.18x & 35.0\% & 20.0\% \\" in tex
    assert "figures/typicality.pdf" in tex


def test_without_typicality_the_report_says_how_to_run_it(tmp_path):
    from report_fixture import fixture_results

    r = fixture_results()
    del r["experiments"]["typicality"]
    html, tex = _render(tmp_path, r)
    assert ('<p id="typicality-howto">Typicality study: not run. It is opt-in: '
            "<code>python -m derive.all --only experiments --extended</code> (with the LR-ratio sweep: about 50 minutes "
            "on 2 CPU cores); the report reads the cached study whenever it is present.</p>") in html
    assert (r"Typicality study: not run. It is opt-in: \texttt{python -m derive.all -{}-only experiments -{}-extended} "
            "(with the LR-ratio sweep: about 50 minutes on 2 CPU cores)") in tex
    assert 'id="sweep-howto"' not in html  # the fixture has the sweep
    del r["experiments"]["lr_ratio_sweep"]
    html, tex = _render(tmp_path, r)
    assert ('<p id="sweep-howto">LR-ratio sweep: not run in this profile. It is opt-in: '
            "<code>python -m derive.all --only experiments --extended</code>") in html
    assert r"LR-ratio sweep: not run in this profile. It is opt-in: \texttt{python" in tex
    assert 'id="typicality-table"' not in html and "fig-typicality" not in html


def test_negative_controls_of_the_empirical_rules(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    t = html[html.index('id="controls-table"'):html.index("</table>", html.index('id="controls-table"'))]
    assert ('<tr><td><code>experiments/negative-control/E1/sgd-vs-itself</code></td><td>E1</td><td>not-reproduced</td>'
            '<td><span class="badge good">pass</span></td>') in t
    assert ('<td><code>experiments/negative-control/E3/identical</code></td><td>E3</td><td>partly-reproduced</td>'
            '<td><span class="badge bad">fail</span></td>') in t
    assert "negative-control" not in html[html.index("<th>experiment check</th>"):html.index('id="experiment-controls"')]
    assert "\\subsection*{Negative controls of the empirical verdict rules}" in tex
    assert (r"\texttt{experiments/\allowbreak{}negative-control/\allowbreak{}E1/\allowbreak{}sgd-vs-itself} & E1 & "
            r"not-reproduced & \verdict{good}{pass}") in tex
    assert r"E3/\allowbreak{}identical} & E3 & partly-reproduced & \verdict{bad}{fail}" in tex


def test_mu_draws_introduced_without_claiming_they_cannot_be_replayed(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    assert ("each under its own draw of the symbol means &mu; (the authors&#39; draw is torch float32, seed 0), 1/1 seeds "
            "per group; a difference between groups is &mu;&#39;s and the seeds&#39; together. Speedup 2.2x on average "
            "(range over draws 1.9&ndash;2.5).") in html
    assert "<td>torch-float32 (the authors&#39; draw)</td><td class=\"num\">0</td><td>42</td>" in html
    assert (r"each under its own draw of the symbol means $\mu$ (the authors' draw is torch float32, seed 0), 1/1 seeds "
            r"per group; a difference between groups is $\mu$'s and the seeds' together. Speedup 2.2$\times$ on "
            r"average (range over draws 1.9--2.5).") in tex
    for text in (html, tex):
        assert "cannot be replayed" not in text and "PAPER.md" not in text
    assert '<p class="small">the paper, C1. Proof obligations:</p>' in html
    assert "the paper, C1. Proof obligations:" in tex


def test_partial_experiments_do_not_crash(tmp_path):
    from report_fixture import fixture_results

    r = fixture_results()
    ex = r["experiments"]
    ex["sticky_replay"] = {"steps": 1000, "rows": [{"seed": 42}]}
    ex["typicality"] = {"protocols": {"ours": {"sgd": {}}}}
    ex["sticky_markov"]["mu_draws"]["draws"][0].pop("speedup_ci95")
    r["claims"][-3]["verdicts"] = {"replay": {}, "fresh": {"verdict": "reproduced"}}
    r["checks"].append({"id": "experiments/negative-control/E2/x", "stage": "experiments", "kind": "negative-control",
                        "claim": "E2", "status": "pass", "seconds": 0.0, "measured": None, "expected": None, "detail": ""})
    html, tex = _render(tmp_path, r)
    assert 'id="replay-table"' in html and 'id="typicality-table"' in html and "fresh streams: reproduced" in html
    assert "paper&#39;s streams: not-run" in html and "\\subsection*{Typicality of the paper's five seeds}" in tex


def test_deep_model_section_shows_the_verdict_table_and_a_figure_per_quantity(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    section = html[html.index('id="deep-watch"'):html.index("<th>experiment check</th>")]
    assert '<span class="badge partial">partly-reproduced</span> sgd: routing froze first in 75%' in section
    assert "A 1-layer, 2-head causal nn.TransformerEncoder (d_model 32, feed-forward 64" in section
    assert ('<tr><td>SGD</td><td class="num">0.3000</td><td class="num">1.3000</td>'
            '<td class="num">0.1340 (0.1210–0.1470)</td><td class="num">3/4</td><td class="num">20</td>'
            '<td class="num">75.0%</td><td class="num">0.15, 0.40</td><td><span class="badge good">reproduced</span></td></tr>'
            ) in section
    assert '<td class="num">0/4</td><td class="num">–</td>' in section  # AdamW: no head froze, no median
    from reports.figures import DEEP_FIGURES
    assert len(DEEP_FIGURES) == 8
    for name in DEEP_FIGURES:
        assert f'<figure id="fig-{name}">' in section and (out / "figures" / f"{name}.pdf").exists()
        assert tex.count(f"figures/{name}.pdf") == 1  # in the section, not again at the end
    assert r"\subsection*{W1: frame and precision in a deep model, watched while it trains}" in tex
    assert r"\verdict{partial}{partly-reproduced}. sgd: routing froze first in 75\% of 4" in tex
    assert (r"SGD & 0.3000 & 1.3000 & 0.1340 (0.1210–0.1470) & 3/4 & 20 & 75.0\% & 0.15, 0.40 & "
            r"\verdict{good}{reproduced} \\") in tex


def test_deep_model_section_says_when_it_did_not_run(tmp_path):
    from report_fixture import legacy_results

    html, tex = _render(tmp_path, legacy_results())
    assert '<p id="deep-watch-howto">W1 (the watched deep model): not run in this invocation.</p>' in html
    assert "W1 (the watched deep model): not run in this invocation." in tex and "fig-deep_js" not in html


def test_mechanism_grid_section_shows_g1_g2_the_table_and_its_figure(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    sec = html[html.index('id="mechanism-grid"'):html.index("<th>experiment check</th>")]
    assert '<b>G1</b> (the EM-like schedule&#39;s gain follows the proved routing structure): <span class="badge partial">' in sec
    assert 'partly-reproduced</span> competing [softmax 2.25x]' in sec
    assert '<b>G2</b>' in sec and '<span class="badge good">reproduced</span> KL to Bayes' in sec
    row = sec[sec.index("<code>sigmoid</code>"):]
    row = row[:row.index("</tr>")]
    assert ('<td>no (disproved)</td><td>yes (proved)</td><td class="num">0.37</td><td class="num">2.1000 / 2.0500</td><td class="num">1.50 (1.20–1.90)</td>'
            '<td class="num">+0.30 (-0.10–0.70)</td><td class="num">0.1500</td>') in row
    assert '<td class="num">0.4000 (0.3800–0.4200)</td><td class="num">0.2000 (0.1800–0.2200)</td>' in row  # sgd, em_like
    assert '<span class="badge bad">not-reproduced</span></td><td class="num">1.50</td>' in row  # E4; step / softmax's
    assert '<figure id="fig-mechanism_grid">' in sec and (out / "figures" / "mechanism_grid.pdf").exists()
    assert "seeds 42, 2024" in sec and "2 workers, 3.5 s" in sec
    assert tex.count("figures/mechanism_grid.pdf") == 1
    assert r"\subsection*{G1, G2: does the two-timescale benefit follow the proved structure?}" in tex
    assert r"\textbf{G2}, the Bayes gap follows the proved routing structure: \verdict{good}{reproduced}." in tex


def test_mechanism_grid_section_says_when_it_did_not_run(tmp_path):
    from report_fixture import legacy_results

    html, tex = _render(tmp_path, legacy_results())
    assert '<p id="mechanism-grid-absent">G1, G2 (every mechanism under both schedules): not run in this invocation.</p>' in html
    assert "G1, G2 (every mechanism under both schedules): not run in this invocation." in tex


def _mechanisms_section(html):
    return html[html.index('<h2 id="mechanisms">'):html.index('<h2 id="soundness">')]


def _tex_mechanisms_section(tex):
    return tex[tex.index(r"\section{Which mechanisms route by advantage?}"):tex.index(r"\section{How far the verdicts")]


def test_mechanism_section_states_the_conjecture_from_the_data(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    sec = _mechanisms_section(html)
    assert html.index('id="kill-matrix"') < html.index('id="mechanisms"') < html.index('id="soundness"')
    # (a)-(d), each its identity from results.json and who it was proved and disproved for
    assert (r"<li><b>(a)</b> \(\frac{\partial L}{\partial s_{ij}} = w_{ij}\big(b_{ij}-\textstyle\sum_k w_{ik}b_{ik}\big)\)"
            " (routes by advantage, question <code>advantage</code>): <span class=\"badge mini good\">proved</span> for "
            "softmax; <span class=\"badge mini bad\">disproved</span> for sigmoid.</li>") in sec
    assert "<li><b>(b)</b>" in sec and '<span class="badge mini partial">undecided</span> for sigmoid.</li>' in sec
    assert '<li><b>(c)</b> \\(\\frac{\\partial L}{\\partial v_j}' in sec
    assert r"<li><b>(d)</b> \(J_j(\Delta_j)-J_j(\Delta^*_j)=\tfrac{N_j}{2\eta}\|\Delta_j-\Delta^*_j\|^2\), \(\Delta^*_j" in sec
    assert ("All four are proved for <b>softmax</b>: these route like softmax attention. Certified counterexamples "
            "refute the conjecture for <b>sigmoid</b> (to (a)).") in sec
    assert "1.25 s for the whole table (general 0.5 s, fixed 0.25 s, rational 0.5 s)" in sec
    assert "one-step analysis" in sec and "not what the recurrence does to that gradient across time steps" in sec
    tex_sec = _tex_mechanisms_section(tex)
    assert r"\label{mechanisms}" in tex_sec
    assert (r"\item[(a)] $\frac{\partial L}{\partial s_{ij}} = w_{ij}\big(b_{ij}-\textstyle\sum_k w_{ik}b_{ik}\big)$ "
            r"(routes by advantage, question \texttt{advantage}): \verdict{good}{proved} for softmax; "
            r"\verdict{bad}{disproved} for sigmoid.") in tex_sec
    assert r"refute the conjecture for \textbf{sigmoid} (to (a))" in tex_sec and "one-step analysis" in tex_sec


def test_mechanism_table_rows_verdicts_and_formulas(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    sec = _mechanisms_section(html)
    q = sec[sec.index('id="mech-questions"'):sec.index("</table>", sec.index('id="mech-questions"'))]
    assert r"<td><code>competition</code> (b)</td><td>keys compete</td><td>\(\textstyle\sum_j \frac{\partial L}" in q
    assert "<td><code>routing</code></td><td>its exact routing gradient</td><td>the mechanism&#39;s own routing gradient" in q
    table = sec[sec.index('id="mech-table"'):sec.index("</table>", sec.index('id="mech-table"'))]
    softmax = table[table.index('id="mech-softmax"'):table.index('id="mech-sigmoid"')]
    sigmoid = table[table.index('id="mech-sigmoid"'):]
    assert softmax.count('<span class="badge good">proved</span>') == 6 and "disproved" not in softmax
    # the weight split at its top-level ",\ " so it wraps; the proved routing gradient beneath
    assert r"\(w_{ij}=M_{ij}\,\sigma(s_{ij}+\beta)\), \(s_{ij}=c\,q_i\cdot k_j\)" in sigmoid
    assert r'routing gradient:</span> \(\frac{\partial L}{\partial s_{ij}}=w_{ij}(1-w_{ij})\,b_{ij}\)' in sigmoid
    cells = re.findall(r'<td class="v"[^>]*><span class="badge (\w+)">([\w ]+)</span>', sigmoid)
    assert cells == [("good", "proved"), ("bad", "disproved"), ("partial", "undecided"), ("good", "proved"),
                     ("good", "proved"), ("bad", "disproved")]  # colour and a label that reads in black and white
    assert '<a class="small" href="#mech-witness-sigmoid-advantage">witness</a>' in sigmoid
    assert '<a class="small" href="#mech-why-sigmoid-competition">why</a>' in sigmoid  # the reason beneath the table
    assert ('<p class="small" id="mech-why-sigmoid-competition">Why undecided, <code>sigmoid</code> / '
            '<code>competition</code>: general path over the 60 s budget at n symbolic</p>') in sec
    assert 'title="general: disproved (unmasked), disproved (masked); fixed: disproved' in sigmoid
    assert r"<code>sigmoid</code> bias gradient \(\frac{\partial L}{\partial\beta}" in sec
    tex_sec = _tex_mechanisms_section(tex)
    assert (r"\textbf{\texttt{sigmoid}} & \verdict{good}{proved} & \verdict{bad}{disproved}\newline{\scriptsize"
            r"\hyperlink{mech-witness-sigmoid-advantage}{witness}} & \verdict{partial}{undecided} & ") in tex_sec
    assert r"\textbf{\texttt{softmax}}" + r" & \verdict{good}{proved}" * 6 + r" \\*" in tex_sec
    assert r"$w_{ij}=M_{ij}\,\sigma(s_{ij}+\beta)$, $s_{ij}=c\,q_i\cdot k_j$; routing gradient $\frac{\partial L}" in tex_sec
    assert r"\texttt{em\_step} (d) & EM-normalised content step & $J_j(\Delta_j)" in tex_sec
    assert r"Why undecided, \texttt{sigmoid} / \texttt{competition}: general path over the 60 s budget" in tex_sec


def test_mechanism_witnesses_are_recheckable(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    sec = _mechanisms_section(html)
    w = sec[sec.index('id="mech-witness-table"'):sec.index("</table>", sec.index('id="mech-witness-table"'))]
    assert ('<tr id="mech-witness-sigmoid-advantage"><td><code>sigmoid</code></td><td>advantage</td>'
            '<td>n=3 dk=1 dv=1 m=2 dx=1</td><td>causal mask</td><td>(1, 0)</td><td class="nowrap">0.0536271903311</td>'
            '<td class="nowrap">0.0195988699932</td></tr>') in w
    point = w[w.index("<details>"):w.index("</details>")]
    assert "<summary>exact point: 11 entries</summary>" in point  # collapsed, every entry inside
    assert '<code class="nowrap">s[0,1] = -1/4</code>' in point and '<code class="nowrap">v[0,0] = 2/7</code>' in point
    assert ('<tr id="mech-witness-sigmoid-saturation"><td><code>sigmoid</code></td><td>saturation</td>'
            '<td>n=2 dk=1 dv=1 m=2 dx=1</td><td>unmasked</td><td>0</td>'
            '<td class="nowrap">≥ 0.267662706213</td><td class="nowrap">≤ 0.0719448398484</td></tr>') in w
    assert "at query row 0; 2 options; b (1, -1); weights ≈ (0.982, 0.5): <details><summary>exact point: 6 entries" in w
    assert '<code class="nowrap">U[0,0] = 1</code>' in w  # the whole point, so it replays as printed
    tex_sec = _tex_mechanisms_section(tex)
    assert (r"\hypertarget{mech-witness-sigmoid-advantage}{}\texttt{sigmoid} & advantage & n=3 dk=1 dv=1 m=2 dx=1 & "
            r"causal mask & (1, 0) & 0.05362719\allowbreak{}03311 & 0.01959886\allowbreak{}99932 \\*") in tex_sec
    assert (r"point (11 entries, the first 8 shown, all in \texttt{results.json}): \texttt{s[0,0] = 0/3, "
            r"s[0,1] = -1/4") in tex_sec
    assert r"s[2,1] = 1/6}, \ldots" in tex_sec and "v[0,0] = 2/7" not in tex_sec  # cut, and said so
    assert r"unmasked & 0 & ≥ 0.26766270\allowbreak{}6213 & ≤ 0.07194483\allowbreak{}98484" in tex_sec
    assert r"at query row 0; 2 options; b (1, -1); weights ≈ (0.982, 0.5); point (6 entries): \texttt{" in tex_sec


def test_mechanism_mutants_follow_the_kill_matrix(rendered):
    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    sec = _mechanisms_section(html)
    assert '<span class="badge bad">1 of 2 rejected by every path</span>' in sec
    assert ("<tr><td><code>softmax-per-key</code></td><td>softmax</td><td>routing</td><td>the per-key form w(1-w)b</td>"
            + '<td><span class="badge good">rejected</span></td>' * 4 + "</tr>") in sec
    assert ('<td><span class="badge good">rejected</span></td><td><span class="badge bad">ACCEPTED (holds)</span></td>'
            '<td><span class="badge bad open">undecided</span></td><td><span class="badge bad">NOT rejected</span></td>') in sec
    tex_sec = _tex_mechanisms_section(tex)
    assert r"\verdict{bad}{1 of 2 rejected by every path}" in tex_sec
    assert (r"\texttt{sigmoid-\allowbreak{}advantage} (routing) & sigmoid & the paper's softmax form w(b - sum\_k w b) "
            r"applied to sigmoid & \verdict{good}{rejected} & \verdict{bad}{ACCEPTED (holds)} & \verdict{bad}{undecided} & "
            r"\verdict{bad}{NOT rejected} \\") in tex_sec


@pytest.mark.skipif(not shutil.which("pdflatex"), reason="TeX is installed by .ci/run; not on this machine")
def test_pdf_has_the_mechanism_section(rendered):
    out, status = rendered
    assert status["pdf"][0] == "pass", status["pdf"]
    text = subprocess.run(["pdftotext", str(out / "report.pdf"), "-"], capture_output=True, text=True, check=True).stdout
    # the last occurrences: the table of contents names both sections first
    sec = text[text.rindex("Which mechanisms route by advantage?"):text.rindex("How far the verdicts can be trusted")]
    for words in ("Counterexamples", "Mechanism mutants", "sigmoid-advantage", "ACCEPTED", "one-step analysis",
                  "11 entries, the first 8 shown, all in results.json", "at query row 0; 2 options"):
        assert words in sec, words


def test_mechanism_section_absent_is_one_line(tmp_path):
    from report_fixture import fixture_results, legacy_results

    note = "Which mechanisms route by advantage: not in this results.json"
    for results in (legacy_results(), {**fixture_results(), "mechanisms": {}}):  # older file; --only without derive
        html, tex = _render(tmp_path, results)
        sec = _mechanisms_section(html)
        assert sec.count("<p") == 1 and f'<p id="mechanisms-absent">{note}' in sec and 'id="mech-table"' not in sec
        tex_sec = _tex_mechanisms_section(tex)
        assert r"Which mechanisms route by advantage: not in this \texttt{results.json}" in tex_sec
        assert r"\begin{longtable}" not in tex_sec and r"\section{Which mechanisms route by advantage?}" in tex


def test_mechanism_section_renders_partial_data(tmp_path):
    from report_fixture import fixture_results

    r = fixture_results()
    table = r["mechanisms"]["table"]
    del table["softmax"]["questions"]["saturation"]  # a question one row was not asked
    table["sigmoid"]["mutants"]["sigmoid-advantage"]["paths"] = {"general": "disproved"}
    del r["mechanisms"]["questions"], r["mechanisms"]["seconds"], r["mechanisms"]["path_seconds"]
    table["odd"] = "not an object"
    html, tex = _render(tmp_path, r)
    sec = _mechanisms_section(html)
    assert '<span class="badge neutral">not asked</span>' in sec and 'id="mech-odd"' not in sec
    assert '<span class="badge neutral">not run</span>' in sec and "for the whole table" not in sec
    assert r"\verdict{neutral}{not asked}" in _tex_mechanisms_section(tex)
    # without the questions' LaTeX in results.json, the conjecture is still stated
    assert r"<li><b>(b)</b> \(\sum_j \frac{\partial L}{\partial s_{ij}} = 0\)" in sec
    assert "<td><code>saturation</code></td><td>saturation</td><td>&ndash;</td>" in sec


def test_math_pieces_split_only_at_top_level():
    from reports.render import math_pieces

    assert math_pieces(r"w=\frac{a,\ b}{c},\ s=c\,q\cdot k,\ f(x,\ y)") == [r"w=\frac{a,\ b}{c}", r"s=c\,q\cdot k", r"f(x,\ y)"]
    assert math_pieces("") == [] and math_pieces(None) == [] and math_pieces(r"\{a,\ b") == [r"\{a", "b"]


def test_mask_dependent_and_error_cells_are_shown_as_such():
    """A cell that holds unmasked and fails under a mask shows its witness and counts against the conjecture
    "under a mask"; a cell that could not be decided reads error (bad) with its message."""
    from report_fixture import MECH_BOUND, MECH_WITNESS, mechanisms

    from reports.render import mechanisms_view, verdict_class
    data = mechanisms()
    sigmoid = data["table"]["sigmoid"]["questions"]
    sigmoid["routing"] = {"verdict": "mask-dependent", "witness": {**MECH_WITNESS}, "settings":
                          {"unmasked": "proved", "masked": "disproved"},
                          "reason": "holds unmasked (proved), fails under a mask (certified witness)"}
    sigmoid["saturation"] = {"verdict": "error", "witness": None, "reason": "ZeroDivisionError: at the weight"}
    view = mechanisms_view({"mechanisms": data})
    cells = {c["question"]: c for c in next(r for r in view["rows"] if r["name"] == "sigmoid")["cells"]}
    assert cells["routing"]["cls"] == "partial" and cells["routing"]["anchor"] == "mech-witness-sigmoid-routing"
    assert "fails under a mask" in cells["routing"]["reason"]
    assert cells["saturation"]["cls"] == "bad" and cells["saturation"]["reason"].startswith("ZeroDivisionError")
    assert [w["question"] for w in view["witnesses"] if w["mechanism"] == "sigmoid"] == ["routing", "advantage"]
    refuted = {x["name"]: x["failed"] for x in view["conjecture"]["refuted"]}
    assert refuted["sigmoid"].startswith("(")
    assert verdict_class("mask-dependent") == "partial" and verdict_class("error") == "bad"
    assert MECH_BOUND["point"]  # the bound's witness in the fixture is complete (every entry it reads)


def test_banner_follows_the_exit_status_and_names_what_failed(rendered, tmp_path):
    from derive.all import claim_catalogue
    from derive.results import Results

    out, _ = rendered  # the fixture: failed checks, a disproved and an undecided claim, an inconsistency
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    banner = html[html.index('id="banner"'):html.index("</div>", html.index('id="banner"'))]
    assert "<b>FAIL</b>" in banner and "exit status 1" in banner and "claims not proved: C2, X1, X2" in banner
    assert "failed checks (derive/C2/main/fixed/masked" in banner and "internal inconsistencies" in banner
    assert r"\textbf{FAIL} --- exit status 1" in tex and r"\fcolorbox{failed}" in tex
    Results({"profile": "quick", "device": "cpu"}, catalogue=claim_catalogue()).write(tmp_path)  # nothing failed
    render(tmp_path, pdf=False, log=lambda *a: None)
    html = (tmp_path / "report.html").read_text()
    banner = html[html.index('id="banner"'):html.index("</div>", html.index('id="banner"'))]
    assert "<b>PASS</b>" in banner and "exit status 0" in banner
    # nothing ran: every claim is a not-run placeholder, told apart by the kind results.json records for it
    analytic, empirical = banner.split("empirical claims:")
    assert ">15 not-run<" in analytic and ">12 not-run<" in empirical  # E1-E7, W1, G1-G3, V1


def test_contents_link_every_section_and_the_key_explains_every_verdict_shown(rendered):
    from reports.render import KEY

    out, _ = rendered
    html, tex = (out / "report.html").read_text(), (out / "report.tex").read_text()
    nav = html[html.index('<nav id="contents">'):html.index("</nav>")]
    anchors = re.findall(r'href="#([\w-]+)"', nav)
    assert len(anchors) >= 9 and all(f'id="{a}"' in html for a in anchors)
    assert r"\tableofcontents" in tex and r"\section{Key to the verdicts}" in tex
    key = html[html.index('id="verdict-key"'):html.index("</table>", html.index('id="verdict-key"'))]
    words = {w for _, ws in KEY for w, _, _ in ws}
    shown = set(re.findall(r'<span class="badge (?:good|bad|partial|neutral)[^"]*">([\w-]+)</span>', html))
    shown = {w for w in shown if not w.isdigit()}  # counts are badges too
    assert shown and shown - {"pass", "fail", "skipped"} <= words, shown - words
    assert all(f">{w}</span>" in key for w in words)


def test_no_template_line_does_the_view_s_work():
    for path in (Path(render.__code__.co_filename).parent / "templates").glob("*.j2"):
        lines = path.read_text().splitlines()
        assert max(map(len, lines)) <= 400, path.name  # decisions live in reports/render.py's view
        assert not [ln for ln in lines if re.search(r"\{% set \w+ = \w+ \|", ln)], path.name  # no computed sets


def test_a_new_section_needs_no_template_code(tmp_path, monkeypatch):
    """A section no template knows: built of nodes, printed by both printers, placed in the report by one entry."""
    from report_fixture import fixture_results

    from reports import build, views
    from reports.model import Badge, Code, Paragraph, Section, Table, html
    from reports.printers import HtmlPrinter, TexPrinter

    def z9(results, figures):
        return [Paragraph(["Z9 ", Badge("reproduced", "good"), " on 2 seeds; ", Code("x_1"), " 50% <b>"]),
                Table(["seed", "loss", html("web only")], [["1", "0.25", "a"], ["2", "0.5", "b"]], id="z9-table",
                      num=frozenset({1}), tex="ll")]

    sec = Section("z9", "Z9: a claim no template knows", z9({}, []))
    h, t = HtmlPrinter().doprint(sec), TexPrinter().doprint(sec)
    assert '<h2 id="z9">Z9: a claim no template knows</h2>' in h and "50% &lt;b&gt;" in h
    assert '<span class="badge good">reproduced</span>' in h and "<code>x_1</code>" in h
    assert '<table id="z9-table"><tr><th>seed</th><th class="num">loss</th><th>web only</th></tr>' in h
    assert '<tr><td>2</td><td class="num">0.5</td><td>b</td></tr>' in h
    assert r"\section{Z9: a claim no template knows}\label{z9}" in t and r"\verdict{good}{reproduced}" in t
    assert r"\texttt{x\_1} 50\% \textless{}b\textgreater{}" in t
    assert r"\begin{longtable}{ll}" in t and "\n2 & 0.5 \\\\" in t and "web only" not in t
    # one entry in the list of sections puts it in the report, its contents and both outputs
    monkeypatch.setattr(views, "SECTIONS", (*views.SECTIONS, ("z9", "Z9: a claim no template knows")))
    monkeypatch.setitem(build.SECTION_BUILDERS, "z9", z9)
    html_out, tex_out = _render(tmp_path, fixture_results())
    assert '<a href="#z9">Z9: a claim no template knows</a>' in html_out and '<table id="z9-table">' in html_out
    assert r"\section{Z9: a claim no template knows}" in tex_out and "\n1 & 0.25 \\\\" in tex_out
    for path in (Path(render.__code__.co_filename).parent / "templates").glob("*.j2"):
        text = path.read_text()
        assert not [a for a, _ in views.SECTIONS if f'id="{a}"' in text or f"{{{a}}}" in text], path.name
