"""The mechanism fuzzer: random user-style mechanisms (derive.fuzz.mechanisms) through the mechanisms table, each
cell against an oracle (numeric.mechanism_oracle) that imports nothing from derive/; the fuzzer's judgement can
say no (negative controls), and a small campaign gives no false verdict."""

import ast
import json
from pathlib import Path

import pytest

from derive.fuzz.mechanisms import FORMS, FUNCTIONS, NORMS, draw, render
from numeric import mechanism_fuzz, mechanism_oracle

ROOT = Path(__file__).resolve().parents[1]


def test_the_oracle_imports_nothing_from_derive():
    tree = ast.parse((ROOT / "numeric" / "mechanism_oracle.py").read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert names and not [n for n in names if n.split(".")[0] in ("derive", "numeric", "reports")], names


def test_specs_are_plain_data_a_function_of_seed_and_index_and_cover_the_grammar():
    specs = [draw(0, i) for i in range(300)]
    assert specs[:5] == [draw(0, i) for i in range(5)] and draw(1, 0)["name"] == "fz1_0"
    assert json.loads(json.dumps(specs)) == specs
    assert {s["f"] for s in specs} == set(FUNCTIONS) and {s["norm"] for s in specs} == set(NORMS)
    assert {s["routing"] for s in specs} == set(FORMS)
    assert {s["domain"] for s in specs if s["role"]} >= {"real", "positive", "negative", "unit"}
    assert any(s["sink"] for s in specs)


def _spec(**kw):
    base = {"name": "t", "f": "exp", "role": None, "domain": None, "norm": "keys", "sink": False, "routing": "advantage"}
    return {**base, **kw}


def test_the_oracle_knows_softmax_from_its_variants():
    softmax = mechanism_oracle.truth(_spec())
    assert all(softmax[q] == {"unmasked": True, "masked": True} for q in softmax), softmax
    sigmoid = mechanism_oracle.truth(_spec(f="sigmoid", norm="none", routing="per_key"))
    assert sigmoid["routing"] == {"unmasked": True, "masked": True}
    assert sigmoid["advantage"] == {"unmasked": False, "masked": False} and sigmoid["competition"]["unmasked"] is False
    everywhere = mechanism_oracle.truth(_spec(norm="all_keys"))  # the normaliser ignores the mask
    assert everywhere["advantage"] == {"unmasked": True, "masked": False}
    tempered = mechanism_oracle.truth(_spec(role="temperature", domain="positive", routing="tempered"))
    assert tempered["routing"] == {"unmasked": True, "masked": True} and tempered["advantage"]["unmasked"] is False


def test_the_oracle_finds_c9_violations_where_weights_can_be_negative():
    assert mechanism_oracle.search(_spec(), False) <= 1e-9  # softmax: the bound holds
    assert mechanism_oracle.search(_spec(role="prior", domain="real"), False) > 0  # P real: w < 0 breaks it
    assert mechanism_oracle.search(_spec(role="prior", domain="positive"), True) <= 1e-9


def test_the_fuzzer_flags_false_verdicts():
    """Negative controls of the judgement: a proved identity the oracle finds false, a disproved true one, a proved
    bound the oracle's search breaks, a witness that does not violate the bound: each is a false verdict."""
    proved = {"settings": {"unmasked": "proved", "masked": "proved"}}
    disproved = {"settings": {"unmasked": "disproved", "masked": "disproved"}}
    assert mechanism_fuzz._false_identity(proved, {"unmasked": False, "masked": True}) == [
        "unmasked: proved, the oracle finds it false"]
    assert mechanism_fuzz._false_identity(disproved, {"unmasked": True, "masked": None}) == [
        "unmasked: disproved, the oracle finds it true"]
    assert mechanism_fuzz._false_identity(proved, {"unmasked": None, "masked": True}) == []
    assert mechanism_fuzz._false_saturation(_spec(role="prior", domain="real"), proved, 0)
    assert not mechanism_fuzz._false_saturation(_spec(), proved, 0)
    softmax_point = {"sizes": {"n": 2, "dv": 1}, "masked": False, "row": 0,
                     "point": {"s[0,0]": "4", "s[0,1]": "0", "U[0,0]": "1", "v[0,0]": "1", "v[1,0]": "-1"}}
    lhs, rhs = mechanism_oracle.replay(_spec(), softmax_point)
    assert lhs <= rhs  # softmax at that point: the bound holds ...
    claimed = {"settings": {"unmasked": "disproved"}, "witnesses": {"unmasked": softmax_point}}
    assert mechanism_fuzz._false_saturation(_spec(), claimed, 0)  # ... so a "witness" there is a false verdict
    sigmoid = _spec(f="sigmoid", norm="none", routing="per_key")
    assert mechanism_oracle.replay(sigmoid, softmax_point)[0] > 0


@pytest.mark.parametrize("index", range(4))
def test_rendered_mechanisms_pass_the_loader_s_checks(index):
    from derive.mechanisms.check import check
    spec = draw(0, index)
    mech = render(spec)
    from derive import mechanisms
    mechanisms.REGISTRY[mech.name] = mech
    try:
        check(mech)
        assert mech.domains == ({} if not spec["role"] else {next(iter(mech.leaves)): spec["domain"]})
    finally:
        del mechanisms.REGISTRY[mech.name]


def test_a_small_campaign_has_no_false_verdict():
    summary = mechanism_fuzz.run(3, seed=5, workers=0, log=lambda *a: None)
    assert summary["mechanisms"] == 3 and summary["cells"] == 21
    assert summary["false_verdicts"] == [] and summary["failed_tasks"] == {}
    assert sum(summary["verdicts"].values()) == 21
    decided = sum(v for k, v in summary["verdicts"].items() if k in ("proved", "disproved", "mask-dependent"))
    assert decided >= 12  # most cells decided, not left undecided
