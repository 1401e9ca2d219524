"""Batteries: the instances a gate check or a pytest assertion certifies a subject on (:func:`battery`,
:func:`instances`), models × seeds × vocabularies × shapes × drafting schemes."""

from __future__ import annotations

import itertools
import math

from simulator.drafting.aded import AdedConfig
from simulator.drafting.drafter_registry import DRAFTERS, DYNAMIC, DrafterOptions, make_drafter
from simulator.drafting import Drafter, draft_models_for
from simulator.drafting.shapes import branching_fits
from simulator.errors import InvalidParameterError
from simulator.limits import DEFAULT_MAX_EXECUTIONS
from simulator.models import ModelPair, RandomRationalModel, SyntheticModel
from simulator.models.model_pairs import checked_number
from simulator.numeric import ARITHMETICS
from simulator.trees import TOPOLOGIES, make_topology

from exact.subject import Subject

DEFAULTS: dict[str, object] = {
    "models": ["random-rational"], "seeds": [0, 1, 2], "vocab": [2, 3], "topologies": ["chain", "complete"],
    "depth": 2, "branching": 2, "drafting": [], "arithmetic": "fraction", "budget": 4, "threshold": 0.2,
    "max_depth": 2, "zero_prob": 0.25, "rho": 0.5, "tau_p": 1.0, "tau_q": 1.0, "draft_models": 1,
}
MODEL_KINDS = ("random-rational", "synthetic")
#: the real-valued keys: the range each model or drafter accepts, as ``(low, high, low excluded)``
REALS: dict[str, tuple[float, float, bool]] = {
    "rho": (0.0, 1.0, False), "zero_prob": (0.0, 1.0, False), "threshold": (0.0, 1.0, True),
    "tau_p": (0.0, math.inf, True), "tau_q": (0.0, math.inf, True),
}


def battery(given: object = None, where: str = "battery", base: dict | None = None) -> dict:
    """``given`` over ``base`` (default :data:`DEFAULTS`), validated: a typed error names the key."""
    b = merged(DEFAULTS if base is None else base, {} if given is None else given, where)

    def names(key: str, allowed) -> None:
        if not isinstance(b[key], list) or any(v not in allowed for v in b[key]):
            raise InvalidParameterError(f"{where}.{key}", f"must be a list drawn from {sorted(allowed)}, got {b[key]!r}")

    names("models", MODEL_KINDS)
    names("topologies", TOPOLOGIES)
    names("drafting", set(DRAFTERS) - {"aded"})
    for key in ("seeds", "vocab"):
        if not isinstance(b[key], list) or not b[key] or any(isinstance(v, bool) or not isinstance(v, int) or v < 0
                                                             for v in b[key]):
            raise InvalidParameterError(f"{where}.{key}", f"must be a non-empty list of integers ≥ 0, got {b[key]!r}")
    if any(v < 1 for v in b["vocab"]):
        raise InvalidParameterError(f"{where}.vocab", f"a vocabulary has at least 1 token, got {b['vocab']!r}")
    for key in ("depth", "branching", "budget", "max_depth"):
        if isinstance(b[key], bool) or not isinstance(b[key], int) or b[key] < (0 if key == "depth" else 1):
            raise InvalidParameterError(f"{where}.{key}", f"must be an integer ≥ {0 if key == 'depth' else 1}, "
                                                          f"got {b[key]!r}")
    _check_size(b, where)
    for key, (low, high, low_open) in REALS.items():
        if key == "rho" and isinstance(b[key], list):
            continue
        checked_number(b[key], f"{where}.{key}", low, high, low_open)
    _check_draft_models(b, where)
    if b["arithmetic"] not in ARITHMETICS:
        raise InvalidParameterError(f"{where}.arithmetic", f"must be one of {ARITHMETICS}, got {b['arithmetic']!r}")
    return b


