"""The parts a command's request is made of, each a frozen value of click's values that builds its object: the
model pair (:class:`ModelSpec`, :class:`CausalLMSpec`), the draft tree and drafting (:class:`ShapeSpec`), the
subject (:class:`SubjectSpec`, :class:`KernelSpec`) and the limits (:class:`LimitSpec`)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import MISSING, dataclass, fields, replace
from typing import Callable, Iterator, Mapping, TypeVar

from exact.subject import Subject, parse_schemes, subject
from simulator.drafting import DRAFTING, Drafter, draft_models_for
from simulator.drafting.aded import AdedConfig
from simulator.drafting.drafter_registry import DrafterOptions, make_drafter
from simulator.errors import InvalidParameterError, SpecproofError
from simulator.jsonfile import read_json
from simulator.verifiers.knobs import parse_kwargs
from simulator.limits import limits, progress_note, time_limit
from simulator.loops.sampling import Sampling
from simulator.models import ModelPair, make_model
from simulator.trees import Topology, shape_from_options
from simulator.usercode import add_import_path, check_importable, require

Spec = TypeVar("Spec")


def picked(cls: type[Spec], options: Mapping[str, object]) -> Spec:
    """The dataclass ``cls`` from a command's options: each field the option parameter of the same name (a field
    with a default keeps it where the command has no such option)."""
    return cls(**{f.name: options[f.name] for f in fields(cls)  # type: ignore[arg-type]
                  if f.name in options or f.default is MISSING})


@dataclass(frozen=True)
class ModelSpec:
    """``--model`` and its parameters: a synthetic pair, a random rational one, or a table. Several draft models
    (docs/models.md, "Several draft models"): ``rho`` a tuple, one value per draft model (synthetic), or
    ``draft_models`` K ≥ 2 (random-rational); a table's come from its file."""

    model_kind: str
    table_path: str | None
    vocab: int
    seed: int
    rho: float | tuple[float, ...]
    tau_p: float
    tau_q: float
    zero_prob: float
    draft_models: int = 1

    def check(self) -> None:
        """Refuse ``--table`` beside another model kind (the table would be ignored), a ``--rho`` list beside a
        model that is not synthetic, and ``--draft-models`` beside one that is not random-rational: each would be
        ignored, or say something the model cannot."""
        if self.table_path is not None and self.model_kind not in ("table", "prefix-table"):
            raise InvalidParameterError("table", f"--table applies to --model table or prefix-table only (the model "
                                                 f"is {self.model_kind}): add --model table, or drop --table")
        if isinstance(self.rho, tuple) and self.model_kind != "synthetic":
            raise InvalidParameterError("rho", f"a list of rho (one per draft model) shapes --model synthetic; the "
                                               f"model is {self.model_kind}: {_SEVERAL_DRAFTS}")
        if self.draft_models != 1 and self.model_kind != "random-rational":
            raise InvalidParameterError("draft-models", f"--draft-models applies to --model random-rational; the "
                                                        f"model is {self.model_kind}: {_SEVERAL_DRAFTS}")

    def build(self, seed: int | None = None) -> ModelPair:
        """The pair of model seed ``seed`` (``--seed`` by default; one table for every seed)."""
        return make_model(self.model_kind, self.table_path, self.vocab, self.seed if seed is None else seed,
                          self.rho, self.tau_p, self.tau_q, self.zero_prob, draft_models=self.draft_models)


#: how each model kind takes several draft models, for the refusals of :meth:`ModelSpec.check`
_SEVERAL_DRAFTS = ("synthetic takes one --rho per draft model (--rho 0.3,0.8), random-rational --draft-models K, a "
                   "table its \"drafts\" list")


@dataclass(frozen=True)
class CausalLMSpec:
    """``--model causal-lm``: a real pair after a prompt, its rows cut to their top-k."""

    target: str
    draft: str
    prompt: str
    top_k: int
    temperature: float
    cache_dir: str | None
    device: str


