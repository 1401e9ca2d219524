"""``specproof list``, ``certify`` and ``law``: exact certificates of one verifier or torch kernel (docs/cli/certify.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from exact import fixed_tree_law
from exact.certificate import METHODS
from exact.pairs import certify_pairs
from exact.reproducer import capture, failing_case, load_reproducer
from exact.size import estimate_round
from exact.subject import parse_schemes, subject
from simulator.case import load_case
from simulator.drafting.drafter_registry import DRAFTERS
from simulator.errors import InvalidParameterError, SpecproofError
from simulator.jsonfile import check_output_dir, check_output_file
from simulator.models import MODELS
from simulator.numeric import ARITHMETICS, to_json_number
from simulator.trees import TOPOLOGIES
from simulator.verifiers import VERIFIERS
from simulator.verifiers.registry import check_arithmetic_for
from specproof.cli.certify_real import CAUSAL_LM, certify_causal_lm, certify_model_options, refuse_real_options
from specproof.cli.group import main
from specproof.cli.options import (Output, Whole, build_drafter, case_options, certificate_lines, certified_subject,
                                   claimed_subject,
                                   exactness, given_options, kept, kernel_options, limit_options, limited, mass_bar,
                                   model_factory, shrunk, tree_options, write_output)


@main.command("list")
def list_cmd() -> None:
    """Every built-in model kind, topology, drafting scheme and verifier, one line each."""
    for name, text in MODELS.items():
        click.echo(f"model      {name:22s} {text}")
    click.echo(f"model      {CAUSAL_LM:22s} a real causal-LM pair after a prompt, certify only: --target --draft "
               "--prompt --top-k")
    for name, text in TOPOLOGIES.items():
        click.echo(f"topology   {name:22s} {text}")
    for name, text in DRAFTERS.items():
        click.echo(f"drafting   {name:22s} {text}")
    for spec in VERIFIERS.values():
        where = (f"lossless under: {', '.join(spec.lossless_under)}" if spec.lossless_under
                 else f"lossy on: {spec.lossy_on}")
        click.echo(f"verifier   {spec.name:22s} {spec.description} [{where}]")
    click.echo("reference: docs/ in the specproof repository (docs/rules.md: each rule and its paper)")


@main.command()
@click.option("--case", "case_path", required=True, type=click.Path(dir_okay=False), help="CASE.json")
@click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True)
@limit_options
def law(case_path: str, arithmetic: str, max_executions: int, timeout: float) -> None:
    """The exact output law of a verifier on one fixed tree (CASE.json), as JSON."""
    case = load_case(case_path, arithmetic)
    check_arithmetic_for(case.verifier, arithmetic)
    with mass_bar(1, "law") as bar, limited(max_executions, timeout, bar.update):
        result = fixed_tree_law(case.tree, case.p, case.q, case.verifier, case.vocab, arithmetic)
    entries = [json.dumps({"path": list(path), "y": y, "prob": to_json_number(prob, arithmetic)})
               for (path, y), prob in result.law().items()]
    expected = json.dumps(to_json_number(result.expected_accepted(), arithmetic))
    click.echo('{"law": [\n  ' + ",\n  ".join(entries) + f'\n ],\n "expected_accepted": {expected}}}')  # a row a line


@main.command()
@certify_model_options
@click.option("--seeds", "pairs", type=Whole(1), default=1, show_default=True,
              help="certify model seeds --seed … --seed+K−1, stopping at the first lossy pair")
@tree_options
@kernel_options
@case_options
@click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True)
@click.option("--method", type=click.Choice(METHODS), default="enumerate", show_default=True,
              help="enumerate: run the rule on every draft and choice; recursion: the rule's exact recursion (trv, "
                   "trv-iid: over subtrees; lv-*: the deepest level in closed form), for trees enumeration cannot "
                   "reach (docs/engines.md)")
@click.option("--json", "json_out", type=Output(), help="write the certificate here")
@limit_options
@click.pass_context
def certify(ctx, model_kind, table_path, vocab, seed, rho, tau_p, tau_q, zero_prob, target, draft, prompt, top_k,
            temperature, cache_dir, device, pairs, kernel, adapter, dtype, uniforms, kernel_kwargs, kernel_init,
            import_path, case_path, shrink,
            shrink_time, case_out, arithmetic, method, json_out, max_executions, timeout, **tree) -> None:
    """Certify a verifier, or an unmodified torch kernel, exactly: TVD of its completed output law to q^(H+1); with
    --model causal-lm, on a real pair's rows after a prompt. Exit 0 lossless, 1 lossy."""
    check_output_file(json_out, "json")
    real = dict(target=target, draft=draft, prompt=prompt, top_k=top_k, temperature=temperature, cache_dir=cache_dir,
                device=device)
    if model_kind == CAUSAL_LM:
        return certify_causal_lm(ctx, real, tree, json_out, max_executions, timeout)
    refuse_real_options(real)
    if shrink:
        check_output_dir(Path(case_out).parent, "case_out")  # made if missing
    if case_path is not None:
        if method != "enumerate":  # a reproducer is certified as it was found: by enumeration
            raise InvalidParameterError("method", "--case certifies by enumeration; --method recursion applies to "
                                                  "a model and shape given by the options")
        kernel_opts = (kernel, adapter, dtype, uniforms, kernel_kwargs, kernel_init, import_path)
        return _certify_case(ctx, case_path, tree, kernel_opts, shrink, shrink_time, case_out, json_out,
                             max_executions, timeout)
    if model_kind == "table" and pairs > 1:
        raise InvalidParameterError("seeds", "a table model has no seed: --seeds K needs a synthetic or "
                                             "random-rational model")
    name, fn, kernel_spec = certified_subject(tree, kernel, adapter, dtype, uniforms, kernel_kwargs, kernel_init,
                                              import_path)
    claim = claimed_subject(tree, kernel_spec or name)  # --drafting defaults to a claimed scheme
    check_arithmetic_for(name, arithmetic)
    model_for = model_factory(model_kind, table_path, vocab, rho, tau_p, tau_q, zero_prob)

    def pair(s: int):  # the drafter is built per model: ADED's corpus comes from the draft model
        model = model_for(s)
        return model, build_drafter(model, tree)[0]

    model = model_for(seed)
    drafter, drafting = build_drafter(model, tree)
    described = {} if kernel_spec is None else kernel_spec.describe()
    try:
        with mass_bar(pairs, f"certify {name}") as bar, limited(max_executions, timeout, bar.update) as cap:
            if method == "enumerate":  # the size estimate is enumeration's
                estimate_round(model, drafter, fn, arithmetic).check(cap)
            result = certify_pairs(pair, range(seed, seed + pairs), fn, arithmetic,
                                   config=lambda s: {**model_for(s).describe(), **drafting, **described},
                                   method=method)
    except SpecproofError as err:
        if hasattr(err, "branch"):
            err.case = _failing_case(ctx, pair, range(seed, seed + pairs), subject(described or name), arithmetic,
                                     case_out)
        raise
    cert = result.deciding
    click.echo(f"{name}: {'LOSSLESS' if result.lossless else 'LOSSY'} ({exactness(cert, kernel_spec, arithmetic)})")
    click.echo(f"  model {cert.config['model']}, " + ", ".join(f"{k} {v}" for k, v in drafting.items())
               + (f"; shown for model seed {result.deciding_seed}" if pairs > 1 else ""))
    note = claim.control_note(tree["drafting"])
    if note is not None:
        click.echo(note)
    for line in certificate_lines(cert):
        click.echo(line)
    if kernel_spec is not None:
        click.echo(f"  tolerance: {cert.tolerance_reason}")
    click.echo(f"  covers: {result.coverage()}")
    out = {**result.to_json(), "verifier": name, **claim.claim_json(tree["drafting"])}
    if shrink and not result.lossless:
        out["reproducer"] = shrunk(capture(*pair(result.deciding_seed), claim, arithmetic), claim, shrink_time,
                                    case_out)
    write_output(json_out, out)
    sys.exit(0 if result.lossless else 1)


