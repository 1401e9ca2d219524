"""EAGLE's own ``evaluate_posterior`` (eagle-llm 1.2.1) through ``--adapter eagle``.

The layout is checked against hand-derived values (each child's draft probability given its earlier siblings) and,
where the module is in the cache, against EAGLE's own ``generate_tree_buffers``. The certification runs the
module as shipped (``specproof fetch eagle-posterior``; the tests that need it are skipped, saying so, where it is
not in the cache: the suite has no network). What it must give, derived from its source: recursive rejection
sampling that verifies the ``k``-th sibling against the draft row without the ``k − 1`` earlier ones and subtracts
that row on a rejection, so LOSSLESS when the children are drafted without replacement, as EAGLE's drafter draws
them; its coin ``random.random() <= p(x)/q(x)`` accepts a token the target excludes when the coin is exactly 0,
which Python's ``random()`` returns with probability 2^-53: a support violation under ``--uniforms grid``.
"""

from __future__ import annotations

import json
import sys
from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from simulator.errors import KernelError  # noqa: E402
from simulator.kernels import conventions  # noqa: E402
from simulator.kernels.conventions import eagle_adapter, eagle_paths_buffers  # noqa: E402
from simulator.real.fetch import cached  # noqa: E402
from simulator.trees import DraftTree  # noqa: E402
from specproof.cli.app import main  # noqa: E402

EAGLE = "eagle.model.utils:evaluate_posterior"
COMPLETE = DraftTree((-1, 0, 0, 1, 1, 2, 2), (None, 0, 1, 2, 0, 1, 2))
#: the first child of the root has three children, the second none: a short path padded with -1
SPARSE = DraftTree((-1, 0, 0, 1, 1, 1), (None, 2, 0, 0, 1, 2))
DRAFT, TARGET = [0.5, 0.25, 0.25], [0.25, 0.25, 0.5]
#: the certification the issue asks for: complete b = 2, H = 2, V = 3, children drafted without replacement
CERTIFY = ["certify", "--kernel", EAGLE, "--adapter", "eagle", "--topology", "complete", "--branching", "2",
           "--depth", "2", "--model", "random-rational", "--vocab", "3", "--seeds", "3"]


def _layout(tree: DraftTree, answer) -> tuple:
    """The arguments the adapter hands a stand-in kernel answering ``answer``, and the ``(node, y)`` it maps to."""
    seen = []

    def kernel(*args):
        seen.append(args)
        return answer

    p = [DRAFT if tree.children(v) else None for v in range(len(tree))]
    out = eagle_adapter(kernel, tree, p, [TARGET] * len(tree), 3, torch.float64)
    return seen[0], out


def _folder():
    folder = cached("eagle-posterior")
    if folder is None:
        pytest.skip("eagle-llm's evaluate_posterior module is not in the cache: run `specproof fetch "
                    "eagle-posterior` (a 164 kB download) to run this test")
    return folder


@pytest.fixture
def eagle_path(monkeypatch):
    """The fetched module on the import path for one test, imported afresh."""
    folder = _folder()
    for name in [m for m in sys.modules if m == "eagle" or m.startswith("eagle.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", [str(folder), *sys.path])
    return folder


def test_layout_of_a_complete_tree():
    """Paths [0,1,3], [0,1,4], [0,2,5], [0,2,6]; tokens (·, 0, 1, 2, 0, 1, 2). Drafted without replacement from
    (1/2, 1/4, 1/4): a first child has its row's probability, a second one its probability over 1 − the first's:
    node 2 (token 1 after 0) 1/4 / 1/2, node 4 (0 after 2) 1/2 / 3/4, node 6 (2 after 1) 1/4 / 3/4."""
    (logits, candidates, processor, prob, op, p_indices, tree_candidates, b_indices), out = _layout(
        COMPLETE, (torch.tensor(3), 2, torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)))
    assert candidates.tolist() == [[0, 0, 2], [0, 0, 0], [0, 1, 1], [0, 1, 2]]
    assert tree_candidates.tolist() == [[0, 0, 1, 2, 0, 1, 2]]
    expected = [[1, F(1, 2), F(1, 4)], [1, F(1, 2), F(2, 3)], [1, F(1, 2), F(1, 4)], [1, F(1, 2), F(1, 3)]]
    assert all(abs(F(x) - e) < 1e-15 for row, erow in zip(prob.tolist(), expected) for x, e in zip(row, erow))
    assert logits.shape == (4, 3, 3) and torch.allclose(logits.softmax(-1), torch.tensor(TARGET, dtype=torch.float64))
    assert [level.shape for level in op] == [(1, 3), (2, 3)] and processor(None, logits) is logits
    assert p_indices == [[-1, 0, 0], [-1, 0, 0], [-1, 0, 1], [-1, 0, 1]]
    assert [[b.tolist() if isinstance(b, torch.Tensor) else b for b in row] for row in b_indices] == \
        [[[], [], []], [[], [], [3]], [[], [1], []], [[], [1], [5]]]
    assert out == (6, 1)  # path 3, node 2 of it; the token multinomial drew from the point mass


