"""The torch path's batched verification (:func:`torch_verify`; docs/torch-path.md): a batch of trees of one
topology, rows as arrays on any device, decided by the rule's array rule as the reference rule decides."""

from __future__ import annotations

from typing import Any, Sequence

from array_api_compat import array_namespace, device

from simulator.errors import InvalidParameterError
from simulator.trees import check_parents
from simulator.verifiers import VERIFIERS
from simulator.verifiers.batched.frame import Batch, DenseRows, GivenDraft, ReplayStream, TreeShape

TORCH_VERIFIERS = tuple(name for name, spec in VERIFIERS.items() if spec.array_rule is not None)
FLOW_DEFINED = tuple(name for name in TORCH_VERIFIERS if VERIFIERS[name].array_rule.float64)  # solved in float64


def _check(parents: Sequence[int], tokens: Any, p: Any, q: Any, uniforms: Any) -> tuple[int, ...]:
    parents = check_parents(list(parents))
    n = len(parents)
    if p.ndim != 3 or q.shape != p.shape or p.shape[1] != n:
        raise InvalidParameterError("p", f"p and q must both be [B, {n}, V], got {tuple(p.shape)} and {tuple(q.shape)}")
    if tuple(tokens.shape) != tuple(p.shape[:2]):
        raise InvalidParameterError("tokens", f"must be [B, n] = {tuple(p.shape[:2])}, got {tuple(tokens.shape)}")
    if uniforms.ndim != 2 or uniforms.shape[0] != p.shape[0]:
        raise InvalidParameterError("uniforms", f"must be [B, U] with B = {p.shape[0]}, got {tuple(uniforms.shape)}")
    xp = array_namespace(p, q, uniforms)
    if not (p.dtype == q.dtype == uniforms.dtype) or not xp.isdtype(p.dtype, "real floating"):
        raise InvalidParameterError("dtype", "p, q and uniforms must share one floating dtype")
    inner = sorted(set(parents[1:]))  # a leaf's p is never read (the kernel adapter: NaN)
    for field, blocks in (("p", [p[:, a:b] for a, b in _runs(inner)]), ("q", [q])):
        if p.shape[0] * p.shape[2] and not all(_finite_nonnegative(xp, rows) for rows in blocks):
            raise InvalidParameterError(field, "rows must be finite and non-negative")
    # The uniforms are not range-checked: under kernel capture they are symbolic, and a comparison would draw.
    drafted = tokens[:, 1:]
    if drafted.shape[0] * drafted.shape[1] and (bool(xp.min(xp.min(drafted, axis=1)) < 0)
                                                or bool(xp.max(xp.max(drafted, axis=1)) >= p.shape[2])):
        raise InvalidParameterError("tokens", f"drafted tokens must lie in 0..{p.shape[2] - 1}")
    return parents


def _runs(nodes: list[int]) -> list[tuple[int, int]]:
    """Sorted node ids as ``(start, stop)`` runs of consecutive ids: slices of ``[B, n, V]`` are views, where
    indexing by a list of nodes would copy the rows."""
    runs: list[tuple[int, int]] = []
    for v in nodes:
        if runs and runs[-1][1] == v:
            runs[-1] = (runs[-1][0], v + 1)
        else:
            runs.append((v, v + 1))
    return runs


def _finite_nonnegative(xp: Any, rows: Any) -> bool:
    """Whether every entry of ``rows`` ``[B, k, V]`` is finite and ``≥ 0`` (a NaN makes a minimum NaN, which fails
    ``>= 0``). Reduced per tree first: torch reduces a strided view to one number about 30× slower."""
    return bool(xp.min(xp.min(rows, axis=(1, 2))) >= 0) and bool(xp.max(xp.max(rows, axis=(1, 2))) < float("inf"))


def torch_verify(name: str, parents: Sequence[int], tokens: Any, p: Any, q: Any,
                 uniforms: Any) -> tuple[Any, Any]:
    """The accepted node and emitted token of every tree in the batch, ``([B], [B])``, by ``name``'s array rule.

    Torch tensors or numpy arrays: ``p[B, n, V]`` and ``q[B, n, V]`` (the rows of every node; a leaf's ``p`` is
    never read), ``tokens[B, n]`` (``tokens[:, 0]`` is ignored) and ``uniforms[B, U]``, read left to right, one per
    Bernoulli or categorical, exactly as :class:`simulator.randomness.ReplayRandomness` feeds the reference rule
    (the Bernoulli ``u < a``; the categorical's first index whose running sum exceeds ``u·Σw``).

    Every registered verifier has one (:data:`TORCH_VERIFIERS`); it decides as the reference rule does on the same
    uniforms, up to rounding at a threshold. The flow-defined rules (:data:`FLOW_DEFINED`) run the reference solver
    per tree and node in float64 whatever the input dtype: GR's flows are not continuous in their inputs.
    """
    spec = VERIFIERS.get(name)
    if spec is None or spec.array_rule is None:
        raise InvalidParameterError("verifier", f"no array rule for {name!r}; choose from {TORCH_VERIFIERS}")
    parents = _check(parents, tokens, p, q, uniforms)
    xp = array_namespace(p)
    if spec.array_rule.float64 and p.dtype != xp.float64:
        p, q, uniforms = (xp.astype(a, xp.float64) for a in (p, q, uniforms))
    rows = DenseRows(p, q)
    batch = Batch(TreeShape(parents, xp, device(p)), GivenDraft(xp.astype(tokens, xp.int64), rows.ids()), rows,
                  ReplayStream(uniforms))
    return spec.array_rule.run(batch)
