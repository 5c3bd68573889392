"""Routing mechanisms as values (derive.mechanisms): the model interprets any of them on every path, the
structural questions are decided at general size, witnesses re-check, and every mutant is rejected."""

import pytest
import torch
from test_witness import assert_reproduces  # tests/ is on sys.path (rootdir-relative test modules)

from derive import mechanisms
from derive.claim import Identity
from derive.mechanisms import questions, table
from derive.prove import PATHS, run_path
from derive.rational import RationalBackend
from derive.results import Results
from derive.witness import Witness

OPTIONS = {"grid": [{"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}], "points": 2, "seed": 0, "budget_s": 60}


@pytest.fixture(scope="module")
def built():
    results = Results({})
    return results, table.build(results, OPTIONS, log=lambda *a: None)


def test_every_cell_of_every_builtin_mechanism_is_decided_and_every_check_passes(built):
    results, rows = built
    assert set(rows) == set(mechanisms.BUILTIN)
    for name, row in rows.items():
        assert set(row["questions"]) == set(questions.QUESTIONS)
        for q, cell in row["questions"].items():
            assert cell["verdict"] in ("proved", "disproved"), (name, q, cell)
    assert [c.id for c in results.checks if c.status != "pass"] == []
    assert results.derive["mechanisms"]["table"] is rows


def test_the_table_says_which_mechanisms_route_by_advantage(built):
    """Normalised weights (softmax, linear's softmax of log-kernels) compete and route by advantage; sigmoid's
    per-key weights do neither, and its own form w(1 - w) b is proved instead. All three have
    responsibility-weighted content and the EM-normalised step."""
    verdicts = {n: {q: c["verdict"] for q, c in row["questions"].items()} for n, row in built[1].items()}
    assert verdicts["softmax"] == dict.fromkeys(questions.QUESTIONS, "proved")
    assert verdicts["linear"] == dict.fromkeys(questions.QUESTIONS, "proved")
    assert verdicts["sigmoid"] == {"routing": "proved", "advantage": "disproved", "competition": "disproved",
                                   "content": "proved", "em_step": "proved"}


@pytest.mark.parametrize("question", ["advantage", "competition"])
def test_sigmoid_disproofs_carry_witnesses_that_recheck(built, question):
    cell = built[1]["sigmoid"]["questions"][question]
    w = Witness(**{k: (tuple(v) if k == "indices" else v) for k, v in cell["witness"].items()})
    assert_reproduces(questions.identities("sigmoid")[question], w)
    assert all(status == "disproved" for path in cell["paths"].values() for status in path.values())


def test_every_mechanism_mutant_is_rejected_by_every_path(built):
    for name, row in built[1].items():
        assert len(row["mutants"]) >= 2, name
        for mid, mutant in row["mutants"].items():
            assert mutant["paths"] == dict.fromkeys(PATHS, "disproved"), (name, mid)


def test_the_paper_form_is_among_sigmoid_mutants():
    sigmoid = mechanisms.get("sigmoid")
    assert any(mu.closed is questions.advantage for mu in sigmoid.mutants)


def test_an_unknown_mechanism_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown mechanism 'tanh'; the known ones are linear, sigmoid, softmax"):
        Identity("x", ("n",), "scores", lambda m, i: 0, lambda m, i: 0, "", mechanism="tanh")


def test_an_undecidable_or_wrong_mutant_would_fail_its_check():
    """Negative control of the table's own bookkeeping: a 'mutant' that is the true form is not rejected,
    and its checks fail."""
    from derive.mechanisms.base import Mutant
    sigmoid = mechanisms.get("sigmoid")
    true_form = Mutant("sigmoid-true", "routing", "the true form (must survive)", sigmoid.routing)
    fake = type(sigmoid)(**{**sigmoid.__dict__, "name": "sigmoid_true_mutant", "mutants": (true_form,)})
    mechanisms.register(fake)
    try:
        results = Results({})
        table.build(results, OPTIONS, log=lambda *a: None, names=["sigmoid_true_mutant"])
        failing = {c.id for c in results.checks if c.status == "fail"}
        assert failing == {f"derive/mechanisms/sigmoid-true/{p}" for p in PATHS}
    finally:
        del mechanisms.REGISTRY["sigmoid_true_mutant"]


def test_softmax_mechanism_leaves_the_paper_claims_alone():
    """The model's default mechanism is softmax: C1 at the q/k level proves exactly as before."""
    from derive import claims
    c3 = claims.REGISTRY["C3"].parts[0]
    assert c3.mechanism == "softmax"
    assert run_path("general", c3, True, "C3", OPTIONS).status == "proved"


@pytest.mark.parametrize("name", mechanisms.BUILTIN)
def test_the_plain_torch_reference_is_the_mechanism(name):
    """Each mechanism's torch reference equals the weights the proof paths compute (rational backend, exact
    point, float64), causal mask included."""
    from derive.fixed import Ix
    from derive.graph import float_value, lift
    mech = mechanisms.get(name)
    for masked in (False, True):
        ident = questions.identities(name)["content"]
        m = RationalBackend(ident.setting("ce", masked), {"n": 4, "dk": 3, "dv": 2, "m": 2, "dx": 2}, 1)
        ix, dk = [Ix("n", r) for r in range(4)], [Ix("dk", a) for a in range(3)]
        ours = torch.tensor([[float_value(lift(m.alpha(i, j))) for j in ix] for i in ix], dtype=torch.float64)
        q = torch.tensor([[float_value(lift(m.q(i, a))) for a in dk] for i in ix], dtype=torch.float64)
        k = torch.tensor([[float_value(lift(m.k(i, a))) for a in dk] for i in ix], dtype=torch.float64)
        mask = torch.ones(4, 4, dtype=torch.float64).tril() if masked else None
        want = mech.reference(q, k, mask, float_value(lift(m.c)), float_value(lift(m.beta)))
        assert torch.allclose(ours, want, rtol=1e-12, atol=1e-15), (name, masked)
