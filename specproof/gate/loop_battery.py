"""A gate check that names a whole generation loop (docs/gate.md, "Loop checks"): its battery of tiny model pairs
(:func:`loop_battery`, :func:`loop_instances`) and each instance's certificate against plain sampling with the
check's sampling parameters (:func:`certify_loop_instance`, :func:`exact.generation_law.certify_loop`)."""

from __future__ import annotations

from pathlib import Path

from exact.generation_law import LoopCertificate, certify_loop
from exact.subject import Subject
from simulator.errors import InvalidParameterError, SpecproofError
from simulator.limits import DEFAULT_MAX_EXECUTIONS
from simulator.loops.builtin import load_loop, reference_of
from simulator.loops.convention import loop_name
from simulator.loops.models import LOOP_MODELS, TINY_VOCABS, LoopModel, check_vocab, prefix_table_pair
from simulator.models import TableModel

from specproof.gate.battery import merged


#: a loop check's battery: tiny pairs (a seeded pair such as ``tiny-llama`` × seeds × vocabularies, ``prefix-table`` ×
#: tables), the draft
#: depth of the shipped loops, the new tokens (``None``: depth + 1) and the prompt
LOOP_DEFAULTS: dict[str, object] = {"models": ["tiny-llama"], "seeds": [0], "vocab": [4], "tables": [], "depth": 2,
                                    "max_new_tokens": None, "prompt_ids": [0]}


def loop_battery(given: object = None, where: str = "loop_battery", base: dict | None = None,
                 folder: str | Path = ".") -> dict:
    """``given`` over ``base`` (default :data:`LOOP_DEFAULTS`), validated: a typed error names the key. Tables are
    read now (a bad file is this battery's error) and kept as absolute paths, resolved against ``folder``."""
    b = merged(LOOP_DEFAULTS if base is None else base, {} if given is None else given, where)
    if not isinstance(b["models"], list) or not b["models"] or any(m not in LOOP_MODELS for m in b["models"]):
        raise InvalidParameterError(f"{where}.models", f"must be a non-empty list drawn from {sorted(LOOP_MODELS)}, "
                                                       f"got {b['models']!r}")
    for key in ("seeds", "vocab", "prompt_ids"):
        if not isinstance(b[key], list) or not b[key] or any(isinstance(v, bool) or not isinstance(v, int) or v < 0
                                                             for v in b[key]):
            raise InvalidParameterError(f"{where}.{key}", f"must be a non-empty list of integers ≥ 0, got {b[key]!r}")
    if isinstance(b["depth"], bool) or not isinstance(b["depth"], int) or b["depth"] < 1:
        raise InvalidParameterError(f"{where}.depth", f"must be an integer ≥ 1 (a loop drafts), got {b['depth']!r}")
    length = b["max_new_tokens"]
    if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length < b["depth"] + 1):
        raise InvalidParameterError(f"{where}.max_new_tokens", f"must be an integer ≥ depth + 1 = {b['depth'] + 1}, "
                                                               "so that a round boundary falls inside the "
                                                               f"continuation, got {length!r}")
    vocabs = _loop_vocabs(b, where, Path(folder))
    for vocab in vocabs:
        outside = [t for t in b["prompt_ids"] if t >= vocab]
        if outside:
            raise InvalidParameterError(f"{where}.prompt_ids", f"token {outside[0]} is outside a vocabulary of the "
                                                               f"battery, 0..{vocab - 1}")
        if vocab ** loop_length(b) > DEFAULT_MAX_EXECUTIONS:
            raise InvalidParameterError(f"{where}.max_new_tokens", f"V = {vocab}: V^{loop_length(b)} continuations, "
                                                                   f"over the limit of {DEFAULT_MAX_EXECUTIONS:,} "
                                                                   "runs a certificate may take")
    return b


def _loop_vocabs(b: dict, where: str, folder: Path) -> list[int]:
    """The vocabularies of the battery's pairs, checked: the seeded pairs' in :data:`TINY_VOCABS` (``vocab`` and
    ``seeds`` are theirs), every table read (``b["tables"]`` becomes their absolute paths; prefix-table's, and at
    least one when it is a model)."""
    vocabs = []
    seeded = [m for m in b["models"] if m != "prefix-table"]
    if seeded:
        bad = [v for v in b["vocab"] if v not in TINY_VOCABS]
        if bad:
            try:
                check_vocab(bad[0], seeded[0])
            except InvalidParameterError as err:
                raise InvalidParameterError(f"{where}.vocab", err.message) from None
        vocabs += b["vocab"]
    tables = b["tables"]
    if not isinstance(tables, list) or any(not isinstance(t, str) or not t for t in tables):
        raise InvalidParameterError(f"{where}.tables", f"must be a list of paths (strings), got {tables!r}")
    if "prefix-table" in b["models"] and not tables:
        raise InvalidParameterError(f"{where}.tables", "prefix-table reads its rows from table files: list them")
    paths = [str((folder / t).resolve()) for t in tables]
    names = [Path(p).name for p in paths]
    twice = [name for name in names if names.count(name) > 1]
    if twice:
        raise InvalidParameterError(f"{where}.tables", f"two tables named {twice[0]!r}: an instance is named by its "
                                                       "table's file name, rename one")
    for i, path in enumerate(paths):
        try:
            vocab = TableModel.from_file(path).vocab
        except SpecproofError as err:
            raise InvalidParameterError(f"{where}.tables[{i}]", f"{err.field}: {err.message}") from None
        if "prefix-table" in b["models"]:
            vocabs.append(vocab)
    b["tables"] = paths
    return vocabs


