"""Each path's soundness on claims that fooled it before: size coincidences, second derivatives,
the linearised loss at the readout. A false claim is never proved; a disproof carries a witness."""
import pytest

from derive import profile
from derive.claims import Identity
from derive.prove import PATHS, run_path

QUICK = {"grid": list(profile.QUICK.derive.grid), "points": 2, "seed": 0, "budget_s": 120}


def ident(free, level, derived, closed, **kw):
    return Identity("probe", free, level, derived, closed, "probe", **kw)


DV_TIMES_RATIO = ident(("n", "dv"), "scores", lambda m, j, a: m.derived_grad("v", j, a),
                       lambda m, j, a: m.dV(j, a) * m.size("dk") / m.size("dv"))  # true only when d_k = d_v
DV_TIMES_SIZE = ident(("n", "dv"), "scores", lambda m, j, a: m.derived_grad("v", j, a),
                      lambda m, j, a: m.dV(j, a) * m.size("dv"))  # true only when d_v = 1
HESSIAN_ZERO = ident(("n", "dv", "n", "dv"), "scores",
                     lambda m, j, a, l, b: m.grad(m.derived_grad("v", j, a), "v", l, b),
                     lambda m, j, a, l, b: 0)  # the CE Hessian in v is not 0
HESSIAN_SYMMETRIC = ident(("n", "dv", "n", "dv"), "scores",
                          lambda m, j, a, l, b: m.grad(m.derived_grad("v", j, a), "v", l, b),
                          lambda m, j, a, l, b: m.grad(m.derived_grad("v", l, b), "v", j, a))
WO_GRAD_ZERO = ident(("dv", "m"), "readout", lambda m, a, c: m.derived_grad("WO", a, c), lambda m, a, c: 0)


def assert_disproved(out, what):
    assert out.status == "disproved", f"{what}: {out.status}: {out.measured}"
    w = out.witness.to_json()
    assert w["lhs"] != w["rhs"] and w["point"] and w["sizes"]


@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize("path", PATHS)
def test_a_size_coincidence_is_never_proved(path, masked):
    out = run_path(path, DV_TIMES_RATIO, masked, "dk=dv only", QUICK)
    assert out.status != "proved", out.measured
    if path in ("fixed", "rational"):  # the grid and the draws contain pairwise-distinct sizes
        assert_disproved(out, path)


@pytest.mark.parametrize("seed", range(10))
def test_rational_path_catches_dv_one_at_every_seed(seed):
    assert_disproved(run_path("rational", DV_TIMES_SIZE, True, "dv=1 only", dict(QUICK, seed=seed)), f"seed {seed}")


@pytest.mark.parametrize("path", PATHS)
def test_a_wrong_second_derivative_is_disproved(path):
    assert_disproved(run_path(path, HESSIAN_ZERO, False, "Hessian = 0", dict(QUICK, grid=QUICK["grid"][:2])), path)


@pytest.mark.parametrize("path", PATHS)
def test_a_true_second_derivative_is_never_disproved(path):
    out = run_path(path, HESSIAN_SYMMETRIC, False, "Hessian symmetric", dict(QUICK, grid=QUICK["grid"][:2]))
    assert out.status in ("proved", "holds", "undecided"), out.measured
    if path != "general":
        assert out.status == "holds", out.measured


def test_readout_gradients_are_not_linearised():
    """At the readout the loss <u, o> has no W_O in it: the general path must use the full loss."""
    out = run_path("general", WO_GRAD_ZERO, False, "dL/dWO = 0", QUICK)
    assert_disproved(out, "general")
    assert "full CE loss" in out.measured


@pytest.mark.parametrize("path", PATHS)
def test_division_by_a_size_is_exact(path):
    """1 / m.size("n") must not become a float on the fixed-size paths (sum_j 1/n = 1 would then 'differ')."""
    mean = ident(("n",), "scores", lambda m, i: m.sum("n", lambda j: 1 / m.size("n")), lambda m, i: 1)
    assert run_path(path, mean, True, "mean of ones", QUICK).status == ("proved" if path == "general" else "holds")
