"""The claim fuzzer: no path gives a false verdict on a quick run, and the oracle it trusts is right."""
import json
import time

import pytest

from derive import fuzz
from derive.fuzz import Claim, dgrad, mul, q
from numeric import fuzz as runner
from numeric import oracle

C1_FREE = (("i", "n"), ("j", "n"))
C1 = Claim(-1, "scores", C1_FREE, dgrad("s", "i", "j"), q("dS", "i", "j"), "C1 closed form")
C1_DROPPED_BASELINE = Claim(-2, "scores", C1_FREE, dgrad("s", "i", "j"), mul(q("alpha", "i", "j"), q("b", "i", "j")), "M1")


@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
def test_oracle_accepts_c1_and_rejects_its_mutant(masked):
    true, false = oracle.label(C1, masked, 0), oracle.label(C1_DROPPED_BASELINE, masked, 0)
    assert true["true"] and true["gap"] < 1e-13, true
    assert not false["true"] and false["gap"] > 1e3 * oracle.MARGIN, false


def test_generation_is_deterministic_and_well_formed():
    first = [c.description + c.text() for c in fuzz.generate(150, 7)]
    assert first == [c.description + c.text() for c in fuzz.generate(150, 7)]
    assert first != [c.description + c.text() for c in fuzz.generate(150, 8)]
    assert all(not fuzz.problems(c) for c in fuzz.generate(150, 7))


def test_quick_run_has_no_false_verdict():
    t0 = time.perf_counter()
    summary = runner.run(n=12, seed=0, paths=runner.PATHS, workers=0, log=lambda line: None, budget_s=5.0)
    seconds = time.perf_counter() - t0
    assert summary["false_verdicts"] == [], json.dumps(summary["false_verdicts"], indent=1)
    assert summary["cases_true"] > 0 and summary["cases_false"] > 0, summary
    assert summary["ill_formed"] == 0
    assert summary["largest_true_gap"] < 1e-12 and summary["closest_false_gap"] > 1e3 * oracle.MARGIN, summary
    assert set(summary["paths"]) == set(runner.PATHS)
    assert sum(f["claims"] for f in summary["families"].values()) == summary["claims"]
    assert seconds <= 60, f"quick fuzz run took {seconds:.1f} s"


