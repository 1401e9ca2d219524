"""Chain verifiers written in Triton, each correct one beside a twin carrying a bug class that reached a production
Triton or CUDA verifier, certified unmodified on the CPU under Triton's interpreter (docs/kernels.md, "Triton
kernels"). Like any user's Triton module it sets nothing at import: the kernel loader asks for the interpreter
first. Without triton installed, importing this raises :class:`~simulator.errors.MissingDependencyError`."""

from __future__ import annotations

import functools
from typing import Callable

from simulator.usercode import require

require("triton", "a Triton kernel", "kernel")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from specproof.gate.torch_kernels import chain_answer, chain_rows, inverse_cdf, residual_weights  # noqa: E402


# ---- the Triton kernels: one program per drafted position, writing 1 where the draft is accepted ---------------
@triton.jit
def _accept(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    """Correct: accept draft ``x`` at position ``i`` when ``u_i · p_i(x) < q_i(x)`` (``u_i < q_i(x)/p_i(x)``)."""
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    u = tl.load(uniforms + i)
    tl.store(accepted + i, (u * p < q).to(tl.int32))


@triton.jit
def _accept_le(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    """Bug (sglang#35771): ``<=`` accepts a draft of target probability 0 when the coin is exactly 0."""
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    u = tl.load(uniforms + i)
    tl.store(accepted + i, (u * p <= q).to(tl.int32))  # BUG: <= accepts q = 0 at u = 0


@triton.jit
def _accept_reused(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    """Bug (FlashInfer #425): every position reads the first uniform, so the acceptances are correlated."""
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    u = tl.load(uniforms)  # BUG: uniforms + 0 for every position
    tl.store(accepted + i, (u * p < q).to(tl.int32))


@triton.jit
def _accept_sqrt(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    """Not resolvable: ``sqrt`` of a uniform is a map the capture does not follow (refused, naming this line)."""
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    u = tl.load(uniforms + i)
    tl.store(accepted + i, (tl.sqrt(u) * p < q).to(tl.int32))


@triton.jit
def _accept_philox(drafts, draft_rows, target_rows, seed, accepted, V: tl.constexpr):
    """Correct: as :func:`_accept`, the uniform drawn in the kernel, ``tl.rand(seed, i)``."""
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    tl.store(accepted + i, (tl.rand(seed, i) * p < q).to(tl.int32))


@triton.jit
def _accept_normal(drafts, draft_rows, target_rows, seed, cuts, accepted, V: tl.constexpr):
    """Correct: accept when a normal drawn in the kernel, ``tl.randn(seed, i)``, falls below ``cuts[i] =
    Φ⁻¹(min(1, q_i(x)/p_i(x)))`` (computed in torch): probability ``min(1, q/p)``."""
    i = tl.program_id(0)
    tl.store(accepted + i, (tl.randn(seed, i) < tl.load(cuts + i)).to(tl.int32))


@triton.jit
def _accept_normal_flipped(drafts, draft_rows, target_rows, seed, cuts, accepted, V: tl.constexpr):
    """Bug: the normal compared with ``−cuts[i]``, so the draft is accepted with probability ``1 − min(1, q/p)``."""
    i = tl.program_id(0)
    tl.store(accepted + i, (tl.randn(seed, i) < -tl.load(cuts + i)).to(tl.int32))  # BUG: the sign


# ---- residual draws in Triton: an inverse-CDF walk of one coin over the residual ``(q − p)_+`` ------------------
@triton.jit
def _walk(target_row, draft_row, u, V: tl.constexpr, BLOCK: tl.constexpr):
    """The number of cumulative residual masses at or below ``u · total``: the token ``u`` draws (no bug)."""
    j = tl.arange(0, BLOCK)
    live = j < V
    w = tl.maximum(tl.load(target_row + j, mask=live, other=0.0) - tl.load(draft_row + j, mask=live, other=0.0), 0.0)
    return tl.minimum(tl.sum(((tl.cumsum(w, 0) <= u * tl.sum(w, 0)) & live).to(tl.int32), 0), V - 1)


@triton.jit
def _residual_token(target_row, draft_row, coin, token, V: tl.constexpr, BLOCK: tl.constexpr):
    """Correct: the walk of a float64 coin."""
    tl.store(token, _walk(target_row, draft_row, tl.load(coin), V, BLOCK))


@triton.jit
def _residual_token_float32(target_row, draft_row, coin, token, V: tl.constexpr, BLOCK: tl.constexpr):
    """Bug (sglang#30822): the float64 coin narrowed to float32 rounds to 1.0 when it lies within 2^-25 of 1; then
    every cumulative mass is at or below the total and the walk ends on the last token, residual 0 or not."""
    tl.store(token, _walk(target_row, draft_row, tl.load(coin).to(tl.float32), V, BLOCK))  # BUG: rounds to 1.0


@triton.jit
def _residual_token_philox(target_row, draft_row, seed, offset, token, V: tl.constexpr, BLOCK: tl.constexpr):
    """The walk of an in-kernel uniform, ``tl.rand(seed, offset)``."""
    tl.store(token, _walk(target_row, draft_row, tl.rand(seed, offset), V, BLOCK))


@triton.jit
def _residual_token_race(target_row, draft_row, exponentials, token, V: tl.constexpr, BLOCK: tl.constexpr):
    """Correct: vLLM v1's recovered-token form, ``argmax((q − p)_+ / E)`` over exponentials drawn in torch."""
    j = tl.arange(0, BLOCK)
    live = j < V
    w = tl.maximum(tl.load(target_row + j, mask=live, other=0.0) - tl.load(draft_row + j, mask=live, other=0.0), 0.0)
    tl.store(token, tl.argmax(w / tl.load(exponentials + j), 0))  # BLOCK exponentials: padding's weight is 0


@triton.jit
def _residual_token_race_target(target_row, draft_row, exponentials, token, V: tl.constexpr, BLOCK: tl.constexpr):
    """Bug: the race run on the target row ``q`` instead of the residual, so a rejection emits a token from ``q``."""
    j = tl.arange(0, BLOCK)
    w = tl.load(target_row + j, mask=j < V, other=0.0)  # BUG: q, not (q − p)_+
    tl.store(token, tl.argmax(w / tl.load(exponentials + j), 0))


# ---- a tiled residual race: one program per vocabulary tile, the tile then drawn by its residual mass ---------
TILE = 2  # the tiled race's tile width: the vocabulary 3 is not a multiple of it, as in vLLM #44744


@triton.jit
def _tile_race(target_row, draft_row, exponentials, winners, masses, V: tl.constexpr, TILE: tl.constexpr,
               SHIFTED_ID: tl.constexpr):
    """Tile ``t``'s share of the residual draw: its residual mass and its race's winning token. The last tile is
    shifted to end at ``V`` (no padding), its lanes the tile before covered weighing 0. Correct: the winner's id
    is the tile's start plus its lane. Bug (``SHIFTED_ID``, vLLM #44744's kind): the id is ``t · TILE`` plus the
    lane, ignoring the shift, so the last tile's last lane emits the id ``V``."""
    t = tl.program_id(0)
    start = tl.minimum(t * TILE, V - TILE)
    lane = tl.arange(0, TILE)
    j = start + lane
    w = tl.where(j >= t * TILE, tl.maximum(tl.load(target_row + j) - tl.load(draft_row + j), 0.0), 0.0)
    tl.store(masses + t, tl.sum(w, 0))
    idx = tl.argmax(w / tl.load(exponentials + t * TILE + lane), 0)  # exponentials of its own per tile
    if SHIFTED_ID:
        tl.store(winners + t, t * TILE + idx)  # BUG: the last tile starts at V - TILE, not t * TILE
    else:
        tl.store(winners + t, start + idx)


# ---- the torch wrappers (adapter: chain) -----------------------------------------------------------------------
SEED = 1234  # the in-kernel draws' Philox seed: any; the certificate enumerates every value of each draw


def _torch_residual(target_row: torch.Tensor, draft_row: torch.Tensor, position: int) -> torch.Tensor:
    """A residual token drawn in torch (the helpers of :mod:`specproof.gate.torch_kernels`, without a bug)."""
    return inverse_cdf(residual_weights(target_row, draft_row), torch.rand(()))


def _triton_residual(kernel) -> Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]:
    """A residual token drawn by the Triton ``kernel`` from one float64 coin drawn in torch."""
    def draw(target_row: torch.Tensor, draft_row: torch.Tensor, position: int) -> torch.Tensor:
        vocab, token = target_row.shape[-1], torch.zeros((), dtype=torch.int32)
        coin = torch.rand(1, dtype=torch.float64)
        kernel[(1,)](target_row.contiguous(), draft_row.contiguous(), coin, token, V=vocab,
                     BLOCK=triton.next_power_of_2(vocab))
        return token.long()
    return draw


def _race_residual(kernel) -> Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]:
    """A residual token drawn by the Triton race ``kernel`` on exponentials drawn in torch."""
    def draw(target_row: torch.Tensor, draft_row: torch.Tensor, position: int) -> torch.Tensor:
        vocab, token = target_row.shape[-1], torch.zeros((), dtype=torch.int32)
        block = triton.next_power_of_2(vocab)
        exponentials = torch.empty(block, dtype=torch.float64).exponential_()
        kernel[(1,)](target_row.contiguous(), draft_row.contiguous(), exponentials, token, V=vocab, BLOCK=block)
        return token.long()
    return draw


def _philox_residual(offset: Callable[[int, int], int]) -> Callable:
    """A residual token drawn in Triton by ``tl.rand(SEED, offset(position, γ))``."""
    def draw(target_row: torch.Tensor, draft_row: torch.Tensor, position: int, gamma: int) -> torch.Tensor:
        vocab, token = target_row.shape[-1], torch.zeros((), dtype=torch.int32)
        _residual_token_philox[(1,)](target_row.contiguous(), draft_row.contiguous(), SEED, offset(position, gamma),
                                     token, V=vocab, BLOCK=triton.next_power_of_2(vocab))
        return token.long()
    return draw


def _tiled_residual(shifted_id: bool) -> Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]:
    """A residual token drawn by :func:`_tile_race`: each tile's race in Triton, then the tile by its mass in
    torch (``torch.multinomial``), and that tile's winner read."""
    def draw(target_row: torch.Tensor, draft_row: torch.Tensor, position: int) -> torch.Tensor:
        vocab = target_row.shape[-1]
        tiles = triton.cdiv(vocab, TILE)
        winners, masses = torch.zeros(tiles, dtype=torch.int32), torch.zeros(tiles, dtype=torch.float64)
        exponentials = torch.empty(tiles * TILE, dtype=torch.float64).exponential_()
        _tile_race[(tiles,)](target_row.contiguous(), draft_row.contiguous(), exponentials, winners, masses, V=vocab,
                             TILE=TILE, SHIFTED_ID=shifted_id)
        return winners[torch.multinomial(masses, 1)[0]].long()
    return draw


def _verify(accept, candidate_input_ids, candidate_logits, candidate_length, new_logits,
            draw_residual=_torch_residual, in_kernel: bool = False):
    """Launch ``accept`` on fresh float64 uniforms (``in_kernel``: on the Philox seed :data:`SEED`, the kernel
    drawing them), then emit the accepted drafts and a ``draw_residual`` token at the first rejection, or a bonus
    token drawn in torch."""
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    gamma, vocab = int(candidate_length), draft.shape[-1]
    uniforms = SEED if in_kernel else torch.rand(gamma, dtype=torch.float64)
    accepted = torch.zeros(gamma, dtype=torch.int32)
    accept[(gamma,)](drafts.contiguous(), draft.contiguous(), target.contiguous(), uniforms, accepted, V=vocab)
    for i, ok in enumerate(accepted.tolist()):
        if not ok:
            token = draw_residual(target[i], draft[i], *((i, gamma) if in_kernel else (i,)))
            return chain_answer(drafts, i, token)
    return chain_answer(drafts, gamma, torch.multinomial(target[gamma], 1))


def _normal_cuts(accept) -> Callable:
    """An acceptance kernel on in-kernel normals, launched with the cuts ``Φ⁻¹(min(1, q/p))`` computed in torch."""
    @functools.wraps(accept)
    def launch(drafts, draft, target, seed, accepted, V):
        rows = torch.arange(drafts.shape[0])
        ratio = (target[rows, drafts] / draft[rows, drafts]).clamp(max=1.0)
        accept[(drafts.shape[0],)](drafts, draft, target, seed, torch.special.ndtri(ratio).contiguous(), accepted,
                                   V=V)
    return _Launcher(launch)


class _Launcher:
    """``launch`` with Triton's launch syntax, ``kernel[grid](...)`` (the grid is the launch's own)."""

    def __init__(self, launch: Callable) -> None:
        self.launch = launch

    def __getitem__(self, grid) -> Callable:
        return self.launch


def sps_chain(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Speculative sampling with the acceptance in Triton, correct. LOSSLESS under both uniform models; the twin
    of the bugs below.

    Every kernel here follows transformers' ``chain`` convention (:func:`simulator.kernels.adapters.chain`): a thin
    torch wrapper draws the acceptance uniforms with ``torch.rand`` (or the kernel draws them, ``tl.rand``), launches
    a Triton kernel that decides every position's acceptance, and draws the residual in torch or in a second Triton
    kernel, the bonus in torch::

        specproof certify --kernel specproof.gate.triton_kernels:sps_chain --adapter chain --depth 2
    """
    return _verify(_accept, candidate_input_ids, candidate_logits, candidate_length, new_logits)


def sps_chain_triton_residual(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """The acceptance and the residual draw both in Triton, correct. LOSSLESS; the twin of
    :func:`sps_chain_coin_float32`."""
    return _verify(_accept, candidate_input_ids, candidate_logits, candidate_length, new_logits,
                   _triton_residual(_residual_token))


def sps_chain_triton_race(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """The residual drawn in Triton by an exponential race, as vLLM v1's recovered-token kernel draws it.
    LOSSLESS; the twin of :func:`sps_chain_triton_race_target`."""
    return _verify(_accept, candidate_input_ids, candidate_logits, candidate_length, new_logits,
                   _race_residual(_residual_token_race))


def sps_chain_triton_race_target(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """The race run on the target row, not the residual. LOSSY."""
    return _verify(_accept, candidate_input_ids, candidate_logits, candidate_length, new_logits,
                   _race_residual(_residual_token_race_target))


def sps_chain_tiled_race(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """The residual drawn tile by tile (:func:`_tile_race`), correct. LOSSLESS; the twin of
    :func:`sps_chain_tiled_race_past_vocab`."""
    return _verify(_accept, candidate_input_ids, candidate_logits, candidate_length, new_logits,
                   _tiled_residual(False))


def sps_chain_tiled_race_past_vocab(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """The tiled residual race's id ignoring the last tile's shift: it emits the id ``V`` for the last token. The
    certificate is a typed error naming the token and the tile's program."""
    return _verify(_accept, candidate_input_ids, candidate_logits, candidate_length, new_logits,
                   _tiled_residual(True))


def sps_chain_coin_float32(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """The residual's coin narrowed to float32: with probability about 2^-25 it rounds to 1.0 and the last token is
    emitted even where its residual is 0. LOSSY by a support violation wherever it is, under either uniform
    model."""
    return _verify(_accept, candidate_input_ids, candidate_logits, candidate_length, new_logits,
                   _triton_residual(_residual_token_float32))


def sps_chain_philox(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Every uniform drawn inside Triton, ``tl.rand(seed, offset)``: acceptance ``i`` at offset ``i``, the residual
    at offset ``γ + i``. LOSSLESS; the twin of :func:`sps_chain_philox_reused_offset`."""
    return _verify(_accept_philox, candidate_input_ids, candidate_logits, candidate_length, new_logits,
                   _philox_residual(lambda i, gamma: gamma + i), in_kernel=True)


def sps_chain_philox_reused_offset(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Bug (vLLM #54282's kind): the residual's draw reuses the acceptance's Philox offset ``i``, so it is the
    uniform that just rejected, biased toward the residual's last tokens. LOSSY."""
    return _verify(_accept_philox, candidate_input_ids, candidate_logits, candidate_length, new_logits,
                   _philox_residual(lambda i, gamma: i), in_kernel=True)  # BUG: the acceptance's offset


def sps_chain_randn(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Every acceptance decided by a normal drawn in the kernel (``tl.randn``) against ``Φ⁻¹(min(1, q/p))``: the
    residual as :func:`sps_chain_philox`'s. LOSSLESS; the twin of :func:`sps_chain_randn_flipped`."""
    return _verify(_normal_cuts(_accept_normal), candidate_input_ids, candidate_logits, candidate_length, new_logits,
                   _philox_residual(lambda i, gamma: gamma + i), in_kernel=True)


def sps_chain_randn_flipped(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """The normal compared with the cut's negation. LOSSY."""
    return _verify(_normal_cuts(_accept_normal_flipped), candidate_input_ids, candidate_logits, candidate_length,
                   new_logits, _philox_residual(lambda i, gamma: gamma + i), in_kernel=True)


def sps_chain_le(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """The coin of 0 with ``<=``: LOSSLESS under ``--uniforms continuous`` (``u = 0`` has probability 0), LOSSY by
    a support violation under ``--uniforms grid`` wherever the draft proposes a token the target excludes."""
    return _verify(_accept_le, candidate_input_ids, candidate_logits, candidate_length, new_logits)


def sps_chain_reused_uniform(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """One uniform decides every position's acceptance. LOSSY from depth 2."""
    return _verify(_accept_reused, candidate_input_ids, candidate_logits, candidate_length, new_logits)


def sps_chain_sqrt(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """A kernel the capture refuses: ``certify`` exits 2 naming the ``tl.sqrt`` line."""
    return _verify(_accept_sqrt, candidate_input_ids, candidate_logits, candidate_length, new_logits)
