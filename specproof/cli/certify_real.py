"""``specproof certify --model causal-lm``: the exact cross-check on a real causal-LM pair's rows
(docs/cli/certify.md; :mod:`simulator.real.crosscheck`)."""

from __future__ import annotations

import sys

import click

from simulator.drafting import DRAFTING
from simulator.drafting.drafter_registry import DYNAMIC
from simulator.errors import InvalidParameterError
from simulator.models import MODELS
from simulator.usercode import require
from simulator.verifiers.registry import check_pairing
from specproof.cli.options import (Real, Whole, build_drafter, certificate_lines, claimed_subject, given_options,
                                   limited, mass_bar, model_options, named_verifier, tree_shape, write_output)

CAUSAL_LM = "causal-lm"
#: the options only ``--model causal-lm`` takes, by parameter name (each ``None`` when not given)
REAL_OPTIONS = ("target", "draft", "prompt", "top_k", "temperature", "cache_dir", "device")
#: the certify options ``--model causal-lm`` refuses: the synthetic and table models', seeds, kernels, reproducers,
#: exact arithmetic and the recursions (a real pair is certified in float64 by enumeration)
NOT_REAL = ("table_path", "vocab", "seed", "rho", "tau_p", "tau_q", "zero_prob", "pairs", "kernel", "adapter", "dtype",
            "uniforms", "kernel_kwargs", "kernel_init", "import_path", "case_path", "shrink", "shrink_time", "case_out",
            "arithmetic", "method")


