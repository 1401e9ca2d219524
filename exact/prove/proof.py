"""The machinery of a proof by cells and its result :class:`Proof` (docs/proofs.md; the entry point is
:func:`exact.prove.prover.prove`): symbolic paths decided cell by cell (:func:`decide`), and the proof's size
counted against its limit (:class:`Tally`)."""

from __future__ import annotations

import itertools
import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Iterator, Protocol, Sequence

from simulator.errors import RandomnessError, SizeLimitError, SymbolicError, VerifierFailure
from simulator.limits import computation
from simulator.models import DraftRows
from simulator.speculation import speculate

from .cells import WITNESS_TRIES, Cell, Reduced, check_cells, path_valid, random_point
from exact.recursions.closed_forms import Form
from exact.reproducer import Reproducer
from exact.subject import Subject
from .symbolic import LinearFeasibility, Space, Sym, context_key, estimate_runs, symbolic_paths

#: Random descents of the choice tree behind the up-front estimate of the runs (each one symbolic run); from
#: :data:`FIRST_VERDICT` descents on, a proof is refused as soon as the estimate's lower end passes the limit.
ESTIMATE_DESCENTS = 32
FIRST_VERDICT = 8


class LiftingEvidence(Protocol):
    """What a proof by lifting keeps (:class:`exact.prove.lifting.Lifted`): its claims, each with its cells."""

    claims: list

    def to_json(self) -> dict: ...


class SymbolicView:
    """The round's view of the symbolic rows (what :class:`simulator.models.ModelView` offers the engines)."""

    arithmetic = "symbolic"
    context: tuple[int, ...] = ()

    def __init__(self, space: Space) -> None:
        self.space = space
        self.vocab = space.vocab
        self.key = ("symbolic", id(space))

    def p(self, suffix) -> tuple[Sym, ...]:
        if self.space.draft_models > 1:  # several draft models: model 0's row with every model's (as ModelView)
            return DraftRows([self.space.row(name, tuple(suffix)) for name in self.space.drafts])
        return self.space.row("p", tuple(suffix))

    def q(self, suffix) -> tuple[Sym, ...]:
        return self.space.row("q", tuple(suffix))

    def prefetch(self, name: str, suffixes) -> None:
        return None


