"""A malformed claims file is reported as FILE:LINE: message (exit 2), never as a false claim."""
import subprocess
import sys
from pathlib import Path

import pytest

from derive import claims as registry
from derive.claimfile import ClaimFileError, binding_error, load
from derive.prove import run_path

ROOT = Path(__file__).resolve().parents[1]
HEAD = "from derive.claims import Claim, Identity, register\n"
GOOD = 'register(Claim("{cid}", "ok", "x", "test", (Identity("main", ("n", "dv"), "scores", ' \
       'lambda m, j, a: m.derived_grad("v", j, a), lambda m, j, a: m.dV(j, a), "x"),)))\n'


def claim(body, free='("n", "dv")', cid="Y1"):
    return (f'register(Claim("{cid}", "c", "x", "test", (Identity("main", {free}, "scores",\n'
            f'    lambda m, j, a: m.derived_grad("v", j, a),\n    {body}, "x"),)))\n')


CASES = {
    "syntax": (HEAD + "register(Claim(\n", 2, "syntax error"),
    "duplicate": (HEAD + GOOD.format(cid="Y1") + GOOD.format(cid="Y1"), 3, "already registered"),
    "builtin": (HEAD + GOOD.format(cid="C1"), 2, "built-in claim"),
    "quantity": (HEAD + claim("lambda m, j, a: m.attention(j, j) * m.v(j, a)"), 4, "unknown quantity m.attention"),
    "leaf": (HEAD + claim('lambda m, j, a: m.leaf("W", j, a)'), 4, "unknown leaf 'W'"),
    "dimension": (HEAD + claim('lambda m, j, a: m.sum("T", lambda i: m.alpha(i, j) * m.u(i, a))'), 4, "unknown dimension 'T'"),
    "missing index": (HEAD + claim("lambda m, j: m.v(j, j)"), 4, "(m, j) cannot be called with the model and one "
                      "index per free range ('n', 'dv') (3 positional arguments): too many positional arguments"),
    "required extra parameter": (HEAD + claim("lambda m, j, a, b: m.dV(j, a)"), 4, "missing a required argument: 'b'"),
    "required keyword-only parameter": (HEAD + "def closed(m, j, a, *, scale):\n    return scale * m.dV(j, a)\n"
                                        + claim("closed"), 2, "missing a required argument: 'scale' (keyword-only"),
    "mutant missing an index": (HEAD + 'from derive.claims import Mutant\n'
                                'i = Identity("main", ("n",), "scores", lambda m, i: 0, lambda m, i: 0, "x")\n'
                                'register(Claim("Y1", "c", "x", "t", (i,), mutants=(Mutant("Y1-m", "Y1", "main", "d",\n'
                                '    closed=lambda m: 1),)))\n', 5, "mutant Y1-m of identity 'main', closed side (m) cannot be called"),
    "range": (HEAD + claim("lambda m, j, a: m.sum('n', lambda i: m.alpha(i, j) * m.q(i, a))"), 4, "ranges over dv"),
    "level": (HEAD + 'register(Claim("Y1", "c", "x", "t", (Identity("main", ("n",), "logits", lambda m, i: 0, '
              'lambda m, i: 0, "x"),)))\n', 2, "unknown level"),
    "float": (HEAD + claim("lambda m, j, a: m.dV(j, a) * (1 / 3) * 3"), 4, "is not exact"),
    "leaked dummy": (HEAD + "box = []\n" + claim("lambda m, j, a: m.sum('n', lambda i: box.append(i) or 0) + m.v(box[-1], a)"),
                     5, "does not declare"),
    "mask across ranges": (HEAD + claim("lambda m, j, a: m.mask(j, a) * m.dV(j, a)"), 4, "not n"),
    "delta across ranges": (HEAD + claim("lambda m, j, a: m.delta(j, a) * m.dV(j, a)"), 4, "ranges over dv, not n"),
    "grad by the mask": (HEAD + claim('lambda m, j, a: m.dV(j, a) + m.grad(m.s(j, j), "M", j, j)'), 4,
                         "M is not a free variable"),
    "grad by a derived quantity": (HEAD + claim('lambda m, j, a: m.grad(m.loss(), "o", j, a)'), 4,
                                   "o is not a free variable at level scores"),
    "wrong arity of a primitive": (HEAD + claim('lambda m, j, a: m.sum("n")'), 4, "TypeError"),
    "no identities": (HEAD + 'register(Claim("Y1", "c", "x", "t", ()))\n', 2, "non-empty tuple of Identity"),
    "identity twice": (HEAD + 'i = Identity("main", ("n",), "scores", lambda m, i: 0, lambda m, i: 0, "x")\n'
                       'register(Claim("Y1", "c", "x", "t", (i, i)))\n', 3, "used twice"),
    "mutant of an unknown part": (HEAD + 'from derive.claims import Mutant\n'
                                  'i = Identity("main", ("n",), "scores", lambda m, i: 0, lambda m, i: 0, "x")\n'
                                  'register(Claim("Y1", "c", "x", "t", (i,), mutants=(Mutant("Y1-m", "Y1", "rows", "d", '
                                  'closed=lambda m, i: 1),)))\n', 4, "which the claim does not have"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_file_names_file_and_line(case, tmp_path):
    text, line, message = CASES[case]
    path = tmp_path / "mine.py"
    path.write_text(text)
    before = {c.id for c in registry.claims()}
    with pytest.raises(ClaimFileError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert message in str(info.value)
    assert set(registry.REGISTRY) == before  # nothing half-registered is left behind


def test_a_wellformed_file_loads(extra_claim_file):
    path = extra_claim_file(HEAD + GOOD.format(cid="Y2"))
    assert load(path) == ["Y2"]


OPTIONAL = HEAD + """from derive.claims import Mutant


def derived(m, j, a, *, quantity="v"):
    return m.derived_grad(quantity, j, a)


register(Claim("Y4", "optional", "x", "test", (
    Identity("main", ("n", "dv"), "scores", derived, lambda m, j, a, scale=1: scale * m.dV(j, a), "x"),),
    mutants=(Mutant("Y4-m", "Y4", "main", "doubled", closed=lambda m, j, a, scale=2: scale * m.dV(j, a)),)))
"""


def _proves(cid):
    """The verdict's evidence at general size: every identity proved masked and unmasked, every mutant disproved."""
    claim = registry.REGISTRY[cid]
    for identity in claim.parts:
        for masked in (True, False):
            assert run_path("general", identity, masked, cid, {}).status == "proved", (identity.name, masked)
    for mutant in claim.mutants:
        out = run_path("general", claim.part(mutant.part), True, mutant.id, {}, mutant.derived, mutant.closed)
        assert out.status == "disproved", mutant.id


def test_functions_with_optional_parameters_load_and_prove(extra_claim_file):
    """A default, a keyword-only parameter with a default: callable as f(m, *ix), so accepted (binding the call)."""
    assert load(extra_claim_file(OPTIONAL)) == ["Y4"]
    _proves("Y4")


def test_functions_with_star_args_load_and_prove(extra_claim_file):
    path = extra_claim_file(HEAD + 'register(Claim("Y5", "c", "x", "test", (Identity("main", ("n", "dv"), "scores",\n'
                                   '    lambda *args: args[0].derived_grad("v", *args[1:]),\n'
                                   '    lambda m, *ix: m.dV(*ix), "x"),)))\n')
    assert load(path) == ["Y5"]
    _proves("Y5")


def test_binding_error_is_the_call_binding():
    def kw_required(m, i, *, scale):
        return 0

    assert binding_error(lambda m, i, j, scale=1: 0, 2) is None
    assert binding_error(lambda m, *ix, scale=1: 0, 2) is None
    assert binding_error(lambda *args, **kwargs: 0, 0) is None
    assert binding_error(lambda m, i, j, k: 0, 2) == "missing a required argument: 'k'"
    assert binding_error(lambda m, i: 0, 2) == "too many positional arguments"
    assert binding_error(kw_required, 1).startswith("missing a required argument: 'scale' (keyword-only")
    assert binding_error(max, 2) is None  # no signature to bind: left to the trial call, which names its line


@pytest.mark.parametrize("case, reason", [("required extra parameter", "missing a required argument: 'b'"),
                                          ("missing index", "too many positional arguments")])
def test_cli_exits_2_for_a_function_that_cannot_take_the_indices(case, reason, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(CASES[case][0])
    p = subprocess.run([sys.executable, "-m", "derive.all", "--only", "derive", "--quick", "--claims", str(bad),
                        "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and f"{bad}:{CASES[case][1]}: " in p.stderr and reason in p.stderr, p.stderr
    assert "Traceback" not in p.stderr, p.stderr


def test_cli_exits_2_for_a_malformed_file_and_lists_only_selected_claims(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(CASES["quantity"][0])
    p = subprocess.run([sys.executable, "-m", "derive.all", "--only", "derive", "--quick", "--claims", str(bad),
                        "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and f"{bad}:4: " in p.stderr and "Traceback" not in p.stderr, p.stderr
    good = tmp_path / "good.py"
    good.write_text(HEAD + GOOD.format(cid="Y3"))
    p = subprocess.run([sys.executable, "-m", "derive.all", "--only", "derive", "--quick", "--claims", str(good),
                        "--claim", "Y3", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    verdict_lines = [ln for ln in p.stdout.splitlines() if ln[:1] in "CEY" and "proved" in ln or ln.startswith("C1 ")]
    assert any(ln.startswith("Y3") and " proved " in ln for ln in verdict_lines), p.stdout[-2000:]
    assert not any(ln.startswith("C1 ") for ln in p.stdout.splitlines())
