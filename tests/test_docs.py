"""Every code block of the README and the manual (docs/*.md) runs in the tests, so the docs cannot drift from the
code: Python blocks are executed in order, one namespace per page; every command line of a bash block that names
one of the project's commands (`agv ...`, `python -m MODULE ...`) is parsed by that command's own parser, without
running it. `text` blocks are output and are not run. The README's picture of the report is current with the
report's template."""
import json
import re
from pathlib import Path

import pytest
from commands import parser_of, split, target

from derive import claims as registry
from derive import mechanisms

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
RUN = {"python", "bash", "console", "sh", "shell"}
SHOWN = {"text"}  # printed output: shown, not run


def blocks(path, lang=None):
    """[(language, body)] of every fenced block of the page; with `lang`, the bodies of that language's blocks."""
    found = [(m.group(1), m.group(2)) for m in FENCE.finditer(path.read_text())]
    return found if lang is None else [body for lng, body in found if lng == lang]


def run_page(path):
    namespace = {"__name__": f"docs.{path.stem}"}
    for n, block in enumerate(blocks(path, "python")):
        exec(compile(block, f"{path.name} (python block {n + 1})", "exec"), namespace)
    return namespace


def command_lines(path):
    """Each command of each shell block: lines joined at trailing backslashes, split at && and ;"""
    for block in blocks(path, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|;|\|\|", line):
                if part.strip() and not part.strip().startswith("#"):
                    yield part.strip()


@pytest.fixture
def clean():
    from numeric.experiments import registry as empirical

    mechanisms.builtin()
    before, claims, measured = set(mechanisms.REGISTRY), set(registry.REGISTRY), set(empirical.REGISTRY)
    yield
    for name in set(mechanisms.REGISTRY) - before:
        del mechanisms.REGISTRY[name]
    for cid in set(registry.REGISTRY) - claims:
        del registry.REGISTRY[cid]
    for cid in set(empirical.REGISTRY) - measured:
        del empirical.REGISTRY[cid]


def test_every_block_is_marked():
    for page in PAGES:
        for lang, _ in blocks(page):
            assert lang in RUN | SHOWN, f"{page.name}: a ```{lang or '(no language)'} block: mark it python, bash or text"


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: p.name)
def test_every_python_block_runs(page, clean, monkeypatch):
    monkeypatch.chdir(ROOT)  # paths in the docs are relative to the repository root, where a reader runs them
    run_page(page)


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "bash")], ids=lambda p: p.name)
def test_every_command_line_parses(page):
    parsed = 0
    for line in command_lines(page):
        found = target(split(line))
        if found is None:
            continue
        module, prog, argv = found
        parser = parser_of(module, prog)
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            raise AssertionError(f"{page.name}: `{line}` does not parse (exit {exc.code})") from None
        parsed += 1
    assert parsed or page.name == "README.md"


def test_a_command_line_that_drifted_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\nagv fuzz --n 3 --no-such-option\n```\n")
    (line,) = command_lines(page)
    module, prog, argv = target(split(line))
    with pytest.raises(SystemExit):
        parser_of(module, prog).parse_args(argv)
    with pytest.raises(AssertionError, match="no such subcommand"):
        target(split("agv frobnicate"))


def test_the_readme_is_a_short_guide_with_its_picture():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).exists(), link
    assert "pip install torch==2.13.0 -e . && python -m derive.all" in text
    assert "pip install torch==2.13.0 -e '.[test,hf]' && pytest" in text
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]  # CI runs the README's test command
    assert ci == "pip install torch==2.13.0 -e '.[test,hf]' && pytest" and ci in text
    assert "](docs/report-first-screen.png)" in text


def test_the_picture_is_current_with_the_template():
    from reports import screenshot

    png = DOCS / "report-first-screen.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    meta = json.loads(Path(f"{png}.json").read_text())
    assert meta["template_sha256"] == screenshot.template_hash(), (
        "reports/templates/report.html.j2 changed since the README's picture was taken: run "
        "`agv screenshot --out DIR` on a run's output directory")


def test_the_manual_s_mechanism_is_decided_as_it_says(clean):
    from derive.mechanisms import table
    from derive.results import Results
    from numeric.reference_check import check_reference

    ns = run_page(DOCS / "mechanisms.md")
    assert check_reference(ns["PRIOR"]) == 2  # its torch reference is its weight, masked and unmasked
    rows = table.build(Results({}), {"grid": [{"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}], "points": 2, "seed": 0,
                                     "budget_s": 60}, log=lambda *a: None, names=["prior_doc"])
    cell = rows["prior_doc"]["questions"]["saturation"]
    assert cell["verdict"] == "proved" and "P > 0 (declared)" in cell["assumptions"]