@dataclass(frozen=True)
class ShapeSpec:
    """The draft tree (``--topology``, ``--depth``, ``--branching``, ``--parents``) and the drafting scheme with
    its dynamic drafters' settings. ``drafting`` and ``topology`` are ``None`` until :meth:`resolved` fills them
    from what the subject claims."""

    topology: str | None
    depth: int
    branching: int
    parents: str | None
    drafting: str | None
    budget: int
    threshold: float
    max_depth: int
    corpus_path: str | None
    mcts_iterations: int
    candidates: int
    candidate_length: int

    def resolved(self, claimed: Subject | None) -> ShapeSpec:
        """The spec with its defaults: ``--drafting`` where given, else the scheme ``claimed`` runs by default
        (``iid`` without a subject); a chain where a kernel's adapter takes chains and no shape is given."""
        scheme = self.drafting or (claimed.default_scheme() if claimed is not None else "iid")
        topology = self.topology
        if topology is None and self.parents is None and claimed is not None and "kernel" in claimed.description:
            from simulator.kernels.kernel import CHAIN_ADAPTERS  # torch: a kernel is being certified

            topology = "chain" if claimed.description["adapter"] in CHAIN_ADAPTERS else None
        return replace(self, drafting=scheme, topology=topology)

    def tree(self) -> tuple[str, Topology]:
        """The shape's name and topology: ``complete`` by default, ``explicit`` for a parent list."""
        return shape_from_options(self.topology, self.depth, self.branching, self.parents)

    def drafter_options(self, aded: AdedConfig | None = None) -> DrafterOptions:
        """The dynamic drafters' settings, ADED's corpus read from ``--corpus``."""
        corpus = read_json(self.corpus_path, "corpus") if self.corpus_path else None
        if corpus is not None and not (isinstance(corpus, list) and all(isinstance(c, list) for c in corpus)):
            raise SpecproofError("corpus", "must be a JSON list of token-id lists")
        config = AdedConfig(self.mcts_iterations, self.candidate_length, self.candidates) if aded is None else aded
        return DrafterOptions(self.budget, self.threshold, self.max_depth, config, corpus)

    def drafter(self, model: ModelPair) -> tuple[Drafter, dict]:
        """The drafter of a :meth:`resolved` spec on ``model``, with the configuration to print and store; a scheme
        that needs more draft models than ``model`` has (``k-models``: one per child of the widest node) is refused
        here, before any round runs."""
        topology, shape = self.tree()
        if self.drafting in DRAFTING:
            needed, has = draft_models_for(self.drafting, shape), getattr(model, "draft_models", 1)
            if needed > has:
                raise InvalidParameterError("drafting", f"{self.drafting} draws child i of a node from draft model i: "
                                                        f"this tree needs {needed} draft models and the model has "
                                                        f"{has}: give it {needed} (--rho with {needed} values, "
                                                        f"--model random-rational --draft-models {needed}, or a table "
                                                        f"whose \"drafts\" list has {needed}; docs/models.md)")
        drafter = make_drafter(self.drafting or "iid", shape, model, self.drafter_options())
        config = drafter.describe()
        if self.drafting in DRAFTING and topology != "explicit":
            config["branching"] = self.branching
        return drafter, config


