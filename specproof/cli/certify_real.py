"""``specproof certify --model causal-lm``: the exact cross-check on a real causal-LM pair's rows
(docs/cli/certify.md; :mod:`simulator.real.crosscheck`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from simulator.drafting import DRAFTING
from simulator.drafting.drafter_registry import DYNAMIC
from simulator.errors import InvalidParameterError
from simulator.usercode import require
from simulator.verifiers.registry import check_pairing
from specproof.cli.certificate_text import certificate_lines, echo_control_note, settings, verdict
from specproof.cli.output import write_output
from specproof.cli.progress import mass_bar

if TYPE_CHECKING:
    from specproof.cli.requests import CertifyRequest


def certify_causal_lm(request: CertifyRequest) -> None:
    """Certify ``--verifier`` on a real pair's rows after ``--prompt``: exit 0 LOSSLESS, 1 LOSSY."""
    real = request.real  # the request's mode is causal-lm: the spec is there
    what = request.subject.resolve()
    shape = request.shape.resolved(what)
    if shape.drafting not in (*DRAFTING, *DYNAMIC):
        raise InvalidParameterError("drafting", "--model causal-lm drafts a fixed tree or DySpec's: choose from "
                                                f"{[*DRAFTING, *DYNAMIC]}")
    check_pairing(what.name, shape.drafting)
    _, tree = shape.tree()
    # how deep a draft can reach: the fixed shape's height, DySpec's budget (a chain at most) or depth cap
    height = {"dyspec": shape.budget, "dyspec-threshold": shape.max_depth}.get(shape.drafting, tree.height)
    require("torch", "--model causal-lm", "torch")
    require("transformers", "--model causal-lm", "real")
    import torch

    from exact.pairs import certify_real, real_coverage
    from simulator.real.causal_lm import Processing, load_pair, load_tokenizer
    from simulator.real.crosscheck import SupportPair
    from simulator.real.spec_bench import chat_ids

    processing = Processing(real.temperature, real.top_k)
    with mass_bar(1, f"certify {what.name}") as bar, request.limits.applied(bar.update):
        draft_model, target_model = load_pair(real.draft, real.target, torch.float64, real.device, real.cache_dir)
        tokenizer, own_template = load_tokenizer(real.target, "target", real.cache_dir)
        ids = chat_ids(tokenizer, [{"role": "user", "content": real.prompt}])
        pair = SupportPair(draft_model, target_model, ids, processing, processing, height)
        drafter, drafting = shape.drafter(pair)
        cert = certify_real(pair, drafter, what.fn, {**drafting, "target": real.target, "draft": real.draft,
                                                     "prompt_text": real.prompt})
    covers = real_coverage(len(ids), real.draft, real.target, processing)
    if not own_template:
        click.echo("note: the target's tokenizer has no chat template; using ChatML")
    click.echo(f"{what.name}: {verdict(cert.lossless)} (float64 rows of a real pair; tolerance {cert.tolerance:g})")
    click.echo(f"  model causal-lm: target {real.target}, draft {real.draft}; prompt of {len(ids)} tokens under "
               f"the chat template; temperature {processing.temperature:g}, top-k {processing.top_k}")
    passes = pair.passes
    click.echo(f"  support: {pair.vocab} of {pair.full_vocab:,} tokens have mass within {height + 1} tokens; "
               f"forward passes: draft {passes['p']['plain']} plain + {passes['p']['tree']} tree, target "
               f"{passes['q']['plain']} plain + {passes['q']['tree']} tree")
    click.echo(f"  {settings(drafting)}")
    echo_control_note(what, shape.drafting)
    for line in certificate_lines(cert):
        click.echo(line)
    if cert.reach.p_accept == 0:
        click.echo(f"  suggestion: no draft token was accepted after this prompt (the pair's top-{processing.top_k} "
                   "rows share no mass where the draft drafts): try another prompt or a larger --top-k, so that the "
                   "verdict weighs the rule's acceptance and residual")
    click.echo(f"  tolerance: TVD ≤ {cert.tolerance:g} against the plain passes' joint: {cert.tolerance_reason}")
    click.echo(f"  covers: {covers}")
    write_output(request.json_out, {**cert.to_json(), "verifier": what.name, "coverage": covers,
                                    "support_tokens": list(pair.tokens), "passes": passes,
                                    **what.claim_json(shape.drafting)})
    sys.exit(0 if cert.lossless else 1)
