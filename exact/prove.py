"""Proofs of losslessness for every model pair of a shape and vocabulary (``specproof prove``, docs/proofs.md).

For a fixed topology, drafting scheme and vocabulary ``V``, every row the round can read is symbolic
(:class:`exact.symbolic.Space`). The round — drafting, the rule, and the completion of its output to ``H + 1``
tokens — runs on those rows with every random choice and every comparison a branch
(:func:`exact.symbolic.symbolic_paths`): a path ends in a sequence ``s ∈ Σ^(H+1)`` with a probability (a rational
function of the symbols) and the sign conditions it assumed on irreducible polynomials (atoms).

The space of model pairs is then cut into *cells* by the signs of the atoms the paths depend on — depth first,
one atom at a time, only as far as some path's validity is still open, and never into a cell whose linear
conditions cannot hold (the exact LP). In each cell the paths valid there are known, and losslessness is the
identity ``Σ_paths P(path) = q^(H+1)(s)`` for every ``s``, checked as an identity of rational functions (after
the cell's linear equalities are substituted). A cell where it fails gets a witness: an exact rational point of
the cell (the LP's point, then points mixed towards random ones, until every atom has the cell's sign) where
the two sides differ; the point's rows become a reproducer that the ordinary exact engine certifies LOSSY. A
failing cell without a witness (its non-linear conditions may have no solution) makes the verdict UNDECIDED,
never PROVED.
"""

from __future__ import annotations

import functools
import itertools
import random
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Sequence

from simulator.drafting import FixedShape, check_drafting
from simulator.errors import InvalidParameterError, SymbolicError, VerifierFailure
from simulator.limits import computation
from simulator.speculation import complete, speculate
from simulator.trees import Topology
from simulator.verifiers import VERIFIERS

from .reproducer import Reproducer
from .subject import Subject, subject
from .symbolic import ALL, LinearFeasibility, Space, Sym, context_key, normalise, symbolic_paths

VERDICTS = ("PROVED", "REFUTED", "UNDECIDED")
#: Random points tried per failing cell before it is called UNDECIDED.
WITNESS_TRIES = 200


class SymbolicView:
    """The round's view of the symbolic rows (what :class:`simulator.models.ModelView` offers the engines)."""

    arithmetic = "symbolic"
    context: tuple[int, ...] = ()

    def __init__(self, space: Space) -> None:
        self.space = space
        self.vocab = space.vocab
        self.key = ("symbolic", id(space))

    def p(self, suffix) -> tuple[Sym, ...]:
        return self.space.row("p", tuple(suffix))

    def q(self, suffix) -> tuple[Sym, ...]:
        return self.space.row("q", tuple(suffix))

    def prefetch(self, name: str, suffixes) -> None:
        return None


@dataclass
class Cell:
    """One cell of one output sequence: the atoms' sign blocks, the paths valid there, and whether the identity
    holds."""

    sequence: tuple[int, ...]
    signs: dict
    paths: int
    holds: bool
    witness: list[Fraction] | None = None


@dataclass
class Proof:
    """The verdict and the evidence (``to_json`` is the certificate a second program can re-check)."""

    verdict: str
    verifier: str
    config: dict
    paths: int
    cells: list[Cell]
    space: Space
    seconds: float
    reason: str = ""
    witness: Reproducer | None = None
    witness_tvd: object = None
    identities: int = 0
    sequences: list[tuple[int, ...]] = field(default_factory=list)

    def to_json(self) -> dict:
        names = self.space.names

        cells = [{"sequence": list(c.sequence),
                  "signs": {str(a.as_expr()): sorted(b) for a, b in sorted(c.signs.items(), key=lambda t: str(t[0]))},
                  "valid_paths": c.paths, "identity_holds": c.holds,
                  "witness": None if c.witness is None else [f"{v.numerator}/{v.denominator}" for v in c.witness]}
                 for c in self.cells]
        rows = {f"{name}({context_key(ctx) or 'root'})": [str(v.value.as_expr()) for v in self.space.row(name, ctx)]
                for name, ctx in self.space.slots}
        return {"specproof": "proof", "verdict": self.verdict, "verifier": self.verifier, "config": self.config,
                "symbols": names, "rows": rows, "domain": "every symbol ≥ 0 and every row's last entry ≥ 0",
                "paths": self.paths, "cells": cells, "identities": self.identities, "reason": self.reason,
                "seconds": round(self.seconds, 3),
                "witness": None if self.witness is None else self.witness.to_json()}


