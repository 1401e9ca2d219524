"""One draft–verify round, the unit every engine runs: draft a tree, verify it, normalise the decision.

The exact engine runs :func:`speculate` under its enumerating chooser, Monte Carlo under a seeded
handler, replay under a given array of uniforms: the same code in every case (docs/engines.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from .completion import TARGET, GreedyBlockCompletion, GreedyCompletion, TargetCompletion
from .drafting import Drafter
from .errors import LimitError, RandomSourceError, SpecproofError, VerifierFailure, VerifierOutputError
from .models import ModelView
from .random_sources import call_plugin
from .randomness import Randomness
from .trees import DraftTree
from .usercode import escape_message, interrupted, source_line
from .verifiers.registry import Verifier, is_builtin, is_watched_elsewhere, verifier_name

Completion = TargetCompletion | GreedyBlockCompletion | GreedyCompletion


@dataclass(frozen=True)
class RoundOutcome:
    """What one round emits: the accepted token path, the correction/bonus token and its completion rule.

    ``inner`` says how this execution's round ended: ``True`` at a node with children (``y`` a correction draw),
    ``False`` at a leaf (``y`` a bonus draw), ``None`` where unknown (a recursion's outcome). It is not part of the
    outcome's identity: two rounds that emit the same tokens compare equal however they ended."""

    path: tuple[int, ...]
    y: int
    completion: Completion = TARGET
    inner: bool | None = field(default=None, compare=False, repr=False)

    @property
    def accepted(self) -> int:
        return len(self.path)


def decide(tree: DraftTree, p: Sequence, q: Sequence, verifier: Verifier, rng: Randomness,
           vocab: int) -> RoundOutcome:
    """Run ``verifier`` on a fixed tree and check its answer.

    An exception from the verifier never passes as a verdict: a typed error keeps its type and field (a built-in
    rule's refusal of a draft it is not defined on, say), with the verifier's name and source line added for a
    user's verifier; anything else becomes :class:`VerifierFailure`. Limits pass through untouched. A user's
    verifier runs under :func:`~simulator.random_sources.call_plugin`: a draw outside ``rng`` is refused, naming its
    line (:class:`RandomSourceError`, passed through as it is)."""
    try:
        out = verifier(tree, p, q, rng) if is_watched_elsewhere(verifier) else call_plugin(verifier, tree, p, q, rng)
    except (LimitError, VerifierFailure, RandomSourceError):
        raise
    except SpecproofError as err:
        if is_builtin(verifier):
            raise
        raise type(err)(err.field, f"{err.message} (in verifier {verifier_name(verifier)}, {source_line(err)})") \
            from err
    except Exception as err:
        raise VerifierFailure(verifier_name(verifier), err, source_line(err)) from err
    except (SystemExit, KeyboardInterrupt) as err:  # never an exit code of the run's (docs/cli/README.md#exit-codes)
        if isinstance(err, KeyboardInterrupt) and interrupted():
            raise
        raise VerifierFailure(verifier_name(verifier), err, f"{source_line(err)}; {escape_message(err)}") from err
    return checked_outcome(tree, out, vocab)


def checked_outcome(tree: DraftTree, out: object, vocab: int) -> RoundOutcome:
    """A verifier's answer ``(node, y)`` or ``(node, y, completion)`` on ``tree`` as the round's outcome;
    :class:`VerifierOutputError` naming what is wrong for anything else."""
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise VerifierOutputError("verifier", f"must return (node, y) or (node, y, completion), got {out!r}")
    node, y = out[0], out[1]
    completion = out[2] if len(out) == 3 else TARGET
    if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < len(tree):
        raise VerifierOutputError("node", f"returned node {node!r} is not a node of the tree (0..{len(tree) - 1})")
    if isinstance(y, bool) or not isinstance(y, int) or not 0 <= y < vocab:
        raise VerifierOutputError("y", f"returned token {y!r} outside 0..{vocab - 1}")
    if not hasattr(completion, "next_row"):
        raise VerifierOutputError("completion", f"a completion rule needs next_row(block, view), got {completion!r}")
    return RoundOutcome(tree.path(node), y, completion, inner=bool(tree.children(node)))


def speculate(view: ModelView, drafter: Drafter, verifier: Verifier, rng: Randomness) -> RoundOutcome:
    """Draft a tree with ``drafter`` from ``view``, then verify it."""
    draft = drafter.draft(view, rng)
    return decide(draft.tree, draft.p, draft.q, verifier, rng, view.vocab)

def lazy_program(view: ModelView, drafter: Drafter, verifier: Verifier) -> Callable[[Randomness], RoundOutcome] | None:
    """:func:`speculate` with the tree drafted on demand (``drafter.lazy``, :mod:`simulator.drafting.lazy_draft`): a
    token is drawn when the verifier first reads it. ``None`` when the drafter cannot draft lazily for this view."""
    lazy = getattr(drafter, "lazy", None)
    make = lazy(view) if lazy is not None else None
    if make is None:
        return None

    def program(rng: Randomness) -> RoundOutcome:
        draft = make(rng)
        return decide(draft.tree, draft.p, draft.q, verifier, rng, view.vocab)
    return program


def complete(outcome: RoundOutcome, view: ModelView, height: int, rng: Randomness) -> tuple[int, ...]:
    """Extend ``path + (y,)`` to ``height + 1`` tokens with the outcome's completion rule, drawing from ``rng``
    (docs/notation.md; the exact engine's :meth:`exact.law.OutputLaw.completed` is the same rule, enumerated)."""
    block = outcome.path + (outcome.y,)
    while len(block) < height + 1:
        block = block + (rng.categorical(outcome.completion.next_row(block, view)),)
    return block
