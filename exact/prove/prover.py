"""Proofs of losslessness for every model pair of a shape and vocabulary (``specproof prove``, docs/proofs.md): the
entry point, which proves a rule by lifting (:mod:`exact.prove.lifting`) where it can and by cells
(:mod:`exact.prove.proof`) elsewhere."""

from __future__ import annotations

import itertools
import time
from fractions import Fraction
from typing import Sequence

from simulator.drafting import FixedShape, check_drafting, draft_models_for
from simulator.errors import InvalidParameterError, SizeLimitError, SymbolicError
from simulator.speculation import complete, speculate
from simulator.trees import Topology
from simulator.verifiers import VERIFIERS

from exact.recursions.closed_forms import FORMS
from exact.reproducer import Reproducer
from exact.subject import Subject, subject
from .lifting import lift_for, prove_lifted
from .proof import (Proof, SymbolicView, Tally, all_contexts, chain_expectations, confirm, decide, estimate, probe,
                    run_paths, target_probability)
from .symbolic import LinearFeasibility, Space

#: how a proof is made: ``auto`` lifts a token-verification lift and runs the cells for any other rule
METHODS = ("auto", "lifting", "cells")


#: The most symbols a proof's space may hold. sympy's dense polynomial routines recurse once per symbol, so past
#: about 900 they fail (Python's recursion limit, 1,000); long before that, setting the space up and deciding its
#: cells take hours.
MAX_SYMBOLS = 500


def check_symbols(vocab: int, height: int, draft_models: int = 1) -> None:
    """Refuse, before any set-up, a shape and vocabulary whose symbolic space (``V − 1`` symbols for each draft
    model's row of a context shorter than ``height`` and each ``q`` row up to ``height``) passes
    :data:`MAX_SYMBOLS`."""
    rows = draft_models * sum(vocab**d for d in range(height)) + sum(vocab**d for d in range(height + 1))
    symbols = (vocab - 1) * rows
    if symbols > MAX_SYMBOLS:
        raise SizeLimitError("vocab", f"the symbolic space of V = {vocab} at depth {height} has {symbols:,} symbols "
                                      f"({rows:,} rows of {vocab - 1}), over the limit of {MAX_SYMBOLS:,} a proof "
                                      "can handle: reduce --vocab or --depth")


def _unsupported(name: str) -> str | None:
    """Why the registry says a built-in rule cannot run symbolically, or ``None``."""
    spec = VERIFIERS.get(name)
    if spec is None:
        return None
    if spec.float_only:
        return f"{name} computes with irrational numbers (the normal CDF)"
    return f"{name} {spec.not_symbolic}" if spec.not_symbolic else None


