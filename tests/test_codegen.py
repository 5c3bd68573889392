"""The generated file: fresh, deterministic, complete, and derive/ never imports torch."""
import os
import subprocess
import sys
from pathlib import Path

from derive import claims as registry
from derive.codegen import COMMAND, GENERATED, _fn_name, emit

ROOT = Path(__file__).resolve().parents[1]


def test_committed_file_is_fresh():
    assert GENERATED.read_text() == emit(), f"stale generated file: run `{COMMAND}`"


def test_header_names_the_regeneration_command():
    head = GENERATED.read_text().splitlines()[0]
    assert "GENERATED" in head and COMMAND in head


def test_every_identity_and_mutant_is_emitted():
    text = GENERATED.read_text()
    for claim in registry.claims():
        for part in claim.parts:
            assert f"def {_fn_name('identity', claim.id, part.name)}(" in text
        for m in claim.mutants:
            if m.constant is None:
                assert f"def {_fn_name('mutant', m.id)}(" in text


def test_emission_does_not_depend_on_hash_seed():
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.append(subprocess.run([sys.executable, "-m", "derive.codegen"], cwd=ROOT, env=env, capture_output=True,
                                   text=True, check=True).stdout)
    assert outs[0] == outs[1]


def test_check_mode_detects_a_stale_file(tmp_path, monkeypatch):
    import derive.codegen as cg

    stale = tmp_path / "attention.py"
    stale.write_text(emit() + "\n# hand edit\n")
    monkeypatch.setattr(cg, "GENERATED", stale)
    assert cg.main(["--check"]) == 1
    stale.write_text(emit())
    assert cg.main(["--check"]) == 0


def test_derive_never_imports_torch():
    code = ("import sys, derive.stage, derive.codegen, derive.general, derive.fixed, derive.rational, derive.all; "
            "from derive import claims; claims.claims(); assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