def _contexts(vocab: int, depth: int) -> list[tuple[int, ...]]:
    return [c for d in range(depth + 1) for c in itertools.product(range(vocab), repeat=d)]


def _unsupported(name: str) -> str | None:
    """Why a built-in rule cannot run symbolically, or ``None``."""
    spec = VERIFIERS.get(name)
    if spec is None:
        return None
    if spec.float_only:
        return f"{name} computes with irrational numbers (the normal CDF)"
    if name.endswith("opt") or name.endswith("gr"):
        return f"{name} is defined by a flow solved numerically (a maximum flow or GR's dual), not by comparisons"
    if "kseq" in name:
        return (f"{name} finds K-SEQ's ρ* by a 60-step bisection, each step a comparison: the symbolic run would "
                "branch 2^60 ways (ρ* as a symbol with its defining equation is not built yet)")
    return None


def prove(verifier: str | Subject, topology: Topology, scheme: str, vocab: int) -> Proof:
    """Prove or refute losslessness of ``verifier`` for every model pair of ``topology`` (drafted by ``scheme``)
    over ``vocab`` tokens. Raises :class:`SymbolicError` for a rule the symbolic run cannot follow."""
    started = time.perf_counter()
    what = subject(verifier, "verifier")
    reason = _unsupported(what.name)
    if reason is not None:
        raise SymbolicError("verifier", reason)
    check_drafting(scheme)
    if scheme not in what.schemes:
        raise InvalidParameterError("drafting", f"{what.name} is defined under {list(what.schemes)}, not {scheme!r}")
    height = topology.height
    space = Space(vocab, _contexts(vocab, height - 1), _contexts(vocab, height))
    view = SymbolicView(space)
    drafter = FixedShape(topology, scheme)
    feasible = LinearFeasibility(space)

    def program(rng):
        return complete(speculate(view, drafter, what.fn, rng), view, height, rng)

    paths = []
    with computation():
        try:
            for result, prob, signs in symbolic_paths(space, program, feasible):
                paths.append((result, prob, signs))
        except VerifierFailure as err:
            if isinstance(err.error, (SymbolicError, ZeroDivisionError)):
                raise SymbolicError("verifier", f"{what.name}: {err.error}") from err
            raise
    sequences = list(itertools.product(range(vocab), repeat=height + 1))
    target = {s: _joint(space, s) for s in sequences}
    cells, identities = _check_cells(paths, target, sequences, space, feasible)
    config = {"topology": topology.name, "parents": list(topology.parents), "drafting": scheme, "vocab": vocab}
    proof = Proof("PROVED", what.name, config, len(paths), cells, space, 0.0, identities=identities,
                  sequences=sequences)
    failing = [c for c in cells if not c.holds]
    witnessed = [c for c in failing if c.witness is not None]
    if witnessed:
        proof.verdict = "REFUTED"
        proof.witness = Reproducer(vocab, *(space.rows_at(witnessed[0].witness)[n] for n in ("p", "q")), scheme,
                                   what.description, tuple(topology.parents))
        cert = proof.witness.certify()
        proof.witness_tvd = cert.tvd
        if cert.lossless:  # the symbolic run and the exact engine disagree: an engine bug, never a verdict
            raise RuntimeError(f"prove: the witness of a failing cell certifies LOSSLESS ({what.name})")
        proof.reason = "the identity fails on a cell with an exact rational witness"
    elif failing:
        proof.verdict = "UNDECIDED"
        proof.reason = (f"the identity fails on {len(failing)} cell(s) whose non-linear conditions gave no witness "
                        f"in {WITNESS_TRIES} points (they may be empty)")
    else:
        proof.reason = (f"the identity holds on all {len(cells)} cells: lossless for every model pair of this shape "
                        f"and vocabulary (V = {vocab}) under {scheme} drafting")
    proof.seconds = time.perf_counter() - started
    return proof


