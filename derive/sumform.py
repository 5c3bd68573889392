"""Sum normal form: decide equality of index-notation expressions at symbolic size.

An expression (SymPy `Sum`/`Indexed`/`KroneckerDelta`/`exp`/`log`, as `sympy.diff` produces
them) is expanded into a sum of *terms*, each `coeff * sum_{dummies} prod(factors)`. Within a
term, Kronecker deltas that touch a dummy are resolved (all ranges are full, 1..size, so
sum_k delta(k, x) f(k) = f(x) is exact); the product is split into independent components,
and each component is renamed to a canonical representative of its orbit under renaming of
dummies and free indices (the least printed form). A component becomes a `SumAtom`, an opaque
function of its free indices; two sums are then equal iff their atoms are. Denominators and the
arguments of exp/log are normalised recursively and stay opaque (`Exp`, `Log`). Before a term
becomes atoms it is simplified by rules that hold pointwise:

- a delta between free indices stays, and renames the later index to the earlier in the rest;
- the mask M (a 0/1 matrix) is idempotent; under the causal algebra also M_ii = 1, a cycle of
  entries collapses to deltas (M_ij M_ji = delta_ij) and entries implied by transitivity go;
- softmax normalisation: D(x)^-p times a sub-product whose sum over its own dummies is the atom
  D(x) is D(x)^(1-p), so sum_i sum_j alpha_ij = n under any enclosing sums.

Deciding zero is then `expand` (and `cancel` of the result as a fallback) over these atoms: sound,
and complete for the claims here.
"""
from __future__ import annotations

import itertools
from collections import defaultdict

import sympy as sp

from derive.model import MASK_ALGEBRAS

MASK = "M"  # the model's mask entries (derive.model.LEAVES)
_MARK, _BLANK = sp.Symbol("_mark", integer=True), sp.Symbol("_blank", integer=True)  # for index roles


CHECK_EVERY = 4096  # term products between two calls of a Normaliser's `check`


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
    # The summand in canonical names: (base, power) pairs, the dummies and their ranges, the free slots.
    _body: tuple = ()
    _dummies: tuple = ()
    _dummy_dims: tuple = ()
    _slots: tuple = ()

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

    def absorb(self, expr):
        """Multiply in a product of powers (numbers go to the coefficient)."""
        for arg in sp.Mul.make_args(expr):
            if arg.is_Number:
                self.coeff *= arg
                continue
            base, power = arg.as_base_exp()
            self.factors[base] = self.factors.get(base, 0) + power
            if self.factors[base] == 0:
                del self.factors[base]
        return self

    def times(self, other):
        factors = defaultdict(int, self.factors)
        for base, power in other.factors.items():
            factors[base] += power
        return Term(self.coeff * other.coeff, self.dummies + other.dummies, {b: p for b, p in factors.items() if p != 0})


