"""A generation loop in specproof's convention (docs/loops.md): chain speculative sampling with transformers'
logits processors, and its twin that hands the acceptance test the draft's raw row while drafting from the
processed one (transformers#47932's bug class).

    specproof certify --loop examples.loops:speculative_sampling --model tiny-llama --vocab 4 --top-k 2
    specproof certify --loop examples.loops:raw_draft_row --model tiny-llama --vocab 4 --top-k 2     # LOSSY
"""

from __future__ import annotations

import torch

from simulator.loops.processors import processed_row, transformers_processors

DEPTH = 2  # draft tokens per round


def speculative_sampling(target, draft, input_ids, *, max_new_tokens: int, sampling: dict,
                         raw_draft_row: bool = False) -> list[int]:
    """Chain speculative sampling (Leviathan et al., ICML 2023, arXiv:2211.17192): draft ``DEPTH`` tokens from
    the draft's processed rows ``p``, score them in one target pass, accept token ``x`` with probability
    ``min(1, q(x) / p(x))`` against the target's processed row ``q``, resample the first rejection from
    ``norm((q − p)_+)``, and draw a bonus token from ``q`` after a fully accepted draft. LOSSLESS."""
    process = transformers_processors(sampling)
    ids, new = input_ids, []
    while len(new) < max_new_tokens:
        seq, drafted, rows = ids, [], []
        for _ in range(DEPTH):  # draft a chain
            logits = draft(seq)[0, -1]
            p = processed_row(process, seq, logits)
            x = int(torch.multinomial(p, 1))
            drafted.append(x)
            rows.append(torch.softmax(logits.double(), dim=-1) if raw_draft_row else p)
            seq = torch.cat([seq, torch.tensor([[x]])], dim=1)
        logits = target(seq)[0]  # one pass scores every drafted position
        start = ids.shape[1]
        for i, x in enumerate(drafted):
            q = processed_row(process, seq[:, :start + i], logits[start + i - 1])
            p = rows[i]
            if torch.rand(1) < q[x] / p[x]:
                new.append(x)
                if len(new) == max_new_tokens:
                    return new
                continue
            residual = torch.clamp(q - p, min=0)
            new.append(int(torch.multinomial(residual, 1)))
            break
        else:
            new.append(int(torch.multinomial(processed_row(process, seq, logits[-1]), 1)))  # the bonus token
        ids = torch.cat([input_ids, torch.tensor([new])], dim=1)
    return new[:max_new_tokens]


def raw_draft_row(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
    """The twin: drafts from the processed row but hands the acceptance test and the residual the draft's raw
    softmax. Under top-k (or any cut) the two rows differ, and the output law is not the target's: LOSSY."""
    return speculative_sampling(target, draft, input_ids, max_new_tokens=max_new_tokens, sampling=sampling,
                                raw_draft_row=True)
