"""``specproof train-draft``: a cheap draft for a real target, distilled from the target's own answers
(docs/cli/train-draft.md)."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

import click

from simulator.errors import InvalidParameterError
from simulator.usercode import require
from specproof.cli.group import main
from specproof.cli.options import SEED, Real, StageBars, Whole, command_line


def _recipe_names() -> list[str]:
    from simulator.real.trained_draft import RECIPES

    return list(RECIPES)


@main.command("train-draft")
@click.option("--name", type=click.Choice(_recipe_names()), default="smollm2-draft", show_default=True,
              help="the draft to make; --draft NAME finds it afterwards")
@click.option("--target", help="the target to distil (default: the name's target, smollm2)")
@click.option("--layers", help="the target's decoder layers the draft starts from, e.g. 0,1,2 (default: the name's)")
@click.option("--head-tokens", type=Whole(1), help="tokens the draft's pruned head keeps (default: the name's)")
@click.option("--prompts", type=click.Path(dir_okay=False),
              help="instructions, one a line (default: simulator/data/train_instructions.txt, none of MT-bench's)")
@click.option("--samples", type=Whole(1), default=3, show_default=True, help="answers per instruction")
@click.option("--new-tokens", type=Whole(1), default=128, show_default=True, help="longest answer")
@click.option("--generation-batch", type=Whole(1), default=128, show_default=True)
@click.option("--epochs", type=Whole(1), default=5, show_default=True)
@click.option("--steps", type=Whole(1), help="stop after N training steps")
@click.option("--learning-rate", type=Real(0, 1, min_open=True, max_open=True), default=2e-3, show_default=True,
              help="AdamW's peak learning rate")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--check-questions", type=Whole(0), default=20, show_default=True,
              help="measure Σ min(p, q) on MT-bench's first N first turns (0: no check)")
@click.option("--questions", type=click.Path(dir_okay=False),
              help="Spec-Bench question.jsonl for the check (default: specproof fetch mt-bench)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="where the draft is written (default: <cache>/drafts/NAME, where --draft NAME looks)")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="where fetched and converted models live")
@click.pass_context
def train_draft(ctx, name, target, layers, head_tokens, prompts, samples, new_tokens, generation_batch, epochs, steps,
                learning_rate, seed, check_questions, questions, out_dir, cache_dir) -> None:
    """Distil a draft for a real target from its own answers to instructions that are not MT-bench's: generate,
    choose the pruned head, train, save; then measure its per-token acceptance Σ min(p, q) at temperature 1 on
    MT-bench. Exit 1 when the name records an acceptance and the measured one falls short of it by more than the
    recorded tolerance (training on another CPU need not reproduce the weights bit for bit)."""
    require("transformers", "specproof train-draft", "real")
    import torch

    from simulator.real.causal_lm import load_causal_lm, load_tokenizer
    from simulator.real.draft_training import TrainingPlan, make_draft
    from simulator.real.fetch import cache_dir as resolve_cache
    from simulator.real.spec_bench import shipped_instructions
    from simulator.real.trained_draft import RECIPES, draft_folder
    from specproof.reports.draft_record import check_acceptance, save_draft

    recipe = RECIPES[name]
    chosen_layers = recipe.layers if layers is None else _layer_list(layers)
    texts = shipped_instructions("train_instructions.txt") if prompts is None else _read_lines(prompts)
    plan = TrainingPlan(tuple(texts), chosen_layers, head_tokens or recipe.head_tokens, samples=samples,
                        new_tokens=new_tokens, generation_batch=generation_batch, epochs=epochs,
                        learning_rate=learning_rate, steps=steps, seed=seed)
    folder = Path(out_dir) if out_dir else draft_folder(name, resolve_cache(cache_dir))
    target_name = target or recipe.target
    model = load_causal_lm(target_name, torch.float32, "target", cache_dir=cache_dir)
    tokenizer, _ = load_tokenizer(target_name, cache_dir=cache_dir)
    ticks = StageBars()
    before, start = os.getloadavg()[0], time.perf_counter()
    try:
        trained = make_draft(model, tokenizer, plan, ticks)
    finally:
        ticks.close()
    record = {"name": name, "target": target_name, "command": command_line(ctx),
              "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, {os.cpu_count()} cores",
              "torch": torch.__version__, "python": platform.python_version(), "load_before": before}
    save_draft(folder, trained, tokenizer, plan, record)
    click.echo(f"draft written to {folder} ({trained.answer_tokens} answer tokens, head coverage "
               f"{trained.coverage:.4f}, generate {trained.seconds['generate']:.0f} s, "
               f"train {trained.seconds['train']:.0f} s, last loss {trained.losses[-1]:.3f})")
    if check_questions:
        ok, measured = check_acceptance(folder, target_name, questions, check_questions, recipe if layers is None
                                        and prompts is None else None, seed, time.perf_counter() - start)
        click.echo(f"acceptance Σ min(p, q) on MT-bench's first {check_questions} first turns: {measured:.4f}"
                   + ("" if ok else f" — below the recorded {recipe.acceptance} − {recipe.tolerance}"))
        sys.exit(0 if ok else 1)


def _layer_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InvalidParameterError("layers", f"expected layer numbers like 0,1,2, got {text!r}") from None


def _read_lines(path: str) -> list[str]:
    from simulator.jsonfile import read_text

    lines = [line for line in read_text(path, "prompts").splitlines() if line.strip()]
    if not lines:
        raise InvalidParameterError("prompts", f"{path} holds no instruction (one a line)")
    return lines
