"""Size traps: a claim false only at sizes the fixed-size paths never try is disproved by the general path at
sizes off the roots of its size polynomial, and no path's outcome says more than it showed."""
import math
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from derive import claims as registry
from derive import graph
from derive.all import exit_status, summary
from derive.claims import Claim, Identity
from derive.general import GeneralBackend
from derive.profile import QUICK
from derive.prove import Outcome, run_path
from derive.results import Check, Results
from derive.stage import DeriveStage
from derive.verdict import analytic
from derive.witness import Witness, replay

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = {"grid": list(QUICK.derive.grid), "points": QUICK.derive.points, "seed": 0, "budget_s": 120}


def falling(m, dim, k):
    """(size - 1)(size - 2)...(size - k): 0 at every size 1..k."""
    out = 1
    for r in range(1, k + 1):
        out = out * (m.size(dim) - r)
    return out


# C2's value gradient plus (n - 1)...(n - 7) times itself: true at n <= 7 (every size the fixed and rational paths
# try), false at n = 8. C3's query gradient plus (d_k - 1)...(d_k - 5) times itself: false first at d_k = 6.
N_TRAP = Identity("main", ("n", "dv"), "scores", lambda m, j, a: m.derived_grad("v", j, a),
                  lambda m, j, a: m.dV(j, a) + falling(m, "n", 7) * m.dV(j, a), "n-trap")
DK_TRAP = Identity("main", ("n", "dk"), "qk", lambda m, i, a: m.derived_grad("q", i, a),
                   lambda m, i, a: m.dQ(i, a) + falling(m, "dk", 5) * m.dQ(i, a), "dk-trap")
TRAPS = {"n": (N_TRAP, 8), "dk": (DK_TRAP, 6)}  # dim -> (identity, the smallest size off the roots)

CLAIMS_FILE = '''from derive.claims import Claim, Identity, register


def falling(m, dim, k):
    out = 1
    for r in range(1, k + 1):
        out = out * (m.size(dim) - r)
    return out


register(Claim("T1", "n-trap", "x", "test", (Identity("main", ("n", "dv"), "scores",
    lambda m, j, a: m.derived_grad("v", j, a), lambda m, j, a: m.dV(j, a) + falling(m, "n", 7) * m.dV(j, a), "x"),)))
register(Claim("T2", "dk-trap", "x", "test", (Identity("main", ("n", "dk"), "qk",
    lambda m, i, a: m.derived_grad("q", i, a), lambda m, i, a: m.dQ(i, a) + falling(m, "dk", 5) * m.dQ(i, a), "x"),)))
'''


def unit(text):
    return Decimal(1).scaleb(Decimal(text).as_tuple().exponent)


def assert_reproduces(identity, w):
    """Both printed values agree with a float64 re-evaluation at the witness's sizes and point (tests/test_witness.py)."""
    _, lhs, rhs = replay(identity, w)
    scale = max(abs(float(w.lhs)), abs(float(w.rhs)))
    for printed, node in ((w.lhs, lhs), (w.rhs, rhs)):
        value = graph.float_value(node)
        assert math.isfinite(value)
        assert abs(Decimal(value) - Decimal(printed)) <= unit(printed) + Decimal(1e-12 * scale), (printed, value)
    assert Decimal(w.lhs) != Decimal(w.rhs)


# -- the general path ------------------------------------------------------------------------------
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize("dim", sorted(TRAPS))
def test_general_path_disproves_a_size_trap_off_the_roots(dim, masked):
    identity, first_off_root = TRAPS[dim]
    out = run_path("general", identity, masked, f"{dim}-trap", OPTIONS)
    assert out.status == "disproved", out.measured
    w = out.witness
    assert w.sizes[dim] == first_off_root and w.masked == masked, w.sizes
    assert math.prod(w.sizes[dim] - r for r in range(1, first_off_root)) != 0  # off the roots
    assert "off their roots" in out.measured and f"{dim}={first_off_root}" in out.measured
    assert_reproduces(identity, w)


def test_the_size_polynomial_is_read_off_the_normal_form():
    from derive.general import sizes_off_roots

    m = GeneralBackend(N_TRAP.setting("linear", False))
    j, a = m.free_indices(N_TRAP.free)
    _, numerator = m.difference(N_TRAP.derived(m, j, a), N_TRAP.closed(m, j, a))
    poly = m.size_polynomial(numerator)
    assert poly.dims == ("n",)
    assert all(poly.vanishes({"n": n}) for n in range(1, 8)) and not poly.vanishes({"n": 8})
    base = {"n": 6, "dk": 2, "dv": 3, "m": 4, "dx": 5}
    first, second = sizes_off_roots(poly, base)
    assert first == {**base, "n": 8} and second == {**base, "n": 9}
    # a dim the polynomial does not read keeps its drawn value unless it would equal a chosen one
    assert sizes_off_roots(poly, {"n": 6, "dk": 8, "dv": 3, "m": 4, "dx": 5}, count=1)[0]["dk"] != 8


