"""The ``specproof`` command line: ``list``, ``law``, ``certify``, ``mc``, ``generate``, ``dynamic``, ``real``,
``theorems``, ``report`` and ``kernels`` here; ``hunt``, ``gate`` and ``zoo`` in :mod:`simulator.cli.checks`
(docs/cli/README.md).

Exit status: 0 on success (``certify``: lossless); 1 for a finding: ``certify``, ``hunt`` or ``generate --exact``
finds the verifier lossy, ``gate`` a regression, ``mc``'s test rejects the target, ``report``, ``theorems`` or
``dynamic`` finds a verdict that contradicts its expectation; 2 when the run cannot give a verdict: bad input (a typed error naming the field), a
verifier that raised, a size or time limit; 3 for an internal error of specproof itself (with its traceback).
"""

from __future__ import annotations

import json
import shlex
import os
import sys
import traceback
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

import click
from tqdm import tqdm

from exact import fixed_tree_law
from exact.certificate import METHODS
from exact.pairs import certify_pairs
from exact.size import SizeEstimate, estimate_generation, estimate_round
from exact.table import Planned, certification_table, estimate_table, plan_table, table_markdown
from exact.generation_law import generation_law
from exact.reproducer import capture, load_reproducer
from exact.shrink import shrink as shrink_case
from exact.subject import subject
from exact.theorems import CHECKS, run_checks, theorems_markdown

from simulator.case import load_case
from simulator.aded import AdedConfig
from simulator.drafter_registry import DRAFTERS, DrafterOptions, make_drafter
from simulator.drafting import DRAFTING, FixedShape
from simulator.montecarlo.engine import monte_carlo
from simulator.montecarlo.study import PAPER_SEEDS, PAPER_TRIALS, Store, paper_cells, run_cells
from simulator.reports.study import write_study_report
from simulator.reports.dynamic import write_dynamic_report
from simulator.montecarlo.generations import run_generations
from simulator.errors import InvalidParameterError, OutputError, SpecproofError
from simulator.limits import DEFAULT_MAX_EXECUTIONS, DEFAULT_TIMEOUT, limits, progress_note, time_limit
from simulator.models import MODELS, SyntheticModel, make_model
from simulator.numeric import ARITHMETICS, human_number, to_json_number
from simulator.trees import TOPOLOGIES, shape_from_options
from simulator.verifiers import VERIFIERS, load_verifier
from simulator.verifiers.registry import check_arithmetic_for, check_pairing
from simulator.jsonfile import check_output_dir, check_output_file, read_json, write_json, write_text
from simulator.usercode import (INTERRUPTED_EXIT, check_importable, escape_message, interrupted,
                                interrupts_recorded, raised_by_user_code, require, source_line)



class SpecproofGroup(click.Group):
    """The exit codes of every command (docs/cli/README.md#exit-codes): 2 for every typed error (the field named) and
    for an exit or interrupt raised by user code, 130 for a run stopped by SIGINT or SIGTERM whatever code it
    was about to exit with, 3 with a traceback for anything unforeseen: no error can pass for a verdict (1)."""

    def invoke(self, ctx: click.Context):
        with interrupts_recorded():
            try:
                result = super().invoke(ctx)
            except BaseException as err:  # noqa: BLE001 — every way out gets its code here
                _exit_for(err)
                raise
            if interrupted():
                _exit_interrupted()
            return result


def _exit_for(err: BaseException) -> None:
    """Exit with the code ``err`` stands for; return for a command's own exit and click's usage errors, which
    go on as they are."""
    if interrupted():
        _exit_interrupted()
    if isinstance(err, SystemExit):
        if raised_by_user_code(err):
            _fail(f"error: user code raised {escape_message(err)} ({source_line(err)})", 2)
        return
    if isinstance(err, (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort)):
        return
    if isinstance(err, KeyboardInterrupt):
        _fail(f"error: user code raised {escape_message(err)} ({source_line(err)})", 2)
    if isinstance(err, SpecproofError):
        _fail(f"error: {err.field}: {err.message}", 2)
    if isinstance(err, BrokenPipeError):  # the reader went away (``| head``): stdout is closed, as SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(BROKEN_PIPE_EXIT)
    if isinstance(err, BrokenProcessPool):  # killed from outside: the OOM killer, a kill -9 of one worker
        _fail("error: jobs: a worker process died abruptly (killed, or out of memory), so there is no verdict: run "
              "again, or with fewer --jobs", 2)
    if isinstance(err, OSError) and err.filename is not None:  # a folder removed meanwhile, a full disk
        _fail(f"error: file: {err.filename}: {err.strerror or err}", 2)
    # a bug of specproof's own: never exit 1, which means LOSSY
    _fail("internal error (a bug in specproof, not a verdict):\n" + "".join(traceback.format_exception(err)), 3)


def _fail(message: str, code: int) -> None:
    click.echo(message, err=True)
    sys.exit(code)


def _exit_interrupted() -> None:
    _fail("interrupted (SIGINT or SIGTERM): no verdict", INTERRUPTED_EXIT)


#: the exit status when standard output's reader has gone (the shell's 128 + SIGPIPE)
BROKEN_PIPE_EXIT = 141


