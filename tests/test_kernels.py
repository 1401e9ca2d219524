"""Unmodified torch kernels certified exactly (issue 15): the capture's semantics against hand-derived laws,
transformers' own sampler, every torch_verify kernel black-box against its shared rule, eight production bug
classes beside their correct twins, and bad kernels refused with exit 2.

Every expected number here comes from outside the code under test: interval lengths and race weights by hand,
the ensemble sampler's law by an independent recursion over exact fractions, the shared rules' laws by the
exact engine on the reference implementations.
"""

from __future__ import annotations

import inspect
import itertools
import json
import math
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

import specproof.gate.torch_kernels as zoo  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from exact import certify, fixed_tree_law  # noqa: E402
from exact.enumeration import enumerate_outcomes  # noqa: E402
from specproof.cli import app as cli  # noqa: E402
from simulator.drafting.drafter_registry import DrafterOptions, make_drafter  # noqa: E402
from simulator.errors import ChoiceLimitError, KernelError, LimitError, SpecproofError  # noqa: E402
from simulator.kernels import capture as torch_capture  # noqa: E402
from specproof.reports.kernel_report import parity, random_instance  # noqa: E402
from simulator.kernels.capture import capture  # noqa: E402
from simulator.kernels.kernel import Kernel  # noqa: E402
from simulator.limits import limits  # noqa: E402
from simulator.models import RandomRationalModel, SyntheticModel  # noqa: E402
from simulator.trees import make_topology  # noqa: E402
from simulator.verifiers import VERIFIERS  # noqa: E402
from simulator.verifiers.batched.torch_verify import TORCH_VERIFIERS  # noqa: E402
from test_controls import MODELS as CONTROL_MODELS, SHAPES as CONTROL_SHAPES  # noqa: E402


def _law(program, uniforms: str = "continuous") -> dict:
    """The exact law of ``program()`` run under the capture."""
    def run(rng):
        with capture(rng, uniforms):
            return program()
    law: dict = {}
    for outcome, prob in enumerate_outcomes(run, exact=True):
        law[outcome] = law.get(outcome, 0) + prob
    return law


# ---- the capture's semantics ------------------------------------------------------------------------------------
def test_a_reused_uniform_is_conditioned_on_its_first_comparison():
    def program():
        u = torch.rand(())
        return bool(u < 0.25), bool(u < 0.75)  # the second comparison of the same u
    assert _law(program) == {(True, True): Fraction(1, 4), (False, True): Fraction(1, 2),
                             (False, False): Fraction(1, 4)}


def test_monotone_maps_are_inverted_exactly():
    cases = [(lambda u: u.log() < math.log(0.25), Fraction(1, 4)),  # threshold exp(log 0.25), in floats
             (lambda u: 2 * u + 1 > 2.5, Fraction(1, 4)),
             (lambda u: -u < -0.75, Fraction(1, 4)),
             (lambda u: (1 - u) / 4 >= 0.0625, Fraction(3, 4))]
    for fn, expected in cases:
        law = _law(lambda: bool(fn(torch.rand(()))))
        assert abs(law[True] - expected) < 1e-15, law
    # one uniform scaled by two concrete factors: u < 1/2 and u < 1/8, nested intervals
    law = _law(lambda: tuple((torch.rand(()) * torch.tensor([0.5, 2.0]) < 0.25).tolist()))
    assert law == {(True, True): Fraction(1, 8), (True, False): Fraction(3, 8), (False, False): Fraction(1, 2)}


def test_a_uniform_scaled_by_zero_is_decided_without_a_choice():
    # u·0 = 0 for every u: an inverse-CDF walk over an all-zero residual compares running sums with 0
    law = _law(lambda: tuple((torch.rand(()) * torch.tensor([0.0, 1.0]) < 0.5).tolist()))
    assert law == {(True, True): Fraction(1, 2), (True, False): Fraction(1, 2)}
    assert _law(lambda: bool(torch.rand(()) * 0.0 > 0.0)) == {False: 1}


def test_multinomial_with_and_without_replacement():
    w = torch.tensor([1.0, 0.0, 3.0])
    with_r = _law(lambda: tuple(torch.multinomial(w, 2, replacement=True).tolist()))
    without = _law(lambda: tuple(torch.multinomial(w, 2).tolist()))
    assert with_r == {(0, 0): Fraction(1, 16), (0, 2): Fraction(3, 16), (2, 0): Fraction(3, 16),
                      (2, 2): Fraction(9, 16)}
    assert without == {(0, 2): Fraction(1, 4), (2, 0): Fraction(3, 4)}  # the zero weight never drawn
    assert _law(lambda: int(torch.distributions.Categorical(probs=w).sample())) == {0: Fraction(1, 4),
                                                                                     2: Fraction(3, 4)}