def test_a_polynomial_vanishing_on_the_whole_search_grid_is_undecided():
    high = Identity("main", ("n", "dv"), "scores", lambda m, j, a: m.derived_grad("v", j, a),
                    lambda m, j, a: m.dV(j, a) + falling(m, "n", 12) * m.dV(j, a), "beyond the grid")
    out = run_path("general", high, False, "n-trap beyond the grid", OPTIONS)
    assert out.status == "undecided" and "at every size up to" in out.reason, out.measured


def test_ordinary_mutants_keep_the_drawn_sizes():
    """A difference whose coefficients vanish nowhere: the witness search runs at the rational-path draws, as before."""
    wrong = Identity("main", ("n", "dv"), "scores", lambda m, j, a: m.derived_grad("v", j, a),
                     lambda m, j, a: 2 * m.dV(j, a), "doubled")
    out = run_path("general", wrong, True, "doubled", OPTIONS)
    assert out.status == "disproved" and "off their roots" not in out.measured
    assert out.witness.sizes["n"] <= 7


# -- the fixed-size paths say what they showed -------------------------------------------------------
@pytest.mark.parametrize("path", ["fixed", "rational"])
@pytest.mark.parametrize("dim", sorted(TRAPS))
def test_fixed_size_paths_say_holds_at_the_sizes_tried(dim, path):
    identity, first_off_root = TRAPS[dim]
    for masked in (False, True):
        out = run_path(path, identity, masked, f"{dim}-trap", OPTIONS)
        assert out.status == "holds" and out.equal, out.measured
        assert out.scope and all(s[dim] < first_off_root for s in out.scope)
        assert "holds at the" in out.measured and "not a proof at other sizes" in out.measured


def test_holds_needs_its_sizes():
    with pytest.raises(ValueError, match="sizes"):
        Outcome("holds", 0.0, "no sizes")


# -- verdicts: a witness elsewhere is no inconsistency; one at a tried size is ------------------------
SIZES = {"n": 8, "dk": 3, "dv": 4, "m": 5, "dx": 2}
GRID = [{"n": 3, "dk": 4, "dv": 5, "m": 7, "dx": 6}]


def proof(path, outcome, witness_sizes=None, scope=None):
    status = {"proved": "pass", "holds": "pass", "disproved": "fail", "undecided": "skipped"}[outcome]
    witness = {"sizes": witness_sizes, "point": {}, "lhs": "1", "rhs": "2"} if outcome == "disproved" else None
    return Check(f"derive/X/main/{path}/masked", "derive", "proof", "X", status, 0.0, f"{outcome} by {path}",
                 path=path, part="main", setting="masked", outcome=outcome, witness=witness, scope=scope)


def test_a_witness_outside_a_fixed_grid_is_no_inconsistency():
    v = analytic([proof("general", "disproved", SIZES), proof("fixed", "holds", scope=GRID),
                  proof("rational", "holds", scope=GRID)])
    assert v["verdict"] == "disproved" and v["inconsistencies"] == [], v
    assert v["paths"] == {"general": "disproved", "fixed": "holds", "rational": "holds"}
    assert "holds at the sizes tried" in v["evidence"]


def test_a_witness_at_a_tried_size_is_an_inconsistency():
    from derive.verdict import describe_clash

    v = analytic([proof("general", "disproved", GRID[0]), proof("fixed", "holds", scope=GRID)])
    assert v["verdict"] == "failed" and v["evidence"].startswith("INTERNAL INCONSISTENCY"), v
    assert v["inconsistencies"] == [{"part": "main", "setting": "masked", "proved_by": "fixed",
                                     "disproved_by": "general", "held_at": GRID[0]}]
    assert describe_clash(v["inconsistencies"][0]) == ("path fixed found it holds at n=3,dk=4,dv=5,m=7,dx=6, "
                                                       "where path general disproved it with a witness")
    # a general-path proof is contradicted by a witness at any size
    v = analytic([proof("general", "proved"), proof("rational", "disproved", SIZES)])
    assert v["verdict"] == "failed" and v["inconsistencies"][0]["proved_by"] == "general"


