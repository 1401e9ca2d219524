"""The built-in verifiers by public name (:data:`VERIFIERS`), each with everything an engine needs of it (its array
rule, exact recursion, claimed schemes), and the loading of a user's ``module:function`` verifier
(:func:`load_verifier`). Engines never choose a rule by its name."""

from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass
from enum import Enum
from types import FunctionType
from typing import Any, Callable

from simulator.drafting.drafter_registry import DYNAMIC  # DySpec's trees (simulator.drafting.dyspec); "aded": ADED's drafts
from ..errors import InvalidParameterError
from ..usercode import import_user_module, is_own_module
from . import block, controls, matching, multidraft, multipath, single_step_arrays as steps, traversal
from .batched.ref import ArrayRuleRef, array_rule
from .knobs import Knob, bind
from .layer import lv
from .lossy import fly, forced_rate, relaxed, threshold, typical
from .rules import DETERMINISTIC, DYSPEC_PRINTED, GR, HU, KSEQ, OPT, RRS, RRSW, SPECHUB, SPS
from .token_tree import tv

Verifier = Callable[..., tuple]

ALL_SCHEMES = ("iid", "without-replacement", "almost-greedy", "greedy-k", "top-k", "hub", "k-models")
ALL_SHAPES = ("chain", "multi-chain", "complete", "tapered", "binary", "explicit")
IID, WOR = ("iid",), ("without-replacement",)


class Recursion(Enum):
    """The exact engine's recursions for a round's law (``certify --method recursion``, docs/engines.md), by what
    they recurse over. The exact engine supplies the function of each; the core names none of them."""

    TOKEN = "token"  # token verification's law over (prefix, shape node)
    LAYER = "layer"  # LV's law with the deepest level summed in closed form
    TRAVERSAL = "traversal"  # TRV's law by recursion over subtrees


