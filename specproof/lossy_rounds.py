"""The lossy-by-design rules on a real pair's rounds (docs/lossy.md, "On the real pair"; issue 68): at contexts the
target's own sampling reaches in each answer, every rule setting's exact law of one round on the pair's top-k rows,
its TVD to the target's joint and its ``E[τ]``, beside the best lossless built-in rule on the same rows and shape
(:func:`measure_round`, :func:`question_rounds`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from simulator.drafting import FixedShape
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.registry import Verifier

from exact.pairs import certify_real
from specproof.frontier_cells import REFUSALS, best_lossless, value_text


@dataclass(frozen=True)
class Setting:
    """``rule`` at ``knobs`` (``(name, value)`` pairs, values as ``--verifier-kwargs`` reads them; the others at
    their defaults); a knob named in ``capped`` is cut to the pair's vocabulary (``relaxed_topk``: the shipped
    ``torch.topk`` refuses more)."""

    rule: str
    knobs: tuple[tuple[str, object], ...] = ()
    capped: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``rule (a=1, b=0.5)``, ``rule (defaults)`` without knobs; a capped knob says so."""
        given = ", ".join(f"{name}={value_text(value)}" + (" capped at V" if name in self.capped else "")
                          for name, value in self.knobs)
        return f"{self.rule} ({given or 'defaults'})"

    def verifier(self, vocab: int) -> Verifier:
        """The rule at these knobs on a vocabulary of ``vocab`` tokens."""
        return VERIFIERS[self.rule].build({name: min(value, vocab) if name in self.capped else value
                                           for name, value in self.knobs})


@dataclass(frozen=True)
class Shape:
    """A fixed draft tree and its drafting, named by its topology; ``rules`` limits the settings measured on it
    (``None``: every setting whose rule is defined on the topology)."""

    topology: str
    depth: int
    branching: int
    drafting: str
    rules: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return self.topology

    def drafter(self) -> FixedShape:
        return FixedShape(make_topology(self.topology, self.depth, self.branching), self.drafting)

    def applies(self, setting: Setting) -> bool:
        return (self.topology in VERIFIERS[setting.rule].shapes
                and (self.rules is None or setting.rule in self.rules))

    def describe(self) -> str:
        return f"{self.topology} ({self.depth}, {self.branching}), {self.drafting} drafting"


#: issue 68's settings: Medusa's defaults and a stricter pair; SGLang's lossless defaults and each threshold lowered;
#: TensorRT-LLM's documented example and a wider delta; vLLM's FLy defaults; vLLM's synthetic rates
SETTINGS = (
    Setting("typical", (("posterior_threshold", 0.09), ("posterior_alpha", 0.3))),
    Setting("typical", (("posterior_threshold", 0.2), ("posterior_alpha", 0.5))),
    Setting("sglang-threshold", (("threshold_single", 1), ("threshold_acc", 1))),
    Setting("sglang-threshold", (("threshold_single", 0.5), ("threshold_acc", 1))),
    Setting("sglang-threshold", (("threshold_single", 1), ("threshold_acc", 0.5))),
    Setting("relaxed", (("relaxed_topk", 10), ("relaxed_delta", 0.01)), ("relaxed_topk",)),
    Setting("relaxed", (("relaxed_topk", 3), ("relaxed_delta", 0.1)), ("relaxed_topk",)),
    Setting("fly"),
    Setting("forced-rate", (("synthetic_acceptance_rates", 0.8),)),
    Setting("forced-rate", (("synthetic_acceptance_rates", 0.95),)),
)
#: a chain of depth 3 (every rule), and the complete tree (2, 2) with distinct siblings for the tree rules
SHAPES = (Shape("chain", 3, 1, "iid"), Shape("complete", 2, 2, "without-replacement", ("typical", "sglang-threshold")))


def measure_round(pair, shapes: Sequence[Shape] = SHAPES, settings: Sequence[Setting] = SETTINGS) -> dict:
    """One round of every setting on ``pair`` (a :class:`simulator.real.crosscheck.SupportPair`), per shape.

    Each setting's law of the round's first ``H + 1`` tokens is certified in float64 by
    :func:`exact.pairs.certify_real`: the rule reads the tree-pass rows, and the TVD is to the target's joint over
    ``Σ^(H+1)`` from plain forward passes of the same processed (top-k cut) rows. The reference is the best lossless
    built-in rule of the shape's drafting (:func:`specproof.frontier_cells.best_lossless`, the ranking ``specproof
    frontier`` uses: ``bv`` on chains), whose own TVD is certified the same way, the control of the measurement.

    Returns ``{shape name: {"best": name, "tied": [the rules tied with it], "best_expected_accepted",
    "best_tvd", "settings": {label: {"tvd", "expected_accepted", "gain"} or {"refused"}}}}``; ``gain`` is the
    setting's ``E[τ]`` minus the best lossless rule's on the same rows. A setting refused by a limit or an undecidable comparison says so.
    """
    out = {}
    for shape in shapes:
        drafter = shape.drafter()
        reference = best_lossless(pair, drafter, shape.drafting, shape.topology, "float")
        best = reference["best"]
        base = None if best is None else reference["rules"][best]["expected_accepted"]
        cells = {}
        for setting in (s for s in settings if shape.applies(s)):
            try:
                cert = certify_real(pair, drafter, setting.verifier(pair.vocab))
            except REFUSALS as err:
                cells[setting.label] = {"refused": f"{err.field}: {err.message}"}
                continue
            accepted = float(cert.expected_accepted)
            cells[setting.label] = {"tvd": float(cert.tvd), "expected_accepted": accepted,
                                    "gain": None if base is None else accepted - base}
        out[shape.name] = {"best": best, "tied": reference["tied"], "best_expected_accepted": base,
                           "best_tvd": None if best is None else float(certify_real(pair, drafter, best).tvd),
                           "settings": cells}
    return out


def round_positions(answer: Sequence[int], positions: Sequence[int], stop: Sequence[int]) -> list[int]:
    """The positions of ``positions`` a round can start at in ``answer``: within it, and not after a stop token."""
    end = next((i + 1 for i, t in enumerate(answer) if t in stop), len(answer))
    return [j for j in positions if j <= end and not (j and answer[j - 1] in stop)]


def question_rounds(draft, target, prompt: Sequence[int], processing, positions: Sequence[int], seed: int,
                    stop: Sequence[int] = (), shapes: Sequence[Shape] = SHAPES,
                    settings: Sequence[Setting] = SETTINGS,
                    tick: Callable[[], None] | None = None) -> list[dict]:
    """The rounds of one question: the target samples an answer to ``prompt`` under ``processing`` (seed ``seed``,
    up to the largest position or a stop token), and at each position ``j`` of ``positions`` it reaches, the draft
    and target after ``prompt`` and the answer's first ``j`` tokens, over their reachable support
    (:class:`simulator.real.crosscheck.SupportPair`, as deep as the deepest shape), are measured by
    :func:`measure_round`. Each record: ``position``, ``support`` (the support's size) and ``shapes``."""
    from simulator.real.crosscheck import SupportPair
    from simulator.real.kv_cache import CachedLM
    from simulator.real.spec_bench import target_generate

    answer = target_generate(CachedLM(target, processing), prompt, max(positions), seed, stop).tokens
    height = max(shape.depth for shape in shapes)
    rounds = []
    for j in round_positions(answer, positions, stop):
        pair = SupportPair(draft, target, list(prompt) + answer[:j], processing, processing, height)
        rounds.append({"position": j, "support": pair.vocab, "shapes": measure_round(pair, shapes, settings)})
        if tick is not None:
            tick()
    return rounds
