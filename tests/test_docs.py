"""Every Python block of the manual (docs/*.md) runs as written, in order, one namespace per page; what a page
says its example decides is what the table decides."""
import re
from pathlib import Path

import pytest

from derive import claims as registry
from derive import mechanisms

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md") if "```python" in p.read_text())


def run_page(path):
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
    assert blocks, path
    namespace = {}
    for n, block in enumerate(blocks):
        exec(compile(block, f"{path.name} (block {n + 1})", "exec"), namespace)
    return namespace


@pytest.fixture
def clean():
    mechanisms.builtin()
    before, claims = set(mechanisms.REGISTRY), set(registry.REGISTRY)
    yield
    for name in set(mechanisms.REGISTRY) - before:
        del mechanisms.REGISTRY[name]
    for cid in set(registry.REGISTRY) - claims:
        del registry.REGISTRY[cid]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_runs(page, clean):
    run_page(page)


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
