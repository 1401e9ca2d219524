"""Writing a trained draft's folder and its record (``specproof train-draft``): the weights, the kept head tokens,
and ``training.json`` — the plan, the loss of every step, the stages' seconds, the weights' SHA-256 and the measured
acceptance on MT-bench — from which ``benchmarks/trained_draft.py`` writes ``reports/trained_draft.md``. What the
folder holds and where ``--draft NAME`` finds it: :mod:`simulator.real.trained_draft`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from simulator.errors import OutputError
from simulator.jsonfile import write_json


def save_draft(folder: Path, trained, tokenizer, plan, record: dict) -> None:
    """Write ``trained`` (:class:`~simulator.real.draft_training.TrainedDraft`) to ``folder``: a
    ``save_pretrained`` model with ``tokenizer``, ``head_tokens.json`` and ``training.json`` (``record`` and the
    plan, losses, seconds, data size and the weights' SHA-256). Written beside and renamed into place, so an
    interrupted save leaves the previous draft, or none."""
    from simulator.real.causal_lm import quiet_transformers
    from simulator.real.trained_draft import HEAD_TOKENS, TRAINING_RECORD

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    except OSError as err:
        raise OutputError("out", f"cannot write under {folder.parent}: {err.strerror or err}") from None
    try:
        with quiet_transformers():  # no "Writing model shards" bar between ours
            trained.model.save_pretrained(scratch)
            tokenizer.save_pretrained(scratch)
        (scratch / HEAD_TOKENS).write_text(json.dumps(trained.kept.tolist()) + "\n")
        plan_fields = {k: v for k, v in dataclasses.asdict(plan).items() if k != "prompts"}
        write_json(scratch / TRAINING_RECORD, {
            **record, "plan": {**plan_fields, "prompts": len(plan.prompts),
                               "prompts_sha256": hashlib.sha256("\n".join(plan.prompts).encode()).hexdigest()},
            "answer_tokens": trained.answer_tokens, "head_coverage": trained.coverage,
            "seconds": trained.seconds, "losses": trained.losses,
            "weights_sha256": {p.name: _sha256(p) for p in sorted(scratch.glob("*.safetensors"))}})
        if folder.exists():
            shutil.rmtree(folder)
        scratch.rename(folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_acceptance(folder: Path, target: str, questions: str | None, count: int, recipe, seed: int,
                     seconds: float) -> tuple[bool, float]:
    """The draft in ``folder`` against ``target`` on the first ``count`` MT-bench questions' first turns: the
    mean ``Σ min(p, q)`` at temperature 1 over 64 target tokens each
    (:func:`~simulator.real.overlaps.measure_overlaps`), recorded in ``training.json`` with the per-question
    means and the whole command's ``seconds``. ``ok`` unless ``recipe`` records an acceptance and the measured
    one is more than its tolerance below it."""
    from simulator.real.fetch import fetch
    from simulator.real.overlaps import measure_overlaps
    from simulator.real.spec_bench import read_questions
    from simulator.real.trained_draft import TRAINING_RECORD

    chosen = read_questions(questions or str(fetch("mt-bench")))[:count]
    start = time.perf_counter()
    sample = measure_overlaps(target, [str(folder)], chosen, new_tokens=64, seed=seed)[str(folder)]
    overlap = sample.overlap
    per_question = [float(np.mean(overlap[sample.question == i])) for i in np.unique(sample.question)]
    measured = float(np.mean(overlap))
    path = folder / TRAINING_RECORD
    record = json.loads(path.read_text())
    record["acceptance"] = {"mean": measured, "questions": [q["question_id"] for q in chosen],
                            "per_question": per_question, "tokens": int(len(overlap)),
                            "se_across_questions": float(np.std(per_question, ddof=1) / np.sqrt(len(per_question)))
                            if len(per_question) > 1 else None}
    record["seconds"]["check"] = time.perf_counter() - start
    record["seconds"]["command"] = seconds + record["seconds"]["check"]
    write_json(path, record)
    ok = recipe is None or recipe.acceptance is None or measured >= recipe.acceptance - recipe.tolerance
    return ok, measured


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
