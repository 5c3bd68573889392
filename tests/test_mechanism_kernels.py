"""The routing mechanisms' generated kernels (numeric/generated/mechanisms.py): fresh, emitted from the proved
forms, in agreement with autograd through each mechanism's plain-torch reference per dtype and mask, every
routing mutant rejected, numerically safe, and a mechanism registered at run time gets kernels with no edit of
the code generator."""
import math

import pytest
import sympy as sp
import torch

import derive.codegen as cg
from derive import mechanisms
from derive.codegen import COMMAND, GENERATED_MECHANISMS, emit_mechanisms
from derive.general import GeneralBackend
from derive.kernels import MECHANISM_API, chain_rule, kernel_form, mechanism_identities
from derive.mechanisms.base import Mechanism, Mutant
from derive.mechanisms.forms import per_key
from derive.prove import run_path
from derive.results import Results
from derive.torch_printer import TorchPrinter, align
from numeric import mechanisms as nm
from numeric.agreement import TOLERANCE
from numeric.generated import attention as api
from numeric.generated import mechanisms as gen

BUILTIN = ("softmax", "sigmoid", "linear")


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- the generated file ---------------------------------------------------------------------------------------------
def test_committed_file_is_fresh_and_names_its_regeneration_command():
    text = GENERATED_MECHANISMS.read_text()
    assert text == emit_mechanisms(), f"stale generated file: run `{COMMAND}`"
    assert "GENERATED" in text.splitlines()[0] and COMMAND in text.splitlines()[0]


def test_every_builtin_mechanism_and_mutant_has_kernels_or_a_reason():
    for mech in mechanisms.builtin():
        assert (mech.name in gen.MECHANISMS) != (mech.name in gen.UNEMITTED), mech.name
        for mutant in mech.mutants:
            assert (mutant.id in gen.MUTANTS) != (mutant.id in gen.UNEMITTED), mutant.id
    for name in BUILTIN:
        assert set(gen.MECHANISMS[name]) == {api.kind for api in MECHANISM_API}
        for kinds in gen.MECHANISMS[name].values():
            assert set(kinds) == {"masked", "unmasked"} and all(callable(getattr(gen, f)) for f in kinds.values())
        assert {m.id for m in mechanisms.get(name).mutants} <= set(gen.MUTANTS)


def test_the_freshness_check_fails_on_a_stale_mechanisms_file(tmp_path, monkeypatch):
    stale = tmp_path / "mechanisms.py"
    stale.write_text(emit_mechanisms().replace("def sigmoid_forward_masked", "def sigmoid_forward_masked_edited"))
    monkeypatch.setattr(cg, "GENERATED_MECHANISMS", stale)
    assert cg.main(["--check"]) == 1
    results = Results(environment={}, catalogue={})
    cg.run_stage(results, log=lambda *a: None)
    (check,) = results.checks
    assert check.id == "codegen/fresh" and check.status == "fail"
    assert not check.measured["files"]["mechanisms.py"]["fresh"] and "mechanisms.py" in check.measured["reason"]
    stale.write_text(emit_mechanisms())
    assert cg.main(["--check"]) == 0


def test_a_kernel_calling_a_helper_its_module_lacks_is_refused():
    from derive.codegen import ATTENTION_HELPERS, MECHANISM_HELPERS, emit_kernel
    from derive.kernels import mechanism_kernels
    from derive.sumform import UnsupportedNode

    (forward,) = [k for k in mechanism_kernels(mechanisms.get("linear")) if k.name == "linear_forward_unmasked"]
    assert "_log_matmul_exp(" in emit_kernel(forward, MECHANISM_HELPERS)
    with pytest.raises(UnsupportedNode, match="_log_matmul_exp"):
        emit_kernel(forward, ATTENTION_HELPERS)


def test_softmax_through_the_mechanism_route_is_the_committed_kernel():
    """The same code, line for line, as the paper's committed forward; the same numbers as its backward."""
    def body(fn):
        import inspect
        return inspect.getsource(fn).split('"""')[-1]

    assert body(gen.softmax_forward_masked) == body(api.attention_forward_masked)
    assert body(gen.softmax_forward_unmasked) == body(api.attention_forward_unmasked)
    env = nm.draw(mechanisms.get("softmax"), (2,), 7, 3, 4, True, 5)
    mask = env["mask"].bool()
    ours = gen.softmax_backward_masked(env["q"], env["k"], env["v"], env["u"], mask, env["scale"])
    alpha, _, dS, dQ, dK, dV = api.attention_backward_masked(env["q"], env["k"], env["v"], env["u"], mask, env["scale"])
    for a, b in zip(ours, (alpha, dS, dQ, dK, dV)):
        assert torch.equal(a, b)