def test_bernoulli_and_exponential_races():
    assert _law(lambda: bool(torch.bernoulli(torch.tensor(0.375)))) == {True: Fraction(3, 8), False: Fraction(5, 8)}
    w = torch.tensor([1.0, 2.0, 5.0])
    race = _law(lambda: int((w / torch.empty_like(w).exponential_()).argmax()))  # vLLM's form
    assert race == {0: Fraction(1, 8), 1: Fraction(2, 8), 2: Fraction(5, 8)}
    logits = torch.tensor([0.0, 1.0, -1.0], dtype=torch.float64)
    gumbel = _law(lambda: int((logits - torch.log(-torch.log(torch.rand(3, dtype=torch.float64)))).argmax()))
    softmax = [math.exp(x) / sum(math.exp(y) for y in (0.0, 1.0, -1.0)) for x in (0.0, 1.0, -1.0)]
    assert all(abs(gumbel[i] - softmax[i]) < 1e-15 for i in range(3))


def test_grid_model_gives_a_zero_uniform_its_true_probability():
    """``u <= 0`` is impossible for a continuous uniform and has probability 2^-24 (float32) or 2^-53 (float64)
    on torch's grid, where ``torch.rand`` takes the values k·2^-b."""
    assert _law(lambda: bool(torch.rand(()) <= 0.0)) == {False: 1}
    assert _law(lambda: bool(torch.rand(()) <= 0.0), "grid")[True] == Fraction(1, 2**24)
    assert _law(lambda: bool(torch.rand((), dtype=torch.float64) <= 0.0), "grid")[True] == Fraction(1, 2**53)
    assert _law(lambda: bool(torch.rand(()) < 0.5), "grid")[True] == Fraction(1, 2)  # grid points on 1/2


@pytest.mark.parametrize("program, op", [
    (lambda: torch.randn(2), "randn"),
    (lambda: torch.nn.functional.dropout(torch.ones(4), 0.5), "dropout"),
    (lambda: torch.nn.functional.gumbel_softmax(torch.zeros(3), hard=True), "gumbel_softmax"),
    (lambda: bool(torch.rand(()) == 0.5), "eq"),
    (lambda: float(torch.rand(2).sum()), "sum"),
    (lambda: bool(torch.rand(()) < torch.rand(())), "lt"),
])
def test_what_cannot_be_resolved_exactly_is_refused_naming_op_and_line(program, op):
    with pytest.raises(KernelError) as err:
        _law(program)
    assert op in err.value.message and "test_kernels.py" in err.value.message, err.value.message


# ---- transformers' own sampler ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hf_sampler() -> str:
    utils = pytest.importorskip("transformers.generation.utils")
    fn = getattr(utils, "_speculative_sampling", None)
    if fn is None:
        pytest.skip("this transformers has no generation.utils._speculative_sampling")
    params = list(inspect.signature(fn).parameters)
    if params[:4] != ["candidate_input_ids", "candidate_logits", "candidate_length", "new_logits"]:
        pytest.skip(f"_speculative_sampling's signature changed: {params}")
    return "transformers.generation.utils:_speculative_sampling"


def _chain_certificate(model, depth: int, kernel: Kernel, arithmetic: str = "fraction"):
    drafter = make_drafter("iid", make_topology("chain", depth, 1), model)
    return certify(model, drafter, kernel, arithmetic)


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("model", [RandomRationalModel(3, seed=1), SyntheticModel(3, seed=0)],
                         ids=["random-rational", "synthetic"])
def test_transformers_sampler_as_shipped_is_lossless(hf_sampler, model, depth):
    cert = _chain_certificate(model, depth, Kernel(hf_sampler, "chain"))
    assert cert.lossless and cert.tvd <= 1e-12 and cert.off_support == 0, (cert.tvd, cert.off_support)


