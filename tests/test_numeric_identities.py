"""Every registered identity holds numerically in float64; every mutant is rejected numerically."""
import pytest

from numeric import identities
from numeric.generated import attention as gen
from numeric.stage import IDENTITY_SHAPES

IDS = identities.cases(gen, "identity")
MUTANTS = identities.cases(gen, "mutant")


@pytest.mark.parametrize("shape", IDENTITY_SHAPES, ids=lambda s: f"n{s[0]['n']}-b{len(s[1])}-{s[2]}")
@pytest.mark.parametrize("claim,identity,fn", IDS, ids=[f"{c.id}:{p.name}" for c, p, _ in IDS])
def test_identity_holds(claim, identity, fn, shape):
    sizes, batch, mask = shape
    err, magnitude = identities.evaluate(fn, identity.level, sizes, batch, mask, seed=5)
    assert err <= identities.TOL_FLOAT64, (err, magnitude)
    assert magnitude > 1e-6  # the comparison is not between two zeros


@pytest.mark.parametrize("mutant,identity,fn", MUTANTS, ids=[m.id for m, _, _ in MUTANTS])
def test_mutant_rejected(mutant, identity, fn):
    sizes, batch, mask = IDENTITY_SHAPES[0]
    err, _ = identities.evaluate(fn, identity.level, sizes, batch, mask, seed=5)
    assert err > 1e3 * identities.TOL_FLOAT64
