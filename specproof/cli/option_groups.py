"""The option groups several commands share, each under its help section: the model pair, the real pair, the
draft tree and drafting, the verifier, the kernel, the reproducer, the limits and the output file."""

from __future__ import annotations

from typing import Callable

import click

from simulator.drafting.drafter_registry import DRAFTERS
from simulator.limits import DEFAULT_MAX_EXECUTIONS, DEFAULT_TIMEOUT
from simulator.models import MODELS
from simulator.trees import MAX_TREE_NODES, TOPOLOGIES
from specproof.cli.params import (BOUND_SECONDS, COUNT_LIMIT, SECONDS_LIMIT, SEED, TREE_BRANCHING, TREE_DEPTH, Output,
                                  Real, Reals, Whole)
from specproof.cli.sections import section

#: ``--model``'s value for a real causal-LM pair (``certify`` only)
CAUSAL_LM = "causal-lm"


#: ``--draft-models K``: the random rational model's number of draft models (docs/models.md, "Several draft models")
DRAFT_MODELS_OPTION = click.option("--draft-models", type=Whole(1), default=1, show_default=True,
                                   help="random-rational: draft models (K ≥ 2: --drafting k-models draws child i "
                                        "from draft model i; the synthetic model takes one --rho per draft model, a "
                                        "table its \"drafts\" list)")


def model_options(kinds: tuple[str, ...] = tuple(MODELS), several_drafts: bool = True) -> Callable:
    """The model pair's options; ``kinds``: the ``--model`` choices (``certify`` adds :data:`CAUSAL_LM`);
    ``several_drafts``: ``--rho`` takes a list (one draft model per value) and ``--draft-models`` is offered."""
    rho = (click.option("--rho", type=Reals(0, 1), default=0.5, show_default=True,
                        help="synthetic: the logits' shared part; a comma list (0.3,0.8) makes one draft model per "
                             "value") if several_drafts
           else click.option("--rho", type=Real(0, 1), default=0.5, show_default=True))
    return section(
        "Model pair",
        click.option("--model", "model_kind", type=click.Choice(list(kinds)), default="synthetic",
                     show_default=True),
        click.option("--table", "table_path", type=click.Path(dir_okay=False), help="table JSON (--model table)"),
        click.option("--vocab", type=Whole(2), default=3, show_default=True),
        click.option("--seed", type=SEED, default=0, show_default=True),
        rho,
        *((DRAFT_MODELS_OPTION,) if several_drafts else ()),
        click.option("--tau-p", type=Real(0, min_open=True), default=1.0, show_default=True),
        click.option("--tau-q", type=Real(0, min_open=True), default=1.0, show_default=True),
        click.option("--zero-prob", type=Real(0, 1), default=0.25, show_default=True,
                     help="random-rational: chance that a weight is zeroed"),
    )


causal_lm_options = section(
    "Real pair (--model causal-lm)",
    click.option("--target", help="the target, a saved directory, a .gguf file or a fetched name (smollm2); its "
                                  "tokenizer and chat template are used"),
    click.option("--draft", help="the draft, a directory, a .gguf file, a fetched name, or the target's own layers: "
                                 "self:skip=I,J,... or self:exit=K"),
    click.option("--prompt", help="the prompt, one user message under the chat template"),
    click.option("--cache-dir", type=click.Path(file_okay=False), help="where fetched and converted models live"),
    click.option("--device", help="where the models run (cpu, cuda, cuda:1)  [default: cpu]"),
)

loop_options = section(
    "Generation loop (--loop)",
    click.option("--loop", help="a whole generation loop, run on tiny torch models and certified against plain "
                                "sampling: transformers-assisted, transformers-prompt-lookup, mlx-lm, or "
                                "module:function (docs/loops.md); --depth is its draft depth"),
    click.option("--reference", help="module:function or a shipped loop's name: the loop the law is held to  "
                                     "[default: plain sampling with the same parameters, transformers' processor "
                                     "order; MLX-LM's order (plain-mlx) for the mlx-lm loops]"),
    click.option("--max-new-tokens", type=Whole(1), help="tokens each run generates  [default: --depth + 1, the "
                                                         "least that crosses a round boundary]"),
    click.option("--prompt-ids", default="0", show_default=True, help="the prompt's token ids, comma-separated"),
)

