"""Every registered identity is proved at general size and holds at every size the fixed-size paths try;
every mutant is rejected by every path."""
import time

import pytest
from conftest import equality_mutants, identities, identity_ids, part_of

from derive.profile import QUICK
from derive.prove import PATHS, run_path

OPTIONS = {"grid": list(QUICK.derive.grid), "points": 2, "seed": 0, "budget_s": 120}
MUTANT_OPTIONS = dict(OPTIONS, grid=list(QUICK.derive.mutant_grid))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize("claim,identity", identities(), ids=identity_ids())
def test_identity_is_proved(claim, identity, path, masked):
    """Proved at every size by the general path; holds at the sizes they tried on the fixed-size paths."""
    out = run_path(path, identity, masked, claim.id, OPTIONS)
    assert out.status == ("proved" if path == "general" else "holds"), out.measured
    if path != "general":
        assert out.scope and "holds at the" in out.measured and "not a proof at other sizes" in out.measured


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mutant", equality_mutants(), ids=lambda m: m.id)
def test_mutant_is_rejected(mutant, path):
    out = run_path(path, part_of(mutant), True, mutant.id, MUTANT_OPTIONS, mutant.derived, mutant.closed)
    assert out.status == "disproved", f"{mutant.id} not disproved by {path}: {out.measured}"
    assert out.witness.lhs != out.witness.rhs


def test_masked_baseline_mutant_is_only_wrong_under_a_mask():
    """The mask-only mistake must be invisible without a mask: the paths are not just saying no."""
    mutant = next(m for m in equality_mutants() if m.id == "M5-masked-baseline")
    for path in PATHS:
        out = run_path(path, part_of(mutant), False, mutant.id, MUTANT_OPTIONS, mutant.derived, mutant.closed)
        assert out.equal, (path, out.measured)


def test_a_proof_over_budget_fails_with_the_reason():
    claim_identity = next((c, p) for c, p in identities() if c.id == "C8" and p.name == "W_Q")
    out = run_path("general", claim_identity[1], True, "C8", dict(OPTIONS, budget_s=0.005))
    assert out.status == "undecided"
    assert "ProofTimeout" in out.reason and "budget" in out.reason


# -- the time budget outside the main thread (a Dask worker runs its tasks in a thread of its own) --------------
SLOW_CLAIM = 24  # fuzz seed 0: SSD, params level, d(dL/dc)/d ell_r; its fixed path ran 122 s on an 8 s budget in a Dask worker
QUICK_CLAIMS = {9: "holds", 19: "disproved"}  # fuzz seed 0: qk / scores level, decided in a tenth of a second
SMALL_BUDGET_S = 1.0
SLACK_S = 1.0  # the fixed path checks its budget every few thousand term products (milliseconds)


def _fuzz_path(index, masked, thread, budget_s, path="fixed"):
    """(outcome, wall seconds) of one path on fuzz claim `index` (seed 0) with the fuzzer's options, run in the
    main thread or in another one."""
    from concurrent.futures import ThreadPoolExecutor

    from derive.fuzz.generate import generate_one
    from numeric.fuzz import FIXED_GRID

    claim = generate_one(0, index)
    identity = claim.identity()
    options = {"grid": list(FIXED_GRID), "points": 2, "seed": index, "budget_s": budget_s}

    def timed():
        t0 = time.perf_counter()
        out = run_path(path, identity, masked, claim.name, options)
        return out, time.perf_counter() - t0

    if thread == "main":
        return timed()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(timed).result()


@pytest.mark.parametrize("thread", ["main", "worker"])
def test_the_fixed_path_keeps_its_budget_in_any_thread(thread):
    """Over its budget the fixed path is undecided, within about a second of it, also in a thread SIGALRM never
    reaches (there it ran on to a verdict two minutes later)."""
    out, seconds = _fuzz_path(SLOW_CLAIM, True, thread, SMALL_BUDGET_S)
    assert out.status == "undecided" and "ProofTimeout" in out.reason and "budget" in out.reason, out.measured
    assert seconds < SMALL_BUDGET_S + SLACK_S, f"{seconds:.2f} s on a {SMALL_BUDGET_S:g} s budget"


@pytest.mark.parametrize("index,expected", sorted(QUICK_CLAIMS.items()))
def test_a_claim_within_its_budget_is_still_decided_in_a_worker_thread(index, expected):
    for masked in (False, True):
        out, _ = _fuzz_path(index, masked, "worker", SMALL_BUDGET_S)
        assert out.status == expected, out.measured