@dataclass(frozen=True)
class LawRecursion:
    """A rule's exact recursion: which one, and the keyword options that select the rule in it (the single-step
    rule's array step, a variant's flags)."""

    recursion: Recursion
    options: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class VerifierSpec:
    """A built-in verifier. ``lossless_under`` lists the drafting schemes under which the rule is lossless
    (docs/rules.md); a control lists none. ``shapes`` lists the topologies a rule is defined on; ``float_only`` marks
    rules that need irrational arithmetic; ``array_rule`` names the rule's array rule (its batched form on numpy and
    torch), which every batched engine looks up here, with the single-step rule it lifts passed as its array step
    (:mod:`.single_step_arrays`), not by name.

    A verifier is a plain function ``verify(tree, p, q, rng)`` returning ``(node, y)``, or ``(node, y, completion)``
    when later tokens must follow a modified target (greedy BV).
    """

    name: str
    fn: Verifier
    description: str
    lossless_under: tuple[str, ...]
    shapes: tuple[str, ...] = ALL_SHAPES
    float_only: bool = False
    #: for a control: a tree (parent list) and drafting scheme on which its bug shows
    demo: tuple[tuple[int, ...], str] | None = None
    #: for a control: the shapes where it is lossy, and those where it is lossless (its bug cannot show there)
    lossy_on: str = ""
    #: Layer Verification: needs one fixed tuple law per node, which dynamic trees lack (docs/rules.md)
    needs_tuple_law: bool = False
    #: the array rule (numpy and torch) deciding as ``fn`` does, if any (simulator.verifiers.batched)
    array_rule: ArrayRuleRef | None = None
    #: token verification's single-step rule, as its array step, in the exact dynamic programme over contexts
    #: (exact/recursions/token_dp.py), if any
    exact_dp: steps.ArrayStep | None = None
    #: a recursion computing the round's exact law without enumerating draft trees, with the options selecting the
    #: rule (``certify --method recursion``), if any
    exact_law: LawRecursion | None = None
    #: why the symbolic prover (``specproof prove``, exact/prove/proof.py) cannot run the rule (a typed error); empty when
    #: it can
    not_symbolic: str = ""
    #: why the prover answers UNDECIDED without running the rule (K-SEQ's ρ*, not yet a symbol); empty otherwise
    undecided_symbolic: str = ""
    #: the paper's closed form of ``E[τ]`` on a chain (``exact.recursions.closed_forms.FORMS``: ``token``, ``block`` or
    #: ``greedy-block``), which ``specproof prove`` checks on every cell; empty when there is none
    chain_expectation: str = ""
    #: a rule lossy by design (docs/lossy.md): neither a lossless rule nor a negative control; its price is measured
    lossy_by_design: bool = False
    #: a lossy-by-design rule's knobs, set with ``--verifier-kwargs`` (``fn`` is ``make`` at their defaults)
    knobs: tuple[Knob, ...] = ()
    #: ``make(**knobs) -> verifier``: the rule at given knob values
    make: Callable[..., Verifier] | None = None
    #: where a lossy-by-design rule is lossless after all (knob values and drafting), in words; empty if nowhere
    lossless_at: str = ""
    #: laws the rule is also measured against beside ``q^(H+1)``, by name in
    #: :data:`simulator.completion.REFERENCES` (``"greedy"``: greedy decoding, for a rule that relaxes it)
    references: tuple[str, ...] = ()

    @property
    def is_control(self) -> bool:
        return not self.lossless_under and not self.lossy_by_design

    def kind_note(self) -> str:
        """What ``specproof list`` says of a lossy-by-design rule: ``[lossy by design; lossless at …]``."""
        return f"[lossy by design; lossless at {self.lossless_at}]" if self.lossless_at else "[lossy by design]"

    def build(self, kwargs: dict | None = None) -> Verifier:
        """The rule at the knob values ``kwargs`` (:func:`load_verifier`); ``fn`` itself when none are given."""
        if not kwargs:
            return self.fn
        if self.make is None:
            raise InvalidParameterError("verifier-kwargs", f"{self.name} has no knobs (only the lossy-by-design "
                                                           "rules of docs/lossy.md take --verifier-kwargs)")
        fn = self.make(**bind(self.name, self.knobs, kwargs))
        _BUILT[fn] = (self.name, dict(kwargs))
        return fn

    @property
    def default_shape(self) -> str:
        """The richest shape the rule is defined on, for tables."""
        return next((s for s in ("complete", "multi-chain", "chain") if s in self.shapes), self.shapes[0])


NOT_SYMBOLIC_KSEQ = ("finds K-SEQ's ρ* by a 60-step bisection, each step a comparison: a symbolic run would "
                     "branch 2^60 ways (ρ* as a symbol with its defining equation is not built yet)")
NOT_SYMBOLIC_FLOW = "is defined by a flow solved numerically (a maximum flow or GR's dual), not by comparisons"

