"""Certification over several model pairs (:func:`certify_pairs`), or one real pair (:func:`certify_real`): what one
verdict covers, and the loop a search reuses."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterable

from simulator.drafting import Drafter
from simulator.models import ModelPair
from simulator.verifiers.registry import Verifier

from .certificate import Certificate, certify, certify_against


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
                f"(model {seeds}); {len(self.seeds) - 1} pair(s) before it certified lossless")

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


def certify_pairs(pair: Callable[[int], tuple[ModelPair, Drafter]], seeds: Iterable[int],
                  verifier: str | Verifier, arithmetic: str = "fraction", config: Callable[[int], dict] | None = None,
                  on_pair: Callable[[int, Certificate], None] | None = None, method: str = "enumerate") -> PairsResult:
    """Certify ``verifier`` on the model pair of each seed in order, stopping at the first lossy one.

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
        if not cert.lossless:
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
