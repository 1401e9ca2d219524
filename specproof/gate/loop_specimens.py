"""Bug twins of a whole generation loop (``certify --loop``, docs/loops.md): chain speculative sampling in the loop
convention, LOSSLESS (:func:`speculative_loop`), and six loops that each carry one bug class reported in 2026 in
how the rows and uniforms reach the verifier, each LOSSY under the sampling parameters its docstring names
(:data:`TWINS`; the mutation zoo's loop section, docs/gate.md).

    specproof certify --loop specproof.gate.loop_specimens:speculative_loop --model tiny-llama --vocab 4 --top-k 2
    specproof certify --loop specproof.gate.loop_specimens:raw_draft_row --model tiny-llama --vocab 4 --top-k 2  # LOSSY

Written as users write such loops: transformers' logits processors, ``torch.rand`` and an inverse-CDF draw; no
randomness interface of specproof's. Installed with the package and registered as user code (the gate's
specimens, ``specproof/gate/__init__.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from simulator.loops.models import prefix_table_pair
from simulator.loops.processors import processed_row, transformers_processors
from simulator.models import RandomRationalModel

__all__ = ["DEPTH", "PLACEHOLDER", "PROMPT", "NEW_TOKENS", "SEED", "TWINS", "LoopTwin", "speculative_loop",
           "raw_draft_row", "previous_row", "placeholder_accepted", "top_p_target_only", "shared_uniform",
           "penalty_prefix_only"]

DEPTH = 2  # draft slots per round
PLACEHOLDER = -1  # the token id of a padded draft slot (vLLM's PLACEHOLDER_TOKEN_ID)
#: the instance every class is certified on (:meth:`LoopTwin.pair`): its prompt, the tokens generated, the rows' seed
PROMPT, NEW_TOKENS, SEED = (0,), 3, 0


def draw(weights: torch.Tensor, u: torch.Tensor) -> int:
    """Inverse CDF: the index whose cumulative slice of ``weights [V]`` (unnormalised) holds ``u × total``."""
    cdf = torch.cumsum(weights, dim=0)
    return int((u * cdf[-1] >= cdf).sum())


def draft_chain(draft, ids: torch.Tensor, sampling: dict, slots: int, bug: str | None):
    """Draft ``slots`` tokens after ``ids`` from the draft's processed rows, each by inverse CDF with a uniform of
    its own; the slots past them up to :data:`DEPTH` are padding (:data:`PLACEHOLDER`), as a fixed-shape drafter
    leaves them. Returns ``(tokens [DEPTH], rows, uniforms)``: ``rows[i]`` the draft row the verifier reads at
    slot ``i`` (the first padded slot's included: the row the drafter scored there), ``uniforms[i]`` slot ``i``'s."""
    process = transformers_processors(sampling)
    tokens, rows, uniforms = [], [], []
    for i in range(DEPTH):
        logits = draft(ids)[0, -1]
        p = processed_row(process, ids, logits)
        if bug == "raw-draft-row":
            rows.append(torch.softmax(logits.double(), dim=-1))  # BUG: the raw row, not the one drawn from
        elif bug == "top-p-target-only":  # BUG: the verifier's draft row misses top-p
            without_top_p = {k: v for k, v in sampling.items() if k != "top_p"}
            rows.append(processed_row(transformers_processors(without_top_p), ids, logits))
        else:
            rows.append(p)
        if i == slots:
            break
        uniforms.append(torch.rand(()))
        tokens.append(draw(p, uniforms[-1]))
        ids = torch.cat([ids, torch.tensor([[tokens[-1]]])], dim=1)
    return tokens + [PLACEHOLDER] * (DEPTH - len(tokens)), rows, uniforms


def resample_uniform(uniforms: list, i: int, bug: str | None):
    """The uniform of slot ``i``'s correction or bonus draw: a fresh one; under ``shared-uniform`` the one that
    drew the draft at slot ``i`` (the last draft's for the bonus)."""
    if bug == "shared-uniform" and uniforms:
        return uniforms[min(i, len(uniforms) - 1)]  # BUG: the draft's uniform again
    return torch.rand(())


def speculative_loop(target, draft, input_ids, *, max_new_tokens: int, sampling: dict,
                     bug: str | None = None) -> list[int]:
    """Chain speculative sampling (Leviathan et al., ICML 2023, arXiv:2211.17192) with transformers' processors:
    draft up to :data:`DEPTH` tokens from the draft's processed rows ``p``, score them in one target pass, accept
    token ``x`` with probability ``min(1, q(x) / p(x))`` against the target's processed row ``q``, resample the
    first rejection from ``norm((q − p)_+)``, and draw a bonus token from ``q`` after the last real draft. A
    round drafts at most one token fewer than are still wanted (its last token is the target's own); slots past
    that are padding, never verified. Every draw is an inverse CDF of a fresh ``torch.rand``. LOSSLESS.

    ``bug`` names one of :data:`TWINS`' classes; the twins below pass it."""
    process = transformers_processors(sampling)
    ids, new = input_ids, []
    while len(new) < max_new_tokens:
        slots = min(DEPTH, max_new_tokens - len(new) - 1)
        tokens, rows, uniforms = draft_chain(draft, ids, sampling, slots, bug)
        seq = torch.cat([ids, torch.tensor([tokens[:slots]], dtype=torch.long)], dim=1)
        logits = target(seq)[0]  # one pass: row start − 1 + i scores slot i, row start − 1 + slots the bonus
        start = ids.shape[1]
        for i in range(DEPTH + 1):
            at = start - 1 + (max(i - 1, 0) if bug == "previous-row" and i < slots else i)  # BUG: one row back
            context = seq[:, :start] if bug == "penalty-prefix-only" else seq[:, :start + i]  # BUG: no drafts
            q = processed_row(process, context, logits[at])
            x = tokens[i] if i < DEPTH else None
            if x is None or (x == PLACEHOLDER and bug != "placeholder"):  # past the drafts: the bonus token
                new.append(draw(q, resample_uniform(uniforms, i, bug)))
                break
            if torch.rand(()) < q[x] / rows[i][x]:  # a placeholder gathers the last token's entries (BUG)
                new.append(x)
                if len(new) == max_new_tokens:
                    return new
                continue
            new.append(draw(torch.clamp(q - rows[i], min=0), resample_uniform(uniforms, i, bug)))
            break
        ids = torch.cat([input_ids, torch.tensor([new], dtype=torch.long)], dim=1)
    return new


def raw_draft_row(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
    """Bug: drafts from the draft's processed row but hands the acceptance test and the residual its raw softmax
    (transformers#47932: candidate generators returned the raw logits as ``q``). LOSSY wherever processing changes
    the draft's row: ``top_k`` below the vocabulary, ``top_p`` < 1, ``min_p`` > 0, a temperature ≠ 1 or a repetition
    penalty ≠ 1."""
    return speculative_loop(target, draft, input_ids, max_new_tokens=max_new_tokens, sampling=sampling,
                            bug="raw-draft-row")


def previous_row(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
    """Bug: from the second draft slot on, each draft is verified (and its residual taken) against the target's row
    one position back, the row that scored the draft before it (an off-by-one logits slice, TensorRT-LLM#15098).
    LOSSY under any sampling parameters, on a pair whose rows depend on the prefix, once a round holds two drafts
    (``max_new_tokens`` ≥ 3)."""
    return speculative_loop(target, draft, input_ids, max_new_tokens=max_new_tokens, sampling=sampling,
                            bug="previous-row")


def placeholder_accepted(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
    """Bug: a padded draft slot (:data:`PLACEHOLDER`, -1) is verified like a draft: its gathers ``q[-1]`` and
    ``p[-1]`` read the last token's entries, and an acceptance emits -1 as a token (vllm#46533). LOSSY under any
    sampling parameters (a round is padded whenever fewer than ``DEPTH + 1`` tokens are still wanted); the
    certificate shows the mass as ``off_support``."""
    return speculative_loop(target, draft, input_ids, max_new_tokens=max_new_tokens, sampling=sampling,
                            bug="placeholder")


def top_p_target_only(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
    """Bug: drafts from the draft's row processed with every parameter, but the verifier applies top-p to the
    target's logits only and reads the draft's row without it (fastllm#738: draft and target truncated by different
    operators). LOSSY when ``top_p`` < 1 cuts the draft's row."""
    return speculative_loop(target, draft, input_ids, max_new_tokens=max_new_tokens, sampling=sampling,
                            bug="top-p-target-only")


def shared_uniform(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
    """Bug: the correction (or bonus) draw at a slot reuses the uniform that drew the draft token there, the last
    draft's for the bonus, instead of a fresh ``torch.rand``; given the draft, that uniform lies in the draft
    token's slice of the CDF. LOSSY under any sampling parameters."""
    return speculative_loop(target, draft, input_ids, max_new_tokens=max_new_tokens, sampling=sampling,
                            bug="shared-uniform")


def penalty_prefix_only(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
    """Bug: the target's rows are processed against the prefix before the round only, so the repetition penalty
    misses the draft tokens accepted before each slot and before the bonus (sglang#28242: a penalty state of the
    committed tokens applied across the whole verify block). LOSSY when ``repetition_penalty`` ≠ 1."""
    return speculative_loop(target, draft, input_ids, max_new_tokens=max_new_tokens, sampling=sampling,
                            bug="penalty-prefix-only")


@dataclass(frozen=True)
class LoopTwin:
    """A bug class of generation loops: its bug twin, LOSSY under ``sampling`` on :meth:`pair`, the report it
    comes from; the correct twin is :func:`speculative_loop`."""

    name: str
    loop: Callable
    bug: str  # the bug class, one line
    seen: str  # where it was reported
    sampling: dict  # parameters that expose it
    vocab: int = 2  # the instance's vocabulary: 3 where a cut needs a token to remove

    def rows(self) -> RandomRationalModel:
        """The instance's rows: :class:`~simulator.models.RandomRationalModel` of vocabulary :attr:`vocab`, seed
        :data:`SEED`, no zero entries."""
        return RandomRationalModel(self.vocab, SEED, zero_prob=0.0)

    def pair(self):
        """The class's instance: ``(target, draft)`` of :meth:`rows` as a prefix table after :data:`PROMPT`."""
        return prefix_table_pair(self.rows(), len(PROMPT))

    def describe(self) -> str:
        sampling = ", ".join(f"{k.replace('_', '-')} {v:g}" for k, v in self.sampling.items()) or "plain sampling"
        return (f"prefix table of random-rational rows (V={self.vocab}, seed {SEED}, no zeros), prompt "
                f"{list(PROMPT)}, N={NEW_TOKENS}, {sampling}")


TWINS: tuple[LoopTwin, ...] = (
    LoopTwin("loop-raw-draft-row", raw_draft_row, "the draft row the verifier reads from raw logits while "
             "drafting from processed ones", "transformers#47932", {"top_k": 2}, vocab=3),
    LoopTwin("loop-previous-row", previous_row, "draft i verified against the target row of position i − 1 "
             "(an off-by-one logits slice)", "TensorRT-LLM#15098", {}),
    LoopTwin("loop-placeholder", placeholder_accepted, "a -1 placeholder in a padded draft slot verified, "
             "accepted and emitted", "vllm#46533", {}),
    LoopTwin("loop-top-p-target-only", top_p_target_only, "top-p applied to the target's row only, not to "
             "the draft row the verifier reads", "fastllm#738", {"top_p": 0.6}, vocab=3),
    LoopTwin("loop-shared-uniform", shared_uniform, "drafting and the correction/bonus draw sharing one "
             "uniform", "fused samplers saving a random draw", {}),
    LoopTwin("loop-penalty-prefix-only", penalty_prefix_only, "repetition penalty of the target's rows "
             "computed without the accepted draft tokens", "sglang#28242",
             {"repetition_penalty": 2.0}),
)