def test_mechanism_cells_use_the_same_rule():
    from derive.mechanisms.questions import cell

    w = Witness(dict(GRID[0]), True, (0,), {}, "1", "2")
    inside = {("general", True): Outcome("disproved", 0.0, "", witness=w), ("fixed", True): Outcome("holds", 0.0, "", scope=GRID)}
    assert cell(inside)[0] == "failed"
    elsewhere = {("general", True): Outcome("disproved", 0.0, "", witness=Witness(SIZES, True, (0,), {}, "1", "2")),
                 ("fixed", True): Outcome("holds", 0.0, "", scope=GRID)}
    assert cell(elsewhere)[0] == "disproved"


# -- the derive stage and the command line ---------------------------------------------------------------
def test_derive_stage_disproves_both_traps_without_inconsistency():
    traps = [Claim("T1", "n-trap", "x", "test", (N_TRAP,)), Claim("T2", "dk-trap", "x", "test", (DK_TRAP,))]
    for c in traps:
        registry.register(c)
    try:
        results = Results({})
        DeriveStage(results, QUICK, 0, log=lambda *a: None, only_claims={"T1", "T2"}).run()
    finally:
        for c in traps:
            del registry.REGISTRY[c.id]
    assert results.inconsistencies() == []
    for cid, dim, size in (("T1", "n", 8), ("T2", "dk", 6)):
        c = results.claims[cid]
        assert c["verdict"] == "disproved", c
        assert c["paths"] == {"general": "disproved", "fixed": "holds", "rational": "holds"}
        assert {w["sizes"][dim] for w in c["witnesses"]} == {size}
        cross = [k for k in results.checks if k.claim == cid and k.path == "cross-check"]
        assert len(cross) == 4 and all(k.status == "pass" and not k.witness for k in cross)  # fixed, rational x 2 masks
    assert exit_status(results, traps) == 1
    text = summary(results, {"T1", "T2"})
    assert "INTERNAL INCONSISTENCY" not in text


def test_cli_names_the_trap_claims_disproved_with_their_witnesses(tmp_path):
    path = tmp_path / "traps.py"
    path.write_text(CLAIMS_FILE)
    p = subprocess.run([sys.executable, "-m", "derive.all", "--only", "derive", "--quick", "--claims", str(path),
                        "--claim", "T1,T2", "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr
    lines = {ln[:2]: ln for ln in p.stdout.splitlines() if ln.startswith(("T1 ", "T2 "))}
    assert "disproved" in lines["T1"] and "witness: at n=8," in lines["T1"], lines
    assert "disproved" in lines["T2"] and ",dk=6," in lines["T2"] and "witness: at" in lines["T2"], lines
    assert "INTERNAL INCONSISTENCY" not in p.stdout
    assert "HOLDS" in p.stdout  # the fixed-size paths' own lines


# -- the claim fuzzer: `holds` is a false verdict only where the oracle finds the claim false --------------
def test_fuzz_counts_holds_against_the_sizes_it_covers(monkeypatch, tmp_path):
    import json

    pytest.importorskip("torch")
    from derive.fuzz import Claim as Fuzzed
    from derive.fuzz import dgrad, mul, q
    from numeric import fuzz as runner

    free = (("i", "n"), ("j", "n"))
    true = Fuzzed(-1, "scores", free, dgrad("s", "i", "j"), q("dS", "i", "j"), "C1 closed form")
    false = Fuzzed(-2, "scores", free, dgrad("s", "i", "j"), mul(q("alpha", "i", "j"), q("b", "i", "j")), "M1")
    grid = list(runner.FIXED_GRID)
    assert not runner._false_where_held(true, True, grid, 0) and runner._false_where_held(false, True, grid, 0)
    assert not runner._verdict("holds", False, False)  # a claim false only at sizes the path never tried
    assert runner._verdict("holds", False, True) and runner._verdict("proved", False)

    class Holds:  # a path saying "holds" to everything, at the fuzzer's own grid: caught on the false claims
        status, seconds, measured, scope = "holds", 0.0, "fake path", grid

    monkeypatch.setattr("derive.prove.run_path", lambda *args, **kwargs: Holds())
    out = tmp_path / "fuzz.json"
    assert runner.main(["--n", "6", "--workers", "0", "--paths", "fixed", "--out", str(out)]) == 1
    verdicts = json.loads(out.read_text())["false_verdicts"]
    assert verdicts and all(v["verdict"] == "holds" and v["truth"] == "false" for v in verdicts)