# -- agreement with autograd ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("variant", nm.VARIANTS)
def test_kernels_agree_with_autograd_through_the_reference(name, dtype, variant):
    worst, errors, finite, inversion = nm.agreement(gen, mechanisms.get(name), variant, dtype, seed=3)
    assert finite and inversion in nm.INVERSIONS
    fields = {f.split("/")[-1] for f in errors}
    assert fields == set(nm.FIELDS)  # w, o, dS, dQ, dK, dV: each compared, from both backward kernels
    assert worst <= TOLERANCE[dtype], errors


@pytest.mark.parametrize("name", BUILTIN)
def test_the_forms_the_kernels_compute_by_are_proved(name):
    outcomes, proved = nm.forms_proved(name)
    assert proved, outcomes
    assert set(outcomes) == {"dS", "dV", "baseline", "dQ", "dK"}


def test_a_wrong_chain_rule_is_not_proved():
    """The chain rule through linear attention's log-kernel score, with softmax's score differentiated instead."""
    softmax, linear = mechanisms.get("softmax"), mechanisms.get("linear")
    identity = mechanism_identities("linear")["dQ"]
    wrong = chain_rule(softmax, "q", linear.routing)
    assert run_path("general", identity, False, "wrong chain rule", {"seed": 0}, closed=wrong).status != "proved"


@pytest.mark.parametrize("mutant_id", [m.id for name in BUILTIN for m in mechanisms.get(name).mutants])
def test_every_mutant_is_emitted_and_rejected(mutant_id):
    errors = nm.mutant_errors(gen, mutant_id, seed=0)
    assert all(e is not None for e in errors.values())
    assert max(errors.values()) > 1e3 * TOLERANCE[torch.float64], errors


def test_a_mutant_kernel_differs_from_the_true_one_only_in_dS():
    env = nm.draw(mechanisms.get("sigmoid"), (2,), 6, 3, 4, False, 1)
    true = nm.call(gen.sigmoid_backward_unmasked, env)[1]
    wrong = nm.call(getattr(gen, gen.MUTANTS["sigmoid-no-saturation"]["unmasked"]), env)
    alpha = nm.call(gen.sigmoid_forward_unmasked, env)[0]
    torch.testing.assert_close(wrong * (1 - alpha), true, rtol=1e-13, atol=1e-15)  # w b versus w (1 - w) b


# -- numerical safety -----------------------------------------------------------------------------------------------
def test_sigmoid_kernels_are_finite_at_huge_logits():
    """e^x / (1 + e^x) printed as written is inf / inf = NaN once e^x overflows (x > 88 in float32)."""
    import inspect

    assert "torch.sigmoid(" in inspect.getsource(gen.sigmoid_forward_masked)
    env = nm.draw(mechanisms.get("sigmoid"), (2,), 8, 4, 4, True, 2, torch.float32)
    env["q"], env["k"] = env["q"] * 60, env["k"] * 60
    s = nm.call(gen.sigmoid_scores_masked, env)
    assert float(s.abs().max()) > 1e3
    out = nm.ours(gen, "sigmoid", "masked", env)
    assert all(bool(torch.isfinite(t).all()) for t in out.values())
    torch.testing.assert_close(out["alpha"], torch.sigmoid(s + env["beta"]) * env["mask"])
    naive = torch.exp(s + env["beta"]) / (1 + torch.exp(s + env["beta"]))
    assert bool(naive.isnan().any())  # what the unfused pattern would have given


def test_linear_scores_are_finite_where_the_kernel_overflows():
    env = nm.draw(mechanisms.get("linear"), (), 5, 3, 2, False, 4, torch.float32)
    env["q"] = env["q"] + 100.0  # e^q overflows float32; log(e^q . e^k) does not
    s = nm.call(gen.linear_scores_unmasked, env)
    exact = torch.logsumexp(env["q"].double()[:, None, :] + env["k"].double()[None, :, :], -1)
    assert bool(torch.isfinite(s).all()) and not bool(torch.isfinite(env["q"].exp() @ env["k"].exp().mT).all())
    torch.testing.assert_close(s.double(), exact, rtol=1e-6, atol=1e-4)


