"""What the commands share: the model, tree, kernel, case and limit options, progress bars, output writing and
the drafter and subject built from the options."""

from __future__ import annotations

import math
import os
import shlex
import sys
from contextlib import contextmanager
from fractions import Fraction
from typing import Callable, Iterator, Sequence

import click
from tqdm import tqdm

from simulator.drafting.aded import AdedConfig
from simulator.drafting.drafter_registry import DRAFTERS, DrafterOptions, make_drafter
from simulator.drafting import DRAFTING
from simulator.errors import InvalidParameterError, OutputError, SpecproofError
from simulator.jsonfile import read_json, write_json
from simulator.limits import DEFAULT_MAX_EXECUTIONS, DEFAULT_TIMEOUT, limits, progress_note, time_limit
from simulator.models import MODELS, make_model
from simulator.numeric import Number, human_number
from simulator.trees import MAX_TREE_NODES, TOPOLOGIES, shape_from_options
from simulator.usercode import add_import_path, check_importable, require
from simulator.verifiers import load_verifier
from simulator.verifiers.registry import check_pairing
from exact.subject import Subject, parse_schemes, subject
from specproof.gate.shrink import shrink as shrink_case


#: The longest finite limit or bound in seconds (about 31 years): a longer one is refused rather than clamped, and
#: ``inf`` says "no limit" where an option takes it.
MAX_SECONDS = 1e9
#: The most worker processes ``--jobs`` may start.
MAX_JOBS = 512


class OptionValueError(click.BadParameter):
    """A refused option value: a click usage error (exit 2), shown as every typed error is,
    ``error: FIELD: …``, naming the option."""

    def show(self, file=None) -> None:
        name = max(self.param.opts, key=len).lstrip("-").replace("-", "_") if self.param is not None else "option"
        hint = self.param.get_error_hint(self.ctx) if self.param is not None else ""
        click.echo(f"error: {name}: invalid {hint}: {self.message}", err=True)


class _Refusing:
    """Mixin: a parameter type whose refusals are :class:`OptionValueError`."""

    def fail(self, message: str, param=None, ctx=None):
        raise OptionValueError(message, ctx=ctx, param=param)


class Whole(_Refusing, click.IntRange):
    """An integer option in ``[minimum, maximum]`` (no bound where ``None``): ``inf``, ``nan``, a fraction and a
    value out of range are refused, naming the option."""

    name = "integer"

    def __init__(self, minimum: int | None = None, maximum: int | None = None) -> None:
        super().__init__(minimum, maximum)


class Real(_Refusing, click.FloatRange):
    """A finite number option in a range; with ``inf_ok``, ``inf`` too (the option's help says what it means).
    ``nan`` is refused, which click's ``FloatRange`` lets through (every comparison with it is false)."""

    name = "number"

    def __init__(self, minimum: float | None = None, maximum: float | None = None, min_open: bool = False,
                 max_open: bool = False, inf_ok: bool = False) -> None:
        super().__init__(minimum, maximum, min_open, max_open)
        self.inf_ok = inf_ok

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if math.isnan(number) or (math.isinf(number) and not (self.inf_ok and number > 0)):
            self.fail(f"{value!r} is not a finite number" + (" (inf: no bound)" if self.inf_ok else ""), param, ctx)
        return number if math.isinf(number) else super().convert(number, param, ctx)


class Limit(_Refusing, click.ParamType):
    """A limit: a number ≥ 0, where 0 and ``inf`` both mean no limit (``inf`` arrives as 0, so the code behind
    the option knows one "none"). ``nan``, a negative number and, for seconds, a finite value past
    :data:`MAX_SECONDS` are refused naming the option; a whole number is required where ``integer``."""

    def __init__(self, integer: bool = False) -> None:
        self.integer = integer
        self.name = "integer limit" if integer else "seconds"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            text = repr(value)
        else:
            text = str(value).strip()
        if text.lower() in ("inf", "+inf", "infinity", "+infinity"):
            return 0
        try:
            number = int(text) if self.integer else float(text)
        except ValueError:
            self.fail(f"{value!r} is not {'a whole number' if self.integer else 'a number'} ≥ 0 (0 or inf: no "
                      "limit)", param, ctx)
        if math.isnan(number) or number < 0:
            self.fail(f"{value!r} is not a limit ≥ 0 (0 or inf: no limit)", param, ctx)
        if not self.integer and number > MAX_SECONDS:
            self.fail(f"{value!r} is past {MAX_SECONDS:g} s: give 0 or inf for no limit", param, ctx)
        return number


