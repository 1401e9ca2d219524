"""``specproof certify --loop``: a whole generation loop on a tiny model pair, certified against plain sampling with
the same parameters (docs/loops.md; :func:`exact.generation_law.certify_loop`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from simulator.numeric import human_number
from specproof.cli.certificate_text import verdict
from specproof.cli.output import write_output
from specproof.cli.progress import mass_bar

if TYPE_CHECKING:
    from specproof.cli.requests import CertifyRequest


def certify_loop(request: CertifyRequest) -> None:
    """Certify ``--loop`` on the tiny pair of ``--model``: exit 0 LOSSLESS, 1 LOSSY."""
    from exact.generation_law import certify_loop as certify
    from simulator.loops.convention import loop_name

    spec, model = request.loop, request.model  # the request's mode is loop: the spec is there
    loop, reference = spec.loops()
    with request.limits.applied():
        target, draft = spec.pair(model)
    pair = (f"tiny-llama (vocab {target.vocab}, seed {model.seed})" if model.model_kind == "tiny-llama"
            else f"prefix-table {model.table_path} (vocab {target.vocab})")
    config = {"model": model.model_kind, "pair": pair, "prompt_ids": list(spec.prompt_ids),
              "max_new_tokens": spec.max_new_tokens, "depth": spec.depth, "sampling": spec.sampling.as_dict()}
    with mass_bar(2, f"certify {loop_name(loop)}") as bar, request.limits.applied(bar.update):
        cert = certify(loop, reference, target, draft, spec.prompt_ids, spec.max_new_tokens,
                       spec.sampling.as_dict(), config=config)
    click.echo(f"{cert.loop}: {verdict(cert.lossless)} (a whole loop, its draws enumerated; tolerance "
               f"{cert.tolerance:g})")
    click.echo(f"  against {'plain sampling' if cert.reference == 'plain' else cert.reference}; model {pair}; prompt "
               f"{list(spec.prompt_ids)}; {spec.max_new_tokens} new tokens; draft depth {spec.depth}; "
               f"{spec.sampling.describe()}")
    for line in loop_lines(cert):
        click.echo(line)
    click.echo(f"  tolerance: {cert.tolerance_reason}")
    click.echo(f"  covers: this model pair, this prompt and these sampling parameters only: another pair, prompt, "
               "length or parameter is another check")
    write_output(request.json_out, cert.to_json())
    sys.exit(0 if cert.lossless else 1)


def loop_lines(cert, indent: str = "  ") -> list[str]:
    """The lines under a loop's verdict: TVD, the marginals, the worst continuation, passes and executions."""
    n = len(cert.marginal_tvds)
    lines = [f"{indent}TVD over the {n}-token continuations = {human_number(cert.tvd)}",
             f"{indent}per-position marginal TVD: " + ", ".join(f"{float(t):.3g}" for t in cert.marginal_tvds)]
    if cert.off_support:
        lines.append(f"{indent}support violation: mass {human_number(cert.off_support)} on continuations plain "
                     "sampling never produces (a placeholder token among them?), LOSSY whatever the tolerance")
    if cert.counterexample is not None:
        ce = cert.counterexample
        lines.append(f"{indent}continuation that differs most: {list(ce.sequence)} has probability "
                     f"{human_number(ce.verifier_prob)} under the loop, {human_number(ce.target_prob)} under the "
                     "reference")
    per_pass = ("" if cert.expected_tokens_per_pass is None
                else f"; E[tokens per target pass] = {float(cert.expected_tokens_per_pass):.4g}")
    lines.append(f"{indent}E[target passes] = {float(cert.expected_passes):.4g}{per_pass}")
    lines.append(f"{indent}{cert.executions:,} runs of the loop enumerated ({cert.reference_executions:,} of the "
                 "reference)")
    return lines
