"""The conventions of shipped verifiers as adapters (simulator.kernels.conventions): EAGLE's candidate paths,
vLLM's batched rejection sampler, SpecInfer's depth-first token tree. The layouts against hand-built ones, each
convention's correct kernel LOSSLESS beside its buggy twin LOSSY (by a hand-derived TVD where the tree is small
enough), and wrong answers refused with a KernelError naming what is wrong.
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest

torch = pytest.importorskip("torch")

import examples.convention_kernels as kernels  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from exact import certify  # noqa: E402
from simulator.drafting.drafter_registry import make_drafter  # noqa: E402
from simulator.errors import KernelError, UnsupportedDraftError  # noqa: E402
from simulator.kernels.conventions import eagle_paths_adapter, specinfer_adapter, vllm_adapter  # noqa: E402
from simulator.kernels.kernel import Kernel  # noqa: E402
from simulator.models import RandomRationalModel, TableModel  # noqa: E402
from simulator.trees import DraftTree, make_topology  # noqa: E402
from specproof.cli import app as cli  # noqa: E402

#: one row pair at every context: p = (1/8, 1/8, 3/4), q = (1/4, 1/2, 1/4). min(p, q) = (1/8, 1/8, 1/4), so a
#: first draft is rejected with probability 1/2, and the residual norm((q − p)_+) is (1/4, 3/4, 0)
P, Q = [F(1, 8), F(1, 8), F(3, 4)], [F(1, 4), F(1, 2), F(1, 4)]
TABLE = TableModel(3, {None: P}, {None: Q})
FORK, CHAIN, TREE = ("complete", 1, 2), ("chain", 2, 1), ("complete", 2, 2)
#: random rational pairs whose short supports keep each convention's enumeration to a second or two
#: (TABLE's full supports take 10–25 s on TREE: the slow test)
SEEDS = {"eagle-paths": (2, 3, 10), "vllm": (1, 2), "specinfer": (2, 4)}


def _certificate(name: str, adapter: str, shape, drafting: str, model, fn=None):
    kernel = Kernel(f"examples.convention_kernels:{name}", adapter, fn=fn)
    return certify(model, make_drafter(drafting, make_topology(*shape)), kernel)


def _verdicts(name: str, adapter: str, shape, drafting: str, lossless: bool, models=None, fn=None) -> None:
    """A correct kernel is lossless on every pair (TVD 0 up to float64 rounding, no support violation); its twin
    is lossy on some pair, with a counterexample (a pair's short supports may hide the bug)."""
    models = models or [RandomRationalModel(3, seed=s) for s in SEEDS[adapter]]
    certs = [_certificate(name, adapter, shape, drafting, model, fn) for model in models]
    if lossless:
        assert all(c.lossless and c.tvd <= 1e-12 and c.off_support == 0 for c in certs), [c.tvd for c in certs]
    else:
        lossy = [c for c in certs if not c.lossless]
        assert lossy and all(c.counterexample is not None for c in lossy)


def _layout(adapter, tree: DraftTree, answer, q=None) -> tuple:
    """The arguments ``adapter`` hands a kernel answering ``answer``, and the ``(node, y)`` it maps that to."""
    seen = []

    def kernel(*args):
        seen.append(args)
        return answer

    p = [[0.5, 0.25, 0.25] if tree.children(v) else None for v in range(len(tree))]
    q = q or [[0.25, 0.25, 0.5]] * len(tree)
    out = adapter(kernel, tree, p, q, 3, torch.float64)
    return seen[0], out


# ---- layouts against hand-built ones ----------------------------------------------------------------------------
COMPLETE = DraftTree((-1, 0, 0, 1, 1, 2, 2), (None, 0, 1, 2, 0, 1, 2))
#: EAGLE-style sparse tree: the first child of the root has three children, the second none
SPARSE = DraftTree((-1, 0, 0, 1, 1, 1), (None, 2, 0, 0, 1, 2))


def test_eagle_paths_layout_of_a_complete_tree():
    (choices, indices, candidates, target, draft), out = _layout(eagle_paths_adapter, COMPLETE, (2, 2, 1))
    assert choices == [[0], [1], [0, 0], [0, 1], [1, 0], [1, 1]]
    assert indices.tolist() == [[0, 1, 3], [0, 1, 4], [0, 2, 5], [0, 2, 6]]
    assert candidates.tolist() == [[-1, 0, 2], [-1, 0, 0], [-1, 1, 1], [-1, 1, 2]]
    assert target.shape == draft.shape == (7, 3) and target.dtype == torch.float64
    assert not draft[:3].isnan().any() and draft[3:].isnan().all()  # leaves draw nothing
    assert out == (5, 1)  # path 2 = [0, 2, 5], two tokens accepted


def test_eagle_paths_layout_of_a_sparse_tree_pads_short_paths():
    (choices, indices, candidates, _, _), out = _layout(eagle_paths_adapter, SPARSE, (3, 1, 0))
    assert choices == [[0], [1], [0, 0], [0, 1], [0, 2]]
    assert indices.tolist() == [[0, 1, 3], [0, 1, 4], [0, 1, 5], [0, 2, -1]]
    assert candidates.tolist() == [[-1, 2, 0], [-1, 2, 1], [-1, 2, 2], [-1, 0, -1]]
    assert out == (2, 0)


def test_specinfer_layout_is_depth_first_preorder():
    """BFS 0..6 in pre-order is 0, 1, 3, 4, 2, 5, 6; the parents renumbered into that order."""
    q = [[F(v + 1, 10), F(1, 10), F(8 - v, 10)] for v in range(7)]
    (tokens, parents, draft, target), out = _layout(specinfer_adapter, COMPLETE, torch.tensor([1, 2, 0]), q=q)
    assert tokens.tolist() == [-1, 0, 2, 0, 1, 1, 2]
    assert parents.tolist() == [-1, 0, 1, 1, 0, 4, 4]
    assert target[:, 0].tolist() == [0.1, 0.2, 0.4, 0.5, 0.3, 0.6, 0.7]
    assert draft[[0, 1, 4]].isnan().sum() == 0 and draft[[2, 3, 5, 6]].isnan().all()
    assert out == (6, 0)  # tokens 1 then 2: node 2, then its child 6


def test_specinfer_duplicate_sibling_tokens_map_to_the_same_sequence():
    tree = DraftTree((-1, 0, 0, 1), (None, 1, 1, 2))  # two children of the root carry token 1
    _, (node, y) = _layout(specinfer_adapter, tree, torch.tensor([1, 0]))
    assert tree.path(node) == (1,) and y == 0
    _, (node, y) = _layout(specinfer_adapter, tree, torch.tensor([1, 2, 2]))
    assert (node, y) == (3, 2)


def test_vllm_layout_of_a_chain():
    chain = DraftTree((-1, 0, 1), (None, 2, 0))
    q = [[F(1, 2), F(1, 2), 0], [F(1, 4), F(1, 4), F(1, 2)], [0, 0, 1]]  # the bonus must be token 2
    (target, bonus, draft, drafted), out = _layout(vllm_adapter, chain, torch.tensor([[2, 0, 2]]), q=q)
    assert target.shape == (1, 3, 3) and draft.shape == (1, 2, 3) and drafted.tolist() == [[2, 0]]
    assert bonus.tolist() == [[2]] and target[0, 2].tolist() == [0, 0, 1]
    assert out == (2, 2)


# ---- correct kernels LOSSLESS, buggy twins LOSSY ----------------------------------------------------------------
@pytest.mark.parametrize("name, lossless", [("eagle_paths_rrs", True), ("eagle_paths_rrs_with_replacement", False)])
def test_eagle_paths_recursive_rejection_without_replacement(name, lossless):
    """Complete b = 2, H = 2, V = 3, children drafted without replacement."""
    _verdicts(name, "eagle-paths", TREE, "without-replacement", lossless)


@pytest.mark.slow
@pytest.mark.parametrize("name, adapter, drafting, lossless", [
    ("eagle_paths_rrs", "eagle-paths", "without-replacement", True),
    ("eagle_paths_rrs_with_replacement", "eagle-paths", "without-replacement", False),
    ("specinfer_mss", "specinfer", "iid", True),
    ("specinfer_mss_unnormalised", "specinfer", "iid", False)])
def test_tree_conventions_on_full_supports(name, adapter, drafting, lossless):
    """Complete b = 2, H = 2 on TABLE, where every node gets both children."""
    _verdicts(name, adapter, TREE, drafting, lossless, [TABLE])


def test_eagle_paths_twin_has_the_hand_derived_tvd_on_a_fork():
    """Root with two children, without replacement, on TABLE. x1 = 2 (prob 3/4) is accepted with q/p = 1/3; x1 in
    {0, 1} always: a rejection has probability 1/2, and then x2 is 0 or 1 with probability 1/2 each (the row
    without token 2). The correct rule verifies x2 against (1/2, 1/2, 0) and emits q. The twin verifies it against
    p: ratios (1/4)/(1/8) and (3/4)/(1/8) ≥ 1, so x2 is always accepted, and token 0 gets 1/8 + 1/4 = 3/8 for
    q's 1/4, token 1 3/8 for 1/2: TVD 1/8 (the second token is q's in both)."""
    assert _certificate("eagle_paths_rrs", "eagle-paths", FORK, "without-replacement", TABLE).lossless
    cert = _certificate("eagle_paths_rrs_with_replacement", "eagle-paths", FORK, "without-replacement", TABLE)
    assert not cert.lossless and abs(cert.tvd - F(1, 8)) <= 1e-12, cert.tvd


def test_eagle_paths_rule_skipping_tried_tokens_is_lossless_under_iid_too():
    """An i.i.d. sibling that differs from the tokens tried is distributed as the row without them, and one that
    repeats a tried token is skipped: so the same kernel is lossless for i.i.d. children."""
    _verdicts("eagle_paths_rrs", "eagle-paths", FORK, "iid", True,
              [TABLE, *(RandomRationalModel(3, seed=s) for s in (1, 2))])


class RejectionSampler(torch.nn.Module):
    """The kernel as vLLM ships it, a module's ``forward``."""

    def __init__(self, kernel) -> None:
        super().__init__()
        self.kernel = kernel

    def forward(self, target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids):
        return self.kernel(target_with_bonus_probs, bonus_token_ids, draft_probs, draft_token_ids)


@pytest.mark.parametrize("name, lossless", [("vllm_rejection_sampler", True), ("vllm_rejection_sampler_count", False)])
def test_vllm_rejection_sampler_as_a_module(name, lossless):
    fn = RejectionSampler(getattr(kernels, name)).forward
    _verdicts(name, "vllm", CHAIN, "iid", lossless, fn=fn)
    _verdicts(name, "vllm", ("chain", 1, 1), "iid", True, [TABLE], fn)  # one draft: no bug to show


def test_vllm_twin_has_the_hand_derived_tvd():
    """Chain of two on TABLE. The twin differs when the first draft is rejected (probability 1/2: it is token 2)
    and the second accepted (probability 1/2): it emits (2, r) with r from the residual (1/4, 3/4, 0), where the
    correct rule emits (r, z), z from q. The first token of (r, z) is never 2, so the moved mass 1/4 lands on
    sequences apart: TVD 1/4."""
    assert _certificate("vllm_rejection_sampler", "vllm", CHAIN, "iid", TABLE).lossless
    cert = _certificate("vllm_rejection_sampler_count", "vllm", CHAIN, "iid", TABLE)
    assert not cert.lossless and abs(cert.tvd - F(1, 4)) <= 1e-12, cert.tvd


@pytest.mark.parametrize("name, lossless", [("specinfer_mss", True), ("specinfer_mss_unnormalised", False)])
def test_specinfer_multi_step_speculative_sampling_under_iid(name, lossless):
    _verdicts(name, "specinfer", TREE, "iid", lossless)
    _verdicts(name, "specinfer", CHAIN, "iid", True, [TABLE])  # one child per node: no bug to show


def test_specinfer_twin_has_the_hand_derived_tvd_on_a_fork():
    """Root with two i.i.d. children on TABLE. After x1 is rejected (probability 1/2) the residual is
    (1/8, 3/8, 0) unnormalised: x2 = 0 has ratio 1 (normalised: 2), x2 = 1 is accepted, x2 = 2 is rejected and
    leaves (0, 1/4, 0). Token 0 gets 1/8 + 1/2 · 1/8 = 3/16 for q's 1/4, token 1 9/16 for 1/2: TVD 1/16. Under
    without-replacement drafting the correct rule verifies x2 against p as the EAGLE twin does: TVD 1/8."""
    assert _certificate("specinfer_mss", "specinfer", FORK, "iid", TABLE).lossless
    cert = _certificate("specinfer_mss_unnormalised", "specinfer", FORK, "iid", TABLE)
    assert not cert.lossless and abs(cert.tvd - F(1, 16)) <= 1e-12, cert.tvd
    cert = _certificate("specinfer_mss", "specinfer", FORK, "without-replacement", TABLE)
    assert not cert.lossless and abs(cert.tvd - F(1, 8)) <= 1e-12, cert.tvd


# ---- wrong answers ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("answer, words", [
    ((0, 1), "expected (best_candidate, accept_length, token)"),
    ([0, 1, 2], "expected (best_candidate, accept_length, token)"),
    ((4, 1, 0), "best_candidate 4, not a path index (0..3)"),
    ((-1, 1, 0), "best_candidate -1, not a path index"),
    ((1, 3, 0), "accept_length 3 on path 1, which has 2 draft tokens"),
    ((1, torch.tensor([1, 2]), 0), "accept_length with 2 elements"),
    ((torch.tensor(1.0), 1, 0), "best_candidate of dtype torch.float32"),
    ((1, 1, 3), "outside the vocabulary"),
    ((1, 1, -1), "placeholder -1"),
])
def test_eagle_paths_wrong_answers_are_named(answer, words):
    with pytest.raises(KernelError) as err:
        _layout(eagle_paths_adapter, COMPLETE, answer)
    assert words in err.value.message, err.value.message


