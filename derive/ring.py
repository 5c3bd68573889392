"""A differential polynomial ring with integer coefficients, for exact fixed-size proofs.

Generators are model entries (leaves), exp(p), log(p) and inverses 1/p of ring elements, each
with its derivation rule: d exp(p) = exp(p) dp, d log(p) = dp / p, d(1/p) = -(1/p)^2 dp. Every
quantity of the model is then a *polynomial* in the generators: fractions are never formed and
no gcd is ever computed (SymPy's field-based `cancel` does not finish at n = 4). To decide p == 0, each
inverse generator R = 1/q is cleared by multiplying through by q**deg_R(p) (latest first, since
q may contain earlier inverses), leaving a polynomial in leaves and exp/log generators that is
tested for being identically zero. Treating exp/log generators as independent makes the test
sound (a formal zero is a true zero); the claims here never need a relation between them.

A monomial is a Python int holding one 9-bit field per generator (generator g at bits 9g..9g+8),
so monomial multiplication is integer addition. Exponents stay below 256 and the top bit of each
field is a guard: a product whose exponent reaches 256 sets it, and raises `ExponentOverflow`
instead of carrying silently into the next generator.
"""
from __future__ import annotations

BITS = 9
MAX_EXPONENT = (1 << (BITS - 1)) - 1
MASK = (1 << BITS) - 1


class ExponentOverflow(OverflowError):
    """A monomial exponent above MAX_EXPONENT (the proof path reports it as undecided)."""


class Poly:
    """An element of a `DiffRing`: {monomial: integer coefficient}."""

    __slots__ = ("ring", "terms")

    def __init__(self, ring, terms):
        self.ring = ring
        self.terms = terms

    def _lift(self, other):
        if isinstance(other, Poly):
            return other
        if isinstance(other, int):
            return self.ring.const(other)
        return NotImplemented

    def __add__(self, other):
        other = self._lift(other)
        if other is NotImplemented:
            return other
        out = dict(self.terms)
        for m, c in other.terms.items():
            v = out.get(m, 0) + c
            if v:
                out[m] = v
            else:
                out.pop(m, None)
        return Poly(self.ring, out)

    __radd__ = __add__

    def __neg__(self):
        return Poly(self.ring, {m: -c for m, c in self.terms.items()})

    def __sub__(self, other):
        other = self._lift(other)
        return NotImplemented if other is NotImplemented else self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        if isinstance(other, int):
            return Poly(self.ring, {m: c * other for m, c in self.terms.items()} if other else {})
        other = self._lift(other)
        if other is NotImplemented:
            return other
        out = {}
        get = out.get
        guard = self.ring.guard
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = m1 + m2
                if m & guard:
                    self.ring.overflow(m)
                out[m] = get(m, 0) + c1 * c2
        return Poly(self.ring, {m: c for m, c in out.items() if c})

    __rmul__ = __mul__

    def __pow__(self, k):
        if not isinstance(k, int) or k < 0:
            return NotImplemented  # negative powers go through division (an inverse generator)
        out, base = self.ring.const(1), self
        while k:
            if k & 1:
                out = out * base
            base, k = (base * base if k > 1 else base), k >> 1
        return out

    def __truediv__(self, other):
        other = self._lift(other)
        return NotImplemented if other is NotImplemented else self * self.ring.inverse(other)

    def __rtruediv__(self, other):
        return self._lift(other) * self.ring.inverse(self)

    def __bool__(self):
        return bool(self.terms)

    def __len__(self):
        return len(self.terms)

    def key(self):
        return frozenset(self.terms.items())

    def degree(self, g):
        shift = BITS * g
        return max(((m >> shift) & MASK for m in self.terms), default=0)