class Output(click.Path):
    """A file or folder a command writes (``--out``, ``--json``, ``--case-out`` …): the command checks it with
    :func:`simulator.jsonfile.check_output_file` or ``check_output_dir`` before its work starts; the type marks the
    option so that tests find every output option."""

    def __init__(self, folder: bool = False) -> None:
        super().__init__(file_okay=not folder, dir_okay=folder)


#: The numeric types the command line's options use; tests/test_option_values.py holds every numeric option to them.
NUMERIC_TYPES = (Whole, Real, Limit)
SEED = Whole(0)
#: a draft tree's depth or branching: no tree may have more than MAX_TREE_NODES nodes
TREE_DEPTH, TREE_BRANCHING = Whole(0, MAX_TREE_NODES), Whole(1, MAX_TREE_NODES)
JOBS = Whole(1, MAX_JOBS)
SECONDS_LIMIT, COUNT_LIMIT = Limit(), Limit(integer=True)
#: a time bound of a search or shrink, where 0 is a bound (of nothing) and inf means none
BOUND_SECONDS = Real(0, MAX_SECONDS, inf_ok=True)


def command_line(ctx: click.Context) -> str:
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


def progress_bar(total: float, desc: str, unit: str = "it") -> tqdm:
    """A progress bar with an ETA on standard error, shown once a run passes two seconds (and only on a
    terminal)."""
    return tqdm(total=total, desc=desc, unit=unit, disable=None, file=sys.stderr, delay=2, **bar_width())


def bar_width() -> dict:
    """tqdm's width: the terminal's, followed as it changes; 80 columns where the terminal reports a size of 0 × 0
    (some CI and IDE terminals), with which tqdm would print nothing."""
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        columns = 0
    return {"dynamic_ncols": True} if columns > 0 else {"ncols": 80, "nrows": 24}


def mass_bar(pairs: int, desc: str) -> tqdm:
    """Progress of exact computations, in probability mass enumerated (1 per computation)."""
    return tqdm(total=pairs, desc=desc, disable=None, file=sys.stderr, delay=2, **bar_width(),
                bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]")