def _ensemble_law(model, depth: int, w: Fraction) -> dict:
    """The output law of ensemble verification, by its own recursion: at a verified position the emitted token
    is ``min(d, v)`` as the accepted draft (verification goes on) plus ``(v − d)_+`` as the replacement (the
    target completes), ``v = w·q + (1 − w)·d``; past the last draft the target's bonus."""
    def tail(seq, i):  # the target completing seq[i:]
        return math.prod(model.q(seq[:j])[seq[j]] for j in range(i, len(seq)))

    def verified(seq, i):
        if i == depth:
            return tail(seq, i)
        d, t, x = model.p(seq[:i]), model.q(seq[:i]), seq[i]
        v = w * t[x] + (1 - w) * d[x]
        return min(d[x], v) * verified(seq, i + 1) + max(v - d[x], 0) * tail(seq, i + 1)
    return {seq: verified(seq, 0) for seq in itertools.product(range(model.vocab), repeat=depth + 1)}


def test_transformers_ensemble_mode_is_lossy_by_its_closed_form(hf_sampler):
    """Depth 1: the first token is ``v = w q + (1 − w) p`` and the target completes, so TVD = (1 − w)·TVD(p, q)
    at the root. Depth 3: an independent recursion over exact fractions (:func:`_ensemble_law`)."""
    if "assistant_ensemble_weight" not in inspect.signature(Kernel(hf_sampler, "chain").fn).parameters:
        pytest.skip("this transformers has no assistant_ensemble_weight")
    w = Fraction(1, 2)
    kernel = Kernel(hf_sampler, "chain", kwargs={"assistant_ensemble_weight": 0.5})
    model = RandomRationalModel(3, seed=1)
    p, q = model.p(()), model.q(())
    closed = (1 - w) * sum(abs(a - b) for a, b in zip(p, q)) / 2
    assert closed > 0
    cert = _chain_certificate(model, 1, kernel)
    assert not cert.lossless and abs(cert.tvd - closed) <= 1e-12, (cert.tvd, closed)
    law = _ensemble_law(model, 3, w)
    target = {seq: math.prod(model.q(seq[:j])[seq[j]] for j in range(4)) for seq in law}
    assert sum(law.values()) == 1
    independent = sum(abs(law[s] - target[s]) for s in law) / 2
    cert = _chain_certificate(model, 3, kernel)
    assert not cert.lossless and abs(cert.tvd - independent) <= 1e-12, (cert.tvd, independent)


def test_transformers_sampler_on_the_grid_accepts_a_zero_probability_draft(hf_sampler):
    """Found, not fixed: ``r_i <= ratio`` with ``r_i = torch.rand_like`` (float64: 0 with probability 2^-53)
    accepts a draft the target excludes (ratio 0). Depth 1: the mass on such sequences is exactly
    ``2^-53 · Σ_{x: q(x) = 0} p(x)`` at the root."""
    if "r_i <= probability_ratio" not in inspect.getsource(Kernel(hf_sampler, "chain").fn):
        pytest.skip("this transformers no longer accepts by r_i <= probability_ratio: the finding does not apply")
    model = next(m for m in (RandomRationalModel(3, seed=s) for s in range(50))
                 if any(p > 0 and q == 0 for p, q in zip(m.p(()), m.q(()))))
    excluded = sum(p for p, q in zip(model.p(()), model.q(())) if p > 0 and q == 0)
    cert = _chain_certificate(model, 1, Kernel(hf_sampler, "chain", uniforms="grid"))
    assert not cert.lossless and cert.off_support == excluded / 2**53
    assert cert.tvd <= cert.tolerance  # within the grid's bound: caught by support alone
    assert _chain_certificate(model, 1, Kernel(hf_sampler, "chain")).lossless  # continuous: u = 0 never occurs


# ---- the torch path black-box -----------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", TORCH_VERIFIERS)
def test_every_torch_verify_kernel_has_its_shared_rules_law(name):
    """Black-box: the kernel's own code, its uniforms symbolic, against the shared rule's exact law (float64,
    TVD ≤ 1e-12: rounding of a dozen float64 operations per decision is ~1e-15), on small trees of every kind
    the rule takes. A second check that the comparison can fail: the law of a control differs from that of
    the rule it breaks (:func:`test_parity_can_fail`)."""
    assert parity(name) <= 1e-12


def test_parity_can_fail():
    tree, p, q = random_instance((-1, 0, 0), 3, 0, distinct=False)
    kernel = Kernel("simulator.verifiers.batched.torch_verify:torch_verify", "uniforms",
                    kwargs={"name": "bug-residual-q"})
    ours = fixed_tree_law(tree, p, q, kernel, 3, "float").law()
    sps = fixed_tree_law(tree, p, q, VERIFIERS["tv-sps"].fn, 3, "float").law()
    assert sum(abs(ours.get(k, 0) - sps.get(k, 0)) for k in set(ours) | set(sps)) / 2 > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(CONTROL_SHAPES) & set(TORCH_VERIFIERS) - {"bug-greedy-bv-nomod"}))