#: the sampling parameters: a real pair's processing (--model causal-lm: temperature and top-k) and a loop's
sampling_options = section(
    "Sampling (--model causal-lm, --loop)",
    click.option("--temperature", type=Real(0, min_open=True), help="both models' temperature  [default: 1]"),
    click.option("--top-k", type=Whole(0), help="top-k of the rows (--model causal-lm: required, ≥ 1; --loop: 0 "
                                                "or absent, no cut)"),
    click.option("--top-p", type=Real(0, 1, min_open=True), help="--loop: nucleus sampling's mass  [default: 1, no "
                                                                 "cut]"),
    click.option("--min-p", type=Real(0, 1), help="--loop: tokens below this share of the likeliest cut  [default: "
                                                  "0]"),
    click.option("--repetition-penalty", type=Real(0, min_open=True),
                 help="--loop: the penalty of tokens already in the sequence  [default: 1, none]"),
)

#: the dynamic drafters' sizes: DySpec's budget, threshold and depth cap, ADED's search (its corpus apart: a real
#: pair's is text, a synthetic model's token ids)
DYNAMIC_OPTIONS = (
    click.option("--budget", type=Whole(1, MAX_TREE_NODES), default=6, show_default=True,
                 help="dyspec: draft tokens per tree"),
    click.option("--threshold", type=Real(0, 1, min_open=True), default=0.1, show_default=True,
                 help="dyspec-threshold: least estimated value to sample at"),
    click.option("--max-depth", type=Whole(1, MAX_TREE_NODES), default=4, show_default=True,
                 help="dyspec-threshold: depth cap"),
    click.option("--mcts-iterations", type=Whole(1), default=150, show_default=True, help="aded: MCTS iterations"),
    click.option("--candidates", type=Whole(1, MAX_TREE_NODES), default=24, show_default=True,
                 help="aded: candidate sequences"),
    click.option("--candidate-length", type=Whole(1, MAX_TREE_NODES), default=4, show_default=True,
                 help="aded: tokens per candidate"),
)
#: a command's own drafting options for dynamic trees, for one that does not take :data:`shape_options`
dynamic_options = section("Dynamic drafting", *DYNAMIC_OPTIONS)

shape_options = section(
    "Draft tree and drafting",
    click.option("--topology", type=click.Choice(list(TOPOLOGIES)), default=None,
                 help="tree shape  [default: complete; chain with --adapter chain, flat-chain, vllm or sglang]"),
    click.option("--depth", type=TREE_DEPTH, default=2, show_default=True, help="draft depth H"),
    click.option("--branching", type=TREE_BRANCHING, default=2, show_default=True, help="branching b"),
    click.option("--parents", help="explicit parent list, e.g. '-1,0,0,1' (implies --topology explicit)"),
    click.option("--drafting", type=click.Choice(list(DRAFTERS)), default=None,
                 help="drafting scheme  [default: iid where the verifier claims it, else its first claimed scheme]"),
    *DYNAMIC_OPTIONS[:3],
    click.option("--corpus", "corpus_path", type=click.Path(dir_okay=False),
                 help="aded: JSON list of token sequences (default: 32 sampled from the draft model)"),
    *DYNAMIC_OPTIONS[3:],
)

#: ``--schemes``: the drafting schemes a plugin claims losslessness under, over its function's ``schemes`` attribute
#: (resolved in exact/subject.py; docs/plugins.md, "Declaring the drafting schemes")
SCHEMES_OPTION = click.option("--schemes", help="comma-separated drafting schemes the verifier claims losslessness "
                                                "under (default: its schemes attribute, a built-in's registry "
                                                "entry, else iid); a run under another is a control run")

#: ``--verifier-kwargs``: a lossy-by-design rule's knobs (docs/lossy.md)
VERIFIER_KWARGS_OPTION = click.option("--verifier-kwargs", help="a lossy-by-design rule's knobs, NAME=VALUE,... "
                                                                "(docs/lossy.md; specproof list shows each rule's)")

