import re
from pathlib import Path

import pytest

from derive import claimfile, graph
from derive import claims as registry
from derive.all import claim_catalogue
from derive.claims import Claim, Identity, Mutant, register
from derive.rational import RationalBackend

DISTINCT = {"n": 3, "dk": 2, "dv": 4, "m": 5, "dx": 6}
PAPER = "arXiv 2512.22473"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "paper.md"


def test_registry_has_every_analytic_claim_of_the_paper():
    ids = [c.id for c in registry.claims()]
    assert ids[:10] == [f"C{i}" for i in range(1, 11)]
    for c in registry.claims():
        assert c.statement and "\\" in c.statement, f"{c.id} needs a LaTeX statement"
        if c.id in registry.paper_ids():
            assert c.ref.startswith(PAPER + ", "), f"{c.id} does not cite the paper"
        elif c.id in registry.builtin_ids():
            assert c.ref.startswith("ours: ") and not c.id.startswith("C"), f"{c.id}: our claims say so, under a non-C id"
        assert c.parts, f"{c.id} has no proof obligation"


def test_the_head_claims_are_built_in_and_ours():
    """H1–H5 follow C1–C10 in the registry, count as built-in (not extra), and are not the paper's."""
    heads = ["H1", "H2", "H3", "H4", "H5"]
    ids = [c.id for c in registry.claims()]
    assert ids[10:15] == heads
    assert registry.builtin_ids() == registry.paper_ids() | set(heads)
    assert not set(registry.extra_ids()) & set(heads)
    for cid in heads:
        claim = registry.REGISTRY[cid]
        bias = cid in ("H1", "H2", "H3")
        assert claim.ref == ("ours: bias gradients of an nn.MultiheadAttention-style head" if bias else
                             "ours: one head of several concatenated before the output projection")
        assert claim.mutants and claim.derivation
        # H4 and H5 are stated with the other heads' logits in the readout; the bias claims are not
        assert {p.readout for p in claim.parts} == {"single" if bias else "concat"}


def test_the_account_of_the_paper_states_every_claim():
    """docs/paper.md cites the paper and has an entry for every C* and E* id, under its results.json name."""
    text = DOCS.read_text()
    assert PAPER in text
    names = {cid: facts["name"] for cid, facts in claim_catalogue().items() if cid[0] in "CE" and cid[1:].isdigit()}
    assert len(names) == 17
    missing = [f"{cid} {name}" for cid, name in names.items() if f"{cid} {name}" not in text]
    assert not missing, f"docs/paper.md lacks {missing}"


def test_c9_is_an_inequality_with_identity_steps_and_a_written_chain():
    c9 = registry.REGISTRY["C9"]
    assert c9.kind == "inequality" and len(c9.parts) >= 3 and c9.derivation  # its inequality steps: test_saturation


def _differences(identity, derived, closed):
    """derived - closed mod p at every index assignment of one exact point (causal mask, distinct sizes)."""
    m = RationalBackend(identity.setting("ce", True), DISTINCT, seed=11)
    return tuple((graph.lift(derived(m, *ix)).val - graph.lift(closed(m, *ix)).val) % graph.P
                 for ix in m.assignments(identity.free))


def test_every_paper_claim_has_mutants_and_no_two_make_the_same_mistake():
    """Each mutant changes its identity (derived - closed is no longer 0) and no two mutants of one identity
    change it alike; a constant mutant lowers C9's constant below 4."""
    assert {m.claim for m in registry.mutants()} >= set(registry.builtin_ids())
    seen = {}
    for mu in registry.mutants():
        claim = registry.REGISTRY[mu.claim]
        if mu.constant is not None:
            assert claim.kind == "inequality" and mu.constant < 4, mu.id
            continue
        part = claim.part(mu.part)
        diff = _differences(part, mu.derived or part.derived, mu.closed or part.closed)
        assert any(diff), f"{mu.id} is the claim itself"
        assert (mu.claim, mu.part, diff) not in seen, f"{mu.id} makes the mistake of {seen.get((mu.claim, mu.part, diff))}"
        seen[(mu.claim, mu.part, diff)] = mu.id
    assert len(set(seen.values())) == len(seen) and len({m.id for m in registry.mutants()}) == len(registry.mutants())


def test_every_mutant_names_an_existing_part():
    for m in registry.mutants():
        claim = registry.REGISTRY[m.claim]
        if m.constant is None:
            assert m.part in {p.name for p in claim.parts}
        else:
            assert claim.kind == "inequality" and m.constant < 4


def test_register_rejects_duplicates_and_misfiled_mutants():
    registry.claims()
    part = Identity("main", ("n",), "scores", lambda m, i: 0, lambda m, i: 0, "x")
    with pytest.raises(ValueError, match="already registered"):
        register(Claim("C1", "x", "x", "x", (part,)))
    bad = Mutant("Mx", "C2", "main", "x", lambda m: 0)
    with pytest.raises(ValueError, match="names claim C2"):
        register(Claim("CX", "x", "x", "x", (part,), mutants=(bad,)))
    assert "CX" not in registry.REGISTRY
    with pytest.raises(ValueError, match="non-empty tuple"):
        Claim("CY", "x", "x", "x", ())


def test_a_claims_file_registers_a_claim(extra_claim_file):
    path = extra_claim_file(
        "from derive.claims import Claim, Identity, register\n"
        "register(Claim('X1', 'twice-alpha', r'\\alpha', 'test', (Identity('main', ('n','n'), 'scores',"
        " lambda m, i, j: m.alpha(i, j) + m.alpha(i, j), lambda m, i, j: 2 * m.alpha(i, j), 'x'),)))\n")
    assert claimfile.load(path) == ["X1"]
    assert isinstance(registry.REGISTRY["X1"].parts[0], Identity)


def test_a_missing_claims_file():
    with pytest.raises(FileNotFoundError, match="not found"):
        claimfile.load("/nonexistent/claims.py")


def test_mutant_ids_are_stable_slugs():
    for m in registry.mutants():
        assert re.fullmatch(r"M\d+-[A-Za-z0-9.\-/]+", m.id), m.id
