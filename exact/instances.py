"""Random exact instances for certification batteries (:func:`random_instances`): a rational model, a tree shape and
a drafting scheme, small enough that certificates are exact and fast."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from simulator.drafting.aded import AdedConfig
from simulator.drafting import draft_models_for
from simulator.drafting.drafter_registry import Drafter, DrafterOptions, make_drafter
from simulator.drafting.shapes import FIXED_BRANCHING, branching_fits
from simulator.models import RandomRationalModel
from simulator.trees import Topology, check_parents, make_topology
from simulator.verifiers import VerifierSpec

SHAPES = ("chain", "multi-chain", "complete", "tapered", "binary", "explicit")


@dataclass(frozen=True)
class Instance:
    model: RandomRationalModel
    topology: Topology
    drafting: str
    drafter: Drafter

    def describe(self) -> str:
        return f"vocab={self.model.vocab} seed={self.model.seed} " + ", ".join(
            f"{k}={v}" for k, v in self.drafter.describe().items())


def _random_parents(rng: np.random.Generator, draft_nodes: int) -> list[int]:
    parents = [-1]
    for i in range(1, draft_nodes + 1):
        low = parents[-1] if i > 1 else 0
        parents.append(int(rng.integers(low, i)))
    return check_parents(parents)  # type: ignore[return-value]


def _random_full_parents(rng: np.random.Generator, draft_nodes: int, branching: int) -> list[int]:
    """A random BFS tree whose inner nodes all have ``branching`` children, with at most ``draft_nodes`` draft nodes
    (at least ``branching``): nodes expanded in increasing id order, each after the last one expanded."""
    parents, last = [-1] + [0] * branching, 0
    while len(parents) - 1 + branching <= draft_nodes and rng.random() < 0.7:
        last = int(rng.integers(last + 1, len(parents)))
        parents += [last] * branching
    return check_parents(parents)  # type: ignore[return-value]


def random_shape(rng: np.random.Generator, shape: str, max_nodes: int, branching: int | None = None) -> Topology:
    """A random tree of the named shape with 1..``max_nodes`` draft nodes (explicit: a random BFS tree); with
    ``branching``, every inner node has that many children (a scheme defined for one child count only)."""
    for _ in range(100):
        if shape == "explicit" and branching is not None:
            topo = make_topology("explicit", parents=_random_full_parents(rng, max_nodes, branching))
        elif shape == "explicit":
            topo = make_topology("explicit", parents=_random_parents(rng, int(rng.integers(1, max_nodes + 1))))
        else:
            topo = make_topology(shape, int(rng.integers(1, max_nodes + 1)), branching or int(rng.integers(1, 4)))
        if 1 <= len(topo.parents) - 1 <= max_nodes:
            return topo
    raise RuntimeError(f"no {shape} tree within {max_nodes} nodes")  # pragma: no cover


def random_instances(spec: VerifierSpec, count: int, seed: int = 0, max_nodes: int = 7,
                     max_outcomes: int = 3000) -> Iterator[Instance]:
    """``count`` instances for ``spec``, cycling through shapes and the schemes it is lossless under.

    Instances spread over every topology (random BFS trees included) and every drafting scheme the verifier is
    lossless under (DySpec's and ADED's drafters with random settings of the same size), with vocabularies of 2–4 and
    at most ``max_nodes`` draft nodes; ``vocab ** draft_nodes`` is bounded to keep the enumeration small. Models are
    :class:`~simulator.models.RandomRationalModel`: small integer weights, zeros frequent, prefix-dependent; under
    ``k-models`` with as many draft models as a node has children (at least two, :func:`draft_models_for`).
    """
    rng = np.random.default_rng(seed)
    shapes = spec.shapes
    schemes = spec.lossless_under or ((spec.demo[1],) if spec.demo else ("iid",))
    for i in range(count):
        vocab = int(rng.integers(2, 5))
        nodes = max_nodes
        while vocab ** nodes > max_outcomes:
            nodes -= 1
        scheme = schemes[(i // len(shapes)) % len(schemes)]
        for j in range(len(shapes)):  # the next shape that can give every inner node the scheme's branching
            topology = random_shape(rng, shapes[(i + j) % len(shapes)], nodes, FIXED_BRANCHING.get(scheme))
            if branching_fits(scheme, topology.parents):
                break
        model = RandomRationalModel(vocab=vocab, seed=int(rng.integers(2**31)), zero_prob=0.3,
                                    draft_models=draft_models_for(scheme, topology))
        yield Instance(model, topology, scheme, make_drafter(scheme, topology, model, random_options(rng, nodes)))


def random_options(rng: np.random.Generator, nodes: int) -> DrafterOptions:
    """Dynamic drafters of at most ``nodes`` draft tokens (DySpec's threshold tree: at most ``nodes`` per
    layer is not guaranteed, so its depth stays at 2 and its threshold at 1/4 or more)."""
    return DrafterOptions(budget=int(rng.integers(1, nodes + 1)), threshold=float(rng.uniform(0.25, 0.6)),
                          max_depth=int(rng.integers(1, 3)),
                          aded=AdedConfig(iterations=int(rng.integers(5, 30)), length=int(rng.integers(1, 4)),
                                          candidates=int(rng.integers(1, 5)), seed=int(rng.integers(100))))