def test_a_short_path_is_padded_as_eagle_pads_it():
    (logits, candidates, _, prob, _, p_indices, _, _), out = _layout(
        SPARSE, (torch.tensor(3), 1, torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)))
    assert candidates.tolist() == [[0, 2, 0], [0, 2, 1], [0, 2, 2], [0, 0, -1]]
    assert prob[3].tolist()[2] == 1.0 and p_indices[3] == [-1, 0, 0]  # the padding reads the last node, as EAGLE's
    assert out == (2, 2)


@pytest.mark.parametrize("answer, words", [
    ((0, 1), "expected (best_candidate, accept_length, sample_p)"),
    ((4, 1, torch.ones(3)), "best_candidate 4, not a path index (0..3)"),
    ((1, 3, torch.ones(3)), "accept_length 3 on path 1, which has 2 draft tokens"),
    ((1, 1, torch.ones(4)), "sample_p (4,), expected a distribution of shape [3]"),
    ((1, 1, [0.0, 1.0, 0.0]), "sample_p list"),
])
def test_wrong_answers_are_named(answer, words):
    with pytest.raises(KernelError) as err:
        _layout(COMPLETE, answer)
    assert words in err.value.message, err.value.message


def test_the_hook_stands_in_for_transformers_only_where_it_is_not_installed(monkeypatch):
    names = ("transformers", "transformers.generation", "transformers.generation.logits_process")
    saved = {name: sys.modules.get(name) for name in names}
    try:
        for name in names:
            sys.modules.pop(name, None)
        conventions._eagle_imports()  # installed here: transformers is imported as is, later, by the module
        assert all(name not in sys.modules for name in names)
        monkeypatch.setattr(conventions.importlib.util, "find_spec", lambda name: None)
        conventions._eagle_imports()
        assert sys.modules["transformers.generation.logits_process"].TopKLogitsWarper.__doc__.startswith("a stand-in")
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def test_the_layout_is_eagles_own(eagle_path):
    """EAGLE's ``generate_tree_buffers`` on the same ``tree_choices`` gives the same paths, parent ranks and
    earlier siblings as the adapter."""
    from eagle.model.utils import generate_tree_buffers

    for tree in (COMPLETE, SPARSE):
        choices, _ = eagle_paths_buffers(tree)
        theirs = generate_tree_buffers(choices, device="cpu")
        (_, candidates, _, _, _, p_indices, _, b_indices), _ = _layout(tree, (0, 0, torch.ones(3)))
        ours = [[b.tolist() if isinstance(b, torch.Tensor) else b for b in row] for row in b_indices]
        assert [[b.tolist() if isinstance(b, torch.Tensor) else b for b in row] for row in theirs["b_indices"]] == ours
        assert theirs["p_indices"] == p_indices
        tokens = [0, *tree.tokens[1:], -1]  # -1 past a path's end indexes the -1 appended, as in EAGLE
        assert candidates.tolist() == [[tokens[v] for v in row] for row in theirs["retrieve_indices"].tolist()]


def test_evaluate_posterior_is_lossless_without_replacement(eagle_path, tmp_path):
    out = tmp_path / "cert.json"
    result = CliRunner().invoke(main, [*CERTIFY, "--import-path", str(eagle_path), "--drafting",
                                       "without-replacement", "--schemes", "without-replacement", "--json", str(out)])
    assert result.exit_code == 0, result.output
    cert = json.loads(out.read_text())
    assert cert["lossless"] and float(F(cert["tvd"])) < 1e-15 and F(cert["off_support"]) == 0


def test_evaluate_posterior_accepts_an_excluded_token_on_a_coin_of_zero(eagle_path, tmp_path):
    """Under grid uniforms (Python's ``random()`` is a multiple of 2^-53) the coin is 0 with probability 2^-53,
    and ``0 <= p(x)/q(x)`` holds for a draft the target gives 0: a support violation above 0 and at most one cell
    per coin, and no execution compares more coins than the tree's 6 drafts."""
    out = tmp_path / "cert.json"
    result = CliRunner().invoke(main, [*CERTIFY, "--import-path", str(eagle_path), "--drafting",
                                       "without-replacement", "--uniforms", "grid", "--json", str(out)])
    assert result.exit_code == 1, result.output
    mass = F(json.loads(out.read_text())["off_support"])
    assert 0 < mass <= 6 * F(1, 2**53), mass


@pytest.mark.slow
def test_evaluate_posterior_is_lossy_under_iid_drafting(eagle_path):
    """The negative control of another scheme: two i.i.d. siblings may share a token, and then
    ``evaluate_posterior``, which matches paths by their tokens, verifies the second one's children after the
    first one's as more siblings: LOSSY (EAGLE's drafter never draws a token twice at a node)."""
    result = CliRunner().invoke(main, [*CERTIFY, "--import-path", str(eagle_path), "--drafting", "iid"])
    assert result.exit_code == 1, result.output
