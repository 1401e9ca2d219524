"""Adapters for the calling conventions of shipped verifiers (docs/kernels.md, "Conventions of shipped verifiers"):
EAGLE's ``evaluate_posterior``, vLLM's rejection samplers, SGLang's Triton chain verifier and SpecInfer's token
tree, each laying specproof's tree and rows out as the convention does and checking the kernel's answer."""

from __future__ import annotations

import functools
import importlib.util
import logging
import sys
import types

import torch

from simulator.errors import InvalidParameterError, KernelError
from simulator.kernels.adapters import (PLACEHOLDER, accepted_count, chain_nodes, checked_token, int_values,
                                       one_int, padded_tokens, rows_tensor)
from simulator.kernels.loading import interpreter_on
from simulator.kernels.triton_capture import libdevice_stand_in
from simulator.trees import TreeStructure
from simulator.usercode import require


def eagle_paths_buffers(tree: TreeStructure) -> tuple[list[list[int]], list[list[int]]]:
    """EAGLE's ``tree_choices`` and root-to-leaf paths for a BFS-ordered tree, laid out as its
    ``generate_tree_buffers`` does: each non-root node as its child ranks from the root, in BFS order (EAGLE sorts
    them by length, then ranks: the same order); each path as its node ids from the root, ordered by their ids
    (EAGLE's sorted ``retrieve_indices``: depth-first order of the leaves)."""
    choices: list[list[int]] = [[]]
    for v in range(1, len(tree)):
        parent = tree.parents[v]
        choices.append([*choices[parent], tree.children(parent).index(v)])
    return choices[1:], tree.leaf_paths()


