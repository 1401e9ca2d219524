"""The drafting schemes' array kernels: a node's children drawn from draft rows ``[m, V]`` and uniforms
``[m, c]``, for numpy and torch alike (``array-api-compat``). Each draws exactly as its reference scheme in
:data:`simulator.drafting.SCHEMES` does on the same uniforms, one per child, read left to right (tested decision
by decision); the KV-cached real path (:mod:`simulator.torch_path.serving`) drafts with them, rows staying on the
model's device.

Only the schemes that draw every child from a uniform have a kernel: ``iid`` and ``without-replacement``.
"""

from __future__ import annotations

from typing import Any, Callable

from array_api_compat import array_namespace, device

from simulator.array_ops import categorical, row_sum
from simulator.errors import InvalidParameterError


def _iid(rows: Any, uniforms: Any) -> Any:
    xp = array_namespace(rows)
    return xp.stack([categorical(rows, uniforms[:, j]) for j in range(uniforms.shape[1])], axis=1)


def _without_replacement(rows: Any, uniforms: Any) -> Any:
    """Sequential draws, each drawn token's weight set to zero before the next; the reference stops short where
    the mass runs out, which a fixed-shape tree cannot, so that is an error naming the drafting."""
    xp = array_namespace(rows)
    tokens = xp.arange(rows.shape[1], device=device(rows))
    drawn = []
    for j in range(uniforms.shape[1]):
        if bool(xp.any(row_sum(rows) <= 0)):
            raise InvalidParameterError("drafting", f"without replacement needs {uniforms.shape[1]} tokens of "
                                                    "positive draft mass per node; a row has fewer (top-k or "
                                                    "top-p below the branching?)")
        x = categorical(rows, uniforms[:, j])
        drawn.append(x)
        rows = xp.where(tokens[None, :] == x[:, None], xp.zeros_like(rows), rows)
    return xp.stack(drawn, axis=1)


#: scheme name -> ``draw(rows [m, V], uniforms [m, c]) -> tokens [m, c]``, the children of ``m`` nodes
ARRAY_SCHEMES: dict[str, Callable[[Any, Any], Any]] = {
    "iid": _iid,
    "without-replacement": _without_replacement,
}


def array_scheme(name: str) -> Callable[[Any, Any], Any]:
    """The kernel of drafting scheme ``name``, or a typed error naming the schemes that have one."""
    if name not in ARRAY_SCHEMES:
        raise InvalidParameterError("drafting", f"{name!r} has no array kernel; the real path drafts with "
                                                f"{sorted(ARRAY_SCHEMES)}")
    return ARRAY_SCHEMES[name]
