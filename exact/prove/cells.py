"""The cell decomposition behind a symbolic proof (:func:`check_cells`; docs/proofs.md): the space of model pairs
split by the signs its paths assumed, and in each cell the law's identity checked exactly."""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from .rational_lp import satisfiable
from .symbolic import ALL, LinearFeasibility, Space, normalise, rational

#: Random points tried per failing cell before it is called UNDECIDED.
WITNESS_TRIES = 200


@dataclass
class Cell:
    """One cell of one output sequence: the atoms' sign blocks, the paths valid there, and whether the identity
    holds."""

    sequence: tuple[int, ...]
    signs: dict
    paths: int
    holds: bool
    witness: list[Fraction] | None = None


def path_valid(signs: dict, assign: dict) -> bool:
    """Whether a path with sign conditions ``signs`` is valid throughout the cell ``assign``."""
    return path_status(signs, assign) is True


def path_status(signs: dict, assign: dict):
    """``True`` (valid in the cell), ``False`` (ruled out) or an atom still to split on. ``assign`` gives each
    split atom a block of signs that every path's allowed set either contains or misses."""
    open_atom = None
    for atom, allowed in signs.items():
        block = assign.get(atom)
        if block is not None:
            if not block & allowed:
                return False
        elif allowed != ALL and open_atom is None:
            open_atom = atom
    return True if open_atom is None else open_atom


def _blocks(atom, paths: list, live: list[int], domain: frozenset) -> list[frozenset]:
    """The coarsest split of the atom's possible signs (``domain``) that decides every live path: two signs share
    a block when no path allows one without the other."""
    blocks = [frozenset((s,)) for s in sorted(domain)]
    merged: list[frozenset] = []
    for block in blocks:
        sign = next(iter(block))
        for i, other in enumerate(merged):
            o = next(iter(other))
            if all((sign in paths[j][2].get(atom, ALL)) == (o in paths[j][2].get(atom, ALL)) for j in live):
                merged[i] = other | block
                break
        else:
            merged.append(block)
    return merged


class Reduced:
    """A cell's conditions, the domain's ``≥ 0`` included, simplified by its equalities until nothing changes: an
    equality with a symbol of degree 1 and a constant coefficient is solved for it and substituted into every other
    condition (a non-linear atom often turns linear: ``p0·(…) + q0`` is ``q0`` once ``p0 = 0``); every other condition
    is replaced by its remainder modulo the remaining equalities (the same value wherever they hold); a product
    condition narrows its factors' signs (:func:`_propagate`). ``conditions`` (atom → block) and the substitutions
    made (symbol, value), in order; :meth:`of` gives ``None`` when a condition cannot hold."""

    def __init__(self, conditions: dict, substitutions: list) -> None:
        self.conditions = conditions
        self.substitutions = substitutions

    @classmethod
    def of(cls, assign: dict, space: Space) -> "Reduced | None":
        conditions = {atom: block for atom, block in space.domain_signs.items()}
        for atom, block in assign.items():
            conditions[atom] = conditions.get(atom, ALL) & block
        substitutions = []
        zero = frozenset((0,))
        while True:
            if any(not block for block in conditions.values()):
                return None
            solvable = next(((a, found) for a, b in conditions.items() if b == zero and not a.is_ground
                             for found in [_solve(a, space)] if found is not None), None)
            if solvable is not None:
                equality, (gen, value) = solvable
                substitutions.append((gen, value))
                conditions = _mapped(conditions, lambda atom: atom.compose(gen, value), skip=equality)
            else:
                equalities = [a for a, b in conditions.items() if b == zero and not a.is_ground]
                remainders = {a: a.rem(equalities) for a, b in conditions.items() if b != zero} if equalities else {}
                if any(r != a for a, r in remainders.items()):
                    conditions = _mapped(conditions, lambda atom: remainders.get(atom, atom))
                else:
                    derived = _propagate(conditions)
                    if derived is None:
                        return None
                    if not derived:
                        return cls(conditions, substitutions)
                    conditions.update(derived)
            if conditions is None:
                return None

    @property
    def equalities(self) -> list:
        """The cell's equalities no substitution removed (non-linear ones)."""
        return [a for a, b in self.conditions.items() if b == frozenset((0,)) and not a.is_ground]

    def feasible(self, lp: LinearFeasibility) -> bool:
        return lp(self.conditions)

    def substitute(self, poly):
        for gen, value in self.substitutions:
            poly = poly.compose(gen, value)
        return poly

    def point(self, lp: LinearFeasibility, space: Space) -> list[Fraction] | None:
        """An exact point of the cell's linear part, the substituted symbols filled in."""
        ok, point = lp.point(self.conditions)
        if not ok:
            return None
        for gen, value in reversed(self.substitutions):
            point[space.ring.gens.index(gen)] = space.evaluate(value, point)
        return point