def _joint(space: Space, sequence: Sequence[int]):
    prob = space.one
    for k, token in enumerate(sequence):
        prob = prob * space.row("q", tuple(sequence[:k]))[token].value
    return prob


def _status(signs: dict, assign: dict):
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
    """A cell's conditions with its linear equalities substituted into every other condition (a non-linear atom
    often turns linear: ``p0·(…) + q0`` is ``q0`` once ``p0 = 0``), the domain's ``≥ 0`` conditions included, until
    no linear equality is left: ``conditions`` (atom → block) and the substitutions made (symbol, value), in order.
    ``None`` when a condition became a constant of the wrong sign."""

    def __init__(self, conditions: dict, substitutions: list) -> None:
        self.conditions = conditions
        self.substitutions = substitutions

    @classmethod
    def of(cls, assign: dict, space: Space) -> "Reduced | None":
        conditions = {atom: block for atom, block in space.domain_signs.items()}
        for atom, block in assign.items():
            conditions[atom] = conditions.get(atom, ALL) & block
        substitutions = []
        while True:
            if any(not block for block in conditions.values()):
                return None
            equality = next((a for a, b in conditions.items() if b == frozenset((0,)) and not a.is_ground
                             and space.linear_form(a) is not None), None)
            if equality is None:
                derived = _propagate(conditions)
                if derived is None:
                    return None
                if not derived:
                    return cls(conditions, substitutions)
                for atom, block in derived.items():
                    conditions[atom] = block
                continue
            gen, value = _solve(equality, space)
            substitutions.append((gen, value))
            reduced: dict = {}
            for atom, block in conditions.items():
                if atom == equality:
                    continue
                image = atom.compose(gen, value)
                if image.is_ground:
                    if _sign(Fraction(int(image.LC.numerator), int(image.LC.denominator))) not in block:
                        return None
                    continue
                sign, norm = normalise(image)
                flipped = block if sign > 0 else frozenset(-s for s in block)
                reduced[norm] = reduced.get(norm, ALL) & flipped
            conditions = reduced

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
    """A linear atom ``= 0`` solved for its first symbol: ``(symbol, value)``."""
    monom, coeff = next((m, c) for m, c in atom.terms() if sum(m) == 1)
    gen = space.ring.gens[monom.index(1)]
    return gen, (-(atom - gen.mul_ground(coeff))).quo_ground(coeff)


def _check_cells(paths: list, target: dict, sequences: list, space: Space, feasible: LinearFeasibility
                 ) -> tuple[list[Cell], int]:
    """For each output sequence, split the space until every path ending in it is known valid or not, and check
    the identity in each cell (a sequence's cells need only the atoms of its own paths)."""
    cells: list[Cell] = []
    identities = 0
    for seq in sequences:
        mine = [i for i, path in enumerate(paths) if path[0] == seq]
        stack = [({}, mine)]
        while stack:
            assign, live = stack.pop()
            valid, still, split = [], [], None
            for i in live:
                status = _status(paths[i][2], assign)
                if status is True:
                    valid.append(i)
                elif status is not False:
                    still.append(i)
                    split = split if split is not None else status
            if split is not None:
                domain = space.domain_signs.get(split, ALL)
                for block in reversed(_blocks(split, paths, still, domain)):
                    signs = {**assign, split: block}
                    reduced = Reduced.of(signs, space)
                    if reduced is not None and reduced.feasible(feasible):
                        stack.append((signs, valid + still))
                continue
            total = space.field(0)
            for i in valid:
                total = total + paths[i][1]
            gap = total - target[seq]
            identities += 1
            reduced = Reduced.of(assign, space)
            if reduced is None:  # the cell is empty
                continue
            holds = gap == 0 or _vanishes(gap.numer, reduced, space, feasible)
            factor = None if holds else _open_factor(reduced, assign)
            if factor is not None:  # split on a factor of a product condition: the cell may be degenerate
                for sign in sorted(reduced.conditions.get(factor, ALL)):
                    signs = {**assign, factor: frozenset((sign,))}
                    again = Reduced.of(signs, space)
                    if again is not None and again.feasible(feasible):
                        stack.append((signs, valid))
                continue
            cell = Cell(seq, dict(assign), len(valid), holds)
            if not holds:
                cell.witness = _witness(assign, gap, reduced, space, feasible)
            cells.append(cell)
    return cells, identities


