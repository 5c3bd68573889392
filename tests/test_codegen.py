"""The generated file: fresh, deterministic, complete (its MANIFEST), driven by the registry's
declarations, and derive/ never imports torch."""
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from derive import claims as registry
from derive.claims import Claim, Identity, Mutant
from derive.codegen import COMMAND, GENERATED, emit
from derive.kernels import api_kernels

ROOT = Path(__file__).resolve().parents[1]


def test_committed_file_is_fresh():
    assert GENERATED.read_text() == emit(), f"stale generated file: run `{COMMAND}`"


def test_header_names_the_regeneration_command():
    head = GENERATED.read_text().splitlines()[0]
    assert "GENERATED" in head and COMMAND in head


def _module(text):
    namespace = {}
    exec(compile(text, "<emission>", "exec"), namespace)
    return namespace


def test_manifest_names_a_check_function_for_every_identity_and_mutant():
    gen = _module(GENERATED.read_text())
    identities = {(c.id, p.name) for c in registry.claims() for p in c.parts}
    mutants = {m.id for m in registry.mutants()}
    assert set(gen["MANIFEST"]) | set(gen["UNEMITTED"]) == identities | mutants
    assert not set(gen["MANIFEST"]) & set(gen["UNEMITTED"])
    # only the inequality's bound constant has no closed form to evaluate
    assert set(gen["UNEMITTED"]) == {m.id for m in registry.mutants() if m.constant is not None}
    assert len(set(gen["MANIFEST"].values())) == len(gen["MANIFEST"])
    for name in gen["MANIFEST"].values():
        assert callable(gen[name]) and not name.startswith("_")


def _extra_claim():
    # a Jacobian of alpha has no kernel form (only dL/dx arrives from autograd); the row sum has one
    jacobian = Identity("jacobian", ("n", "n"), "scores", lambda m, i, j: m.grad(m.alpha(i, i), "s", i, j),
                        lambda m, i, j: m.alpha(i, i) * (m.delta(i, j) - m.alpha(i, j)), "J")
    rows = Identity("rows", ("n",), "scores", lambda m, i: m.sum("n", lambda j: m.dS(i, j)), lambda m, i: 0, "R")
    return Claim("X7", "extra", "", "test", (jacobian, rows),
                 mutants=(Mutant("X7-M", "X7", "rows", "rows sum to the baseline", lambda m, i: m.baseline(i)),))


def test_an_extra_claim_without_a_kernel_form_is_unemitted_with_the_reason(monkeypatch):
    registry.claims()
    monkeypatch.setitem(registry.REGISTRY, "X7", _extra_claim())
    gen = _module(emit(include_extra=True))
    assert "NotImplementedError" in gen["UNEMITTED"][("X7", "jacobian")]
    assert ("X7", "rows") in gen["MANIFEST"] and "X7-M" in gen["MANIFEST"]
    assert emit() == GENERATED.read_text()  # the committed file holds the paper's claims only


def _with_part(cid, name, **changes):
    """The registry's claims with one identity's declarations changed."""
    out = []
    for c in registry.claims():
        if c.id == cid:
            parts = tuple(dataclasses.replace(p, **changes) if p.name == name else p for p in c.parts)
            c = dataclasses.replace(c, parts=parts)
        out.append(c)
    return out


def test_api_outputs_are_the_closed_forms_their_identities_declare():
    kernels = {k.name: k for k in api_kernels()}
    outputs = {o.name: o.build for o in kernels["attention_backward_masked"].outputs}
    assert outputs["dS"] is registry.REGISTRY["C1"].part("main").closed
    assert outputs["B"] is registry.REGISTRY["C7"].part("main").closed
    readout = {o.name: o.build for o in kernels["readout_backward"].outputs}
    assert readout["dW_O"] is registry.REGISTRY["C8"].part("W_O").closed
    assert kernels["attention_backward_masked"].rewrites["baseline"] is registry.REGISTRY["C1"].part("fused baseline")


@pytest.mark.parametrize("changes,message", [
    ({"kernels": (), "output": ""}, "output B of attention_backward is neither a model quantity nor declared"),
    ({"kernels": ("attention_backward",), "output": "dS"}, "both feed attention_backward.dS"),
    ({"kernels": ("attention_forward",), "output": "B"}, "attention_forward returns alpha, o"),
    ({"kernels": ("attention_sideways",), "output": "B"}, "there is no API kernel attention_sideways"),
    ({"replaces": "baseline"}, "both replace baseline"),
    ({"replaces": "e"}, "not a quantity with its own line"),
])
def test_inconsistent_kernel_declarations_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        api_kernels(_with_part("C7", "main", **changes))


def test_kernels_and_output_go_together():
    with pytest.raises(ValueError, match="kernels and output go together"):
        Identity("x", ("n",), "scores", lambda m, i: 0, lambda m, i: 0, "x", kernels=("params_backward",))


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


def test_generated_code_prints_signs_as_written():
    code = "\n".join(line.split("#")[0] for line in GENERATED.read_text().splitlines())
    assert not any(patch in code for patch in ("+ -", "(-1 *", "- -", "--"))


def test_generated_softmax_zeroes_empty_rows_without_reading_the_device():
    """Fully masked rows give 0; no data-dependent branch: it runs on `meta` tensors, which cannot be read."""
    from numeric.generated import attention as gen

    x = torch.randn(2, 3, 4, dtype=torch.float64)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    out = gen._softmax(x, mask, -1)
    assert torch.equal(out[:, 1], torch.zeros(2, 4, dtype=torch.float64))
    assert torch.allclose(out[:, 0], torch.softmax(x[:, 0], -1)) and not out.isnan().any()
    meta = gen._softmax(torch.empty(2, 3, 4, device="meta"), torch.empty(3, 4, dtype=torch.bool, device="meta"), -1)
    assert meta.shape == (2, 3, 4) and meta.device.type == "meta"
