"""One frozen request per command that takes the model and tree options (``certify``, ``mc``, ``generate``,
``hunt``, ``optimum``), built from click's values by ``Request.from_click(ctx, **options)``: the options that
contradict each other are refused there, and nothing below it reads click."""

from __future__ import annotations

import keyword
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from exact.subject import parse_schemes
from simulator.errors import InvalidParameterError
from simulator.jsonfile import check_output_dir, check_output_file
from simulator.trees import Topology, shape_from_options
from simulator.verifiers.knobs import decimal
from simulator.loops.models import LOOP_MODELS
from simulator.loops.sampling import Sampling
from specproof.cli.option_groups import CAUSAL_LM
from specproof.cli.specs import CausalLMSpec, LimitSpec, LoopSpec, ModelSpec, ShapeSpec, SubjectSpec, picked

#: the options a parent list fixes
TREE_OPTIONS = ("topology", "depth", "branching")


def given_on_command_line(ctx: click.Context) -> frozenset[str]:
    """The parameters given on the command line (not left at their defaults), by name."""
    return frozenset(name for name in ctx.params
                     if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE)


def refuse_parents_beside_tree(given: frozenset[str], parents: str | None) -> None:
    """Refuse ``--parents`` beside a ``--topology``, ``--depth`` or ``--branching`` given on the command line: the
    parent list fixes all three."""
    held = [name for name in TREE_OPTIONS if name in given] if parents is not None else []
    if held:
        raise InvalidParameterError("parents", f"--parents fixes the whole tree: drop --{held[0]} (or drop "
                                               "--parents)")


def tree_of(topology: str | None, depth: int, branching: int, parents: str | None) -> tuple[str, Topology]:
    """The draft tree of the command running, for one that takes the tree options without a request (``real``,
    ``prove``)."""
    refuse_parents_beside_tree(given_on_command_line(click.get_current_context()), parents)
    return shape_from_options(topology, depth, branching, parents)


def _flag(name: str) -> str:
    """The option of a parameter name: ``--table`` for ``table_path``, ``--case`` for ``case_path``."""
    return "--" + name.removesuffix("_path").replace("_", "-")


@dataclass(frozen=True)
class TreeRequest:
    """What the model-and-tree commands share: the model pair, the shape and drafting, the subject, and which
    options were given on the command line."""

    model: ModelSpec
    shape: ShapeSpec
    subject: SubjectSpec
    given: frozenset[str]

    @staticmethod
    def parts(ctx: click.Context, options: dict) -> dict:
        """The shared parts of a request, checked: ``--table`` only with ``--model table``, ``--parents`` alone
        (it fixes the whole tree), a kernel's options only with ``--kernel``."""
        given = given_on_command_line(ctx)
        refuse_parents_beside_tree(given, options["parents"])
        model = picked(ModelSpec, options)
        if model.model_kind != CAUSAL_LM:
            model.check()
        return {"model": model, "shape": picked(ShapeSpec, options), "subject": SubjectSpec.from_options(options),
                "given": given}


#: the certify options ``--model causal-lm`` takes alone (each ``None`` when not given)
REAL_OPTIONS = ("target", "draft", "prompt", "cache_dir", "device")
#: the sampling options: a real pair's (temperature, top-k) and a loop's (all five); ``None`` when not given
SAMPLING_OPTIONS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")
#: the certify options only ``--loop`` takes (``prompt_ids`` has a default: refused when given)
LOOP_ONLY = ("loop", "reference", "max_new_tokens", "prompt_ids", "top_p", "min_p", "repetition_penalty")
#: the certify options ``--loop`` refuses: every other model's, the tree and drafting (the loop drafts as it does;
#: --depth is its draft depth), the subject, seeds, reproducers, the arithmetic and the method
NOT_LOOP = ("rho", "draft_models", "tau_p", "tau_q", "zero_prob", "pairs", "target", "draft", "prompt", "cache_dir",
            "device", "topology", "branching", "parents", "drafting", "budget", "threshold", "max_depth", "corpus_path",
            "mcts_iterations", "candidates", "candidate_length", "verifier", "verifier_kwargs", "schemes", "kernel",
            "adapter", "dtype",
            "uniforms", "kernel_kwargs", "kernel_init", "case_path", "shrink", "shrink_time", "case_out",
            "arithmetic", "method", "requests", "tvd_budget")
#: the certify options ``--model causal-lm`` refuses: the synthetic and table models', seeds, kernels, reproducers,
#: exact arithmetic and the recursions (a real pair is certified in float64 by enumeration)
NOT_REAL = ("table_path", "vocab", "seed", "rho", "draft_models", "tau_p", "tau_q", "zero_prob", "pairs", "kernel",
            "adapter", "dtype", "uniforms", "kernel_kwargs", "kernel_init", "import_path", "case_path", "shrink",
            "shrink_time", "case_out", "arithmetic", "method", "requests", "tvd_budget")