def _command(ctx: click.Context) -> str:
    """The command line that re-runs this command: its name and every option's value (defaults included)."""
    words = ["specproof", ctx.info_name or ""]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if not isinstance(param, click.Option) or value is None or value is False:
            continue
        flag = max(param.opts, key=len)
        for item in (value if param.multiple else [value]):
            words += [flag] if param.is_flag else [flag, str(item)]
    return shlex.join(words)


def _bar(total: float, desc: str, unit: str = "it") -> tqdm:
    """A progress bar with an ETA on standard error, shown once a run passes two seconds (and only on a
    terminal)."""
    return tqdm(total=total, desc=desc, unit=unit, disable=None, file=sys.stderr, delay=2, **_width())


def _width() -> dict:
    """tqdm's width: the terminal's, followed as it changes; 80 columns where the terminal reports a size of 0 × 0
    (some CI and IDE terminals), with which tqdm would print nothing."""
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        columns = 0
    return {"dynamic_ncols": True} if columns > 0 else {"ncols": 80, "nrows": 24}


def _mass_bar(pairs: int, desc: str) -> tqdm:
    """Progress of exact computations, in probability mass enumerated (1 per computation)."""
    return tqdm(total=pairs, desc=desc, disable=None, file=sys.stderr, delay=2, **_width(),
                bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]")


