"""Every random source a kernel uses is enumerated or refused (docs/kernels.md, "Random sources").

Python's ``random.random()`` is enumerated as one of the capture's uniforms: a chain kernel accepting with it
gets its exact law on every run, LOSSLESS when correct, LOSSY by the TVD of an independent recursion when its
acceptance is ``min(1, 2·q/p)``. Every other draw (the rest of ``random``, ``os.urandom``, ``numpy.random``,
a torch generator moved inside a helper, a mocked CUDA generator among them) is a ``KernelError`` naming the
kernel's line; an explicit ``torch.Generator`` is enumerated and left as it was.
"""

from __future__ import annotations

import cProfile
import itertools
import math
import random
import sys
from fractions import Fraction
from random import random as bound_random

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from click.testing import CliRunner  # noqa: E402
from exact import certify  # noqa: E402
from simulator.drafting.drafter_registry import make_drafter  # noqa: E402
from simulator.errors import KernelError  # noqa: E402
from simulator.kernels.kernel import ADAPTERS, Kernel  # noqa: E402
from simulator.models import TableModel  # noqa: E402
from simulator.trees import make_topology  # noqa: E402
from specproof.cli import app as cli  # noqa: E402

# dyadic rows: exact in float64, so a kernel comparing u·p(x) < q(x) has exact acceptance probabilities q/p
# (the capture inverts the product in rationals) and exact residual weights (q − p)_+
HALF, QUARTER = Fraction(1, 2), Fraction(1, 4)
MODEL = TableModel(3, {(): [HALF, QUARTER, QUARTER], None: [QUARTER, HALF, QUARTER]},
                   {(): [QUARTER, QUARTER, HALF], None: [HALF, QUARTER, QUARTER]})
HELD = random.Random(0)  # a generator of the kernel's module, its .random looked up at each call
PRIVATE_DRAW = random.Random(0).random  # bound before any capture: a C method no replaced name reaches
NUMPY_RNG = np.random.default_rng(0)
SOURCES = {"module": lambda: random.random(), "instance": lambda: random.Random(0).random(),
           "held": lambda: HELD.random(), "uniform": lambda: random.uniform(0.0, 1.0)}


def python_uniform_chain(parents, tokens, p, q, source="module", factor=1.0, generator=None):
    """Speculative sampling on a chain (tree adapter): accept draft ``x`` at node ``v`` when ``u·p(x) <
    factor·q(x)``, ``u`` from Python's ``random`` (``source``) or, with ``generator``, ``torch.rand``; at the first
    rejection a draw from ``(q − p)_+`` by ``torch.multinomial``; after every draft one from the leaf's ``q``.
    ``factor = 1`` is lossless; ``factor = 2`` accepts with ``min(1, 2q/p)``, lossy."""
    for v in range(1, len(parents)):
        x = int(tokens[v])
        u = SOURCES[source]() if generator is None else torch.rand((), dtype=torch.float64, generator=generator)
        if u * p[v - 1, x] < factor * q[v - 1, x]:
            continue
        return v - 1, torch.multinomial((q[v - 1] - p[v - 1]).clamp(min=0), 1, generator=generator)
    return len(parents) - 1, torch.multinomial(q[-1], 1, generator=generator)


def _sps_law(model, depth: int, factor: Fraction) -> dict:
    """The output law of :func:`python_uniform_chain`, by its own recursion over exact fractions: at a verified
    position draft ``x ~ p`` is accepted with ``min(1, factor·q(x)/p(x))`` (verification goes on), else a token
    of ``(q − p)_+`` replaces it and the target completes; past the last draft the target's bonus."""
    def tail(seq, i):
        return math.prod(model.q(seq[:j])[seq[j]] for j in range(i, len(seq)))

    def verified(seq, i):
        if i == depth:
            return tail(seq, i)
        d, t, x = model.p(seq[:i]), model.q(seq[:i]), seq[i]
        accept = [min(d[y], factor * t[y]) for y in range(model.vocab)]
        residual = [max(t[y] - d[y], 0) for y in range(model.vocab)]
        rejected = (1 - sum(accept)) * residual[x] / sum(residual) if sum(residual) else 0
        return accept[x] * verified(seq, i + 1) + rejected * tail(seq, i + 1)
    return {seq: verified(seq, 0) for seq in itertools.product(range(model.vocab), repeat=depth + 1)}


