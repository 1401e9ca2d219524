"""pytest helpers: a user's test suite certifies its verifier or kernel exactly in three lines
(:func:`assert_lossless`; docs/gate.md#pytest), a whole generation loop as well (:func:`assert_loop_lossless`), and
Hypothesis strategies of the instances for property tests (``model_pairs()``, ``tree_shapes()``:
:mod:`specproof.gate.strategies`, imported on first use)."""

from __future__ import annotations

import os
import re
import tempfile
from fractions import Fraction
from pathlib import Path

from simulator.numeric import Number, human_number
from simulator.usercode import require

from specproof.gate.battery import battery, build, instance_key, instances
from specproof.gate.loop_battery import (certify_loop_instance, loop_battery, loop_instance_key, loop_instances,
                                         loop_length, loop_subject)
from exact.certificate import Certificate, certify
from exact.generation_law import LoopCertificate
from simulator.loops.sampling import Sampling
from exact.reproducer import capture
from specproof.gate.shrink import shrink
from exact.subject import subject

#: seconds the shrinker may spend on a failure's reproducer
SHRINK_SECONDS = 5.0
#: the Hypothesis strategies this module hands out from :mod:`specproof.gate.strategies`, imported on first use
STRATEGIES = ("model_pairs", "tree_shapes")


