"""Verifiers as people ship them: plain torch functions that draw their own random numbers, each correct one beside
a twin carrying one bug class that has reached production; each docstring says whether it is lossless, and why
(docs/kernels.md)."""

from __future__ import annotations

import torch

from simulator.kernels.adapters import chain_nodes

TEMPERATURE = 0.5  # the temperature tempered_adapter runs its kernels at


# ---- helpers shared by correct and buggy kernels alike (none of them carries a bug) ----------------------------
def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The first index whose running sum exceeds ``u`` times the total: a draw from ``weights`` by ``u``."""
    running = weights.cumsum(0)
    return (running > u * running[-1]).int().argmax()


def residual_weights(target: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """``(target − draft)_+``, unnormalised (``inverse_cdf`` normalises)."""
    return (target - draft).clamp(min=0)


def chain_answer(drafts: torch.Tensor, n: int, token: torch.Tensor) -> tuple[torch.Tensor, int]:
    """transformers' answer: the ``n`` accepted drafts and one more token, with the match count."""
    return torch.cat([drafts[:n], token.reshape(1)]).unsqueeze(0), n


def chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """transformers' inputs as ``(drafts [γ], draft rows [γ, V], target rows [γ+1, V])``, the rows the softmax of
    the logits."""
    drafts = candidate_input_ids[0, -candidate_length:]
    return drafts, candidate_logits[0].softmax(-1), new_logits[0].softmax(-1)