def _tvd_to_target(model, depth: int, law: dict) -> Fraction:
    target = {seq: math.prod(model.q(seq[:j])[seq[j]] for j in range(depth + 1)) for seq in law}
    assert sum(law.values()) == 1 and sum(target.values()) == 1
    return sum(abs(law[s] - target[s]) for s in law) / 2


def _certify(fn, depth: int = 2, adapter: str = "tree", model=MODEL, **kwargs):
    kernel = Kernel(f"test_kernel_random_sources:{fn.__name__}", adapter, fn=fn, kwargs=kwargs)
    return certify(model, make_drafter("iid", make_topology("chain", depth, 1)), kernel)


# ---- Python's random, enumerated ---------------------------------------------------------------------------------
def test_the_recursion_is_the_target_for_the_correct_rule_and_not_for_the_bug():
    """The oracle's own control: factor 1 gives ``q^(H+1)`` exactly, factor 2 does not."""
    assert _tvd_to_target(MODEL, 2, _sps_law(MODEL, 2, Fraction(1))) == 0
    assert _tvd_to_target(MODEL, 2, _sps_law(MODEL, 2, Fraction(2))) > 0


def test_random_random_is_enumerated_with_the_same_verdict_on_every_run():
    """Five runs, one law: LOSSLESS with TVD exactly 0 (no draw left to chance); the buggy twin LOSSY by the
    recursion's TVD."""
    bug = float(_tvd_to_target(MODEL, 2, _sps_law(MODEL, 2, Fraction(2))))
    for _ in range(5):
        cert = _certify(python_uniform_chain)
        assert cert.lossless and cert.tvd == 0 and cert.off_support == 0, (cert.tvd, cert.off_support)
        buggy = _certify(python_uniform_chain, factor=2.0)
        assert not buggy.lossless and abs(buggy.tvd - bug) <= 1e-12, (buggy.tvd, bug)


@pytest.mark.parametrize("source", ["instance", "held", "uniform"])
def test_a_random_instance_or_uniform_has_the_law_of_random_random(source):
    """``random.Random(0).random()`` seeded in the kernel, a module's ``Random`` and ``random.uniform(0, 1)``
    are enumerated like ``random.random()``, never certified from their single fixed draw."""
    bug = float(_tvd_to_target(MODEL, 1, _sps_law(MODEL, 1, Fraction(2))))
    assert _certify(python_uniform_chain, 1, source=source).tvd == 0
    buggy = _certify(python_uniform_chain, 1, source=source, factor=2.0)
    assert not buggy.lossless and abs(buggy.tvd - bug) <= 1e-12, (buggy.tvd, bug)


# ---- refused sources ---------------------------------------------------------------------------------------------
def kernel_numpy_legacy(parents, tokens, p, q):
    return 0, torch.tensor([int(np.random.rand() * 3)])


def kernel_numpy_default_rng(parents, tokens, p, q):
    return 0, torch.tensor([int(np.random.default_rng(0).random() * 3)])


def kernel_numpy_held(parents, tokens, p, q):
    return 0, torch.tensor([int(NUMPY_RNG.random() * 3)])


def kernel_numpy_global_by_attribute(parents, tokens, p, q):
    return 0, torch.tensor([int(np.random.mtrand._rand.random_sample() * 3)])  # no name the capture replaces


def kernel_getrandbits(parents, tokens, p, q):
    return 0, torch.tensor([random.getrandbits(1)])


def kernel_choice(parents, tokens, p, q):
    return 0, torch.tensor([random.choice([0, 1])])


def kernel_bound_random(parents, tokens, p, q):
    return 0, torch.tensor([int(bound_random() * 3)])


