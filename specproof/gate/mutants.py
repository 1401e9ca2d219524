"""A mutation zoo: bug classes that reached serving systems or published implementations, each an ordinary torch
kernel drawing its own random numbers, every one LOSSY (docs/gate.md, "The mutation zoo"); each docstring names
its bug and its adapter."""

from __future__ import annotations

import torch

from specproof.gate.torch_kernels import (chain_answer, chain_rows, children_table, flat_requests, inverse_cdf,
                                          residual_weights)


# ---- chain mutants (adapter: chain) -----------------------------------------------------------------------------
def sps_chain_stub_uniform(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """A stub uniform shipped: the acceptance test compares ``torch.zeros(())`` where ``torch.rand(())`` belongs.

    Every draft of positive ratio is accepted, so a token the draft over-proposes (``0 < q(x) < p(x)``) is
    emitted with the draft's probability ``p(x)``: LOSSY on any pair with such a token (exact only where
    ``p ≤ q`` on the target's support). A class seen where samplers carry a deterministic-testing hook (a fixed
    or zero uniform) that stays switched on outside tests.

    Certified unmodified, as every mutant here (docs/kernels.md)::

        specproof certify --kernel specproof.gate.mutants:sps_chain_stub_uniform --adapter chain --depth 2 \
            --model random-rational --vocab 3 --seeds 8

    By adapter: ``chain``: this one, ``sps_chain_bf16_ratio``, ``sps_chain_cdf_fallback``, ``greedy_target_chain``,
    ``bv_cumprod_chain``; ``flat-chain``: ``flat_chain_off_by_one``; ``tree``: ``match_tree_second_chance``,
    ``rrs_tree_late_update``. The correct kernels they mutate are in :mod:`specproof.gate.torch_kernels` and
    :mod:`simulator.verifiers.block`.
    """
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        u = torch.zeros(())  # BUG: a test stub left in place of torch.rand(())
        if u < target[i, x] / draft[i, x]:
            continue
        return chain_answer(drafts, i, inverse_cdf(residual_weights(target[i], draft[i]), torch.rand(())))
    return chain_answer(drafts, candidate_length, torch.multinomial(target[candidate_length], 1))


def sps_chain_bf16_ratio(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Precision mismatch: the draft was sampled from the full-precision row, the ratio reads it in bfloat16.

    bfloat16 keeps 8 significant bits, so ``q(x)/p̃(x)`` is off by up to ``2⁻⁹`` relative wherever ``p(x)`` is
    not representable: acceptance probabilities (and, through them, the residual's weight) no longer match the
    row the draft came from. LOSSY by about that much. A class seen in serving engines that store draft
    probabilities in reduced precision for verification while sampling the draft in higher precision.
    """
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        stored = draft[i, x].to(torch.bfloat16).to(draft.dtype)  # BUG: the ratio's denominator rounded
        if torch.rand(()) < target[i, x] / stored:
            continue
        return chain_answer(drafts, i, inverse_cdf(residual_weights(target[i], draft[i]), torch.rand(())))
    return chain_answer(drafts, candidate_length, torch.multinomial(target[candidate_length], 1))


def _searchsorted_last(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``torch.searchsorted(weights.cumsum(0), u).clamp(max=V − 1)`` in comparison form: the count of running
    sums below ``u``, clamped to the last index — a guard meant for float round-off at the CDF's top."""
    return (weights.cumsum(0) < u).sum().clamp(max=len(weights) - 1)


def sps_chain_cdf_fallback(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Unnormalised inverse CDF: the residual ``(q − p)_+`` is walked against ``u ~ U(0, 1)``, not ``u · Σ``.

    The residual's total ``c`` is below 1 whenever ``p ≠ q``, so ``u > c`` happens with probability ``1 − c``
    and the round-off clamp sends all of it to the last token: the replacement is biased toward token ``V − 1``
    (even one of target probability 0). LOSSY. A class seen in hand-written sampling kernels whose
    searchsorted-and-clamp guard hides a missing normalisation.
    """
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        if torch.rand(()) < target[i, x] / draft[i, x]:
            continue
        residual = residual_weights(target[i], draft[i])  # BUG: never normalised before the CDF walk
        return chain_answer(drafts, i, _searchsorted_last(residual, torch.rand(())))
    return chain_answer(drafts, candidate_length, torch.multinomial(target[candidate_length], 1))


def greedy_target_chain(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Greedy verification of a sampled draft: accept iff the draft is ``argmax q_i``, else emit ``argmax q_i``.

    The draft model samples at temperature 1 but the target side takes the greedy path, so the output is the
    target's argmax sequence, not a sample of ``q``: LOSSY against the target's sampling law on any row that is
    not a point mass. A class seen where a rejection sampler's greedy branch is taken for a request whose
    draft (or whose sampling parameters) are not greedy.
    """
    drafts, _, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        best = target[i].argmax()  # BUG: the target taken greedily while the draft was sampled
        if x == int(best):
            continue
        return chain_answer(drafts, i, best)
    return chain_answer(drafts, candidate_length, target[candidate_length].argmax())


def bv_cumprod_chain(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Block verification misread: level ``i`` accepted with probability ``p_i`` itself, residual token-level.

    Sun et al.'s weights ``p_i = min(1, p_{i−1} q(X_i)/p(X_i))`` are kept as a cumulative product and the
    longest prefix whose weight beats a fresh uniform is accepted, but Eq. 5's ``h_i = S_i / (S_i + 1 − p_i)``
    is replaced by ``p_i`` (right only at ``i = γ``), and the correction is drawn from ``norm((q_τ − p_τ)_+)``
    rather than Eq. 4's ``norm((p_τ q_τ − p_τ^draft)_+)``. LOSSY. A class seen in reimplementations of block
    verification that carry over token-level rejection sampling's acceptance and residual.
    """
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    weight, tau = torch.ones((), dtype=draft.dtype), 0
    for i, x in enumerate(drafts.tolist()):
        weight = (weight * target[i, x] / draft[i, x]).clamp(max=1.0)  # p_i, as in Alg. 2
        if torch.rand(()) < weight:  # BUG: h_i = p_i instead of Eq. 5
            tau = i + 1  # the longest prefix wins
    if tau == candidate_length:
        return chain_answer(drafts, tau, torch.multinomial(target[tau], 1))
    residual = residual_weights(target[tau], draft[tau])  # BUG: token-level, not (p_τ q_τ − p_τ^draft)_+
    return chain_answer(drafts, tau, inverse_cdf(residual, torch.rand(())))


# ---- a batched serving mutant (adapter: flat-chain) ---------------------------------------------------------------
def flat_chain_off_by_one(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids):
    """Off-by-one in the output index: at the first rejection (position ``i``) the rejected draft ``x_i`` is
    committed and the recovered token written to slot ``i + 1``.

    The committed token was never verified and the recovered token, drawn from ``(q_i − p_i)_+`` for position
    ``i``, is emitted as position ``i + 1``: the output follows the draft one token too long. LOSSY. A class seen
    in batched rejection samplers, where accepted counts and output slots are indexed from different origins.
    """
    out, requests = flat_requests(cu_num_draft_tokens)
    for b, positions in requests:
        for i, pos in enumerate(positions):
            x = int(draft_token_ids[pos])
            out[b, i] = x  # BUG: written before the test, so a rejected draft stays committed
            if torch.rand(()) < target_probs[pos, x] / draft_probs[pos, x]:
                continue
            residual = residual_weights(target_probs[pos], draft_probs[pos])
            out[b, i + 1] = (residual / torch.empty_like(residual).exponential_()).argmax()  # BUG: one slot late
            break
        else:
            out[b, len(positions)] = bonus_token_ids[b, 0]
    return out


# ---- tree mutants (adapter: tree) ---------------------------------------------------------------------------------
def _child_carrying(slots: torch.Tensor, tokens: torch.Tensor, y: torch.Tensor) -> int:
    """The first child among ``slots`` (padded with ``-1``) whose token is ``y``; ``-1`` if none."""
    hit = (tokens[slots.clamp(min=0)] == y) & (slots >= 0)
    return int(slots[hit.int().argmax()]) if bool(hit.any()) else -1


def match_tree_second_chance(parents, tokens, p, q):
    """Sample-and-match with a second chance: when ``y ~ q_v`` misses every child, a second ``y`` is drawn and
    matched before anything is emitted.

    A child carrying ``x`` is reached with probability ``q_v(x)(2 − Q)`` (``Q`` the target mass on the children's
    tokens) instead of ``q_v(x)``, and a token off the tree with ``(1 − Q) q_v(y)``: the output is biased toward
    the draft's candidates. LOSSY wherever ``0 < Q < 1``. A class seen in implementations that "retry" a missed
    match to raise the acceptance length.
    """
    kids, v = children_table(parents), 0
    for _ in range(len(parents)):
        y = torch.multinomial(q[v], 1)[0]
        child = _child_carrying(kids[v], tokens, y)
        if child < 0:
            y = torch.multinomial(q[v], 1)[0]  # BUG: a second chance to match a candidate
            child = _child_carrying(kids[v], tokens, y)
        if child < 0:
            return v, y
        v = child
    raise RuntimeError("a walk longer than the tree")


def _next_residual(residual: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """``norm((r − p_v)_+)``, or ``r`` itself where that has no mass (only where ``r = p_v``)."""
    rest = residual_weights(residual, draft)
    return rest / rest.sum() if rest.sum() > 0 else residual


def rrs_tree_late_update(parents, tokens, p, q):
    """Recursive rejection sampling with a stale residual: each sibling is tested against the residual as it was
    *before* the previous sibling's rejection was applied.

    The second child is tested against ``q_v`` again (not ``norm((q_v − p_v)_+)``), the third against the first
    update, and so on, while the emitted token comes from the fully updated residual: siblings are accepted with
    the wrong probabilities. Equal to ``rrs_tree`` on chains, LOSSY where a node has two children. A class seen
    in tree verifiers where the residual update is pipelined one iteration behind the test.
    """
    kids, v = children_table(parents), 0
    while True:
        tested = residual = q[v]
        child = -1
        for c in kids[v].tolist():
            if c < 0:
                break
            x = int(tokens[c])
            if torch.rand(()) < tested[x] / p[v, x]:
                child = c
                break
            tested, residual = residual, _next_residual(residual, p[v])  # BUG: the test lags one update
        if child < 0:
            return v, inverse_cdf(residual, torch.rand(()))
        v = child
