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
from dataclasses import dataclass, field
from typing import Sequence

from simulator.drafting import FixedShape, check_drafting
from simulator.errors import InvalidParameterError, SymbolicError, VerifierFailure
from simulator.limits import computation
from simulator.speculation import complete, speculate
from simulator.trees import Topology
from simulator.verifiers import VERIFIERS

from .cells import WITNESS_TRIES, Cell, Reduced, check_cells, path_valid
from .closed_forms import FORMS, Form
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
    #: on a chain, the rule's E[τ] against its paper's closed form (:mod:`exact.closed_forms`), cell by cell
    expectations: list["Expectation"] = field(default_factory=list)

    def to_json(self) -> dict:
        names = self.space.names
        cells = [{"sequence": list(c.sequence), "signs": _signs_json(c.signs),
                  "valid_paths": c.paths, "identity_holds": c.holds,
                  "witness": None if c.witness is None else [f"{v.numerator}/{v.denominator}" for v in c.witness]}
                 for c in self.cells]
        rows = {f"{name}({context_key(ctx) or 'root'})": [str(v.value.as_expr()) for v in self.space.row(name, ctx)]
                for name, ctx in self.space.slots}
        return {"specproof": "proof", "verdict": self.verdict, "verifier": self.verifier, "config": self.config,
                "symbols": names, "rows": rows, "domain": "every symbol ≥ 0 and every row's last entry ≥ 0",
                "paths": self.paths, "cells": cells, "identities": self.identities, "reason": self.reason,
                "seconds": round(self.seconds, 3),
                "witness": None if self.witness is None else self.witness.to_json(),
                "expectations": [{"form": e.form, "rows": e.rows, "holds": e.holds,
                                  "cells": [{"term": list(key) if isinstance(key, tuple) else key,
                                             "signs": _signs_json(signs), "probability": str(value.as_expr())}
                                            for key, signs, value in e.cells]} for e in self.expectations]}


def _signs_json(signs: dict) -> dict:
    return {str(a.as_expr()): sorted(b) for a, b in sorted(signs.items(), key=lambda t: str(t[0]))}


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
        outcome = speculate(view, drafter, what.fn, rng)
        return complete(outcome, view, height, rng), outcome.path

    paths = [(sequence, prob, signs, accepted)
             for (sequence, accepted), prob, signs in _paths(space, program, feasible, what.name)]
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
    form = FORMS.get(spec.chain_expectation) if spec is not None else None
    if form is not None and topology.parents == tuple(range(-1, len(topology.parents) - 1)):
        proof.expectations = _expectations(form, paths, space, drafter, what, height)
    proof.seconds = time.perf_counter() - started
    return proof


def _paths(space: Space, program, feasible: LinearFeasibility, name: str) -> list:
    """Every path of ``program`` on ``space``; a rule the symbolic run cannot follow raises :class:`SymbolicError`."""
    with computation():
        try:
            return list(symbolic_paths(space, program, feasible))
        except VerifierFailure as err:
            if isinstance(err.error, (SymbolicError, ZeroDivisionError)):
                raise SymbolicError("verifier", f"{name}: {err.error}") from err
            raise


@dataclass
class Expectation:
    """A rule's ``E[τ]`` on a chain against its paper's closed form, term by term: ``cells`` pairs each term's key
    (an accepted prefix ``x^ℓ`` or a length ``ℓ``) and a cell's sign conditions with the rule's probability of that
    term there (a rational function; ``E[τ]`` is their sum), and ``holds`` says whether every term equals the
    form's on every cell."""

    form: str
    rows: str
    holds: bool
    cells: list[tuple[object, dict, object]]


def _expectations(forms: tuple, paths: list, space: Space, drafter, what: Subject, height: int) -> list[Expectation]:
    """The rule's ``E[τ]`` on a chain against its paper's closed form (:mod:`exact.closed_forms`) for every model
    pair (from the proof's own paths) and, where the paper gives one, against the form for context-independent rows
    (a second, smaller space whose one ``p`` row and one ``q`` row serve every context)."""
    general, context_free = forms
    out = [_expectation(general, "every pair of rows", [(path[3], path[1], path[2]) for path in paths], space,
                        LinearFeasibility(space), height)]
    if context_free is not None:
        shared = Space.context_free(space.vocab)
        view, feasible = SymbolicView(shared), LinearFeasibility(shared)
        rounds = _paths(shared, lambda rng: speculate(view, drafter, what.fn, rng).path, feasible, what.name)
        out.append(_expectation(context_free, "context-independent rows", rounds, shared, feasible, height))
    return out


def _expectation(form: Form, rows: str, paths: list, space: Space, feasible: LinearFeasibility,
                 height: int) -> Expectation:
    """For every term of the form, ``Σ_{paths counting towards it} P(path) − term`` is zero on every cell of the
    decomposition of those paths and of the term's own branches (each ``min`` is a comparison). ``paths`` are
    ``(accepted tokens, probability, signs)``."""
    view = SymbolicView(space)
    rounds = [(key, prob, signs) for accepted, prob, signs in paths for key in form.keys_of(accepted)]
    keys = form.keys(space.vocab, height)
    closed = [(key, -(value.value if isinstance(value, Sym) else space.field(value)), signs) for key in keys
              for value, _, signs in symbolic_paths(space, lambda rng: form.term(view, key), feasible)]
    cells, _ = check_cells(rounds + closed, {key: space.field(0) for key in keys}, keys, space, feasible)
    values = []
    for cell in cells:
        value = sum((prob for key, prob, signs in rounds if key == cell.sequence and path_valid(signs, cell.signs)),
                    space.field(0))
        reduced = Reduced.of(cell.signs, space)
        if reduced is not None:  # the value as the cell's equalities leave it
            value = space.field(reduced.substitute(value.numer)) / space.field(reduced.substitute(value.denom))
        values.append((cell.sequence, cell.signs, value))
    return Expectation(form.text, rows, all(cell.holds for cell in cells), values)


def _joint(space: Space, sequence: Sequence[int]):
    prob = space.one
    for k, token in enumerate(sequence):
        prob = prob * space.row("q", tuple(sequence[:k]))[token].value
    return prob


