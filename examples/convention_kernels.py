"""Verifiers in the calling conventions of shipped systems (the adapters ``eagle-paths``, ``vllm`` and ``specinfer``
of :mod:`simulator.kernels.conventions`), each correct one beside a twin carrying one bug::

    specproof certify --kernel examples.convention_kernels:eagle_paths_rrs --adapter eagle-paths --topology complete \\
        --branching 2 --depth 2 --vocab 3 --drafting without-replacement          # LOSSLESS
    specproof certify --kernel examples.convention_kernels:eagle_paths_rrs_with_replacement \\
        --adapter eagle-paths ...  # LOSSY

Each docstring says under which drafting scheme the kernel is lossless, and why (docs/kernels.md, "Conventions
of shipped verifiers").
"""

from __future__ import annotations

from typing import Callable

import torch

from specproof.gate.torch_kernels import residual_weights


# ---- EAGLE: candidate paths (adapter: eagle-paths) -------------------------------------------------------------------
def _without_replacement(row: torch.Tensor, drafted: list[int]) -> torch.Tensor:
    """The row a node's next child was drafted from under without-replacement drafting: the node's draft row with
    its earlier children's tokens removed, renormalised."""
    rest = row.clone()
    if drafted:
        rest[drafted] = 0
    return rest / rest.sum()


def _eagle_paths_walk(retrieve_indices, candidates, target_probs, draft_probs,
                sibling_row: Callable[[torch.Tensor, list[int]], torch.Tensor]):
    """Recursive rejection sampling along EAGLE's candidate paths (``evaluate_posterior``'s sampling path): level
    by level, the children of the accepted node are tried in their rows' order, which is the drafting order; child
    token ``x`` is accepted when ``u < r(x)/d(x)``, ``r`` the target's residual (the node's target row at first),
    ``d = sibling_row(draft row, tokens tried)``; a rejection replaces ``r`` by ``norm((r − d)_+)``. No child
    accepted: one token from ``r``; at a leaf, from its target row. Returns ``(best_candidate, accept_length,
    token)`` as EAGLE does (path 0 when nothing is accepted)."""
    best, length, node = 0, 0, 0
    for i in range(1, candidates.shape[1]):
        through = (retrieve_indices[:, i - 1] == node) & (retrieve_indices[:, i] >= 0)  # [P] rows past the node
        if not bool(through.any()):
            break  # a leaf
        residual, tried = target_probs[node], []
        for j in through.nonzero()[:, 0].tolist():
            x = int(candidates[j, i])
            if x in tried:  # rows through one child repeat its token; as in EAGLE, a token is tried once
                continue
            draft = sibling_row(draft_probs[node], tried)
            if torch.rand(()) < residual[x] / draft[x]:
                best, length = j, i
                break
            rest = residual_weights(residual, draft)
            residual = rest / rest.sum() if rest.sum() > 0 else residual  # no mass only where r = d: never rejected
            tried.append(x)
        else:
            return torch.tensor(best), length, torch.multinomial(residual, 1)[0]
        node = int(retrieve_indices[best, length])
    return torch.tensor(best), length, torch.multinomial(target_probs[node], 1)[0]


def eagle_paths_rrs(tree_choices, retrieve_indices, candidates, target_probs, draft_probs):
    """Recursive rejection sampling for siblings drawn without replacement (Jeon et al. 2024, Recursive
    Speculative Decoding), correct: the ``k``-th sibling is verified against the row it was drafted from, the draft
    row with the ``k − 1`` earlier siblings removed and renormalised, and that row is what each rejection subtracts.
    LOSSLESS under ``--drafting without-replacement``, and under ``iid`` too: a token already tried is skipped, and
    an i.i.d. sibling unlike every token tried is distributed as that row. Twin of
    ``eagle_paths_rrs_with_replacement``."""
    return _eagle_paths_walk(retrieve_indices, candidates, target_probs, draft_probs, _without_replacement)


def eagle_paths_rrs_with_replacement(tree_choices, retrieve_indices, candidates, target_probs, draft_probs):
    """Bug: with-replacement semantics under without-replacement drafting. Every sibling is verified against, and
    every rejection subtracts, the node's full draft row, as if the siblings were drawn i.i.d.; the second sibling
    was in fact drawn from the row without the first. LOSSY wherever a node has two children (under ``iid`` too:
    there the skipped repeat leaves the residual unreduced)."""
    return _eagle_paths_walk(retrieve_indices, candidates, target_probs, draft_probs,
                       lambda row, drafted: row)  # BUG: the earlier siblings' tokens are not removed


