"""Proofs of losslessness for every model pair of a shape and vocabulary (``specproof prove``, docs/proofs.md).

For a fixed topology, drafting scheme and vocabulary ``V``, every row the round can read is symbolic
(:class:`exact.symbolic.Space`). The round — drafting, the rule, and the completion of its output to ``H + 1``
tokens — runs on those rows with every random choice and every comparison a branch
(:func:`exact.symbolic.symbolic_paths`): a path ends in a sequence ``s ∈ Σ^(H+1)`` with a probability (a rational
function of the symbols) and the sign conditions it assumed on irreducible polynomials (atoms).

The space of model pairs is then cut into *cells* by the signs of the atoms the paths depend on
(:mod:`exact.cells`); in each cell losslessness is the identity ``Σ_paths P(path) = q^(H+1)(s)`` for every ``s``,
checked as an identity of rational functions. A cell where it fails gets a witness: an exact rational point where
the two sides differ, whose rows become a reproducer that the ordinary exact engine certifies LOSSY (REFUTED). A
failing cell without a witness (its non-linear conditions may have no solution) makes the verdict UNDECIDED,
never PROVED.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Sequence

from simulator.drafting import FixedShape, check_drafting
from simulator.errors import InvalidParameterError, SymbolicError, VerifierFailure
from simulator.limits import computation
from simulator.speculation import complete, speculate
from simulator.trees import Topology
from simulator.verifiers import VERIFIERS

from .cells import WITNESS_TRIES, Cell, check_cells
from .reproducer import Reproducer
from .subject import Subject, subject
from .symbolic import LinearFeasibility, Space, Sym, context_key, symbolic_paths


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
    """Why the registry says a built-in rule cannot run symbolically, or ``None``."""
    spec = VERIFIERS.get(name)
    if spec is None:
        return None
    if spec.float_only:
        return f"{name} computes with irrational numbers (the normal CDF)"
    return f"{name} {spec.not_symbolic}" if spec.not_symbolic else None


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
    config = {"topology": topology.name, "parents": list(topology.parents), "drafting": scheme, "vocab": vocab}
    spec = VERIFIERS.get(what.name)
    if spec is not None and spec.undecided_symbolic:
        return Proof("UNDECIDED", what.name, config, 0, [], space, time.perf_counter() - started,
                     reason=f"not run: {what.name} {spec.undecided_symbolic}")
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
    cells, identities = check_cells(paths, target, sequences, space, feasible)
    proof = Proof("PROVED", what.name, config, len(paths), cells, space, 0.0, identities=identities)
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