i, j, a = (sp.Symbol(x, integer=True) for x in ("i", "j", "a"))
X, Y = sp.IndexedBase("X"), sp.IndexedBase("Y")


def _printed(expr, axes, **env):
    p = TorchPrinter({"X": "X", "Y": "Y"}, {"n": "n_size", "dk": "dk_size"}, {i: "n", j: "n", a: "dk"})
    p.target = axes
    code = align(p.tensor(expr), axes).code
    return eval(code, {"torch": torch, "_log_matmul_exp": gen._log_matmul_exp, **env}), code


def test_printer_fuses_the_logistic_patterns():
    x = torch.tensor([[-1e4, -3.0, 0.0, 3.0, 1e4]], dtype=torch.float32)
    out, code = _printed(sp.exp(X[i, j]) / (1 + sp.exp(X[i, j])), (i, j), X=x)
    assert code == "torch.sigmoid(X)" and torch.equal(out, torch.sigmoid(x))
    out, code = _printed(1 / (1 + sp.exp(X[i, j])), (i, j), X=x)
    assert code == "torch.sigmoid(-X)" and torch.equal(out, torch.sigmoid(-x))


def test_printer_fuses_the_log_of_exp_features():
    g = torch.Generator().manual_seed(0)
    xv, yv = torch.randn(2, 4, 3, generator=g, dtype=torch.float64), torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    dk = GeneralBackend.sizes["dk"]
    out, code = _printed(sp.log(sp.Sum(sp.exp(X[i, a]) * sp.exp(Y[j, a]), (a, 1, dk))), (i, j), X=xv, Y=yv)
    assert code.startswith("_log_matmul_exp(")
    torch.testing.assert_close(out, torch.log(xv.exp() @ yv.exp().mT), rtol=1e-14, atol=1e-14)
    out, code = _printed(sp.log(sp.Sum(sp.exp(X[i, a]) * sp.exp(Y[j, a]), (a, 1, dk))), (j, i), X=xv, Y=yv)
    torch.testing.assert_close(out, torch.log(xv.exp() @ yv.exp().mT).mT, rtol=1e-14, atol=1e-14)


# -- a mechanism registered at run time --------------------------------------------------------------------------
# Sigmoid attention at temperature 1/2: w = M sigma(2 s + beta), dL/ds = 2 w (1 - w) b. (At temperature 2, sigma(s/2 +
# beta), the general path's normal form leaves exp(s/2)^2 and exp(s) unrelated: undecided, not proved.)
def _tempered_weight(m, i, j):
    e = m.exp(2 * m.s(i, j) + m.beta)
    return m.mask(i, j) * e / (1 + e)


def _tempered_routing(m, i, j):
    return 2 * m.alpha(i, j) * (1 - m.alpha(i, j)) * m.b(i, j)


def _tempered_reference(t):
    w = (2 * t["c"] * t["q"] @ t["k"].mT + t["beta"]).sigmoid()
    return w if t.get("mask") is None else w * t["mask"]


TEMPERED = Mechanism(
    name="tempered", title="sigmoid attention at temperature 1/2", score=mechanisms.get("softmax").score,
    weight=_tempered_weight, routing=_tempered_routing, reference=_tempered_reference, normalised=False,
    latex=r"w_{ij}=M_{ij}\sigma(2s_{ij}+\beta)", routing_latex=r"2w_{ij}(1-w_{ij})b_{ij}", ref="a test",
    mutants=(Mutant("tempered-untempered", "routing", "the temperature forgotten: w(1-w)b", per_key),))


def test_a_mechanism_registered_at_run_time_gets_kernels_without_codegen_edits(monkeypatch):
    monkeypatch.setitem(mechanisms.REGISTRY, "tempered", TEMPERED)
    assert kernel_form(TEMPERED) == ""
    module = nm.generated_module()  # the committed file does not cover it: a fresh emission
    assert module is not gen and "tempered" in module.MECHANISMS and "tempered-untempered" in module.MUTANTS
    outcomes, proved = nm.forms_proved("tempered")
    assert proved, outcomes
    for dtype in (torch.float64, torch.float32):
        for variant in nm.VARIANTS:
            worst, errors, finite, inversion = nm.agreement(module, TEMPERED, variant, dtype, seed=9)
            assert finite and inversion == "bilinear" and worst <= TOLERANCE[dtype], (dtype, variant, errors)
    errors = nm.mutant_errors(module, "tempered-untempered", seed=0)
    assert min(errors.values()) > 1e3 * TOLERANCE[torch.float64]
    checks = {c["id"]: c["ok"] for c in nm.run_checks(module)}
    assert checks["numeric/mechanisms/tempered/float64/masked"] and checks["numeric/mechanisms/tempered-untempered"]