def _check_draft_models(b: dict, where: str) -> None:
    """Several draft models (docs/gate.md, "Several draft models"): ``rho`` a list of two or more numbers in
    ``[0, 1]``, one synthetic draft model each, or ``draft_models`` K ≥ 2 for the random rational model; both
    given, they agree; a synthetic battery of K ≥ 2 needs the list (its draft models differ by ``rho`` alone)."""
    rho, count = b["rho"], b["draft_models"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidParameterError(f"{where}.draft_models", f"must be an integer ≥ 1, got {count!r}")
    if not isinstance(rho, list):
        if count > 1 and "synthetic" in b["models"]:
            raise InvalidParameterError(f"{where}.rho", f"draft_models = {count} on the synthetic model needs one rho "
                                                        f"per draft model: a list of {count} numbers")
        return
    if len(rho) < 2:
        raise InvalidParameterError(f"{where}.rho", f"a list of rho holds one per draft model, two or more; got "
                                                    f"{rho!r} (one draft model: a number)")
    for i, value in enumerate(rho):
        checked_number(value, f"{where}.rho[{i}]", *REALS["rho"])
    if count not in (1, len(rho)):
        raise InvalidParameterError(f"{where}.draft_models", f"{count} draft models, but rho lists {len(rho)}: give "
                                                             "one rho per draft model")


def draft_models(b: dict) -> int:
    """The number of draft models of battery ``b``'s instances: ``rho``'s length when it is a list, else
    ``draft_models``."""
    return len(b["rho"]) if isinstance(b["rho"], list) else b["draft_models"]


def instance_draft_models(inst: dict, b: dict) -> int:
    """The draft models of one instance of battery ``b``: the battery's (:func:`draft_models`), or, where its ``rho``
    is one number, as many as ``k-models`` drafts on the instance's tree (one per child of its widest node): extra
    random rational draft rows, or extra synthetic draft models of the battery's similarity (docs/models.md)."""
    if isinstance(b["rho"], list) or "topology" not in inst:
        return draft_models(b)
    return max(draft_models(b), draft_models_for(inst["drafting"],
                                                 make_topology(inst["topology"], b["depth"], b["branching"])))


def _check_size(b: dict, where: str) -> None:
    """Refuse a vocabulary no instance of the battery could certify: a certificate enumerates every completed
    sequence, ``V^(H+1)`` of them, and ``H ≥ min(depth, 1)`` (a dynamic drafter drafts at least one token), so
    past :data:`DEFAULT_MAX_EXECUTIONS` the engine's limit stops every instance, after building its model."""
    height = min(b["depth"], 1)
    for vocab in b["vocab"]:
        if vocab ** (height + 1) > DEFAULT_MAX_EXECUTIONS:
            raise InvalidParameterError(f"{where}.vocab", f"V = {vocab:,}: each instance enumerates at least "
                                                          f"V^{height + 1} = {vocab ** (height + 1):,} completed "
                                                          f"sequences, over the limit of {DEFAULT_MAX_EXECUTIONS:,} "
                                                          "executions a certificate may take: use a smaller vocab")


def merged(base: dict, given: object, where: str) -> dict:
    """``given`` (a table of a config) over ``base``; a key ``base`` lacks is an error naming it."""
    if not isinstance(given, dict):
        raise InvalidParameterError(where, "must be a table")
    unknown = set(given) - set(base)
    if unknown:
        raise InvalidParameterError(f"{where}.{sorted(unknown)[0]}", f"unknown key (known: {', '.join(base)})")
    return {**base, **given}


def instances(b: dict, what: Subject) -> list[dict]:
    """Every instance of battery ``b`` for ``what`` (module docstring), as JSON-able dicts.

    A battery is a dict (a gate config's ``[battery]`` table; keyword arguments of :mod:`specproof.gate.testing`):
    models (``random-rational``, ``synthetic``) × seeds × vocabularies × shapes × drafting schemes. Shapes are the
    battery's topologies at its ``depth`` and ``branching`` that the subject is defined on and the scheme drafts
    (``hub``: two children per node); DySpec's dynamic drafting ignores them (``budget``, ``threshold``,
    ``max_depth`` apply). Drafting: the battery's list, else the schemes the
    subject claims (ADED excepted: its drafts depend on history).
    """
    schemes = b["drafting"] or [s for s in what.schemes if s in DRAFTERS and s != "aded"] or ["iid"]
    out = []
    for kind, seed, vocab, scheme in itertools.product(b["models"], b["seeds"], b["vocab"], schemes):
        if scheme in DYNAMIC:
            out.append({"model": kind, "seed": seed, "vocab": vocab, "drafting": scheme})
            continue
        for topology in b["topologies"]:
            parents = make_topology(topology, b["depth"], b["branching"]).parents
            if what.allows(parents) and branching_fits(scheme, parents):
                out.append({"model": kind, "seed": seed, "vocab": vocab, "topology": topology, "drafting": scheme})
    return out


def instance_key(inst: dict) -> str:
    """How an instance is named in reports and baselines: ``random-rational seed=0 V=2 chain iid``."""
    shape = inst.get("topology", "dynamic")
    return f"{inst['model']} seed={inst['seed']} V={inst['vocab']} {shape} {inst['drafting']}"


def baseline_key(inst: dict, b: dict) -> str:
    """How an instance is keyed in the baselines file: :func:`instance_key` and every parameter of battery ``b``
    the instance's exact ``E[τ]`` depends on — a fixed shape's ``depth`` and ``branching`` or a dynamic drafter's
    ``budget``, ``threshold`` and ``max_depth``; the model's ``rho``, ``tau_p`` and ``tau_q`` (synthetic) or
    ``zero_prob`` (random-rational, and ``draft_models`` where it is 2 or more); the arithmetic. A baseline made on
    another instance is then absent (no baseline), not a moved ``E[τ]``: ``random-rational seed=0 V=2 chain iid
    depth=2 branching=2 zero_prob=0.25 fraction``."""
    drafting = ("depth", "branching") if "topology" in inst else ("budget", "threshold", "max_depth")
    model = ("rho", "tau_p", "tau_q") if inst["model"] == "synthetic" else ("zero_prob",)
    count = instance_draft_models(inst, b)
    several = [f"draft_models={count}"] if inst["model"] != "synthetic" and count > 1 else []
    return " ".join([instance_key(inst), *(f"{k}={b[k]!r}" for k in drafting + model), *several, b["arithmetic"]])


def build(inst: dict, b: dict) -> tuple[ModelPair, Drafter]:
    """The model and drafter of one instance of battery ``b``."""
    count = instance_draft_models(inst, b)
    if inst["model"] == "synthetic":
        rho = b["rho"] if isinstance(b["rho"], list) or count == 1 else [b["rho"]] * count
        model: ModelPair = SyntheticModel(inst["vocab"], rho, b["tau_p"], b["tau_q"], inst["seed"])
    else:
        model = RandomRationalModel(inst["vocab"], inst["seed"], zero_prob=b["zero_prob"], draft_models=count)
    topology = make_topology(inst["topology"], b["depth"], b["branching"]) if "topology" in inst else None
    options = DrafterOptions(b["budget"], b["threshold"], b["max_depth"], AdedConfig())
    return model, make_drafter(inst["drafting"], topology, model, options)