@dataclass
class Tally:
    """How far a proof got, counted as it goes, and its limit: ``runs`` of the symbolic program, cells decided
    (``proved``: the identity holds; ``failing``: it does not), ``open`` regions split but not yet decided, and a
    ``finding`` once a witness point is known. Past ``max_cells`` runs plus cells it stops the proof
    (:class:`SizeLimitError`); ``descents`` random descents estimate the runs before they start (0: no estimate);
    ``listener`` hears every step (the command line's progress bar)."""

    max_cells: int | None = None
    descents: int = 0
    listener: Callable[["Tally"], None] | None = None
    stage: str = "set-up"
    estimate: tuple[float, float, int] | None = None  # runs: mean, standard error and descents made (Knuth)
    runs: int = 0
    proved: int = 0
    failing: int = 0
    open: int = 0
    finding: str | None = None

    @property
    def cells(self) -> int:
        """The size so far: runs plus cells decided (what ``max_cells`` bounds)."""
        return self.runs + self.proved + self.failing

    def begin(self, stage: str) -> None:
        self.stage, self.open = stage, 0
        self._step()

    def run(self) -> None:
        """One more run of the symbolic program (a leaf of the choice tree)."""
        self.runs += 1
        self._step()

    def cell(self, cell: Cell, open_regions: int) -> None:
        """One more cell decided, ``open_regions`` still open."""
        if cell.holds:
            self.proved += 1
        else:
            self.failing += 1
            if cell.witness is not None and self.finding is None:
                self.finding = "a failing cell with a witness point (to be certified by the exact engine)"
        self.open = open_regions
        self._step()

    def _step(self) -> None:
        if self.max_cells is not None and self.cells > self.max_cells:
            raise SizeLimitError("max_cells", f"the proof passed the limit of {self.max_cells:,} cells (--max-cells) "
                                              f"as it went: {self.describe()}; raise --max-cells (0: no limit), or "
                                              "reduce --vocab, --depth or --branching")
        if self.listener is not None:
            self.listener(self)

    def describe_estimate(self) -> str:
        """The up-front estimate in words."""
        if self.estimate is None:
            return "not estimated"
        mean, error, made = self.estimate
        low = max(mean - 2 * error, 0.0)
        return (f"about {mean:,.0f} runs of the symbolic program ({made} random descents of its choice tree; at "
                f"least {low:,.0f} with 95% confidence), then the cells of the identity check, counted as they are "
                "decided")

    def check_estimate(self) -> None:
        """Refuse a proof whose estimated runs alone pass ``max_cells`` with 95% confidence."""
        if self.estimate is None or self.max_cells is None:
            return
        mean, error, _ = self.estimate
        if mean - 2 * error > self.max_cells:
            raise SizeLimitError("max_cells", f"estimated {self.describe_estimate()}: over the limit of "
                                              f"{self.max_cells:,} cells (--max-cells); the size grows with --vocab, "
                                              "--depth and --branching: reduce them, or raise --max-cells (0: no limit)")

    def describe(self) -> str:
        """What was decided so far, in words (a stopped proof's message)."""
        found = self.finding or "no finding yet"
        return (f"stage {self.stage}: {self.runs:,} runs of the symbolic program, {self.proved + self.failing:,} "
                f"cells decided ({self.proved:,} proved, {self.failing:,} failing), {self.open:,} open; {found}")


@dataclass
class Proof:
    """The verdict of :func:`exact.prove.prover.prove` and its evidence; :meth:`to_json` is the certificate a second
    program can re-check (docs/proofs.md).

    ``verdict`` is PROVED, REFUTED or UNDECIDED; ``cells`` are the regions of model pairs and what was checked in
    each; ``witness`` is the reproducer of a refutation (certified LOSSY by the exact engine, its TVD in
    ``witness_tvd``, or ``failure`` where the rule fails there instead); ``reason`` says why a verdict is not PROVED;
    ``expectations`` holds, on a chain, the rule's ``E[τ]`` checked against its paper's closed form cell by cell;
    ``method`` says how the verdict was reached.
    """

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
    #: on a chain, the rule's E[τ] against its paper's closed form (:mod:`exact.recursions.closed_forms`), cell by cell
    expectations: list["Expectation"] = field(default_factory=list)
    #: the exact engine's error at the witness when the rule fails there (rather than being lossy)
    failure: str | None = None
    #: paths that stopped at a random choice they cannot make, and the cells of their regions with the error of
    #: each (``holds``: the probability of reaching it is zero there, a branch never taken; a region with no cell
    #: is empty)
    stops: int = 0
    stopped: list[tuple[str, Cell]] = field(default_factory=list)
    #: how the verdict was reached: ``cells``, ``lifting`` (with its claims and hypotheses in ``lifting``), or
    #: ``probe`` (a random point the exact engine found lossy before any symbolic run)
    method: str = "cells"
    lifting: LiftingEvidence | None = None

    def to_json(self) -> dict:
        names = self.space.names
        cells = cells_json(self.cells) if self.lifting is None else [
            {"k": claim.k, **cell} for claim in self.lifting.claims for cell in cells_json(claim.cells)]
        rows = {f"{name}({context_key(ctx) or 'root'})": [str(v.value.as_expr()) for v in self.space.row(name, ctx)]
                for name, ctx in self.space.slots}
        return {"specproof": "proof", "verdict": self.verdict, "verifier": self.verifier, "config": self.config,
                "method": self.method, **({} if self.lifting is None else {"lifting": self.lifting.to_json()}),
                "symbols": names, "rows": rows, "domain": "every symbol ≥ 0 and every row's last entry ≥ 0",
                "paths": self.paths, "cells": cells, "identities": self.identities, "reason": self.reason,
                "stops": self.stops,
                "seconds": round(self.seconds, 3),
                "witness": None if self.witness is None else self.witness.to_json(), "failure": self.failure,
                "stopped": [{"error": error, "signs": _signs_json(c.signs), "probability_zero": c.holds,
                             "witness": None if c.witness is None else [f"{v.numerator}/{v.denominator}"
                                                                        for v in c.witness]}
                            for error, c in self.stopped],
                "expectations": [{"form": e.form, "rows": e.rows, "holds": e.holds,
                                  "cells": [{"term": list(key) if isinstance(key, tuple) else key,
                                             "signs": _signs_json(signs), "probability": str(value.as_expr())}
                                            for key, signs, value in e.cells]} for e in self.expectations]}