@dataclass(frozen=True)
class KernelSpec:
    """``--kernel`` with its calling convention and settings (docs/kernels.md)."""

    kernel: str
    adapter: str
    dtype: str
    uniforms: str
    kernel_kwargs: str | None
    kernel_init: str | None
    import_path: tuple[str, ...]

    #: each kernel option's parameter name and the value it has when not given
    DEFAULTS = (("adapter", "tree"), ("dtype", "float64"), ("uniforms", "continuous"), ("kernel_kwargs", None),
                ("kernel_init", None), ("import_path", ()))

    def build(self):
        """The :class:`simulator.kernels.kernel.Kernel`: a misspelt module fails before torch loads."""
        add_import_path(self.import_path, "import-path")
        # of the kernel's module only the top-level package, whose lookup runs nothing: its parent packages'
        # imports must wait for the adapter's before_kernel_import hook
        for option, module in (("kernel", self.kernel.partition(":")[0].partition(".")[0] if ":" in self.kernel
                                else ""), ("adapter", self.adapter.partition(":")[0] if ":" in self.adapter else "")):
            if module:
                check_importable(module, option)
        require("torch", "--kernel", "kernel")
        from simulator.kernels.kernel import Kernel  # torch only for a kernel

        return Kernel(self.kernel, self.adapter, self.dtype, self.uniforms, parse_kwargs(self.kernel_kwargs),
                      init=parse_kwargs(self.kernel_init, "kernel-init"), import_path=self.import_path)


@dataclass(frozen=True)
class SubjectSpec:
    """What is certified: ``--verifier`` (a built-in name or ``module:function``) or ``--kernel``, with the
    drafting schemes ``--schemes`` claims for it."""

    verifier: str | None
    schemes: str | None
    kernel: KernelSpec | None = None
    verifier_kwargs: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> SubjectSpec:
        """The subject of a command's options, refusing a kernel option without ``--kernel``, ``--kernel``
        beside ``--verifier``, and ``--verifier-kwargs`` without ``--verifier``."""
        knobs = options.get("verifier_kwargs")
        if knobs is not None:
            if options.get("verifier") is None:
                raise InvalidParameterError("verifier-kwargs", "--verifier-kwargs sets a lossy-by-design rule's "
                                                               "knobs: give --verifier too (docs/lossy.md)")
            parse_kwargs(knobs, "verifier-kwargs")  # a malformed item is named before anything runs
        if options.get("kernel") is None:
            for name, default in KernelSpec.DEFAULTS:
                if options.get(name, default) != default:
                    option = name.replace("_", "-")
                    also = " or --loop" if name == "import_path" else ""
                    raise InvalidParameterError(option, f"--{option} applies to --kernel{also} only")
            return cls(options["verifier"], options["schemes"], None, knobs)  # type: ignore[arg-type]
        if options["verifier"] is not None:
            raise InvalidParameterError("kernel", "pass --verifier or --kernel, not both")
        kernel = picked(KernelSpec, {**options, "import_path": tuple(options["import_path"])})  # type: ignore
        return cls(None, options["schemes"], kernel)  # type: ignore[arg-type]

    @property
    def given(self) -> bool:
        return self.verifier is not None or self.kernel is not None

    def resolve(self) -> Subject:
        """The :class:`exact.subject.Subject`, its verifier imported or its kernel built (once per run)."""
        claimed = parse_schemes(self.schemes)
        if self.kernel is not None:
            return subject(self.kernel.build(), schemes=claimed)
        if self.verifier is None:
            raise InvalidParameterError("verifier", "missing: pass --verifier NAME (specproof list) or "
                                                    "module:function")
        return subject({"verifier": self.verifier, "verifier_kwargs": parse_kwargs(self.verifier_kwargs,
                                                                                  "verifier-kwargs")},
                       "verifier", claimed)


def kernel_of(what: Subject):
    """The kernel object of a kernel subject (its certificate names its dtype and uniforms), else ``None``."""
    return what.fn if "kernel" in what.description else None


class SeededPairs:
    """The model pair and drafter of each model seed, each built once: ``pairs(seed) -> (model, drafter)``;
    :meth:`config`: the pair's and the drafting's description, :meth:`drafting`: the drafting's alone."""

    def __init__(self, model: ModelSpec, shape: ShapeSpec) -> None:
        self.model, self.shape = model, shape
        self.built: dict[int, tuple[ModelPair, Drafter, dict]] = {}

    def _get(self, seed: int) -> tuple[ModelPair, Drafter, dict]:
        if seed not in self.built:
            pair = self.model.build(seed)
            self.built[seed] = (pair, *self.shape.drafter(pair))  # ADED's corpus comes from the draft model
        return self.built[seed]

    def __call__(self, seed: int) -> tuple[ModelPair, Drafter]:
        return self._get(seed)[:2]

    def config(self, seed: int) -> dict:
        model, _, drafting = self._get(seed)
        return {**model.describe(), **drafting}

    def drafting(self, seed: int) -> dict:
        return self._get(seed)[2]