def loop_length(b: dict) -> int:
    """The new tokens each run of a loop battery ``b`` generates: ``max_new_tokens``, by default ``depth + 1``."""
    return b["depth"] + 1 if b["max_new_tokens"] is None else b["max_new_tokens"]


def loop_instances(b: dict) -> list[dict]:
    """Every instance of loop battery ``b``: each seeded pair (``tiny-llama``) × seeds × vocabularies, then
    ``prefix-table`` × tables, as JSON-able dicts."""
    out: list[dict] = []
    for kind in b["models"]:
        if kind != "prefix-table":
            out += [{"model": kind, "seed": seed, "vocab": vocab} for seed in b["seeds"] for vocab in b["vocab"]]
        else:
            out += [{"model": kind, "table": path} for path in b["tables"]]
    return out


def loop_instance_key(inst: dict) -> str:
    """How a loop instance is named: ``tiny-llama seed=0 V=4``, ``prefix-table table.json`` (the file's name)."""
    if inst["model"] == "prefix-table":
        return f"prefix-table {Path(inst['table']).name}"
    return f"{inst['model']} seed={inst['seed']} V={inst['vocab']}"


def loop_baseline_key(inst: dict, b: dict, sampling: dict) -> str:
    """How a loop instance is keyed in the baselines file: its name and everything else its law depends on, the
    depth, the new tokens, the prompt and the sampling parameters that are on: ``tiny-llama seed=0 V=4 depth=2
    max_new_tokens=3 prompt_ids=[0] top_k=2``."""
    on = " ".join(f"{k}={v!r}" for k, v in sorted(sampling.items())) or "plain"
    return (f"{loop_instance_key(inst)} depth={b['depth']} max_new_tokens={loop_length(b)} "
            f"prompt_ids={list(b['prompt_ids'])} {on}")


def build_loop_pair(inst: dict, b: dict) -> tuple[LoopModel, LoopModel]:
    """``(target, draft)`` of one loop instance (:mod:`simulator.loops.models`, :mod:`simulator.loops.tiny_pairs`)."""
    if inst["model"] == "prefix-table":
        return prefix_table_pair(TableModel.from_file(inst["table"]), len(b["prompt_ids"]))
    from simulator.loops.tiny_pairs import SEEDED_PAIRS  # transformers only for a seeded pair

    return SEEDED_PAIRS[inst["model"]](inst["vocab"], inst["seed"])


def loop_subject(description: dict, depth: int) -> Subject:
    """The loop a check names (``{"loop": NAME or "module:function", "sampling": {...}}``), built for draft depth
    ``depth``, as a :class:`Subject` so the gate keeps one kind of outcome: no shapes, no drafting schemes (a loop
    drafts for itself). A callable (from :mod:`specproof.gate.testing`) is the loop itself."""
    fn = description["loop"] if callable(description["loop"]) else load_loop(description["loop"], depth)
    return Subject(loop_name(fn), fn, description, shapes=(), schemes=())


def certify_loop_instance(description: dict, b: dict, inst: dict) -> LoopCertificate:
    """Certify the loop of ``description`` on one instance of loop battery ``b``: the exact law of its
    :func:`loop_length` new tokens after the battery's prompt, against plain sampling with the same parameters (in
    the loop's engine's order: :func:`simulator.loops.builtin.reference_of`).

    Raises
    ------
    SpecproofError
        As :func:`exact.generation_law.certify_loop` (the loop raised, answered wrongly, passed a limit).
    """
    loop = loop_subject(description, b["depth"]).fn
    target, draft = build_loop_pair(inst, b)
    return certify_loop(loop, reference_of(loop), target, draft, tuple(b["prompt_ids"]), loop_length(b),
                        description["sampling"])


def loop_result(cert: LoopCertificate) -> dict:
    """A loop certificate as a gate result (JSON): the verdict, the TVD and off-support mass, the continuation
    that differs most, and ``expected_tokens_per_pass``, the figure kept in the baselines (``None`` when a run
    never calls the target). As floats: their exact values are rationals of the loop's float arithmetic, hundreds
    of digits long."""
    ce = cert.counterexample
    per_pass = cert.expected_tokens_per_pass
    return {"lossless": cert.lossless, "tvd": float(cert.tvd), "off_support": float(cert.off_support),
            "expected_tokens_per_pass": None if per_pass is None else float(per_pass),
            "counterexample": None if ce is None else {"sequence": list(ce.sequence),
                                                      "loop_prob": float(ce.verifier_prob),
                                                      "reference_prob": float(ce.target_prob)},
            "executions": cert.executions}
