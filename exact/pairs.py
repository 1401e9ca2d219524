"""Certification over several model pairs: one after another (:func:`certify_pairs`: what one verdict covers, and the
loop a search reuses), or together as the requests of one batch a batched kernel verifies in one call
(:func:`certify_batch`: every request's drafting and every draw of the call enumerated jointly; each request's law
against its own reference, and the joint law against the product of the requests' laws); or one real pair
(:func:`certify_real`)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Iterable, Sequence

from simulator.drafting import Drafter, FixedShape
from simulator.errors import InvalidParameterError
from simulator.kernels.batch import BatchRequest, ReferencePair
from simulator.limits import computation
from simulator.models import ModelPair, ModelView
from simulator.numeric import Number, human_number
from simulator.speculation import checked_outcome
from simulator.trees import make_topology
from simulator.verifiers.registry import Verifier

from .certificate import Certificate, certify, certify_against
from .enumeration import enumerate_outcomes
from .law import Counterexample, OutputLaw, law_distance


@dataclass(frozen=True)
class PairsResult:
    """The certificates in seed order, up to and including the first lossy pair."""

    seeds: tuple[int, ...]  # the model seeds certified
    certificates: tuple[Certificate, ...]

    @property
    def lossless(self) -> bool:
        return all(c.lossless for c in self.certificates)

    @property
    def deciding(self) -> Certificate:
        """The first lossy pair's certificate, or the last one when every pair is lossless."""
        return next((c for c in self.certificates if not c.lossless), self.certificates[-1])

    @property
    def deciding_seed(self) -> int:
        return self.seeds[self.certificates.index(self.deciding)]

    def budget_line(self, budget: Number) -> tuple[bool, str]:
        """Whether every pair's TVD is within ``budget``, and the verdict line saying so (``WITHIN BUDGET`` with the
        largest TVD and its seed, or ``OVER BUDGET`` with the first pair over it)."""
        tvds = [c.tvd for c in self.certificates]
        worst = max(range(len(tvds)), key=lambda i: tvds[i])
        over = next((i for i, t in enumerate(tvds) if t > budget), None)
        where = lambda i: _seed_word(self.certificates[i], self.seeds[i])  # noqa: E731
        if over is None:
            return True, (f"WITHIN BUDGET: TVD ≤ {human_number(budget)} on every pair tried (largest "
                          f"{human_number(tvds[worst])}, {where(worst)})")
        return False, f"OVER BUDGET: TVD {human_number(tvds[over])} > {human_number(budget)} on {where(over)}"

    def coverage(self) -> str:
        """What the verdict covers, in words. A model with no seed (a table) is one pair, named by its kind."""
        config = self.deciding.config or {}
        if config.get("model") is not None and "seed" not in config:
            verdict = "lossless" if self.lossless else "lossy"
            return f"{verdict} on this one model pair ({config['model']}): a verdict on this pair, not on every pair"
        seeds = _seed_list(self.seeds)
        if self.lossless:
            return (f"lossless on the {len(self.seeds)} model pair(s) tried (model {seeds}): a verdict on these pairs, "
                    "not on every pair")
        return (f"lossy on model seed {self.deciding_seed}, the first lossy pair of {len(self.seeds)} tried "
                f"(model {seeds}); {self.certificates.index(self.deciding)} pair(s) before it certified lossless")

    def to_json(self) -> dict:
        """The deciding certificate's JSON, with the pairs tried."""
        return {**self.deciding.to_json(),
                "coverage": {"model_seeds": list(self.seeds),
                             "lossless_pairs": sum(c.lossless for c in self.certificates),
                             "first_lossy_seed": None if self.lossless else self.deciding_seed,
                             "scope": "the model pairs tried, not every pair",
                             "pairs": [{"seed": s, "lossless": c.lossless, "tvd": c.to_json()["tvd"],
                                        "expected_accepted": c.to_json()["expected_accepted"]}
                                       for s, c in zip(self.seeds, self.certificates)]}}


def _seed_list(seeds: tuple[int, ...]) -> str:
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"seeds {seeds[0]}–{seeds[-1]}"


def _seed_word(cert: Certificate, seed: int) -> str:
    """``model seed S``, or ``the table model`` for a model without seeds."""
    return "this model pair" if (cert.config or {}).get("model") is not None and "seed" not in cert.config \
        else f"model seed {seed}"


