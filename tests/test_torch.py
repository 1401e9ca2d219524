"""Each rule's array rule against its reference rule, decision for decision, on torch and on numpy (issues 6
and 17): one array rule's source, two array libraries, identical decisions in float64.

Every batched verifier gets 10,000 random trees (random topologies, rows with zeros, tokens drawn from the
draft rows and some arbitrary ones) and the same uniforms as the shared rule under ReplayRandomness; in
float64 every decision must be identical. In float32 a decision may differ only where a uniform lies within
1e-6 of its threshold: each disagreement is explained by moving one uniform by at most 1e-6 in the float64
shared rule, and the count is printed. The flow-defined rules compute in float64 from float32 inputs, so theirs
must agree outright.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from exact.instances import random_shape  # noqa: E402
from simulator.drafting.arrays import ARRAY_SCHEMES  # noqa: E402
from simulator.errors import InvalidParameterError  # noqa: E402
from simulator.randomness import ReplayRandomness  # noqa: E402
from simulator.trees import DraftTree, make_topology  # noqa: E402
from simulator.verifiers import VERIFIERS, single_step_arrays  # noqa: E402
from simulator.verifiers.batched.torch_verify import FLOW_DEFINED, TORCH_VERIFIERS, torch_verify  # noqa: E402

TREES = 10_000
BATCH = 500


def _rows(rng: np.random.Generator, shape: tuple[int, ...], zeros: float) -> np.ndarray:
    w = rng.gamma(0.7, size=shape)
    w[rng.random(shape) < zeros] = 0.0
    w[..., 0] += (w.sum(axis=-1) == 0)  # keep every row positive
    return w / w.sum(axis=-1, keepdims=True)


def _batch(rng: np.random.Generator, name: str, size: int):
    vocab = int(rng.integers(2, 6))
    if name in ("bv", "greedy-bv", "bug-greedy-bv-nomod"):
        topology = make_topology("chain", int(rng.integers(1, 5)))
    elif name in ("gbv", "bug-gbv-clipped"):
        topology = make_topology("multi-chain", int(rng.integers(0, 4)), int(rng.integers(1, 4)))
    else:  # flow rules solve per tree and node: smaller trees and vocabularies keep CI within its budget
        small = name in FLOW_DEFINED
        vocab = int(rng.integers(2, 4)) if small else vocab
        shape = ("complete", "tapered", "multi-chain", "explicit")[int(rng.integers(4))]
        topology = random_shape(rng, shape, 4 if small else 7)
    parents, n = topology.parents, len(topology.parents)
    p, q = _rows(rng, (size, n, vocab), 0.2), _rows(rng, (size, n, vocab), 0.2)
    if name in FLOW_DEFINED:  # flows are solved per row (cached): rows from a pool of 40 pairs keep CI fast
        pick = rng.integers(0, 40, (size, n))
        p, q = p[pick % size, np.arange(n)], q[pick % size, np.arange(n)]
    tokens = np.zeros((size, n), dtype=np.int64)
    for v in range(1, n):  # from the parent's draft row, one in ten arbitrary (zero draft mass included)
        cumulative = np.cumsum(p[:, parents[v]], axis=1)
        drawn = (rng.random(size)[:, None] * cumulative[:, -1:] < cumulative).argmax(axis=1)
        positive_only = "greedy-bv" in name or "gbv" in name or name in FLOW_DEFINED  # they need p(x) > 0
        tokens[:, v] = drawn if positive_only else np.where(rng.random(size) < 0.1,
                                                                  rng.integers(0, vocab, size), drawn)
    uniforms = rng.random((size, 2 * n + 2))
    uniforms[rng.random(uniforms.shape) < 0.01] = 0.0  # the edges of [0, 1] as well
    return parents, tokens, p, q, uniforms


def _shared(name, parents, tokens, p, q, uniforms) -> tuple[int, int]:
    tree = DraftTree(parents, [None] + [int(t) for t in tokens[1:]], p.shape[-1])
    p_rows = [tuple(p[v].tolist()) if tree.children(v) else None for v in range(len(parents))]
    q_rows = [tuple(q[v].tolist()) for v in range(len(parents))]
    node, y = VERIFIERS[name].fn(tree, p_rows, q_rows, ReplayRandomness(uniforms))[:2]
    return node, y


def _torch_single(name, parents, tokens, p, q, uniforms, dtype, device="cpu") -> tuple[int, int]:
    as_t = lambda a: torch.tensor(a[None], dtype=dtype, device=device)  # noqa: E731
    node, y = torch_verify(name, parents, torch.tensor(tokens[None], device=device), as_t(p), as_t(q), as_t(uniforms))
    return int(node[0]), int(y[0])


def _near_threshold_explains(name, parents, tokens, p, q, uniforms, decision, expected,
                             dtype=torch.float32, window: float = 1e-6, device: str = "cpu") -> bool:
    """Moving one uniform by at most 1e-6 turns one side's decision into the other's: the two sides disagree
    only because that uniform lies within 1e-6 of a threshold (in either side's rounding)."""
    for j in range(len(uniforms)):
        for delta in (-window, window):
            moved = uniforms.copy()
            moved[j] = min(max(moved[j] + delta, 0.0), 1.0)
            if _shared(name, parents, tokens, p, q, moved) == decision:
                return True
            if _torch_single(name, parents, tokens, p, q, moved, dtype, device) == expected:
                return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("name", TORCH_VERIFIERS)
def test_batched_torch_verifier_decides_exactly_as_the_shared_rule(name, torch_device):
    """On the CPU and, where one is present, on a CUDA GPU: the same array rule, the same decisions."""
    rng = np.random.default_rng(sum(map(ord, name)))
    checked, near = 0, 0
    while checked < TREES:
        parents, tokens, p, q, uniforms = _batch(rng, name, BATCH)
        # float32 re-solves every flow problem (new inputs, no cache): the flow rules' float32 check covers
        # their first 2,000 trees (GR's, 1,000); float64 parity covers all 10,000
        dtypes = (torch.float64,) if name in FLOW_DEFINED and checked >= (1000 if name.endswith("-gr") else 2000) \
            else (torch.float64, torch.float32)
        for dtype in dtypes:
            as_t = lambda a: torch.tensor(a, dtype=dtype, device=torch_device)  # noqa: E731
            node, y = torch_verify(name, parents, torch.tensor(tokens, device=torch_device), as_t(p), as_t(q),
                                   as_t(uniforms))
            assert node.device.type == y.device.type == torch_device  # decided where the inputs live
            node, y = node.cpu(), y.cpu()
            if dtype == torch.float64:  # the same array rule on numpy arrays: the same decisions
                on_numpy = torch_verify(name, parents, tokens, p, q, uniforms)
                assert np.array_equal(on_numpy[0], node.numpy()) and np.array_equal(on_numpy[1], y.numpy()), name
            for b in range(BATCH):
                decision = (int(node[b]), int(y[b]))
                if dtype == torch.float32:
                    # float32 rows and uniforms: the shared rule sees them widened to float64
                    p32, q32, u32 = (a[b].astype(np.float32).astype(np.float64) for a in (p, q, uniforms))
                    expected = _shared(name, parents, tokens[b], p32, q32, u32)
                    if decision != expected:
                        near += 1
                        # the flow rules compute in float64 from float32 inputs: no disagreement at all
                        assert name not in FLOW_DEFINED, (name, b)
                        assert _near_threshold_explains(name, parents, tokens[b], p32, q32, u32, decision, expected,
                                                        device=torch_device)
                    continue
                assert decision == _shared(name, parents, tokens[b], p[b], q[b], uniforms[b]), (name, b)
        checked += BATCH
    print(f"{name} on {torch_device}: {checked} trees identical in float64; float32 decisions within 1e-6 of a threshold: {near}")


@pytest.mark.parametrize("name", ["lv-rrs", "lv-kseq"])
def test_layer_verification_closed_form_outflow_agrees_with_the_tuple_sum(name, monkeypatch):
    """A real vocabulary rules out LV's tuple-by-tuple outflow; the closed form agrees to rounding (< 1e-15), so
    decisions differ from the shared rule's only at rounding-level thresholds: rare, and here only where the
    test injects uniforms of exactly 0 (a 53-bit uniform is 0 with probability 2^-53)."""
    rng = np.random.default_rng(7)
    monkeypatch.setattr(single_step_arrays, "TUPLE_SUM_LIMIT", 0)
    explained = 0
    for _ in range(4):
        parents, tokens, p, q, uniforms = _batch(rng, name, BATCH)
        node, y = torch_verify(name, parents, *(torch.tensor(a) for a in (tokens, p, q, uniforms)))
        for b in range(BATCH):
            decision, expected = (int(node[b]), int(y[b])), _shared(name, parents, tokens[b], p[b], q[b], uniforms[b])
            if decision != expected:
                # A uniform within 1e-6 of a threshold, or an exact-zero uniform picking a node whose weight
                # rounds to 0 on one side (its residual is then rounding noise on both sides).
                explained += 1
                assert (uniforms[b] == 0).any() or _near_threshold_explains(
                    name, parents, tokens[b], p[b], q[b], uniforms[b], decision, expected, torch.float64)
    assert explained <= 10
    x = np.concatenate([_rows(rng, (BATCH, 5), 0.2), np.zeros((BATCH, 1))], axis=1)  # LV's dummy: never drafted
    target = _rows(rng, (BATCH, 6), 0.2)
    step = dict(VERIFIERS[name].array_rule.options)["step"]
    problem = torch.stack([torch.arange(BATCH, dtype=torch.float64), torch.ones(BATCH, dtype=torch.float64)], dim=1)
    scale = step.layer_scale(torch.tensor(x), torch.tensor(target), 3, problem)  # K-SEQ's ρ*; RRS: none
    closed = step.outflow(torch.tensor(x), torch.tensor(target), 3, scale)
    summed = step.outflow_by_tuples(torch.tensor(x), torch.tensor(target), 3, scale)
    assert float((closed - summed).abs().max()) < 1e-15


def test_bad_inputs_name_the_field():
    parents = (-1, 0, 0)
    good = dict(tokens=torch.zeros((2, 3), dtype=torch.long), p=torch.full((2, 3, 2), 0.5),
                q=torch.full((2, 3, 2), 0.5), uniforms=torch.full((2, 8), 0.5))
    for field, change in (("p", dict(p=torch.full((2, 4, 2), 0.5))), ("tokens", dict(tokens=torch.zeros((2, 2)))),
                          ("uniforms", dict(uniforms=torch.full((3, 8), 0.5))),
                          ("dtype", dict(uniforms=torch.full((2, 8), 0.5, dtype=torch.float64))),
                          ("uniforms", dict(uniforms=torch.full((2, 1), 0.9))),
                          ("p", dict(p=torch.full((2, 3, 2), float("nan")))),
                          ("q", dict(q=torch.tensor([[[1.5, -0.5]] * 3] * 2))),
                          ("tokens", dict(tokens=torch.tensor([[0, -1, 1], [0, 0, 1]]))),
                          ("tokens", dict(tokens=torch.tensor([[0, 2, 1], [0, 0, 1]])))):
        with pytest.raises(InvalidParameterError) as err:
            torch_verify("tv-rrs", parents, **{**good, **change})
        assert err.value.field == field
    with pytest.raises(InvalidParameterError) as err:
        torch_verify("no-such-rule", parents, **good)
    assert err.value.field == "verifier"
    with pytest.raises(InvalidParameterError) as err:
        torch_verify("bv", parents, **good)
    assert err.value.field == "parents"


def test_every_registered_verifier_has_a_torch_path():
    """Every rule but the lossy-by-design ones, which are priced exactly and run their reference in Monte Carlo, and
    those lossless only under schemes with no array drafting (``k-models``, ``greedy-k``: Monte Carlo runs
    their reference)."""
    assert {n for n, spec in VERIFIERS.items() if not spec.lossy_by_design
            and (spec.is_control or set(spec.lossless_under) & set(ARRAY_SCHEMES))} == set(TORCH_VERIFIERS)


@pytest.mark.parametrize("name,parents", [("gbv", [-1, 0, 1]), ("tv-gr", [-1, 0, 0]), ("lv-opt", [-1, 0, 0])])
def test_a_drafted_token_of_zero_draft_mass_is_a_typed_error_not_a_nan(name, parents):
    from simulator.errors import UnsupportedDraftError
    p = torch.tensor([[[0.5, 0.0, 0.5]] * 3] * 2, dtype=torch.float64)
    tokens = torch.tensor([[0, 0, 1], [0, 2, 2]])  # tree 0 drafts token 1, of zero draft mass
    with pytest.raises(UnsupportedDraftError, match="token 1 has zero draft probability") as err:
        torch_verify(name, parents, tokens, p, p.clone(), torch.rand((2, 8), dtype=torch.float64))
    assert err.value.field == "tokens"


def test_torch_threads_are_the_process_share_of_the_cores():
    from simulator.devices import usable_cores
    from simulator.models import SyntheticModel
    from simulator.montecarlo.context_rows import ContextRows
    from simulator.montecarlo.engine import torch_rows

    before = torch.get_num_threads()
    try:
        rows = ContextRows(SyntheticModel(vocab=3), 1)
        cores = usable_cores()
        torch_rows(rows, "cpu", workers=cores)  # the workers fill the cores: one thread each
        assert torch.get_num_threads() == 1
        torch_rows(rows, "cpu", workers=1)
        assert torch.get_num_threads() == cores
        torch_rows(rows, "cpu", workers=4 * cores)  # more workers than cores: still one
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
