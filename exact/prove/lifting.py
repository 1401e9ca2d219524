"""Proofs by lifting (docs/proofs.md, "Proofs by lifting"): token verification built from a single-step rule is proved
by proving its one step at each branching of the shape (:func:`prove_claim`), then lifting the step to the tree
(:func:`prove_lifted`)."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from fractions import Fraction

from simulator.drafting import SCHEMES
from simulator.errors import LimitError, SymbolicError
from simulator.trees import Topology, node_depths
from simulator.verifiers.rules import SingleStepRule
from simulator.verifiers.token_tree import Lift, lift_of, token_step

from exact.reproducer import Reproducer
from exact.subject import Subject
from .proof import Decided, Proof, Tally, all_contexts, cells_json, confirm, decide, estimate, run_paths
from .symbolic import LinearFeasibility, Space


@dataclass(frozen=True)
class Hypothesis:
    """One hypothesis of the token-tree argument: what it says, and how this proof checked it."""

    name: str
    statement: str
    checked: str

    def to_json(self) -> dict:
        return {"name": self.name, "statement": self.statement, "checked": self.checked}


@dataclass
class Claim:
    """The single-step claim at branching ``k`` (the rule reads ``reads`` of the ``k`` children), decided on
    ``paths`` symbolic paths."""

    k: int
    reads: int
    paths: int
    decided: Decided
    seconds: float

    @property
    def verdict(self) -> str:
        return self.decided.verdict

    @property
    def cells(self) -> list:
        return self.decided.cells

    def describe(self) -> str:
        """The claim in words."""
        if self.k == 0:
            return "k = 0 (a leaf): the bonus token drawn from q has law q"
        read = "" if self.reads == self.k else f", the rule reading the first {self.reads}"
        return f"k = {self.k} ({self.k} children drafted{read}): the node's output token has law q"

    def to_json(self) -> dict:
        return {"k": self.k, "reads": self.reads, "claim": self.describe(), "verdict": self.verdict,
                "paths": self.paths, "cells": cells_json(self.cells), "identities": self.decided.identities,
                "stops": self.decided.stops, "reason": self.reason(), "seconds": round(self.seconds, 3)}

    def reason(self) -> str:
        if self.verdict == "PROVED":
            return f"the identity holds on all {len(self.cells)} cells{self.decided.describe()}"
        return self.decided.describe()


@dataclass
class Lifted:
    """A proof by lifting: the branchings of the shape, a claim per branching, the argument's hypotheses, and for a
    refutation where the witness was placed on the tree."""

    rule: str
    law: str
    scheme: str
    vocab: int
    branchings: tuple[int, ...]
    claims: list[Claim]
    hypotheses: list[Hypothesis]
    placement: str = ""

    @property
    def covers(self) -> str:
        """What a PROVED verdict covers, in words."""
        return (f"every tree whose branchings are in {{{', '.join(map(str, self.branchings))}}}, at V = {self.vocab}"
                f", under {self.scheme} drafting")

    def to_json(self) -> dict:
        return {"rule": self.rule, "tuple_law": self.law, "branchings": list(self.branchings), "covers": self.covers,
                "argument": ARGUMENT, "hypotheses": [h.to_json() for h in self.hypotheses],
                "claims": [c.to_json() for c in self.claims], "placement": self.placement or None}


#: The token-tree argument, as the certificate states it.
ARGUMENT = ("by induction on the height: the round's first token has law q(·|c) (the claim at the root's branching); "
            "given it is x, the rest is the completion from q(·|c x) (a rejection, or a leaf) or token verification of "
            "the accepted child's subtree, a fresh draft at c x whose branchings are in the set (completed law "
            "q^(H) by induction, whichever child was accepted); so the completed law is q^(H+1)")


def lift_for(what: Subject) -> tuple[Lift | None, str]:
    """The lift the verifier is, or ``None`` and why it is not lifted: a function
    :func:`~simulator.verifiers.token_tree.tv` built (by identity: a user's wrapper of one is not), from a
    :class:`SingleStepRule` whose ``step`` and ``used`` are the class's own (a subclass could carry a uniform or
    state from one node to the next)."""
    lift = lift_of(what.fn)
    if lift is None:
        return None, "not a token-verification lift built by simulator.verifiers.token_tree.tv"
    cls = type(lift.rule)
    if not isinstance(lift.rule, SingleStepRule) or cls.step is not SingleStepRule.step \
            or cls.used is not SingleStepRule.used:
        return None, (f"its single-step rule {lift.rule.name!r} overrides SingleStepRule's step or used, which "
                      "could carry randomness or state from one node to the next")
    return lift, ""


def hypotheses(lift: Lift, scheme: str) -> list[Hypothesis]:
    """The hypotheses of the token-tree argument, each with how it was checked for this verifier and scheme."""
    return [
        Hypothesis("token-tree lift", "the verifier walks the tree from the root, one single-step decision per node, "
                   "moving to the accepted child and ending at the first rejection or at a leaf; the round is "
                   "completed from q",
                   f"the verifier is a function simulator.verifiers.token_tree.tv built from the rule "
                   f"{lift.rule.name!r} ({lift.law} tuple law), recognised by identity, not by name or attributes; "
                   "it returns (node, y), so the completion is the target's"),
        Hypothesis("fresh randomness", "each node's decision draws fresh randomness (a rule reusing a uniform across "
                   "nodes is not lifted)",
                   "the rule is a SingleStepRule with the class's own step: a sequential rule's plan is a function of "
                   "(candidates, p, q) without the randomness, sampled by one new Bernoulli per candidate "
                   "(single_step.run_plan), a flow-defined rule by one new categorical"),
        Hypothesis("local reads", "the decision reads only its children's tokens and the rows p, q at its context",
                   "by the step's signature, step(candidates, p(c), q(c), rng, law) (a plan takes (candidates, p, q), "
                   "a solver (p, q, k, law)); what a plan might read beyond its arguments (global state) is not "
                   "checked"),
        Hypothesis("fresh subtrees", "a node's children are drafted from p at its context by the scheme, given the "
                   "node's token, independently of the rest of the tree; so the accepted child's subtree is a fresh "
                   "draft at the extended context, independent of the decision given its token",
                   f"the shape is fixed and drafted by the fixed-shape scheme {scheme!r} "
                   "(simulator.drafting.draft_tree: one call of the scheme per node, on p at the node's path, each "
                   "with new randomness); dynamic drafts (DySpec, ADED) are not lifted"),
    ]


def _children(topology: Topology) -> list[int]:
    """Each node's number of children."""
    counts = [0] * len(topology.parents)
    for parent in topology.parents[1:]:
        counts[parent] += 1
    return counts


