"""Instance search (:func:`hunt`; docs/gate.md, "Hunting"): model pairs, vocabularies, shapes and drafting schemes,
then local moves on the rows, until a pair shows a loss or the time is up."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Callable

import numpy as np

from simulator.drafting import draft_models_for
from simulator.drafting.drafter_registry import DrafterOptions, make_drafter
from simulator.drafting.shapes import FIXED_BRANCHING, branching_fits
from simulator.errors import InvalidDistributionError, InvalidParameterError, TimeLimitError
from simulator.limits import until
from simulator.models import ModelPair, RandomRationalModel, SyntheticModel
from simulator.trees import Topology, make_topology

from specproof.gate.battery import MODEL_KINDS
from exact.certificate import Certificate
from exact.instances import random_options, random_shape
from exact.reproducer import Reproducer, capture
from specproof.gate.shrink import Shrunk, shrink
from exact.subject import Subject

LOCAL_MOVES = 3
#: a fresh pair's enumeration is kept small: vocab ** draft nodes stays below this
MAX_OUTCOMES = 3000
#: ``k-models`` draws child i of a node from draft model i: its pairs get the draft models the tree needs
#: (:func:`simulator.drafting.draft_models_for`)
SEARCHED_SCHEMES = ("iid", "without-replacement", "almost-greedy", "top-k", "hub", "dyspec", "dyspec-threshold",
                    "k-models")


@dataclass(frozen=True)
class Fixed:
    """The options held fixed (``None``: searched)."""

    model: str | None = None
    table: ModelPair | None = None  # --model table: these rows, every pair
    seed: int | None = None
    vocab: int | None = None
    topology: Topology | None = None
    drafting: str | None = None
    options: DrafterOptions | None = None  # DySpec's settings, when given
    rho: float | tuple[float, ...] | None = None  # a tuple: one synthetic draft model per value
    tau_p: float | None = None
    tau_q: float | None = None
    draft_models: int | None = None  # the draft models: --rho's list's length, or --draft-models


@dataclass
class HuntResult:
    """What the hunt certified, and the shrunk counterexample if it found one."""

    pairs: int
    local_moves: int
    seconds: float
    covered: dict[str, Counter] = field(default_factory=dict)
    found: Reproducer | None = None  # the first lossy case, as found (--maximize tvd: the largest TVD's)
    found_certificate: Certificate | None = None
    shrunk: Shrunk | None = None
    maximize: str | None = None  # "tvd": the hunt kept the pair of largest exact TVD

    def coverage(self) -> str:
        parts = [f"{self.pairs} model pair(s) certified ({self.local_moves} of them by local moves on rows) in "
                 f"{self.seconds:.1f} s"]
        for key, counts in self.covered.items():
            parts.append(f"{key}: " + ", ".join(f"{k} ×{n}" for k, n in sorted(counts.items(), key=str)))
        return "; ".join(parts)

    def to_json(self) -> dict:
        out: dict = {"pairs": self.pairs, "local_moves": self.local_moves, "seconds": round(self.seconds, 3),
                     "covered": {k: {str(a): n for a, n in v.items()} for k, v in self.covered.items()},
                     "lossy": self.found is not None and bool(self.found_certificate.tvd),
                     "scope": "the pairs certified, not every pair"}
        if self.maximize is not None:
            out["maximize"] = self.maximize
        if self.found is not None:
            out["found"] = self.found.to_json(self.found_certificate)
        if self.shrunk is not None:
            out["shrunk"] = self.shrunk.case.to_json(self.shrunk.certificate)
            out["shrink_complete"] = self.shrunk.complete
        return out


def hunt(what: Subject, time_limit: float, fixed: Fixed = Fixed(), seed: int = 0, arithmetic: str = "fraction",
         shrink_time: float = 10.0, on_pair: Callable[[int], None] = lambda n: None,
         maximize: str | None = None) -> HuntResult:
    """Certify pairs until one is lossy or ``time_limit`` seconds pass, then shrink it; with ``maximize="tvd"``,
    search the whole time for the pair of largest exact TVD (a lossy-by-design rule's worst case at its knobs),
    climbing by local moves from every fresh pair, and keep that pair unshrunk.

    Each option the caller fixes (``fixed``) is held; the others are drawn from a generator seeded by ``seed``, so
    the same seed and options give the same sequence of pairs on any machine. After each fresh pair that certifies
    lossless, :data:`LOCAL_MOVES` moves replace one row the certification read by a new random row and keep the
    change when the exact TVD does not decrease (a float kernel's rounding-level TVD climbs; an exact rule's zero
    TVD walks).

    Some bug classes show on one random pair in eight, or fewer, so one certificate rarely settles a question. The
    search is deterministic for a given seed; the first lossy pair is shrunk (:mod:`specproof.gate.shrink`).
    """
    if not time_limit > 0:
        raise InvalidParameterError("time_limit", f"must be positive, got {time_limit}")
    if maximize not in (None, "tvd"):
        raise InvalidParameterError("maximize", f"must be tvd, got {maximize!r}")
    rng = np.random.default_rng(seed)
    start = time.monotonic()
    result = HuntResult(0, 0, 0.0, {k: Counter() for k in ("model", "vocab", "shape", "drafting")},
                        maximize=maximize)
    schemes = [s for s in what.schemes if s in SEARCHED_SCHEMES] or ["iid"]
    deadline = start + time_limit
    while time.monotonic() < deadline:
        try:
            with until(deadline):
                case, labels = _fresh_case(rng, what, fixed, schemes, arithmetic)
                cert = case.certify(what)
        except TimeLimitError:
            break
        for key, label in labels.items():
            result.covered[key][label] += 1
        result.pairs += 1
        on_pair(result.pairs)
        for _ in range(LOCAL_MOVES):
            if (not cert.lossless and maximize is None) or time.monotonic() >= deadline:
                break
            moved = _moved(case, rng)
            try:
                with until(deadline):
                    moved_cert = moved.certify(what)
            except InvalidDistributionError:  # the new row reaches a context the table does not hold
                continue
            except TimeLimitError:
                break
            result.pairs += 1
            result.local_moves += 1
            on_pair(result.pairs)
            if moved_cert.tvd >= cert.tvd:
                case, cert = moved, moved_cert
        if maximize is not None:
            if result.found is None or cert.tvd > result.found_certificate.tvd:
                result.found, result.found_certificate = case, cert
            continue
        if not cert.lossless:
            result.found, result.found_certificate = case, cert
            result.shrunk = shrink(case, shrink_time, what)
            break
    result.seconds = time.monotonic() - start
    return result


def _fresh_case(rng: np.random.Generator, what: Subject, fixed: Fixed, schemes: list[str],
                arithmetic: str) -> tuple[Reproducer, dict[str, object]]:
    vocab = fixed.table.vocab if fixed.table is not None else fixed.vocab or int(rng.integers(2, 5))
    kind = fixed.model or MODEL_KINDS[int(rng.random() < 0.25)]
    seed = fixed.seed if fixed.seed is not None else int(rng.integers(2**31))
    synthetic = None
    if fixed.table is None and kind == "synthetic":  # its parameters drawn in this order; the model built below
        synthetic = (fixed.rho if fixed.rho is not None else float(rng.uniform(0, 1)),
                     fixed.tau_p or float(rng.uniform(0.3, 2)), fixed.tau_q or float(rng.uniform(0.3, 2)))
    scheme = fixed.drafting or schemes[int(rng.integers(len(schemes)))]
    nodes = 1
    while vocab ** (nodes + 1) <= MAX_OUTCOMES and nodes < 7:
        nodes += 1
    topology = fixed.topology
    if topology is None:
        topology = random_shape(rng, what.shapes[int(rng.integers(len(what.shapes)))], nodes,
                                FIXED_BRANCHING.get(scheme))
        for _ in range(100):  # a tree the scheme can draft: its branching (hub: two children a node), and no node
            # wider than the draft models held fixed (k-models)
            if branching_fits(scheme, topology.parents) and (
                    not fixed.draft_models or draft_models_for(scheme, topology) <= fixed.draft_models):
                break
            topology = random_shape(rng, what.shapes[int(rng.integers(len(what.shapes)))], nodes,
                                    FIXED_BRANCHING.get(scheme))
    if fixed.draft_models and draft_models_for(scheme, topology) > fixed.draft_models:
        raise InvalidParameterError("drafting", f"{scheme} needs {draft_models_for(scheme, topology)} draft models on "
                                                f"this tree, and {fixed.draft_models} are held fixed: give more, or "
                                                "a narrower tree")
    options = fixed.options or random_options(rng, nodes)
    model: ModelPair
    if fixed.table is not None:
        model = fixed.table
    elif synthetic is not None:
        rho, tau_p, tau_q = synthetic
        model = SyntheticModel(vocab, _several_rho(rng, rho, draft_models_for(scheme, topology)), tau_p, tau_q, seed)
    else:
        model = RandomRationalModel(vocab, seed, zero_prob=0.3,
                                    draft_models=fixed.draft_models or draft_models_for(scheme, topology))
    drafter = make_drafter(scheme, topology, model, options)
    case = capture(model, drafter, what, arithmetic)
    shape = topology.name if scheme not in ("dyspec", "dyspec-threshold") else "dynamic"
    drafts = getattr(model, "draft_models", 1)
    label = kind if fixed.table is not None or drafts == 1 else f"{kind} ({drafts} draft models)"
    return case, {"model": label, "vocab": vocab, "shape": shape, "drafting": scheme}


def _several_rho(rng: np.random.Generator, rho: float | tuple[float, ...], needed: int) -> float | tuple[float, ...]:
    """The synthetic pair's ``rho``: as given or drawn; where the drafting needs ``needed ≥ 2`` draft models and one
    ``rho`` is given or drawn, that one followed by a drawn one for each further draft model."""
    if isinstance(rho, tuple) or needed == 1:
        return rho
    return (rho, *(float(v) for v in rng.uniform(0, 1, needed - 1)))


def _moved(case: Reproducer, rng: np.random.Generator) -> Reproducer:
    """``case`` with one row it reads replaced by a new random row of small integer weights (zeros frequent); with
    several draft models, a draft row is one draft model's, drawn."""
    name = "p" if rng.random() < 0.5 and case.p else "q"
    model = int(rng.integers(1 + len(case.drafts))) if name == "p" and case.drafts else 0
    table = getattr(case, name) if model == 0 else case.drafts[model - 1]
    contexts = sorted(table, key=lambda c: (len(c), c))
    ctx = contexts[int(rng.integers(len(contexts)))]
    weights = rng.integers(0, 5, size=case.vocab)
    weights[rng.random(case.vocab) < 0.3] = 0
    if weights.sum() == 0:
        weights[int(rng.integers(case.vocab))] = 1
    row = tuple(Fraction(int(w), int(weights.sum())) for w in weights)
    if model:
        return replace(case, drafts=(*case.drafts[:model - 1], {**table, ctx: row}, *case.drafts[model:]))
    return replace(case, **{name: {**table, ctx: row}})