def test_every_torch_control_is_flagged_black_box(name):
    """The controls certified through their torch kernel, on the shape their registry entry names lossy.
    (bug-greedy-bv-nomod's bug is in the later tokens' completion, which the torch kernel leaves to its caller:
    its kernel, like greedy-bv's, returns decisions only.)"""
    topology, depth, branching, parents, scheme = CONTROL_SHAPES[name][0][0]
    kernel = Kernel("simulator.verifiers.batched.torch_verify:torch_verify", "uniforms", kwargs={"name": name})
    drafter = make_drafter(scheme, make_topology(topology, depth, branching, parents), None, DrafterOptions(budget=4))
    certs = [certify(model, drafter, kernel, "float") for model in CONTROL_MODELS]
    assert any(not c.lossless and c.counterexample is not None for c in certs)


# ---- eight production bug classes and their correct twins -------------------------------------------------------
PAIRS = [RandomRationalModel(3, seed=s) for s in range(3)] + [SyntheticModel(3, seed=0)]
CHAIN = ("chain", 2, 1)
FORK = ("complete", 1, 2)
TEMPERED = "specproof.gate.torch_kernels:tempered_adapter"
# bug → (its correct twin, adapter, shape, uniform model the bug shows under)
BUGS = {
    "sps_chain_reused_uniform": ("sps_chain", "chain", CHAIN, "continuous"),
    "sps_chain_previous_row": ("sps_chain", "chain", CHAIN, "continuous"),
    "sps_chain_target_residual": ("sps_chain", "chain", CHAIN, "continuous"),
    "sps_chain_clipped": ("sps_chain", "chain", CHAIN, "continuous"),
    "sps_chain_le": ("sps_chain", "chain", CHAIN, "grid"),
    "match_tree_placeholder": ("match_tree", "tree", FORK, "continuous"),
    "rrs_tree_first_residual": ("rrs_tree", "tree", FORK, "continuous"),
    "tempered_chain_unscaled_verify": ("tempered_chain", TEMPERED, CHAIN, "continuous"),
}


def _zoo_certificates(name: str, adapter: str, shape, uniforms: str) -> list:
    kernel = Kernel(f"specproof.gate.torch_kernels:{name}", adapter, uniforms=uniforms)
    drafter = make_drafter("iid", make_topology(*shape))
    return [certify(model, drafter, kernel) for model in PAIRS]


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_bug_class_is_lossy_with_a_counterexample(bug):
    twin, adapter, shape, uniforms = BUGS[bug]
    lossy = [c for c in _zoo_certificates(bug, adapter, shape, uniforms) if not c.lossless]
    assert lossy and all(c.counterexample is not None for c in lossy)
    if bug == "sps_chain_le":  # caught by support alone, its TVD within the grid's bound
        assert all(c.off_support > 0 and c.tvd <= c.tolerance for c in lossy)
        assert all(c.lossless for c in _zoo_certificates(bug, adapter, shape, "continuous"))


@pytest.mark.parametrize("twin", sorted({v[0] for v in BUGS.values()}))
@pytest.mark.parametrize("uniforms", ["continuous", "grid"])
def test_each_correct_twin_is_lossless_under_both_uniform_models(twin, uniforms):
    _, adapter, shape, _ = next(v for v in BUGS.values() if v[0] == twin)
    for cert in _zoo_certificates(twin, adapter, shape, uniforms):
        assert cert.lossless and cert.off_support == 0, (twin, uniforms, cert.tvd, cert.tolerance_reason)


@pytest.mark.parametrize("uniforms", ["continuous", "grid"])
def test_a_serving_kernel_with_an_exponential_race_is_lossless(uniforms):
    """flat_chain_sps: the flat-chain adapter, -1 padding and vLLM's race for the replacement token."""
    for cert in _zoo_certificates("flat_chain_sps", "flat-chain", CHAIN, uniforms):
        assert cert.lossless and cert.off_support == 0, (cert.tvd, cert.tolerance_reason)


def test_a_bug_hidden_on_chains_shows_only_where_a_node_has_two_children():
    """rrs_tree_first_residual differs from rrs_tree only when a second sibling is rejected."""
    assert all(c.lossless for c in _zoo_certificates("rrs_tree_first_residual", "tree", CHAIN, "continuous"))