def test_the_readmes_own_mechanism_example_gets_kernels_at_run_time(monkeypatch):
    """docs/examples/attention_sink.py (a claims file): its weight has one more logit in the normaliser, which the
    printer fuses into a max-shifted `_softmax_extra`."""
    import runpy
    from pathlib import Path

    monkeypatch.setattr(mechanisms, "REGISTRY", dict(mechanisms.REGISTRY))
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "docs" / "examples" / "attention_sink.py"))
    module = nm.generated_module()
    assert "sink" in module.MECHANISMS and "sink-per-key" in module.MUTANTS
    checks = {c["id"]: c for c in nm.run_checks(module) if "sink" in c["id"]}
    assert checks and all(c["ok"] for c in checks.values()), {k: c["note"] for k, c in checks.items()}
    assert "_softmax_extra(" in emit_mechanisms(["sink"])


def test_printer_fuses_a_softmax_with_an_extra_logit():
    beta = sp.Symbol("beta", real=True)
    n = GeneralBackend.sizes["n"]
    k = sp.Symbol("k", integer=True)
    p = TorchPrinter({"X": "X", "beta": "beta"}, {"n": "n_size"}, {i: "n", j: "n", k: "n"})
    p.target = (i, j)
    code = align(p.tensor(sp.exp(X[i, j]) / (sp.exp(beta) + sp.Sum(sp.exp(X[i, k]), (k, 1, n)))), (i, j)).code
    assert code == "_softmax_extra(X, None, dim=-1, extra=beta)"
    x = torch.tensor([[800.0, 0.0], [-5.0, 1.0]], dtype=torch.float64)
    out = eval(code, {"_softmax_extra": gen._softmax_extra, "X": x, "beta": 2.0})
    want = torch.softmax(torch.cat([x, torch.full((2, 1), 2.0, dtype=torch.float64)], -1), -1)[:, :2]
    torch.testing.assert_close(out, want, rtol=1e-15, atol=1e-300)


def test_a_mechanism_without_attentions_shape_is_unemitted_with_the_reason(monkeypatch):
    odd = Mechanism(name="odd", title="odd", score=mechanisms.get("softmax").score, weight=_tempered_weight,
                    routing=_tempered_routing, reference=_tempered_reference, normalised=False, latex="", routing_latex="",
                    ref="", mutants=(Mutant("odd-content", "content", "a content mutant", lambda m, j, a: 0),))
    monkeypatch.setitem(mechanisms.REGISTRY, "odd", odd)
    module = nm.emit_module(["odd"])
    assert "odd" in module.MECHANISMS and "odd-content" in module.UNEMITTED  # only routing mutants have a kernel
    sin = Mechanism(name="sine", title="sine", score=mechanisms.get("softmax").score,
                    weight=lambda m, i, j: sp.sin(m.s(i, j)), routing=_tempered_routing, reference=_tempered_reference,
                    normalised=False, latex="", routing_latex="", ref="")
    monkeypatch.setitem(mechanisms.REGISTRY, "sine", sin)
    module = nm.emit_module(["sine"])
    assert "sine" not in module.MECHANISMS and "UnsupportedNode" in module.UNEMITTED["sine"]


def test_benchmark_rows_have_the_results_schema():
    rows = nm.benchmark(gen, "quick", names=["sigmoid"], log=lambda *a: None)
    assert [r["name"] for r in rows] == [f"numeric/mechanisms/sigmoid/n={n}" for n in nm.BENCH_SIZES["quick"]]
    for r in rows:
        assert set(r) >= {"name", "device", "dtype", "shape", "ours_s", "reference", "reference_s", "ratio"}
        assert r["max_rel_diff"] <= 1e-4 and r["ratio"] > 0 and math.isfinite(r["ratio"])