def test_budgets_nest_and_end_in_any_thread():
    """check_budget raises once the innermost budget is spent, the outer one holds again after it, and nothing
    is checked outside a budget."""
    from concurrent.futures import ThreadPoolExecutor

    from derive.prove import ProofTimeout, budget, check_budget

    def spend():
        check_budget()
        with budget(60):
            with pytest.raises(ProofTimeout, match="budget of 0.05 s"):
                with budget(0.05):
                    while True:
                        check_budget()
            check_budget()  # the outer budget, 60 s, is not spent
        time.sleep(0.06)
        check_budget()
        return True

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(spend).result()


@pytest.mark.parametrize("thread", ["main", "worker"])
def test_the_general_path_keeps_its_budget_in_any_thread(thread):
    """The sum normal form checks the budget as it works: a fuzzed mechanism whose EM-step normal form grows for
    minutes (f = x^3 e^x of s + a_i, unnormalised) is undecided within about a second of its budget, also where
    SIGALRM never arrives (in a Dask worker's thread it ran 390 s on an 8 s budget)."""
    from concurrent.futures import ThreadPoolExecutor

    from derive import mechanisms
    from derive.fuzz.mechanisms import draw, render
    from derive.mechanisms import questions

    mechanisms.builtin()
    mech = render(draw(0, 55))
    mechanisms.REGISTRY[mech.name] = mech
    try:
        identity = questions.identities(mech.name)["em_step"]
        options = {"grid": [{"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}], "points": 2, "seed": 0,
                   "budget_s": SMALL_BUDGET_S}

        def timed():
            t0 = time.perf_counter()
            return run_path("general", identity, False, mech.name, options), time.perf_counter() - t0

        if thread == "main":
            out, seconds = timed()
        else:
            with ThreadPoolExecutor(1) as pool:
                out, seconds = pool.submit(timed).result()
    finally:
        del mechanisms.REGISTRY[mech.name]
    assert out.status == "undecided" and "ProofTimeout" in out.reason, out.measured
    assert seconds < SMALL_BUDGET_S + SLACK_S, f"{seconds:.2f} s on a {SMALL_BUDGET_S:g} s budget"


# -- the fixed path's partial result (the mechanism table's cross-check) -----------------------------------------
def _fixed_with_timeout(monkeypatch, at, partial, identity=None, refute_times_out=False):
    """prove.fixed on a two-size grid, the budget running out when the backend is built at grid size `at`."""
    from derive import prove

    grid = [{"n": 2, "dk": 2, "dv": 2, "m": 2, "dx": 2}, {"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}]
    real = prove.RingBackend

    def backend(setting, sizes, context, check=None):
        if sizes == grid[at]:
            raise prove.ProofTimeout("exceeded its time budget of 1 s")
        return real(setting, sizes, context, check=check)

    monkeypatch.setattr(prove, "RingBackend", backend)
    if refute_times_out:
        def refute(*args, **kwargs):
            raise prove.ProofTimeout("exceeded its time budget of 1 s")
        monkeypatch.setattr(prove, "_refute", refute)
    if identity is None:
        identity = next(p for c, p in identities() if c.id == "C1")
    return prove.fixed(identity, False, "test", grid, partial=partial)


def test_the_fixed_path_holds_at_the_sizes_it_completed_when_asked(monkeypatch):
    from derive.prove import ProofTimeout

    status, text, per_size, witness, scope = _fixed_with_timeout(monkeypatch, at=1, partial=True)
    assert status == "holds" and "1 of 2 sizes" in text and scope and all(s["n"] == 2 for s in scope)
    with pytest.raises(ProofTimeout):  # without `partial`, as before: the budget is the path's outcome
        _fixed_with_timeout(monkeypatch, at=1, partial=False)
    with pytest.raises(ProofTimeout):  # nothing completed: nothing to hold at
        _fixed_with_timeout(monkeypatch, at=0, partial=True)


def test_a_difference_found_is_never_turned_into_holds(monkeypatch):
    """A mutant differs at the first size; its witness search running out of time must not read `holds`."""
    from derive.prove import ProofTimeout

    mutant = next(m for m in equality_mutants() if m.id == "M1-drop-baseline")
    from derive import prove
    real_sides = prove._sides
    monkeypatch.setattr(prove, "_sides", lambda identity, model, ix, derived, closed:
                        real_sides(identity, model, ix, mutant.derived, mutant.closed))
    with pytest.raises(ProofTimeout):
        _fixed_with_timeout(monkeypatch, at=1, partial=True, identity=part_of(mutant), refute_times_out=True)
