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
    err, magnitude = identities.evaluate(fn, identity, sizes, batch, mask, seed=5)
    assert err <= identities.TOL_FLOAT64, (err, magnitude)
    assert magnitude > 1e-6  # the comparison is not between two zeros


@pytest.mark.parametrize("mutant,identity,fn", MUTANTS, ids=[m.id for m, _, _ in MUTANTS])
def test_mutant_rejected(mutant, identity, fn):
    sizes, batch, mask = IDENTITY_SHAPES[0]
    err, _ = identities.evaluate(fn, identity, sizes, batch, mask, seed=5)
    assert err > 1e3 * identities.TOL_FLOAT64


def test_an_extra_identity_without_a_kernel_form_is_skipped_with_the_reason(monkeypatch):
    from derive import claims as registry
    from derive.claims import Claim, Identity
    from derive.profile import QUICK
    from derive.results import Results
    from numeric.stage import NumericStage, generated_module

    jacobian = Identity("jacobian", ("n", "n"), "scores", lambda m, i, j: m.grad(m.alpha(i, i), "s", i, j),
                        lambda m, i, j: m.alpha(i, i) * (m.delta(i, j) - m.alpha(i, j)), "J")
    rows = Identity("rows", ("n",), "scores", lambda m, i: m.sum("n", lambda j: m.alpha(i, j) * m.b(i, j)),
                    lambda m, i: m.sum("dv", lambda a: m.u(i, a) * m.o(i, a)), "R")
    registry.claims()
    monkeypatch.setitem(registry.REGISTRY, "X7", Claim("X7", "extra", "", "test", (jacobian, rows)))
    stage = NumericStage(Results({}), QUICK, "cpu", 0, log=lambda *a: None)
    stage.identities(generated_module())
    checks = {c.id: c for c in stage.results.checks}
    assert checks["numeric/X7/jacobian/float64"].status == "skipped"
    assert "NotImplementedError" in checks["numeric/X7/jacobian/float64"].measured
    assert checks["numeric/X7/rows/float64"].status == "pass"
    assert checks["numeric/C1/main/float64"].status == "pass"