def kernel_system_random(parents, tokens, p, q):
    return 0, torch.tensor([random.SystemRandom().randrange(3)])


@pytest.mark.parametrize("fn, words", [
    (kernel_numpy_legacy, "numpy.random.rand"),
    (kernel_numpy_default_rng, "numpy.random.default_rng"),
    (kernel_numpy_held, "NUMPY_RNG, a numpy.random.Generator"),
    (kernel_getrandbits, "random.getrandbits"),
    (kernel_choice, "random.choice"),
    (kernel_bound_random, "random.random: bound before the capture"),
    (kernel_system_random, "random.SystemRandom"),
])
def test_other_random_sources_are_refused_naming_the_line(fn, words):
    with pytest.raises(KernelError) as err:
        _certify(fn, 1)
    message = err.value.message
    assert words in message and "test_kernel_random_sources.py" in message and fn.__name__ in message, message


def test_a_draw_no_name_reaches_is_caught_by_the_global_state_and_put_back():
    before = np.random.get_state(legacy=False)["state"]["key"].copy()
    with pytest.raises(KernelError, match="numpy.random: the global generator moved"):
        _certify(kernel_numpy_global_by_attribute, 1)
    assert np.array_equal(np.random.get_state(legacy=False)["state"]["key"], before)


def kernel_swallowing(parents, tokens, p, q):
    try:
        random.getrandbits(1)
    except KernelError:
        pass
    return python_uniform_chain(parents, tokens, p, q)


def test_a_refusal_the_kernel_catches_still_refuses_and_everything_is_restored():
    originals = (random.random, np.random.rand, sys.getprofile())
    with pytest.raises(KernelError, match="random.getrandbits"):
        _certify(kernel_swallowing, 1)
    assert (random.random, np.random.rand, sys.getprofile()) == originals
    assert "random" not in vars(random.Random)


def test_a_certification_under_cprofile_gets_its_verdict_and_gives_the_profiler_back():
    """A C profiler cannot be put back by ``sys.setprofile``; the capture re-enables it instead."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        cert = _certify(python_uniform_chain, 1)
        active = sys.getprofile()
    finally:
        profiler.disable()
    assert cert.lossless and active is profiler


def first_line_draws(*args, **kwargs):
    PRIVATE_DRAW()


@pytest.mark.parametrize("adapter", sorted(name for name, a in ADAPTERS.items() if not getattr(a, "batched", False)))
def test_each_built_in_adapter_hands_over_to_the_kernel_watched(adapter):
    """The profiler is off while an adapter reads its rows and back on at its next torch call: a built-in adapter
    must call the kernel after one, or a draw on the kernel's first line would pass unseen (a batched adapter's
    test is tests/test_vllm_forward.py's)."""
    with pytest.raises(KernelError, match="random.Random.random: bound before the capture"):
        _certify(first_line_draws, 1, adapter)


def kernel_own_code_then_draw(parents, tokens, p, q):
    KernelError("kernel", "made by specproof's code")  # the profiler stays on: the kernel is below on the stack
    PRIVATE_DRAW()


def test_a_draw_after_the_kernel_called_specproof_code_is_refused():
    with pytest.raises(KernelError, match="random.Random.random: bound before the capture"):
        _certify(kernel_own_code_then_draw, 1)


# ---- torch generators --------------------------------------------------------------------------------------------
def test_an_explicit_torch_generator_is_enumerated_and_left_as_it_was():
    generator = torch.Generator().manual_seed(1234)
    state, default = generator.get_state(), torch.default_generator.get_state()
    bug = float(_tvd_to_target(MODEL, 2, _sps_law(MODEL, 2, Fraction(2))))
    cert = _certify(python_uniform_chain, generator=generator)
    assert cert.lossless and cert.tvd == 0
    buggy = _certify(python_uniform_chain, generator=generator, factor=2.0)
    assert not buggy.lossless and abs(buggy.tvd - bug) <= 1e-12
    assert torch.equal(generator.get_state(), state) and torch.equal(torch.default_generator.get_state(), default)