#: the certify options a batch (``--request``) refuses: each request drafts an i.i.d. chain of its own depth on its
#: own pair, the batch is one exact enumeration of one kernel
NOT_BATCH = ("pairs", "topology", "branching", "parents", "drafting", "budget", "threshold", "max_depth",
             "corpus_path", "mcts_iterations", "candidates", "candidate_length", "verifier", "verifier_kwargs", "schemes",
             "case_path",
             "shrink", "shrink_time", "case_out", "arithmetic", "method", "tvd_budget")
#: the certify options a reproducer holds (``--case``): its model, tree, drafting and arithmetic
HELD_BY_CASE = ("model_kind", "table_path", "vocab", "seed", "rho", "draft_models", "tau_p", "tau_q", "zero_prob",
                "pairs", "topology", "depth", "branching", "parents", "drafting", "budget", "threshold", "max_depth",
                "corpus_path", "arithmetic")


@dataclass(frozen=True)
class CertifyRequest(TreeRequest):
    """``specproof certify``: a model certificate over ``pairs`` model seeds, a reproducer's (``case``), a real
    pair's (``real``, with ``--model causal-lm``), a whole generation loop's (``loop``) or a batched kernel's on a
    batch of ``requests`` (``--request``)."""

    real: CausalLMSpec | None
    loop: LoopSpec | None
    case: str | None
    pairs: int
    arithmetic: str
    method: str
    limits: LimitSpec
    json_out: str | None
    shrink: bool
    shrink_time: float
    case_out: str
    requests: tuple[str, ...] = ()
    tvd_budget: float | None = None

    def budget_value(self):
        """``--tvd-budget`` as the exact rational its decimal text says (``0.05`` is 1/20)."""
        return decimal(self.tvd_budget)

    def over_budget(self, cert) -> bool:
        """Whether a pair's certificate ends a run: over ``--tvd-budget`` when one is given, else lossy."""
        return cert.tvd > self.budget_value() if self.tvd_budget is not None else not cert.lossless

    @property
    def mode(self) -> str:
        """``loop``, ``batch``, ``causal-lm``, ``case`` or ``model``: the function that runs the request."""
        if self.loop is not None:
            return "loop"
        if self.requests:
            return "batch"
        return CAUSAL_LM if self.real is not None else "case" if self.case is not None else "model"

    @classmethod
    def from_click(cls, ctx: click.Context, **options) -> CertifyRequest:
        check_output_file(options["json_out"], "json")
        given = given_on_command_line(ctx)
        real = loop = None
        if options["loop"] is not None or options["model_kind"] in LOOP_MODELS:
            loop = _loop(ctx, options, given)
        elif options["model_kind"] == CAUSAL_LM:
            real = _causal_lm(ctx, options, given)
        else:
            for name in (*REAL_OPTIONS, "temperature", "top_k"):
                if options[name] is not None:
                    raise InvalidParameterError(name, f"{_flag(name)} applies to --model causal-lm or --loop only")
        if loop is None:
            held = [name for name in LOOP_ONLY if name in given]
            if held:
                raise InvalidParameterError(held[0], f"{_flag(held[0])} applies to --loop only")
        parts = cls.parts(ctx, {**options, "import_path": ()} if loop is not None else options)  # the loop's own
        if options["requests"]:
            _check_batch(ctx, options, given)
        if options["shrink"]:
            check_output_dir(Path(options["case_out"]).parent, "case_out")  # made if missing
        if options["case_path"] is not None:
            if options["method"] != "enumerate":  # a reproducer is certified as it was found: by enumeration
                raise InvalidParameterError("method", "--case certifies by enumeration; --method recursion applies "
                                                      "to a model and shape given by the options")
            held = [name for name in HELD_BY_CASE if name in given]
            if held:
                raise InvalidParameterError("case", f"the case holds the model, tree, drafting and arithmetic: drop "
                                                    f"{_flag(held[0])}")
        elif options["model_kind"] == "table" and options["pairs"] > 1:
            raise InvalidParameterError("seeds", "a table model has no seed: --seeds K needs a synthetic or "
                                                 "random-rational model")
        return cls(**parts, real=real, loop=loop, case=options["case_path"], pairs=options["pairs"],
                   arithmetic=options["arithmetic"], method=options["method"], limits=picked(LimitSpec, options),
                   json_out=options["json_out"], shrink=options["shrink"], shrink_time=options["shrink_time"],
                   case_out=options["case_out"], requests=tuple(options["requests"]),
                   tvd_budget=options["tvd_budget"])


