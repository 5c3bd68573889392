"""Sum normal form: decide equality of index-notation expressions at symbolic size.

An expression (SymPy `Sum`/`Indexed`/`KroneckerDelta`/`exp`/`log`, as `sympy.diff` produces
them) is expanded into a sum of *terms*, each `coeff * sum_{dummies} prod(factors)`. Within a
term, Kronecker deltas that touch a dummy are resolved (all ranges are full, 1..size, so
sum_k delta(k, x) f(k) = f(x) is exact); the product is split into independent components,
and each component is renamed to a canonical representative of its orbit under renaming of
dummies and free indices (the least printed form). A component becomes a `SumAtom`, an opaque
function of its free indices; two sums are then equal iff their atoms are. Denominators and the
arguments of exp/log are normalised recursively and stay opaque (`Exp`, `Log`), so the
identity sum_j alpha_ij = 1 is seen as Z_i / Z_i. Deciding zero is then `expand` (and `cancel`
of the result as a fallback) over these atoms: sound, and complete for the claims here.
"""
from __future__ import annotations

import itertools
from collections import defaultdict

import sympy as sp


class UnsupportedNode(TypeError):
    """A SymPy node the normal form does not handle (never silently passed through)."""


class Exp(sp.Function):
    """exp kept opaque: SymPy would merge exp(a)*exp(a) into exp(2a)."""

    nargs = 1


class Log(sp.Function):
    nargs = 1


class SumAtom(sp.Function):
    """A canonical multi-sum; subclasses are made per template, applied to its free indices."""

    _symmetries: tuple = ()

    @classmethod
    def eval(cls, *args):
        # A template symmetric in some free slots takes its arguments in one fixed order.
        candidates = [tuple(args[p] for p in perm) for perm in cls._symmetries]
        if candidates:
            best = min(candidates, key=lambda t: [sp.default_sort_key(a) for a in t])
            if best != tuple(args):
                return cls(*best)
        return None


class Term:
    """coeff * sum over `dummies` of prod(base**power for base, power in factors)."""

    __slots__ = ("coeff", "dummies", "factors")

    def __init__(self, coeff=sp.S.One, dummies=(), factors=None):
        self.coeff = coeff
        self.dummies = tuple(dummies)
        self.factors = dict(factors or {})

    def renamed(self, mapping):
        factors = defaultdict(int)
        for base, power in self.factors.items():
            factors[base.xreplace(mapping)] += power
        dummies = tuple(mapping.get(d, d) for d in self.dummies)
        return Term(self.coeff, dummies, {b: p for b, p in factors.items() if p != 0})

    def times(self, other):
        factors = defaultdict(int, self.factors)
        for base, power in other.factors.items():
            factors[base] += power
        return Term(self.coeff * other.coeff, self.dummies + other.dummies, {b: p for b, p in factors.items() if p != 0})