def _vanishes(numer, reduced: Reduced, space: Space, feasible: LinearFeasibility) -> bool:
    """Whether a polynomial is zero on the cell: once the cell's equalities are substituted, or once the linear
    conditions the cell forces to 0 without saying so are added (``p ≥ q`` beside ``p = 0`` forces ``q = 0``: the
    exact LP of the relaxation finds no other sign possible) and the reduction is run again."""
    while True:
        image = reduced.substitute(numer)
        if image == 0 or _eliminated(image, reduced, space) == 0:
            return True
        forced = [atom for atom, block in reduced.conditions.items() if block != frozenset((0,)) and 0 in block
                  and not any(feasible({**reduced.conditions, atom: frozenset((s,))}) for s in block if s)]
        if not forced:
            return False
        again = Reduced.of({**reduced.conditions, **{a: frozenset((0,)) for a in forced}}, space)
        if again is None:
            return True  # the cell is empty
        reduced = Reduced(again.conditions, reduced.substitutions + again.substitutions)


def _eliminated(poly, reduced: Reduced, space: Space):
    """``poly`` with the cell's non-linear equalities used to eliminate symbols, one after another: an equality
    ``a·x + b = 0`` linear in a symbol ``x`` whose coefficient ``a`` cannot vanish in the cell (constant, or every
    factor of a sign that excludes 0) turns ``poly`` of degree ``d`` in ``x`` into ``a^d · poly(x = −b/a)`` — zero
    exactly where ``poly`` is — and the other equalities likewise. Zero means ``poly`` vanishes on the cell."""
    equalities = [a for a, b in reduced.conditions.items() if b == frozenset((0,))]
    progress = True
    while progress and poly != 0 and equalities:
        progress = False
        for atom in equalities:
            found = _linear_symbol(atom, reduced, space)
            if found is None:
                continue
            i, a, b = found
            poly = _homogenised(poly, i, a, b, space)
            equalities = [e for e in (_homogenised(e, i, a, b, space) for e in equalities if e is not atom) if e != 0]
            progress = True
            break
    return poly


def _linear_symbol(atom, reduced: Reduced, space: Space):
    """``(i, a, b)`` with ``atom = a·x_i + b`` and ``a`` non-zero throughout the cell, or ``None``."""
    for i, gen in enumerate(space.ring.gens):
        if atom.degree(gen) != 1:
            continue
        a, b = _split(atom, i, space)
        if a.is_ground or all(reduced.conditions.get(normalise(f)[1], ALL) <= frozenset((-1, 1))
                              for f, _ in a.factor_list()[1]):
            return i, a, b
    return None


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


def _witness(assign: dict, gap, reduced: Reduced | None, space: Space, feasible: LinearFeasibility
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
            candidate = [(1 - mix) * a + mix * b for a, b in zip(point, _random_point(space, rng))]
        if all(_sign(space.evaluate(atom, candidate)) in block for atom, block in assign.items()) and \
                space.evaluate(gap.numer, candidate) != 0 and space.evaluate(gap.denom, candidate) != 0:
            return candidate
    return None


def _random_point(space: Space, rng: random.Random) -> list[Fraction]:
    point = [Fraction(0)] * len(space.names)
    for idx in space.slots.values():
        weights = [rng.randint(1, 12) for _ in range(len(idx) + 1)]
        total = sum(weights)
        for i, w in zip(idx, weights):
            point[i] = Fraction(w, total)
    return point


def _sign(value: Fraction) -> int:
    return (value > 0) - (value < 0)