def test_the_kernel_report_writes_its_rows(tmp_path, monkeypatch):
    """``specproof kernels`` on two of its rows (the whole table runs from the CLI): Markdown and JSON written,
    an unexpected verdict marked and turned into exit 1."""
    from specproof.reports import kernel_report

    chosen = [r for r in kernel_report._example_rows() if r[0].kernel.endswith((":sps_chain", ":sps_chain_clipped"))
              and r[0].uniforms == "continuous"]
    chosen[1][0].expected_lossless = True  # pretend the clipped kernel were expected lossless
    monkeypatch.setattr(kernel_report, "_hf_rows", lambda: ([], "transformers skipped here"))
    monkeypatch.setattr(kernel_report, "_torch_verify_rows", lambda: [])
    monkeypatch.setattr(kernel_report, "_example_rows", lambda: chosen)
    assert not kernel_report.write_kernel_report(tmp_path, "test")
    text = (tmp_path / "kernels.md").read_text()
    assert "LOSSY **UNEXPECTED**" in text and "1 of 2 rows as expected" in text
    rows = json.loads((tmp_path / "kernels.json").read_text())["rows"]
    assert [r["as_expected"] for r in rows] == [True, False] and rows[1]["counterexample"]


# ---- bad kernels ------------------------------------------------------------------------------------------------
def kernel_raises(parents, tokens, p, q):
    raise ValueError("boom")


def kernel_float_node(parents, tokens, p, q):
    return torch.tensor(0.0), torch.tensor(0)


def kernel_out_of_vocabulary(parents, tokens, p, q):
    return torch.tensor(0), torch.tensor(p.shape[1])


def kernel_placeholder(parents, tokens, p, q):
    return torch.tensor(0), tokens[0]  # the root's token is the placeholder -1


def kernel_flat_tokens(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    return torch.multinomial(new_logits[0, 0].softmax(-1), 1), 0  # [1] where [1, n+1] is due


def kernel_drawing_loop(parents, tokens, p, q):
    while torch.rand(()) < 0.5:  # the enumerator follows the branch that loops
        pass
    return 0, 0


def kernel_spinning(parents, tokens, p, q):
    x = torch.zeros(())
    while True:
        x = x + 1


@pytest.mark.parametrize("fn, adapter, error, words", [
    (kernel_raises, "tree", SpecproofError, "raised ValueError: boom"),
    (kernel_float_node, "tree", KernelError, "dtype torch.float32"),
    (kernel_out_of_vocabulary, "tree", KernelError, "outside the vocabulary"),
    (kernel_placeholder, "tree", KernelError, "placeholder -1"),
    (kernel_flat_tokens, "chain", KernelError, "shape (1,)"),
    (kernel_drawing_loop, "tree", ChoiceLimitError, "random choices"),
    (kernel_spinning, "tree", KernelError, "torch calls"),
])
def test_bad_kernels_get_a_typed_error_naming_what_went_wrong(fn, adapter, error, words, monkeypatch):
    monkeypatch.setattr(torch_capture, "MAX_TORCH_CALLS", 5_000)
    monkeypatch.setattr("exact.enumeration.MAX_CHOICES_PER_EXECUTION", 500)
    kernel = Kernel(f"test_kernels:{fn.__name__}", adapter, fn=fn)
    with pytest.raises(error) as err:
        _chain_certificate(RandomRationalModel(3, seed=1), 1, kernel)
    assert words in str(err.value), str(err.value)


def kernel_retrying(parents, tokens, p, q):
    while True:  # every execution ends, but there are infinitely many
        if torch.rand(()) < 0.5:
            return 0, 0


@pytest.mark.slow
def test_a_kernel_with_endless_executions_stops_at_the_execution_cap():
    with pytest.raises(LimitError), limits(max_executions=200):
        _chain_certificate(RandomRationalModel(3, seed=1), 1, Kernel("test_kernels:kernel_retrying", "tree",
                                                                     fn=kernel_retrying))


@pytest.mark.parametrize("kernel, code", [("specproof.gate.torch_kernels:sps_chain", 0),
                                          ("specproof.gate.torch_kernels:sps_chain_clipped", 1),
                                          ("test_kernels:kernel_out_of_vocabulary", 2),
                                          ("test_kernels:kernel_raises", 2),
                                          ("no_such_module:kernel", 2)])
def test_certify_kernel_exit_codes(kernel, code):
    adapter = "chain" if kernel.startswith("specproof.gate") else "tree"
    result = CliRunner().invoke(cli.main, ["certify", "--kernel", kernel, "--adapter", adapter, "--depth", "2",
                                           "--model", "random-rational", "--vocab", "3", "--seed", "1"])
    assert result.exit_code == code, result.output