def __getattr__(name: str):
    """``model_pairs`` and ``tree_shapes``, imported with Hypothesis when first asked for."""
    if name in STRATEGIES:
        require("hypothesis", f"specproof.gate.testing.{name}", "hypothesis")
        from specproof.gate import strategies

        return getattr(strategies, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _battery_certificates(verifier: object, overrides: dict):
    what = subject(verifier)
    b = battery(overrides)
    for inst in instances(b, what):
        model, drafter = build(inst, b)
        yield what, b, inst, certify(model, drafter, what.fn, b["arithmetic"])


def assert_lossless(verifier: object, case_dir: str | os.PathLike | None = None, **overrides: object) -> int:
    """Certify ``verifier`` LOSSLESS on every instance of a battery, exactly; for a user's pytest suite.

    What a passing assertion covers is the battery, not every pair (``specproof prove`` decides every pair of a
    shape).

    Examples
    --------
    >>> from specproof.gate.testing import assert_lossless
    >>> def test_my_verifier_is_lossless():
    ...     assert_lossless("examples.plugin_verifier:my_tv")

    Parameters
    ----------
    verifier : object
        A registry name, ``"module:function"``, a verifier function or a
        :class:`simulator.kernels.kernel.Kernel`.
    case_dir : str or PathLike, optional
        Where a loss's reproducer is written (default: ``$SPECPROOF_CASE_DIR``, else the system's temporary folder).
    **overrides
        Battery keys (:mod:`specproof.gate.battery`), e.g. ``vocab=[3], topologies=["chain"], depth=3``.

    Returns
    -------
    int
        The number of instances certified.

    Raises
    ------
    AssertionError
        A LOSSY instance: the message names the instance, the TVD and the counterexample sequence, and the path of
        the shrunk reproducer (``CASE.json``) that ``specproof certify --case`` certifies again.
    InvalidParameterError
        An unknown battery key or value, or a verifier that cannot be loaded.
    SpecproofError
        Whatever certifying an instance raises (a verifier that fails, a draw outside ``rng``, a limit).
    """
    count = 0
    for what, b, inst, cert in _battery_certificates(verifier, overrides):
        count += 1
        if not cert.lossless:
            model, drafter = build(inst, b)
            path = _reproducer(capture(model, drafter, what, b["arithmetic"]), what, case_dir, inst)
            raise AssertionError(f"{what.name} is LOSSY on {instance_key(inst)}: {_evidence(cert)}; reproducer "
                                 f"written to {path} (specproof certify --case {path})")
    return count


def assert_lossy(verifier: object, **overrides: object) -> Certificate:
    """Certify ``verifier`` LOSSY on at least one instance of the battery: a negative control, showing the battery can
    fail.

    Parameters
    ----------
    verifier : object
        As :func:`assert_lossless`'s.
    **overrides
        Battery keys.

    Returns
    -------
    Certificate
        The first lossy instance's certificate.

    Raises
    ------
    AssertionError
        Every instance certified LOSSLESS.
    SpecproofError
        As :func:`assert_lossless`.
    """
    return _first_loss("battery", ((what.name, instance_key(inst), cert)
                                   for what, _, inst, cert in _battery_certificates(verifier, overrides)))


def assert_acceptance(verifier: object, expected: Number | str, tolerance: float = 0.0,
                      **overrides: object) -> Number:
    """Certify the exact ``E[τ]`` (accepted draft tokens) on the battery's first instance and compare it with
    ``expected``.

    Parameters
    ----------
    verifier : object
        As :func:`assert_lossless`'s.
    expected : number or str
        The expected ``E[τ]``, a number or ``"n/d"``.
    tolerance : float
        0: equal exactly (under fractions); otherwise within ``tolerance``.
    **overrides
        Battery keys.

    Returns
    -------
    number
        ``E[τ]``.

    Raises
    ------
    AssertionError
        ``E[τ]`` differs from ``expected``.
    SpecproofError
        As :func:`assert_lossless`.
    """
    what, _, inst, cert = next(_battery_certificates(verifier, overrides))
    got = cert.expected_accepted
    want = Fraction(expected) if isinstance(expected, str) else expected
    if tolerance == 0 and Fraction(got) != Fraction(want):
        raise AssertionError(f"{what.name} on {instance_key(inst)}: E[τ] = {human_number(got)}, expected exactly "
                             f"{human_number(Fraction(want))}")
    if tolerance and abs(float(got) - float(want)) > tolerance:
        raise AssertionError(f"{what.name} on {instance_key(inst)}: E[τ] = {float(got)!r}, expected {float(want)!r} "
                             f"± {tolerance:g}")
    return got


def _loop_certificates(loop: object, sampling: dict | None, overrides: dict):
    b = loop_battery(overrides, "battery", folder=os.getcwd())
    description = {"loop": loop, "sampling": Sampling.from_dict(sampling).as_dict()}
    name = loop_subject(description, b["depth"]).name  # imports the loop now: a bad name is refused before any run
    setting = (f"{Sampling(**description['sampling']).describe()}, {loop_length(b)} new tokens after "
               f"{list(b['prompt_ids'])}")
    for inst in loop_instances(b):
        yield name, f"{loop_instance_key(inst)} ({setting})", certify_loop_instance(description, b, inst)


def assert_loop_lossless(loop: object, sampling: dict | None = None, **overrides: object) -> int:
    """Certify a whole generation loop LOSSLESS on every instance of a loop battery, exactly: on each tiny model
    pair, the law of its new tokens equals plain sampling's with the same sampling parameters
    (:func:`exact.generation_law.certify_loop`; docs/gate.md#loop-checks).

    What a passing assertion covers is the battery's pairs, prompt, length and sampling parameters.

    Examples
    --------
    >>> from specproof.gate.testing import assert_loop_lossless
    >>> def test_my_loop_is_lossless():
    ...     assert_loop_lossless("examples.loops:speculative_sampling", {"top_k": 2},
    ...                          models=["prefix-table"], tables=["examples/specproof-loops-table.json"])

    Parameters
    ----------
    loop : str or callable
        A shipped loop's name (``transformers-assisted``, ``transformers-prompt-lookup``), ``"module:function"``,
        or the loop itself, in the convention ``loop(target, draft, input_ids, *, max_new_tokens, sampling)``.
    sampling : dict, optional
        The sampling parameters (``temperature``, ``top_k``, ``top_p``, ``min_p``, ``repetition_penalty``; absent:
        off), the loop's and the reference's.
    **overrides
        Loop battery keys (:data:`specproof.gate.loop_battery.LOOP_DEFAULTS`): ``models`` (``tiny-llama``,
        ``prefix-table``), ``seeds`` and ``vocab`` (tiny-llama's), ``tables`` (prefix-table's JSON files, relative
        to the working directory), ``depth`` (the shipped loops' draft depth), ``max_new_tokens`` (default depth +
        1) and ``prompt_ids``. The default: the tiny Llama pair of vocabulary 4, seed 0, 3 new tokens after [0].

    Returns
    -------
    int
        The number of instances certified.

    Raises
    ------
    AssertionError
        A LOSSY instance: the message names the instance and the sampling parameters, the TVD and its tolerance,
        any mass off the reference's support, and the continuation that differs most with its two probabilities.
    InvalidParameterError
        An unknown battery key or a bad value (``battery.vocab``), a bad sampling parameter (``sampling.top_k``),
        or a loop that cannot be loaded.
    MissingDependencyError
        torch, or transformers for tiny-llama, is not installed.
    SpecproofError
        Whatever certifying an instance raises (the loop raised, answered other than its new token ids, drew from
        another source, passed a limit).
    """
    count = 0
    for name, instance, cert in _loop_certificates(loop, sampling, overrides):
        count += 1
        if not cert.lossless:
            evidence = _evidence(cert, "loop", "plain sampling", "continuation")
            raise AssertionError(f"{name} is LOSSY on {instance}: {evidence}")
    return count


def assert_loop_lossy(loop: object, sampling: dict | None = None, **overrides: object) -> LoopCertificate:
    """Certify a generation loop LOSSY on at least one instance of the loop battery: a negative control, showing
    the battery can fail (a twin with a known bug, say).

    Parameters
    ----------
    loop, sampling
        As :func:`assert_loop_lossless`'s.
    **overrides
        Loop battery keys.

    Returns
    -------
    LoopCertificate
        The first lossy instance's certificate.

    Raises
    ------
    AssertionError
        Every instance certified LOSSLESS.
    SpecproofError
        As :func:`assert_loop_lossless`.
    """
    return _first_loss("loop battery", _loop_certificates(loop, sampling, overrides))


def _first_loss(battery_name: str, certified):
    """The first LOSSY certificate of ``certified`` (``(subject's name, instance, certificate)`` triples, at least
    one), or an AssertionError that lists the instances tried."""
    tried = []
    for name, instance, cert in certified:
        if not cert.lossless:
            return cert
        tried.append(instance)
    listed = "; ".join(tried) if len(tried) <= 2 else f"{tried[0]} … {tried[-1]}"
    raise AssertionError(f"{name} certified LOSSLESS on all {len(tried)} instances of the {battery_name} ({listed}): "
                         "expected a loss")


def _evidence(cert: Certificate | LoopCertificate, who: str = "verifier", reference: str = "the target",
              outcome: str = "sequence") -> str:
    text = f"TVD {human_number(cert.tvd)} (tolerance {human_number(cert.tolerance)})"
    if cert.off_support:
        text += f", mass {human_number(cert.off_support)} on {outcome}s {reference} never produces"
    ce = cert.counterexample
    if ce is not None:
        text += (f"; {outcome} {list(ce.sequence)} has probability {human_number(ce.verifier_prob)} under the "
                 f"{who}, {human_number(ce.target_prob)} under {reference}")
    return text


def _reproducer(case, what, case_dir, inst: dict) -> Path:
    folder = Path(case_dir or os.environ.get("SPECPROOF_CASE_DIR") or Path(tempfile.gettempdir()) / "specproof-cases")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{what.name} {instance_key(inst)}") + ".json"
    found = shrink(case, SHRINK_SECONDS, what)
    return found.case.write(folder / name, found.certificate)
