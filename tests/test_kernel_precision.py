"""A kernel's precision, its in-place arithmetic and its support violations.

The certificate judges a kernel at the lowest precision its arithmetic reaches (a float32 kernel fed float64
rows is a float32 kernel); in-place ops have the laws of their out-of-place forms in float32 and float64, with
the laws derived here by hand from interval lengths and race weights; a clamp to ``finfo.tiny`` is a support
violation of about that mass, named as such.
"""

from __future__ import annotations

import itertools
import json
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from specproof.gate.torch_kernels import chain_answer, chain_rows, residual_weights, sps_chain  # noqa: E402
from exact import certify  # noqa: E402
from exact.enumeration import enumerate_outcomes  # noqa: E402
from simulator.drafting.drafter_registry import make_drafter  # noqa: E402
from simulator.errors import KernelError  # noqa: E402
from simulator.kernels.capture import Precision, capture  # noqa: E402
from simulator.kernels.kernel import FLOAT32_TOLERANCE, FLOAT64_TOLERANCE, Kernel  # noqa: E402
from simulator.models import RandomRationalModel  # noqa: E402
from simulator.trees import make_topology  # noqa: E402
from specproof.cli import app as cli  # noqa: E402
from specproof.cli.certificate_text import support_source  # noqa: E402

DTYPES = [torch.float32, torch.float64]
TINY32 = Fraction(2) ** -126  # finfo(float32).tiny


def _law(program, precision: Precision | None = None) -> dict:
    """The exact law of ``program()`` run under the capture."""
    def run(rng):
        with capture(rng, precision=precision):
            return program()
    law: dict = {}
    for outcome, prob in enumerate_outcomes(run, exact=True):
        law[outcome] = law.get(outcome, 0) + prob
    return law


def _independent(*probs: Fraction) -> dict:
    """The law of a tuple of independent booleans, element ``i`` true with probability ``probs[i]``."""
    law: dict = {}
    for outcome in itertools.product((True, False), repeat=len(probs)):
        mass = Fraction(1)
        for bit, prob in zip(outcome, probs):
            mass *= prob if bit else 1 - prob
        if mass:
            law[outcome] = mass
    return law


def _chain_certificate(model, depth: int, kernel: Kernel):
    return certify(model, make_drafter("iid", make_topology("chain", depth, 1), model), kernel)