class Normaliser:
    """Turns index-notation expressions into canonical expressions over opaque atoms."""

    def __init__(self, index_dims: dict, sizes: dict, max_terms: int = 200_000):
        self.dims = dict(index_dims)  # index symbol -> dim name
        self.size_dim = {size: dim for dim, size in sizes.items()}
        self.max_terms = max_terms
        self._templates = {}
        self._fresh = itertools.count()

    # -- expansion into terms ----------------------------------------------------------------
    def terms(self, e):
        if isinstance(e, sp.Add):
            out = [t for arg in e.args for t in self.terms(arg)]
        elif isinstance(e, sp.Mul):
            out = [Term()]
            for arg in e.args:
                out = self._product(out, self.terms(arg))
        elif isinstance(e, sp.Pow):
            out = self._power(e.base, e.exp)
        elif isinstance(e, sp.Sum):
            out = self._sum(e)
        elif isinstance(e, (sp.Indexed, sp.KroneckerDelta)):
            out = [Term(factors={e: 1})]
        elif isinstance(e, sp.exp):
            out = [Term(factors=self._exp_factors(e.args[0]))]
        elif isinstance(e, sp.log):
            out = [Term(factors={Log(self.nf(e.args[0])): 1})]
        elif e.is_Number or (isinstance(e, sp.Symbol) and e not in self.dims):
            out = [Term(coeff=e)]
        else:
            raise UnsupportedNode(f"sum normal form cannot handle {type(e).__name__}: {e}")
        if len(out) > self.max_terms:
            raise MemoryError(f"expansion exceeded {self.max_terms} terms")
        return out

    def _product(self, left, right):
        out = []
        for a in left:
            for b in right:
                clash = set(a.dummies) & set(b.dummies)
                out.append(a.times(b.renamed({d: self._fresh_like(d) for d in clash}) if clash else b))
        return out

    def _power(self, base, exponent):
        if exponent.is_Integer and exponent > 0 and not isinstance(base, (sp.Indexed, sp.Symbol)):
            out = [Term()]
            for _ in range(int(exponent)):
                out = self._product(out, self.terms(base))
            return out
        if isinstance(base, sp.exp):  # exp(a)**k
            return [Term(factors=self._exp_factors(base.args[0] * exponent))]
        powered = self.nf(base) ** exponent
        term = Term()
        for arg in sp.Mul.make_args(powered):
            if arg.is_Number:
                term.coeff *= arg
            else:
                b, p = arg.as_base_exp()
                term.factors[b] = term.factors.get(b, 0) + p
        return [term]

    def _sum(self, e):
        out = self.terms(e.function)
        for k, lo, hi in e.limits:
            if lo != 1 or hi not in self.size_dim:
                raise UnsupportedNode(f"sums must run over a full range 1..size, got {k} in {lo}..{hi}")
            self.dims.setdefault(k, self.size_dim[hi])
            for t in out:
                if any(k in b.free_symbols for b in t.factors):
                    t.dummies = t.dummies + (k,)
                else:
                    t.coeff = t.coeff * hi
        return out

    def _exp_factors(self, arg):
        """exp(sum_t k_t m_t) = prod_t Exp(m_t)**k_t for integer k_t, so exp(2a) == exp(a)**2."""
        factors = defaultdict(int)
        for term in sp.Add.make_args(sp.expand(self.nf(arg))):
            k, rest = term.as_coeff_Mul()
            if k.is_Integer:
                factors[Exp(rest)] += int(k)
            else:
                factors[Exp(term)] += 1
        return dict(factors)

    def _fresh_like(self, d):
        new = sp.Symbol(f"{d.name}_{next(self._fresh)}", integer=True)
        self.dims[new] = self.dims[d]
        return new

    # -- deltas and canonical atoms ------------------------------------------------------------
    def resolve_deltas(self, term):
        while True:
            delta = next((b for b in term.factors if isinstance(b, sp.KroneckerDelta) and self._resolvable(b, term)), None)
            if delta is None:
                return self._unit_deltas(term)
            a, b = delta.args[:2]
            if self.dims.get(a) != self.dims.get(b):
                raise UnsupportedNode(f"Kronecker delta between ranges {self.dims.get(a)} and {self.dims.get(b)}: {delta}")
            keep = {f: p for f, p in term.factors.items() if f != delta}
            if a == b:
                term = Term(term.coeff, term.dummies, keep)
                continue
            gone, stay = (a, b) if a in term.dummies else (b, a)
            rest = Term(term.coeff, [d for d in term.dummies if d != gone], keep)
            term = rest.renamed({gone: stay})

    @staticmethod
    def _resolvable(delta, term):
        a, b = delta.args[:2]
        return a == b or a in term.dummies or b in term.dummies

    @staticmethod
    def _unit_deltas(term):
        """A delta between free indices stays, with power 1 (delta**2 == delta), args sorted."""
        factors = defaultdict(int)
        for f, p in term.factors.items():
            if isinstance(f, sp.KroneckerDelta):
                f, p = sp.KroneckerDelta(*f.args[:2]), 1
            factors[f] += p
        return Term(term.coeff, term.dummies, factors)

    def canonical(self, term):
        term = self.resolve_deltas(term)
        outside = [b**p for b, p in term.factors.items() if not (b.free_symbols & set(term.dummies))]
        inside = [(b, p) for b, p in term.factors.items() if b.free_symbols & set(term.dummies)]
        atoms = [self._atom(comp, dums) for comp, dums in self._components(inside, term.dummies)]
        orphan = [d for d in term.dummies if not any(d in b.free_symbols for b, _ in inside)]
        scale = sp.Mul(*[self._size(d) for d in orphan])
        return term.coeff * scale * sp.Mul(*outside) * sp.Mul(*atoms)

    def _size(self, d):
        return next(size for size, dim in self.size_dim.items() if dim == self.dims[d])

    def _components(self, factors, dummies):
        groups = []  # list of (factor list, dummy set)
        for b, p in factors:
            ds = b.free_symbols & set(dummies)
            merged = [g for g in groups if g[1] & ds]
            rest = [g for g in groups if not (g[1] & ds)]
            facs = [(b, p)] + [f for g in merged for f in g[0]]
            dset = set(ds).union(*[g[1] for g in merged]) if merged else set(ds)
            groups = rest + [(facs, dset)]
        return [(facs, sorted(dset, key=str)) for facs, dset in groups]

    def _atom(self, factors, dummies):
        free = sorted({s for b, _ in factors for s in b.free_symbols if s in self.dims} - set(dummies), key=str)
        best, best_args = None, []
        for mapping, order in self._renamings(dummies, free):
            key = str(sp.Mul(*[b.xreplace(mapping) ** p for b, p in factors]))
            if best is None or key < best:
                best, best_args = key, [order]
            elif key == best:
                best_args.append(order)
        cls = self._template(best, best_args)
        return cls(*best_args[0]) if best_args[0] else cls()

    def _renamings(self, dummies, free):
        """Every dim-preserving renaming to canonical names; yields (mapping, free in slot order)."""
        def by_dim(symbols):
            groups = defaultdict(list)
            for s in symbols:
                groups[self.dims[s]].append(s)
            return sorted(groups.items())

        choices = []
        for kind, groups in (("d", by_dim(dummies)), ("f", by_dim(free))):
            for dim, syms in groups:
                names = [sp.Symbol(f"_{kind}_{dim}_{r}", integer=True) for r in range(len(syms))]
                choices.append([list(zip(perm, names)) for perm in itertools.permutations(syms)])
        slots = {}
        for combo in itertools.product(*choices):
            mapping = dict(pair for part in combo for pair in part)
            for s in free:
                slots[s] = mapping[s].name
            yield mapping, tuple(sorted(free, key=lambda s: slots[s]))

    def _template(self, key, orders):
        if key not in self._templates:
            first = orders[0]
            perms = {tuple(first.index(s) for s in order) for order in orders}
            name = f"Sigma{len(self._templates)}"
            self._templates[key] = type(name, (SumAtom,), {"_symmetries": tuple(sorted(perms))})
        return self._templates[key]

    # -- public --------------------------------------------------------------------------------
    def nf(self, e):
        """The canonical form of an expression: a rational expression over opaque atoms."""
        e = sp.sympify(e)
        return sp.Add(*[self.canonical(t) for t in self.terms(e)])

    def is_zero(self, e):
        d = sp.expand(self.nf(e))
        if d == 0:
            return True
        return sp.expand(sp.numer(sp.together(d))) == 0
