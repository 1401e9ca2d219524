"""The papers' claims as checks the exact engine runs (``specproof theorems``, :func:`run_checks`): each claim
evaluated with rationals on random exact instances, reporting its worst margin and instance."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import scipy  # its submodules load on first use: scipy.optimize costs a second at every CLI start

from simulator.drafting import FixedShape, draft_tree
from simulator.errors import InvalidParameterError
from simulator.models import ModelView, RandomRationalModel
from simulator.numeric import Number
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.flows import GR_TOLERANCE, alpha_star, tuple_law
from simulator.verifiers.layer import score_nodes
from simulator.verifiers.registry import Verifier
from simulator.verifiers.rules import RULES
from simulator.verifiers.traversal import trv

from exact.certificate import certify, fixed_tree_law, round_law
from exact.enumeration import enumerate_outcomes
from exact.instances import random_shape

LIFTED = ("sps", "rrs", "kseq", "opt", "gr")
TREE_SHAPES = ("complete", "tapered", "multi-chain", "explicit")


@dataclass(frozen=True)
class Check:
    claim: str
    source: str
    instances: int
    worst_margin: float
    worst_instance: str
    tolerance: float = 0.0
    #: True for a proved claim; None for a claim the papers support by experiments only, reported either way
    expected: bool | None = True

    group: str = ""
    seconds: float = 0.0  # wall time of the whole group of checks this one was computed with

    @property
    def as_expected(self) -> bool:
        return self.expected is None or self.holds == self.expected

    @property
    def holds(self) -> bool:
        return self.worst_margin >= -self.tolerance

    @property
    def verdict(self) -> str:
        return "holds" if self.holds else "FAILS"


class _Worst:
    def __init__(self) -> None:
        self.margin: float = math.inf
        self.where = ""
        self.count = 0

    def see(self, margin: Number, where: str) -> None:
        self.count += 1
        if float(margin) < self.margin:
            self.margin, self.where = float(margin), where

    def check(self, claim: str, source: str, tolerance: float = 0.0, expected: bool | None = True) -> Check:
        return Check(claim, source, self.count, self.margin, self.where, tolerance, expected)


def _rows(rng: np.random.Generator, vocab: int, zero_prob: float = 0.3) -> tuple[tuple[Fraction, ...], ...]:
    rows = []
    for _ in range(2):
        w = rng.integers(1, 6, size=vocab)
        w[rng.random(vocab) < zero_prob] = 0
        if w.sum() == 0:
            w[rng.integers(vocab)] = 1
        rows.append(tuple(Fraction(int(x), int(w.sum())) for x in w))
    return tuple(rows)


def _nothing() -> None:
    pass


def _models(count: int, seed: int, vocab_range=(2, 5),
            tick: Callable[[], None] = _nothing) -> Iterator[tuple[RandomRationalModel, np.random.Generator]]:
    """``count`` random rational models; ``tick()`` once the caller is done with each."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield RandomRationalModel(int(rng.integers(*vocab_range)), int(rng.integers(2**31)), zero_prob=0.3), rng
        tick()


# ---- block verification and chains ------------------------------------------------------------------------
CHAIN_RIVALS = [name for name, spec in VERIFIERS.items()  # lossless rules only: a lossy one may out-accept BV
                if spec.lossless_under and "chain" in spec.shapes and name not in ("bv", "greedy-bv")]


def _chain_scheme(name: str) -> str:
    schemes = VERIFIERS[name].lossless_under or ("iid",)
    return "iid" if "iid" in schemes else schemes[0]