def test_cli_writes_json_and_exit_status(tmp_path):
    out = tmp_path / "fuzz.json"
    assert runner.main(["--n", "2", "--workers", "0", "--paths", "general", "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["claims"] == 2 and list(written["paths"]) == ["general"]


def test_a_path_that_proves_everything_is_caught(monkeypatch, tmp_path):
    """Positive control: the fuzzer is not vacuous; a path saying "proved" to everything gives false verdicts."""

    class Proved:
        status, seconds, measured = "proved", 0.0, "fake path"

    monkeypatch.setattr("derive.prove.run_path", lambda *args, **kwargs: Proved())
    out = tmp_path / "fuzz.json"
    assert runner.main(["--n", "6", "--workers", "0", "--paths", "general", "--out", str(out)]) == 1
    verdicts = json.loads(out.read_text())["false_verdicts"]
    assert verdicts and all(v["verdict"] == "proved" and v["truth"] == "false" for v in verdicts)


def test_fuzzer_command_line_runs_as_a_module(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "fuzz.json"
    p = subprocess.run([sys.executable, "-m", "numeric.fuzz", "--n", "2", "--workers", "0", "--paths", "general",
                        "--out", str(out)], cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(out.read_text())["claims"] == 2 and "general" in p.stdout


# -- mechanisms ----------------------------------------------------------------------------------------------------
MECHANISMS = [m.name for m in __import__("derive.mechanisms", fromlist=["builtin"]).builtin()]


def _mechanism_claim(name, question, closed=None):
    """A question identity of the mechanism (traced into the grammar) at its own level, or it with a wrong
    closed side."""
    from derive.fuzz import routing
    from derive.fuzz.grammar import Claim
    from derive.mechanisms import questions

    t = next(t for t in routing.question_templates(name) if t.name == f"{name} {question}")
    level = questions.identities(name)[question].level
    return Claim(-1, level, t.free, t.lhs, t.rhs if closed is None else closed, t.name, t.loss, t.mask_algebra,
                 mechanism=name), t


@pytest.mark.parametrize("name", MECHANISMS)
def test_the_oracle_forward_is_the_proof_paths_model(name):
    """The oracle's plain-torch forward (the mechanism's reference weights, its content, the loss) and autograd's
    gradient by the logit leaf agree with the model every proof path interprets, evaluated exactly (rational
    backend) at the oracle's own float64 point, at every level the fuzzer draws this mechanism at, masked or not."""
    from fractions import Fraction

    import torch

    from derive import mechanisms
    from derive.fixed import Ix
    from derive.fuzz.grammar import mechanism_levels
    from derive.graph import float_value, lift
    from derive.model import Setting
    from derive.rational import RationalBackend, label

    mech = mechanisms.get(name)
    sizes = {"n": 4, "dk": 3, "dv": 2, "m": 5, "dx": 6, "e": 3}
    for level in [lv for lv in mechanism_levels(name) if lv in ("scores", "qk", "params")]:
        for masked in (False, True):
            world = oracle.World(level, sizes, masked, True, 11, name)
            values = {label(k): Fraction(float(x.detach())) for k, x in world.scalars.items()}
            for leaf, t in world.leaves.items():
                for ix in torch.cartesian_prod(*[torch.arange(s) for s in t.shape]).reshape(-1, t.dim()).tolist():
                    values[f"{leaf}[{','.join(map(str, ix))}]"] = Fraction(float(t.detach()[tuple(ix)]))
            m = RationalBackend(Setting(level, "ce", masked, mechanism=name), sizes, values=values)
            rng = {d: [Ix(d, r) for r in range(size)] for d, size in m.sizes.items()}
            value = lambda e: float_value(lift(e))  # noqa: E731
            alpha = torch.tensor([[value(m.alpha(i, j)) for j in rng[mech.axis]] for i in rng["n"]], dtype=torch.float64)
            assert torch.allclose(alpha, world.q["alpha"].detach(), rtol=1e-11, atol=1e-13), (name, level, masked)
            assert abs(value(m.loss()) - float(world.loss.detach())) < 1e-11, (name, level, masked)
            o = torch.tensor([[value(m.o(i, a)) for a in rng["dv"]] for i in rng["n"]], dtype=torch.float64)
            assert torch.allclose(o, world.q["o"].detach(), rtol=1e-11, atol=1e-13), (name, level, masked)
            if level == "scores":
                grad = torch.autograd.grad(world.loss, world.leaves[mech.logit_leaf], retain_graph=True)[0]
                ours = torch.tensor([[value(m.derived_grad(mech.logit_leaf, i, j)) for j in rng[mech.axis]]
                                     for i in rng["n"]], dtype=torch.float64)
                assert torch.allclose(ours, grad, rtol=1e-10, atol=1e-13), (name, masked)


@pytest.mark.parametrize("name", MECHANISMS)
def test_the_oracle_labels_each_mechanisms_questions_as_the_paths_decide_them(name):
    """Each mechanism's own routing form and content gradient (proved on every path) are true for the oracle,
    masked and unmasked; each of its routing mutants (disproved on every path, masked) is false masked."""
    for question in ("routing", "content"):
        claim, _ = _mechanism_claim(name, question)
        for masked in (False, True):
            lab = oracle.label(claim, masked, 5)
            assert lab["true"] and lab["gap"] < 1e-12, (name, question, masked, lab)
    claim, template = _mechanism_claim(name, "routing")
    assert template.mutants, name
    for description, wrong in template.mutants:
        lab = oracle.label(_mechanism_claim(name, "routing", wrong)[0], True, 5)
        assert lab["true"] is False and lab["gap"] > 1e3 * oracle.MARGIN, (name, description, lab)


def test_the_oracle_judges_only_where_an_identity_is_defined():
    """The mixture of experts' EM step divides by the mass of each expert: under the mask an expert no token
    selects has none, and the identity is undefined for it (the general path proves it where it is defined).
    The oracle judges the entries where both sides are defined; a claim defined nowhere is labelled None."""
    from derive.fuzz.grammar import Claim, Const, Div

    claim, _ = _mechanism_claim("moe", "em_step")
    lab = oracle.label(claim, True, 2)
    assert lab["true"] is True, lab
    nowhere = Claim(-1, "scores", (("E", "e"),), Div(q("responsibility", "E"), Const(0)), Const(1), "N_e / 0 = 1",
                    mechanism="moe")
    assert oracle.label(nowhere, True, 2)["true"] is None
    assert not runner._verdict("proved", None) and not runner._verdict("disproved", None)


def test_generated_claims_cover_every_mechanism():
    """Claims are drawn for every built-in mechanism (softmax 4 slots in 10), each with its mechanism in the
    identity the proof paths see; 6 consecutive claims cover five mechanisms."""
    from derive.fuzz.generate import mechanism_of

    claims = fuzz.generate(70, 3)
    assert {c.mechanism for c in claims} == set(MECHANISMS)
    assert sum(c.mechanism == "softmax" for c in claims) == 28
    assert len({c.mechanism for c in claims[:6]}) == 5 and len({mechanism_of(i) for i in range(10)}) == 7
    assert all(c.identity().mechanism == c.mechanism for c in claims)
    families = {c.family for c in claims if c.mechanism != "softmax"}
    assert {"mechanism questions", "routing forms"} <= families, families
    assert all(not fuzz.problems(c) for c in claims)


def test_a_false_verdict_on_a_mechanism_is_caught(monkeypatch):
    """Negative control, per mechanism: a path that proves a false moe claim, one that disproves a true one, and
    one that says a false claim holds at sizes where the oracle finds it false are each a false verdict, counted
    against that mechanism."""
    from derive.prove import Outcome

    (true_claim, template) = _mechanism_claim("moe", "routing")
    false_claim = _mechanism_claim("moe", "routing", template.mutants[0][1])[0]
    scope = [{"n": 3, "dk": 4, "dv": 5, "m": 7, "dx": 6, "e": 2}]
    planted = {
        "proved": (false_claim, Outcome("proved", 0.0, "planted")),
        "holds": (false_claim, Outcome("holds", 0.0, "planted", scope=scope)),
        "disproved": (true_claim, Outcome("disproved", 0.0, "planted", witness=object())),
    }
    for status, (claim, outcome) in planted.items():
        monkeypatch.setattr("derive.prove.run_path", lambda *args, _o=outcome, **kwargs: _o)
        row = runner.run_one(claim, ("general",), 0)
        assert all(c["paths"]["general"]["false_verdict"] for c in row["cases"]), (status, row)
        summary = runner.summarise([row], ("general",), 1.0)
        assert summary["mechanisms"]["moe"]["paths"]["general"]["false_verdicts"] == 2, status
        assert len(summary["false_verdicts"]) == 2 and summary["false_verdicts"][0]["mechanism"] == "moe"
    # and a holds at sizes where the claim is true (false only elsewhere) is no false verdict
    monkeypatch.setattr("derive.prove.run_path", lambda *a, **k: Outcome("holds", 0.0, "planted", scope=scope))
    assert not any(c["paths"]["general"]["false_verdict"] for c in runner.run_one(true_claim, ("general",), 0)["cases"])


def test_the_summary_has_decision_rates_per_mechanism(monkeypatch):
    """`mechanisms` in the summary: per mechanism, claims, cases by label, and per path the decided rates."""

    class Undecided:
        status, seconds, measured = "undecided", 0.0, "fake path"

    monkeypatch.setattr("derive.prove.run_path", lambda *args, **kwargs: Undecided())
    summary = runner.run(n=10, seed=0, paths=("general",), workers=0, log=lambda line: None)
    assert list(summary["mechanisms"]) == MECHANISMS
    for m in summary["mechanisms"].values():
        assert m["claims"] >= 1 and m["cases"] == 2 * m["claims"]
        assert m["paths"]["general"]["undecided"] == m["cases"] and m["paths"]["general"]["false_verdicts"] == 0
        assert m["paths"]["general"]["decided_rate"] in (0.0, None)


# -- the fuzzer as a Dask campaign ---------------------------------------------------------------------------------
def _rows_without_times(summary):
    """Every claim's outcomes with the measured times (the only thing that may differ between runs) removed."""
    drop = {"seconds", "cpu_seconds", "oracle_cpu_seconds"}
    strip = lambda d: {k: strip(v) if isinstance(v, dict) else ([strip(x) if isinstance(x, dict) else x for x in v]  # noqa: E731
                                                               if isinstance(v, list) else v)
                       for k, v in d.items() if k not in drop}
    return [strip(r) for r in summary["rows"]]


@pytest.mark.slow
def test_one_and_two_dask_workers_give_the_same_outcomes():
    """The fuzzer's tasks are pure: on 1 and on 2 local workers (and in this process) every claim's labels and
    verdicts are the same, in the same order."""
    kw = dict(n=8, seed=3, paths=("general",), log=lambda line: None, budget_s=5.0, chunk=3)
    one, two, here = runner.run(workers=1, **kw), runner.run(workers=2, **kw), runner.run(workers=0, **kw)
    assert (one["workers"], two["workers"]) == (1, 2) and one["tasks"]["total"] == 3
    assert _rows_without_times(one) == _rows_without_times(two) == _rows_without_times(here)
    assert [r["index"] for r in one["rows"]] == list(range(8)) and not one["failed_tasks"]


def test_an_interrupted_fuzz_campaign_resumes_from_its_cache(tmp_path, monkeypatch):
    """--cache: finished chunks are read back, not recomputed; a chunk that raises twice is a named failure and
    fails the run (exit 1), its claims not counted."""
    kw = dict(seed=0, paths=("general",), workers=0, log=lambda line: None, budget_s=5.0, chunk=2, cache_dir=tmp_path)
    first = runner.run(n=4, **kw)
    assert first["tasks"] == {"total": 2, "computed": 2, "cached": 0, "chunk": 2}
    calls = []
    real = runner.run_one
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: calls.append(a[0].index) or real(*a, **k))
    resumed = runner.run(n=6, **kw)
    assert resumed["tasks"]["cached"] == 2 and sorted(calls) == [4, 5]  # only the new chunk ran
    assert _rows_without_times(resumed)[:4] == _rows_without_times(first)

    def broken(claim, *a, **k):
        if claim.index == 7:
            raise RuntimeError("a planted failure")
        return real(claim, *a, **k)

    monkeypatch.setattr(runner, "run_one", broken)
    out = runner.run(n=8, **kw)
    assert list(out["failed_tasks"]) and "planted failure" in next(iter(out["failed_tasks"].values()))
    assert out["claims"] == 6 and out["tasks"]["cached"] == 3


def test_bad_campaign_options_exit_2(capsys):
    for argv in (["--workers", "-1"], ["--chunk", "0"], ["--budget", "0"]):
        with pytest.raises(SystemExit) as e:
            runner.main(["--n", "2", *argv])
        assert e.value.code == 2
    assert runner.main(["--n", "1", "--paths", "general", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "cannot reach the Dask scheduler" in capsys.readouterr().err