def certify_pairs(pair: Callable[[int], tuple[ModelPair, Drafter]], seeds: Iterable[int],
                  verifier: str | Verifier, arithmetic: str = "fraction", config: Callable[[int], dict] | None = None,
                  on_pair: Callable[[int, Certificate], None] | None = None, method: str = "enumerate",
                  stop: Callable[[Certificate], bool] | None = None) -> PairsResult:
    """Certify ``verifier`` on the model pair of each seed in order, stopping at the first lossy one (or the first
    ``stop`` says to stop at).

    A subtle bug can hide from most pairs (one random pair in eight is common), so one certificate rarely settles a
    question; a LOSSLESS result covers the pairs tried, not every pair (only a proof does that).

    Parameters
    ----------
    pair : callable
        ``pair(seed) -> (model, drafter)``: the instance of one seed.
    seeds : iterable of int
        The seeds, in the order they are tried.
    verifier : str or callable
        A registry name (``"tv-sps"``, ``specproof list``), ``"module:function"``, or a function
        ``verify(tree, p, q, rng) -> (node, y)`` (docs/plugins.md).
    arithmetic : {"fraction", "float"}
        Exact rationals or float64.
    config : callable, optional
        ``config(seed)``, recorded in that seed's certificate.
    on_pair : callable, optional
        ``on_pair(seed, certificate)``, called as each pair is done (progress).
    method : {"enumerate", "recursion"}
        As :func:`exact.certificate.certify`'s.
    stop : callable, optional
        ``stop(certificate)``: whether to stop after this pair (default: when it is lossy); a TVD budget stops at
        the first pair over it.

    Returns
    -------
    PairsResult
        The seeds certified and their certificates; ``lossless`` is true when every pair tried was.

    Raises
    ------
    SpecproofError
        Whatever :func:`exact.certificate.certify` raises on a pair (an invalid verifier or model, a failing
        verifier, a limit passed).
    """
    done_seeds, certs = [], []
    for seed in seeds:
        model, drafter = pair(seed)
        cert = certify(model, drafter, verifier, arithmetic, config=None if config is None else config(seed),
                       method=method)
        done_seeds.append(seed)
        certs.append(cert)
        if on_pair is not None:
            on_pair(seed, cert)
        if (not cert.lossless) if stop is None else stop(cert):
            break
    return PairsResult(tuple(done_seeds), tuple(certs))


def certify_real(pair, drafter: Drafter, verifier: str | Verifier, config: dict | None = None) -> Certificate:
    """Certify ``verifier`` on a real causal-LM pair after one prompt (``specproof certify --model causal-lm``).

    Parameters:
        pair: a :class:`simulator.real.crosscheck.SupportPair`, the draft and target after the prompt over
            their reachable support; the rule reads its tree-pass rows, as the serving loop computes them.
        drafter: drafts the round's tree (a fixed shape or a dynamic drafter) on the pair.
        verifier: a registered rule's name or a verifier function.
        config: recorded in the certificate beside the pair's own description (``pair.describe()``).

    Returns:
        The :class:`~exact.certificate.Certificate` in float64: the rule's law of the first ``H + 1`` tokens
        against the target's joint from plain forward passes (``pair.plain_joint``), LOSSLESS when the TVD is at
        most :data:`simulator.real.crosscheck.TOLERANCE` and no mass falls where the joint has none. A
        counterexample's sequence is in the model's token ids, not the support's.

    Raises:
        ExecutionLimitError, TimeLimitError: the enumeration passed the limits in force
        (:func:`simulator.limits.limits`).
        Any error the verifier raises, as :func:`~exact.certificate.certify_against` passes it on.
    """
    from simulator.real.crosscheck import TOLERANCE, TOLERANCE_REASON

    cert = certify_against(pair, drafter, verifier, pair.plain_joint, TOLERANCE, TOLERANCE_REASON,
                           {**pair.describe(), **(config or {})})
    if cert.counterexample is None:
        return cert
    seq = pair.original(cert.counterexample.sequence)
    return dataclasses.replace(cert, counterexample=dataclasses.replace(cert.counterexample, sequence=seq))


