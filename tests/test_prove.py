"""Every registered identity is proved at general size and holds at every size the fixed-size paths try;
every mutant is rejected by every path."""
import pytest
from conftest import equality_mutants, identities, identity_ids, part_of

from derive.profile import QUICK
from derive.prove import PATHS, run_path

OPTIONS = {"grid": list(QUICK.derive.grid), "points": 2, "seed": 0, "budget_s": 120}
MUTANT_OPTIONS = dict(OPTIONS, grid=list(QUICK.derive.mutant_grid))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize("claim,identity", identities(), ids=identity_ids())
def test_identity_is_proved(claim, identity, path, masked):
    """Proved at every size by the general path; holds at the sizes they tried on the fixed-size paths."""
    out = run_path(path, identity, masked, claim.id, OPTIONS)
    assert out.status == ("proved" if path == "general" else "holds"), out.measured
    if path != "general":
        assert out.scope and "holds at the" in out.measured and "not a proof at other sizes" in out.measured


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mutant", equality_mutants(), ids=lambda m: m.id)
def test_mutant_is_rejected(mutant, path):
    out = run_path(path, part_of(mutant), True, mutant.id, MUTANT_OPTIONS, mutant.derived, mutant.closed)
    assert out.status == "disproved", f"{mutant.id} not disproved by {path}: {out.measured}"
    assert out.witness.lhs != out.witness.rhs


def test_masked_baseline_mutant_is_only_wrong_under_a_mask():
    """The mask-only mistake must be invisible without a mask: the paths are not just saying no."""
    mutant = next(m for m in equality_mutants() if m.id == "M5-masked-baseline")
    for path in PATHS:
        out = run_path(path, part_of(mutant), False, mutant.id, MUTANT_OPTIONS, mutant.derived, mutant.closed)
        assert out.equal, (path, out.measured)


def test_a_proof_over_budget_fails_with_the_reason():
    claim_identity = next((c, p) for c, p in identities() if c.id == "C8" and p.name == "W_Q")
    out = run_path("general", claim_identity[1], True, "C8", dict(OPTIONS, budget_s=0.005))
    assert out.status == "undecided"
    assert "ProofTimeout" in out.reason and "budget" in out.reason