def prove(verifier: str | Subject, topology: Topology, scheme: str, vocab: int, probes: int = 0,
          tally: Tally | None = None, method: str = "cells") -> Proof:
    """Prove or refute that ``verifier`` is lossless for every model pair of ``topology``, drafted by ``scheme``, over
    ``vocab`` tokens.

    The rows are symbols and the round runs on them symbolically; the space of model pairs is cut into cells by the
    signs the run assumed, and in each cell the completed law is checked against ``q^(H+1)`` as an identity of
    rational functions (docs/proofs.md). A failing cell with an exact witness, confirmed by the exact engine, is
    REFUTED; a cell without one leaves the verdict UNDECIDED, never PROVED.

    Parameters
    ----------
    verifier : str or Subject
        A registry name, ``"module:function"``, or a :class:`~exact.subject.Subject`.
    topology : Topology
        The tree shape (:func:`simulator.trees.make_topology`).
    scheme : str
        The drafting scheme; it must be one the verifier claims (a proof is of a claim).
    vocab : int
        The vocabulary size ``V`` (symbols grow as ``V^H``: :func:`check_symbols`).
    probes : int
        Random exact points certified by the exact engine first; a loss there refutes at once.
    tally : Tally, optional
        Counts the proof's size against its ``max_cells`` and reports progress.
    method : {"cells", "lifting", "auto"}
        ``cells`` runs the whole round symbolically; ``lifting`` proves the single-step rule of a token-verification
        lift and lifts it to every tree of the shape's branchings (:mod:`exact.prove.lifting`); ``auto`` lifts where
        it can and runs the cells elsewhere (the command line's default).

    Returns
    -------
    Proof
        ``verdict`` (PROVED, REFUTED or UNDECIDED), the cells, the witness of a refutation (a reproducer certified
        LOSSY) and, on chains, the paper's closed form of ``E[τ]`` checked on every cell.

    Raises
    ------
    SymbolicError
        A rule the symbolic run cannot follow (floats, irrational functions, a flow solved numerically).
    InvalidParameterError
        An unknown method or scheme, a scheme the verifier does not claim, or ``lifting`` for a verifier that is
        not a lift.
    SizeLimitError
        A symbolic space over :data:`MAX_SYMBOLS` (refused before any set-up), or a proof past the tally's
        ``max_cells``.
    TimeLimitError
        The wall-clock limit in force passed.
    """
    started = time.perf_counter()
    tally = tally if tally is not None else Tally()
    if method not in METHODS:
        raise InvalidParameterError("method", f"unknown method {method!r}; choose from {list(METHODS)}")
    what = subject(verifier, "verifier")
    reason = _unsupported(what.name)
    if reason is not None:
        raise SymbolicError("verifier", reason)
    check_drafting(scheme)
    what.require_claimed(scheme)  # a proof is of a claim: exactly the schemes the verifier claims
    height = topology.height
    draft_models = draft_models_for(scheme, topology)  # k-models: a symbolic row per draft model
    check_symbols(vocab, height, draft_models)
    space = Space(vocab, all_contexts(vocab, height - 1), all_contexts(vocab, height), draft_models=draft_models)
    config = {"topology": topology.name, "parents": list(topology.parents), "drafting": scheme, "vocab": vocab}
    spec = VERIFIERS.get(what.name)
    if spec is not None and spec.undecided_symbolic:
        return Proof("UNDECIDED", what.name, config, 0, [], space, time.perf_counter() - started,
                     reason=f"not run: {what.name} {spec.undecided_symbolic}")
    lift = None
    if method != "cells":
        lift, why = lift_for(what) if draft_models == 1 else (None, "its lifting drafts every child from one p row, "
                                                                     f"and {scheme} drafting has several draft models")
        if lift is None and method == "lifting":
            raise InvalidParameterError("method", f"{what.name} is not lifted: {why}; --method cells runs the "
                                                  "cell search on this shape")
    view = SymbolicView(space)
    drafter = FixedShape(topology, scheme)
    feasible = LinearFeasibility(space)

    def case(point: Sequence[Fraction]) -> Reproducer:
        rows = space.rows_at(point)
        return Reproducer(vocab, rows["p"], rows["q"], scheme, what.description, tuple(topology.parents),
                          drafts=tuple(rows[name] for name in space.drafts[1:]))

    def program(rng):
        outcome = speculate(view, drafter, what.fn, rng)
        return complete(outcome, view, height, rng), outcome.path

    if probes:
        tally.begin("probes")
        found = probe(space, case, probes)
        if found is not None:
            proof = Proof("REFUTED", what.name, config, 0, [], space, 0.0, method="probe")
            proof.witness, proof.witness_tvd, proof.failure, index = found
            proof.reason = (f"random exact point {index} of {probes}, certified by the exact engine before the "
                            "symbolic run, " + ("is lossy" if proof.failure is None else "makes the rule fail"))
            proof.seconds = time.perf_counter() - started
            return proof
    if lift is not None:
        return prove_lifted(what, lift, topology, scheme, vocab, config, tally, started)
    if tally.descents:
        estimate(space, program, feasible, what.name, tally)
    tally.begin("paths")
    stuck: list = []
    runs = run_paths(space, program, feasible, what.name, stuck, tally.run)
    paths = [(sequence, prob, signs, accepted) for (sequence, accepted), prob, signs in runs]
    sequences = list(itertools.product(range(vocab), repeat=height + 1))
    target = {s: target_probability(space, s) for s in sequences}
    decided = decide(paths, target, sequences, stuck, space, feasible, tally)
    proof = Proof("PROVED", what.name, config, len(paths), decided.cells, space, 0.0, identities=decided.identities,
                  stops=len(stuck), stopped=decided.stopped)
    proof.verdict = decided.verdict
    if decided.witnessed is not None:
        proof.witness = case(decided.witnessed.witness)
        proof.witness_tvd, proof.failure = confirm(proof.witness, what.name)
        proof.reason = decided.describe()
        if proof.failure is not None:
            proof.reason += "; the exact engine's run fails there"
    elif proof.verdict == "UNDECIDED":
        proof.reason = decided.describe()
    else:
        proof.reason = (f"the identity holds on all {len(proof.cells)} cells: lossless for every model pair of this "
                        f"shape and vocabulary (V = {vocab}) under {scheme} drafting{decided.describe()}")
    form = FORMS.get(spec.chain_expectation) if spec is not None else None
    failed_stop = decided.failed_stop
    if form is not None and failed_stop is None and topology.parents == tuple(range(-1, len(topology.parents) - 1)):
        tally.begin("E[τ]")
        proof.expectations = chain_expectations(form, paths, space, drafter, what, height, tally)
    proof.seconds = time.perf_counter() - started
    return proof