def _failing_case(ctx, pair, seeds, what, arithmetic: str, case_out: str) -> str:
    """Where the case of an error raised inside the subject went (``--case-out``, written only when given), or how
    to get it."""
    if "case_out" not in given_options(ctx, ("case_out",)):
        return "pass --case-out FILE to write it as a reproducer"
    for s in seeds:  # the pairs before the failing one certified; the failing one fails again, recorded
        case = failing_case(*pair(s), what, arithmetic)
        if case is not None:
            path = kept(lambda: case.write(case_out))
            return f"written to {path} (specproof certify --case {path})" if path else "not written"
    return "not reproduced: the failure did not recur"


def _certify_case(ctx, case_path, tree, kernel_opts, shrink, shrink_time, case_out, json_out, max_executions,
                  timeout) -> None:
    """``certify --case``: the reproducer's subject (or --verifier/--kernel) on its table, shape and drafting;
    ``kernel_opts``: the kernel options, in :func:`certified_subject`'s order."""
    held = given_options(ctx, ("model_kind", "table_path", "vocab", "seed", "rho", "tau_p", "tau_q", "zero_prob", "pairs",
                        "topology", "depth", "branching", "parents", "drafting", "budget", "threshold", "max_depth",
                        "corpus_path", "arithmetic"))
    if held:
        raise InvalidParameterError("case", f"the case holds the model, tree, drafting and arithmetic: drop "
                                            f"--{held[0].replace('_path', '').replace('_', '-')}")
    case = load_reproducer(case_path)
    if tree["verifier"] is not None or kernel_opts[0] is not None:
        name, _, kernel_spec = certified_subject(tree, *kernel_opts)
        what = subject(kernel_spec.describe() if kernel_spec is not None else name, "verifier",
                       parse_schemes(tree["schemes"]))
    else:
        what, kernel_spec = subject(case.subject, "case.subject", parse_schemes(tree["schemes"])), None
    check_arithmetic_for(what.name, case.arithmetic)
    with mass_bar(1, f"certify {what.name}") as bar, limited(max_executions, timeout, bar.update):
        cert = case.certify(what)
    kernel_obj = what.fn if "kernel" in what.description else None
    click.echo(f"{what.name}: {'LOSSLESS' if cert.lossless else 'LOSSY'} "
               f"({exactness(cert, kernel_obj, case.arithmetic)})")
    click.echo(f"  case {case_path}: table model, vocab {case.vocab}, " +
               ", ".join(f"{k} {v}" for k, v in case.shape_json().items()))
    note = what.control_note(case.drafting)
    if note is not None:
        click.echo(note)
    for line in certificate_lines(cert):
        click.echo(line)
    click.echo("  covers: this case's model pair, not every pair")
    out = {**cert.to_json(), "verifier": what.name, "case": str(case_path), **what.claim_json(case.drafting)}
    if shrink and not cert.lossless:
        out["reproducer"] = shrunk(case, what, shrink_time, case_out)
    write_output(json_out, out)
    sys.exit(0 if cert.lossless else 1)