def real_coverage(prompt_tokens: int, draft: str, target: str, processing) -> str:
    """The ``covers:`` line of a :func:`certify_real` verdict: the prompt (``prompt_tokens`` long), the pair
    (``draft`` and ``target`` as named on the command line, float64) and the ``processing`` (a
    :class:`simulator.real.causal_lm.Processing`: temperature and top-k) it was made on, and nothing else."""
    return (f"this prompt ({prompt_tokens} tokens), this pair (draft {draft}, target {target}, float64) and this "
            f"processing (temperature {processing.temperature:g}, top-k {processing.top_k}) only: another prompt, "
            "pair, processing or dtype is another check")


@dataclass(frozen=True)
class RequestVerdict:
    """One request's verdict: the TVD of its completed law of ``depth + 1`` tokens to its reference's joint, the mass
    on sequences the reference excludes, the worst sequence of a lossy verdict, ``E[τ]``, and what it was held to."""

    index: int
    request: str
    reference: str
    lossless: bool
    tvd: Number
    off_support: Number
    expected_accepted: Number
    counterexample: Counterexample | None

    def to_json(self) -> dict:
        ce = self.counterexample
        return {"index": self.index, "request": self.request, "reference": self.reference, "lossless": self.lossless,
                "tvd": float(self.tvd), "off_support": float(self.off_support),
                "expected_accepted": float(self.expected_accepted),
                "counterexample": None if ce is None else {"sequence": list(ce.sequence),
                                                           "kernel_prob": float(ce.verifier_prob),
                                                           "reference_prob": float(ce.target_prob)}}


@dataclass(frozen=True)
class BatchCertificate:
    """A batch's verdict: LOSSLESS when every request is and the requests' draws are independent (``joint_tvd``,
    the TVD of the batch's joint law of outcomes to the product of the requests' laws, within the tolerance)."""

    kernel: str
    lossless: bool
    requests: tuple[RequestVerdict, ...]
    joint_tvd: Number
    tolerance: float
    tolerance_reason: str
    executions: int
    config: dict = field(default_factory=dict)

    @property
    def tvd(self) -> Number:
        """The batch's worst TVD: the largest of its requests' and its joint's."""
        return max([r.tvd for r in self.requests] + [self.joint_tvd])

    @property
    def off_support(self) -> Number:
        """The largest mass a request puts where its reference has none."""
        return max(r.off_support for r in self.requests)

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "lossless": self.lossless, "tvd": float(self.tvd),
                "off_support": float(self.off_support), "requests": [r.to_json() for r in self.requests],
                "joint_tvd": float(self.joint_tvd), "tolerance": self.tolerance,
                "tolerance_reason": self.tolerance_reason, "executions": self.executions, "config": self.config}


@dataclass(frozen=True)
class BatchLaw:
    """A batch's joint law (:func:`batch_law`): each tuple of the requests' round outcomes with its exact
    probability, the executions enumerated, and the tolerance of the precision the kernel computed in."""

    kernel: str
    joint: dict
    executions: int
    tolerance: float
    tolerance_reason: str

    def certificate(self, requests: Sequence[BatchRequest], config: dict | None = None) -> BatchCertificate:
        """The verdict on this law: each request's marginal against its reference, the joint against the product of
        the marginals. ``requests`` are the batch's; the same requests with other sampling parameters hold the law to
        other references (a control with a wrong reference, without enumerating again)."""
        marginals = [_marginal(self.joint, i) for i in range(len(requests))]
        verdicts = tuple(_verdict(i, r, marginals[i], self.tolerance) for i, r in enumerate(requests))
        joint_tvd = _dependence(self.joint, marginals)
        lossless = all(v.lossless for v in verdicts) and joint_tvd <= self.tolerance
        return BatchCertificate(self.kernel, lossless, verdicts, joint_tvd, self.tolerance, self.tolerance_reason,
                                self.executions, dict(config or {}))