def check_bv_optimal_on_chains(count: int, seed: int, rivals: Sequence[str] = CHAIN_RIVALS,
                               tick: Callable[[], None] = _nothing) -> list[Check]:
    """Block Verification (Sun et al., ICLR 2025, arXiv:2403.10444), Thm. 2: BV maximises E[τ] among lossless
    chain verifiers (``rivals``); Thm. 3 / Lemma 9: greedy BV (which changes later rounds) reaches the coupling
    bound; TRV = BV = LV-SpS on chains."""
    from exact.recursions.bounds import chain_coupling_bound

    best, greedy, equal = _Worst(), _Worst(), _Worst()
    for model, rng in _models(count, seed, tick=tick):
        chain = make_topology("chain", int(rng.integers(1, 5)))
        where = f"vocab={model.vocab} seed={model.seed} H={chain.height}"
        bv = round_law(model, FixedShape(chain), "bv")
        e_bv = bv.expected_accepted()
        for name in rivals:
            e = round_law(model, FixedShape(chain, _chain_scheme(name)), name).expected_accepted()
            best.see(e_bv - e, f"{where} vs {name}")
        bound = chain_coupling_bound(ModelView(model, "fraction"), chain.height)
        greedy.see(-abs(round_law(model, FixedShape(chain), "greedy-bv").expected_accepted() - bound), where)
        for name in ("trv", "lv-sps"):
            other = round_law(model, FixedShape(chain), name)
            diff = max([abs(bv.law().get(k, 0) - other.law().get(k, 0)) for k in set(bv.law()) | set(other.law())],
                       default=0)
            equal.see(-diff, f"{where} {name}")
    return [best.check("BV's E[τ] ≥ every other lossless verifier on chains", "Sun et al. 2025, Thm. 2"),
            greedy.check("greedy BV's E[τ] = Σ_ℓ Σ min(M_s, M_b) (the coupling bound)",
                         "Sun et al. 2025, Lemma 9, 10"),
            equal.check("TRV = BV = LV-SpS on chains (identical output laws)",
                        "Weng et al. 2025, Thm. 3.4; Cha et al. 2026, §3.2")]


# ---- single-step rules ------------------------------------------------------------------------------------
def acceptance(rule: str, p, q, k: int, law: str) -> Number:
    return sum(RULES[rule].outflow(p, q, k, law), p[0] * 0)


def lp_value(p, q, k: int, law: str) -> float:
    """The tuple → token max-flow as a linear program (scipy HiGHS): the independent cross-check of OPT."""
    laws = tuple_law(p, k, law)
    edges = [(tup, x) for tup in laws for x in sorted(set(tup))]
    a_ub, b_ub = [], []
    for tup, prob in laws.items():
        a_ub.append([1.0 if e[0] == tup else 0.0 for e in edges])
        b_ub.append(float(prob))
    for x in range(len(q)):
        a_ub.append([1.0 if e[1] == x else 0.0 for e in edges])
        b_ub.append(float(q[x]))
    result = scipy.optimize.linprog(-np.ones(len(edges)), A_ub=np.array(a_ub), b_ub=np.array(b_ub),
                                    bounds=(0, None), method="highs")
    return -result.fun


def check_single_step(count: int, seed: int, tick: Callable[[], None] = _nothing) -> list[Check]:
    rng = np.random.default_rng(seed)
    below, opt_eq, lp_eq, kseq, gr, k1 = (_Worst() for _ in range(6))
    for _ in range(count):
        vocab, k = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        p, q = _rows(rng, vocab)
        where = f"p={[str(x) for x in p]} q={[str(x) for x in q]} k={k}"
        for law, rules in (("iid", ("rrs", "kseq", "opt", "gr", "det")), ("without-replacement", ("rrsw", "opt"))):
            star, _ = alpha_star(p, q, k, law)
            for rule in rules:
                tol = GR_TOLERANCE if rule == "gr" else 0
                below.see(star - acceptance(rule, p, q, k, law) + tol, f"{where} {law} {rule}")
            opt_eq.see(-abs(acceptance("opt", p, q, k, law) - star), f"{where} {law}")
            lp_eq.see(-abs(lp_value(p, q, k, law) - float(star)), f"{where} {law}")
        star, _ = alpha_star(p, q, k, "iid")
        kseq.see(acceptance("kseq", p, q, k, "iid") - (1 - 1 / Fraction(math.e)) * star, where)
        gr.see(acceptance("gr", p, q, k, "iid") - star, where)
        sps = RULES["sps"].outflow(p, q, 1, "iid")
        for rule in ("kseq", "rrs", "opt", "gr"):
            other = RULES[rule].outflow(p, q, 1, "iid")
            tol = GR_TOLERANCE if rule == "gr" else 0
            k1.see(tol - max(abs(a - b) for a, b in zip(sps, other)), f"{where} {rule}")
        tick()
    return [below.check("acceptance of every rule ≤ α* (its tuple law; GR within its tolerance)", "docs/rules.md"),
            opt_eq.check("OPT = α* exactly (rationals)", "docs/rules.md"),
            lp_eq.check("LP max-flow (scipy HiGHS) = α*", "docs/rules.md", tolerance=1e-9),
            kseq.check("K-SEQ ≥ (1 − 1/e)·α*", "SpecTr"),
            gr.check("GR ≥ α* − tolerance", "Thomas & Pal 2026, abstract", tolerance=GR_TOLERANCE),
            k1.check("k = 1: K-SEQ, RRS, OPT, GR flows = SpS flows", "docs/rules.md")]