def _check_batch(ctx: click.Context, options: dict, given: frozenset[str]) -> None:
    """``--request``'s batch: a kernel and none of the options that do not apply to it (the first named)."""
    if options["kernel"] is None:
        raise InvalidParameterError("request", "--request makes a batch for --kernel through a batched adapter "
                                               "(--adapter vllm-v1-forward)")
    held = [name for name in NOT_BATCH if name in given]
    if held:
        flag = max(next(p for p in ctx.command.params if p.name == held[0]).opts, key=len)
        raise InvalidParameterError(flag.lstrip("-"), f"{flag} does not apply to a batch (--request: each request "
                                                      "drafts an i.i.d. chain of its depth on its own pair): drop it")


def _loop(ctx: click.Context, options: dict, given: frozenset[str]) -> LoopSpec:
    """``--loop``'s spec: a loop model (``tiny-llama``, ``prefix-table``) and a loop go together; the options it
    does not take are refused, the first named."""
    if options["loop"] is None:
        raise InvalidParameterError("loop", f"--model {options['model_kind']} runs a generation loop: give --loop "
                                            "NAME or module:function (docs/loops.md)")
    if options["model_kind"] not in LOOP_MODELS:
        raise InvalidParameterError("model", f"--loop runs on a tiny model pair: --model {' or '.join(LOOP_MODELS)}")
    held = [name for name in NOT_LOOP if name in given]
    if options["model_kind"] == "prefix-table":
        held += [name for name in ("vocab", "seed") if name in given]
        if options["table_path"] is None:
            raise InvalidParameterError("table", "--model prefix-table reads its rows from --table FILE")
    if held:
        flag = max(next(p for p in ctx.command.params if p.name == held[0]).opts, key=len)
        raise InvalidParameterError(flag.lstrip("-"), f"{flag} does not apply to --loop (a whole loop on a tiny pair; "
                                                      "--depth is its draft depth): drop it")
    depth = options["depth"]
    max_new_tokens = depth + 1 if options["max_new_tokens"] is None else options["max_new_tokens"]
    if max_new_tokens < depth + 1:
        raise InvalidParameterError("max_new_tokens", f"must be at least --depth + 1 = {depth + 1}, so that a round "
                                                      f"boundary falls inside the continuation, got {max_new_tokens}")
    try:
        prompt = tuple(int(t) for t in options["prompt_ids"].split(","))
    except ValueError:
        raise InvalidParameterError("prompt_ids", f"comma-separated token ids, got {options['prompt_ids']!r}") from None
    if not prompt or min(prompt) < 0:
        raise InvalidParameterError("prompt_ids", f"token ids ≥ 0, at least one, got {options['prompt_ids']!r}")
    sampling = Sampling(**{name: options[name] for name in SAMPLING_OPTIONS if options[name] is not None})
    for directory in options["import_path"]:
        if not Path(directory).expanduser().is_dir():
            raise InvalidParameterError("import-path", f"{directory!r} is not a directory")
    return LoopSpec(options["loop"], options["reference"], max_new_tokens, prompt, sampling, depth,
                    tuple(options["import_path"]))


def _causal_lm(ctx: click.Context, options: dict, given: frozenset[str]) -> CausalLMSpec:
    """``--model causal-lm``'s spec, refusing the options it does not take and requiring the ones it needs."""
    held = [name for name in NOT_REAL if name in given]
    if held:
        flag = max(next(p for p in ctx.command.params if p.name == held[0]).opts, key=len)  # --seeds for pairs
        raise InvalidParameterError(flag.lstrip("-"), f"{flag} does not apply to --model causal-lm (a real pair, "
                                                      "certified in float64 by enumeration on its rows): drop it")
    for name, what in (("target", "a saved directory, a .gguf file or smollm2"),
                       ("draft", "a model, or the target's layers: self:skip=12,14,16,18"),
                       ("prompt", "the user message, under the target's chat template")):
        if options[name] is None:
            raise InvalidParameterError(name, f"--model causal-lm needs --{name} ({what})")
    top_k = options["top_k"]
    if top_k is None or top_k < 1:
        raise InvalidParameterError("top_k", "--model causal-lm needs --top-k K ≥ 1: the check enumerates every "
                                             "token with mass, and top-k keeps K of the vocabulary per row"
                                             + ("" if top_k is None else f" (got {top_k})"))
    if options["verifier"] is None:
        raise InvalidParameterError("verifier", "missing: pass --verifier NAME (specproof list) or module:function")
    return CausalLMSpec(options["target"], options["draft"], options["prompt"], top_k,
                        1.0 if options["temperature"] is None else options["temperature"], options["cache_dir"],
                        options["device"] or "cpu")


