"""The real-pair table of the lossy frontier (``specproof lossy-real``; reports/lossy_frontier_real.md, folded into
reports/lossy_frontier.md): each lossy rule setting's exact per-round TVD and its extra accepted tokens over the best
lossless rule, on SmolLM2-135M-Instruct's rows over MT-bench's first turns (:func:`run_lossy_real`,
:func:`summarise`, :func:`real_section`)."""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import platform
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

from simulator.jsonfile import write_json, write_text
from specproof.lossy_rounds import SETTINGS, SHAPES, Setting, Shape, question_rounds

TARGET = "smollm2"
DRAFT = "self:skip=12,14,16,18"  # the main draft of real-report and the cross-check
#: the rows' processing: temperature 1, top-k 3 (the cross-check's), so that every context reachable within four
#: tokens is scored (about 100 of them) in seconds
TOP_K = 3
#: where in each answer a round starts: after the prompt, and after the target's first 16 sampled tokens
POSITIONS = (0, 16)


def run_lossy_real(questions: Sequence[dict], target: str = TARGET, draft: str = DRAFT, top_k: int = TOP_K,
                   positions: Sequence[int] = POSITIONS, seed: int = 0, shapes: Sequence[Shape] = SHAPES,
                   settings: Sequence[Setting] = SETTINGS, cache_dir: str | None = None, threads: int = 1,
                   store: Path | None = None, tick: Callable[[str, int], None] | None = None
                   ) -> tuple[list[dict], dict]:
    """Every question's rounds (:func:`specproof.lossy_rounds.question_rounds`) and what the report says about the
    run.

    ``target`` and ``draft`` are loaded in float64 on the CPU; each question's first turn is one user message under
    the target's chat template; the target samples its answer at temperature 1 with ``top_k`` (seed ``seed + 1000 ×
    index``, as ``real-report`` seeds its questions), and both models' rows are cut to ``top_k`` too. With
    ``store``, each question's record is kept as it is done (:class:`specproof.reports.real_pair.Store`, keyed by
    everything that changes its numbers), and a rerun measures only the questions missing. ``threads`` torch
    threads run the forward passes: one by default, since on a shared 2-core machine two threads contending for a
    busy core run 3–4× slower.

    Returns ``(records, meta)``: a record per question (``question_id``, ``prompt_tokens``, ``seconds``, the
    1-minute ``load_average`` when it was done, ``rounds``), and ``meta`` with the setting, the shapes and settings
    measured, the seconds (``seconds`` of this command, ``question_seconds`` the questions' own, stored ones
    included), the load average before and after this command and the range of the questions' own
    (``question_loads``)."""
    import torch

    from simulator.real.causal_lm import Processing, load_pair, load_tokenizer
    from simulator.real.spec_bench import chat_ids
    from specproof.reports.real_pair import Store

    torch.set_num_threads(threads)
    load, began = os.getloadavg()[0], time.perf_counter()
    setting = {"target": target, "draft": draft, "top_k": top_k, "positions": list(positions), "seed": seed,
               "shapes": [{"tree": s.describe(), "rules": s.rules} for s in shapes],
               "settings": [s.label for s in settings]}
    digest = hashlib.sha256(json.dumps(setting, sort_keys=True).encode()).hexdigest()[:16]
    kept = None if store is None else Store(Path(store))
    models: dict = {}
    records = []
    for index, question in enumerate(questions):
        record = None if kept is None else kept.get(digest, question["question_id"])
        if record is None:
            if not models:
                start = time.perf_counter()
                models["draft"], models["target"] = load_pair(draft, target, torch.float64, "cpu", cache_dir)
                models["tokenizer"], _ = load_tokenizer(target, "target", cache_dir)
                models["seconds"] = time.perf_counter() - start
            start = time.perf_counter()
            tokenizer = models["tokenizer"]
            prompt = chat_ids(tokenizer, [{"role": "user", "content": str(question["turns"][0])}])
            rounds = question_rounds(models["draft"], models["target"], prompt, Processing(top_k=top_k), positions,
                                     seed + 1000 * index, [tokenizer.eos_token_id], shapes, settings)
            record = {"question_id": question["question_id"], "prompt_tokens": len(prompt),
                      "seconds": time.perf_counter() - start, "load_average": os.getloadavg()[0], "rounds": rounds}
            if kept is not None:
                kept.put(digest, question["question_id"], record)
        records.append(record)
        if tick is not None:
            tick("questions", len(questions))
    meta = {**setting, "questions": len(questions), "shapes": [{"name": s.name, "tree": s.describe()} for s in shapes],
            "load_seconds": models.get("seconds", 0.0), "seconds": time.perf_counter() - began,
            "question_seconds": sum(r["seconds"] for r in records), "load_average": [load, os.getloadavg()[0]],
            "question_loads": [min(loads), max(loads)] if (loads := [r["load_average"] for r in records
                                                                     if "load_average" in r]) else None,
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), CPU"}
    return records, meta