def check_gr_reaches_opt(count: int, seed: int, rule: str = "gr",
                         tick: Callable[[], None] = _nothing) -> list[Check]:
    """Global Resolution (Thomas & Pal, ICLR 2026, arXiv:2511.15898), abstract: for ``n`` i.i.d. drafts from one
    draft model its convex program yields the optimal transport "to arbitrary accuracy". On ``count`` exact
    instances (vocabulary 2–6, k 1–4, rows with zeros) the acceptance of ``rule``'s single step (``tv-gr``'s by
    default; the outflow summed) is compared with ``tv-opt``'s exact max-flow, which is ``α*``: the margin is
    ``−|α_rule − α_OPT|``, within :data:`GR_TOLERANCE`. A rule that is not optimal (``rule="sps"``) fails it."""
    rng = np.random.default_rng(seed)
    gap = _Worst()
    for _ in range(count):
        vocab, k = int(rng.integers(2, 7)), int(rng.integers(1, 5))
        p, q = _rows(rng, vocab)
        gap.see(-abs(acceptance(rule, p, q, k, "iid") - acceptance("opt", p, q, k, "iid")),
                f"p={[str(x) for x in p]} q={[str(x) for x in q]} k={k}")
        tick()
    return [gap.check(f"tv-{rule} and tv-opt reach the same α* (i.i.d. drafts, one draft model)",
                      "Thomas & Pal 2026, abstract", tolerance=GR_TOLERANCE)]


# ---- Layer Verification -----------------------------------------------------------------------------------
def _drafts(model, topology, scheme: str):
    view = ModelView(model, "fraction")
    for draft, _ in enumerate_outcomes(lambda rng: draft_tree(topology, view, scheme, rng)):
        yield draft


def check_lv_assumption(count: int, seed: int, tick: Callable[[], None] = _nothing) -> list[Check]:
    """Layer Verification (Cha et al., AdaptFM at ICML 2026), Assumption 4.2: ``flow_v(x) ≤ q_v(x)·a_v`` at every
    node LV scores."""
    worst = _Worst()
    for model, rng in _models(count, seed, (2, 4), tick):
        shape = TREE_SHAPES[int(rng.integers(len(TREE_SHAPES)))]
        topology = random_shape(rng, shape, 5)
        for draft in _drafts(model, topology, "iid"):
            for rule in LIFTED:
                scored = score_nodes(RULES[rule], draft.tree, draft.p, draft.q, "iid")
                margin = min(scored.scores[v] * qx - fx for v in range(len(draft.tree))
                             for qx, fx in zip(draft.q[v], scored.flows[v]))
                worst.see(margin, f"vocab={model.vocab} seed={model.seed} {shape} {draft.tree} lv-{rule}")
    return [worst.check("LV Assumption 4.2: flow_v(x) ≤ q_v(x)·a_v at every scored node", "Cha et al. 2026, Asm. 4.2")]


