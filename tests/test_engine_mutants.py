"""Faults planted in the proof engine are caught (a mutation check of derive/ itself).

The probes are small identities with the outcome the unmodified engine gives; every planted fault
(derive.engine_faults.FAULTS: normal form, delta resolution, renaming, fold, the ring's zero test and
derivation, the rational evaluator, the witness certification) must change at least one of them.
"""
import pytest

from derive import engine_faults

PROBES = engine_faults.probes()


@pytest.mark.parametrize("probe", PROBES, ids=[f"{p.path}:{p.name}" for p in PROBES])
def test_the_unmodified_engine_meets_every_probe(probe):
    assert engine_faults.outcome(probe) == probe.expected


@pytest.mark.parametrize("fault", engine_faults.FAULTS, ids=[f.id for f in engine_faults.FAULTS])
def test_every_planted_fault_is_killed(fault):
    assert engine_faults.noticed_by(fault, PROBES), f"{fault.id} ({fault.description}) survived every probe"


def test_planting_restores_the_engine():
    fault = engine_faults.FAULTS[0]
    owner, name = engine_faults._resolve(fault.target)
    before = getattr(owner, name)
    with engine_faults.planted(fault):
        assert getattr(owner, name) is not before
    assert getattr(owner, name) is before


def test_every_path_has_true_and_false_probes():
    for path in ("general", "fixed", "rational"):
        outcomes = {p.expected for p in PROBES if p.path == path}
        assert {"proved" if path == "general" else "holds", "disproved"} <= outcomes, path