# ---- kernels -----------------------------------------------------------------------------------------------------
def sps_chain_float32(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """``sps_chain`` computing in float32 whatever rows it gets: correct, LOSSLESS at float32's tolerance."""
    return sps_chain(candidate_input_ids, candidate_logits.float(), candidate_length, new_logits.float())


def accept_all_float32(parents, tokens, p, q):
    """Every draft of a one-draft chain accepted, the token after it drawn from its float32 target row: the first
    token's law is the draft's, LOSSY by TVD(p, q) at the root."""
    return torch.tensor(1), torch.multinomial(q.float()[1], 1)[0]


def _gumbel(weights: torch.Tensor) -> torch.Tensor:
    """vLLM's exponential race, in place: ``argmax(w / E)`` draws index ``i`` with probability ``w_i / Σ w``."""
    return weights.div_(torch.empty_like(weights).exponential_()).argmax()


def sps_chain_gumbel(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """``sps_chain`` with its replacement and bonus drawn by the in-place race: LOSSLESS."""
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        if torch.rand(()) < target[i, x] / draft[i, x]:
            continue
        return chain_answer(drafts, i, _gumbel(residual_weights(target[i], draft[i])))
    return chain_answer(drafts, candidate_length, _gumbel(target[candidate_length].clone()))


def sps_chain_gumbel_target(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """The buggy twin: the replacement raced over the target row, not the residual. LOSSY."""
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    for i, x in enumerate(drafts.tolist()):
        if torch.rand(()) < target[i, x] / draft[i, x]:
            continue
        return chain_answer(drafts, i, _gumbel(target[i].clone()))  # BUG: the target, not (target − draft)+
    return chain_answer(drafts, candidate_length, _gumbel(target[candidate_length].clone()))


def sps_chain_tiny_residual(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """vLLM 0.6.3's residual: ``clamp(q − p, min=finfo.tiny)`` in float32. Each token the target excludes keeps
    weight ``tiny`` in the residual: a support violation of about ``tiny`` per such token."""
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits.float(), candidate_length,
                                        new_logits.float())
    for i, x in enumerate(drafts.tolist()):
        if torch.rand(()) < target[i, x] / draft[i, x]:
            continue
        residual = (target[i] - draft[i]).clamp(min=torch.finfo(target.dtype).tiny)
        return chain_answer(drafts, i, torch.multinomial(residual, 1)[0])
    return chain_answer(drafts, candidate_length, torch.multinomial(target[candidate_length], 1)[0])


def _kernel(fn, adapter: str = "chain", **options) -> Kernel:
    return Kernel(f"test_kernel_precision:{fn.__name__}", adapter, fn=fn, **options)


# ---- precision follows the kernel --------------------------------------------------------------------------------
def test_the_precision_recorded_is_the_lowest_of_the_kernels_arithmetic():
    rows = torch.tensor([0.25, 0.75], dtype=torch.float64)
    seen = Precision()
    _law(lambda: bool(torch.rand(()) < rows[0] / rows[1]), seen)  # a float32 uniform beside float64 rows
    assert seen.name == "float64"
    _law(lambda: (torch.zeros(3), torch.ones(2) > 0), seen)  # torch's default dtype, chosen by no one
    assert seen.name == "float64"
    _law(lambda: rows.float() * 2, seen)
    assert seen.name == "float32" and "test_kernel_precision.py" in seen.line and "rows.float()" in seen.line
    _law(lambda: rows.to(torch.bfloat16), seen)
    assert seen.name == "bfloat16"


def test_a_float32_kernel_fed_float64_rows_is_judged_as_float32():
    """The float32 rounding of its ratios is a TVD between float64's tolerance and float32's: judged at float64
    it would be LOSSY, judged as what it is, LOSSLESS. The control, accept-all on one draft in float32: the first
    token is the draft's, the rest the target's, so TVD = ½ Σ |p − q| at the root, far above float32's tolerance
    (float32 rounding moves it by ~1e-8): LOSSY."""
    model = RandomRationalModel(3, seed=1)
    cert = _chain_certificate(model, 2, _kernel(sps_chain_float32))
    assert cert.lossless and cert.off_support == 0
    assert FLOAT64_TOLERANCE < cert.tvd <= FLOAT32_TOLERANCE == cert.tolerance, cert.tvd
    assert cert.tolerance_reason.startswith("precision float32: the kernel computes in float32 (first at ")
    assert "test_kernel_precision.py" in cert.tolerance_reason and ".float()" in cert.tolerance_reason
    twin = _chain_certificate(model, 2, _kernel(sps_chain))  # the same rule in float64: judged at float64
    assert twin.lossless and twin.tolerance == FLOAT64_TOLERANCE and twin.tvd <= 1e-15
    assert twin.tolerance_reason.startswith("precision float64: float64 kernel")
    closed = sum(abs(a - b) for a, b in zip(model.p(()), model.q(()))) / 2
    assert closed > 100 * FLOAT32_TOLERANCE
    lossy = _chain_certificate(model, 1, _kernel(accept_all_float32, "tree"))
    assert not lossy.lossless and abs(lossy.tvd - closed) <= 1e-6, (lossy.tvd, closed)
    assert lossy.tolerance == FLOAT32_TOLERANCE


def test_bfloat16_arithmetic_is_judged_at_float32s_tolerance():
    cert = _chain_certificate(RandomRationalModel(3, seed=1), 1, Kernel("specproof.gate.mutants:sps_chain_bf16_ratio",
                                                                        "chain"))
    assert not cert.lossless and cert.tvd > 10 * FLOAT32_TOLERANCE and cert.tolerance == FLOAT32_TOLERANCE
    assert cert.tolerance_reason.startswith("precision float32: the kernel computes in bfloat16")
    assert "mutants.py" in cert.tolerance_reason


def _certify_cli(kernel, *options: str):
    return CliRunner().invoke(cli.main, ["certify", "--kernel", f"test_kernel_precision:{kernel.__name__}",
                                         "--adapter", "chain", "--model", "random-rational", "--vocab", "3",
                                         *options])


def test_the_cli_names_the_precision_judged(tmp_path):
    """Human output and JSON; the control, the same kernel with its residual clamped to tiny (below), exits 1."""
    out = tmp_path / "cert.json"
    result = _certify_cli(sps_chain_float32, "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "float64 rows, judged at float32 precision" in result.output
    assert "tolerance: precision float32: the kernel computes in float32" in result.output
    assert json.loads(out.read_text())["tolerance_reason"].startswith("precision float32")
    model = _model_excluding_a_token()
    lossy = _certify_cli(sps_chain_tiny_residual, "--depth", "1", "--seed", str(model.seed))
    assert lossy.exit_code == 1, lossy.output
    assert "judged at float32 precision" in lossy.output
    line = next(x for x in lossy.output.splitlines() if "support violation" in x)  # the mass and its source
    assert "e-38" in line and "LOSSY whatever the tolerance" in line
    assert f"about {model.q(()).count(0)} × finfo(float32).tiny (1.2e-38): a clamp to it" in line


# ---- in-place arithmetic -----------------------------------------------------------------------------------------
def _t(values, dtype):
    return torch.tensor(values, dtype=dtype)


# name → (in-place program, out-of-place program, the law by hand); u ~ U(0, 1)³, each comparison one interval
RANDOM_IN_PLACE = {
    # u / c < t ⇔ u < t·c: 1/4, 1/2, 1/2
    "div_": (lambda u, d: u.div_(_t([0.5, 2.0, 4.0], d)), lambda u, d: u / _t([0.5, 2.0, 4.0], d),
             [0.5, 0.25, 0.125], (Fraction(1, 4), Fraction(1, 2), Fraction(1, 2))),
    # u·c < t: u < 1/2; −2u < −1/2 ⇔ u > 1/4; u < 1/4
    "mul_": (lambda u, d: u.mul_(_t([0.5, -2.0, 4.0], d)), lambda u, d: u * _t([0.5, -2.0, 4.0], d),
             [0.25, -0.5, 1.0], (Fraction(1, 2), Fraction(3, 4), Fraction(1, 4))),
    # u − c < t ⇔ u < t + c: 3/4, 1/2, 1/4
    "sub_": (lambda u, d: u.sub_(_t([0.25, 0.5, -0.5], d)), lambda u, d: u - _t([0.25, 0.5, -0.5], d),
             [0.5, 0.0, 0.75], (Fraction(3, 4), Fraction(1, 2), Fraction(1, 4))),
    # u + c < t ⇔ u < t − c: 1/4, 1/2, 1/2
    "add_": (lambda u, d: u.add_(_t([0.25, 1.0, -0.5], d)), lambda u, d: u + _t([0.25, 1.0, -0.5], d),
             [0.5, 1.5, 0.0], (Fraction(1, 4), Fraction(1, 2), Fraction(1, 2))),
    # clamp(u, 1/4, 3/4) < t: u < 1/2; never (1/4 ≥ t); always (3/4 < t)
    "clamp_": (lambda u, d: u.clamp_(0.25, 0.75), lambda u, d: u.clamp(0.25, 0.75),
               [0.5, 0.25, 1.0], (Fraction(1, 2), Fraction(0), Fraction(1))),
    # masked elements are 1/2: 1/2 < 3/4 always, u < 1/2, 1/2 < 1/4 never
    "masked_fill_": (lambda u, d: u.masked_fill_(torch.tensor([True, False, True]), 0.5),
                     lambda u, d: u.masked_fill(torch.tensor([True, False, True]), 0.5),
                     [0.75, 0.5, 0.25], (Fraction(1), Fraction(1, 2), Fraction(0))),
}

CONCRETE_IN_PLACE = {
    # c·u < t, as u·c above
    "mul_": (lambda u, d: _t([0.5, -2.0, 4.0], d).mul_(u), lambda u, d: _t([0.5, -2.0, 4.0], d) * u,
             [0.25, -0.5, 1.0], (Fraction(1, 2), Fraction(3, 4), Fraction(1, 4))),
    # c − u < t ⇔ u > c − t: 1/4, 1/2, always
    "sub_": (lambda u, d: _t([1.0, 0.5, 0.25], d).sub_(u), lambda u, d: _t([1.0, 0.5, 0.25], d) - u,
             [0.25, 0.0, 0.5], (Fraction(1, 4), Fraction(1, 2), Fraction(1))),
    "add_": (lambda u, d: _t([0.25, 1.0, -0.5], d).add_(u), lambda u, d: _t([0.25, 1.0, -0.5], d) + u,
             [0.5, 1.5, 0.0], (Fraction(1, 4), Fraction(1, 2), Fraction(1, 2))),
    # min(c, u) < t: always (1/4 < 1/2), u < 1/2, u < 1/4
    "clamp_": (lambda u, d: _t([0.25, 0.75, 0.5], d).clamp_(max=u), lambda u, d: _t([0.25, 0.75, 0.5], d).clamp(max=u),
               [0.5, 0.5, 0.25], (Fraction(1), Fraction(1, 2), Fraction(1, 4))),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("side, name", [("random", n) for n in RANDOM_IN_PLACE]
                         + [("concrete", n) for n in CONCRETE_IN_PLACE])
def test_an_in_place_op_has_the_law_of_its_out_of_place_form(side, name, dtype):
    in_place, out_of_place, thresholds, probs = (RANDOM_IN_PLACE if side == "random" else CONCRETE_IN_PLACE)[name]
    t = _t(thresholds, dtype)
    laws = [_law(lambda: tuple((form(torch.rand(3, dtype=dtype), dtype) < t).tolist()))
            for form in (in_place, out_of_place)]
    assert laws[0] == laws[1] == _independent(*probs)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_in_place_fills_and_clamps_at_their_boundaries(dtype):
    # concrete [0, 3/4] with its first element filled by one uniform: (u < 1/2, 3/4 < 1/2)
    fill = _law(lambda: tuple((_t([0.0, 0.75], dtype).masked_fill_(torch.tensor([True, False]),
                                                                   torch.rand((), dtype=dtype)) < 0.5).tolist()))
    assert fill == {(True, False): Fraction(1, 2), (False, False): Fraction(1, 2)}
    # clamp(u, 1/4, ·) <= 1/4 ⇔ u <= 1/4; clamp(u, 1/4, ·) < 1/4 never; max(1/2, u) >= 1/2 always
    assert _law(lambda: bool(torch.rand((), dtype=dtype).clamp_(min=0.25) <= 0.25)) == {True: Fraction(1, 4),
                                                                                        False: Fraction(3, 4)}
    assert _law(lambda: bool(torch.rand((), dtype=dtype).clamp_(min=0.25) < 0.25)) == {False: 1}
    assert _law(lambda: bool(_t(0.5, dtype).clamp_min_(torch.rand((), dtype=dtype)) >= 0.5)) == {True: 1}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_in_place_race_is_the_race(dtype):
    """``w.div_(E).argmax()`` with ``w`` float64 too: the operand is copied before ``w`` turns random."""
    weights = [1.0, 2.0, 5.0]
    expected = {0: Fraction(1, 8), 1: Fraction(2, 8), 2: Fraction(5, 8)}
    assert _law(lambda: int(_gumbel(_t(weights, dtype)))) == expected
    w = _t(weights, dtype)
    assert _law(lambda: int((w / torch.empty_like(w).exponential_()).argmax())) == expected


def test_an_operand_changed_after_the_op_leaves_the_law_alone():
    def program():
        c = _t([2.0], torch.float64)
        x = torch.rand(1, dtype=torch.float64) * c
        c.mul_(0)  # the kernel reuses its buffer
        return bool(x < 1.0)
    assert _law(program) == {True: Fraction(1, 2), False: Fraction(1, 2)}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_results_have_torchs_dtypes(dtype):
    ops = [lambda u: u * _t(2.0, torch.float64), lambda u: u + 1.0, lambda u: u.clamp(min=_t([0.1], torch.float64)),
           lambda u: u.masked_fill(torch.tensor(True), 0.0), lambda u: _t([1.0], torch.float64) - u]
    for op in ops:
        expected = op(torch.rand((), dtype=dtype)).dtype
        assert _law(lambda: op(torch.rand((), dtype=dtype)).dtype) == {expected: 1}


@pytest.mark.parametrize("program, words", [
    (lambda: torch.rand(2).clamp_(min=torch.rand(())), "two random values"),
    (lambda: torch.rand(2).masked_fill(torch.tensor([True, False]), torch.rand(())), "two random values"),
    (lambda: bool(_t([1.0], torch.float64).div_(torch.rand(1, dtype=torch.float64)) < 2.0), "not modelled"),
    (lambda: torch.rand(4).view(2, 2).mul_(2.0), "view of a random tensor"),
    (lambda: torch.rand(2).masked_fill_(torch.tensor([True, False]), float("nan")), "NaN fill value"),
    (lambda: bool(torch.rand(()) + float("inf") - float("inf") < 0.5), "NaN"),
])
def test_what_stays_unresolvable_is_refused(program, words):
    with pytest.raises(KernelError) as err:
        _law(program)
    assert words in err.value.message and "test_kernel_precision.py" in err.value.message, err.value.message


# ---- the in-place race in a kernel -------------------------------------------------------------------------------
def test_a_kernel_drawing_by_the_in_place_race_certifies_in_float64():
    model = RandomRationalModel(3, seed=1)
    cert = _chain_certificate(model, 2, _kernel(sps_chain_gumbel))
    assert cert.lossless and cert.tvd <= 1e-15 and cert.tolerance == FLOAT64_TOLERANCE
    assert not _chain_certificate(model, 2, _kernel(sps_chain_gumbel_target)).lossless


# ---- support violations ------------------------------------------------------------------------------------------
def _model_excluding_a_token() -> RandomRationalModel:
    """A model whose root target row has a zero, the rows differing (the residual is reached)."""
    return next(m for m in (RandomRationalModel(3, seed=s) for s in range(50))
                if 0 in m.q(()) and m.p(()) != m.q(()))


def test_a_clamp_to_tiny_is_a_support_violation_of_about_tiny():
    """Depth 1: a rejection (probability S = Σ (q − p)+) draws the residual, where each excluded token has
    weight tiny against about S: mass ≈ (number of excluded tokens) · tiny. LOSSY with a TVD far inside any
    tolerance."""
    model = _model_excluding_a_token()
    excluded = model.q(()).count(0)
    cert = _chain_certificate(model, 1, _kernel(sps_chain_tiny_residual))
    assert not cert.lossless and cert.tvd <= cert.tolerance
    assert abs(cert.off_support / (excluded * TINY32) - 1) < 1e-6, float(cert.off_support)
    assert _chain_certificate(model, 1, _kernel(sps_chain_float32)).off_support == 0  # clamp(min=0): none


@pytest.mark.parametrize("mass, words", [
    (TINY32, "about 1 × finfo(float32).tiny"),
    (3 * Fraction(2) ** -149, "about 3 × float32's smallest subnormal (1.4e-45)"),
    (Fraction(2) ** -1023, "about 0.5 × finfo(float64).tiny (2.2e-308)"),
    (2.0 ** -1074, "about 1 × float64's smallest subnormal"),
    (Fraction(1, 8), ""),
    (Fraction(1, 10**20), ""),
    (2.0 ** -14, ""),  # finfo(float16).tiny is an ordinary probability
])
def test_support_sources_are_recognised_only_near_a_float_floor(mass, words):
    source = support_source(mass)
    assert words in source and bool(source) == bool(words), source