def cells_json(cells: list[Cell]) -> list[dict]:
    """Cells as the certificate lists them: the output sequence, the atoms' signs, the valid paths, whether the
    identity holds, and the witness point where it fails."""
    return [{"sequence": list(c.sequence), "signs": _signs_json(c.signs), "valid_paths": c.paths,
             "identity_holds": c.holds,
             "witness": None if c.witness is None else [f"{v.numerator}/{v.denominator}" for v in c.witness]}
            for c in cells]


def _signs_json(signs: dict) -> dict:
    return {str(a.as_expr()): sorted(b) for a, b in sorted(signs.items(), key=lambda t: str(t[0]))}


def all_contexts(vocab: int, depth: int) -> list[tuple[int, ...]]:
    """Every context of ``vocab`` tokens and length ``0..depth``, shortest first: the rows a space of model pairs
    has."""
    return [c for d in range(depth + 1) for c in itertools.product(range(vocab), repeat=d)]


@dataclass
class Decided:
    """The law's identity decided on the paths of a symbolic run: its cells (none when a stopped path already fails
    with a witness: the identity is moot), the cells of the stopped paths' regions, and the verdict they give."""

    cells: list[Cell]
    identities: int
    stops: int
    stopped: list[tuple[str, Cell]]

    @property
    def failed_stop(self) -> Cell | None:
        """A stopped path's cell where the choice is reached with positive probability, with a witness point."""
        return next((c for _, c in self.stopped if c.witness is not None), None)

    @property
    def failing(self) -> list[Cell]:
        return [c for c in self.cells if not c.holds] + [c for _, c in self.stopped if not c.holds]

    @property
    def witnessed(self) -> Cell | None:
        """The first failing cell with a witness point (what a REFUTED verdict is certified on), or ``None``."""
        return next((c for c in self.failing if c.witness is not None), None)

    @property
    def verdict(self) -> str:
        return "REFUTED" if self.witnessed is not None else "UNDECIDED" if self.failing else "PROVED"

    def describe(self) -> str:
        """Why: the failing cell's kind (REFUTED), the cells left without a witness (UNDECIDED), or for PROVED the
        note on paths stopped where they are never reached (empty when there are none)."""
        if self.witnessed is not None:
            return ("the identity fails on a cell with an exact rational witness" if self.failed_stop is None else
                    "the rule makes a random choice it cannot make (a categorical of zero total mass, a weight or "
                    "probability out of range) with positive probability on a cell, with an exact witness")
        if self.failing:
            stops = sum(1 for _, c in self.stopped if not c.holds)
            return (f"the identity fails on {len(self.failing) - stops} cell(s)"
                    + (f", and {stops} cell(s) may reach a random choice the rule cannot make," if stops else "")
                    + f" whose non-linear conditions gave no witness in {WITNESS_TRIES} points (they may be empty)")
        return (f"; {self.stops} path(s) stop at a random choice the rule cannot make, only where their probability "
                "is zero" if self.stops else "")


