"""``specproof list``, ``certify`` and ``law``: exact certificates of one verifier or torch kernel
(docs/cli/certify.md)."""

from __future__ import annotations

import json
import sys

import click

from exact import fixed_tree_law
from exact.certificate import METHODS
from exact.pairs import PairsResult, certify_pairs
from exact.reproducer import capture, failing_case, load_reproducer
from exact.size import estimate_round
from exact.subject import Subject, parse_schemes, subject
from simulator.case import load_case
from simulator.drafting.drafter_registry import DRAFTERS
from simulator.errors import InvalidParameterError, SpecproofError
from simulator.loops.builtin import LOOPS
from simulator.loops.models import LOOP_MODELS
from simulator.models import MODELS
from simulator.numeric import ARITHMETICS, to_json_number
from simulator.trees import TOPOLOGIES
from simulator.verifiers import VERIFIERS
from simulator.verifiers.registry import check_arithmetic_for, check_pairing
from specproof.cli.certificate_text import (certificate_lines, echo_control_note, exactness, model_name, settings,
                                             verdict)
from specproof.cli.certify_batch import certify_batch
from specproof.cli.certify_loop import certify_loop
from specproof.cli.certify_real import certify_causal_lm
from specproof.cli.group import main
from specproof.cli.option_groups import (CAUSAL_LM, batch_options, case_options, causal_lm_options, json_option,
                                         kernel_options, limit_options, loop_options, model_options, sampling_options,
                                         shape_options, verifier_options)
from specproof.cli.output import kept, shrunk, write_output
from specproof.cli.params import Real, Whole
from specproof.cli.progress import mass_bar
from specproof.cli.requests import CertifyRequest
from specproof.cli.sections import section
from specproof.cli.specs import SeededPairs, kernel_of, limited


@main.command("list")
def list_cmd() -> None:
    """Every built-in model kind, topology, drafting scheme and verifier, one line each."""
    for name, text in MODELS.items():
        click.echo(f"model      {name:22s} {text}")
    click.echo(f"model      {CAUSAL_LM:22s} a real causal-LM pair after a prompt, certify only: --target --draft "
               "--prompt --top-k")
    for name, text in LOOP_MODELS.items():
        click.echo(f"model      {name:22s} {text}")
    for name, text in TOPOLOGIES.items():
        click.echo(f"topology   {name:22s} {text}")
    for name, text in DRAFTERS.items():
        click.echo(f"drafting   {name:22s} {text}")
    for spec in VERIFIERS.values():
        if spec.lossy_by_design:
            knobs = ", ".join(f"{k.name}={k.default}" for k in spec.knobs)
            click.echo(f"verifier   {spec.name:22s} {spec.description} {spec.kind_note()} (knobs: {knobs})")
            continue
        where = (f"lossless under: {', '.join(spec.lossless_under)}" if spec.lossless_under
                 else f"lossy on: {spec.lossy_on}")
        click.echo(f"verifier   {spec.name:22s} {spec.description} [{where}]")
    for name, text in LOOPS.items():
        click.echo(f"loop       {name:22s} {text}")
    click.echo("reference: docs/ in the specproof repository (docs/rules.md: each rule and its paper)")


@main.command()
@section("Case",
         click.option("--case", "case_path", required=True, type=click.Path(dir_okay=False), help="CASE.json"),
         click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True))
@limit_options
def law(case_path: str, arithmetic: str, max_executions: int, timeout: float) -> None:
    """The exact output law of a verifier on one fixed tree (CASE.json), as JSON."""
    case = load_case(case_path, arithmetic)
    check_arithmetic_for(case.verifier, arithmetic)
    rule = subject({"verifier": case.verifier, "verifier_kwargs": case.verifier_kwargs}, "case")
    with mass_bar(1, "law") as bar, limited(max_executions, timeout, bar.update):
        result = fixed_tree_law(case.tree, case.p, case.q, rule.fn, case.vocab, arithmetic)
    entries = [json.dumps({"path": list(path), "y": y, "prob": to_json_number(prob, arithmetic)})
               for (path, y), prob in result.law().items()]
    expected = json.dumps(to_json_number(result.expected_accepted(), arithmetic))
    several = f',\n "draft_models": {case.draft_models}' if case.draft_models > 1 else ""
    click.echo('{"law": [\n  ' + ",\n  ".join(entries)  # a row a line
               + f'\n ],\n "expected_accepted": {expected}{several}}}')


@main.command()
@model_options((*MODELS, CAUSAL_LM, *LOOP_MODELS))
@causal_lm_options
@loop_options
@sampling_options
@shape_options
@verifier_options
@kernel_options
@batch_options
@case_options
@section("Computation",
         click.option("--seeds", "pairs", type=Whole(1), default=1, show_default=True,
                      help="certify model seeds --seed … --seed+K−1, stopping at the first lossy pair"),
         click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True),
         click.option("--method", type=click.Choice(METHODS), default="enumerate", show_default=True,
                      help="enumerate: run the rule on every draft and choice; recursion: the rule's exact recursion "
                           "(trv, trv-iid: over subtrees; lv-*: the deepest level in closed form), for trees "
                           "enumeration cannot reach (docs/engines.md)"),
         click.option("--tvd-budget", type=Real(0, 1),
                      help="the TVD a lossy-by-design rule may cost: WITHIN BUDGET (exit 0) while every pair's TVD "
                           "is at most this, else OVER BUDGET (exit 1), in place of LOSSLESS/LOSSY's exit"))
