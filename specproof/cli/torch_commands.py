"""``specproof kernels`` and ``real``: torch kernels certified unmodified, and real causal-LM pairs
(docs/cli/kernels.md, docs/cli/real.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from simulator.drafting import DRAFTING, FixedShape
from simulator.errors import SpecproofError
from simulator.jsonfile import check_output_dir, check_output_file
from simulator.trees import TOPOLOGIES
from simulator.usercode import require
from specproof.cli.group import main
from specproof.cli.options import StageBars, check_count, command_line, tree_shape


@main.command()
@click.option("--draft", "draft_dir", required=True, type=click.Path(file_okay=False), help="draft model directory")
@click.option("--target", "target_dir", required=True, type=click.Path(file_okay=False),
              help="target model directory (its tokenizer is used)")
@click.option("--questions", required=True, type=click.Path(dir_okay=False), help="Spec-Bench question.jsonl")
@click.option("--answers", required=True, type=click.Path(dir_okay=False), help="answers .jsonl to write")
@click.option("--verifier", required=True, help="a verifier with a torch path (simulator.torch_path.verify)")
@click.option("--topology", type=click.Choice(list(TOPOLOGIES)), default="complete", show_default=True)
@click.option("--depth", type=int, default=3, show_default=True)
@click.option("--branching", type=int, default=2, show_default=True)
@click.option("--parents", help="explicit parent list (implies --topology explicit)")
@click.option("--drafting", type=click.Choice(list(DRAFTING)), default="iid", show_default=True)
@click.option("--max-new-tokens", type=int, default=64, show_default=True)
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--top-k", type=int, default=0, show_default=True)
@click.option("--top-p", type=float, default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default="cpu", show_default=True,
              help="where the two models run (cpu, cuda, cuda:1); the verifier decides on the CPU")
def real(draft_dir, target_dir, questions, answers, verifier, topology, depth, branching, parents, drafting,
         max_new_tokens, temperature, top_k, top_p, seed, device) -> None:
    """Spec-Bench-compatible run on a local draft/target pair: answers in Spec-Bench's format, block efficiency
    and tokens/s against target-only decoding."""
    require("transformers", "specproof real", "real")
    check_output_file(answers, "answers")
    from transformers import AutoTokenizer

    from simulator.torch_path.real import Processing, load_causal_lm
    from simulator.torch_path.spec_bench import read_questions, run_spec_bench

    check_count("max_new_tokens", max_new_tokens, 1)
    _, shape = tree_shape(topology, depth, branching, parents)
    processing = Processing(temperature, top_k, top_p)
    draft = load_causal_lm(draft_dir, field="draft", device=device)
    target = load_causal_lm(target_dir, field="target", device=device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(target_dir, local_files_only=True)
    except (OSError, ValueError) as err:
        raise SpecproofError("target", f"no tokenizer in {target_dir}: {err}") from None
    summary = run_spec_bench(draft, target, tokenizer, read_questions(questions), verifier,
                             FixedShape(shape, drafting), answers, max_new_tokens, processing, processing, seed,
                             f"specproof-{verifier}")
    click.echo(f"{verifier} on {topology} {list(shape.parents)}, drafting {drafting}: {summary.questions} questions, "
               f"{summary.tokens} tokens")
    click.echo(f"  block efficiency {summary.block_efficiency:.3f} tokens per target pass; "
               f"{summary.tokens_per_s:.1f} tokens/s vs target-only {summary.baseline_tokens_per_s:.1f} "
               f"(x{summary.speedup:.2f})")
    click.echo(f"  answers written to {answers}")


@main.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="specproof-report", show_default=True)
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