def eagle_paths_adapter(kernel, tree: TreeStructure, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """EAGLE's and Medusa's convention (``evaluate_posterior``'s sampling path): ``kernel(tree_choices,
    retrieve_indices [P, H+1], candidates [P, H+1], target_probs [n, V], draft_probs [n, V]) -> (best_candidate,
    accept_length, token)``, nodes flattened in BFS order, one row per root-to-leaf path, ``-1`` past a path's end
    and at the root's token; the answer is node ``retrieve_indices[best_candidate, accept_length]``, then
    ``token``."""
    choices, paths = eagle_paths_buffers(tree)
    width = tree.height + 1
    indices = [path + [PLACEHOLDER] * (width - len(path)) for path in paths]
    tokens = [PLACEHOLDER, *tree.tokens[1:]]
    candidates = [[PLACEHOLDER if v == PLACEHOLDER else tokens[v] for v in row] for row in indices]
    out = kernel(choices, torch.tensor(indices), torch.tensor(candidates), rows_tensor(q, dtype),
                 rows_tensor(p, dtype, vocab))
    return path_node(out, paths, "token"), checked_token(one_int(out[2], "token"), "token", vocab)


def path_node(out: object, paths: list[list[int]], third: str | None = None) -> int:
    """The node an EAGLE answer ``(best_candidate, accept_length, third)`` (a Medusa answer without ``third``)
    names: node ``accept_length`` of path ``best_candidate``; :class:`KernelError` for anything else."""
    names = ("best_candidate", "accept_length", *([third] if third else []))
    if not isinstance(out, tuple) or len(out) != len(names):
        raise KernelError("kernel", f"returned {type(out).__name__}, expected ({', '.join(names)})")
    best, length = one_int(out[0], "best_candidate"), one_int(out[1], "accept_length")
    if not 0 <= best < len(paths):
        raise KernelError("kernel", f"returned best_candidate {best}, not a path index (0..{len(paths) - 1})")
    if not 0 <= length < len(paths[best]):
        raise KernelError("kernel", f"returned accept_length {length} on path {best}, which has "
                                    f"{len(paths[best]) - 1} draft tokens")
    return paths[best][length]


#: the token ``evaluate_posterior`` sees at the root of every path: EAGLE's last emitted token, which it only
#: compares between paths (all of them share it)
EAGLE_ROOT_TOKEN = 0


def _identity_processor(input_ids, scores: torch.Tensor) -> torch.Tensor:
    """EAGLE's logits processor at temperature 1 with no top-k or top-p (``prepare_logits_processor(1.0)``, an
    empty ``LogitsProcessorList``): the scores unchanged."""
    return scores


def eagle_adapter(kernel, tree: TreeStructure, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """eagle-llm 1.2.1's ``evaluate_posterior(logits [P, H+1, V], candidates [P, H+1], logits_processor,
    cart_candidates_prob [P, H+1], op, p_indices, tree_candidates [1, n], b_indices) -> (best_candidate,
    accept_length, sample_p [V])``, its sampling path, with the buffers laid out as EAGLE's
    ``generate_tree_buffers``, ``generate_candidates`` and its drafter's ``sample`` make them; then one token drawn
    from ``sample_p`` by ``torch.multinomial``, as ``update_inference_inputs`` draws it. The answer is node
    ``retrieve_indices[best_candidate, accept_length]`` and that token. EAGLE drafts a node's children without
    replacement: ``cart_candidates_prob`` holds each child's probability given its earlier siblings."""
    _, paths = eagle_paths_buffers(tree)
    width, n = tree.height + 1, len(tree)
    retrieve = torch.tensor([path + [PLACEHOLDER] * (width - len(path)) for path in paths])
    tokens = torch.tensor([EAGLE_ROOT_TOKEN, *tree.tokens[1:]])
    depth = [0] * n
    for v in range(1, n):
        depth[v] = depth[tree.parents[v]] + 1
    parents_by_depth: list[list[int]] = [[] for _ in range(tree.height)]
    for v in range(n):
        if tree.children(v):
            parents_by_depth[depth[v]].append(v)
    draft = rows_tensor(p, dtype, vocab)
    op = [draft[level] for level in parents_by_depth]  # each level's draft rows, one per node with children
    # each node's parent as its rank among the parents of its level (op's row); -1 at the root, as EAGLE's
    rank = [-1] + [parents_by_depth[depth[v] - 1].index(tree.parents[v]) for v in range(1, n)]
    earlier = [[] for _ in range(n)]  # the siblings drafted before each node
    conditional = torch.ones(n, dtype=dtype)
    for v in range(1, n):
        siblings = tree.children(tree.parents[v])
        earlier[v] = siblings[:siblings.index(v)]
        row, before = draft[tree.parents[v]], [tree.tokens[u] for u in earlier[v]]
        ratio = row[tree.tokens[v]] / (1 - row[before].sum())  # as the drafter's sample: 0 where not finite
        conditional[v] = ratio.clamp(0.0, 1.0) if ratio.isfinite() else 0.0
    rows = retrieve.tolist()  # a -1 of the padding indexes the last node below, as EAGLE's tensor indexing does
    # the arguments first, a torch call last: a comprehension is a call of specproof's own code, which switches the
    # kernel's profiler off until the next torch call (simulator/random_sources.py), so none may come between
    # that call and the kernel's first line
    p_indices = [[rank[v] for v in path] for path in rows]
    b_indices = [[torch.tensor(earlier[v]) if v != PLACEHOLDER and earlier[v] else [] for v in path] for path in rows]
    logits = torch.log(rows_tensor(q, dtype))[retrieve]
    candidates = torch.cat([tokens, torch.tensor([PLACEHOLDER])])[retrieve]
    cart_candidates_prob = torch.cat([conditional, torch.ones(1, dtype=dtype)])[retrieve]
    tree_candidates = tokens[None]
    out = kernel(logits, candidates, _identity_processor, cart_candidates_prob, op, p_indices, tree_candidates,
                 b_indices)
    node = path_node(out, paths, "sample_p")
    sample_p = out[2]
    if not isinstance(sample_p, torch.Tensor) or tuple(sample_p.shape) != (vocab,):
        shape = tuple(sample_p.shape) if isinstance(sample_p, torch.Tensor) else type(sample_p).__name__
        raise KernelError("kernel", f"returned sample_p {shape}, expected a distribution of shape [{vocab}]")
    token = torch.multinomial(sample_p, 1)  # update_inference_inputs: token = torch.multinomial(prob, 1)
    return node, checked_token(one_int(token, "token"), "token", vocab)


def _eagle_imports() -> None:
    """eagle-llm's ``eagle/model/utils.py`` (``specproof fetch eagle-posterior``) imports transformers' logits
    processors at its top, for ``prepare_logits_processor``, which the adapter does not call. Where transformers is
    not installed, this installs a stand-in for ``transformers.generation.logits_process`` holding those names;
    where it is, the module imports it as is (a stand-in would shadow the real module for the rest of the
    process)."""
    name = "transformers.generation.logits_process"
    if name in sys.modules or importlib.util.find_spec("transformers") is not None:
        return
    stand_in = types.ModuleType(name, "a stand-in installed by specproof's eagle adapter")
    for cls in ("LogitsProcessorList", "RepetitionPenaltyLogitsProcessor", "TemperatureLogitsWarper",
                "TopKLogitsWarper", "TopPLogitsWarper"):
        setattr(stand_in, cls, type(cls, (), {"__doc__": "a stand-in: EAGLE's verification does not use it"}))
    for package in ("transformers", "transformers.generation"):
        sys.modules.setdefault(package, types.ModuleType(package, "a stand-in installed by specproof's eagle "
                                                                  "adapter"))
    sys.modules[name] = stand_in


eagle_adapter.before_kernel_import = _eagle_imports  # type: ignore[attr-defined]


def _stand_in(name: str, attributes: dict[str, object], adapter: str) -> None:
    """Install a stand-in module ``name`` holding ``attributes`` where none is imported; where one an adapter's
    hook installed is (one process may certify vLLM 0.11 and 0.33 in turn), add the names it lacks; a real
    module is left alone."""
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name, f"a stand-in installed by specproof's {adapter} adapter")
        module.specproof_stand_in = True  # type: ignore[attr-defined]
        sys.modules[name] = module
    if getattr(module, "specproof_stand_in", False):
        for key, value in attributes.items():
            module.__dict__.setdefault(key, value)


def vllm_adapter(kernel, tree: TreeStructure, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """vLLM's ``RejectionSampler.forward(target_with_bonus_probs [B, k+1, V], bonus_token_ids [B, 1], draft_probs
    [B, k, V], draft_token_ids [B, k]) -> output_token_ids [B, k+1]``: the accepted drafts, the recovered or bonus
    token, then ``-1`` placeholders; here ``B = 1``, a chain of ``k`` drafts. The bonus is drawn here from the
    leaf's target row by ``torch.multinomial`` before the kernel runs, as vLLM's sampler draws it."""
    nodes = chain_nodes(tree, "vllm")
    drafted = [tree.tokens[v] for v in nodes[1:]]
    _counters_made(kernel)
    bonus = torch.multinomial(rows_tensor([q[nodes[-1]]], dtype), 1)
    out = kernel(rows_tensor([q[v] for v in nodes], dtype)[None], bonus.reshape(1, 1),
                 rows_tensor([p[v] for v in nodes[:-1]], dtype)[None], torch.tensor([drafted]))
    emitted = padded_tokens(out, drafted, vocab)
    return nodes[len(emitted) - 1], emitted[-1]


def _counters_made(kernel) -> None:
    """vLLM's samplers add to acceptance counters their worker makes with ``init_gpu_tensors(device)``
    (``SpecDecodeBaseSampler``); for a method of such a sampler (``--kernel module:RejectionSampler.forward``)
    the adapter makes them on the CPU when they are missing, as the worker would on its device."""
    owner = getattr(getattr(kernel, "func", kernel), "__self__", None)
    if getattr(owner, "num_accepted_tokens", 0) is None and callable(getattr(owner, "init_gpu_tensors", None)):
        owner.init_gpu_tensors("cpu")


def _vllm_imports() -> None:
    """vLLM 0.6.3's sampler modules (``specproof fetch vllm-sampler``) import two small modules of the vLLM
    package beyond torch: ``vllm.envs`` (read for ``VLLM_USE_FLASHINFER_SAMPLER``) and ``vllm.logger``. Where
    they are not already imported, this installs stand-ins for them (FlashInfer off, the standard logger), so
    the sampler imports without vLLM's heavy package ``__init__``: the fetched folder has none, so ``vllm`` is a
    namespace package there."""
    for name, attributes in (("vllm.envs", {"VLLM_USE_FLASHINFER_SAMPLER": False}),
                             ("vllm.logger", {"init_logger": logging.getLogger})):
        _stand_in(name, attributes, "vllm")


vllm_adapter.before_kernel_import = _vllm_imports  # type: ignore[attr-defined]


def vllm_v1_adapter(kernel, tree: TreeStructure, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """vLLM 0.11.0's ``rejection_sample(draft_token_ids [k], num_draft_tokens [B], max_spec_len,
    cu_num_draft_tokens [B], draft_probs [k, V], target_probs [k, V], bonus_token_ids [B, 1], sampling_metadata)
    -> output_token_ids [B, k+1]`` (``vllm/v1/sample/rejection_sampler.py``): the accepted drafts, the recovered
    or bonus token, then ``-1`` placeholders; here ``B = 1``, one request of ``k`` drafts, sampled at temperature 1
    with no seed (``all_random``, no generators), so its uniforms and exponentials come from torch's default
    generator as in production. The bonus is drawn here from the leaf's target row by ``torch.multinomial``
    before the call, as vLLM's sampler draws it."""
    return _vllm_v1(kernel, tree, p, q, vocab, dtype, with_draft_probs=True)


def vllm_v1_no_draft_probs_adapter(kernel, tree: TreeStructure, p, q, vocab: int,
                                   dtype: torch.dtype) -> tuple[int, int]:
    """:func:`vllm_v1_adapter` with ``draft_probs=None``, as vLLM's engine calls it for drafters that give no
    probabilities (n-gram, and EAGLE's greedy drafting): the kernel takes each draft as certain (``draft_prob =
    1``), accepting draft ``x`` with probability ``q(x)`` and recovering from ``q`` without ``x``. That is
    lossless whatever the draft's law, and optimal where the drafts are deterministic (``--model table`` with
    point-mass draft rows, as ``examples/point_mass_draft.json``); with a random draft it accepts less than
    speculative sampling would."""
    return _vllm_v1(kernel, tree, p, q, vocab, dtype, with_draft_probs=False)


def _vllm_v1(kernel, tree: TreeStructure, p, q, vocab: int, dtype: torch.dtype,
             with_draft_probs: bool) -> tuple[int, int]:
    nodes = chain_nodes(tree, "vllm-v1")
    drafted = [tree.tokens[v] for v in nodes[1:]]
    k = len(drafted)
    metadata = types.SimpleNamespace(all_greedy=False, all_random=True, generators={},
                                     temperature=torch.ones(1, dtype=torch.float64))
    bonus = torch.multinomial(rows_tensor([q[nodes[-1]]], dtype), 1).to(torch.int32)
    draft_probs = rows_tensor([p[v] for v in nodes[:-1]], dtype, vocab) if with_draft_probs else None
    out = kernel(torch.tensor(drafted, dtype=torch.int32), [k], k, torch.tensor([k], dtype=torch.int32), draft_probs,
                 rows_tensor([q[v] for v in nodes[:-1]], dtype), bonus.reshape(1, 1), metadata)
    emitted = padded_tokens(out, drafted, vocab)
    return nodes[len(emitted) - 1], emitted[-1]


def vllm_v1_imports() -> None:
    """The vllm-v1 artifact's modules (``specproof fetch vllm-v1``: ``rejection_sampler.py``, the spec-decode and
    sampling metadata, ``topk_topp_sampler.py``) import, beyond torch and triton, modules of the vLLM package that
    ``RejectionSampler.forward`` never reaches. Where they are not already imported, this installs stand-ins:
    ``vllm.logger`` (the standard logger), ``vllm.triton_utils`` (the real ``triton`` and ``triton.language``), and
    names that ``TopKTopPSampler``'s constructor (never called here) or an annotation reads: ``vllm.platforms``'
    ``current_platform``, ``vllm.envs``' ``VLLM_USE_FLASHINFER_SAMPLER``, ``vllm.config``'s ``LogprobsMode`` and
    ``vllm.v1.sample.logits_processor``'s ``LogitsProcessors`` (the type of a metadata field ``forward`` never
    reads). ``packaging`` (``topk_topp_sampler.py`` parses FlashInfer's version with it) gets a stand-in only where
    it is not installed."""
    require("triton", "vLLM's v1 rejection sampler", "adapter")
    interpreter_on()
    import triton
    import triton.language as tl

    def not_called(*args, **kwargs):
        raise KernelError("kernel", "called a stand-in of the vllm-v1 adapters, for a module forward never reaches")

    stand_ins = [("vllm.logger", {"init_logger": logging.getLogger}),
                 ("vllm.triton_utils", {"triton": triton, "tl": tl}),
                 ("vllm.platforms", {"current_platform": types.SimpleNamespace(is_cuda=not_called, is_cpu=not_called)}),
                 ("vllm.envs", {"VLLM_USE_FLASHINFER_SAMPLER": False}),
                 ("vllm.config", {"LogprobsMode": str}),
                 ("vllm.v1.sample.logits_processor",
                  {"LogitsProcessors": type("LogitsProcessors", (), {"__doc__": "a stand-in: forward reads none"})})]
    if "packaging" not in sys.modules and importlib.util.find_spec("packaging") is None:
        stand_ins += [("packaging", {"version": types.SimpleNamespace(parse=not_called)})]
    for name, attributes in stand_ins:
        _stand_in(name, attributes, "vllm-v1")


vllm_v1_adapter.before_kernel_import = vllm_v1_imports  # type: ignore[attr-defined]
vllm_v1_no_draft_probs_adapter.before_kernel_import = vllm_v1_imports  # type: ignore[attr-defined]


#: the request seed the vllm-mrv2 adapter passes: any; its in-kernel draws are enumerated per key, not computed
MRV2_SEED = 1234


def vllm_mrv2_adapter(kernel, tree: TreeStructure, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """vLLM 0.33.0's Model Runner V2 ``rejection_sample(target_logits [k+1, V], draft_logits [1, k, V],
    draft_sampled [k+1], cu_num_logits [2], pos [k+1], idx_mapping [1], expanded_idx_mapping [k+1],
    expanded_local_pos [k+1], temperature [1], seed [1], num_speculative_steps k, ...) -> (sampled [1, k+1],
    num_sampled [1])`` (``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py``): one request of ``k``
    drafts at temperature 1, ``draft_sampled[i + 1]`` the draft verified at logit ``i`` (``draft_sampled[0]``, the
    token before them, 0 here), logits the rows' logs (``-inf`` at a zero), positions ``0..k``, seed
    :data:`MRV2_SEED`. The answer: ``sampled[0, :num_sampled]``, the accepted drafts then the resampled token.
    Pass ``use_block_verification=True``, ``use_fp64=True`` or FLy's ``fly_window_size=W,fly_entropy_threshold=T``
    with ``--kernel-kwargs``; ``synthetic_acceptance_rates=[r_1,...,r_k]``, vLLM's knob of
    ``rejection_method="synthetic"``, is taken here and passed as the ``synthetic_conditional_rates`` tensor its
    ``RejectionSampler`` builds (:func:`mrv2_synthetic_rates`)."""
    nodes = chain_nodes(tree, "vllm-mrv2")
    drafted = [tree.tokens[v] for v in nodes[1:]]
    k = len(drafted)
    kernel, synthetic = mrv2_synthetic_rates(kernel, k)
    logits = torch.log(rows_tensor([q[v] for v in nodes], dtype))
    draft_logits = torch.log(rows_tensor([p[v] for v in nodes[:-1]], dtype, vocab))[None]
    positions = torch.arange(k + 1, dtype=torch.int64)
    sampled, num_sampled = kernel(logits, draft_logits, torch.tensor([0, *drafted], dtype=torch.int64),
                                  torch.tensor([0, k + 1], dtype=torch.int32), positions,
                                  torch.zeros(1, dtype=torch.int32), torch.zeros(k + 1, dtype=torch.int32), positions,
                                  torch.ones(1, dtype=torch.float64), torch.tensor([MRV2_SEED], dtype=torch.int64), k,
                                  **synthetic)
    n = one_int(num_sampled, "num_sampled")
    if not 1 <= n <= k + 1:
        raise KernelError("kernel", f"returned num_sampled {n} for {k} drafts (expected 1 to {k + 1})")
    emitted = int_values(sampled, "sampled")[:n]
    accepted_count(emitted, drafted, vocab)
    return nodes[n - 1], emitted[-1]


def mrv2_synthetic_rates(kernel, depth: int) -> tuple[object, dict]:
    """``kernel`` without a ``synthetic_acceptance_rates`` keyword bound by ``--kernel-kwargs``, and the keyword
    argument ``rejection_sample`` takes in its place: ``synthetic_conditional_rates``, a float32 tensor of
    ``c_i = r_i / r_{i−1}`` (``r_{−1} = 1``; 0 where ``r_{i−1} = 0``), as vLLM 0.33.0's Model Runner V2
    ``RejectionSampler`` converts the rates by ``unconditional_to_conditional_rates``
    (``vllm/v1/spec_decode/utils.py:848–851``, a module that imports far more of vLLM than the artifact holds; the
    rates are checked, and one number taken as the rate at every position, as the built-in ``forced-rate`` does).
    Nothing for a kernel without the keyword."""
    keywords = getattr(kernel, "keywords", None)
    if not isinstance(kernel, functools.partial) or "synthetic_acceptance_rates" not in keywords:
        return kernel, {}
    from simulator.verifiers.knobs import bind
    from simulator.verifiers.lossy import forced_rate

    rest = dict(keywords)
    given = {"synthetic_acceptance_rates": rest.pop("synthetic_acceptance_rates")}
    try:
        rates = bind("vllm-mrv2", forced_rate.KNOBS, given)["synthetic_acceptance_rates"]
        # vLLM's list of Python floats, divided in float64 as its conversion divides them
        floats = [float(r) for r in rates] if isinstance(rates, tuple) else float(rates)
        conditional = forced_rate.conditional_rates(floats, depth)
    except InvalidParameterError as err:
        raise InvalidParameterError("kernel-kwargs.synthetic_acceptance_rates", err.message) from None
    return (functools.partial(kernel.func, *kernel.args, **rest),
            {"synthetic_conditional_rates": torch.tensor(conditional, dtype=torch.float32)})


def _vllm_mrv2_imports() -> None:
    """vLLM 0.33.0's Model Runner V2 modules (``specproof fetch vllm-mrv2``) import ``vllm.triton_utils``
    (``tl``, ``triton`` and ``tldevice``, Triton's libdevice) and ``vllm.v1.worker.gpu.sample.watermark``, whose
    ``philox_gumbel_block_argmax`` runs only for watermarked requests (the adapter sends none). Where they are not
    already imported, this installs stand-ins: the real triton, libdevice as the interpreter can run it
    (:func:`~simulator.kernels.triton_capture.libdevice_stand_in`: NumPy's ``log1p``), and a function that
    says it is one."""
    require("triton", "vLLM's Model Runner V2 rejection sampler", "adapter")
    interpreter_on()
    import triton
    import triton.language as tl

    libdevice = libdevice_stand_in()

    def not_called(*args, **kwargs):
        raise KernelError("kernel", "called vllm's philox_gumbel_block_argmax, a stand-in of the vllm-mrv2 adapter")

    for name, attributes in (("vllm.triton_utils", {"triton": triton, "tl": tl, "tldevice": libdevice}),
                             ("vllm.v1.worker.gpu.sample.watermark", {"philox_gumbel_block_argmax": not_called})):
        _stand_in(name, attributes, "vllm-mrv2")


vllm_mrv2_adapter.before_kernel_import = _vllm_mrv2_imports  # type: ignore[attr-defined]
#: MRv2 resamples by Gumbel-max on a murmur3 hash of (seed, position, token), computed in integer arithmetic:
#: a uniform per key, as tl.rand's Philox is per (seed, offset)
vllm_mrv2_adapter.keyed_uniforms = {  # type: ignore[attr-defined]
    "vllm.v1.worker.gpu.sample.gumbel:murmur3_uniform32": "float32",
    "vllm.v1.worker.gpu.sample.gumbel:murmur3_uniform64": "float64"}


def sglang_adapter(kernel, tree: TreeStructure, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """SGLang's ``chain_speculative_sampling_triton(predicts [B·S], accept_index [B, S], accept_token_num [B],
    candidates [B, S], retrive_index [B, S], retrive_next_token, retrive_next_sibling, uniform_samples [B, S],
    uniform_samples_for_final_sampling [B], target_probs [B, S, V], draft_probs [B, S, V], threshold_single,
    threshold_acc, deterministic)``, chain verification: here ``B = 1`` and ``S = γ + 1`` slots, slot 0 the
    verified token before the drafts and slot ``i`` the ``i``-th draft, each slot's output at ``predicts[i]``.
    It writes the number accepted ``n`` to ``accept_token_num`` and the emitted tokens to ``predicts[0..n]``.
    The uniforms are drawn here by ``torch.rand``, as SGLang's worker draws its coins before the launch; the
    thresholds (read by SGLang's tree kernel only) are 1."""
    nodes = chain_nodes(tree, "sglang")
    drafted = [tree.tokens[v] for v in nodes[1:]]
    slots = len(nodes)
    predicts = torch.full((slots,), PLACEHOLDER, dtype=torch.int32)
    accept_index = torch.full((1, slots), PLACEHOLDER, dtype=torch.int32)
    accept_token_num = torch.zeros(1, dtype=torch.int32)
    candidates = torch.tensor([[0, *drafted]], dtype=torch.int64)
    retrive_index = torch.arange(slots, dtype=torch.int64)[None]
    retrive_next_token = torch.tensor([[*range(1, slots), PLACEHOLDER]], dtype=torch.int64)
    retrive_next_sibling = torch.full((1, slots), PLACEHOLDER, dtype=torch.int64)
    target = rows_tensor([q[v] for v in nodes], dtype)[None]
    draft = rows_tensor([p[v] for v in nodes[:-1]], dtype, vocab)[None]
    uniform_samples = torch.rand(1, slots, dtype=dtype)
    uniform_samples_for_final_sampling = torch.rand(1, dtype=dtype)
    kernel(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
           retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target, draft, 1.0, 1.0, True)
    n = one_int(accept_token_num, "accept_token_num")
    if not 0 <= n <= len(drafted):
        raise KernelError("kernel", f"wrote accept_token_num {n} for {len(drafted)} drafts")
    emitted = int_values(predicts, "predicts")[:n + 1]
    accepted_count(emitted, drafted, vocab)
    return nodes[n], emitted[n]


def preorder(tree: TreeStructure) -> list[int]:
    """The nodes in depth-first pre-order, each node's children in rank order (the order they were drafted)."""
    order, stack = [], [0]
    while stack:
        v = stack.pop()
        order.append(v)
        stack.extend(reversed(tree.children(v)))
    return order


def specinfer_adapter(kernel, tree: TreeStructure, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """SpecInfer's token tree: ``kernel(tokens [n], parents [n], draft_probs [n, V], target_probs [n, V]) ->
    tokens [m+1]``, nodes in depth-first pre-order, ``tokens[0] = parents[0] = -1``; the answer is the verified
    sequence, ``m`` tokens accepted down the tree and one more. It is mapped to a node by walking from the root by
    token; where siblings share a token the first is taken (every node it could be gives the same sequence, and a
    verdict reads only the sequence)."""
    order = preorder(tree)
    position = {v: i for i, v in enumerate(order)}
    out = kernel(torch.tensor([PLACEHOLDER, *(tree.tokens[v] for v in order[1:])]),
                 torch.tensor([PLACEHOLDER, *(position[tree.parents[v]] for v in order[1:])]),
                 rows_tensor([p[v] for v in order], dtype, vocab), rows_tensor([q[v] for v in order], dtype))
    if not isinstance(out, torch.Tensor) or out.dim() != 1 or len(out) == 0:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise KernelError("kernel", f"returned {shape}, expected a token sequence of shape [m+1]")
    emitted = int_values(out, "the token sequence")
    node = 0
    for i, token in enumerate(emitted[:-1]):
        child = next((c for c in tree.children(node)
                      if tree.tokens[c] == checked_token(token, f"token {i}", vocab)), None)
        if child is None:
            raise KernelError("kernel", f"returned {emitted}: token {i} ({token}) is no child's token after "
                                        f"{emitted[:i]} in the tree")
        node = child
    return node, checked_token(emitted[-1], f"token {len(emitted) - 1}", vocab)