_SPECS = [
    VerifierSpec("tv-sps", tv(SPS), "token verification, SpS on the first child (Leviathan et al.)",
                 IID + WOR + DYNAMIC,
                 array_rule=array_rule("token_tree:tv", step=steps.SPS), exact_dp=steps.SPS,
                 exact_law=LawRecursion(Recursion.TOKEN, (("step", steps.SPS),)),
                 chain_expectation="token"),
    VerifierSpec("tv-rrs", tv(RRS), "token verification, RRS with replacement", IID,
                 array_rule=array_rule("token_tree:tv", step=steps.RRS), exact_dp=steps.RRS,
                 exact_law=LawRecursion(Recursion.TOKEN, (("step", steps.RRS),)),
                 chain_expectation="token"),
    VerifierSpec("tv-rrsw", tv(RRSW, "without-replacement"), "token verification, RRS without replacement",
                 WOR + DYNAMIC,
                 array_rule=array_rule("token_tree:tv", step=steps.RRSW),
                 chain_expectation="token"),
    VerifierSpec("tv-det", tv(DETERMINISTIC), "token verification, deterministic RRS (EAGLE-2)",
                 ALL_SCHEMES + DYNAMIC + ("aded",),
                 array_rule=array_rule("token_tree:tv", step=steps.DETERMINISTIC)),
    VerifierSpec("tv-kseq", tv(KSEQ), "token verification, K-SEQ (SpecTr)", IID,
                 array_rule=array_rule("token_tree:tv", step=steps.KSEQ), exact_dp=steps.KSEQ,
                 exact_law=LawRecursion(Recursion.TOKEN, (("step", steps.KSEQ),)),
                 undecided_symbolic=NOT_SYMBOLIC_KSEQ),
    VerifierSpec("tv-opt", tv(OPT), "token verification, optimal single-step flow (exact max-flow)", IID,
                 array_rule=array_rule("token_tree:tv", step=steps.OPT, float64=True),
                 not_symbolic=NOT_SYMBOLIC_FLOW),
    VerifierSpec("tv-gr", tv(GR), "token verification, GR (Global Resolution: the optimal flow by a convex "
                 "program)", IID,
                 array_rule=array_rule("token_tree:tv", step=steps.GR, float64=True), exact_dp=steps.GR,
                 exact_law=LawRecursion(Recursion.TOKEN, (("step", steps.GR),)),
                 not_symbolic=NOT_SYMBOLIC_FLOW),
    VerifierSpec("lv-sps", lv(SPS), "Layer Verification lifting SpS (BV on chains)", IID + WOR, needs_tuple_law=True,
                 array_rule=array_rule("layer:lv", step=steps.SPS),
                 exact_law=LawRecursion(Recursion.LAYER, (("rule", "sps"),)),
                 chain_expectation="block"),
    VerifierSpec("lv-rrs", lv(RRS), "Layer Verification lifting RRS", IID, needs_tuple_law=True,
                 array_rule=array_rule("layer:lv", step=steps.RRS),
                 exact_law=LawRecursion(Recursion.LAYER, (("rule", "rrs"),)),
                 chain_expectation="block"),
    VerifierSpec("lv-kseq", lv(KSEQ), "Layer Verification lifting K-SEQ", IID, needs_tuple_law=True,
                 array_rule=array_rule("layer:lv", step=steps.KSEQ),
                 exact_law=LawRecursion(Recursion.LAYER, (("rule", "kseq"),)),
                 undecided_symbolic=NOT_SYMBOLIC_KSEQ),
    VerifierSpec("lv-opt", lv(OPT), "Layer Verification lifting OPT (i.i.d. tuple law)", IID, needs_tuple_law=True,
                 array_rule=array_rule("layer:lv", step=steps.OPT, float64=True),
                 exact_law=LawRecursion(Recursion.LAYER, (("rule", "opt"),)),
                 not_symbolic=NOT_SYMBOLIC_FLOW),
    VerifierSpec("lv-gr", lv(GR), "Layer Verification lifting GR (Global Resolution)", IID, needs_tuple_law=True,
                 array_rule=array_rule("layer:lv", step=steps.GR, float64=True),
                 exact_law=LawRecursion(Recursion.LAYER, (("rule", "gr"),)),
                 not_symbolic=NOT_SYMBOLIC_FLOW),
    VerifierSpec("bv", block.bv, "block verification (Sun et al. 2025, Alg. 2)", IID + WOR, ("chain",),
                 array_rule=array_rule("block:bv"),
                 chain_expectation="block"),
    VerifierSpec("greedy-bv", block.greedy_bv, "greedy block verification with distribution modification "
                 "(App. C, Alg. 4-6)", IID + WOR, ("chain",),
                 array_rule=array_rule("block:bv", greedy=True, target_completion=False),
                 chain_expectation="greedy-block"),
    VerifierSpec("trv", traversal.trv, "Traversal Verification (Alg. 3), duplicate siblings merged",
                 IID + WOR + DYNAMIC,
                 array_rule=array_rule("traversal:trv"),
                 exact_law=LawRecursion(Recursion.TRAVERSAL, (("merge", True), ("zero_draft", True))),
                 chain_expectation="block"),
    VerifierSpec("trv-iid", traversal.trv_iid, "Traversal Verification, duplicates apart, draft unchanged", IID,
                 array_rule=array_rule("traversal:trv", merge=False),
                 exact_law=LawRecursion(Recursion.TRAVERSAL, (("merge", False), ("zero_draft", False))),
                 chain_expectation="block"),
    VerifierSpec("gbv", multipath.gbv, "greedy multi-path block verification (K i.i.d. paths)", IID,
                 ("chain", "multi-chain"),
                 array_rule=array_rule("multipath:gbv"),
                 chain_expectation="block"),
    VerifierSpec("dyspec", tv(RRSW, "without-replacement"), "DySpec's verification (Alg. 3 with U(0,1))",
                 WOR + DYNAMIC,
                 array_rule=array_rule("token_tree:tv", step=steps.RRSW),
                 chain_expectation="token"),
    VerifierSpec("match", matching.match, "sample-and-match: one target draw per node",
                 ALL_SCHEMES + DYNAMIC + ("aded",),
                 array_rule=array_rule("matching:match")),
    VerifierSpec("khisti-is", multidraft.khisti_is, "Khisti et al.'s canonical decomposition: optimal importance-"
                 "sampling selection among drafts from different draft models, then SpS against the selected "
                 "token's law (ICLR 2025, arXiv:2410.18234, Theorem 1)", ("k-models",),
                 ("multi-chain", "complete")),
    VerifierSpec("tv-hu", tv(HU, "greedy-k"), "token verification, Hu et al.'s rule for greedy drafting (SpS on "
                 "the random last child, residual over the top ones; reaches α*)", ("almost-greedy", "greedy-k"),
                 chain_expectation="token"),
    VerifierSpec("spechub", tv(SPECHUB, "hub"), "token verification, SpecHub's two-draft transport (Sun et al., "
                 "EMNLP 2024)", ("hub",), ("complete", "binary", "explicit")),
    VerifierSpec("bug-greedy-bv-nomod", controls.bug_greedy_bv_nomod,
                 "CONTROL: greedy BV completed with the unmodified target", (), ("chain",),
                 lossy_on="chains of depth ≥ 2 (lossless at depth 1, where no later token is modified)",
                 array_rule=array_rule("block:bv", greedy=True)),
    VerifierSpec("bug-residual-q", controls.bug_residual_q, "CONTROL: TV-SpS resampling from q", (),
                 lossy_on="every tree of depth ≥ 1",
                 array_rule=array_rule("token_tree:tv", step=controls.RESIDUAL_Q),
                 exact_law=LawRecursion(Recursion.TOKEN, (("step", controls.RESIDUAL_Q),))),
    VerifierSpec("bug-accept-all", controls.bug_accept_all, "CONTROL: accepts every first-child token", (),
                 lossy_on="every tree of depth ≥ 1",
                 array_rule=array_rule("token_tree:tv", step=controls.ACCEPT_FIRST),
                 exact_law=LawRecursion(Recursion.TOKEN, (("step", controls.ACCEPT_FIRST),))),
    VerifierSpec("bug-trv-insertion-order", traversal.bug_trv_insertion_order,
                 "CONTROL: TRV visiting leaves in insertion order", (), ("explicit",),
                 demo=((-1, 0, 0, 1), "without-replacement"),
                 lossy_on="trees whose leaves in index order are not in DFS post-order: explicit trees such as "
                          "-1,0,0,1 and DySpec's dynamic trees (lossless on chains, multi-chains, complete and "
                          "tapered trees, where every leaf is at depth H and the two orders agree)",
                 array_rule=array_rule("traversal:trv", post_order=False)),
    VerifierSpec("bug-gbv-clipped", multipath.bug_gbv_clipped,
                 "CONTROL: GBV selecting by the clipped ratio min(1, q/p)", (), ("chain", "multi-chain"),
                 lossy_on="multi-chains with b ≥ 2 at V ≥ 3 (lossless on a chain: one path, nothing to "
                          "select; and at V = 2, where min(1, q/p) ranks the two tokens as q/p does)",
                 array_rule=array_rule("multipath:gbv", clipped=True)),
    VerifierSpec("bug-match-per-row", matching.bug_match_per_row,
                 "CONTROL: one target draw per candidate row", (),
                 lossy_on="trees where a node has ≥ 2 children (lossless on chains: one row per node)",
                 array_rule=array_rule("matching:match", per_row=True)),
    VerifierSpec("bug-dyspec-printed", tv(DYSPEC_PRINTED, "without-replacement"),
                 "CONTROL: DySpec Alg. 3 as printed, c ~ N(0,1) (float only)", (), float_only=True,
                 demo=((-1, 0, 0, 1, 1, 2, 2), "without-replacement"), lossy_on="every tree of depth ≥ 1",
                 array_rule=array_rule("token_tree:tv", step=steps.DYSPEC_PRINTED)),
    # lossy by design (docs/lossy.md)
    VerifierSpec("sglang-threshold", threshold.make(), "SGLang's threshold acceptance (threshold_single, "
                 "threshold_acc; its CUDA tree kernel)", (), lossy_by_design=True, knobs=threshold.KNOBS,
                 make=threshold.make, lossless_at="threshold_single=1, threshold_acc=1 with distinct siblings "
                                                  "(--drafting top-k or without-replacement)"),
    VerifierSpec("relaxed", relaxed.make(), "TensorRT-LLM MTP relaxed acceptance: greedy, or a top-k token within "
                 "delta of the top-1's probability", (), ("chain",), lossy_by_design=True, knobs=relaxed.KNOBS,
                 make=relaxed.make, lossless_at="relaxed_topk=1, against greedy decoding only",
                 references=("greedy",)),
    VerifierSpec("typical", typical.make(), "Medusa's typical acceptance (posterior_threshold, posterior_alpha, "
                 "temperature, correction; medusa-llm 0.1's evaluate_posterior)", (), lossy_by_design=True,
                 knobs=typical.KNOBS, make=typical.make,
                 lossless_at="correction=sample where no draft can pass (posterior_threshold ≥ 1 and "
                             "posterior_alpha ≥ the vocabulary's size)"),
    VerifierSpec("fly", fly.make(), "FLy's entropy-gated deferral (vLLM 0.33.0 Model Runner V2)", (), ("chain",),
                 lossy_by_design=True, knobs=fly.KNOBS, make=fly.make,
                 lossless_at="fly_window_size=0 (FLy off), a window not below the depth, or "
                             "fly_entropy_threshold above the largest entropy of fly_entropy_top_k = t "
                             "probabilities (log t for t ≥ 3, log 3 ≈ 1.0986 at the default; 2/e at t = 2, 1/e at "
                             "t = 1): nothing is deferred"),
    VerifierSpec("forced-rate", forced_rate.make(), "acceptance forced at per-position rates (vLLM 0.33.0 "
                 "rejection_method=synthetic)", (), ("chain",),
                 lossy_by_design=True, knobs=forced_rate.KNOBS, make=forced_rate.make),
]