@functools.lru_cache(maxsize=65536)
def _factors(atom) -> tuple[int, tuple[tuple[object, int], ...]]:
    """``atom`` as ``sign · Π factor^multiplicity`` over normalised irreducible factors."""
    coeff, factors = atom.factor_list()
    sign, out = (1 if coeff > 0 else -1), []
    for factor, multiplicity in factors:
        s, norm = normalise(factor)
        sign *= s ** multiplicity
        out.append((norm, multiplicity))
    return sign, tuple(out)


def _propagate(conditions: dict) -> dict | None:
    """Signs that a condition on a product forces on its factors (``q·(r − 1) ≥ 0`` with ``q ≥ 0``, ``r ≤ 1``
    forces one of them to 0, and with ``q > 0`` forces ``r = 1``): the narrower blocks found, ``None`` if some
    condition cannot hold."""
    derived: dict = {}
    for atom, block in list(conditions.items()):
        if block == ALL or atom.is_ground:
            continue
        sign, factors = _factors(atom)
        if len(factors) < 2 and all(m == 1 for _, m in factors):
            continue
        known = [conditions.get(f, ALL) & derived.get(f, ALL) for f, _ in factors]
        seen: list[set[int]] = [set() for _ in factors]
        for combo in itertools.product(*(sorted(k) for k in known)):
            product = sign
            for (_, m), value in zip(factors, combo):
                product *= value ** m
            if product in block:
                for i, value in enumerate(combo):
                    seen[i].add(value)
        if not seen[0]:
            return None
        for (factor, _), allowed, found in zip(factors, known, seen):
            if frozenset(found) != allowed:
                derived[factor] = frozenset(found)
    return derived


def _open_factor(reduced: "Reduced", assign: dict):
    """A factor of a product condition whose sign the cell leaves open (splitting on it may decide the cell)."""
    for atom, block in reduced.conditions.items():
        if block == ALL or atom.is_ground:
            continue
        _, factors = _factors(atom)
        if len(factors) < 2:
            continue
        for factor, _ in factors:
            if factor not in assign and len(reduced.conditions.get(factor, ALL)) > 1:
                return factor
    return None


def _solve(atom, space: Space):
    """An equality ``atom = 0`` solved polynomially: ``(symbol, value)`` for a symbol of degree 1 whose coefficient
    is a constant (every linear atom has one), or ``None``."""
    for i, gen in enumerate(space.ring.gens):
        if atom.degree(gen) != 1:
            continue
        a, b = _split(atom, i, space)
        if a.is_ground:
            return gen, (-b).quo_ground(a.LC)
    return None


def _mapped(conditions: dict, image, skip=None) -> dict | None:
    """The conditions with each atom replaced by ``image(atom)`` (normalised; blocks flipped with the sign, merged
    where two images agree); ``None`` if one became a constant of a sign its block excludes."""
    out: dict = {}
    for atom, block in conditions.items():
        if atom == skip:
            continue
        new = image(atom)
        if new.is_ground:
            value = rational(new.LC) if new else Fraction(0)
            if _sign(value) not in block:
                return None
            continue
        sign, norm = normalise(new)
        flipped = block if sign > 0 else frozenset(-s for s in block)
        out[norm] = out.get(norm, ALL) & flipped
    return out