@limit_options
@json_option("the certificate")
@click.pass_context
def certify(ctx: click.Context, **options) -> None:
    """Certify a verifier, or an unmodified torch kernel, exactly: TVD of its completed output law to q^(H+1); with
    --model causal-lm, on a real pair's rows after a prompt; with --loop, a whole generation loop against plain
    sampling; with --request, a batched kernel on a batch of requests. Exit 0 lossless, 1 lossy (with
    --tvd-budget: 0 within it, 1 over it)."""
    request = CertifyRequest.from_click(ctx, **options)
    {"model": certify_model, "case": certify_case, CAUSAL_LM: certify_causal_lm,
     "loop": certify_loop, "batch": certify_batch}[request.mode](request)


def certify_model(request: CertifyRequest) -> None:
    """Certify the subject on the model pairs of ``--seed`` … ``--seed + --seeds − 1``: exit 0 LOSSLESS, 1 LOSSY."""
    what = _one_tree_subject(request.subject.resolve())
    shape = request.shape.resolved(what)
    check_pairing(what.name, shape.drafting)
    check_arithmetic_for(what.name, request.arithmetic)
    pairs = SeededPairs(request.model, shape)
    seeds = range(request.model.seed, request.model.seed + request.pairs)
    kernel = kernel_of(what)
    described = {} if kernel is None else kernel.describe()
    try:
        with mass_bar(request.pairs, f"certify {what.name}") as bar, request.limits.applied(bar.update) as cap:
            if request.method == "enumerate":  # the size estimate is enumeration's
                estimate_round(*pairs(request.model.seed), what.fn, request.arithmetic).check(cap)
            result = certify_pairs(pairs, seeds, what.fn, request.arithmetic,
                                   config=lambda s: {**pairs.config(s), **described}, method=request.method,
                                   stop=request.over_budget)
    except SpecproofError as err:
        if hasattr(err, "branch"):
            err.case = _failing_case(request, pairs, seeds, what)
        raise
    cert = result.deciding
    click.echo(f"{what.name}: {verdict(result.lossless)} ({exactness(cert, kernel, request.arithmetic)})")
    click.echo(f"  model {model_name(cert.config)}, {settings(pairs.drafting(request.model.seed))}"
               + (f"; shown for model seed {result.deciding_seed}" if request.pairs > 1 else ""))
    _print_certificate(what, shape.drafting, cert)
    if kernel is not None:
        click.echo(f"  tolerance: {cert.tolerance_reason}")
    click.echo(f"  covers: {result.coverage()}")
    out = {**result.to_json(), "verifier": what.name, **what.claim_json(shape.drafting)}
    passed = result.lossless
    if request.tvd_budget is not None:
        passed, line = result.budget_line(request.budget_value())
        click.echo(line)
        out.update(tvd_budget=request.tvd_budget, within_budget=passed)
    if request.shrink and not result.lossless:
        out["reproducer"] = shrunk(capture(*pairs(result.deciding_seed), what, request.arithmetic), what,
                                   request.shrink_time, request.case_out)
    write_output(request.json_out, out)
    sys.exit(0 if passed else 1)


def _one_tree_subject(what: Subject) -> Subject:
    """``what``, refused when it is a kernel whose adapter verifies a batch (it needs ``--request``)."""
    kernel = kernel_of(what)
    if kernel is not None and kernel.batched:
        raise InvalidParameterError("adapter", f"--adapter {kernel.adapter} verifies a batch of requests: give one "
                                               "--request NAME=VALUE,... per request (docs/kernels.md)")
    return what


def _print_certificate(what: Subject, scheme: str, cert) -> None:
    """The control-run note, if any, and the certificate's lines."""
    echo_control_note(what, scheme)
    for line in certificate_lines(cert):
        click.echo(line)


def _failing_case(request: CertifyRequest, pairs: SeededPairs, seeds: range, what: Subject) -> str:
    """Where the case of an error raised inside the subject went (``--case-out``, written only when given), or how
    to get it."""
    if "case_out" not in request.given:
        return "pass --case-out FILE to write it as a reproducer"
    for s in seeds:  # the pairs before the failing one certified; the failing one fails again, recorded
        case = failing_case(*pairs(s), what, request.arithmetic)
        if case is not None:
            path = kept(lambda: case.write(request.case_out))
            return f"written to {path} (specproof certify --case {path})" if path else "not written"
    return "not reproduced: the failure did not recur"


def certify_case(request: CertifyRequest) -> None:
    """``certify --case``: the reproducer's subject (or --verifier/--kernel) on its table, shape and drafting:
    exit 0 LOSSLESS, 1 LOSSY."""
    case = load_reproducer(request.case)
    what = _one_tree_subject(request.subject.resolve() if request.subject.given
                             else subject(case.subject, "case.subject", parse_schemes(request.subject.schemes)))
    check_arithmetic_for(what.name, case.arithmetic)
    with mass_bar(1, f"certify {what.name}") as bar, request.limits.applied(bar.update):
        cert = case.certify(what)
    click.echo(f"{what.name}: {verdict(cert.lossless)} ({exactness(cert, kernel_of(what), case.arithmetic)})")
    several = {"draft_models": 1 + len(case.drafts)} if case.drafts else {}
    click.echo(f"  case {request.case}: {model_name({'model': 'table model', **several})}, vocab {case.vocab}, "
               f"{settings(case.shape_json())}")
    _print_certificate(what, case.drafting, cert)
    click.echo("  covers: this case's model pair, not every pair")
    out = {**cert.to_json(), "verifier": what.name, "case": str(request.case), **several,
           **what.claim_json(case.drafting)}
    passed = cert.lossless
    if request.tvd_budget is not None:
        passed, line = PairsResult((0,), (cert,)).budget_line(request.budget_value())
        click.echo(line)
        out.update(tvd_budget=request.tvd_budget, within_budget=passed)
    if request.shrink and not cert.lossless:
        out["reproducer"] = shrunk(case, what, request.shrink_time, request.case_out)
    write_output(request.json_out, out)
    sys.exit(0 if passed else 1)