VERIFIERS: dict[str, VerifierSpec] = {spec.name: spec for spec in _SPECS}


def check_arithmetic_for(name: str, arithmetic: str) -> None:
    """Refuse exact arithmetic for a rule that needs irrational numbers (the normal CDF, say)."""
    spec = VERIFIERS.get(name)
    if spec is not None and spec.float_only and arithmetic == "fraction":
        raise InvalidParameterError("arithmetic", f"{name} computes with irrational numbers (the normal CDF), which "
                                                  "fraction arithmetic cannot hold: pass --arithmetic float")


def check_pairing(name: str, scheme: str) -> None:
    """Refuse Layer Verification on dynamic trees: it needs one fixed tuple law per node (docs/rules.md)."""
    spec = VERIFIERS.get(name)
    if spec is not None and spec.needs_tuple_law and scheme in DYNAMIC:
        raise InvalidParameterError("verifier", f"{name} is undefined on {scheme} trees: Layer Verification needs "
                                                "one fixed tuple law per node, and a dynamic tree's sibling count "
                                                "depends on the tokens drawn (docs/rules.md)")


_BUILTIN_IDS = frozenset(id(spec.fn) for spec in _SPECS)  # the registry's functions live as long as the process
#: a lossy-by-design rule built at given knob values (:meth:`VerifierSpec.build`): its registry name and the values
_BUILT: "weakref.WeakKeyDictionary[Callable, tuple[str, dict]]" = weakref.WeakKeyDictionary()