def check_cells(paths: list, target: dict, sequences: list, space: Space, feasible: LinearFeasibility,
                on_cell: Callable[[Cell, int], None] | None = None) -> tuple[list[Cell], int]:
    """For each output sequence, split the space until every path ending in it is known valid or not, and check
    the identity in each cell (a sequence's cells need only the atoms of its own paths). A failing cell is searched
    for a witness, and if it has none, for the equalities it forces (:func:`vanishing_terms`), until one witness is
    found; after that, failing cells are recorded as failing without a search (the verdict is REFUTED).
    ``on_cell(cell, open)`` hears of each cell as it is decided, with the regions still open (split but not
    decided, and the sequences not started): the prover's progress and its ``--max-cells`` count.

    The split runs depth first by the signs of the atoms the paths assumed, only while some path's validity is open,
    never into a cell the relaxation rules out (:class:`exact.prove.symbolic.LinearFeasibility`). In each cell
    ``Σ P(path) = q^(H+1)(s)`` is checked as an identity of rational functions (:class:`Reduced`, :func:`vanishes`);
    a failing cell is searched for an exact witness point (:func:`witness`).
    """
    cells: list[Cell] = []
    identities = 0
    memo: dict[frozenset, Reduced | None] = {}
    refuted = False

    def reduce(signs: dict) -> Reduced | None:  # sequences split on the same atoms: one reduction per cell
        key = frozenset(signs.items())
        if key not in memo:
            memo[key] = Reduced.of(signs, space)
        return memo[key]

    for started, seq in enumerate(sequences, 1):
        mine = [i for i, path in enumerate(paths) if path[0] == seq]
        stack = [({}, mine)]
        while stack:
            assign, live = stack.pop()
            valid, still, split = [], [], None
            for i in live:
                status = path_status(paths[i][2], assign)
                if status is True:
                    valid.append(i)
                elif status is not False:
                    still.append(i)
                    split = split if split is not None else status
            if split is not None:
                domain = space.domain_signs.get(split, ALL)
                for block in reversed(_blocks(split, paths, still, domain)):
                    signs = {**assign, split: block}
                    reduced = reduce(signs)
                    if reduced is not None and reduced.feasible(feasible):
                        stack.append((signs, valid + still))
                continue
            total = space.field(0)
            for i in valid:
                total = total + paths[i][1]
            gap = total - target[seq]
            identities += 1
            reduced = reduce(assign)
            if reduced is None:  # the cell is empty
                continue
            holds = gap == 0 or vanishes(gap.numer, reduced, space, feasible)
            factor = None if holds else _open_factor(reduced, assign)
            if factor is not None:  # split on a factor of a product condition: the cell may be degenerate
                for sign in sorted(reduced.conditions.get(factor, ALL)):
                    signs = {**assign, factor: frozenset((sign,))}
                    again = reduce(signs)
                    if again is not None and again.feasible(feasible):
                        stack.append((signs, valid))
                continue
            cell = Cell(seq, dict(assign), len(valid), holds)
            if not holds and not refuted:  # once refuted, a failing cell is recorded as failing, not searched
                cell.witness = witness(assign, gap, reduced, space, feasible)
                refuted = cell.witness is not None
                forced = {} if refuted else vanishing_terms(reduced)
                if forced is None:  # the cell is empty
                    continue
                if forced:  # a degenerate cell: decide it again with the equalities it forces
                    stack.append(({**assign, **forced}, valid))
                    continue
            cells.append(cell)
            if on_cell is not None:
                on_cell(cell, len(stack) + len(sequences) - started)
    return cells, identities


def vanishes(numer, reduced: Reduced, space: Space, feasible: LinearFeasibility) -> bool:
    """Whether a polynomial is zero on the cell: once the cell's equalities are substituted, or once the linear
    conditions the cell forces to 0 without saying so are added (``p ≥ q`` beside ``p = 0`` forces ``q = 0``: the
    exact LP of the relaxation finds no other sign possible) and the reduction is run again."""
    while True:
        image = reduced.substitute(numer)
        if image != 0 and reduced.equalities:
            image = image.rem(reduced.equalities)  # equal to the gap wherever the equalities hold
        if image == 0 or _eliminated(image, reduced, space, feasible) == 0:
            return True
        forced = [atom for atom, block in reduced.conditions.items() if block != frozenset((0,)) and 0 in block
                  and not any(feasible({**reduced.conditions, atom: frozenset((s,))}) for s in block if s)]
        if not forced:
            return False
        again = Reduced.of({**reduced.conditions, **{a: frozenset((0,)) for a in forced}}, space)
        if again is None:
            return True  # the cell is empty
        reduced = Reduced(again.conditions, reduced.substitutions + again.substitutions)


