"""The convention of a generation loop (docs/loops.md) and one run of it: ``loop(target, draft, input_ids, *,
max_new_tokens, sampling) -> list[int]``, called by :func:`run_loop`, which checks its answer and turns its
exceptions into typed errors naming the loop's line; :func:`prepare_loop` runs a loop's optional ``prepare``."""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from simulator.errors import (KernelError, LimitError, LoopFailure, RandomSourceError, SpecproofError,
                              VerifierOutputError)
from simulator.usercode import escape_message, interrupted, source_line


class Loop(Protocol):
    """A whole generation loop: drafts with ``draft``, verifies with ``target`` (each ``model(input_ids [1, T]) ->
    logits [1, T, V]``), draws its randomness through torch, and returns the ``max_new_tokens`` new token ids of
    the sequence it generates after ``input_ids [1, P]``. ``sampling`` holds the sampling parameters that are on
    (``temperature``, ``top_k``, ``top_p``, ``min_p``, ``repetition_penalty``; a key absent means off)."""

    def __call__(self, target: Callable, draft: Callable, input_ids, *, max_new_tokens: int,
                 sampling: dict) -> Sequence[int]: ...


def loop_name(loop: Callable) -> str:
    """A loop's name: its ``loop_name`` attribute (the shipped loops'), else ``module:qualified name``."""
    return getattr(loop, "loop_name", None) or f"{getattr(loop, '__module__', '?')}:" \
                                                f"{getattr(loop, '__qualname__', repr(loop))}"


def prepare_loop(loop: Callable, target: Callable, draft: Callable) -> None:
    """Call the loop's ``prepare(target, draft)`` if it has one: what a loop builds from the pair before it runs
    (a shipped loop's draft model of another class, seeded), outside the capture, where drawing weights is no
    draw of the loop's.

    Raises
    ------
    LoopFailure
        ``prepare`` raised: its exception and its source line.
    """
    prepare = getattr(loop, "prepare", None)
    if prepare is None:
        return
    try:
        prepare(target, draft)
    except SpecproofError as err:
        raise type(err)(err.field, f"{err.message} (preparing loop {loop_name(loop)})") from err
    except Exception as err:
        raise LoopFailure(loop_name(loop), err, source_line(err)) from err


def run_loop(loop: Callable, target: Callable, draft: Callable, prompt: Sequence[int], max_new_tokens: int,
             sampling: dict) -> tuple[int, ...]:
    """One run of ``loop`` after ``prompt``: its ``max_new_tokens`` token ids. A token outside the vocabulary (a
    ``-1`` placeholder emitted, say) is kept: the certificate sees it as mass on a sequence the target never
    produces.

    Raises
    ------
    LoopFailure
        The loop raised: its exception and its source line.
    VerifierOutputError
        The loop returned something other than ``max_new_tokens`` integers (field ``loop``).
    KernelError, RandomSourceError, LimitError
        As the capture raises them: a random value used in a way it cannot follow, a draw from another source, a
        limit passed.
    """
    import torch

    name = loop_name(loop)
    try:
        out = loop(target, draft, torch.tensor([list(prompt)], dtype=torch.long), max_new_tokens=max_new_tokens,
                   sampling=dict(sampling))
    except (LimitError, LoopFailure, KernelError, RandomSourceError):
        raise
    except SpecproofError as err:
        raise type(err)(err.field, f"{err.message} (in loop {name}, {source_line(err)})") from err
    except Exception as err:
        raise LoopFailure(name, err, source_line(err)) from err
    except (SystemExit, KeyboardInterrupt) as err:  # never an exit code of the run's (docs/cli/README.md#exit-codes)
        if isinstance(err, KeyboardInterrupt) and interrupted():
            raise
        raise LoopFailure(name, err, f"{source_line(err)}; {escape_message(err)}") from err
    if isinstance(out, torch.Tensor):
        out = out.reshape(-1).tolist()
    if not isinstance(out, (list, tuple)) or len(out) != max_new_tokens or \
            any(isinstance(t, bool) or not isinstance(t, int) for t in out):
        raise VerifierOutputError("loop", f"{name} must return the {max_new_tokens} new token ids (a list of "
                                          f"int), got {out!r}")
    return tuple(out)