def check_lv_beats_tv(count: int, seed: int, tick: Callable[[], None] = _nothing) -> list[Check]:
    """The paper's experimental claim that LV-lifting accepts at least as much as TV-lifting."""
    worst = _Worst()
    for model, rng in _models(count, seed, (2, 4), tick):
        shape = TREE_SHAPES[int(rng.integers(len(TREE_SHAPES)))]
        topology = random_shape(rng, shape, 5)
        for rule in LIFTED:
            lv = round_law(model, FixedShape(topology), f"lv-{rule}").expected_accepted()
            tv = round_law(model, FixedShape(topology), f"tv-{rule}").expected_accepted()
            worst.see(lv - tv, f"vocab={model.vocab} seed={model.seed} {shape}{list(topology.parents)} {rule}")
    return [worst.check("LV-lifted rule's E[τ] ≥ its TV-lifted counterpart", "Cha et al. 2026, §5 (experiments only)",
                        expected=None)]


# ---- Traversal Verification -------------------------------------------------------------------------------
def check_trv_lemma(count: int, seed: int, verifier: Verifier = trv,
                    tick: Callable[[], None] = _nothing) -> list[Check]:
    """Traversal Verification (Weng et al., NeurIPS 2025, arXiv:2505.12398), Lemma A.2: for the completed output
    ``Z`` and the first chain ``α`` (first children from the root), ``P(Z^ℓ = α^ℓ) = p^ini(α_ℓ)`` given the first
    chain's tokens up to depth ``ℓ`` (the rest of the tree, below and beside, drafted as usual)."""
    worst = _Worst()
    for model, rng in _models(count, seed, (2, 4), tick):
        shape = TREE_SHAPES[int(rng.integers(len(TREE_SHAPES)))]
        topology = random_shape(rng, shape, 5)
        view = ModelView(model, "fraction")
        hits: dict[tuple[int, ...], list[Fraction]] = {}  # α^ℓ → [P(first chain has α^ℓ), P(that and Z^ℓ = α^ℓ)]
        for draft, p_draft in enumerate_outcomes(lambda r: draft_tree(topology, view, "without-replacement", r)):
            completed = fixed_tree_law(draft.tree, draft.p, draft.q, verifier, model.vocab, view=view,
                                       height=topology.height).completed()
            v = 0
            while draft.tree.children(v):
                v = draft.tree.children(v)[0]
                prefix = draft.tree.path(v)
                mass = sum((pr for seq, pr in completed.items() if seq[:len(prefix)] == prefix), Fraction(0))
                cell = hits.setdefault(prefix, [Fraction(0), Fraction(0)])
                cell[0] += p_draft
                cell[1] += p_draft * mass
        for prefix, (reach, joint) in hits.items():
            rate = Fraction(1)
            for k, x in enumerate(prefix):
                rate = min(Fraction(1), rate * view.q(prefix[:k])[x] / view.p(prefix[:k])[x])
            worst.see(-abs(joint / reach - rate), f"vocab={model.vocab} seed={model.seed} {shape} α={prefix}")
    return [worst.check("TRV Lemma A.2: P(Z^ℓ = α^ℓ given first chain α^ℓ) = p^ini(α^ℓ)",
                        "Weng et al. 2025, Lemma A.2")]


#: every check by name, with its default instance count (``specproof theorems --scale 1``)
# ---- DySpec ---------------------------------------------------------------------------------------------------
def check_dyspec_greedy(count: int, seed: int, tick: Callable[[], None] = _nothing) -> list[Check]:
    """DySpec (Xiong et al., arXiv:2410.11744), App. D.1: the greedy tree of ``N`` nodes has the largest weight of
    any rooted subtree of ``N`` nodes (weights: path products of the draft model), against exhaustive enumeration,
    N = 2..6."""
    from specproof.reports.greedy_tree import best_subtree_weight, greedy_subtree

    worst = _Worst()
    for model, rng in _models(count, seed, (2, 4), tick):
        view = ModelView(model, "fraction")
        size = int(rng.integers(2, 7))
        _, greedy = greedy_subtree(view, size)
        worst.see(greedy - best_subtree_weight(view, size), f"vocab={model.vocab} seed={model.seed} N={size}")
    return [worst.check("DySpec's greedy tree is the maximum-weight subtree of its size", "Xiong et al. 2024, App. D.1")]


