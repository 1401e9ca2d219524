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
from specproof.cli.output import command_line
from specproof.cli.params import SEED, Output, Real, Whole
from specproof.cli.progress import StageBars
from specproof.cli.sections import section


def _recipe_names() -> list[str]:
    from simulator.real.trained_draft import RECIPES

    return list(RECIPES)


@main.command("train-draft")
@section("Draft",
         click.option("--name", type=click.Choice(_recipe_names()), default="smollm2-draft", show_default=True,
                      help="the draft to make; --draft NAME finds it afterwards"),
         click.option("--target", help="the target to distil (default: the name's target, smollm2)"),
         click.option("--layers", help="the target's decoder layers the draft starts from, e.g. 0,1,2 (default: "
                                       "the name's)"),
         click.option("--head-tokens", type=Whole(1),
                      help="tokens the draft's pruned head keeps (default: the name's)"))
@section("Training data",
         click.option("--prompts", type=click.Path(dir_okay=False),
                      help="instructions, one a line (default: simulator/data/train_instructions.txt, none of "
                           "MT-bench's)"),
         click.option("--samples", type=Whole(1), default=3, show_default=True, help="answers per instruction"),
         click.option("--new-tokens", type=Whole(1), default=128, show_default=True, help="longest answer"),
         click.option("--generation-batch", type=Whole(1), default=128, show_default=True))
@section("Training",
         click.option("--epochs", type=Whole(1), default=5, show_default=True),
         click.option("--steps", type=Whole(1), help="stop after N training steps"),
         click.option("--learning-rate", type=Real(0, 1, min_open=True, max_open=True), default=2e-3,
                      show_default=True, help="AdamW's peak learning rate"),
         click.option("--seed", type=SEED, default=0, show_default=True))
@section("Acceptance check",
         click.option("--check-questions", type=Whole(0), default=20, show_default=True,
                      help="measure Σ min(p, q) on MT-bench's first N first turns (0: no check)"),
         click.option("--questions", type=click.Path(dir_okay=False),
                      help="Spec-Bench question.jsonl for the check (default: specproof fetch mt-bench)"))
@section("Output",
         click.option("--out", "out_dir", type=Output(folder=True),
                      help="where the draft is written (default: <cache>/drafts/NAME, where --draft NAME looks)"),
         click.option("--cache-dir", type=click.Path(file_okay=False), help="where fetched and converted models live"))
@click.pass_context
def train_draft(ctx, name, target, layers, head_tokens, prompts, samples, new_tokens, generation_batch, epochs, steps,
                learning_rate, seed, check_questions, questions, out_dir, cache_dir) -> None:
    """Distil a draft for a real target from its own answers to instructions that are not MT-bench's: generate,
    choose the pruned head, train, save; then measure its per-token acceptance Σ min(p, q) at temperature 1 on
    MT-bench. Exit 1 when the name records an acceptance and the measured one falls short of it by more than the
    recorded tolerance (training on another CPU need not reproduce the weights bit for bit)."""
    require("transformers", "specproof train-draft", "real")
    from simulator.real.fetch import cache_dir as resolve_cache
    from simulator.real.trained_draft import RECIPES, draft_folder

    recipe = RECIPES[name]
    folder = Path(out_dir) if out_dir is not None else draft_folder(name, resolve_cache(cache_dir))
    _check_draft_folder(folder)  # every output and option before the generation and training (30 minutes)
    chosen_layers = recipe.layers if layers is None else _layer_list(layers)
    import torch

    from simulator.real.draft_training import TrainingPlan, check_plan, make_draft
    from simulator.real.fetch import fetch
    from simulator.real.causal_lm import load_causal_lm, load_tokenizer
    from simulator.real.spec_bench import read_questions, shipped_instructions
    from simulator.real.draft_record import check_acceptance, save_draft

    texts = shipped_instructions("train_instructions.txt") if prompts is None else _read_lines(prompts)
    if check_questions:
        questions = questions or str(fetch("mt-bench"))
        read_questions(questions)
    target_name = target or recipe.target
    config = _target_config(target_name, cache_dir)
    plan = TrainingPlan(tuple(texts), chosen_layers, head_tokens or min(recipe.head_tokens, config.vocab_size),
                        samples=samples, new_tokens=new_tokens, generation_batch=generation_batch, epochs=epochs,
                        learning_rate=learning_rate, steps=steps, seed=seed)
    check_plan(plan, config)
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


def _check_draft_folder(folder: Path) -> None:
    """Refuse, before any work, a draft folder that cannot be written (it is written beside, in its parent, and
    renamed into place) or that holds something other than a draft: the new draft replaces the folder."""
    from simulator.jsonfile import check_output_dir
    from simulator.real.trained_draft import TRAINING_RECORD

    check_output_dir(folder, "out")
    check_output_dir(folder.parent, "out")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / TRAINING_RECORD).is_file():
        raise InvalidParameterError("out", f"{folder} holds files and is not a draft (no {TRAINING_RECORD}): the draft "
                                           "replaces the folder, so give a new or empty folder, or a draft's")


def _target_config(source: str, cache_dir: str | None):
    """The target's transformers config, read without its weights: the layers and vocabulary the plan is checked
    against."""
    from transformers import AutoConfig

    from simulator.real.causal_lm import model_directory, quiet_transformers

    folder = model_directory(source, "target", cache_dir)
    try:
        with quiet_transformers():
            return AutoConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as err:
        raise InvalidParameterError("target", f"cannot read the config of {source}: {err}") from None


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
