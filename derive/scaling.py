"""How the exact fixed-size path's time grows with n, d and m (the figure that shows it scales)."""
from __future__ import annotations

import time

from derive import claims as registry
from derive.fixed import sizes
from derive.prove import fixed


def sweep_sizes(base, sweeps):
    """(varied, value, sizes) rows: (n, d, m) = `base` with one of them taking each value in `sweeps`."""
    n0, d0, m0 = base
    rows = [("n", n, sizes(n, d0, m0)) for n in sweeps["n"]]
    rows += [("d", d, sizes(n0, d, m0, d)) for d in sweeps["d"]]
    rows += [("m", m, sizes(n0, d0, m)) for m in sweeps["m"]]
    return rows


def time_all_identities(at, claim_ids=None):
    """Seconds to prove every identity of every equality claim at one size, causal mask."""
    t0 = time.perf_counter()
    proved = True
    for claim in registry.claims():
        if claim_ids and claim.id not in claim_ids:
            continue
        for identity in claim.parts:  # only claims the stage has proved are timed here
            proved = fixed(identity, True, f"{claim.id} scaling", [at])[0] == "holds" and proved  # holds at `at`
    return time.perf_counter() - t0, proved


def scaling_table(base, sweeps, claim_ids=None, log=print):
    rows = []
    for varied, value, at in sweep_sizes(base, sweeps):
        seconds, proved = time_all_identities(at, claim_ids)
        rows.append({"varied": varied, "value": value, **at, "seconds": round(seconds, 4), "all_proved": proved})
        log(f"  scaling  {varied}={value:<2} sizes {at}  {seconds:7.3f}s  {'ok' if proved else 'NOT PROVED'}")
    return rows