def certify_batch(requests: Sequence[BatchRequest], kernel, config: dict | None = None) -> BatchCertificate:
    """Certify a batched kernel (:class:`~simulator.kernels.kernel.Kernel` through an adapter with ``batched``
    set, such as ``vllm-v1-forward``) on a batch of requests, each drafting a chain of ``depth`` tokens i.i.d. from
    its draft rows: :func:`batch_law`, then :meth:`BatchLaw.certificate`.

    Each request's law of ``(accepted path, token)`` is its marginal of the batch's joint law, completed to
    ``depth + 1`` tokens by its reference (:class:`~simulator.kernels.batch.ReferencePair`: its target processed by
    temperature, top-k and top-p, or its argmax when greedy) and compared with the reference's joint. A request is
    LOSSLESS when that TVD is within the kernel's tolerance (the precision it computes in,
    :meth:`Kernel.float_tolerance`) and it puts no mass where its reference has none. The batch is LOSSLESS when
    every request is and the joint law equals the product of the marginals to the same tolerance: a draw shared
    between requests (one request's uniforms reused by another) leaves each marginal right and shows there.

    Parameters
    ----------
    requests : sequence of BatchRequest
        The batch, in order; one vocabulary.
    kernel : Kernel
        The kernel and its batched adapter.
    config : dict, optional
        Recorded in the certificate as given.

    Returns
    -------
    BatchCertificate

    Raises
    ------
    InvalidParameterError
        An empty batch, a bad request field (named ``request[i].field``), vocabularies that differ, a top-p cut
        float32 cannot decide as float64 does, or an adapter that is not batched.
    KernelError, RandomSourceError
        The kernel used a random value in a way the capture cannot follow exactly, or drew from another source.
    ExecutionLimitError, TimeLimitError
        The enumeration passed a limit in force.
    """
    return batch_law(requests, kernel).certificate(requests, config)


def batch_law(requests: Sequence[BatchRequest], kernel) -> BatchLaw:
    """The batch's joint law: one execution drafts every request's chain and runs the kernel once on them all; the
    enumeration takes every branch of every draw, drafting and the kernel's alike. Raises as
    :func:`certify_batch`."""
    if not requests:
        raise InvalidParameterError("request", "a batch needs at least one request")
    for i, request in enumerate(requests):
        request.check(i)
        if request.model.vocab != requests[0].model.vocab:
            raise InvalidParameterError(f"request[{i}].model", f"vocabulary {request.model.vocab}, but request 0's "
                                                               f"is {requests[0].model.vocab}: a batch has one")
    views = [ModelView(r.model, "fraction") for r in requests]
    drafters = [FixedShape(make_topology("chain", r.depth, 1)) for r in requests]
    vocab = requests[0].model.vocab

    def program(rng) -> tuple:
        drafts = [drafter.draft(view, rng) for drafter, view in zip(drafters, views)]
        answers = kernel.call_batch(drafts, requests, rng)
        return tuple(checked_outcome(d.tree, answer, vocab) for d, answer in zip(drafts, answers))

    joint: dict[tuple, Fraction] = {}
    executions = 0
    with computation() as scope:
        for outcomes, prob in enumerate_outcomes(program, exact=True):
            joint[outcomes] = joint.get(outcomes, Fraction(0)) + prob
            executions += 1
            scope.advance(float(prob))
    tolerance, reason = kernel.float_tolerance()
    return BatchLaw(getattr(kernel, "kernel", getattr(kernel, "__name__", "kernel")), joint, executions, tolerance,
                    reason)


def _marginal(joint: dict[tuple, Fraction], i: int) -> dict:
    out: dict = {}
    for outcomes, prob in joint.items():
        out[outcomes[i]] = out.get(outcomes[i], Fraction(0)) + prob
    return out


def _verdict(index: int, request: BatchRequest, marginal: dict, tolerance: float) -> RequestVerdict:
    """Request ``index``'s verdict, in floats: its exact marginal completed by its reference's float64 rows."""
    law = OutputLaw(marginal.items(), request.depth, ModelView(ReferencePair(request, index), "float"), exact=False)
    distance = law.distance()
    lossless = distance.tvd <= tolerance and distance.off_support == 0
    reference = "its argmax" if request.greedy else f"its target, {request.sampling.describe()}"
    ce = distance.counterexample
    worst = None if lossless else Counterexample(ce.sequence, float(ce.verifier_prob), float(ce.target_prob))
    return RequestVerdict(index, request.describe(), reference, lossless, float(distance.tvd),
                          float(distance.off_support), float(law.expected_accepted()), worst)


def _dependence(joint: dict[tuple, Fraction], marginals: list[dict]) -> float:
    """The TVD of the joint law of the requests' outcomes to the product of their marginals (0 when their draws are
    independent)."""
    key = lambda outcomes: tuple((o.path, o.y) for o in outcomes)  # noqa: E731 (orderable)
    product = {key(combo): math.prod(m[o] for m, o in zip(marginals, combo))
               for combo in itertools.product(*marginals)}
    return float(law_distance({key(o): p for o, p in joint.items()}, product, Fraction(0)).tvd)