def branchings(topology: Topology) -> tuple[int, ...]:
    """The numbers of children the shape's nodes have (0: its leaves), sorted."""
    return tuple(sorted(set(_children(topology))))


def _shallowest(topology: Topology, k: int) -> int:
    """The depth of the shallowest node with ``k`` children."""
    return min(d for d, c in zip(node_depths(topology.parents), _children(topology)) if c == k)


def claim_program(lift: Lift, scheme: str, k: int, space: Space, name: str):
    """The single-step claim as a symbolic program: ``k`` children drafted from the one ``p`` row by the scheme
    (those the rule reads, each drawn when read, as the exact engine drafts on demand), then token verification's
    step at the node; the result is ``(output token,)``."""
    p, q = space.row("p", ()), space.row("q", ())
    reads = len(lift.rule.used(range(k)))
    draft = SCHEMES[scheme]

    def program(rng):
        try:
            candidates = list(itertools.islice(draft(p, k, rng), reads)) if k else []
            index, y = token_step(lift.rule, candidates, p, q, rng, lift.law)
        except ZeroDivisionError as err:  # a division by a symbolic zero: the symbolic run cannot follow the rule
            raise SymbolicError("verifier", f"{name}: {err}") from err
        return (candidates[index],) if index is not None else (y,)
    return program


def prove_claim(lift: Lift, scheme: str, k: int, space: Space, feasible: LinearFeasibility, name: str,
                tally: Tally) -> Claim:
    """The single-step claim at branching ``k``: every path of :func:`claim_program`, then ``Σ P(path) = q(x)``
    for every output token ``x``, cell by cell (:func:`exact.prove.proof.decide`).

    The single-step claim for a branching ``k``: at one context with any rows ``p``, ``q`` (symbols,
    :meth:`exact.prove.symbolic.Space.context_free`), ``k`` children drafted from ``p`` by the scheme (fewer where
    ``p``'s support is short, as the scheme drafts them), the node's output token (the accepted candidate's, or the
    correction drawn on rejection; at a leaf, ``k = 0``, the bonus token from ``q``) has law ``q``. It is the same
    symbolic run and cell-by-cell identity as a whole-round proof (:mod:`exact.prove.proof`), on the code token
    verification runs at a node (:func:`simulator.verifiers.token_tree.token_step`).
    """
    started = time.perf_counter()
    program = claim_program(lift, scheme, k, space, name)
    if tally.descents:
        estimate(space, program, feasible, name, tally)
    tally.begin("paths")
    stuck: list = []
    paths = run_paths(space, program, feasible, name, stuck, tally.run)
    sequences = [(x,) for x in range(space.vocab)]
    target = {(x,): space.row("q", ())[x].value for x in range(space.vocab)}
    decided = decide(paths, target, sequences, stuck, space, feasible, tally)
    return Claim(k, len(lift.rule.used(range(k))), len(paths), decided, time.perf_counter() - started)