class _StageBars:
    """``tick(stage, total)``: one more unit of ``stage``; a bar per stage, opened on its first tick."""

    def __init__(self) -> None:
        self.stage: str | None = None
        self.bar: tqdm | None = None

    def __call__(self, stage: str, total: int) -> None:
        if stage != self.stage:
            self.close()
            self.stage, self.bar = stage, _bar(total, stage)
        self.bar.update(1)  # type: ignore[union-attr]

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _limit_options(fn):
    options = [
        click.option("--max-executions", type=int, default=DEFAULT_MAX_EXECUTIONS, show_default=True,
                     help="most executions one exact computation may enumerate (estimated up front; 0: no limit)"),
        click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True,
                     help="wall-clock limit of the run in seconds (0: none)"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@contextmanager
def _limited(max_executions: int, timeout: float, progress=None) -> Iterator[int | None]:
    """The run under ``--max-executions`` and ``--timeout``; yields the execution limit (``None``: none)."""
    if max_executions < 0:
        raise InvalidParameterError("max_executions", f"must be ≥ 0 (0: no limit), got {max_executions}")
    cap = max_executions or None
    with time_limit(timeout, progress_note), limits(cap, progress):
        yield cap


def _write_json(path: str | None, data: object, field: str = "json") -> None:
    """Write an output once the verdict is printed: a failure (a full disk) is reported on standard error,
    naming the file, and the command still exits with its verdict's code — the result is never lost."""
    if path:
        _kept(lambda: write_json(path, data, field))


def _kept(write: Callable[[], object]) -> object:
    """``write()``, reporting an :class:`OutputError` on standard error instead of raising it (``None``)."""
    try:
        return write()
    except OutputError as err:
        click.echo(f"error: {err.field}: {err.message} (the verdict above stands)", err=True)
        return None


@click.group(cls=SpecproofGroup)
@click.version_option(package_name="specproof")
def main() -> None:
    """specproof: exact certificates and measurements for speculative-decoding verifiers."""


@main.command("list")
def list_cmd() -> None:
    """Every built-in model kind, topology, drafting scheme and verifier, one line each."""
    for name, text in MODELS.items():
        click.echo(f"model      {name:22s} {text}")
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
@_limit_options
def law(case_path: str, arithmetic: str, max_executions: int, timeout: float) -> None:
    """The exact output law of a verifier on one fixed tree (CASE.json), as JSON."""
    case = load_case(case_path, arithmetic)
    check_arithmetic_for(case.verifier, arithmetic)
    with _mass_bar(1, "law") as bar, _limited(max_executions, timeout, bar.update):
        result = fixed_tree_law(case.tree, case.p, case.q, case.verifier, case.vocab, arithmetic)
    entries = [json.dumps({"path": list(path), "y": y, "prob": to_json_number(prob, arithmetic)})
               for (path, y), prob in result.law().items()]
    expected = json.dumps(to_json_number(result.expected_accepted(), arithmetic))
    click.echo('{"law": [\n  ' + ",\n  ".join(entries) + f'\n ],\n "expected_accepted": {expected}}}')  # a row a line


def _model_options(fn):
    options = [
        click.option("--model", "model_kind", type=click.Choice(list(MODELS)), default="synthetic",
                     show_default=True),
        click.option("--table", "table_path", type=click.Path(dir_okay=False), help="table JSON (--model table)"),
        click.option("--vocab", type=int, default=3, show_default=True),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--rho", type=float, default=0.5, show_default=True),
        click.option("--tau-p", type=float, default=1.0, show_default=True),
        click.option("--tau-q", type=float, default=1.0, show_default=True),
        click.option("--zero-prob", type=float, default=0.25, show_default=True,
                     help="random-rational: chance that a weight is zeroed"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _tree_options(fn):
    options = [
        click.option("--topology", type=click.Choice(list(TOPOLOGIES)), default=None,
                     help="tree shape  [default: complete; chain with --adapter chain or flat-chain]"),
        click.option("--depth", type=int, default=2, show_default=True, help="draft depth H"),
        click.option("--branching", type=int, default=2, show_default=True, help="branching b"),
        click.option("--parents", help="explicit parent list, e.g. '-1,0,0,1' (implies --topology explicit)"),
        click.option("--drafting", type=click.Choice(list(DRAFTERS)), default="iid", show_default=True),
        click.option("--budget", type=int, default=6, show_default=True, help="dyspec: draft tokens per tree"),
        click.option("--threshold", type=float, default=0.1, show_default=True,
                     help="dyspec-threshold: least estimated value to sample at"),
        click.option("--max-depth", type=int, default=4, show_default=True, help="dyspec-threshold: depth cap"),
        click.option("--corpus", "corpus_path", type=click.Path(dir_okay=False),
                     help="aded: JSON list of token sequences (default: 32 sampled from the draft model)"),
        click.option("--mcts-iterations", type=int, default=150, show_default=True, help="aded: MCTS iterations"),
        click.option("--candidates", type=int, default=24, show_default=True, help="aded: candidate sequences"),
        click.option("--candidate-length", type=int, default=4, show_default=True, help="aded: tokens per candidate"),
        click.option("--verifier", help="built-in name (specproof list) or module:function"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _named_verifier(tree: dict):
    """The ``--verifier`` of the tree options, required."""
    if tree["verifier"] is None:
        raise InvalidParameterError("verifier", "missing: pass --verifier NAME (specproof list) or module:function")
    return load_verifier(tree["verifier"])


def _shape(topology: str | None, depth: int, branching: int, parents: str | None):
    """:func:`shape_from_options`, refusing ``--parents`` beside a ``--topology``, ``--depth`` or
    ``--branching`` given on the command line (the parent list fixes all three)."""
    if parents is not None:
        ctx = click.get_current_context(silent=True)
        given = _given(ctx, ("topology", "depth", "branching")) if ctx is not None else []
        if given:
            raise InvalidParameterError("parents", f"--parents fixes the whole tree: drop --{given[0]} (or drop "
                                                   "--parents)")
    return shape_from_options(topology, depth, branching, parents)


def _build_drafter(model, tree: dict):
    """The drafter of the tree options, with the configuration to print and store."""
    scheme = tree["drafting"]
    topology, shape = _shape(tree["topology"], tree["depth"], tree["branching"], tree["parents"])
    corpus = read_json(tree["corpus_path"], "corpus") if tree["corpus_path"] else None
    if corpus is not None and not (isinstance(corpus, list) and all(isinstance(c, list) for c in corpus)):
        raise SpecproofError("corpus", "must be a JSON list of token-id lists")
    options = DrafterOptions(tree["budget"], tree["threshold"], tree["max_depth"],
                             AdedConfig(tree["mcts_iterations"], tree["candidate_length"], tree["candidates"]),
                             corpus)
    drafter = make_drafter(scheme, shape, model, options)
    if tree["verifier"] is not None:
        check_pairing(tree["verifier"], scheme)
    config = drafter.describe()
    if scheme in DRAFTING and topology != "explicit":
        config["branching"] = tree["branching"]
    return drafter, config


def _model_for(model_kind: str, table_path: str | None, vocab: int, rho: float, tau_p: float, tau_q: float,
               zero_prob: float):
    """The model of each seed (one table model for every seed)."""
    return lambda s: make_model(model_kind, table_path, vocab, s, rho, tau_p, tau_q, zero_prob)


def _check_count(field: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise InvalidParameterError(field, f"must be at least {minimum}, got {value}")


def _certificate_lines(cert, indent: str = "  ") -> list[str]:
    lines = [f"{indent}TVD to q^(H+1) = {human_number(cert.tvd)}",
             f"{indent}E[accepted] = {human_number(cert.expected_accepted)}; block efficiency "
             f"{human_number(cert.expected_accepted + 1)}"]
    if cert.off_support:
        lines.append(f"{indent}support violation: mass {human_number(cert.off_support)} on sequences the target "
                     "gives probability 0 (LOSSY whatever the tolerance)")
    if cert.counterexample is not None:
        ce = cert.counterexample
        lines.append(f"{indent}counterexample: sequence {list(ce.sequence)} has probability "
                     f"{human_number(ce.verifier_prob)} under the verifier, {human_number(ce.target_prob)} under "
                     "the target")
    lines.append(f"{indent}{cert.executions:,} " + ("executions enumerated" if cert.method == "enumerate" else
                                                     "sub-problems of the exact recursion solved (LV: drafts "
                                                     "above the deepest level)"))
    return lines


def _kernel_options(fn):
    options = [
        click.option("--kernel", help="an unmodified torch function module:function, certified through --adapter "
                                      "(instead of --verifier; docs/kernels.md)"),
        click.option("--adapter", default="tree", show_default=True,
                     help="the kernel's calling convention: chain, flat-chain, tree, uniforms or module:function"),
        click.option("--dtype", type=click.Choice(["float64", "float32"]), default="float64", show_default=True,
                     help="the kernel's input dtype"),
        click.option("--uniforms", type=click.Choice(["continuous", "grid"]), default="continuous",
                     show_default=True, help="model of a torch uniform: U(0,1), or torch's float grid k·2^-b"),
        click.option("--kernel-kwargs", help="fixed keyword arguments of the kernel, NAME=VALUE,..."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _certified(tree: dict, kernel: str | None, adapter: str, dtype: str, uniforms: str, kernel_kwargs: str | None):
    """``(name, verifier, what to print about its arithmetic)`` for ``--verifier`` or ``--kernel``."""
    if kernel is None:
        for option, value, default in (("adapter", adapter, "tree"), ("dtype", dtype, "float64"),
                                       ("uniforms", uniforms, "continuous"), ("kernel-kwargs", kernel_kwargs, None)):
            if value != default:
                raise InvalidParameterError(option, f"--{option} applies to --kernel only")
        return (*_named_verifier(tree), None)
    if tree["verifier"] is not None:
        raise InvalidParameterError("kernel", "pass --verifier or --kernel, not both")
    for option, spec in (("kernel", kernel), ("adapter", adapter)):  # a misspelt module fails before torch loads
        if ":" in spec:
            check_importable(spec.partition(":")[0], option)
    require("torch", "--kernel", "kernel")
    from simulator.torch_path.kernels import CHAIN_ADAPTERS, Kernel, parse_kwargs  # torch only for a kernel
    if tree["topology"] is None and tree["parents"] is None and adapter in CHAIN_ADAPTERS:
        tree["topology"] = "chain"
    verifier = Kernel(kernel, adapter, dtype, uniforms, parse_kwargs(kernel_kwargs))
    return kernel, verifier, verifier


def _case_options(fn):
    options = [
        click.option("--case", "case_path", type=click.Path(dir_okay=False),
                     help="a reproducer (hunt, gate, --shrink): its model table, shape, drafting and subject; "
                          "--verifier or --kernel certify another subject on it"),
        click.option("--shrink", is_flag=True, help="on a lossy verdict, shrink it to a small reproducer, written to "
                                                    "--case-out and into --json"),
        click.option("--shrink-time", type=float, default=10.0, show_default=True, help="seconds the shrinker may take"),
        click.option("--case-out", type=click.Path(dir_okay=False), default="specproof-case.json", show_default=True,
                     help="--shrink: where the reproducer goes"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _given(ctx: click.Context, names) -> list[str]:
    """The options among ``names`` given on the command line (not left at their defaults)."""
    return [n for n in names if ctx.get_parameter_source(n) is click.core.ParameterSource.COMMANDLINE]


@main.command()
@_model_options
@click.option("--seeds", "pairs", type=int, default=1, show_default=True,
              help="certify model seeds --seed … --seed+K−1, stopping at the first lossy pair")
@_tree_options
@_kernel_options
@_case_options
@click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True)
@click.option("--method", type=click.Choice(METHODS), default="enumerate", show_default=True,
              help="enumerate: run the rule on every draft and choice; recursion: the rule's exact recursion (trv, "
                   "trv-iid: over subtrees; lv-*: the deepest level in closed form), for trees enumeration cannot "
                   "reach (docs/engines.md)")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="write the certificate here")
@_limit_options
@click.pass_context
def certify(ctx, model_kind, table_path, vocab, seed, rho, tau_p, tau_q, zero_prob, pairs, kernel, adapter, dtype,
            uniforms, kernel_kwargs, case_path, shrink, shrink_time, case_out, arithmetic, method, json_out,
            max_executions, timeout, **tree) -> None:
    """Certify a verifier, or an unmodified torch kernel, exactly: TVD of its completed output law to q^(H+1).
    Exit 0 lossless, 1 lossy."""
    _check_count("seeds", pairs, 1)
    check_output_file(json_out, "json")
    if shrink:
        check_output_dir(Path(case_out).parent, "case_out")  # made if missing
    if case_path is not None:
        if method != "enumerate":  # a reproducer is certified as it was found: by enumeration
            raise InvalidParameterError("method", "--case certifies by enumeration; --method recursion applies to "
                                                  "a model and shape given by the options")
        return _certify_case(ctx, case_path, tree, kernel, adapter, dtype, uniforms, kernel_kwargs, shrink,
                             shrink_time, case_out, json_out, max_executions, timeout)
    if model_kind == "table" and pairs > 1:
        raise InvalidParameterError("seeds", "a table model has no seed: --seeds K needs a synthetic or "
                                             "random-rational model")
    name, fn, kernel_spec = _certified(tree, kernel, adapter, dtype, uniforms, kernel_kwargs)
    check_arithmetic_for(name, arithmetic)
    model_for = _model_for(model_kind, table_path, vocab, rho, tau_p, tau_q, zero_prob)

    def pair(s: int):  # the drafter is built per model: ADED's corpus comes from the draft model
        model = model_for(s)
        return model, _build_drafter(model, tree)[0]

    model = model_for(seed)
    drafter, drafting = _build_drafter(model, tree)
    described = {} if kernel_spec is None else kernel_spec.describe()
    with _mass_bar(pairs, f"certify {name}") as bar, _limited(max_executions, timeout, bar.update) as cap:
        if method == "enumerate":  # the size estimate is enumeration's
            estimate_round(model, drafter, fn, arithmetic).check(cap)
        result = certify_pairs(pair, range(seed, seed + pairs), fn, arithmetic,
                               config=lambda s: {**model_for(s).describe(), **drafting, **described}, method=method)
    cert = result.deciding
    click.echo(f"{name}: {'LOSSLESS' if result.lossless else 'LOSSY'} ({_exactness(cert, kernel_spec, arithmetic)})")
    click.echo(f"  model {cert.config['model']}, " + ", ".join(f"{k} {v}" for k, v in drafting.items())
               + (f"; shown for model seed {result.deciding_seed}" if pairs > 1 else ""))
    for line in _certificate_lines(cert):
        click.echo(line)
    if kernel_spec is not None:
        click.echo(f"  tolerance: {cert.tolerance_reason}")
    click.echo(f"  covers: {result.coverage()}")
    out = {**result.to_json(), "verifier": name}
    if shrink and not result.lossless:
        what = subject(described or name)
        out["reproducer"] = _shrunk(capture(*pair(result.deciding_seed), what, arithmetic), what, shrink_time,
                                    case_out)
    _write_json(json_out, out)
    sys.exit(0 if result.lossless else 1)


def _exactness(cert, kernel_spec, arithmetic: str) -> str:
    if kernel_spec is not None:
        return (f"torch kernel through adapter {kernel_spec.adapter}, {kernel_spec.dtype}, {kernel_spec.uniforms} "
                f"uniforms; tolerance {human_number(cert.tolerance)}")
    return "exactly, rationals" if arithmetic == "fraction" else f"float64, tolerance {cert.tolerance:g}"


def _shrunk(case, what, seconds: float, case_out: str) -> dict:
    """Shrink a lossy case, write the reproducer, say so; its JSON for the certificate."""
    found = shrink_case(case, seconds, what)
    small = found.case
    path = _kept(lambda: small.write(case_out, found.certificate))
    if path is None:
        return small.to_json(found.certificate)
    ended = "complete" if found.complete else f"stopped at the {seconds:g} s bound"
    click.echo(f"  reproducer: {small.nodes} draft node(s), vocab {small.vocab}, depth {small.depth} "
               f"({found.kept} shrinking steps, {ended}), TVD {human_number(found.certificate.tvd)}; "
               f"written to {path} (specproof certify --case {path})")
    return small.to_json(found.certificate)


def _certify_case(ctx, case_path, tree, kernel, adapter, dtype, uniforms, kernel_kwargs, shrink, shrink_time,
                  case_out, json_out, max_executions, timeout) -> None:
    """``certify --case``: the reproducer's subject (or --verifier/--kernel) on its table, shape and drafting."""
    held = _given(ctx, ("model_kind", "table_path", "vocab", "seed", "rho", "tau_p", "tau_q", "zero_prob", "pairs",
                        "topology", "depth", "branching", "parents", "drafting", "budget", "threshold", "max_depth",
                        "corpus_path", "arithmetic"))
    if held:
        raise InvalidParameterError("case", f"the case holds the model, tree, drafting and arithmetic: drop "
                                            f"--{held[0].replace('_path', '').replace('_', '-')}")
    case = load_reproducer(case_path)
    if tree["verifier"] is not None or kernel is not None:
        name, _, kernel_spec = _certified(tree, kernel, adapter, dtype, uniforms, kernel_kwargs)
        what = subject(kernel_spec.describe() if kernel_spec is not None else name)
    else:
        what, kernel_spec = subject(case.subject, "case.subject"), None
    check_arithmetic_for(what.name, case.arithmetic)
    with _mass_bar(1, f"certify {what.name}") as bar, _limited(max_executions, timeout, bar.update):
        cert = case.certify(what)
    kernel_obj = what.fn if "kernel" in what.description else None
    click.echo(f"{what.name}: {'LOSSLESS' if cert.lossless else 'LOSSY'} "
               f"({_exactness(cert, kernel_obj, case.arithmetic)})")
    click.echo(f"  case {case_path}: table model, vocab {case.vocab}, " +
               ", ".join(f"{k} {v}" for k, v in case.shape_json().items()))
    for line in _certificate_lines(cert):
        click.echo(line)
    click.echo("  covers: this case's model pair, not every pair")
    out = {**cert.to_json(), "verifier": what.name, "case": str(case_path)}
    if shrink and not cert.lossless:
        out["reproducer"] = _shrunk(case, what, shrink_time, case_out)
    _write_json(json_out, out)
    sys.exit(0 if cert.lossless else 1)


QUICK_TABLES = (1,)
QUICK_SEEDS, QUICK_TRIALS = 3, 1000


@main.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="specproof-report", show_default=True,
              help="folder for the reports (the committed ones are made with --full --out reports)")
@click.option("--full", is_flag=True, help="the paper's scale: 20 seeds, Table 1 at 1e6 and ablations at 1e5 trials")
@click.option("--tables", default=None, help="comma-separated paper tables (1,4-15); quick default: 1; --full: all")
@click.option("--seeds", "study_seeds", type=int, default=None, help="study: model seeds per cell")
@click.option("--trials", "study_trials", type=int, default=None, help="study: trials per seed")
@click.option("--verifiers", default=None, help="comma-separated: run only these methods' cells (others: not run)")
@click.option("--jobs", type=int, default=2, show_default=True, help="worker processes for the study")
@click.option("--scheduler", default=None,
              help="run the study's cells on Dask: 'local' (a LocalCluster of --jobs workers) or a scheduler address")
@click.option("--device", default=None, help="the study's batched rounds with torch on this device (cpu, cuda); "
                                             "default: numpy. The same records either way")
@click.option("--no-run", is_flag=True, help="write the reports from what the store holds, computing nothing new")
@click.option("--store", "store_dir", type=click.Path(file_okay=False), default=None,
              help="resumable cell store (default OUT/store)")
@click.option("--cert-vocab", type=int, default=3, show_default=True, help="certification table: vocabulary")
@click.option("--cert-depth", type=int, default=2, show_default=True, help="certification table: depth")
@click.option("--cert-branching", type=int, default=2, show_default=True, help="certification table: branching")
@click.option("--cert-seed", type=int, default=0, show_default=True, help="certification table: model seed")
@click.option("--cert-arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True,
              help="certification table: arithmetic")
@click.option("--max-executions", type=int, default=DEFAULT_MAX_EXECUTIONS, show_default=True,
              help="most executions one certificate of the table may enumerate (0: no limit)")
@click.pass_context
def report(ctx, out_dir, full, tables, study_seeds, study_trials, verifiers, jobs, scheduler, device, no_run, store_dir,
           cert_vocab, cert_depth, cert_branching, cert_seed, cert_arithmetic, max_executions) -> None:
    """The main job: the certification table and the layer_verification.txt toy study, written to OUT."""
    chosen = _parse_tables(tables) if tables else (tuple(PAPER_TRIALS) if full else QUICK_TABLES)
    for field, value, minimum in (("seeds", study_seeds, 1), ("trials", study_trials, 2), ("jobs", jobs, 1)):
        if value is not None:
            _check_count(field, value, minimum)
    seeds = study_seeds if study_seeds is not None else (PAPER_SEEDS if full else QUICK_SEEDS)
    trials = {t: study_trials if study_trials is not None else (PAPER_TRIALS[t] if full else QUICK_TRIALS)
              for t in chosen}
    cells = [cell for t in chosen for _, _, cell in paper_cells(t, seeds, trials[t])]
    if verifiers:
        wanted = {v.strip() for v in verifiers.split(",")}
        unknown = wanted - {c.verifier for c in cells}
        if unknown:
            raise SpecproofError("verifiers", f"no cells for {sorted(unknown)} in tables {list(chosen)}")
        cells = [c for c in cells if c.verifier in wanted]
    out = Path(out_dir)
    check_output_dir(out, "out")
    if store_dir is not None:
        check_output_dir(store_dir, "store")
    store = Store(store_dir or out / "store")
    with _limited(max_executions, 0) as cap:
        try:
            model = SyntheticModel(vocab=cert_vocab, seed=cert_seed)
            plans = plan_table(model, cert_depth, cert_branching, cert_arithmetic)
        except InvalidParameterError as err:  # the table's options are --cert-…
            message = err.message
            for option in ("vocab", "depth", "branching", "seed"):
                message = message.replace(f"--{option}", f"--cert-{option}")
            raise InvalidParameterError(f"cert_{err.field}", message) from None
        for estimate in estimate_table(model, plans):  # refused before anything is written
            _cert_options(estimate).check(cap)
    from contextlib import nullcontext

    # A sweep holds the store's lock to its end: a second sweep on the store refuses at once, naming the lock and
    # its holder. --no-run only reads the store (its cache entries are written whole, by a rename) and takes none,
    # so a sweep running meanwhile does not hold it up.
    with nullcontext() if no_run else store.lock():
        with _limited(max_executions, 0) as cap:
            out.mkdir(parents=True, exist_ok=True)
            ok = _certification_report(out, store, model, plans, cert_depth, cert_branching, cert_arithmetic, cap)
        unique = list(dict.fromkeys(cells))
        total = sum(c.seeds * c.trials for c in unique)
        with _bar(len(unique) * seeds, "cells x seeds", "seed") as bar, _bar(total, "trials", "trial") as trial_bar:
            done = sum(1 for c in unique for s in range(c.seeds) if store.load(c, s) is not None)
            bar.update(done)
            if not no_run:
                run_cells(unique, store, jobs, lambda cell, s, n: (bar.update(1), trial_bar.update(n)), scheduler,
                          device)
        write_study_report(out, chosen, store, seeds, trials, _command(ctx))
    click.echo(f"written to {out}/")
    sys.exit(0 if ok else 1)


def _cert_options(estimate: SizeEstimate) -> SizeEstimate:
    """The options of the report's certification table (``--cert-…``; its dynamic drafters' settings are fixed)."""
    return replace(estimate, options=tuple(f"cert-{o}" for o in estimate.options
                                           if o in ("vocab", "depth", "branching")))


def _parse_tables(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        try:
            out.extend(range(int(a), int(b or a) + 1))
        except ValueError:
            raise SpecproofError("tables", f"expected numbers like 1,4-6, got {text!r}") from None
    bad = [t for t in out if t not in PAPER_TRIALS]
    if bad:
        raise SpecproofError("tables", f"no toy table {bad[0]}; choose from {sorted(PAPER_TRIALS)}")
    return tuple(dict.fromkeys(out))


def _certification_report(out: Path, store: Store, model: SyntheticModel, plans: list[Planned], depth: int,
                          branching: int, arithmetic: str, cap: int | None) -> bool:
    """``certification.md/.json``, computed once per configuration and code version (the store's cache)."""
    title = (f"Certification table: synthetic model (V={model.vocab}, rho=0.5, tau_p=tau_q=1, seed={model.seed}), "
             f"depth {depth}, branching {branching}, {arithmetic} arithmetic")

    def compute() -> dict:
        ticks = _StageBars()
        try:
            rows = certification_table(model, depth, branching, arithmetic, tick=ticks)
        finally:
            ticks.close()
        return {"markdown": table_markdown(rows, title), "ok": all(r.as_expected for r in rows),
                "rows": [{"verifier": r.verifier, "topology": r.topology, "drafting": r.drafting,
                          "expected_lossless": r.expected_lossless, "verdict": r.verdict.replace("*", ""),
                          **r.certificate.to_json()} for r in rows]}

    params = {"model": model.describe(), "depth": depth, "branching": branching, "arithmetic": arithmetic,
              "max_executions": cap}
    table = store.cached("certification", params, compute)
    (out / "certification.md").write_text(table["markdown"])
    write_json(out / "certification.json", table["rows"])
    click.echo(table["markdown"])
    return table["ok"]


@main.command()
@_model_options
@_tree_options
@click.option("--seeds", type=int, default=5, show_default=True, help="model seeds --seed … --seed+K−1")
@click.option("--trials", type=int, default=10_000, show_default=True, help="rounds per model seed")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="write the summary here")
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True,
              help="wall-clock limit of the run in seconds (0: none)")
@click.option("--device", default=None, help="run the batched rounds with torch on this device (cpu, cuda, "
                                             "cuda:1); default: numpy. The same numbers either way")
def mc(model_kind, table_path, vocab, seed, rho, tau_p, tau_q, zero_prob, seeds, trials, json_out, timeout, device,
       **tree) -> None:
    """Monte Carlo: mean accepted length (SE across model seeds), TVD vs the paper's baseline, a powered test.
    Exit 1 when the test rejects the target."""
    check_output_file(json_out, "json")
    name, fn = _named_verifier(tree)
    model_for = _model_for(model_kind, table_path, vocab, rho, tau_p, tau_q, zero_prob)
    drafter, drafting = _build_drafter(model_for(seed), tree)  # validates the options once, up front
    _check_count("seeds", seeds, 1)
    _check_count("trials", trials, 2)
    from simulator.montecarlo.engine import ANNOUNCE_SECONDS

    def estimated(run) -> None:
        """After the first seed's pilot: refuse a run estimated past --timeout, show the estimate of a long one."""
        run.check(timeout)
        if run.seconds >= ANNOUNCE_SECONDS:
            tqdm.write(f"mc {name}: {run.describe()}", file=sys.stderr)

    with _bar(seeds * trials, f"mc {name}", "trial") as bar, time_limit(timeout):
        summary = monte_carlo(model_for, drafter, name, fn, seeds, trials, bar.update, first_seed=seed, device=device,
                              estimate=estimated)
    which = f"model seeds {seed}–{seed + seeds - 1}" if seeds > 1 else f"model seed {seed}"
    click.echo(f"{name}, " + ", ".join(f"{k} {v}" for k, v in drafting.items()) + f": {which} x {trials} trials")
    se_kind = "across model seeds" if seeds > 1 else "within the one seed"
    click.echo(f"  accepted length {summary.accept_len_mean:.4f} (SE {summary.accept_len_se:.4f}, {se_kind})")
    click.echo(f"  TVD of completed samples to q^(H+1) {summary.tvd:.4f}; direct target samples "
               f"{summary.baseline_tvd:.4f}")
    verdict = "REJECTS" if summary.test_rejects else "does not reject"
    click.echo(f"  chi-square on the first {summary.test_prefix} token(s) ({summary.test_cells} cells), "
               f"alpha {summary.test_alpha:g} over all seeds: {verdict} the target "
               f"(min p {summary.test_min_p_value:.3g}); "
               f"detects any TVD >= {summary.detectable_tvd:.4f} on that law with power 0.9")
    _write_json(json_out, summary.to_json())
    sys.exit(1 if summary.test_rejects else 0)


@main.command()
@_model_options
@_tree_options
@click.option("--tokens", type=int, default=8, show_default=True, help="tokens to generate (N)")
@click.option("--exact", "exact_law", is_flag=True, help="the exact law of the first N tokens (small models only)")
@click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True,
              help="--exact: arithmetic")
@click.option("--seeds", type=int, default=5, show_default=True,
              help="Monte Carlo: model seeds --seed … --seed+K−1")
@click.option("--trials", type=int, default=1000, show_default=True, help="Monte Carlo: generations per seed")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="write the result here")
@_limit_options
def generate(model_kind, table_path, vocab, seed, rho, tau_p, tau_q, zero_prob, tokens, exact_law, arithmetic, seeds,
             trials, json_out, max_executions, timeout, **tree) -> None:
    """Several draft-verify rounds until N tokens exist, drafter state carried across rounds: the exact law of
    the first N tokens against the target's (--exact; exit 1 when lossy), or Monte Carlo accepted per round."""
    check_output_file(json_out, "json")
    name, fn = _named_verifier(tree)
    model_for = _model_for(model_kind, table_path, vocab, rho, tau_p, tau_q, zero_prob)
    model = model_for(seed)
    drafter, drafting = _build_drafter(model, tree)
    label = ", ".join(f"{k} {v}" for k, v in drafting.items())
    if exact_law:
        check_arithmetic_for(name, arithmetic)
        _check_count("tokens", tokens, 1)
        with _mass_bar(1, f"generate {name}") as bar, _limited(max_executions, timeout, bar.update) as cap:
            estimate_generation(model, drafter, fn, tokens, arithmetic).check(cap)
            result = generation_law(model, drafter, fn, tokens, arithmetic)
        verdict = "LOSSLESS" if result.lossless else "LOSSY"
        click.echo(f"{name}: {verdict} over the first {tokens} tokens ({label}; model {model.describe()['model']}, "
                   f"seed {seed})")
        click.echo(f"  TVD to q^{tokens} = {human_number(result.tvd)}; E[rounds] = "
                   f"{human_number(result.expected_rounds)}; "
                   f"E[accepted draft tokens] = {human_number(result.expected_accepted)}")
        if result.counterexample is not None:
            ce = result.counterexample
            click.echo(f"  counterexample: {list(ce.sequence)} has {human_number(ce.verifier_prob)} vs target "
                       f"{human_number(ce.target_prob)}")
        click.echo(f"  covers: this model pair (seed {seed}), not every pair")
        out = {"verifier": name, "tokens": tokens, "lossless": result.lossless,
               "tvd": to_json_number(result.tvd, arithmetic),
               "expected_rounds": to_json_number(result.expected_rounds, arithmetic),
               "expected_accepted": to_json_number(result.expected_accepted, arithmetic),
               "model": model.describe(), **drafting}
    else:
        with _bar(seeds * trials, f"generate {name}", "generation") as bar, time_limit(timeout):
            summary = run_generations(model_for, drafter, name, fn, seeds, trials, tokens, bar.update,
                                      first_seed=seed)
        click.echo(f"{name}, {label}: model seeds {seed}–{seed + seeds - 1} x {trials} generations of {tokens} "
                   "tokens")
        se = ("SE " + f"{summary.accepted_per_round_se:.4f}" if summary.accepted_per_round_se is not None
              else f"no SE: {summary.se_note}")
        click.echo(f"  accepted per round {summary.accepted_per_round:.4f} ({se}); rounds {summary.rounds_mean:.3f}")
        out = {**summary.to_json(), **drafting}
    _write_json(json_out, out)
    sys.exit(0 if not exact_law or result.lossless else 1)


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

    _check_count("max_new_tokens", max_new_tokens, 1)
    _, shape = _shape(topology, depth, branching, parents)
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
@click.option("--instances", type=int, default=40, show_default=True, help="random models per DySpec drafter")
@click.option("--seeds", type=int, default=10, show_default=True, help="model seeds of the Monte Carlo comparison")
@click.option("--trials", type=int, default=200, show_default=True, help="generations per model seed")
@click.option("--tokens", type=int, default=10, show_default=True, help="tokens per generation")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the random instances")
@click.pass_context
def dynamic(ctx, out_dir: str, instances: int, seeds: int, trials: int, tokens: int, seed: int) -> None:
    """DySpec's and ADED's drafters: exact certificates, D.1 greedy check, accepted tokens per round vs fixed trees.
    Exit 1 when a rule expected lossless is lossy on some instance."""
    for field, value, minimum in (("instances", instances, 1), ("seeds", seeds, 2), ("trials", trials, 1),
                                  ("tokens", tokens, 1)):
        _check_count(field, value, minimum)
    check_output_dir(out_dir, "out")
    ticks = _StageBars()
    try:
        ok = write_dynamic_report(Path(out_dir), instances, seeds, trials, tokens, seed, _command(ctx), ticks)
    finally:
        ticks.close()
    click.echo(f"written to {out_dir}/dynamic.md")
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="specproof-report", show_default=True)
@click.pass_context
def kernels(ctx, out_dir: str) -> None:
    """Certify every torch kernel specproof knows, unmodified: transformers' sampler, the torch path's kernels
    black-box, the example kernels with their bugs. Writes kernels.md/json; exit 1 on a verdict against its
    expectation (docs/kernels.md)."""
    require("torch", "specproof kernels", "kernels")
    check_output_dir(out_dir, "out")
    from simulator.reports.kernels import write_kernel_report  # torch only here

    ticks = _StageBars()
    try:
        ok = write_kernel_report(Path(out_dir), _command(ctx), ticks)
    finally:
        ticks.close()
    click.echo(f"written to {out_dir}/kernels.md")
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--scale", type=float, default=1.0, show_default=True,
              help="multiplies every check's default instance count")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--check", "only", multiple=True, type=click.Choice(list(CHECKS)), help="run only these (repeatable)")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), help="write the Markdown report here")
@click.pass_context
def theorems(ctx, scale: float, seed: int, only: tuple[str, ...], out_path: str | None) -> None:
    """Check the papers' claims on random exact instances: claim, instances, worst margin, verdict."""
    if not scale > 0:
        raise SpecproofError("scale", f"must be positive, got {scale}")
    check_output_file(out_path, "out")
    ticks = _StageBars()
    try:
        checks = run_checks(scale, seed, only or None, tick=ticks)
    finally:
        ticks.close()
    text = theorems_markdown(checks, _command(ctx))
    click.echo(text)
    if out_path:
        _kept(lambda: write_text(out_path, text, "out"))
    sys.exit(0 if all(c.as_expected for c in checks) else 1)


from simulator.cli import checks, proofs  # noqa: E402,F401  (register hunt, gate, zoo and prove on main)
