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
from .symbolic import ALL, LinearFeasibility, Space, Sym, context_key, symbolic_paths

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
                    if feasible(signs):
                        stack.append((signs, valid + still))
                continue
            total = space.field(0)
            for i in valid:
                total = total + paths[i][1]
            gap = total - target[seq]
            identities += 1
            holds = _vanishes(gap, assign, space, feasible)
            cell = Cell(seq, dict(assign), len(valid), holds)
            if not holds:
                cell.witness = _witness(assign, gap, space, feasible)
            cells.append(cell)
    return cells, identities


def _vanishes(gap, assign: dict, space: Space, feasible: LinearFeasibility) -> bool:
    """Whether a rational function is zero on the cell: identically, or once the cell's linear equalities are
    substituted — its atoms of sign 0, and the linear atoms and row entries the cell forces to 0 without saying
    so (``p ≥ q`` beside ``p = 0`` forces ``q = 0``: the exact LP finds that no other sign is possible)."""
    if gap == 0:
        return True
    zero = frozenset((0,))
    stated = [atom for atom, block in assign.items() if block == zero and space.linear_form(atom) is not None]
    if _substituted(gap.numer, stated, space) == 0:
        return True
    forced = [atom for atom in [*assign, *space.domain_signs] if space.linear_form(atom) is not None
              and assign.get(atom) != zero and _forced_zero(atom, assign, space, feasible)]
    return bool(forced) and _substituted(gap.numer, stated + forced, space) == 0


def _forced_zero(atom, assign: dict, space: Space, feasible: LinearFeasibility) -> bool:
    allowed = assign.get(atom, ALL) & space.domain_signs.get(atom, ALL)
    return 0 in allowed and not any(feasible({**assign, atom: frozenset((s,))}) for s in allowed if s)


def _substituted(numer, equalities: list, space: Space):
    """``numer`` with the linear ``equalities`` (atoms equal to 0) substituted one after another, each solved for a
    symbol it still holds."""
    equalities = list(equalities)
    while equalities and numer != 0:
        atom = equalities.pop()
        if atom.is_ground:
            continue
        monom, coeff = next((m, c) for m, c in atom.terms() if sum(m) == 1)
        gen = space.ring.gens[monom.index(1)]
        value = (-(atom - gen.mul_ground(coeff))).quo_ground(coeff)
        numer = numer.compose(gen, value)
        equalities = [e.compose(gen, value) for e in equalities]
    return numer


def _witness(assign: dict, gap, space: Space, feasible: LinearFeasibility) -> list[Fraction] | None:
    """An exact point of the cell where ``gap`` is non-zero: the LP's point of its linear conditions, then points
    mixed from it towards random points of the simplex (each checked exactly against every atom's block)."""
    ok, point = feasible.point(assign)
    if not ok:
        return None
    rng = random.Random(0)
    equalities = any(0 in block and len(block) == 1 for block in assign.values())
    for attempt in range(1 if equalities else WITNESS_TRIES):
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
