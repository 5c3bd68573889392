"""A mutation check of the proof engine: faults planted in it, and the probes that must notice.

Each `Fault` replaces one function of the engine — the sum normal form, the delta resolution, the
canonical renaming, the softmax fold, the ring's zero test and derivation, the rational evaluator,
the witness certification — by a plausible wrong version, for the duration of `planted(fault)`.
Each `Probe` is a small identity with the outcome the unmodified engine gives on one path (true
identities `proved` on the general path and `holds` on the fixed-size ones, false ones `disproved` with
a witness). A fault is killed when some probe of
its path comes out differently; a fault no probe notices means the engine's tests cannot see that
kind of unsound (or incomplete) code.

    python -m derive.engine_faults      # the kill matrix, exit 1 if a fault survives
"""
from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import sympy as sp

from derive import claims as registry
from derive import graph, rational, ring, sumform, witness  # noqa: F401  (fault targets)
from derive.claims import Identity
from derive.prove import run_path

SMALL_GRID = [{"n": 2, "dk": 2, "dv": 2, "m": 2, "dx": 2}, {"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}]
OPTIONS = {"grid": SMALL_GRID, "points": 2, "seed": 0, "budget_s": 60}


@dataclass(frozen=True)
class Probe:
    name: str
    path: str
    identity: Identity
    masked: bool
    expected: str  # the outcome of the unmodified engine


@dataclass(frozen=True)
class Fault:
    id: str
    path: str  # whose probes must notice it
    target: str  # "module.Class.attribute" replaced while planted
    description: str
    make: Callable  # original function -> faulty replacement


def _probe(name, path, free, level, derived, closed, masked, expected):
    return Probe(name, path, Identity(name, free, level, derived, closed, name), masked, expected)


def _part(cid, part="main"):
    return registry.REGISTRY[cid].part(part)


def _mutant(mid):
    m = next(m for m in registry.mutants() if m.id == mid)
    part = _part(m.claim, m.part)
    return Identity(mid, part.free, part.level, m.derived or part.derived, m.closed, mid)


def _paper(name, path, cid, masked, part="main"):
    return Probe(name, path, _part(cid, part), masked, _true(path))


def _true(path):
    """What the unmodified engine says of a true identity: proved at general size, holds at a fixed path's sizes."""
    return "proved" if path == "general" else "holds"


def _wrong(name, path, mid, masked=True):
    return Probe(name, path, _mutant(mid), masked, "disproved")


def probes():
    """The probe suite: every branch a fault below touches is exercised by a true and a false identity."""
    jac = lambda m, i, j, l: m.grad(m.alpha(i, j), "s", i, l)  # noqa: E731  (d alpha_ij / d s_il)
    hess = lambda m, j, a, l, b: m.grad(m.derived_grad("v", j, a), "v", l, b)  # noqa: E731
    return (
        _paper("C1 score advantage", "general", "C1", True),
        _paper("C3 query gradient", "general", "C3", True),
        _paper("C4 key gradient", "general", "C4", True),
        _wrong("M2 uniform baseline", "general", "M2-uniform-baseline"),
        _wrong("M8 q/k transposed", "general", "M8-transpose-qk"),
        _probe("softmax Jacobian", "general", ("n", "n", "n"), "scores", jac,
               lambda m, i, j, l: m.alpha(i, j) * (m.delta(j, l) - m.alpha(i, l)), False, "proved"),
        _probe("Jacobian without its delta", "general", ("n", "n", "n"), "scores", jac,
               lambda m, i, j, l: m.alpha(i, j) * (1 - m.alpha(i, l)), False, "disproved"),
        _probe("unused dummy counts n", "general", ("n", "dv"), "scores", lambda m, i, a: m.sum("n", lambda j: m.v(i, a)),
               lambda m, i, a: m.size("n") * m.v(i, a), False, "proved"),
        _probe("unused dummy counts 1", "general", ("n", "dv"), "scores", lambda m, i, a: m.sum("n", lambda j: m.v(i, a)),
               lambda m, i, a: m.v(i, a), False, "disproved"),
        _probe("total attention is T", "general", (), "scores",
               lambda m: m.sum("n", lambda i: m.sum("n", lambda j: m.alpha(i, j))), lambda m: m.size("n"), True, "proved"),
        _probe("exp(2s) = exp(s)", "general", ("n", "n"), "scores", lambda m, i, j: m.exp(2 * m.s(i, j)),
               lambda m, i, j: m.e(i, j), False, "disproved"),
        _probe("outputs are 1", "general", ("n", "dv"), "scores", lambda m, i, a: m.o(i, a), lambda m, i, a: 1, False,
               "disproved"),
        _probe("sum v^2 = sum v", "general", ("dv",), "scores", lambda m, a: m.sum("n", lambda j: m.v(j, a) * m.v(j, a)),
               lambda m, a: m.sum("n", lambda j: m.v(j, a)), False, "disproved"),
        _probe("mask idempotent", "general", ("n", "n", "dv"), "scores",
               lambda m, i, j, a: m.mask(i, j) * m.mask(i, j) * m.v(j, a), lambda m, i, j, a: m.mask(i, j) * m.v(j, a),
               True, "proved"),
        _paper("C1 score advantage", "fixed", "C1", True),
        _paper("C2 value responsibility", "fixed", "C2", True),
        _wrong("M1 baseline dropped", "fixed", "M1-drop-baseline"),
        _wrong("M6 wrong index", "fixed", "M6-wrong-index"),
        _paper("C2 value responsibility", "rational", "C2", True),
        _wrong("M2 uniform baseline", "rational", "M2-uniform-baseline"),
        _wrong("M4 sign flipped", "rational", "M4-flip-sign"),
        _probe("attention is uniform", "rational", ("n", "n"), "scores", lambda m, i, j: m.alpha(i, j),
               lambda m, i, j: 1 / m.size("n"), False, "disproved"),
        _probe("Hessian in v is 0", "rational", ("n", "dv", "n", "dv"), "scores", hess, lambda m, j, a, l, b: 0, False,
               "disproved"),
        _probe("exp(s_ij + s_il) = e_ij e_il", "rational", ("n", "n", "n"), "scores",
               lambda m, i, j, l: m.exp(m.s(i, j) + m.s(i, l)), lambda m, i, j, l: m.e(i, j) * m.e(i, l), False, "undecided"),
    )


# -- the faults ------------------------------------------------------------------------------------
def _free_deltas_to_one(original):
    def faulty(self, term):
        return sumform.Term(term.coeff, term.dummies,
                            {f: p for f, p in term.factors.items() if not isinstance(f, sp.KroneckerDelta)})
    return faulty


def _resolve_keeping_dummy(original):
    def faulty(self, term):
        while True:
            delta = next((b for b in term.factors if isinstance(b, sp.KroneckerDelta) and self._resolvable(b, term)), None)
            if delta is None:
                return self._free_deltas(term)
            a, b = delta.args[:2]
            gone, stay = (b, a) if a in term.dummies else (a, b)  # the wrong way round: a free index is summed away
            rest = sumform.Term(term.coeff, [d for d in term.dummies if d not in (a, b)],
                                {f: p for f, p in term.factors.items() if f != delta})
            term = self._substitute(rest, {gone: stay})
    return faulty


def _first_renaming_only(original):
    def faulty(self, dummies, free):
        yield next(iter(original(self, dummies, free)))
    return faulty


def _exp_coefficient_dropped(original):
    def faulty(self, arg):
        return {base: 1 for base in original(self, arg)}
    return faulty


def _idempotent_everything(original):
    def faulty(self, term):
        term = sumform.Term(term.coeff, term.dummies,
                            {f: (1 if isinstance(f, sp.Indexed) and p > 0 else p) for f, p in term.factors.items()})
        return original(self, term)
    return faulty


def _fold_unchecked(original):
    def faulty(self, term):
        for base, power in term.factors.items():
            if power < 0 and isinstance(base, sumform.SumAtom):
                for group in self._fold_groups(term, base):
                    inside = [(f, p) for f, p in term.factors.items() if f.free_symbols & group]
                    return self._folded(term, base, dict(inside), group), True
        return term, False
    return faulty


def _inverses_dropped(original):
    def faulty(self, p):
        inverse = [g for g in range(len(self.gens)) if self.gens[g][0] == "inv"]
        mask = sum(ring.MASK << (ring.BITS * g) for g in inverse)
        return ring.Poly(self, {m: c for m, c in p.terms.items() if not m & mask})
    return faulty


def _exp_chain_rule_dropped(original):
    def faulty(self, g, x):
        if self.gens[g][0] == "exp":
            return ring.Poly(self, {1 << (ring.BITS * g): 1})
        return original(self, g, x)
    return faulty


def _one_exp_value(original):
    def faulty(self, op, x):
        return original(self, op, graph.ONE)
    return faulty


def _derivative_frozen(original):
    counter = iter(range(10**9))

    def faulty(self, f, label):
        d = original(self, f, label)
        return graph.Node(graph.LEAF, None, None, d.val, (f"frozen{next(counter)}", graph.Fraction(0)))
    return faulty


def _differences_ignored(original):
    def faulty(identity, m, derived, closed):
        checked, _ = original(identity, m, derived, closed)
        return checked, []
    return faulty


def _uncertified_witness(original):
    def faulty(m, ix, lhs, rhs):
        found = original(m, ix, lhs, rhs)
        return found or witness.Witness(dict(m.sizes), m.setting.masked, tuple(i.value for i in ix), {}, "0", "1")
    return faulty


FAULTS = (
    Fault("free-delta-to-one", "general", "derive.sumform.Normaliser._free_deltas",
          "a Kronecker delta between free indices replaced by 1", _free_deltas_to_one),
    Fault("orphan-size-dropped", "general", "derive.sumform.Normaliser._size",
          "the size factor of a dummy no factor uses dropped (sum_j 1 = 1)", lambda original: lambda self, d: 1),
    Fault("delta-keeps-dummy", "general", "derive.sumform.Normaliser.resolve_deltas",
          "delta resolution substitutes the free index by the dummy", _resolve_keeping_dummy),
    Fault("renaming-not-canonical", "general", "derive.sumform.Normaliser._renamings",
          "canonical renaming tries one renaming of the dummies instead of all", _first_renaming_only),
    Fault("exp-coefficient-dropped", "general", "derive.sumform.Normaliser._exp_factors",
          "exp(k a) normalised as exp(a)", _exp_coefficient_dropped),
    Fault("idempotent-everything", "general", "derive.sumform.Normaliser._masks",
          "x * x = x applied to every entry, not only the mask's", _idempotent_everything),
    Fault("fold-unchecked", "general", "derive.sumform.Normaliser._fold",
          "a softmax denominator folded with any sub-product, matching or not", _fold_unchecked),
    Fault("ring-inverses-dropped", "fixed", "derive.ring.DiffRing.clear_inverses",
          "the zero test drops the monomials holding an inverse generator instead of clearing them", _inverses_dropped),
    Fault("ring-exp-chain-rule", "fixed", "derive.ring.DiffRing.dgen",
          "d exp(p) = exp(p) (the inner derivative dp forgotten)", _exp_chain_rule_dropped),
    Fault("rational-one-exp-value", "rational", "derive.graph.Graph._generator",
          "every exp / log generator gets the same value", _one_exp_value),
    Fault("rational-first-order-only", "rational", "derive.graph.Graph.grad",
          "a derivative is a constant: derivatives of derivatives become 0", _derivative_frozen),
    Fault("rational-differences-ignored", "rational", "derive.rational.differing",
          "the pointwise comparison finds no difference", _differences_ignored),
    Fault("witness-uncertified", "rational", "derive.witness.certify",
          "a difference mod p is reported as a witness without the interval check", _uncertified_witness),
)


def _resolve(target):
    """(owner, attribute) for "package.module.Class.attribute" or "package.module.function"."""
    import importlib

    parts = target.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:-1]:
            owner = getattr(owner, name)
        return owner, parts[-1]
    raise LookupError(f"cannot resolve {target}")


@contextmanager
def planted(fault: Fault):
    owner, name = _resolve(fault.target)
    original = getattr(owner, name)
    setattr(owner, name, fault.make(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def outcome(probe: Probe) -> str:
    try:
        return run_path(probe.path, probe.identity, probe.masked, probe.name, OPTIONS).status
    except Exception as exc:  # a fault that crashes the engine is noticed too
        return f"error: {type(exc).__name__}"


def noticed_by(fault: Fault, suite=None, first_only=True) -> list:
    """The probes of the fault's path whose outcome changes while it is planted."""
    found = []
    with planted(fault):
        for probe in suite or probes():
            if probe.path == fault.path and outcome(probe) != probe.expected:
                found.append(probe.name)
                if first_only:
                    break
    return found


def kill_matrix(log=print) -> dict:
    """{planted, killed, kill_rate, faults: [{id, target, description, killed, killed_by}]} (results.json)."""
    suite = probes()
    rows = []
    for fault in FAULTS:
        t0 = time.perf_counter()
        by = noticed_by(fault, suite)
        rows.append({"id": fault.id, "target": fault.target, "description": fault.description, "killed": bool(by),
                     "killed_by": by, "seconds": round(time.perf_counter() - t0, 3)})
        log(f"  {'killed  ' if by else 'SURVIVED'} {fault.id:28} {', '.join(by) or '-'}")
    killed = sum(r["killed"] for r in rows)
    return {"planted": len(rows), "killed": killed, "kill_rate": killed / len(rows), "faults": rows}


def main(argv=None, prog="python -m derive.engine_faults"):
    from derive import options

    p = options.parser(prog, "plant each fault of the proof engine and check that the verifier's probes notice it; "
                             "exit 0 iff every planted fault is killed",
                       parents=[options.json_file("write the kill matrix (every fault, killed or not, and by what)")],
                       epilog=f"{len(FAULTS)} planted faults")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    matrix = kill_matrix()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(matrix, fh, indent=1)
    print(f"{matrix['killed']}/{matrix['planted']} planted faults killed")
    return 0 if matrix["killed"] == matrix["planted"] else 1


if __name__ == "__main__":
    sys.exit(main())
