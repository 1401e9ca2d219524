"""``specproof kernels`` and ``real``: torch kernels certified unmodified, and real causal-LM pairs
(docs/cli/kernels.md, docs/cli/real.md)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from exact.subject import subject
from simulator.drafting import DRAFTING
from simulator.drafting.arrays import ARRAY_SCHEMES
from simulator.drafting.drafter_registry import DRAFTERS
from simulator.errors import InvalidParameterError
from simulator.jsonfile import check_output_dir, check_output_file, read_text
from simulator.trees import TOPOLOGIES
from simulator.usercode import require
from specproof.cli.checks import check_device
from specproof.cli.group import main
from specproof.cli.option_groups import dynamic_options
from specproof.cli.output import command_line
from specproof.cli.params import SEED, TREE_BRANCHING, TREE_DEPTH, Output, Real, Whole
from specproof.cli.progress import StageBars, progress_bar
from specproof.cli.requests import tree_of
from specproof.cli.sections import section
from specproof.reports.real_transfer import FIT_MODES, PREDICT_SEEDS


#: the drafting ``specproof real`` offers: the fixed shapes' schemes with an array kernel, and the dynamic drafters
REAL_DRAFTING = [name for name in DRAFTERS if name in ARRAY_SCHEMES or name not in DRAFTING]


@main.command()
@section("Models",
         click.option("--target", required=True,
                      help="target model: a saved directory, a .gguf file or a fetched name (smollm2); its tokenizer "
                           "is used"),
         click.option("--draft",
                      help="draft model: a directory, a .gguf file, a fetched name, or the target's own layers: "
                           "self:skip=I,J,... or self:exit=K (not with --drafting aded, which reads none)"))
@section("Questions and answers",
         click.option("--questions", required=True, type=click.Path(dir_okay=False),
                      help="Spec-Bench question.jsonl"),
         click.option("--max-questions", type=Whole(1), help="only the first N questions"),
         click.option("--answers", type=Output(), help="answers .jsonl to write (Spec-Bench's format)"))
@section("Verifier",
         click.option("--verifier", required=True,
                      help="a verifier with an array rule whose later tokens follow the target"))
@section("Draft tree and drafting",
         click.option("--topology", type=click.Choice(list(TOPOLOGIES)), default="complete", show_default=True),
         click.option("--depth", type=TREE_DEPTH, default=3, show_default=True),
         click.option("--branching", type=TREE_BRANCHING, default=2, show_default=True),
         click.option("--parents", help="explicit parent list (implies --topology explicit)"),
         click.option("--drafting", type=click.Choice(REAL_DRAFTING), default="iid", show_default=True,
                      help="a fixed shape's scheme, DySpec's dynamic trees (--budget; --threshold, --max-depth) or "
                           "ADED"),
         dynamic_options,
         click.option("--aded-corpus", type=click.Path(dir_okay=False),
                      help="aded: texts, one a line, its tri-gram table starts from (default: "
                           "simulator/data/instructions.txt)"))
@section("Generation",
         click.option("--max-new-tokens", type=Whole(1), default=64, show_default=True, help="per turn"),
         click.option("--temperature", type=Real(0, min_open=True), default=1.0, show_default=True),
         click.option("--top-k", type=Whole(0), default=0, show_default=True, help="0: every token"),
         click.option("--top-p", type=Real(0, 1, min_open=True), default=1.0, show_default=True),
         click.option("--seed", type=SEED, default=0, show_default=True))
@section("Run",
         click.option("--device", default="cpu", show_default=True,
                      help="where the models and the verifier run (cpu, cuda, cuda:1)"),
         click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float64"]), default="float32",
                      show_default=True, help="the models' weights; rows are processed and verified in float64"),
         click.option("--baseline/--no-baseline", default=True, show_default=True, help="also decode target-only"),
         click.option("--cache-dir", type=click.Path(file_okay=False), help="where fetched and converted models live"))
def real(target, draft, questions, max_questions, answers, verifier, topology, depth, branching, parents, drafting,
         budget, threshold, max_depth, mcts_iterations, candidates, candidate_length, aded_corpus, max_new_tokens,
         temperature, top_k, top_p, seed, device, dtype, baseline, cache_dir) -> None:
    """Spec-Bench-compatible run on a real pair, KV-cached: answers in Spec-Bench's format, block efficiency
    (tokens per target pass, SE across questions) and tokens/s against target-only decoding."""
    require("transformers", "specproof real", "real")
    if answers is not None:
        check_output_file(answers, "answers")
    check_device(device)
    import torch

    from simulator.drafting.aded import AdedConfig
    from simulator.drafting.drafter_registry import DrafterOptions
    from simulator.real.causal_lm import Processing, load_causal_lm, load_pair, load_tokenizer
    from simulator.real.spec_bench import read_questions, real_drafter, real_verifiers, run_spec_bench

    if verifier not in real_verifiers():
        raise InvalidParameterError("verifier", f"choose from {real_verifiers()}")
    claim = subject(verifier).measurement_json(drafting)  # a control or an unclaimed scheme: said, not refused
    if claim["note"]:
        click.echo(f"warning: {claim['note']}", err=True)
    if (drafting == "aded") == (draft is not None):
        raise InvalidParameterError("draft", "--drafting aded reads no draft model: drop --draft" if draft else
                                             f"--drafting {drafting} needs --draft")
    _, shape = tree_of(topology, depth, branching, parents)
    processing = Processing(temperature, top_k, top_p)
    chosen = read_questions(questions)[:max_questions]
    corpus = _aded_corpus(aded_corpus) if aded_corpus is not None else None
    if draft is None:
        draft_model, target_model = None, load_causal_lm(target, getattr(torch, dtype), "target", device, cache_dir)
    else:
        draft_model, target_model = load_pair(draft, target, getattr(torch, dtype), device, cache_dir)
    tokenizer, own_template = load_tokenizer(target, "target", cache_dir)
    if not own_template:
        click.echo("note: the target's tokenizer has no chat template; using ChatML")
    options = DrafterOptions(budget, threshold, max_depth, AdedConfig(mcts_iterations, candidate_length, candidates))
    drafter = real_drafter(drafting, shape, tokenizer, target_model.config.vocab_size, options, corpus)
    with progress_bar(len(chosen), "questions") as bar:
        summary = run_spec_bench(draft_model, target_model, tokenizer, chosen, verifier, drafter, answers,
                                 max_new_tokens, processing, seed,
                                 f"specproof-{verifier}" + ("" if claim["lossless_claimed"] else "-not-lossless"),
                                 baseline, lambda i: bar.update(1),
                                 marks={"claim": {"verifier": verifier, "drafting": drafting, **claim}})
    tree = (f"{topology} {list(shape.parents)}, drafting {drafting}" if drafting in ARRAY_SCHEMES else
            f"drafting {drafting} ({', '.join(f'{k} {v}' for k, v in drafter.describe().items() if k != 'drafting')})")
    click.echo(f"{verifier} on {tree}, draft {draft or 'none'}: "
               f"{summary.questions} questions (ids {', '.join(str(a.question_id) for a in summary.answered)}), "
               f"{summary.tokens} tokens")
    if claim["note"]:
        click.echo(f"  {claim['note']}")
    spread = (f" ± {summary.block_efficiency_se:.3f}" if summary.questions > 1 else "") + " tokens per target pass" + \
        (" (SE across questions)" if summary.questions > 1 else " (one question: no standard error)")
    click.echo(f"  block efficiency {summary.block_efficiency:.3f}{spread}; "
               f"{summary.draft_passes_per_step:.2f} draft passes per step")
    if baseline:
        click.echo(f"  {summary.tokens_per_s:.1f} tokens/s vs target-only {summary.baseline_tokens_per_s:.1f} "
                   f"(x{summary.speedup:.2f})")
    else:
        click.echo(f"  {summary.tokens_per_s:.1f} tokens/s")
    if answers is not None:
        click.echo(f"  answers written to {answers}")


def _aded_corpus(path: str) -> list[str]:
    """``--aded-corpus``'s texts, one a line; a file with none is refused (ADED's table would start empty)."""
    texts = [line for line in read_text(path, "aded_corpus").splitlines() if line.strip()]
    if not texts:
        raise InvalidParameterError("aded_corpus", f"{path} holds no text (one a line): ADED's tri-gram table "
                                                   "starts from them; leave the option out for the shipped corpus")
    return texts


#: the target of the real-pair reports (real-report, lossy-real)
TARGET_OPTION = click.option("--target", default="smollm2", show_default=True,
                             help="the target (a fetched name, directory or .gguf)")
#: the questions the real-pair reports run over: MT-bench's first turns, the first N
QUESTION_OPTIONS = (click.option("--questions", type=click.Path(dir_okay=False),
                                 help="Spec-Bench question.jsonl (default: specproof fetch mt-bench)"),
                    click.option("--max-questions", type=Whole(2), default=20, show_default=True,
                                 help="first turns of the first N"))


@main.command("real-report")
@section("Run",
         TARGET_OPTION,
         *QUESTION_OPTIONS,
         click.option("--max-new-tokens", type=Whole(1), default=32, show_default=True),
         click.option("--seed", type=SEED, default=0, show_default=True),
         click.option("--device", default="cpu", show_default=True))
@section("Output",
         click.option("--out", "out_dir", type=Output(folder=True), default="specproof-report", show_default=True),
         click.option("--store", "store_dir", type=Output(folder=True),
                      help="where each configuration's questions are kept, so a rerun resumes  [default: "
                           "OUT/store/real_pair]"))
@section("Run",
         click.option("--trained-draft", help="the verifier study again with this draft: a name (smollm2-draft, "
                                              "made by specproof train-draft) or a folder"))
@click.pass_context
def real_report(ctx, target, questions, max_questions, max_new_tokens, seed, device, out_dir, store_dir,
                trained_draft) -> None:
    """Verifiers and drafters on a real pair over MT-bench's first turns: every round's exact expected acceptance
    per rule beside the sampled means, paired differences, DySpec against fixed trees, ADED against a draft
    chain and target-only, tokens/s and speed-ups; real_pair.md/json/png."""
    require("transformers", "specproof real-report", "real")
    check_output_dir(out_dir, "out")
    store = Path(store_dir) if store_dir is not None else Path(out_dir) / "store" / "real_pair"
    check_output_dir(store, "store")  # written as each question is done, minutes in
    check_device(device)
    from simulator.real.fetch import fetch
    from simulator.real.spec_bench import read_questions
    from specproof.reports.real_pair import not_lossless, run_real_pair, stored_seconds, write_real_pair_report

    chosen = read_questions(questions or str(fetch("mt-bench")))[:max_questions]
    if len(chosen) < 2:
        raise InvalidParameterError("questions", f"the report's standard errors are across questions: it needs at "
                                                 f"least 2, the file holds {len(chosen)}")
    if trained_draft is not None and not trained_draft.startswith("self:"):  # found now, not after the main study
        from simulator.real.causal_lm import model_directory

        model_directory(trained_draft, "trained_draft")
    ticks = StageBars()
    before, start = os.getloadavg()[0], time.perf_counter()
    try:
        done, _ = run_real_pair(target, chosen, max_new_tokens, seed, device, store, ticks, trained_draft)
    finally:
        ticks.close()
    write_real_pair_report(Path(out_dir), done, [q["question_id"] for q in chosen], max_new_tokens,
                           command_line(ctx), device, (before, os.getloadavg()[0]), time.perf_counter() - start,
                           stored_seconds(done))
    for line in not_lossless([config for config, _ in done]):
        click.echo(f"  {line}")
    click.echo(f"written to {out_dir}/real_pair.md")


@main.command("lossy-real")
@section("Run",
         TARGET_OPTION,
         click.option("--draft", default="self:skip=12,14,16,18", show_default=True,
                      help="the draft: a directory, .gguf, fetched name, or the target's own layers (self:skip=...)"),
         *QUESTION_OPTIONS,
         click.option("--top-k", type=Whole(1), default=3, show_default=True,
                      help="both models' rows cut to their top K tokens (every context within 4 tokens is scored)"),
         click.option("--positions", default="0,16", show_default=True,
                      help="answer positions a round starts at (tokens the target sampled after the prompt)"),
         click.option("--seed", type=SEED, default=0, show_default=True),
         click.option("--threads", type=Whole(1), default=1, show_default=True, help="torch threads"))
@section("Output",
         click.option("--out", "out_file", type=Output(), default="lossy_frontier_real.md", show_default=True,
                      help="the Markdown section; the JSON beside it (.json)"),
         click.option("--store", "store_dir", type=Output(folder=True),
                      help="keep each question's rounds here as it is done, so a rerun resumes"))
@click.pass_context
def lossy_real(ctx, target, draft, questions, max_questions, top_k, positions, seed, threads, out_file,
               store_dir) -> None:
    """The lossy rules on a real pair's rounds: at the issue's settings, each round's exact TVD to the target's
    top-k law and E[τ] beside the best lossless rule's, over MT-bench's first turns (docs/lossy.md)."""
    require("transformers", "specproof lossy-real", "real")
    from simulator.real.fetch import fetch
    from simulator.real.spec_bench import read_questions
    from specproof.reports.lossy_real import run_lossy_real, write_lossy_real

    try:
        starts = sorted({int(p) for p in positions.split(",")})
    except ValueError:
        starts = [-1]
    if not starts or starts[0] < 0:
        raise InvalidParameterError("positions", f"expected whole numbers ≥ 0 separated by commas, got {positions!r}")
    check_output_file(out_file, "out")
    check_output_file(Path(out_file).with_suffix(".json"), "out")
    if store_dir is not None:
        check_output_dir(store_dir, "store")
    chosen = read_questions(questions or str(fetch("mt-bench")))[:max_questions]
    if len(chosen) < 2:
        raise InvalidParameterError("questions", f"standard errors are across questions: it needs at least 2, the "
                                                 f"file holds {len(chosen)}")
    ticks = StageBars()
    try:
        records, meta = run_lossy_real(chosen, target, draft, top_k, starts, seed, threads=threads,
                                       store=None if store_dir is None else Path(store_dir), tick=ticks)
    finally:
        ticks.close()
    write_lossy_real(out_file, records, meta, command_line(ctx))
    click.echo(f"{sum(len(r['rounds']) for r in records)} rounds in {meta['seconds']:.0f} s; written to {out_file} "
               f"and {Path(out_file).with_suffix('.json')}")


@main.command("real-transfer")
@click.option("--pair", default="reports/real_pair.json", show_default=True, type=click.Path(dir_okay=False),
              help="the real rows: real_pair.json written by specproof real-report")
@click.option("--target", default="smollm2", show_default=True, help="the target the pair file was made with")
@click.option("--questions", type=click.Path(dir_okay=False),
              help="Spec-Bench question.jsonl (default: specproof fetch mt-bench)")
@click.option("--max-questions", type=Whole(1), default=10, show_default=True,
              help="measure Σ min(p, q) on the first N questions")
@click.option("--fit", "fit_mode", type=click.Choice(FIT_MODES), default="shared",
              show_default=True, help="what is fitted: τ_p = τ_q, τ_q = 1, or all three")
@click.option("--seeds", type=Whole(2), default=PREDICT_SEEDS, show_default=True, help="model seeds of the fitted pair")
@click.option("--out", "out_dir", type=Output(folder=True), default="specproof-report", show_default=True)
@click.pass_context
def real_transfer(ctx, pair, target, questions, max_questions, fit_mode, seeds, out_dir) -> None:
    """Fit the toy study's synthetic pair to a real pair's per-position Σ min(p, q) and compare its predicted
    accepted tokens per step with the real rows of real_pair.json; real_transfer.md/json/png."""
    require("transformers", "specproof real-transfer", "real")
    check_output_dir(out_dir, "out")
    from simulator.real.fetch import fetch
    from simulator.real.overlaps import measure_overlaps
    from simulator.real.spec_bench import read_questions
    from specproof.reports.real_transfer import read_pair, run_transfer, write_transfer_report

    pair_data, rows = read_pair(pair)
    chosen = read_questions(questions or str(fetch("mt-bench")))[:max_questions]
    ticks = StageBars()
    try:
        start = time.perf_counter()
        real = measure_overlaps(target, list(dict.fromkeys(r.draft for r in rows)), chosen, tick=ticks,
                                processing=pair_data.get("processing"))
        measured = time.perf_counter() - start
        transfer = run_transfer(rows, real, [q["question_id"] for q in chosen], fit_mode, seeds, tick=ticks)
    finally:
        ticks.close()
    transfer.seconds["measure"] = measured
    write_transfer_report(Path(out_dir), transfer, pair, pair_data, command_line(ctx))
    fit, stats = transfer.fits[transfer.main_draft], transfer.stats
    click.echo(f"fit ({fit.mode}): rho {fit.rho:.3f}, tau_p {fit.tau_p:.3f}, tau_q {fit.tau_q:.3f}; "
               f"W1 {fit.distance:.4f} (noise floor {fit.noise:.4f})")
    overall = stats["spearman_overall"]
    click.echo(f"Spearman overall {'–' if overall is None else f'{overall:.2f}'}; largest error "
               f"{stats['largest_error']['error']:+.3f} ({stats['largest_error']['row']})")
    click.echo(f"stages: measure {measured:.0f} s, fit {transfer.seconds['fit']:.0f} s, "
               f"predict {transfer.seconds['predict']:.0f} s")
    click.echo(f"written to {out_dir}/real_transfer.md")


@main.command()
@click.option("--out", "out_dir", type=Output(folder=True), default="specproof-report", show_default=True)
@click.pass_context
def kernels(ctx, out_dir: str) -> None:
    """Certify every torch kernel specproof knows, unmodified: transformers' sampler, the torch path's kernels
    black-box, the example kernels with their bugs. Writes kernels.md/json; exit 1 on a verdict against its
    expectation (docs/kernels.md)."""
    require("torch", "specproof kernels", "kernels")
    check_output_dir(out_dir, "out")
    from specproof.reports.kernel_report import write_kernel_report  # torch only here

    ticks = StageBars()
    try:
        ok = write_kernel_report(Path(out_dir), command_line(ctx), ticks)
    finally:
        ticks.close()
    click.echo(f"written to {out_dir}/kernels.md")
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--out", "out_dir", type=Output(folder=True), default="specproof-report", show_default=True)
@click.pass_context
def clients(ctx, out_dir: str) -> None:
    """Certify samplers other projects ship (transformers', vLLM 0.6.3's), unmodified, each by the command the
    report shows. Writes clients.md/json; exit 1 on a verdict against its expectation (docs/kernels.md)."""
    require("torch", "specproof clients", "clients")
    check_output_dir(out_dir, "out")
    from specproof.reports.clients import write_clients_report  # torch only here

    ok = write_clients_report(Path(out_dir), command_line(ctx))
    click.echo(f"written to {out_dir}/clients.md")
    sys.exit(0 if ok else 1)
