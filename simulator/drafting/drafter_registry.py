"""Every drafter by scheme name: fixed shapes (:mod:`simulator.drafting`), DySpec's dynamic trees
(:mod:`simulator.drafting.dyspec`) and ADED's adaptive drafts (:mod:`simulator.drafting.aded`), built by
:func:`make_drafter`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from simulator.drafting.aded import Aded, AdedConfig, TrigramTable, sample_corpus
from simulator.drafting import DRAFTING, Drafter, FixedShape
from simulator.drafting.dyspec import DySpecBudget, DySpecThreshold
from simulator.errors import InvalidParameterError
from simulator.models import ModelPair
from simulator.trees import Topology

DYNAMIC = ("dyspec", "dyspec-threshold")
DRAFTERS: dict[str, str] = {
    **DRAFTING,
    "dyspec": "DySpec Alg. 1: greedy dynamic tree of --budget draft tokens",
    "dyspec-threshold": "DySpec Alg. 2: layer by layer while the estimated value >= --threshold, to --max-depth",
    "aded": "ADED: deterministic candidates from a tri-gram table searched by MCTS, updated each round",
}


@dataclass(frozen=True)
class DrafterOptions:
    """The parameters of the dynamic drafters (ignored by fixed shapes)."""

    budget: int = 6
    threshold: float = 0.1
    max_depth: int = 4
    aded: AdedConfig = AdedConfig()
    corpus: Sequence[Sequence[int]] | None = None  # ADED; default: sampled from the model (sample_corpus)
    top: int = 12  # ADED's elimination threshold: continuations kept per bigram


def make_drafter(scheme: str, topology: Topology | None = None, model: ModelPair | None = None,
                 options: DrafterOptions = DrafterOptions(), vocab: int | None = None) -> Drafter:
    """The drafter of ``scheme``: fixed schemes need ``topology``; ADED needs ``model`` (vocabulary, corpus), or
    ``vocab`` with ``options.corpus`` (a real model's token ids)."""
    if scheme in DRAFTING:
        if topology is None:
            raise InvalidParameterError("topology", f"drafting {scheme!r} needs a tree shape")
        return FixedShape(topology, scheme)
    if scheme == "dyspec":
        return DySpecBudget(options.budget)
    if scheme == "dyspec-threshold":
        return DySpecThreshold(options.threshold, options.max_depth)
    if scheme == "aded":
        if model is None and (vocab is None or options.corpus is None):
            raise InvalidParameterError("model", "ADED builds its table from a corpus over the model's vocabulary")
        corpus = sample_corpus(model) if options.corpus is None else options.corpus
        return Aded(TrigramTable.from_corpus(corpus, model.vocab if vocab is None else vocab, options.top),
                    options.aded)
    raise InvalidParameterError("drafting", f"unknown drafting scheme {scheme!r}; choose from {sorted(DRAFTERS)}")
