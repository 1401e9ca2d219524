"""Each negative control is lossy on the shapes its registry entry names, and lossless where its bug cannot show.

The shapes are derived by hand from each bug (docs/controls.md): TRV's visiting order matters only where a leaf
of smaller index is not first in DFS post-order; GBV's ranking only when there are two paths to rank; one target
draw per row differs from one per node only where a node has two children; greedy BV's modification only touches
tokens after its output, which need depth 2. On a lossy shape a pair can still hide the bug, so the lossy side
asks for a loss on one of a few model pairs; the lossless side holds on every pair.
"""

from __future__ import annotations

import pytest

from exact import certify
from simulator.drafting.drafter_registry import DrafterOptions, make_drafter
from simulator.models import RandomRationalModel, SyntheticModel
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS

# control → (lossy shapes, lossless shapes); a shape is (topology, depth, branching, parents, drafting)
SHAPES = {
    "bug-greedy-bv-nomod": ([("chain", 2, 1, None, "iid")], [("chain", 1, 1, None, "iid")]),
    "bug-residual-q": ([("chain", 1, 1, None, "iid"), ("complete", 2, 2, None, "iid")], []),
    "bug-accept-all": ([("chain", 1, 1, None, "iid"), ("tapered", 2, 2, None, "without-replacement")], []),
    "bug-trv-insertion-order": (
        [("explicit", 0, 0, (-1, 0, 0, 1), "without-replacement"), ("dyspec", 0, 0, None, "dyspec")],
        [("chain", 2, 1, None, "iid"), ("multi-chain", 2, 2, None, "iid"), ("complete", 2, 2, None, "iid"),
         ("tapered", 2, 2, None, "without-replacement")]),
    "bug-gbv-clipped": ([("multi-chain", 1, 2, None, "iid")], [("chain", 2, 1, None, "iid")]),
    "bug-match-per-row": ([("complete", 1, 2, None, "iid")], [("chain", 2, 1, None, "iid")]),
    "bug-dyspec-printed": ([("chain", 1, 1, None, "without-replacement")], []),
}
MODELS = [RandomRationalModel(3, seed=s) for s in range(3)] + [SyntheticModel(3, seed=s) for s in range(2)]


def _certify(name: str, shape, model):
    topology, depth, branching, parents, scheme = shape
    tree = None if scheme == "dyspec" else make_topology(topology, depth, branching, parents)
    drafter = make_drafter(scheme, tree, model, DrafterOptions(budget=4))
    return certify(model, drafter, name, "float" if VERIFIERS[name].float_only else "fraction")


def test_every_control_has_its_shapes_here():
    assert set(SHAPES) == {name for name, spec in VERIFIERS.items() if spec.is_control}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_control_is_lossy_where_its_entry_says_and_lossless_where_its_bug_cannot_show(name):
    lossy, lossless = SHAPES[name]
    for shape in lossy:
        assert any(not _certify(name, shape, model).lossless for model in MODELS), (name, shape)
    for shape in lossless:
        for model in MODELS:
            assert _certify(name, shape, model).lossless, (name, shape, model.describe())