def decide(paths: list, target: dict, sequences: list, stuck: list, space: Space, feasible: LinearFeasibility,
           tally: Tally) -> Decided:
    """``Σ P(path) = target(s)`` for every output sequence ``s``, cell by cell
    (:func:`exact.prove.cells.check_cells`; ``paths`` are ``(s, probability, signs, ...)``), after the regions of
    the ``stuck`` paths (:func:`_stopped`); the identity is not checked once a stopped path fails with a witness.

    The round ran on symbolic rows (:mod:`exact.prove.symbolic`), each path ending in a sequence ``s`` with a
    probability and the sign conditions it assumed; the cells are cut by those signs (:mod:`exact.prove.cells`). A
    failing cell with an exact witness point is REFUTED (the exact engine confirms it); one without is UNDECIDED,
    never PROVED.
    """
    stopped = _stopped(stuck, space, feasible, tally)
    decided = Decided([], 0, len(stuck), stopped)
    if decided.failed_stop is None:  # the law's identity, cell by cell (moot once the rule fails somewhere)
        tally.begin("cells")
        decided.cells, decided.identities = check_cells(paths, target, sequences, space, feasible, tally.cell)
    return decided


def estimate(space: Space, program, feasible: LinearFeasibility, name: str, tally: Tally) -> None:
    """Knuth's estimate of the runs of ``program`` (:func:`exact.prove.symbolic.estimate_runs`) into the tally, which
    refuses the proof as soon as the estimate passes its limit (from :data:`FIRST_VERDICT` descents on)."""
    tally.begin("estimate")
    with _followed(name):
        for made, (mean, error) in enumerate(estimate_runs(space, program, feasible, tally.descents), 1):
            tally.estimate = (mean, error, made)
            if made >= min(FIRST_VERDICT, tally.descents):
                tally.check_estimate()


def probe(space: Space, case: Callable[[Sequence[Fraction]], Reproducer], probes: int
          ) -> tuple[Reproducer, object, str | None, int] | None:
    """The first of ``probes`` random exact points of the space (:func:`exact.prove.cells.random_point`, a fixed seed)
    where the exact engine finds the rule lossy or failing: ``(reproducer, TVD, failure, its number)``."""
    rng = random.Random(0)
    for index in range(1, probes + 1):
        found = case(random_point(space, rng))
        tvd, failure = confirm(found, None)
        if failure is not None or tvd != 0:
            return found, tvd, failure, index
    return None


def confirm(case: Reproducer, name: str | None) -> tuple[object, str | None]:
    """The exact engine on a point: ``(TVD, None)``, or ``(None, the error)`` where the rule fails there (a random
    choice it cannot make). With ``name`` the point is a witness of the symbolic run, and the exact engine must
    agree that it is lossy or failing: a lossless witness is an engine bug, never a verdict."""
    try:
        tvd = case.certify().tvd
    except RandomnessError as err:
        return None, str(err)
    if name is not None and tvd == 0:
        raise RuntimeError(f"prove: the witness of a failing cell certifies LOSSLESS ({name})")
    return tvd, None


def _stopped(stuck: list, space: Space, feasible: LinearFeasibility, tally: Tally) -> list[tuple[str, Cell]]:
    """The regions of the paths that stopped at a random choice they cannot make, each decided like a sequence's
    identity with target 0 (:func:`exact.prove.cells.check_cells`, the path alone): a cell where the probability of
    reaching the choice is zero is a branch never taken; a failing cell gets a witness point where one exists.
    A region the decomposition finds empty has no cell."""
    if not stuck:
        return []
    tally.begin("stopped paths")
    keys = list(range(len(stuck)))
    cells, _ = check_cells([(k, prob, signs) for k, (_, prob, signs) in enumerate(stuck)],
                           {k: space.field(0) for k in keys}, keys, space, feasible, tally.cell)
    return [(str(stuck[c.sequence][0]), c) for c in cells if c.paths]  # the cells where the path runs