class DiffRing:
    """Generators with derivation rules; derivatives with respect to leaf generators."""

    def __init__(self):
        self.gens = []  # (kind, payload): ("leaf", name), ("exp", Poly), ("log", Poly), ("inv", Poly)
        self._index = {}
        self._depends = {}
        self._dgen = {}
        self._powers = {}
        self.guard = 0  # the top bit of every generator's exponent field

    def overflow(self, monomial):
        g = next(g for g in range(len(self.gens)) if (monomial >> (BITS * g + BITS - 1)) & 1)
        raise ExponentOverflow(f"exponent of generator {g} ({self.gens[g][0]}) exceeds {MAX_EXPONENT}")

    def const(self, c):
        return Poly(self, {0: c} if c else {})

    def _gen(self, key, kind, payload):
        g = self._index.get(key)
        if g is None:
            g = self._index[key] = len(self.gens)
            self.gens.append((kind, payload))
            self.guard |= 1 << (BITS * g + BITS - 1)
        return Poly(self, {1 << (BITS * g): 1})

    def leaf(self, name):
        return self._gen(("leaf", name), "leaf", name)

    def leaf_id(self, name):
        self.leaf(name)
        return self._index[("leaf", name)]

    def exp(self, p):
        p = self.const(p) if isinstance(p, int) else p
        return self._gen(("exp", p.key()), "exp", p)

    def log(self, p):
        p = self.const(p) if isinstance(p, int) else p
        return self._gen(("log", p.key()), "log", p)

    def inverse(self, p):
        if not p:
            raise ZeroDivisionError("division by the zero polynomial")
        return self._gen(("inv", p.key()), "inv", p)

    # -- derivation ----------------------------------------------------------------------------
    def depends(self, g, x):
        key = (g, x)
        if key not in self._depends:
            kind, payload = self.gens[g]
            if kind == "leaf":
                self._depends[key] = g == x
            else:
                self._depends[key] = any(self.depends(h, x) for h in self.gens_of(payload))
        return self._depends[key]

    def gens_of(self, p):
        acc = 0
        for m in p.terms:
            acc |= m
        out, g = [], 0
        while acc:
            if acc & MASK:
                out.append(g)
            acc >>= BITS
            g += 1
        return out

    def dgen(self, g, x):
        key = (g, x)
        if key not in self._dgen:
            kind, payload = self.gens[g]
            me = Poly(self, {1 << (BITS * g): 1})
            if kind == "leaf":
                d = self.const(1 if g == x else 0)
            elif kind == "exp":
                d = me * self.d(payload, x)
            elif kind == "log":
                d = self.d(payload, x) * self.inverse(payload)
            else:
                d = -(me * me) * self.d(payload, x)
            self._dgen[key] = d
        return self._dgen[key]

    def d(self, p, x):
        """dp/dx for a leaf generator id x (the chain rule over every generator of p)."""
        if isinstance(p, int):
            return self.const(0)
        out = self.const(0)
        for g in self.gens_of(p):
            if not self.depends(g, x):
                continue
            dg = self.dgen(g, x)
            if dg:
                out = out + self.partial(p, g) * dg
        return out

    def partial(self, p, g):
        shift = BITS * g
        unit = 1 << shift
        out = {}
        for m, c in p.terms.items():
            e = (m >> shift) & MASK
            if e:
                out[m - unit] = out.get(m - unit, 0) + c * e
        return Poly(self, out)

    # -- deciding zero ---------------------------------------------------------------------------
    def _power(self, g, e):
        key = (g, e)
        if key not in self._powers:
            self._powers[key] = self.const(1) if e == 0 else self._power(g, e - 1) * self.gens[g][1]
        return self._powers[key]

    def clear_inverses(self, p):
        """p * prod q**k over inverse generators 1/q, with every inverse generator eliminated."""
        while True:
            inverses = [g for g in self.gens_of(p) if self.gens[g][0] == "inv"]
            if not inverses:
                return p
            g = max(inverses)  # its q holds only older generators
            e = p.degree(g)
            shift = BITS * g
            by_power = {}
            for m, c in p.terms.items():
                t = (m >> shift) & MASK
                by_power.setdefault(t, {})[m - (t << shift)] = c
            out = self.const(0)
            for t, terms in by_power.items():
                out = out + Poly(self, terms) * self._power(g, e - t)
            p = out

    def is_zero(self, p):
        if isinstance(p, int):
            return p == 0
        return not p or all(not self.clear_inverses(part) for part in self.split_free(p))

    def split_free(self, p):
        """p's coefficients as a polynomial in its generators that no inverse generator's payload holds.

        Those generators are indeterminates independent of every inverse 1/q (q is built from the other
        generators only, exp and log payloads being opaque), so p == 0 iff each coefficient is zero: the
        same decision as clearing p whole, without multiplying terms by denominators they do not share
        (a sum over positions of per-row rational functions clears row by row)."""
        inner, todo = set(), [g for g in self.gens_of(p) if self.gens[g][0] == "inv"]
        while todo:
            g = todo.pop()
            if g in inner:
                continue
            inner.add(g)
            if self.gens[g][0] == "inv":
                todo.extend(self.gens_of(self.gens[g][1]))
        free = [g for g in self.gens_of(p) if g not in inner]
        if not free:
            return [p]
        mask = sum(MASK << (BITS * g) for g in free)
        groups = {}
        for m, c in p.terms.items():
            groups.setdefault(m & mask, {})[m & ~mask] = c
        return [Poly(self, terms) for terms in groups.values()]
