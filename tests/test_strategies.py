"""The Hypothesis strategies users draw instances from (``specproof.gate.testing.model_pairs``, ``tree_shapes``): a
property test of a lossless rule passes, the same property of a control fails and shrinks, the draws stay within
their bounds, and ``assert_lossless`` needs no Hypothesis."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from exact import certify
from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError
from simulator.trees import node_depths
from specproof.gate.testing import model_pairs, tree_shapes

REPO = Path(__file__).resolve().parents[1]
FAST = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(model_pairs(), tree_shapes())
def test_a_lossless_rule_passes_the_property(model, tree):
    assert certify(model, FixedShape(tree, "iid"), "tv-rrs").lossless


def test_the_same_property_finds_a_control_and_shrinks_it():
    """bug-residual-q resamples the target's row instead of the residual: lossy wherever a draft token can be
    rejected. Hypothesis finds a failing instance and shrinks it to the smallest: two tokens, one draft node."""
    model, tree = find(st.tuples(model_pairs(), tree_shapes()),
                       lambda mt: not certify(mt[0], FixedShape(mt[1], "iid"), "bug-residual-q").lossless,
                       settings=settings(max_examples=200, deadline=None, derandomize=True, database=None))
    assert not certify(model, FixedShape(tree, "iid"), "bug-residual-q").lossless
    assert model.vocab == 2 and tree.parents == (-1, 0)


@FAST
@given(model_pairs(vocab=[2, 4], kinds=["table", "random-rational"], max_weight=3))
def test_model_pairs_draw_exact_rows_of_the_sizes_asked(model):
    assert model.vocab in (2, 4)
    for row in (model.p(()), model.q(())):
        assert len(row) == model.vocab and sum(row) == 1 and all(isinstance(x, Fraction) and x >= 0 for x in row)


@FAST
@given(tree_shapes(depths=[1, 2, 3], branchings=[1, 3], max_nodes=7))
def test_tree_shapes_stay_within_their_bounds(tree):
    parents = tree.parents
    assert len(parents) <= 7 and parents[0] == -1
    assert all(parents[i] < i and parents[i] <= parents[i + 1] for i in range(1, len(parents) - 1))  # BFS order
    assert max(node_depths(parents)) <= 3
    assert max((parents.count(v) for v in range(len(parents))), default=0) <= 3


@pytest.mark.parametrize("call, field", [
    (lambda: model_pairs(kinds=["magic"]), "kinds"),
    (lambda: model_pairs(vocab=[]), "vocab"),
    (lambda: model_pairs(vocab=[0]), "vocab"),
    (lambda: model_pairs(max_weight=0), "max_weight"),
    (lambda: tree_shapes(depths=[-1]), "depths"),
    (lambda: tree_shapes(kinds="chain"), "kinds"),
    (lambda: tree_shapes(kinds=["complete"], depths=[3], branchings=[3], max_nodes=4), "max_nodes"),
])
def test_bad_bounds_are_refused_naming_the_field(call, field):
    with pytest.raises(InvalidParameterError) as err:
        call()
    assert err.value.field == field


def test_assert_lossless_needs_no_hypothesis():
    script = ("import sys; sys.modules['hypothesis'] = None\n"
              "from specproof.gate.testing import assert_lossless\n"
              "print(assert_lossless('tv-sps', vocab=[2], topologies=['chain'], depth=1, seeds=[0]))\n"
              "from simulator.errors import SpecproofError\n"
              "try:\n    from specproof.gate.testing import model_pairs\n"
              "except SpecproofError as err:\n    print(err.field, err.message)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    count, refusal = out.stdout.splitlines()
    assert int(count) >= 1 and "needs hypothesis" in refusal and "[test]" in refusal