def vanishing_terms(reduced: Reduced) -> dict | None:
    """Equalities a degenerate cell forces without stating them. Its conditions of known sign give terms ``≥ 0``
    on the cell (``g`` for ``g ≥ 0``, ``−g`` for ``g ≤ 0``) and so do their pairwise products; if a combination
    ``Σ λ_k·T_k`` with ``λ ≥ 0``, ``Σ λ = 1`` is identically zero (the exact LP over the coefficients of every
    monomial: a Handelman certificate of degree 2), every term with ``λ_k > 0`` is zero throughout the cell. Thus
    ``q0·r + q1·(1 − r) ≥ 1`` beside ``q0 ≤ 1``, ``q1 ≤ 1``, ``0 ≤ r ≤ 1`` forces ``r·(1 − q0) = 0`` and
    ``(1 − r)·(1 − q1) = 0``: the four terms sum to 0. The cell's non-linear equalities ``g = 0`` join with
    multipliers of either sign, outside the normalisation (``Σ λ_k·T_k + Σ μ_j·g_j ≡ 0`` still makes
    ``Σ λ_k·T_k = 0`` on the cell): ``d·p + (1 − d)·(1 − p) − g ≡ 0`` for ``g = 2dp − d − p + 1 = 0`` uses the
    strictly positive terms ``d·p`` and ``(1 − d)·(1 − p)`` where ``0 < d, p < 1``, so that cell is empty. Returns
    the new ``= 0`` conditions (``{}``: none found), or ``None`` when a term forced to 0 is strictly positive on the
    cell (the cell is empty)."""
    nonneg: list[tuple[object, bool]] = []
    for atom, block in reduced.conditions.items():
        if atom.is_ground or block == ALL or block == frozenset((0,)):
            continue
        if block <= frozenset((0, 1)):
            nonneg.append((atom, block == frozenset((1,))))
        elif block <= frozenset((-1, 0)):
            nonneg.append((-atom, block == frozenset((-1,))))
    if not nonneg:
        return {}
    one = nonneg[0][0].ring.one
    terms = [(one, True)] + nonneg + [(a * b, sa and sb) for (a, sa), (b, sb) in itertools.combinations(nonneg, 2)]
    equalities = [e for g in reduced.equalities for e in (g, -g)]  # a free multiplier: two columns ≥ 0
    monomials: dict = {}
    columns = []
    for poly in [t for t, _ in terms] + equalities:
        columns.append({monomials.setdefault(monom, len(monomials)): rational(c)
                        for monom, c in poly.terms()})
    zero = Fraction(0)
    forms = [([column.get(m, zero) for column in columns], zero, "=") for m in range(len(monomials))]
    forms.append(([Fraction(1)] * len(terms) + [zero] * len(equalities), Fraction(-1), "="))
    ok, weights = satisfiable(forms, len(columns))
    if not ok:
        return {}
    forced: dict = {}
    for (poly, strict), weight in zip(terms, weights):
        if weight > 0:
            if strict:
                return None
            atom = normalise(poly)[1]
            if reduced.conditions.get(atom) != frozenset((0,)):  # only what the cell does not state already:
                forced[atom] = frozenset((0,))  # each round adds an equality, so the search ends
    return forced


