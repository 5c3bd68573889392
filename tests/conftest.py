import pytest

from derive import claims as registry


def identities():
    """(claim, identity) for every registered identity: a new claim is tested for free."""
    return [(c, part) for c in registry.claims() for part in c.parts]


def identity_ids():
    return [f"{c.id}:{part.name}" for c, part in identities()]


def equality_mutants():
    return [m for m in registry.mutants() if m.constant is None]


def part_of(mutant):
    return registry.REGISTRY[mutant.claim].part(mutant.part)


@pytest.fixture
def extra_claim_file(tmp_path):
    """Write a claim file and return its path; cleans the registry afterwards."""
    written = []

    def write(source):
        path = tmp_path / f"extra_{len(written)}.py"
        path.write_text(source)
        written.append(path)
        return path

    before = set(registry.REGISTRY)
    yield write
    for cid in set(registry.REGISTRY) - before:
        del registry.REGISTRY[cid]


@pytest.fixture
def loaded():
    """derive.claimfile.load, with the built-in mechanisms loaded first; the mechanisms the test registers are
    removed afterwards (what it adds is all that it removes)."""
    from derive import claimfile, mechanisms

    mechanisms.builtin()
    before = set(mechanisms.REGISTRY)
    yield claimfile.load
    for name in set(mechanisms.REGISTRY) - before:
        del mechanisms.REGISTRY[name]