# ---- vLLM: the batched rejection sampler (adapter: vllm) --------------------------------------------------------
def _recovered_tokens(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """A draw from ``(target − draft)_+`` at every position ``[B, k]``, by vLLM's exponential race
    ``argmax(w / E)``. The weights stay unnormalised: the race's law is ``w_i / Σ w`` either way, and a row of
    zeros (target = draft, where no draft is rejected) stays finite."""
    weights = residual_weights(target_probs, draft_probs).reshape(-1, target_probs.shape[-1])  # [B·k, V]
    return weights.div_(torch.empty_like(weights).exponential_()).argmax(dim=1).view(target_probs.shape[:2])


def _output_token_ids(draft_token_ids, recovered, bonus_token_ids, limits) -> torch.Tensor:
    """vLLM's ``_create_output``: per request ``[k+1]``, the drafts before ``limits``, then the recovered token at
    ``limits`` (the bonus when ``limits = k``), then ``-1``."""
    batch_size, k = draft_token_ids.shape
    positions = torch.arange(k).unsqueeze(0)  # [1, k]
    output = torch.full((batch_size, k + 1), -1, dtype=torch.long)  # [B, k+1]
    output[:, :k] = torch.where(positions < limits.unsqueeze(1), draft_token_ids, -1)
    output[:, :k] = torch.where(positions == limits.unsqueeze(1), recovered, output[:, :k])
    output[:, k] = torch.where(limits == k, bonus_token_ids[:, 0], -1)
    return output


def _acceptance(target_with_bonus_probs, draft_probs, draft_token_ids) -> tuple[torch.Tensor, torch.Tensor]:
    """Each draft's acceptance ``u < q(x)/p(x)`` ``[B, k]``, one uniform per position, and the recovered tokens."""
    target_probs = target_with_bonus_probs[:, :-1]  # [B, k, V]
    index = draft_token_ids.unsqueeze(-1)  # [B, k, 1]
    ratio = target_probs.gather(-1, index).squeeze(-1) / draft_probs.gather(-1, index).squeeze(-1)  # [B, k]
    uniform = torch.rand(ratio.shape, dtype=target_probs.dtype)  # [B, k]
    return uniform < ratio, _recovered_tokens(target_probs, draft_probs)


def vllm_rejection_sampler(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids):
    """Standard rejection sampling in vLLM's batched layout (``RejectionSampler.forward``), correct: every position
    tested at once, the accepted prefix ending at the first rejection (``limits``), where the recovered token
    stands; the bonus after ``k`` acceptances. LOSSLESS on chains; twin of ``vllm_rejection_sampler_count``."""
    accepted, recovered = _acceptance(target_with_bonus_probs, draft_probs, draft_token_ids)  # [B, k], [B, k]
    k = draft_token_ids.shape[1]
    rejected = ~accepted
    limits = torch.where(rejected.any(1), rejected.int().argmax(1), k)  # [B] the first rejection
    return _output_token_ids(draft_token_ids, recovered, bonus_token_ids, limits)


def vllm_rejection_sampler_count(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids):
    """Bug: the accepted prefix's length taken as the number of accepted positions, not the first rejection's
    position. With every position tested at once, a draft rejected before an accepted one is emitted. LOSSY from
    two drafts on."""
    accepted, recovered = _acceptance(target_with_bonus_probs, draft_probs, draft_token_ids)  # [B, k], [B, k]
    limits = accepted.sum(1)  # BUG: how many were accepted, not where the first rejection is
    return _output_token_ids(draft_token_ids, recovered, bonus_token_ids, limits)


# ---- SpecInfer: the token tree (adapter: specinfer) -------------------------------------------------------------
def _mss(tokens, parents, draft_probs, target_probs, reduce: Callable[[torch.Tensor], torch.Tensor]):
    """Multi-step speculative sampling (SpecInfer, Miao et al. 2024): from the root, the current node's
    children tried in pre-order (the drafting order); child token ``x`` accepted when ``u < r(x)/p(x)``, ``r`` the
    residual (the node's target row at first), ``p`` the node's draft row; a rejection replaces ``r`` by
    ``reduce((r − p)_+)``. No child accepted: one token from ``r``. Returns the verified tokens ``[m+1]``."""
    node, out = 0, []
    while True:
        residual = target_probs[node]
        for child in (parents == node).nonzero()[:, 0].tolist():
            x = int(tokens[child])
            if torch.rand(()) < residual[x] / draft_probs[node, x]:
                out.append(x)
                node = child
                break
            rest = residual_weights(residual, draft_probs[node])
            residual = reduce(rest) if rest.sum() > 0 else residual  # no mass only where r = p: never rejected
        else:
            return torch.tensor([*out, int(torch.multinomial(residual, 1))])


def specinfer_mss(tokens, parents, draft_probs, target_probs):
    """SpecInfer's verification, correct: each rejection's residual renormalised, ``norm((r − p)_+)``. Lossless for
    children drawn i.i.d. from their parent's draft row, as SpecInfer proves. LOSSLESS under ``--drafting
    iid``; twin of ``specinfer_mss_unnormalised``."""
    return _mss(tokens, parents, draft_probs, target_probs, lambda rest: rest / rest.sum())


def specinfer_mss_unnormalised(tokens, parents, draft_probs, target_probs):
    """Bug: the residual left unnormalised. ``torch.multinomial`` normalises the final draw, so a node with one
    child is unaffected, but the next sibling's ratio ``r(x)/p(x)`` is too small by the residual's mass. LOSSY
    wherever a node has two children."""
    return _mss(tokens, parents, draft_probs, target_probs, lambda rest: rest)  # BUG: not renormalised
