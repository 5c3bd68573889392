"""A benchmark, not a test: 22 mechanism files written as a user writes them (the 7 of test_user_mechanisms and
15 of the mechanism fuzzer's specs, 55 and 133 the slowest of its 170), loaded as claims files are and decided
one row at a time with the derive stage's mechanism options; prints each row's seconds and cells.

    python tests/bench_user_rows.py [--quick] [DIR]        (DIR: where the files are written; default a temp dir)
"""
import json
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from derive import claimfile, mechanisms
from derive.mechanisms import table
from derive.profile import DEFAULT, QUICK
from derive.results import Results
from derive.stage import DeriveStage
from numeric.reference_check import check_reference
from tests.test_user_mechanisms import FILES, source

prof = QUICK if "--quick" in sys.argv else DEFAULT
args = [a for a in sys.argv[1:] if not a.startswith("--")]
d = pathlib.Path(args[0] if args else tempfile.mkdtemp())
d.mkdir(parents=True, exist_ok=True)
paths = []
for name in FILES:
    p = d / f"{name}.py"
    p.write_text(source(name))
    paths.append(p)
p = d / "prior_positive.py"
positive = 'leaves={"P": ("n", "n")}, free={"P": ("scores", "qk", "params")}, domains={"P": "positive"}'
p.write_text(source("prior_real", positive).replace("Mechanism('prior_real'", "Mechanism('prior_positive'"))
paths.append(p)
fuzz = [55, 133] + list(range(0, 13))
for i in fuzz[: 22 - len(paths)]:
    p = d / f"fz0_{i}.py"
    p.write_text(f"""import dataclasses, torch
from derive.fuzz.mechanisms import draw, render
from derive.mechanisms import register
from derive.mechanisms.forms import at_logits
from numeric.mechanism_oracle import weights
SPEC = draw(0, {i})
LEAF = {{"prior": "P", "temperature": "tau", "shift": "a"}}.get(SPEC["role"])
def reference(t):
    s = t["c"] * t["q"] @ t["k"].mT
    mask = s.new_ones(s.shape) if t.get("mask") is None else t["mask"]
    beta = t.get("beta", s.new_zeros(()))
    return weights(SPEC, s, t[LEAF] if LEAF else None, beta, mask)
register(dataclasses.replace(render(SPEC), reference=reference, reference_logits=at_logits(reference)))
""")
    paths.append(p)
mechanisms.builtin()
before = set(mechanisms.REGISTRY)
t0 = time.perf_counter()
for p in paths:
    claimfile.load(p, mechanism_checks=(check_reference,))
load_s = time.perf_counter() - t0
names = [n for n in mechanisms.REGISTRY if n not in before]
stage = DeriveStage(Results({}), prof, 0, log=lambda *a: None)
opts = stage.mechanism_options()
print(len(names), "mechanisms; load", round(load_s, 1), "s; options", opts, flush=True)
res = Results({})
t0 = time.perf_counter()
rows = {}
for n in names:
    rows.update(table.build(res, opts, log=lambda *a: None, names=[n]))
    r = rows[n]
    print(f"{n:16s} {r['seconds']:7.2f} s  " + " ".join(f"{q}={c['verdict']}" for q, c in r["questions"].items()), flush=True)
total = time.perf_counter() - t0
print("total", round(total, 1), "s; max row", max(r["seconds"] for r in rows.values()))
(d / "rows.json").write_text(json.dumps({n: {"seconds": r["seconds"], "cells": {q: c["verdict"] for q, c in
                                          r["questions"].items()}} for n, r in rows.items()}, indent=1))