def causal_lm_options(fn):
    options = [
        click.option("--target", help="--model causal-lm: the target, a saved directory, a .gguf file or a fetched "
                                      "name (smollm2); its tokenizer and chat template are used"),
        click.option("--draft", help="--model causal-lm: the draft, a directory, a .gguf file, a fetched name, or the "
                                     "target's own layers: self:skip=I,J,... or self:exit=K"),
        click.option("--prompt", help="--model causal-lm: the prompt, one user message under the chat template"),
        click.option("--top-k", type=Whole(0), help="--model causal-lm: top-k of both models' rows (required, ≥ 1)"),
        click.option("--temperature", type=Real(0, min_open=True),
                     help="--model causal-lm: both models' temperature  [default: 1]"),
        click.option("--cache-dir", type=click.Path(file_okay=False),
                     help="--model causal-lm: where fetched and converted models live"),
        click.option("--device", help="--model causal-lm: where the models run (cpu, cuda, cuda:1)  [default: cpu]"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def certify_model_options(fn):
    """``certify``'s model options: every kind of :data:`simulator.models.MODELS` and ``causal-lm`` with its
    options."""
    return model_options(causal_lm_options(fn), (*MODELS, CAUSAL_LM))


def refuse_real_options(real: dict) -> None:
    """Another model kind was chosen: refuse the options of ``--model causal-lm``, naming the first given."""
    for field in REAL_OPTIONS:
        if real[field] is not None:
            raise InvalidParameterError(field, f"--{field.replace('_', '-')} applies to --model causal-lm only")


def certify_causal_lm(ctx: click.Context, real: dict, tree: dict, json_out: str | None, max_executions: int,
                      timeout: float) -> None:
    """Certify ``--verifier`` on a real pair's rows after ``--prompt``: exit 0 LOSSLESS, 1 LOSSY."""
    held = given_options(ctx, NOT_REAL)
    if held:
        flag = max(next(p for p in ctx.command.params if p.name == held[0]).opts, key=len)  # --seeds for pairs
        raise InvalidParameterError(flag.lstrip("-"), f"{flag} does not apply to --model causal-lm (a real pair, "
                                                      "certified in float64 by enumeration on its rows): drop it")
    for field, what in (("target", "a saved directory, a .gguf file or smollm2"),
                        ("draft", "a model, or the target's layers: self:skip=12,14,16,18"),
                        ("prompt", "the user message, under the target's chat template")):
        if real[field] is None:
            raise InvalidParameterError(field, f"--model causal-lm needs --{field} ({what})")
    if real["top_k"] is None or real["top_k"] < 1:
        raise InvalidParameterError("top_k", "--model causal-lm needs --top-k K ≥ 1: the check enumerates every "
                                             "token with mass, and top-k keeps K of the vocabulary per row"
                                             + ("" if real["top_k"] is None else f" (got {real['top_k']})"))
    name, fn = named_verifier(tree)
    claim = claimed_subject(tree, name)  # --drafting defaults to a claimed scheme
    if tree["drafting"] not in (*DRAFTING, *DYNAMIC):
        raise InvalidParameterError("drafting", "--model causal-lm drafts a fixed tree or DySpec's: choose from "
                                                f"{[*DRAFTING, *DYNAMIC]}")
    check_pairing(tree["verifier"], tree["drafting"])
    _, shape = tree_shape(tree["topology"], tree["depth"], tree["branching"], tree["parents"])
    # how deep a draft can reach: the fixed shape's height, DySpec's budget (a chain at most) or depth cap
    height = {"dyspec": tree["budget"], "dyspec-threshold": tree["max_depth"]}.get(tree["drafting"], shape.height)
    require("torch", "--model causal-lm", "torch")
    require("transformers", "--model causal-lm", "real")
    import torch

    from simulator.real.causal_lm import Processing, load_pair, load_tokenizer
    from simulator.real.crosscheck import SupportPair
    from simulator.real.spec_bench import chat_ids
    from specproof.reports.real_crosscheck import certify_real, coverage

    processing = Processing(1.0 if real["temperature"] is None else real["temperature"], real["top_k"])
    with mass_bar(1, f"certify {name}") as bar, limited(max_executions, timeout, bar.update):
        draft_model, target_model = load_pair(real["draft"], real["target"], torch.float64, real["device"] or "cpu",
                                              real["cache_dir"])
        tokenizer, own_template = load_tokenizer(real["target"], "target", real["cache_dir"])
        ids = chat_ids(tokenizer, [{"role": "user", "content": real["prompt"]}])
        pair = SupportPair(draft_model, target_model, ids, processing, processing, height)
        drafter, drafting = build_drafter(pair, tree)
        cert = certify_real(pair, drafter, fn, {**drafting, "target": real["target"], "draft": real["draft"],
                                                "prompt_text": real["prompt"]})
    covers = coverage(len(ids), real["draft"], real["target"], processing)
    if not own_template:
        click.echo("note: the target's tokenizer has no chat template; using ChatML")
    click.echo(f"{name}: {'LOSSLESS' if cert.lossless else 'LOSSY'} (float64 rows of a real pair; tolerance "
               f"{cert.tolerance:g})")
    click.echo(f"  model causal-lm: target {real['target']}, draft {real['draft']}; prompt of {len(ids)} tokens under "
               f"the chat template; temperature {processing.temperature:g}, top-k {processing.top_k}")
    passes = pair.passes
    click.echo(f"  support: {pair.vocab} of {pair.full_vocab:,} tokens have mass within {height + 1} tokens; "
               f"forward passes: draft {passes['p']['plain']} plain + {passes['p']['tree']} tree, target "
               f"{passes['q']['plain']} plain + {passes['q']['tree']} tree")
    click.echo("  " + ", ".join(f"{k} {v}" for k, v in drafting.items()))
    note = claim.control_note(tree["drafting"])
    if note is not None:
        click.echo(note)
    for line in certificate_lines(cert):
        click.echo(line)
    if cert.reach.p_accept == 0:
        click.echo(f"  suggestion: no draft token was accepted after this prompt (the pair's top-{processing.top_k} "
                   "rows share no mass where the draft drafts): try another prompt or a larger --top-k, so that the "
                   "verdict weighs the rule's acceptance and residual")
    click.echo(f"  tolerance: TVD ≤ {cert.tolerance:g} against the plain passes' joint: {cert.tolerance_reason}")
    click.echo(f"  covers: {covers}")
    write_output(json_out, {**cert.to_json(), "verifier": name, "coverage": covers, "support_tokens": list(pair.tokens),
                            "passes": passes, **claim.claim_json(tree["drafting"])})
    sys.exit(0 if cert.lossless else 1)