@pytest.mark.parametrize("answer, words", [
    (torch.tensor([2, 0, 1]), "expected output token ids of shape [1, 3]"),
    (torch.tensor([[2, -1, 1]]), "a token after a -1 placeholder"),
    (torch.tensor([[1, 0, -1]]), "as accepted drafts, but the drafts were [2]"),
    (torch.tensor([[2, 0, 3]]), "outside the vocabulary"),
])
def test_vllm_wrong_answers_are_named(answer, words):
    with pytest.raises(KernelError) as err:
        _layout(vllm_adapter, DraftTree((-1, 0, 1), (None, 2, 0)), answer)
    assert words in err.value.message, err.value.message


def test_vllm_refuses_a_tree():
    with pytest.raises(UnsupportedDraftError) as err:
        _layout(vllm_adapter, COMPLETE, None)
    assert err.value.field == "topology"


@pytest.mark.parametrize("answer, words", [
    (torch.tensor([[1, 2]]), "returned (1, 2), expected a token sequence of shape [m+1]"),
    (torch.tensor([], dtype=torch.long), "returned (0,)"),
    ([1, 2], "returned list"),
    (torch.tensor([2, 0]), "token 0 (2) is no child's token after []"),
    (torch.tensor([0, 2, 0, 1]), "token 2 (0) is no child's token after [0, 2]"),
    (torch.tensor([1, 5]), "returned token 5 as token 1, outside the vocabulary"),
    (torch.tensor([1.0, 2.0]), "dtype torch.float32"),
])
def test_specinfer_wrong_answers_are_named(answer, words):
    with pytest.raises(KernelError) as err:
        _layout(specinfer_adapter, COMPLETE, answer)
    assert words in err.value.message, err.value.message


def eagle_paths_out_of_range(tree_choices, retrieve_indices, candidates, target_probs, draft_probs):
    return len(retrieve_indices), 0, 0


@pytest.mark.parametrize("kernel, adapter, seed, code", [
    ("examples.convention_kernels:eagle_paths_rrs", "eagle-paths", 2, 0),
    ("examples.convention_kernels:vllm_rejection_sampler_count", "vllm", 1, 1),
    ("test_kernel_conventions:eagle_paths_out_of_range", "eagle-paths", 1, 2)])
def test_certify_with_a_convention_adapter_exit_codes(kernel, adapter, seed, code):
    """vllm takes a chain by default; a path index out of range is exit 2."""
    result = CliRunner().invoke(cli.main, ["certify", "--kernel", kernel, "--adapter", adapter, "--depth", "2",
                                           "--model", "random-rational", "--vocab", "3", "--seed", str(seed),
                                           "--drafting", "without-replacement"])
    assert result.exit_code == code, result.output
    assert code != 2 or "not a path index" in result.output