# ---- the exact ceiling (exact/prove/optimum.py) -----------------------------------------------------------
def check_optimum(count: int, seed: int, tick: Callable[[], None] = _nothing) -> list[Check]:
    """The LP optimum E[τ]* (exact, primal and dual checked), on ``count`` chains and ``count // 5`` instances of
    each other kind: = BV on chains (Sun et al. 2025, Thm. 2); = α* at depth 1 (the optimal-transport value of
    the root's rows, computed in closed form, not by a rule); every claiming per-round lossless rule ≤ it on trees;
    and the optimal π written as a verifier module, certified by enumeration, LOSSLESS with E[τ]* (the LP encodes
    losslessness as the exact engine does). i.i.d. and without-replacement drafting alternate."""
    from exact.certificate import certify
    from exact.prove.optimum import optimum, rule_margins, verifier_module
    from simulator.drafting.drafter_registry import make_drafter

    def instances(kind: str, n: int):
        offset = {"chains": 0, "one-step": 1, "trees": 2, "runnable": 3}[kind]
        for i, (model, rng) in enumerate(_models(n, seed + offset, (2, 4), tick=tick)):
            scheme = ("iid", "without-replacement")[i % 2] if kind != "chains" else "iid"
            if kind == "chains":
                shape = make_topology("chain", int(rng.integers(1, 5)))
            elif kind == "one-step":
                shape = make_topology("complete", 1, int(rng.integers(2, 4)))
            else:
                shape = make_topology(("complete", "multi-chain", "tapered")[int(rng.integers(3))], 2, 2)
            yield model, make_drafter(scheme, shape, model), f"vocab={model.vocab} seed={model.seed} " \
                                                              f"{shape.name} {list(shape.parents)} {scheme}"

    def claiming(drafter) -> list[str]:
        return [name for name, spec in VERIFIERS.items() if drafter.scheme in spec.lossless_under
                and drafter.topology.name in spec.shapes]

    found = []
    chains = rule_margins(instances("chains", count), ["bv"], equal=True)
    found.append(Check("optimum E[τ]* = BV's E[τ] on chains", "Sun et al. 2025, Thm. 2", chains.instances,
                       float(chains.worst), chains.where))
    alpha = _Worst()
    for model, drafter, where in instances("one-step", max(1, count // 5)):
        result = optimum(model, drafter)
        view = ModelView(model, "fraction")
        star, _ = alpha_star(view.p(()), view.q(()), len(drafter.topology.parents) - 1, drafter.scheme)
        alpha.see(-abs(result.optimum - star) if result.proved else -1, where)
    found.append(alpha.check("optimum E[τ]* = α* at depth 1 (closed form of the root's rows)", "SpecTr's LP"))
    below = _Worst()
    for model, drafter, where in instances("trees", max(1, count // 5)):
        margin = rule_margins([(model, drafter, where)], claiming(drafter))
        below.count += margin.instances - 1
        below.see(margin.worst, margin.where)
    found.append(below.check("every claiming lossless rule's E[τ] ≤ optimum E[τ]*", "LP optimality"))
    runnable = _Worst()
    for model, drafter, where in instances("runnable", max(1, count // 25)):
        result = optimum(model, drafter)
        space: dict = {}
        exec(compile(verifier_module(result, drafter.scheme), "<optimal verifier>", "exec"), space)
        cert = certify(model, drafter, space["verify"])
        runnable.see(-1 if not cert.lossless else -abs(cert.expected_accepted - result.optimum), where)
    found.append(runnable.check("the optimal π as a verifier module: LOSSLESS with E[τ]* (enumeration)",
                                "LP = the exact engine"))
    return found


# ---- Khisti et al.: the canonical decomposition reaches the optimum at one level ----------------------------
def check_khisti(count: int, seed: int, tick: Callable[[], None] = _nothing,
                 rule: str | Verifier = "khisti-is") -> list[Check]:
    """Khisti et al. (ICLR 2025, arXiv:2410.18234), Theorem 1: importance-sampling selection then single-draft SpS
    against the selected token's law reaches the optimal acceptance, so on one-level trees drafted by ``k-models``
    (k = 2–3 different draft models, one child each) ``khisti-is`` is lossless and its E[τ] equals ``optimum``'s
    E[τ]*, on ``count`` random rational pairs, exactly. ``rule``: another verifier held to the same claim (a test's
    control)."""
    from exact.prove.optimum import optimum

    rng = np.random.default_rng(seed)
    ceiling = _Worst()
    for _ in range(count):
        k = int(rng.integers(2, 4))
        model = RandomRationalModel(int(rng.integers(2, 5)), int(rng.integers(2**31)), zero_prob=0.3, draft_models=k)
        drafter = FixedShape(make_topology("complete", 1, k), "k-models")
        cert = certify(model, drafter, rule)
        result = optimum(model, drafter)
        where = f"vocab={model.vocab} seed={model.seed} draft_models={k}"
        ceiling.see(-abs(result.optimum - cert.expected_accepted) if result.proved and cert.lossless else -1, where)
        tick()
    return [ceiling.check("khisti-is is lossless and its E[τ] = optimum E[τ]* at depth 1 under k-models",
                          "Khisti et al. 2025, Theorem 1; LP optimum")]


# ---- Hu et al.: the subset-selection dual and greedy drafting -----------------------------------------------
def check_hu(count: int, seed: int, tick: Callable[[], None] = _nothing) -> list[Check]:
    """Hu et al. (ICLR 2025, arXiv:2502.18779): the subset selection over prefixes (its dual) = α* (every subset,
    :func:`alpha_star`) = OPT's maximum flow, with and without replacement, on ``count`` random row pairs; and under
    greedy drafting the closed form = α* = tv-hu's single-step acceptance there, and tv-hu's E[τ] = ``optimum``'s
    E[τ]* on ``count // 10`` one-level trees (branching 2–3), all exact."""
    from exact.prove.optimum import optimum
    from simulator.verifiers.flows import opt_flow
    from simulator.verifiers.hu import greedy_alpha, subset_selection
    from simulator.verifiers.rules import HU

    rng = np.random.default_rng(seed)
    dual, greedy, ceiling = _Worst(), _Worst(), _Worst()
    for _ in range(count):
        vocab, k = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        p, q = _rows(rng, vocab)
        where = f"p={[str(x) for x in p]} q={[str(x) for x in q]} k={k}"
        for law in ("iid", "without-replacement"):
            value, star = subset_selection(p, q, k, law)[0], alpha_star(p, q, k, law)[0]
            dual.see(-max(abs(value - star), abs(value - opt_flow(p, q, k, law).acceptance)), f"{where} {law}")
        star = alpha_star(p, q, k, "greedy-k")[0]
        accepted = sum(HU.outflow(p, q, k, "greedy-k"), star * 0)
        greedy.see(-max(abs(greedy_alpha(p, q, k) - star), abs(accepted - star)), where)
        tick()
    for model, rng in _models(max(1, count // 10), seed + 1, (2, 5)):
        drafter = FixedShape(make_topology("complete", 1, int(rng.integers(2, 4))), "greedy-k")
        result = optimum(model, drafter)
        e_hu = round_law(model, drafter, "tv-hu").expected_accepted()
        where = f"vocab={model.vocab} seed={model.seed} branching={len(drafter.topology.parents) - 1}"
        ceiling.see(-abs(result.optimum - e_hu) if result.proved else -1, where)
    return [dual.check("subset selection over prefixes (the dual) = α* = OPT's max flow, with and without "
                       "replacement", "Hu et al. 2025, dual and subset selection"),
            greedy.check("greedy drafting: closed-form α* = α* of its tuple law = tv-hu's acceptance",
                         "Hu et al. 2025, greedy draft sampling"),
            ceiling.check("tv-hu's E[τ] = optimum E[τ]* at depth 1 under greedy-k", "Hu et al. 2025; LP optimum")]


# ---- SpecHub (Sun et al., EMNLP 2024) ----------------------------------------------------------------------
def check_spechub(count: int, seed: int, tick: Callable[[], None] = _nothing) -> list[Check]:
    """SpecHub at depth 1 under hub drafting, on ``count`` random rational models (vocab 2–5): its exact ``E[τ]``
    equals the LP optimum ``E[τ]*`` of the hub scheme (every hub pair holds the top token, so filling the target
    greedily is an optimal transport: docs/rules.md); and the paper's experimental claim that it accepts more than
    RRS with two i.i.d. drafts and RRS without replacement, checked exactly (an open claim: not a theorem)."""
    from exact.prove.optimum import rule_margins

    shape = make_topology("complete", 1, 2)
    instances = [(model, FixedShape(shape, "hub"), f"vocab={model.vocab} seed={model.seed}")
                 for model, _ in _models(count, seed, (2, 6))]
    ceiling = rule_margins(instances, ["spechub"], equal=True, tick=tick)
    rivals = {"tv-rrs": "iid", "tv-rrsw": "without-replacement"}
    beats = {name: _Worst() for name in rivals}
    for model, drafter, where in instances:
        hub = certify(model, drafter, "spechub").expected_accepted
        for name, scheme in rivals.items():
            beats[name].see(hub - certify(model, FixedShape(shape, scheme), name).expected_accepted, where)
    return [Check("spechub's E[τ] = the LP optimum E[τ]* under hub drafting (complete b=2, H=1)",
                  "SpecHub (Sun et al. 2024): the hub pairs' transport", ceiling.instances, float(ceiling.worst),
                  ceiling.where),
            beats["tv-rrs"].check("spechub (hub) accepts ≥ TV-RRS with 2 i.i.d. drafts at depth 1",
                                  "SpecHub (Sun et al. 2024), experiments", expected=None),
            beats["tv-rrsw"].check("spechub (hub) accepts ≥ TV-RRSw (without replacement) at depth 1",
                                   "SpecHub (Sun et al. 2024), experiments", expected=None)]


CHECKS: dict[str, tuple[Callable[[int, int], list[Check]], int]] = {
    "chains": (check_bv_optimal_on_chains, 200),
    "single-step": (check_single_step, 1000),
    "lv-assumption": (check_lv_assumption, 300),
    "lv-vs-tv": (check_lv_beats_tv, 400),
    "trv-lemma": (check_trv_lemma, 400),
    "dyspec-greedy": (check_dyspec_greedy, 300),
    "optimum": (check_optimum, 500),
    "gr-vs-opt": (check_gr_reaches_opt, 100),
    "khisti": (check_khisti, 100),
    "hu": (check_hu, 200),
    "spechub": (check_spechub, 40),
}


def run_checks(scale: float = 1.0, seed: int = 0, only: Iterable[str] | None = None,
               tick: Callable[[str, int], None] | None = None) -> list[Check]:
    """Run the checks (all, or those named in ``only``); ``scale`` multiplies the default instance counts;
    ``tick(check, instances)`` after each instance, for a progress bar.

    A margin is ≥ 0 exactly when the claim holds on the instance (for equalities, ``−max |difference|``). A claim
    that fails shows up as a negative margin with its instance, never as a skipped test.
    """
    names = list(CHECKS) if only is None else list(only)
    for name in names:
        if name not in CHECKS:
            raise InvalidParameterError("check", f"unknown check {name!r}; choose from {', '.join(CHECKS)}")
    out: list[Check] = []
    for name in names:
        start = time.perf_counter()
        fn, default = CHECKS[name]
        count = max(1, round(default * scale))
        step = (lambda name=name, count=count: tick(name, count)) if tick is not None else _nothing
        found = fn(count, seed + list(CHECKS).index(name) + 1, tick=step)
        seconds = time.perf_counter() - start
        out.extend(replace(c, group=name, seconds=seconds) for c in found)
    return out


_MEANING = """\
## What the table means

- **Margins.** Each instance is exact (random rational models with zeros, vocab 2–4, chain, multi-chain,
  complete and tapered trees); the margin is computed with rationals, so a margin of 0 for an equality is an
  exact identity, not a small float. The LP cross-check and the K-SEQ bound involve floats (scipy's HiGHS; the
  bisection for K-SEQ's ρ and the constant 1 − 1/e), and GR is solved numerically: their tolerances are in the
  table.
- **GR.** Its paper (Thomas & Pal, arXiv:2511.15898) states, in its abstract, that its convex program gives the
  optimal transport for i.i.d. drafts from one draft model, "tuned to arbitrary accuracy". `tv-gr` solves a
  convex program of its own in `V` variables (`simulator/verifiers/flows.py`), lossless exactly by construction;
  its acceptance is checked against α* (`single-step`) and against `tv-opt`'s exact max-flow (`gr-vs-opt`,
  vocab 2–6, k 1–4) within `GR_TOLERANCE`. Where `tv-gr` differs from the paper: docs/rules.md, "GR: the paper
  and `tv-gr`".
- **Open claims** are those the papers support with experiments only. Layer Verification's paper reports that
  LV-lifting accepts at least as much as TV-lifting on its toy study; on exact small instances this is not a
  theorem: a negative worst margin is a concrete instance (listed) where the LV-lifted rule's exact `E[τ]` is
  below the TV-lifted one's. Both are certified lossless there; only the acceptance comparison fails. The
  largest gaps come from duplicate sibling tokens under i.i.d. drafting: line 13 of the paper's Alg. 1 splits
  a token's acceptance equally among the siblings holding it (`1/#[X_w ∈ X]`), so a leaf duplicate takes half
  the score that TV-lifting (which walks into the first accepted child) spends on the deep one. Example:
  vocab 2, random-rational seed 387134303, tree `[-1, 0, 0, 1, 1, 3]`, where the root's draft and target both
  put all mass on one token: TV-K-SEQ accepts 2.467 tokens on average, LV-K-SEQ 1.724 (`specproof certify
  --model random-rational --zero-prob 0.3 --vocab 2 --seed 387134303 --parents -1,0,0,1,1,3 --verifier
  lv-kseq`, then `--verifier tv-kseq`). Smaller gaps (0.04 on a tapered tree for RRS) exist as well. On
  chains the claim holds (there LV-SpS is BV).
"""


def theorems_markdown(checks: list[Check], command: str) -> str:
    """The report: one row per claim, then what the margins and verdicts mean."""
    lines = ["# Theorem checks", "",
             f"Generated by `{command}`. A margin is ≥ 0 exactly when the claim holds on that instance (for "
             "equalities: minus the largest difference); the worst instance is listed where the claim fails or "
             "is tight. The sources' full references are in docs/papers.md.", "",
             "| check | claim | source | instances | worst margin | tolerance | verdict | worst instance |",
             "|---|---|---|---|---|---|---|---|"]
    for c in checks:
        verdict = c.verdict + (" (open claim)" if c.expected is None else "" if c.as_expected
                               else " (UNEXPECTED)")
        shown = c.worst_instance if not c.holds or c.worst_margin == 0 else ""
        lines.append(f"| {c.group} | {c.claim} | {c.source} | {c.instances} | {c.worst_margin:.6g} | "
                     f"{c.tolerance:g} | {verdict} | {shown} |")
    times = {c.group: c.seconds for c in checks}
    lines += ["", "Wall time per check: " + ", ".join(f"{g} {t:.1f} s" for g, t in times.items())
              + f"; total {sum(times.values()):.1f} s.", ""]
    return "\n".join(lines) + "\n" + _MEANING
