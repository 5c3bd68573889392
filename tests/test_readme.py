"""The README's Python example runs as written."""
import re
from pathlib import Path

from derive import claims as registry


def test_readme_python_example_runs():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    before = set(registry.REGISTRY)
    try:
        for block in blocks:
            exec(compile(block, "README.md", "exec"), {})
    finally:
        for cid in set(registry.REGISTRY) - before:
            del registry.REGISTRY[cid]