def _mean_se(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean of ``values`` and its standard error ``s/√n`` (``None`` with fewer than two)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def summarise(records: Sequence[dict], shapes: Sequence[Shape] = SHAPES,
              settings: Sequence[Setting] = SETTINGS) -> list[dict]:
    """A row per shape and setting measured on it (after a row per shape for its best lossless rule).

    Each round's numbers are averaged within its question first, then across questions, so a question counts once
    whatever its number of rounds; standard errors are those of the question means (``s/√n`` over ``n``
    questions). ``gain`` is paired: the setting's ``E[τ]`` minus the best lossless rule's on the same round's rows.
    A row: ``shape``, ``rule``, ``setting`` (the label), ``rounds``, ``questions``, ``tvd``/``tvd_se``,
    ``tvd_max``, ``expected_accepted``/``expected_accepted_se``, ``gain``/``gain_se``, ``refused`` (rounds
    refused); the best lossless rule's row has ``rule`` the rule best on most rounds, ``best_rounds`` how many
    rounds each rule was best on (rules tie on a round's rows, and the tie is broken as the frontier breaks it),
    ``setting`` ``None``, ``gain`` 0."""
    rows = []
    for shape in shapes:
        cells = [s.label for s in settings if shape.applies(s)]
        per_round = lambda record, label: [  # noqa: E731
            r["shapes"][shape.name] if label is None else r["shapes"][shape.name]["settings"][label]
            for r in record["rounds"]]
        best = Counter(r["shapes"][shape.name]["best"] for rec in records for r in rec["rounds"])
        rows.append(_row(shape, best.most_common(1)[0][0] if best else None, None, records,
                         lambda rec: [{"tvd": c["best_tvd"], "expected_accepted": c["best_expected_accepted"],
                                       "gain": 0.0} for c in per_round(rec, None)]))
        rows[-1]["best_rounds"] = dict(best.most_common())
        for setting in (s for s in settings if s.label in cells):
            rows.append(_row(shape, setting.rule, setting.label, records,
                             lambda rec, label=setting.label: per_round(rec, label)))
    return rows


def _row(shape: Shape, rule: str, label: str | None, records: Sequence[dict], cells: Callable) -> dict:
    """One table row from each question's cells (a cell per round)."""
    by_question = [[c for c in cells(rec) if "refused" not in c] for rec in records]
    refused = sum(len(cells(rec)) for rec in records) - sum(map(len, by_question))
    by_question = [q for q in by_question if q]
    row = {"shape": shape.name, "tree": shape.describe(), "rule": rule, "setting": label,
           "rounds": sum(map(len, by_question)), "questions": len(by_question), "refused": refused}
    for key in ("tvd", "expected_accepted", "gain"):
        means = [sum(c[key] for c in q) / len(q) for q in by_question if all(c[key] is not None for c in q)]
        row[key], row[f"{key}_se"] = _mean_se(means) if means else (None, None)
    row["tvd_max"] = max((c["tvd"] for q in by_question for c in q), default=None)
    return row


def _pm(mean: float | None, se: float | None, digits: int, signed: bool = False) -> str:
    if mean is None:
        return "—"
    text = f"{mean:+.{digits}f}" if signed else f"{mean:.{digits}f}"
    return text if se is None else f"{text} ± {se:.{digits}f}"


def real_section(rows: Sequence[dict], meta: dict, command: str, heading: str = "##") -> str:
    """The Markdown section of the real-pair table: how the numbers are made, then a table per shape (its best
    lossless rule first), under ``heading`` (the level of its title)."""
    rounds = max((r["rounds"] for r in rows), default=0)
    questions = max((r["questions"] for r in rows), default=0)
    positions = ", ".join(str(p) for p in meta["positions"])
    lines = [
        f"{heading} On the real pair: SmolLM2-135M-Instruct over MT-bench",
        "",
        f"Generated by `{command}` on {meta['date']} ({meta['machine']}"
        + (f"; 1-minute load average {meta['question_loads'][0]:.1f} to {meta['question_loads'][1]:.1f} as the "
           "questions were done" if meta.get("question_loads") else "") + "). The "
        f"questions took {meta['question_seconds']:.0f} s in all ({meta['question_seconds'] / max(1, rounds):.0f} s "
        "a round" + (f"), the models' load {meta['load_seconds']:.0f} s." if meta["load_seconds"] else
                     "; read from the store: this run loaded no model)."),
        "",
        f"Target `{meta['target']}` (SmolLM2-135M-Instruct), draft `{meta['draft']}` (the target's own layers minus "
        f"four), both in float64. The first turns of MT-bench's first {meta['questions']} questions, each as one "
        f"user message under the chat template. The target samples an answer at temperature 1 and top-k "
        f"{meta['top_k']}; a round starts after the prompt and the answer's first j tokens, j = {positions} "
        f"({rounds} rounds on {questions} questions: an answer that ends sooner gives fewer).",
        "",
        f"At each round, both models' rows are cut to their top {meta['top_k']} tokens (temperature 1), and every "
        "context reachable within four tokens is scored (`SupportPair`, as `certify --model causal-lm` does). "
        "Every rule setting's law of the round's first `H + 1` tokens is then exact in float64: the rule reads "
        "the rows a tree pass computes, as the serving loop does. **The TVD is to the target's law of the same "
        f"top-{meta['top_k']} rows** over `Σ^(H+1)`, from plain forward passes, not to the uncut model's law. "
        "`ΔE[τ]` is the setting's `E[τ]` minus the best lossless built-in rule's on the same round's rows (the "
        "rules that claim the shape's drafting, ranked as `specproof frontier` ranks them), a paired difference. "
        "Each round counts within its question; means and standard errors (± s/√n) are over the question means. "
        "The best lossless rule's own TVD, certified the same way, is the measurement's control (its largest is "
        "given with each table; `certify --model causal-lm` calls a real pair lossless up to 1e-6, since "
        "transformers' RMSNorm runs in float32 whatever the dtype).",
        "",
    ]
    for shape in meta["shapes"]:
        block = [r for r in rows if r["shape"] == shape["name"]]
        best = block[0]
        names = ", ".join(f"`{name}`" + (f" ({count} rounds)" if len(best["best_rounds"]) > 1 else "")
                          for name, count in best["best_rounds"].items())
        lines += [f"**{shape['tree']}.** Best lossless rule {names or 'none'}: E[τ] "
                  f"{_pm(best['expected_accepted'], best['expected_accepted_se'], 3)}, largest TVD "
                  f"{best['tvd_max']:.1g}.", "",
                  "| setting | TVD per round | largest TVD | E[τ] | ΔE[τ] over best lossless | rounds (questions) |",
                  "|---|---|---|---|---|---|"]
        for r in block[1:]:
            note = f"; {r['refused']} refused" if r["refused"] else ""
            lines.append(f"| `{r['setting']}` | {_pm(r['tvd'], r['tvd_se'], 3)} | "
                         f"{'—' if r['tvd_max'] is None else format(r['tvd_max'], '.3f')} | "
                         f"{_pm(r['expected_accepted'], r['expected_accepted_se'], 3)} | "
                         f"{_pm(r['gain'], r['gain_se'], 3, True)} | {r['rounds']} ({r['questions']}{note}) |")
        lines.append("")
    return "\n".join(lines)


def write_lossy_real(path: str | Path, records: Sequence[dict], meta: dict, command: str,
                     shapes: Sequence[Shape] = SHAPES, settings: Sequence[Setting] = SETTINGS) -> list[dict]:
    """``path`` (Markdown: :func:`real_section`) and the same name with ``.json``: the command, ``meta``'s keys,
    ``rows`` (the table's) and ``records`` (every question's rounds), so that ``real_section(data["rows"], data,
    data["command"])`` of the JSON ``data`` writes the section again; returns the rows."""
    path = Path(path)
    rows = summarise(records, shapes, settings)
    write_text(path, real_section(rows, meta, command), "out")
    write_json(path.with_suffix(".json"), {"command": command, **meta, "rows": rows, "records": list(records)},
               "out")
    return rows