class Normaliser:
    """Turns index-notation expressions into canonical expressions over opaque atoms."""

    def __init__(self, index_dims: dict, sizes: dict, mask_algebra: str = "boolean", max_terms: int = 200_000,
                 check=None):
        """`check`: called for every term put into normal form, every CHECK_EVERY term products and every 64
        renamings tried; it raises to abandon the computation (`derive.prove.check_budget`: the proof path's time
        budget, which holds in any thread, where SIGALRM holds only in the main one). None: nothing is checked."""
        if mask_algebra not in MASK_ALGEBRAS:
            raise ValueError(f"unknown mask algebra {mask_algebra!r}; expected one of {MASK_ALGEBRAS}")
        self.dims = dict(index_dims)  # index symbol -> dim name
        self.size_dim = {size: dim for dim, size in sizes.items()}
        self.causal = mask_algebra == "causal"
        self.max_terms = max_terms
        self.check = check or _unchecked
        self._products = 0
        self._templates = {}
        self._atoms = {}
        self._free = {}
        self._forms = {}
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
            self._products += len(right)
            if self._products >= CHECK_EVERY:
                self._products = 0
                self.check()
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
        return [Term().absorb(self.nf(base) ** exponent)]

    def _sum(self, e):
        out = self.terms(e.function)
        for k, lo, hi in e.limits:
            if lo != 1 or hi not in self.size_dim:
                raise UnsupportedNode(f"sums must run over a full range 1..size, got {k} in {lo}..{hi}")
            self.dims.setdefault(k, self.size_dim[hi])
            for t in out:
                if any(k in self._symbols(b) for b in t.factors):
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
        return self._fresh_index(self.dims[d], d.name)

    def _fresh_index(self, dim, stem="t"):
        new = sp.Symbol(f"{stem}_{next(self._fresh)}", integer=True)
        self.dims[new] = dim
        return new

    # -- pointwise simplification of one term ----------------------------------------------------
    def simplify(self, term):
        """Deltas, the mask algebra and softmax folds, to a fixed point (each step shrinks the term)."""
        while True:
            term = self.resolve_deltas(term)
            term, again = self._masks(term)
            if not again:
                term, again = self._fold(term)
            if not again:
                return term

    def resolve_deltas(self, term):
        """Sum out each delta touching a dummy (ranges are full, so this is exact), then the free ones."""
        while True:
            delta = next((b for b in term.factors if isinstance(b, sp.KroneckerDelta) and self._resolvable(b, term)), None)
            if delta is None:
                return self._free_deltas(term)
            a, b = self._delta_args(delta, term.factors[delta])
            if self.dims.get(a) != self.dims.get(b):
                raise UnsupportedNode(f"Kronecker delta between ranges {self.dims.get(a)} and {self.dims.get(b)}: {delta}")
            gone, stay = (a, b) if a in term.dummies else (b, a)
            rest = Term(term.coeff, [d for d in term.dummies if d != gone], {f: p for f, p in term.factors.items() if f != delta})
            term = self._substitute(rest, {gone: stay})

    @staticmethod
    def _resolvable(delta, term):
        a, b = delta.args[:2]
        return a in term.dummies or b in term.dummies

    @staticmethod
    def _delta_args(delta, power):
        if power <= 0:  # 1/delta is undefined off the diagonal: never rewrite it
            raise UnsupportedNode(f"a Kronecker delta to the power {power}: {delta}")
        return delta.args[:2]

    def _free_deltas(self, term):
        """delta_ij f(i, j) = delta_ij f(i, i): each class of equal free indices is renamed to its least member."""
        classes, rest = {}, {}
        for f, p in term.factors.items():
            a, b = self._delta_args(f, p) if isinstance(f, sp.KroneckerDelta) else (None, None)
            if a is None or self.dims.get(a) != self.dims.get(b) or a not in self.dims:
                rest[f] = p  # a delta across two ranges is left as it is
                continue
            merged = classes.get(a, {a}) | classes.get(b, {b})
            classes.update({x: merged for x in merged})
        if not classes:
            return term
        least = {x: min(cls, key=sp.default_sort_key) for x, cls in classes.items()}
        term = self._substitute(Term(term.coeff, term.dummies, rest), {x: r for x, r in least.items() if x != r})
        term.factors.update({sp.KroneckerDelta(r, x): 1 for x, r in least.items() if x != r})
        return term

    def _substitute(self, term, mapping):
        """Rename indices in every factor; a nested sum whose free indices merge is normalised again."""
        out = Term(term.coeff, term.dummies)
        for f, p in term.factors.items():
            new = f.xreplace(mapping)
            if new != f and not isinstance(f, (sp.Indexed, sp.KroneckerDelta)):
                new = self._renormalise(new)
            out.absorb(new**p)
        return out

    def _renormalise(self, e):
        """Re-expand the atoms in `e` whose free indices were merged (Sigma(i, i) is not canonical)."""
        merged = lambda x: isinstance(x, SumAtom) and len(set(x.args)) < len(x.args)
        e = e.replace(merged, self._instantiate)
        if self.causal:
            e = e.replace(lambda x: _is_mask(x) and x.indices[0] == x.indices[1], lambda x: sp.S.One)
        return e

    def _instantiate(self, atom):
        """The sum an atom stands for, at its (possibly merged) free indices, in normal form."""
        cls = atom.func
        fresh = [self._fresh_index(dim) for dim in cls._dummy_dims]
        mapping = {**dict(zip(cls._slots, atom.args)), **dict(zip(cls._dummies, fresh))}
        term = Term(dummies=fresh)
        for base, power in cls._body:
            term.absorb(self._renormalise(base.xreplace(mapping)) ** power)
        return self.canonical(term)

    # -- the mask algebra ----------------------------------------------------------------------
    def _masks(self, term):
        """M*M = M; causal: M_ii = 1, a cycle adds the delta it implies (again=True), implied entries go."""
        factors = {}
        for f, p in term.factors.items():
            if _is_mask(f) and p > 0:
                if self.causal and f.indices[0] == f.indices[1]:
                    continue
                p = 1
            factors[f] = p
        term = Term(term.coeff, term.dummies, factors)
        if not self.causal:
            return term, False
        # Only entries at index symbols: a cycle's delta must be one that resolves, or this would not terminate.
        entries = {f.indices: f for f, p in factors.items() if _is_mask(f) and p > 0 and all(x in self.dims for x in f.indices)}
        reach = _reachable(entries)
        cycle = [(a, b) for a in reach for b in reach[a] if a != b and a in reach.get(b, ())]
        if cycle:  # M_ab ... M_ba = delta_ab: the entries along a cycle force its indices equal
            term.factors[sp.KroneckerDelta(*min(cycle, key=sp.default_sort_key))] = 1
            return term, True
        for a, b in entries:
            if any(c != b and b in reach.get(c, ()) for c in reach[a]):  # M_ac M_c..b already imply M_ab
                del term.factors[entries[a, b]]
        return term, False

    # -- softmax normalisation -------------------------------------------------------------------
    def _fold(self, term):
        """D(x)^-p * (a sub-product whose sum over its own dummies is D(x)) = D(x)^(1-p)."""
        for base, power in term.factors.items():
            if power >= 0 or not isinstance(base, SumAtom):
                continue
            for group in self._fold_groups(term, base):
                inside = [(f, p) for f, p in term.factors.items() if self._symbols(f) & group]
                if self._could_be(inside, group, base) and self._atom(inside, sorted(group, key=str)) == base:
                    return self._folded(term, base, dict(inside), group), True
        return term, False

    def _fold_groups(self, term, base):
        """Sets of the term's dummies over the same ranges as the denominator's own."""
        want = sorted(base.func._dummy_dims)
        pool = [d for d in term.dummies if d not in base.args]
        if not want or len(want) > 3:
            return
        for group in itertools.combinations(pool, len(want)):
            if sorted(self.dims[d] for d in group) == want:
                yield set(group)

    def _could_be(self, inside, group, base):
        """Cheap necessary conditions before the canonical comparison."""
        free = {s for f, _ in inside for s in self._symbols(f) if s in self.dims} - group
        return len(inside) == len(base.func._body) and free == set(base.args)

    @staticmethod
    def _folded(term, base, inside, group):
        factors = {f: p for f, p in term.factors.items() if f not in inside}
        factors[base] += 1
        if factors[base] == 0:
            del factors[base]
        return Term(term.coeff, [d for d in term.dummies if d not in group], factors)

    # -- canonical atoms -------------------------------------------------------------------------
    def canonical(self, term):
        self.check()
        term = self.simplify(term)
        dummies = set(term.dummies)
        outside = [b**p for b, p in term.factors.items() if not (self._symbols(b) & dummies)]
        inside = [(b, p) for b, p in term.factors.items() if self._symbols(b) & dummies]
        atoms = [self._atom(comp, dums) for comp, dums in self._components(inside, term.dummies)]
        orphan = [d for d in term.dummies if not any(d in self._symbols(b) for b, _ in inside)]
        scale = sp.Mul(*[self._size(d) for d in orphan])  # sum_j 1 = n
        return term.coeff * scale * sp.Mul(*outside) * sp.Mul(*atoms)

    def _symbols(self, e):
        """e.free_symbols, memoised (SymPy recomputes it for every Indexed, and the normal form asks often)."""
        out = self._free.get(e)
        if out is None:
            out = self._free[e] = e.free_symbols
        return out

    def _size(self, d):
        return next(size for size, dim in self.size_dim.items() if dim == self.dims[d])

    def _components(self, factors, dummies):
        groups = []  # list of (factor list, dummy set)
        dummies = set(dummies)
        for b, p in factors:
            ds = self._symbols(b) & dummies
            merged = [g for g in groups if g[1] & ds]
            rest = [g for g in groups if not (g[1] & ds)]
            facs = [(b, p)] + [f for g in merged for f in g[0]]
            dset = set(ds).union(*[g[1] for g in merged]) if merged else set(ds)
            groups = rest + [(facs, dset)]
        return [(facs, sorted(dset, key=str)) for facs, dset in groups]

    def _atom(self, factors, dummies):
        """The component's canonical atom; memoised, since an expanded product repeats a component, under the same
        dummy names, in many terms that differ only outside it."""
        memo = (frozenset(factors), tuple(dummies))
        if memo not in self._atoms:
            self._atoms[memo] = self._canonical_atom(factors, dummies)
        return self._atoms[memo]

    def _canonical_atom(self, factors, dummies):
        free = sorted({s for b, _ in factors for s in self._symbols(b) if s in self.dims} - set(dummies), key=str)
        best = None  # (key, mapping, every free order that attains it)
        for tried, (mapping, order) in enumerate(self._renamings(*self._classes(factors, dummies, free))):
            if tried % 64 == 63:
                self.check()
            key = str(sp.Mul(*[b.xreplace(mapping) ** p for b, p in factors]))
            if best is None or key < best[0]:
                best = (key, mapping, [order])
            elif key == best[0]:
                best[2].append(order)
        key, mapping, orders = best
        if key not in self._templates:
            self._templates[key] = self._template(key, orders, mapping, factors, dummies)
        cls = self._templates[key]
        return cls(*orders[0]) if orders[0] else cls()

    def _classes(self, factors, dummies, free):
        """Dummies and free indices in classes of equal range and role, in an order that does not depend on names."""
        roles = self._roles(factors, dummies, free)
        split = lambda symbols: [syms for _, syms in _grouped(symbols, lambda s: (self.dims[s], roles.get(s, ())))]
        return split(dummies), split(free)

    def _roles(self, factors, dummies, free):
        """How each index occurs, whatever the names: its factors with it marked and every other index blanked."""
        sizes = [len(g) for syms in (dummies, free) for _, g in _grouped(syms, self.dims.get)]
        if max(sizes, default=0) < 3:  # at most two renamings per range: cheaper to try them all
            return {}
        blank = {s: _BLANK for s in (*dummies, *free)}
        return {s: tuple(sorted(str(b.xreplace({**blank, s: _MARK}) ** p) for b, p in factors if s in self._symbols(b)))
                for s in (*dummies, *free)}

    def _renamings(self, dummies, free):
        """Every renaming to canonical names within each class (`_classes`); yields (mapping, free in slot order)."""
        choices = []
        for kind, classes in (("d", dummies), ("f", free)):
            taken = defaultdict(int)  # canonical names used so far, per range
            for syms in classes:
                dim = self.dims[syms[0]]
                names = [sp.Symbol(f"_{kind}_{dim}_{taken[dim] + r}", integer=True) for r in range(len(syms))]
                taken[dim] += len(syms)
                choices.append([list(zip(perm, names)) for perm in itertools.permutations(syms)])
        free = [s for syms in free for s in syms]
        slots = {}
        for combo in itertools.product(*choices):
            mapping = dict(pair for part in combo for pair in part)
            for s in free:
                slots[s] = mapping[s].name
            yield mapping, tuple(sorted(free, key=lambda s: slots[s]))

    def _template(self, key, orders, mapping, factors, dummies):
        """A new atom class; it keeps its summand so that it can be expanded again (`_instantiate`)."""
        first = orders[0]
        perms = {tuple(first.index(s) for s in order) for order in orders}
        return type(f"Sigma{len(self._templates)}", (SumAtom,), {
            "_symmetries": tuple(sorted(perms)),
            "_body": tuple((b.xreplace(mapping), p) for b, p in factors),
            "_dummies": tuple(mapping[d] for d in dummies),
            "_dummy_dims": tuple(self.dims[d] for d in dummies),
            "_slots": tuple(mapping[s] for s in first),
        })

    # -- public --------------------------------------------------------------------------------
    def nf(self, e):
        """The canonical form of an expression: a rational expression over opaque atoms."""
        e = sp.sympify(e)
        if e not in self._forms:  # the model shares sub-expressions (each Z_i under many sums)
            self._forms[e] = sp.Add(*[self.canonical(t) for t in self.terms(e)])
        return self._forms[e]


def _unchecked():
    pass


def _grouped(items, key):
    """(key, items with that key), in key order."""
    groups = defaultdict(list)
    for x in items:
        groups[key(x)].append(x)
    return sorted(groups.items())


def _is_mask(x):
    return isinstance(x, sp.Indexed) and x.base.name == MASK and len(x.indices) == 2


def _reachable(entries):
    """index -> every index reachable along mask entries (M_ij read as the edge i -> j)."""
    succ = defaultdict(set)
    for a, b in entries:
        succ[a].add(b)
    reach = {}
    for start in list(succ):
        seen, todo = set(), list(succ[start])
        while todo:
            x = todo.pop()
            if x not in seen:
                seen.add(x)
                todo.extend(succ.get(x, ()))
        reach[start] = seen
    return reach