def helper_drawing(x, generator=None):
    """A torch helper the function mode sees as one call (as ``F.dropout``), drawing on ``generator`` inside."""
    if torch.overrides.has_torch_function_unary(x):
        return torch.overrides.handle_torch_function(helper_drawing, (x,), x, generator=generator)
    torch.rand(3, generator=generator)
    return x


def kernel_helper_on_generator(parents, tokens, p, q, generator=None):
    helper_drawing(p, generator=generator)
    return python_uniform_chain(parents, tokens, p, q)


def test_a_helper_drawing_on_the_generator_it_is_given_is_refused():
    generator = torch.Generator().manual_seed(7)
    state = generator.get_state()
    with pytest.raises(KernelError, match="helper_drawing: drew random numbers"):
        _certify(kernel_helper_on_generator, 1, generator=generator)
    assert torch.equal(generator.get_state(), state)


class FakeCudaGenerator:
    """Stands in for a CUDA device's default generator on a CPU-only machine: a state that a draw advances."""

    def __init__(self) -> None:
        self.offset = 0

    def get_state(self) -> torch.Tensor:
        return torch.tensor([self.offset], dtype=torch.uint8)

    def set_state(self, state: torch.Tensor) -> None:
        self.offset = int(state[0])


FAKE_CUDA = FakeCudaGenerator()


def cuda_helper(x):
    """A helper that draws on the (mocked) CUDA generator, as ``F.dropout`` on a CUDA tensor would."""
    if torch.overrides.has_torch_function_unary(x):
        return torch.overrides.handle_torch_function(cuda_helper, (x,), x)
    FAKE_CUDA.offset += 1
    return x


def kernel_cuda_helper(parents, tokens, p, q):
    cuda_helper(p)
    return python_uniform_chain(parents, tokens, p, q)


def test_a_draw_on_a_cuda_generator_inside_a_helper_is_refused(monkeypatch):
    assert _certify(kernel_cuda_helper, 1).lossless  # control: unwatched, the draw passes unseen
    monkeypatch.setattr(torch.cuda, "default_generators", (FAKE_CUDA,))
    offset = FAKE_CUDA.offset
    with pytest.raises(KernelError, match="cuda_helper: drew random numbers") as err:
        _certify(kernel_cuda_helper, 1)
    assert "kernel_cuda_helper" in err.value.message and FAKE_CUDA.offset == offset  # put back


def cuda_initialising_helper(x):
    if torch.overrides.has_torch_function_unary(x):
        return torch.overrides.handle_torch_function(cuda_initialising_helper, (x,), x)
    torch.cuda.default_generators = (FakeCudaGenerator(),)  # what CUDA's lazy initialisation does
    return x


def kernel_initialising_cuda(parents, tokens, p, q):
    cuda_initialising_helper(p)
    return python_uniform_chain(parents, tokens, p, q)


def test_cuda_initialised_inside_the_kernel_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "default_generators", ())
    with pytest.raises(KernelError, match="cuda_initialising_helper: initialised CUDA inside the kernel"):
        _certify(kernel_initialising_cuda, 1)


# ---- the command line ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel, kwargs, code", [
    ("python_uniform_chain", None, 0),
    ("python_uniform_chain", "factor=2.0", 1),
    ("kernel_numpy_default_rng", None, 2),
    ("kernel_choice", None, 2),
])
def test_certify_exit_codes_and_refusals_without_a_traceback(kernel, kwargs, code):
    args = ["certify", "--kernel", f"test_kernel_random_sources:{kernel}", "--adapter", "tree", "--topology", "chain",
            "--depth", "1", "--model", "random-rational", "--vocab", "3", "--seed", "1"]
    result = CliRunner().invoke(cli.main, args + (["--kernel-kwargs", kwargs] if kwargs else []))
    assert result.exit_code == code, result.output
    if code == 2:
        assert "test_kernel_random_sources.py" in result.output and kernel in result.output, result.output
        assert "Traceback" not in result.output, result.output
