"""Medusa's convention (docs/kernels.md, "medusa"): medusa-llm 0.1's own ``evaluate_posterior`` called on
specproof's tree laid out as Medusa's candidates, its answer mapped back to a node (:func:`medusa_adapter`)."""

from __future__ import annotations

import torch

from simulator.errors import KernelError
from simulator.kernels.adapters import checked_token, one_int, rows_tensor
from simulator.kernels.conventions import path_node
from simulator.trees import TreeStructure

#: the token past a short path's end, and the one its padding row gives all the mass: the padding token has
#: probability 0 there, which exceeds no threshold Medusa computes (both terms of its minimum are ≥ 0)
PAD_TOKEN, PAD_MASS = 0, 1
#: what the adapter passes for a knob not given with ``--kernel-kwargs``: medusa_generate's thresholds
#: (``medusa_model.py`` lines 195–197) and temperature 1, the rows as given (0 would be Medusa's greedy branch)
MEDUSA_DEFAULTS = {"temperature": 1.0, "posterior_threshold": 0.09, "posterior_alpha": 0.3}


def medusa_adapter(kernel, tree: TreeStructure, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """medusa-llm 0.1's ``evaluate_posterior(logits [P, H+1, V], candidates [P, H+1], temperature,
    posterior_threshold, posterior_alpha) -> (best_candidate, accept_length)`` (``medusa/model/utils.py`` lines
    267–329): one candidate per root-to-leaf path, in the order of Medusa's ``cartesian_prod`` (the paths sorted by
    node ids), ``candidates[c, 0]`` the token before the tree (Medusa reads only ``[:, 1:]``: 0 here) and
    ``logits[c, i]`` the log of the target's row at the path's ``i``-th node (``-inf`` at a zero). Medusa 0.1's
    candidates all have ``H`` drafts; a shorter path is padded with :data:`PAD_TOKEN` under a row that gives it
    probability 0, so no padding passes. The knobs not given with ``--kernel-kwargs`` are :data:`MEDUSA_DEFAULTS`.

    The answer is node ``accept_length`` of path ``best_candidate``; the token after it is
    ``torch.argmax`` of the target's logits there, as ``generate_candidates`` takes it (line 213) from the logits
    ``update_inference_inputs`` keeps (line 387).
    """
    paths = tree.leaf_paths()
    width = tree.height + 1
    node_logits = torch.log(rows_tensor(q, dtype))
    pad = torch.full((vocab,), -torch.inf, dtype=dtype)
    pad[PAD_MASS] = 0.0
    rows = [[node_logits[v] if i < len(path) - 1 or len(path) == width else pad
             for i, v in enumerate(path + [path[-1]] * (width - len(path)))] for path in paths]
    tokens = [[0, *(tree.tokens[v] for v in path[1:])] + [PAD_TOKEN] * (width - len(path)) for path in paths]
    given = getattr(kernel, "keywords", {})
    knobs = {name: value for name, value in MEDUSA_DEFAULTS.items() if name not in given}
    candidates = torch.tensor(tokens)
    logits = torch.stack([torch.stack(row) for row in rows])
    out = kernel(logits, candidates, **knobs)
    node = path_node(out, paths)
    return node, checked_token(one_int(torch.argmax(node_logits[node]), "the argmax"), "token", vocab)