def is_builtin(fn: Verifier) -> bool:
    return id(fn) in _BUILTIN_IDS or _is_built(fn)


def knob_values(fn: Verifier) -> dict:
    """The knob values a rule was built with (:meth:`VerifierSpec.build`); empty for any other function."""
    return dict(_BUILT[fn][1]) if _is_built(fn) else {}


def _is_built(fn: object) -> bool:
    try:
        return fn in _BUILT
    except TypeError:  # not weakly referenceable: not a rule the registry built
        return False


def is_watched_elsewhere(fn: Verifier) -> bool:
    """Whether ``fn`` needs no watch on its random sources when called (:func:`simulator.speculation.decide`): a
    built-in rule, or an object of specproof's own class other than a function (a torch kernel, whose capture
    watches its randomness itself), also behind ``functools.wraps`` wrappers. Any other callable is a user's
    plugin."""
    fn = inspect.unwrap(fn)
    if is_builtin(fn):
        return True
    return not isinstance(fn, FunctionType) and is_own_module(type(fn).__module__)


def verifier_name(fn: Verifier) -> str:
    """The public name of a verifier function: its registry name, else ``module:qualified name``."""
    for spec in _SPECS:
        if spec.fn is fn:
            return spec.name
    if _is_built(fn):
        return _BUILT[fn][0]
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def load_verifier(name: str, kwargs: dict | None = None) -> tuple[str, Verifier]:
    """A verifier by the name a user gives: a built-in rule, or ``module:function`` imported.

    Parameters
    ----------
    name : str
        A registry name (``specproof list``) or ``"module:function"``; the module is searched from the working
        directory, then ``sys.path``.
    kwargs : dict, optional
        A lossy-by-design rule's knob values (``--verifier-kwargs``; :mod:`.knobs`).

    Returns
    -------
    tuple
        ``(name, verifier)``: the name as given, and the callable ``verifier(tree, p, q, rng) -> (node, y)``.

    Raises
    ------
    InvalidParameterError
        On field ``verifier``: an unknown built-in name, a missing ``:``, a module that does not exist or raises
        (an exit or interrupt included) while importing (a missing optional dependency included), or no callable
        of that name in it. On field ``verifier-kwargs.NAME``: a knob the rule lacks, a value it refuses, or any
        knob given to a rule or plugin that takes none.
    """
    if name in VERIFIERS:
        return name, VERIFIERS[name].build(kwargs)
    if kwargs:
        raise InvalidParameterError("verifier-kwargs", f"{name} is not a built-in rule: only the lossy-by-design "
                                                       "rules of docs/lossy.md take --verifier-kwargs")
    if ":" not in name:
        raise InvalidParameterError("verifier", f"unknown verifier {name!r}: a built-in name "
                                                f"(specproof list) or module:function")
    return name, load_callable(name, "verifier")


def load_callable(spec: str, field: str):
    """``module:function`` imported (the working directory is searched); errors name ``field`` — a module that
    does not exist, one that raises (an exit or interrupt included) while importing, a missing function."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidParameterError(field, f"expected module:function, got {spec!r}")
    module = import_user_module(module_name, field)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise InvalidParameterError(field, f"{module_name!r} has no function {attr!r}")
    return fn