def _eliminated(poly, reduced: Reduced, space: Space, feasible: LinearFeasibility):
    """``poly`` with the cell's non-linear equalities used to eliminate symbols, one after another: an equality
    ``a·x + b = 0`` linear in a symbol ``x`` whose coefficient ``a`` cannot vanish in the cell (constant, or every
    factor of a sign that excludes 0) turns ``poly`` of degree ``d`` in ``x`` into ``a^d · poly(x = −b/a)`` — zero
    exactly where ``poly`` is — and the other equalities likewise. Zero means ``poly`` vanishes on the cell."""
    equalities = [a for a, b in reduced.conditions.items() if b == frozenset((0,))]
    progress = True
    while progress and poly != 0 and equalities:
        progress = False
        for atom in equalities:
            found = _linear_symbol(atom, reduced, space, feasible)
            if found is None:
                continue
            i, a, b = found
            poly = _homogenised(poly, i, a, b, space)
            equalities = [e for e in (_homogenised(e, i, a, b, space) for e in equalities if e is not atom) if e != 0]
            progress = True
            break
    return poly


def _linear_symbol(atom, reduced: Reduced, space: Space, feasible: LinearFeasibility):
    """``(i, a, b)`` with ``atom = a·x_i + b`` and ``a`` non-zero throughout the cell — constant, or every factor of
    ``a`` of a sign that excludes 0, or one the cell cannot hold at 0 (the exact LP of the relaxation) — or
    ``None``."""
    for i, gen in enumerate(space.ring.gens):
        if atom.degree(gen) != 1:
            continue
        a, b = _split(atom, i, space)
        if a.is_ground or all(_nonzero(normalise(f)[1], reduced, feasible) for f, _ in a.factor_list()[1]):
            return i, a, b
    return None


def _nonzero(factor, reduced: Reduced, feasible: LinearFeasibility) -> bool:
    block = reduced.conditions.get(factor, ALL)
    return 0 not in block or not feasible({**reduced.conditions, factor: frozenset((0,))})


def _homogenised(poly, i: int, a, b, space: Space):
    """``a^d · poly(x_i = −b/a)`` for ``poly`` of degree ``d`` in ``x_i``."""
    parts = _powers(poly, i, space)
    degree = max(parts)
    one = space.ring.one
    return sum((c * ((-b) ** k if k else one) * (a ** (degree - k) if degree - k else one)
                for k, c in parts.items()), space.ring.zero)


def _split(atom, i: int, space: Space):
    """``atom = a·x_i + b`` (degree 1 in ``x_i``): ``(a, b)``."""
    parts = _powers(atom, i, space)
    return parts.get(1, space.ring.zero), parts.get(0, space.ring.zero)


def _powers(poly, i: int, space: Space) -> dict:
    """``poly = Σ_k c_k · x_i^k``: ``{k: c_k}`` (each ``c_k`` free of ``x_i``)."""
    out: dict = {}
    for monom, coeff in poly.terms():
        k = monom[i]
        rest = monom[:i] + (0,) + monom[i + 1:]
        out[k] = out.get(k, space.ring.zero) + space.ring({rest: coeff})
    return out


def witness(assign: dict, gap, reduced: Reduced | None, space: Space, feasible: LinearFeasibility
             ) -> list[Fraction] | None:
    """An exact point of the cell where ``gap`` is non-zero: the LP's point of its (reduced) linear conditions,
    then points mixed from it towards random points of the simplex (each checked exactly against every atom's
    block, on the original atoms)."""
    point = None if reduced is None else reduced.point(feasible, space)
    if point is None:
        return None
    rng = random.Random(0)
    for attempt in range(WITNESS_TRIES):
        candidate = point
        if attempt:
            mix = Fraction(1, 2 ** (attempt % 12 + 1))
            candidate = [(1 - mix) * a + mix * b for a, b in zip(point, random_point(space, rng))]
        if all(_sign(space.evaluate(atom, candidate)) in block for atom, block in assign.items()) and \
                space.evaluate(gap.numer, candidate) != 0 and space.evaluate(gap.denom, candidate) != 0:
            return candidate
    return None


def random_point(space: Space, rng: random.Random) -> list[Fraction]:
    """A random exact point of the space: every row of small positive integer weights (1 to 12), normalised."""
    point = [Fraction(0)] * len(space.names)
    for idx in space.slots.values():
        weights = [rng.randint(1, 12) for _ in range(len(idx) + 1)]
        total = sum(weights)
        for i, w in zip(idx, weights):
            point[i] = Fraction(w, total)
    return point


def _sign(value: Fraction) -> int:
    return (value > 0) - (value < 0)