@dataclass(frozen=True)
class McRequest(TreeRequest):
    """``specproof mc``: Monte Carlo over ``seeds`` model seeds of ``trials`` rounds each."""

    seeds: int
    trials: int
    json_out: str | None
    timeout: float
    device: str | None

    @classmethod
    def from_click(cls, ctx: click.Context, **options) -> McRequest:
        check_output_file(options["json_out"], "json")
        return cls(**cls.parts(ctx, options), seeds=options["seeds"], trials=options["trials"],
                   json_out=options["json_out"], timeout=options["timeout"], device=options["device"])


@dataclass(frozen=True)
class GenerateRequest(TreeRequest):
    """``specproof generate``: rounds until ``tokens`` tokens exist, exactly (``exact``) or by Monte Carlo."""

    tokens: int
    exact: bool
    arithmetic: str
    seeds: int
    trials: int
    json_out: str | None
    limits: LimitSpec

    @classmethod
    def from_click(cls, ctx: click.Context, **options) -> GenerateRequest:
        check_output_file(options["json_out"], "json")
        return cls(**cls.parts(ctx, options), tokens=options["tokens"], exact=options["exact_law"],
                   arithmetic=options["arithmetic"], seeds=options["seeds"], trials=options["trials"],
                   json_out=options["json_out"], limits=picked(LimitSpec, options))


#: the options a hunt holds fixed when given (the others are searched)
HUNT_FIXED = ("model_kind", "vocab", "seed", "rho", "draft_models", "tau_p", "tau_q", "topology", "depth", "branching",
              "parents", "drafting", "budget", "threshold", "max_depth")


@dataclass(frozen=True)
class HuntRequest(TreeRequest):
    """``specproof hunt``: a search for a lossy pair, the options given held fixed and the others searched."""

    time_limit: float
    hunt_seed: int
    arithmetic: str
    shrink_time: float
    case_out: str
    json_out: str | None
    maximize: str | None = None

    @classmethod
    def from_click(cls, ctx: click.Context, **options) -> HuntRequest:
        check_output_file(options["json_out"], "json")
        check_output_dir(Path(options["case_out"]).parent, "case_out")  # made if missing
        return cls(**cls.parts(ctx, options), time_limit=options["time_limit"], hunt_seed=options["hunt_seed"],
                   arithmetic=options["arithmetic"], shrink_time=options["shrink_time"],
                   case_out=options["case_out"], json_out=options["json_out"], maximize=options["maximize"])

    @property
    def fixed(self) -> frozenset[str]:
        """The options held fixed: those given on the command line."""
        return self.given & frozenset(HUNT_FIXED)


@dataclass(frozen=True)
class OptimumRequest(TreeRequest):
    """``specproof optimum``: the exact ceiling ``E[τ]*`` on one instance, and each rule's distance from it
    (``--verifier``: one more rule to compare)."""

    max_columns: int
    rules: bool
    json_out: str | None
    verifier_out: str | None
    limits: LimitSpec

    @classmethod
    def from_click(cls, ctx: click.Context, **options) -> OptimumRequest:
        check_output_file(options["json_out"], "json")
        check_output_file(options["verifier_out"], "verifier_out")
        _check_module_path(options["verifier_out"])
        if options["verifier"] is None and options["schemes"] is not None:
            parse_schemes(options["schemes"])  # an unknown scheme is named as such
            raise InvalidParameterError("schemes", "--schemes declares what --verifier claims: give --verifier too "
                                                   "(the table lists the built-in rules that claim --drafting)")
        return cls(**cls.parts(ctx, options), max_columns=options["max_columns"], rules=options["rules"],
                   json_out=options["json_out"], verifier_out=options["verifier_out"],
                   limits=picked(LimitSpec, options))


def _check_module_path(path: str | None) -> None:
    """Refuse a ``--verifier-out`` that ``certify --verifier STEM:verify`` could not import as written: a name
    other than ``STEM.py`` with ``STEM`` a Python identifier, or a ``STEM`` that names a module of Python's own or
    one already imported (``json``, ``numpy``, ``exact``), which the import would find instead."""
    if path is None:
        return
    file = Path(path)
    stem, example = file.stem, "give a name like optimal_c22.py"
    if file.suffix != ".py":
        why = f"certify --verifier NAME:verify imports NAME.py, so the file name must end in .py: {example}"
    elif not stem.isidentifier() or keyword.iskeyword(stem):
        why = (f"certify --verifier {stem}:verify could not import it: {stem!r} is not a Python module name "
               f"(letters, digits and _, not starting with a digit, not a keyword): {example}")
    elif stem in sys.stdlib_module_names or stem in sys.modules:
        why = (f"certify --verifier {stem}:verify would import the module {stem!r} of Python or of an installed "
               f"package instead: {example}")
    else:
        return
    raise InvalidParameterError("verifier_out", f"{path}: {why}")