# ---- chain kernels (adapter: chain) -----------------------------------------------------------------------------
def sps_chain(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Speculative sampling, correct: accept draft ``x`` at position ``i`` when ``u < q_i(x)/p_i(x)`` for a fresh
    uniform; at the first rejection emit a draw from ``(q_i − p_i)_+`` by another fresh uniform; after ``γ`` acceptances
    a bonus from ``q_γ``. LOSSLESS; the twin of the four chain bugs below.

    Certified unmodified through the adapters of :mod:`simulator.kernels.adapters` (:func:`tempered_adapter` is the
    worked example of a user's own)::

        specproof certify --kernel specproof.gate.torch_kernels:sps_chain --adapter chain --depth 2 --model
        random-rational
    """
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        if torch.rand(()) < target[i, x] / draft[i, x]:
            continue
        return chain_answer(drafts, i, inverse_cdf(residual_weights(target[i], draft[i]), torch.rand(())))
    return chain_answer(drafts, candidate_length, torch.multinomial(target[candidate_length], 1))


def sps_chain_reused_uniform(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Bug: the uniform that rejected the draft also draws the replacement. Given a rejection, ``u`` lies
    above the acceptance ratio, so the replacement is biased toward the residual's last tokens. LOSSY."""
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        u = torch.rand(())
        if u < target[i, x] / draft[i, x]:
            continue
        return chain_answer(drafts, i, inverse_cdf(residual_weights(target[i], draft[i]), u))  # BUG: u again
    return chain_answer(drafts, candidate_length, torch.multinomial(target[candidate_length], 1))


def sps_chain_previous_row(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Bug: position ``i`` is verified against the target row of position ``i − 1`` (an off-by-one between
    "logits at t predict t+1" layouts). LOSSY."""
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        row = target[max(i - 1, 0)]  # BUG: the previous position's row
        if torch.rand(()) < row[x] / draft[i, x]:
            continue
        return chain_answer(drafts, i, inverse_cdf(residual_weights(row, draft[i]), torch.rand(())))
    return chain_answer(drafts, candidate_length, torch.multinomial(target[candidate_length], 1))


def sps_chain_target_residual(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Bug: a rejected position emits a draw from the unmodified target ``q_i``, not from ``(q_i − p_i)_+``:
    the tokens the draft over-proposes are emitted too often. LOSSY."""
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        if torch.rand(()) < target[i, x] / draft[i, x]:
            continue
        return chain_answer(drafts, i, inverse_cdf(target[i], torch.rand(())))  # BUG: the target, not the residual
    return chain_answer(drafts, candidate_length, torch.multinomial(target[candidate_length], 1))


def sps_chain_clipped(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Bug: the acceptance probability clipped to ``[0.1, 1]`` ("never reject outright"): a draft the target
    gives probability 0 is accepted one time in ten. LOSSY, with a support violation."""
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        if torch.rand(()) < (target[i, x] / draft[i, x]).clamp(0.1, 1.0):  # BUG: clipped ratio
            continue
        return chain_answer(drafts, i, inverse_cdf(residual_weights(target[i], draft[i]), torch.rand(())))
    return chain_answer(drafts, candidate_length, torch.multinomial(target[candidate_length], 1))


def sps_chain_le(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Bug, visible only on torch's real float grid: accept when ``u <= ratio``. ``torch.rand`` returns 0 with
    probability 2⁻²⁴ (float32) or 2⁻⁵³ (float64), so a draft of target probability 0 (ratio 0) is accepted
    that often: LOSSLESS under ``--uniforms continuous`` (where ``u = 0`` has probability 0), LOSSY by a support
    violation under ``--uniforms grid`` on any pair where the draft proposes a token the target excludes."""
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        if torch.rand(()) <= target[i, x] / draft[i, x]:  # BUG: <= accepts ratio 0 at u = 0
            continue
        return chain_answer(drafts, i, inverse_cdf(residual_weights(target[i], draft[i]), torch.rand(())))
    return chain_answer(drafts, candidate_length, torch.multinomial(target[candidate_length], 1))


# ---- a batched serving kernel (adapter: flat-chain) -------------------------------------------------------------
def flat_requests(cu_num_draft_tokens: torch.Tensor) -> tuple[torch.Tensor, list[tuple[int, range]]]:
    """The batched layout: an output ``[B, γ_max + 1]`` of ``-1`` placeholders, and each request's index with the
    flat positions of its drafts."""
    counts = torch.diff(cu_num_draft_tokens, prepend=cu_num_draft_tokens.new_zeros(1))
    out = torch.full((len(counts), int(counts.max()) + 1), -1, dtype=torch.long)
    ends = cu_num_draft_tokens.tolist()
    return out, [(b, range(end - int(counts[b]), end)) for b, end in enumerate(ends)]


def flat_chain_sps(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids):
    """Speculative sampling in the batched serving layout (vLLM's rejection sampler), correct: requests'
    drafts flattened, ``cu_num_draft_tokens`` their running counts; a rejected position's replacement drawn by
    an exponential race, ``argmax((q − p)_+ / E)``; output padded with ``-1``. LOSSLESS."""
    out, requests = flat_requests(cu_num_draft_tokens)
    for b, positions in requests:
        for i, pos in enumerate(positions):
            x = int(draft_token_ids[pos])
            if torch.rand(()) < target_probs[pos, x] / draft_probs[pos, x]:
                out[b, i] = x
                continue
            residual = residual_weights(target_probs[pos], draft_probs[pos])
            out[b, i] = (residual / torch.empty_like(residual).exponential_()).argmax()
            break
        else:
            out[b, len(positions)] = bonus_token_ids[b, 0]
    return out


# ---- tree kernels (adapter: tree) -------------------------------------------------------------------------------
def children_table(parents: torch.Tensor) -> torch.Tensor:
    """``kids[v]``: the children of ``v`` in order, padded with ``-1`` to the widest node (a batched layout)."""
    n = len(parents)
    counts = torch.bincount(parents[1:], minlength=n)
    kids = torch.full((n, max(int(counts.max()), 1)), -1, dtype=torch.long)
    for c in range(1, n):
        v = int(parents[c])
        kids[v, int((kids[v] >= 0).sum())] = c
    return kids


def _try_children(v: int, kids: torch.Tensor, tokens, p, q) -> tuple[int, list[torch.Tensor]]:
    """Recursive rejection sampling at node ``v``: try the children in order, accepting child token ``x`` when
    ``u < r(x)/p_v(x)`` with ``r`` the current residual (``q_v`` at first); each rejection replaces ``r`` by
    ``norm((r − p_v)_+)``. Returns the accepted child (``-1``: none) and every residual, ``q_v`` first."""
    residuals = [q[v]]
    for c in kids[v].tolist():
        if c < 0:
            break
        x = int(tokens[c])
        if torch.rand(()) < residuals[-1][x] / p[v, x]:
            return c, residuals
        rest = residual_weights(residuals[-1], p[v])
        residuals.append(rest / rest.sum() if rest.sum() > 0 else residuals[-1])  # no mass only where r = p
    return -1, residuals


def rrs_tree(parents, tokens, p, q):
    """Recursive rejection sampling over a tree (SpecInfer), correct: :func:`_try_children` at each node on the
    path; when every child is rejected, emit a draw from the last residual. Lossless for children drafted
    i.i.d. from ``p_v``. LOSSLESS; twin of ``rrs_tree_first_residual``."""
    kids, v = children_table(parents), 0
    while True:
        child, residuals = _try_children(v, kids, tokens, p, q)
        if child < 0:
            return v, inverse_cdf(residuals[-1], torch.rand(()))
        v = child


def rrs_tree_first_residual(parents, tokens, p, q):
    """Bug: when every child of a node is rejected, the token is drawn from the residual left by the *first*
    rejected sibling, not from the residual after all of them. Equal to ``rrs_tree`` on chains, LOSSY where a
    node has two children."""
    kids, v = children_table(parents), 0
    while True:
        child, residuals = _try_children(v, kids, tokens, p, q)
        if child < 0:
            return v, inverse_cdf(residuals[min(1, len(residuals) - 1)], torch.rand(()))  # BUG: the first
        v = child


def match_tree(parents, tokens, p, q):
    """Sample and match, correct: at node ``v`` draw ``y`` from ``q_v``; if a child carries ``y`` move there,
    else emit ``y``. The target decides every token, so it is lossless on any tree. LOSSLESS; twin of
    ``match_tree_placeholder``."""
    kids, nodes, v = children_table(parents), torch.arange(len(parents)), 0
    for _ in range(len(parents)):
        y = torch.multinomial(q[v], 1)[0]
        slots = kids[v]
        child_tokens = torch.where(slots >= 0, tokens[slots.clamp(min=0)], -1)
        hit = (child_tokens == y) & (slots >= 0)
        if not bool(hit.any()):
            return v, y
        v = int(nodes[slots[hit.int().argmax()]])
    raise RuntimeError("a walk longer than the tree")


def match_tree_placeholder(parents, tokens, p, q):
    """Bug: the ``-1`` padding of the children table is read as a node. ``tokens[-1]`` is the *last node's*
    token, so a draw equal to it "matches" a child that does not exist and the walk jumps to node ``-1`` (the
    last node, of another branch), emitting a path the target never produced. LOSSY."""
    kids, nodes, v = children_table(parents), torch.arange(len(parents)), 0
    for _ in range(len(parents)):
        y = torch.multinomial(q[v], 1)[0]
        slots = kids[v]
        hit = tokens[slots] == y  # BUG: slot -1 reads tokens[-1]
        if not bool(hit.any()):
            return v, y
        v = int(nodes[slots[hit.int().argmax()]])  # and nodes[-1] is the last node
    return v, y


# ---- the tempered convention (adapter: specproof.gate.torch_kernels:tempered_adapter) ---------------------------------
def tempered_adapter(kernel, tree, p, q, vocab, dtype):
    """A user adapter (docs/kernels.md) for ``kernel(drafts [γ], draft_logits [γ, V], target_logits [γ+1, V],
    temperature) -> tokens [n+1]``, both models sampled at ``softmax(logits / temperature)``: the chain as logits
    at :data:`TEMPERATURE`, chosen so that ``softmax(logits / T)`` is the row itself; the answer mapped back to
    ``(node, y)``."""
    nodes = chain_nodes(tree, "tempered")  # refuses a tree that is not a chain
    drafts = [tree.tokens[v] for v in nodes[1:]]

    def logits(rows):
        return TEMPERATURE * torch.tensor([[float(x) for x in row] for row in rows], dtype=dtype).log()

    out = kernel(torch.tensor(drafts), logits([p[v] for v in nodes[:-1]]), logits([q[v] for v in nodes]),
                 TEMPERATURE).tolist()
    return nodes[len(out) - 1], out[-1]


def tempered_chain(drafts, draft_logits, target_logits, temperature):
    """Speculative sampling at a temperature, correct: the rows verified and the rows sampled are both
    ``softmax(logits / temperature)``. LOSSLESS; twin of ``tempered_chain_unscaled_verify``."""
    draft, target = (draft_logits / temperature).softmax(-1), (target_logits / temperature).softmax(-1)
    for i, x in enumerate(drafts.tolist()):
        if torch.rand(()) < target[i, x] / draft[i, x]:
            continue
        return torch.cat([drafts[:i], inverse_cdf(residual_weights(target[i], draft[i]), torch.rand(())).reshape(1)])
    return torch.cat([drafts, torch.multinomial(target[-1], 1)])


def tempered_chain_unscaled_verify(drafts, draft_logits, target_logits, temperature):
    """Bug: the temperature is applied to the rows that are sampled (the residual, the bonus) but not to the
    rows the acceptance ratio is computed from. LOSSY unless the temperature is 1."""
    draft, target = (draft_logits / temperature).softmax(-1), (target_logits / temperature).softmax(-1)
    plain_draft, plain_target = draft_logits.softmax(-1), target_logits.softmax(-1)
    for i, x in enumerate(drafts.tolist()):
        if torch.rand(()) < plain_target[i, x] / plain_draft[i, x]:  # BUG: untempered rows verified
            continue
        return torch.cat([drafts[:i], inverse_cdf(residual_weights(target[i], draft[i]), torch.rand(())).reshape(1)])
    return torch.cat([drafts, torch.multinomial(target[-1], 1)])