def first_seed_kept(model: ModelSpec, shape: ShapeSpec) -> tuple[Callable[[int], ModelPair], Drafter, dict]:
    """``(model_for(seed), drafter, drafting)`` for a run over several seeds: the first seed's pair built once,
    with the drafter on it (ADED's corpus comes from its draft model); the other seeds' pairs built as the run
    reaches them, and not kept (a Monte Carlo seed's tables are large)."""
    first = model.build()
    drafter, drafting = shape.drafter(first)
    return (lambda s: first if s == model.seed else model.build(s)), drafter, drafting


@dataclass(frozen=True)
class LimitSpec:
    """``--max-executions`` (0: none) and ``--timeout`` in seconds (0: none)."""

    max_executions: int
    timeout: float

    def applied(self, progress: Callable[[float], None] | None = None):
        """The run under these limits (:func:`limited`)."""
        return limited(self.max_executions, self.timeout, progress)


@contextmanager
def limited(max_executions: int, timeout: float, progress=None) -> Iterator[int | None]:
    """The run under ``--max-executions`` and ``--timeout``; yields the execution limit (``None``: none)."""
    if max_executions < 0:
        raise InvalidParameterError("max_executions", f"must be ≥ 0 (0: no limit), got {max_executions}")
    cap = max_executions or None
    with time_limit(timeout, progress_note), limits(cap, progress):
        yield cap


@dataclass(frozen=True)
class LoopSpec:
    """``--loop``: a whole generation loop run on a tiny model pair (``--model tiny-llama`` or ``prefix-table``)
    after ``prompt_ids`` for ``max_new_tokens`` tokens, held to ``reference`` (``None``: the loop's own,
    :func:`simulator.loops.builtin.reference_of`) under the sampling parameters; ``depth`` is the shipped loops'
    draft depth; ``import_path``, folders put first on ``sys.path`` of the process that runs them (one of its own
    when given)."""

    loop: str
    reference: str | None
    max_new_tokens: int
    prompt_ids: tuple[int, ...]
    sampling: Sampling
    depth: int
    import_path: tuple[str, ...] = ()

    def loops(self) -> tuple[Callable, Callable]:
        """``(loop, reference)`` imported or built."""
        from simulator.loops.builtin import load_loop, reference_of

        loop = load_loop(self.loop, self.depth)
        reference = reference_of(loop) if self.reference is None else load_loop(self.reference, self.depth,
                                                                                 "reference")
        return loop, reference

    def pair(self, model: ModelSpec):
        """``(target, draft)`` of the model spec: a seeded tiny pair of ``--vocab`` and ``--seed``, or the prefix table
        of ``--table``; a prompt token outside the vocabulary is refused (field ``prompt_ids``)."""
        from simulator.loops.models import prefix_table_pair
        from simulator.models import TableModel

        require("torch", "--loop", "torch")
        if model.model_kind == "prefix-table":
            target, draft = prefix_table_pair(TableModel.from_file(model.table_path), len(self.prompt_ids))
        else:
            require("transformers", f"--model {model.model_kind}", "torch")
            from simulator.loops.tiny_pairs import SEEDED_PAIRS

            target, draft = SEEDED_PAIRS[model.model_kind](model.vocab, model.seed)
        outside = [t for t in self.prompt_ids if t >= target.vocab]
        if outside:
            raise InvalidParameterError("prompt_ids", f"token {outside[0]} is outside the vocabulary "
                                                      f"0..{target.vocab - 1}")
        return target, draft