class StageBars:
    """``tick(stage, total)``: one more unit of ``stage``; a bar per stage, opened on its first tick."""

    def __init__(self) -> None:
        self.stage: str | None = None
        self.bar: tqdm | None = None

    def __call__(self, stage: str, total: int) -> None:
        if stage != self.stage:
            self.close()
            self.stage, self.bar = stage, progress_bar(total, stage)
        self.bar.update(1)  # type: ignore[union-attr]

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def limit_options(fn):
    options = [
        click.option("--max-executions", type=COUNT_LIMIT, default=DEFAULT_MAX_EXECUTIONS, show_default=True,
                     help="most executions one exact computation may enumerate (estimated up front; 0 or inf: no "
                          "limit)"),
        timeout_option("run"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def timeout_option(what: str, more: str = ""):
    """``--timeout``: the wall-clock limit of the ``what`` in seconds, 0 or ``inf`` for none; ``more``: the rest
    of its help."""
    return click.option("--timeout", type=SECONDS_LIMIT, default=DEFAULT_TIMEOUT, show_default=True,
                        help=f"wall-clock limit of the {what} in seconds (0 or inf: none){more}")


def shrink_time_option():
    """``--shrink-time``: the shrinker's time bound (inf: shrink until no move applies)."""
    return click.option("--shrink-time", type=BOUND_SECONDS, default=10.0, show_default=True,
                        help="seconds the shrinker may take (inf: until no move applies)")


@contextmanager
def limited(max_executions: int, timeout: float, progress=None) -> Iterator[int | None]:
    """The run under ``--max-executions`` and ``--timeout``; yields the execution limit (``None``: none)."""
    if max_executions < 0:
        raise InvalidParameterError("max_executions", f"must be ≥ 0 (0: no limit), got {max_executions}")
    cap = max_executions or None
    with time_limit(timeout, progress_note), limits(cap, progress):
        yield cap


def write_output(path: str | None, data: object, field: str = "json") -> None:
    """Write an output once the verdict is printed: a failure (a full disk) is reported on standard error,
    naming the file, and the command still exits with its verdict's code — the result is never lost."""
    if path:
        kept(lambda: write_json(path, data, field))


def kept(write: Callable[[], object]) -> object:
    """``write()``, reporting an :class:`OutputError` on standard error instead of raising it (``None``)."""
    try:
        return write()
    except OutputError as err:
        click.echo(f"error: {err.field}: {err.message} (the verdict above stands)", err=True)
        return None


def model_options(fn, kinds: tuple[str, ...] = tuple(MODELS)):
    """The model options; ``kinds``: the ``--model`` choices (``certify`` adds ``causal-lm``)."""
    options = [
        click.option("--model", "model_kind", type=click.Choice(list(kinds)), default="synthetic",
                     show_default=True),
        click.option("--table", "table_path", type=click.Path(dir_okay=False), help="table JSON (--model table)"),
        click.option("--vocab", type=Whole(2), default=3, show_default=True),
        click.option("--seed", type=SEED, default=0, show_default=True),
        click.option("--rho", type=Real(0, 1), default=0.5, show_default=True),
        click.option("--tau-p", type=Real(0, min_open=True), default=1.0, show_default=True),
        click.option("--tau-q", type=Real(0, min_open=True), default=1.0, show_default=True),
        click.option("--zero-prob", type=Real(0, 1), default=0.25, show_default=True,
                     help="random-rational: chance that a weight is zeroed"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


#: ``--schemes``: the drafting schemes a plugin claims losslessness under, over its function's ``schemes`` attribute
#: (resolved in exact/subject.py; docs/plugins.md, "Declaring the drafting schemes")
SCHEMES_OPTION = click.option("--schemes", help="comma-separated drafting schemes the verifier claims losslessness "
                                                "under (default: its schemes attribute, a built-in's registry "
                                                "entry, else iid); a run under another is a control run")


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


def tree_options(fn):
    options = [
        click.option("--topology", type=click.Choice(list(TOPOLOGIES)), default=None,
                     help="tree shape  [default: complete; chain with --adapter chain, flat-chain, vllm or sglang]"),
        click.option("--depth", type=TREE_DEPTH, default=2, show_default=True, help="draft depth H"),
        click.option("--branching", type=TREE_BRANCHING, default=2, show_default=True, help="branching b"),
        click.option("--parents", help="explicit parent list, e.g. '-1,0,0,1' (implies --topology explicit)"),
        click.option("--drafting", type=click.Choice(list(DRAFTERS)), default="iid", show_default=True),
        *DYNAMIC_OPTIONS[:3],
        click.option("--corpus", "corpus_path", type=click.Path(dir_okay=False),
                     help="aded: JSON list of token sequences (default: 32 sampled from the draft model)"),
        *DYNAMIC_OPTIONS[3:],
        click.option("--verifier", help="built-in name (specproof list) or module:function"),
        SCHEMES_OPTION,
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def dynamic_options(fn):
    """DySpec's and ADED's options (:data:`DYNAMIC_OPTIONS`), for a command that does not take the others of
    :func:`tree_options`."""
    for option in reversed(DYNAMIC_OPTIONS):
        fn = option(fn)
    return fn


def claimed_subject(tree: dict, what: object) -> Subject:
    """The subject a command runs (a name, or a kernel object), with the drafting schemes it claims: ``--schemes``
    over its declaration (exact/subject.py). Where ``--drafting`` is not given it becomes a claimed scheme
    (:meth:`Subject.default_scheme`); a run under another is a control run (:meth:`Subject.control_note`)."""
    resolved = subject(what, "verifier", parse_schemes(tree["schemes"]))
    ctx = click.get_current_context(silent=True)
    if ctx is not None and not given_options(ctx, ("drafting",)):
        tree["drafting"] = resolved.default_scheme()
    return resolved


def named_verifier(tree: dict):
    """The ``--verifier`` of the tree options, required."""
    if tree["verifier"] is None:
        raise InvalidParameterError("verifier", "missing: pass --verifier NAME (specproof list) or module:function")
    return load_verifier(tree["verifier"])


def tree_shape(topology: str | None, depth: int, branching: int, parents: str | None):
    """:func:`shape_from_options`, refusing ``--parents`` beside a ``--topology``, ``--depth`` or
    ``--branching`` given on the command line (the parent list fixes all three)."""
    if parents is not None:
        ctx = click.get_current_context(silent=True)
        given = given_options(ctx, ("topology", "depth", "branching")) if ctx is not None else []
        if given:
            raise InvalidParameterError("parents", f"--parents fixes the whole tree: drop --{given[0]} (or drop "
                                                   "--parents)")
    return shape_from_options(topology, depth, branching, parents)


def build_drafter(model, tree: dict):
    """The drafter of the tree options, with the configuration to print and store."""
    scheme = tree["drafting"]
    topology, shape = tree_shape(tree["topology"], tree["depth"], tree["branching"], tree["parents"])
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


def model_factory(model_kind: str, table_path: str | None, vocab: int, rho: float, tau_p: float, tau_q: float,
               zero_prob: float):
    """The model of each seed (one table model for every seed)."""
    check_table(model_kind, table_path)
    return lambda s: make_model(model_kind, table_path, vocab, s, rho, tau_p, tau_q, zero_prob)


def check_table(model_kind: str, table_path: str | None) -> None:
    """Refuse ``--table`` beside another model kind: the table would be ignored for the synthetic model."""
    if table_path is not None and model_kind != "table":
        raise InvalidParameterError("table", f"--table applies to --model table only (the model is {model_kind}): "
                                             "add --model table, or drop --table")


def check_device(device: str | None, field: str = "device") -> None:
    """Refuse, before any work, a torch ``--device`` this machine cannot use (a misspelt one, ``cuda`` without
    CUDA) or any device without torch, naming the extra that installs it (``None``: numpy, no torch)."""
    if device is not None:
        require("torch", f"--{field} {device}", field)
        from simulator.devices import usable_device  # imports torch

        usable_device(device, field)


def check_scheduler(address: str | None) -> None:
    """Refuse, before any work, a ``--scheduler`` that is neither ``local`` nor a Dask address with a port
    (``tcp://host:8786``, ``host:8786``): Dask's own check comes only when it connects, after the certification
    table."""
    if address is None or address == "local":
        return
    require("distributed", "--scheduler", "scheduler")
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
    except ValueError as err:
        raise InvalidParameterError("scheduler", f"'local' or a Dask scheduler's address such as tcp://host:8786, "
                                                 f"got {address!r} ({err})") from None


#: floats that stand in for a zero, ``(name, value)``: a clamp to ``finfo.tiny`` (``clamp(q - p, min=tiny)``) or to
#: the smallest subnormal leaves mass of about their size where the target has none. float16's are left out: they
#: are ordinary probabilities (6e-5, 6e-8), no sign of a clamp
FLOAT_FLOORS = (("finfo(float64).tiny", 2.0**-1022), ("float64's smallest subnormal", 2.0**-1074),
                ("finfo(float32).tiny", 2.0**-126), ("float32's smallest subnormal", 2.0**-149))
#: a support violation within this factor of a floor, either way, is traced to it (about one floor per excluded
#: token at each position a rejection reaches: at most the vocabulary times the depth)
FLOOR_FACTOR = 2**10


def support_source(mass: Number) -> str:
    """Where a support violation's ``mass`` likely comes from, when it is within :data:`FLOOR_FACTOR` of one of
    :data:`FLOAT_FLOORS` (``"; about 0.99 × finfo(float32).tiny (1.2e-38): ..."``), else ``""``."""
    for name, floor in FLOAT_FLOORS:
        ratio = Fraction(mass) / Fraction(floor)
        if Fraction(1, FLOOR_FACTOR) <= ratio <= FLOOR_FACTOR:
            return f"; about {float(ratio):.2g} × {name} ({floor:.2g}): a clamp to it where a zero belongs?"
    return ""


def certificate_lines(cert, indent: str = "  ") -> list[str]:
    lines = [f"{indent}TVD to q^(H+1) = {human_number(cert.tvd)}",
             f"{indent}E[accepted] = {human_number(cert.expected_accepted)}; block efficiency "
             f"{human_number(cert.expected_accepted + 1)}"]
    if cert.off_support:
        lines.append(f"{indent}support violation: mass {human_number(cert.off_support)} on sequences the target "
                     f"gives probability 0, LOSSY whatever the tolerance{support_source(cert.off_support)}")
    if cert.counterexample is not None:
        ce = cert.counterexample
        lines.append(f"{indent}counterexample: sequence {list(ce.sequence)} has probability "
                     f"{human_number(ce.verifier_prob)} under the verifier, {human_number(ce.target_prob)} under "
                     "the target")
    if cert.reach is not None:  # what the rule reached on this instance, and what that hides
        lines += cert.reach.lines_text(indent)
    lines.append(f"{indent}{cert.executions:,} " + ("executions enumerated" if cert.method == "enumerate" else
                                                     "sub-problems of the exact recursion solved (token "
                                                     "verification: node and context; TRV: subtrees; LV: drafts above "
                                                     "the deepest level)"))
    return lines


def kernel_options(fn):
    options = [
        click.option("--kernel", help="an unmodified torch function module:function, certified through --adapter "
                                      "(instead of --verifier; docs/kernels.md); module:Class or "
                                      "module:Class.method constructs the class (--kernel-init) and calls the "
                                      "instance or its method"),
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
                     help="a directory put first on sys.path before the adapter and kernel are imported "
                          "(repeatable)"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def certified_subject(tree: dict, kernel: str | None, adapter: str, dtype: str, uniforms: str,
                      kernel_kwargs: str | None, kernel_init: str | None = None, import_path: Sequence[str] = ()):
    """``(name, verifier, what to print about its arithmetic)`` for ``--verifier`` or ``--kernel``."""
    if kernel is None:
        for option, value, default in (("adapter", adapter, "tree"), ("dtype", dtype, "float64"),
                                       ("uniforms", uniforms, "continuous"), ("kernel-kwargs", kernel_kwargs, None),
                                       ("kernel-init", kernel_init, None), ("import-path", tuple(import_path), ())):
            if value != default:
                raise InvalidParameterError(option, f"--{option} applies to --kernel only")
        return (*named_verifier(tree), None)
    if tree["verifier"] is not None:
        raise InvalidParameterError("kernel", "pass --verifier or --kernel, not both")
    add_import_path(import_path, "import-path")
    # a misspelt module fails before torch loads; of the kernel's only the top-level package, whose lookup runs
    # nothing: its parent packages' imports must wait for the adapter's before_kernel_import hook
    for option, module in (("kernel", kernel.partition(":")[0].partition(".")[0] if ":" in kernel else ""),
                           ("adapter", adapter.partition(":")[0] if ":" in adapter else "")):
        if module:
            check_importable(module, option)
    require("torch", "--kernel", "kernel")
    from simulator.kernels.kernel import CHAIN_ADAPTERS, Kernel, parse_kwargs  # torch only for a kernel
    if tree["topology"] is None and tree["parents"] is None and adapter in CHAIN_ADAPTERS:
        tree["topology"] = "chain"
    verifier = Kernel(kernel, adapter, dtype, uniforms, parse_kwargs(kernel_kwargs),
                      init=parse_kwargs(kernel_init, "kernel-init"), import_path=tuple(import_path))
    return kernel, verifier, verifier


def case_options(fn):
    options = [
        click.option("--case", "case_path", type=click.Path(dir_okay=False),
                     help="a reproducer (hunt, gate, --shrink): its model table, shape, drafting and subject; "
                          "--verifier or --kernel certify another subject on it"),
        click.option("--shrink", is_flag=True, help="on a lossy verdict, shrink it to a small reproducer, written to "
                                                    "--case-out and into --json"),
        shrink_time_option(),
        click.option("--case-out", type=Output(), default="specproof-case.json", show_default=True,
                     help="--shrink: where the reproducer goes"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def given_options(ctx: click.Context, names) -> list[str]:
    """The options among ``names`` given on the command line (not left at their defaults)."""
    return [n for n in names if ctx.get_parameter_source(n) is click.core.ParameterSource.COMMANDLINE]


def exactness(cert, kernel_spec, arithmetic: str) -> str:
    if kernel_spec is not None:
        return (f"torch kernel through adapter {kernel_spec.adapter}, {kernel_spec.dtype} rows, judged at "
                f"{kernel_spec.judged_precision()[0]} precision, {kernel_spec.uniforms} uniforms; tolerance "
                f"{human_number(cert.tolerance)}")
    return "exactly, rationals" if arithmetic == "fraction" else f"float64, tolerance {cert.tolerance:g}"


def shrunk(case, what, seconds: float, case_out: str) -> dict:
    """Shrink a lossy case, write the reproducer, say so; its JSON for the certificate."""
    found = shrink_case(case, seconds, what)
    small = found.case
    path = kept(lambda: small.write(case_out, found.certificate))
    if path is None:
        return small.to_json(found.certificate)
    ended = "complete" if found.complete else f"stopped at the {seconds:g} s bound"
    click.echo(f"  reproducer: {small.nodes} draft node(s), vocab {small.vocab}, depth {small.depth} "
               f"({found.kept} shrinking steps, {ended}), TVD {human_number(found.certificate.tvd)}; "
               f"written to {path} (specproof certify --case {path})")
    return small.to_json(found.certificate)