def placements(point: list[Fraction], space: Space, topology: Topology, k: int
               ) -> list[tuple[str, dict, dict]]:
    """Where a failing claim's witness rows go on the tree, as ``(description, p rows, q rows)`` at every context the
    round can read: at every context; and where the shallowest node with ``k`` children lies below the root,
    also the uniform rows ``p = q`` above its depth (a lossless step accepts surely there, so the node is reached)
    and the witness's from that depth on."""
    vocab, height = space.vocab, topology.height
    rows = space.rows_at(point)
    p, q = rows["p"][()], rows["q"][()]
    out = [("the witness rows at every context", {c: p for c in all_contexts(vocab, height - 1)},
            {c: q for c in all_contexts(vocab, height)})]
    depth = _shallowest(topology, k)
    if depth:
        uniform = tuple(Fraction(1, vocab) for _ in range(vocab))
        out.append((f"uniform rows p = q at the contexts above depth {depth}, the witness rows from depth {depth} on",
                    {c: uniform if len(c) < depth else p for c in all_contexts(vocab, height - 1)},
                    {c: uniform if len(c) < depth else q for c in all_contexts(vocab, height)}))
    return out


def prove_lifted(what: Subject, lift: Lift, topology: Topology, scheme: str, vocab: int, config: dict,
                 tally: Tally, started: float) -> Proof:
    """Prove ``what`` (the lift ``lift``) on ``topology`` by lifting: the single-step claim for every branching of
    the shape, then the token-tree argument. PROVED covers every tree whose branchings are among the shape's at
    this ``V`` and scheme; a failing claim's witness is placed on ``topology`` (:func:`placements`) and the
    verdict is REFUTED only when the exact engine certifies the placed rows lossy (or failing) there, UNDECIDED
    otherwise. ``config`` is the asked shape's, as the certificate records it.

    The token-tree argument lifts the claims to every tree whose branchings are all among those ``k``, at that ``V``
    and scheme, by induction on the height, under the hypotheses :func:`hypotheses` states (each checked as far as it
    can be: a verifier that is not a recognised lift is not lifted, and keeps the cell search). A failing claim's
    witness is placed on the tree and certified by the exact engine; only then is the verdict REFUTED.
    """
    space = Space.context_free(vocab)
    feasible = LinearFeasibility(space)
    ks = branchings(topology)
    claims = [prove_claim(lift, scheme, k, space, feasible, what.name, tally) for k in ks]
    lifted = Lifted(lift.rule.name, lift.law, scheme, vocab, ks, claims, hypotheses(lift, scheme))
    proof = Proof("PROVED", what.name, config, sum(c.paths for c in claims), [cell for c in claims for cell in c.cells],
                  space, 0.0, identities=sum(c.decided.identities for c in claims),
                  stops=sum(c.decided.stops for c in claims),
                  stopped=[s for c in claims for s in c.decided.stopped], method="lifting", lifting=lifted)
    failing = [c for c in claims if c.verdict != "PROVED"]
    if not failing:
        proof.reason = (f"the single-step claim holds for every k in {{{', '.join(map(str, ks))}}} (an identity on "
                        f"each of its cells), lifted by the token-tree argument: lossless on {lifted.covers}")
    else:
        _refute(proof, what, topology, scheme, failing)
    proof.seconds = time.perf_counter() - started
    return proof


def _refute(proof: Proof, what: Subject, topology: Topology, scheme: str, failing: list[Claim]) -> None:
    """A verdict from the failing claims: REFUTED with the first placement of a witness (shallowest branching
    first) that the exact engine certifies lossy or failing on the tree; UNDECIDED when none is confirmed (the
    argument is sufficient, not necessary: a node of that branching may never be reached, or its loss may cancel)
    or no claim has a witness."""
    lifted, space = proof.lifting, proof.space
    assert lifted is not None
    tried = []
    for claim in sorted(failing, key=lambda c: _shallowest(topology, c.k)):
        cell = claim.decided.witnessed
        if cell is None:
            continue
        for where, p_rows, q_rows in placements(cell.witness, space, topology, claim.k):
            case = Reproducer(space.vocab, p_rows, q_rows, scheme, what.description, tuple(topology.parents))
            try:
                tvd, failure = confirm(case, None)
            except LimitError as err:
                tried.append(f"k = {claim.k}, {where}: the exact engine did not finish ({err})")
                continue
            if failure is None and tvd == 0:
                tried.append(f"k = {claim.k}, {where}: lossless on this tree")
                continue
            proof.verdict, proof.witness, proof.witness_tvd, proof.failure = "REFUTED", case, tvd, failure
            lifted.placement = where
            proof.reason = (f"the single-step claim fails at k = {claim.k}: {claim.decided.describe()}; with "
                            f"{where}, the exact engine finds the tree "
                            + ("lossy" if failure is None else "failing (the rule's run fails there)"))
            return
    proof.verdict = "UNDECIDED"
    which = ", ".join(f"k = {c.k} ({c.decided.describe()})" for c in failing)
    proof.reason = (f"the single-step claim fails at {which}"
                    + (f"; no placement of a witness on this tree was certified lossy by the exact engine: "
                       f"{'; '.join(tried)}" if tried else "")
                    + ". Lifting is sufficient, not necessary; --method cells decides this shape by the cell search")
