"""Small pure tasks for checking a campaign's machinery (tests/test_campaign.py):
module-level, so a Dask worker in another process imports them by name."""
from __future__ import annotations


def draw(seed: int, size: int = 64):
    """A float64 statistic of a seeded torch draw: identical on every worker for the same seed."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, size, generator=g, dtype=torch.float64)
    return {"seed": seed, "trace": float((x @ x.T).trace()), "max": float(x.abs().max())}


def fail_on(seed: int, bad: int):
    """Raises for seed == bad (a task that fails on every attempt)."""
    if seed == bad:
        raise ValueError(f"seed {seed} is the planted failure")
    return {"seed": seed}


def fail_first(seed: int, marker: str):
    """Raises on its first attempt only (a marker file remembers it): a retried task that then succeeds."""
    from pathlib import Path

    path = Path(marker)
    if not path.exists():
        path.write_text("attempted")
        raise RuntimeError("a transient failure")
    return {"seed": seed, "attempts": 2}


def die_first(seed: int, marker: str):
    """Kills its worker process on its first attempt (a marker file remembers it): a worker lost mid-campaign."""
    import os
    from pathlib import Path

    path = Path(marker)
    if not path.exists():
        path.write_text("killed")
        os._exit(1)
    return {"seed": seed, "after_a_lost_worker": True}
