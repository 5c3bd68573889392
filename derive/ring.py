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

Sums, products and derivatives accumulate their terms in place, in one dictionary, and call the ring's
`check` as they go: a second derivative through the loss at the params level multiplies polynomials of
thousands of terms into millions, and the proof path's time budget must be able to stop it mid-product.
"""
from __future__ import annotations

from itertools import islice

BITS = 9
MAX_EXPONENT = (1 << (BITS - 1)) - 1
MASK = (1 << BITS) - 1
# Term products (or terms of a linear pass) between two calls of the ring's `check` (a proof path's time budget):
# a product of two polynomials of thousands of terms each runs for seconds, and so does a sum or a split of
# millions of terms, so the check cannot wait for the next operation.
CHECK_EVERY = 1 << 14


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
        return self._plus(other, 1)

    __radd__ = __add__

    def __neg__(self):
        return Poly(self.ring, {m: -c for m, c in self.terms.items()})

    def __sub__(self, other):
        return self._plus(other, -1)  # no negated copy of other (the fixed path's lhs - rhs, millions of terms)

    def _plus(self, other, sign):
        """self + sign * other."""
        other = self._lift(other)
        if other is NotImplemented:
            return other
        out = dict(self.terms)
        get = out.get
        for chunk in self.ring.chunks(other.terms.items()):
            for m, c in chunk:
                v = get(m, 0) + sign * c
                if v:
                    out[m] = v
                else:
                    out.pop(m, None)
        return Poly(self.ring, out)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        if isinstance(other, int):
            return Poly(self.ring, {m: c * other for m, c in self.terms.items()} if other else {})
        other = self._lift(other)
        if other is NotImplemented:
            return other
        out = {}
        self.ring.multiply_into(out, self.terms, other.terms)
        return self.ring.nonzero(out)

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

    def __init__(self, check=None):
        """`check`: called at every operation, every CHECK_EVERY term products and every CHECK_EVERY terms of a
        pass over one polynomial; it raises to abandon the computation (`derive.prove.check_budget`, the proof
        path's time budget, which holds in any thread). None: nothing is checked."""
        self.check = check or _unlimited
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

    # -- arithmetic in place ---------------------------------------------------------------------
    def chunks(self, items):
        """`items` (a sized collection) in lists of CHECK_EVERY, `check` called before each; a small one whole."""
        self.check()
        if len(items) <= CHECK_EVERY:
            yield items
            return
        it = iter(items)
        chunk = list(islice(it, CHECK_EVERY))
        while chunk:
            yield chunk
            self.check()
            chunk = list(islice(it, CHECK_EVERY))

    def multiply_into(self, out, a, b):
        """out += a * b for term dicts a, b ({monomial: coefficient}); zero coefficients stay in `out`.

        The longer factor is the inner loop, so the budget check between rows is rare next to the work."""
        if len(a) > len(b):
            a, b = b, a
        self.check()
        if not b:
            return
        get = out.get
        inner = b.items()
        rows = max(1, CHECK_EVERY // len(b))
        left = rows
        guard = self.guard
        if not self._may_overflow(a, b):
            guard = 0
        for m1, c1 in a.items():
            left -= 1
            if not left:
                self.check()
                left = rows
            if guard:
                for m2, c2 in inner:
                    m = m1 + m2
                    if m & guard:
                        self.overflow(m)
                    out[m] = get(m, 0) + c1 * c2
            else:
                for m2, c2 in inner:
                    m = m1 + m2
                    out[m] = get(m, 0) + c1 * c2

    def _may_overflow(self, a, b):
        """Whether some exponent of a or b is 128 or more: else no two can sum past MAX_EXPONENT, and the
        product skips the per-term overflow test (a fifth of its time with a few hundred generators)."""
        seen = 0
        for m in a:
            seen |= m
        for m in b:
            seen |= m
        return bool(seen & (self.guard | self.guard >> 1))

    def nonzero(self, out):
        """A Poly of accumulated terms, the coefficients that cancelled to 0 deleted in place: few cancel, and
        a copy of the rest costs as much as a pass of `multiply_into` over millions of terms."""
        for m in [m for m, c in out.items() if not c]:
            del out[m]
        return Poly(self, out)

    def add_all(self, items):
        """The sum of ring elements (and ints), accumulated in one dictionary: a chain of `+` copies the running
        total at every step, quadratic in the number of terms of a long sum. An int when every item is one."""
        out, rest, poly, added = {}, 0, False, 0
        get = out.get
        for p in items:
            if not isinstance(p, Poly):
                rest = p + rest
                continue
            poly = True
            added += len(p.terms)
            for chunk in self.chunks(p.terms.items()):
                for m, c in chunk:
                    out[m] = get(m, 0) + c
        if not poly:
            return rest
        # No two terms met (as in a sum over an index of entries of that index): every coefficient is one of the
        # items' own, none of them 0, so there is no zero to drop.
        total = Poly(self, out) if len(out) == added else self.nonzero(out)
        return total + rest if rest else total

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
        out = {}  # the chain rule's products accumulated in place (one dictionary, not a sum of copies)
        for g in self.gens_of(p):
            if not self.depends(g, x):
                continue
            dg = self.dgen(g, x)
            if dg:
                self.multiply_into(out, self.partial(p, g).terms, dg.terms)
        return self.nonzero(out)

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
            out = {}
            for t, terms in by_power.items():
                self.multiply_into(out, terms, self._power(g, e - t).terms)
            p = self.nonzero(out)

    def is_zero(self, p):
        if isinstance(p, int):
            return p == 0
        if not p:
            return True
        inverses = 0
        for g in self.gens_of(p):
            if self.gens[g][0] == "inv":
                inverses |= MASK << (BITS * g)
        for chunk in self.chunks(self._free_parts(p)):
            for terms in chunk:
                # A coefficient without an inverse generator is its own cleared form, zero iff its coefficients
                # are: decided without building a Poly to clear (a difference of millions of terms splits into
                # as many).
                if any(m & inverses for m in terms):
                    if self.clear_inverses(Poly(self, terms)):
                        return False
                elif any(terms.values()):
                    return False
        return True

    def split_free(self, p):
        """p's coefficients as a polynomial in its generators that no inverse generator's payload holds.

        Those generators are indeterminates independent of every inverse 1/q (q is built from the other
        generators only, exp and log payloads being opaque), so p == 0 iff each coefficient is zero: the
        same decision as clearing p whole, without multiplying terms by denominators they do not share
        (a sum over positions of per-row rational functions clears row by row)."""
        return [p if terms is p.terms else Poly(self, terms) for terms in self._free_parts(p)]

    def _free_parts(self, p):
        """`split_free` as term dictionaries."""
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
            return [p.terms]
        mask = sum(MASK << (BITS * g) for g in free)
        groups = {}
        get = groups.get
        for chunk in self.chunks(p.terms.items()):
            for m, c in chunk:
                key = m & mask
                group = get(key)
                if group is None:
                    groups[key] = {m - key: c}
                else:
                    group[m - key] = c
        return list(groups.values())


def _unlimited():
    """A ring without a time budget: nothing to check."""