verifier_options = section(
    "Verifier",
    click.option("--verifier", help="built-in name (specproof list) or module:function"),
    VERIFIER_KWARGS_OPTION,
    SCHEMES_OPTION,
)

kernel_options = section(
    "Kernel (instead of --verifier)",
    click.option("--kernel", help="an unmodified torch function module:function, certified through --adapter "
                                  "(docs/kernels.md); module:Class or module:Class.method constructs the class "
                                  "(--kernel-init) and calls the instance or its method"),
    click.option("--adapter", default="tree", show_default=True,
                 help="the kernel's calling convention: chain, flat-chain, tree, uniforms, eagle, eagle-paths, "
                      "vllm, specinfer, sglang or module:function"),
    click.option("--dtype", type=click.Choice(["float64", "float32"]), default="float64", show_default=True,
                 help="the kernel's input dtype"),
    click.option("--uniforms", type=click.Choice(["continuous", "grid"]), default="continuous",
                 show_default=True, help="model of a torch uniform: U(0,1), or torch's float grid k·2^-b"),
    click.option("--kernel-kwargs", help="fixed keyword arguments of the kernel, NAME=VALUE,..."),
    click.option("--kernel-init", help="module:Class or module:Class.method: the constructor's keyword "
                                       "arguments, NAME=VALUE,..."),
    click.option("--import-path", multiple=True, type=click.Path(),
                 help="a directory put first on sys.path before the adapter and kernel are imported; with --loop, "
                      "first in a process of its own, before anything imports transformers (repeatable)"),
)


batch_options = section(
    "Batch (a batched adapter: vllm-v1-forward)",
    click.option("--request", "requests", multiple=True,
                 help="one request of the batch, NAME=VALUE,...: temperature (0 or -1: greedy), top_k, top_p, seed "
                      "(its own generator), depth [--depth], model_seed [--seed + its index] or table [--table]; "
                      "repeat per request (docs/kernels.md)"),
)


def shrink_time_option() -> Callable:
    """``--shrink-time``: the shrinker's time bound (inf: shrink until no move applies)."""
    return click.option("--shrink-time", type=BOUND_SECONDS, default=10.0, show_default=True,
                        help="seconds the shrinker may take (inf: until no move applies)")


case_options = section(
    "Reproducer",
    click.option("--case", "case_path", type=click.Path(dir_okay=False),
                 help="a reproducer (hunt, gate, --shrink): its model table, shape, drafting and subject; "
                      "--verifier or --kernel certify another subject on it"),
    click.option("--shrink", is_flag=True, help="on a lossy verdict, shrink it to a small reproducer, written to "
                                                "--case-out and into --json"),
    shrink_time_option(),
    click.option("--case-out", type=Output(), default="specproof-case.json", show_default=True,
                 help="--shrink: where the reproducer goes"),
)


def timeout_option(what: str, more: str = "") -> Callable:
    """``--timeout``: the wall-clock limit of the ``what`` in seconds, 0 or ``inf`` for none; ``more``: the rest
    of its help."""
    return click.option("--timeout", type=SECONDS_LIMIT, default=DEFAULT_TIMEOUT, show_default=True,
                        help=f"wall-clock limit of the {what} in seconds (0 or inf: none){more}")


#: ``--max-executions`` and ``--timeout``, for a command that lists them with limits of its own
LIMIT_OPTIONS = (
    click.option("--max-executions", type=COUNT_LIMIT, default=DEFAULT_MAX_EXECUTIONS, show_default=True,
                 help="most executions one exact computation may enumerate (estimated up front; 0 or inf: no "
                      "limit)"),
    timeout_option("run"),
)
limit_options = section("Limits", *LIMIT_OPTIONS)


def json_option(what: str) -> Callable:
    """``--json FILE``: where the command writes ``what``, under the Output section."""
    return section("Output", click.option("--json", "json_out", type=Output(), help=f"write {what} here"))