def run_paths(space: Space, program, feasible: LinearFeasibility, name: str, stuck: list | None = None,
              on_run: Callable[[], None] | None = None) -> list:
    """Every path of ``program`` on ``space``; the paths that stopped at a random choice they cannot make go to
    ``stuck`` (:func:`exact.prove.symbolic.symbolic_paths`; without it, their error is raised). A rule the symbolic run
    cannot follow raises :class:`SymbolicError`."""
    with computation(), _followed(name):
        return list(symbolic_paths(space, program, feasible, stuck, on_run))


@contextmanager
def _followed(name: str) -> Iterator[None]:
    """A rule's division by a symbolic zero, or a symbolic error wrapped as the rule's failure, raised as the
    :class:`SymbolicError` it is (the symbolic run cannot follow the rule), wherever the rule runs symbolically."""
    try:
        yield
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


def chain_expectations(forms: tuple, paths: list, space: Space, drafter, what: Subject, height: int,
                       tally: Tally) -> list[Expectation]:
    """The rule's ``E[τ]`` on a chain against its paper's closed form (:mod:`exact.recursions.closed_forms`) for every
    model pair (from the proof's own paths) and, where the paper gives one, against the form for context-independent
    rows (a second, smaller space whose one ``p`` row and one ``q`` row serve every context)."""
    general, context_free = forms
    out = [_expectation(general, "every pair of rows", [(path[3], path[1], path[2]) for path in paths], space,
                        LinearFeasibility(space), height, tally.cell)]
    if context_free is not None:
        shared = Space.context_free(space.vocab, space.draft_models)
        view, feasible = SymbolicView(shared), LinearFeasibility(shared)
        rounds = run_paths(shared, lambda rng: speculate(view, drafter, what.fn, rng).path, feasible, what.name,
                           on_run=tally.run)
        out.append(_expectation(context_free, "context-independent rows", rounds, shared, feasible, height,
                                tally.cell))
    return out


def _expectation(form: Form, rows: str, paths: list, space: Space, feasible: LinearFeasibility,
                 height: int, on_cell: Callable[[Cell, int], None] | None = None) -> Expectation:
    """For every term of the form, ``Σ_{paths counting towards it} P(path) − term`` is zero on every cell of the
    decomposition of those paths and of the term's own branches (each ``min`` is a comparison). ``paths`` are
    ``(accepted tokens, probability, signs)``; ``on_cell`` hears of each cell (:func:`exact.prove.cells.check_cells`).
    """
    view = SymbolicView(space)
    rounds = [(key, prob, signs) for accepted, prob, signs in paths for key in form.keys_of(accepted)]
    keys = form.keys(space.vocab, height)
    closed = [(key, -(value.value if isinstance(value, Sym) else space.field(value)), signs) for key in keys
              for value, _, signs in symbolic_paths(space, lambda rng: form.term(view, key), feasible)]
    cells, _ = check_cells(rounds + closed, {key: space.field(0) for key in keys}, keys, space, feasible, on_cell)
    values = []
    for cell in cells:
        value = sum((prob for key, prob, signs in rounds if key == cell.sequence and path_valid(signs, cell.signs)),
                    space.field(0))
        reduced = Reduced.of(cell.signs, space)
        if reduced is not None:  # the value as the cell's equalities leave it
            value = space.field(reduced.substitute(value.numer)) / space.field(reduced.substitute(value.denom))
        values.append((cell.sequence, cell.signs, value))
    return Expectation(form.text, rows, all(cell.holds for cell in cells), values)


def target_probability(space: Space, sequence: Sequence[int]):
    """``q^(H+1)(sequence)``, the target's probability of ``sequence``, as a product of the space's symbolic rows."""
    prob = space.one
    for k, token in enumerate(sequence):
        prob = prob * space.row("q", tuple(sequence[:k]))[token].value
    return prob


