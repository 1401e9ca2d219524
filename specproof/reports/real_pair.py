"""The real-pair report (``specproof real-report``, docs/cli/real.md): verifiers and drafters on a real trained pair
over MT-bench's first turns, each round's exact ``E[τ]`` per rule beside the sampled one, in a resumable store
(:func:`run_real_pair`, :func:`write_real_pair_report`)."""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from simulator.jsonfile import read_json, write_json, write_text

MAIN_DRAFT = "self:skip=12,14,16,18"
#: the draft trained for the target (``specproof train-draft``), whose verifier-study rows stand beside the main's
TRAINED_DRAFT = "smollm2-draft"
#: the rows' processing: temperature 1 and transformers' default top-k for sampling, which keeps each round's
#: support small enough for the exact expectation (exact/enumeration.py)
TEMPERATURE, TOP_K = 1.0, 50
BUDGETS = (8, 16, 32)
#: shape name -> (topology, depth, branching) of the verifier study (``specproof real-transfer`` reads these)
SHAPES = {"chain": ("chain", 3, 1), "complete": ("complete", 3, 2), "multi-chain": ("multi-chain", 3, 3)}
#: ADED's corpus: the target's own answers to the shipped instructions, this many tokens each
CORPUS_TOKENS = 48


@dataclass(frozen=True)
class RealRow:
    """One rule on one fixed shape of the verifier study, as ``specproof real-transfer`` reads it: accepted tokens
    per step are the exact per-round means; speed is measured for the rule that decided the run (``None`` for the
    others, evaluated on its rounds)."""

    verifier: str
    drafting: str
    shape: str
    depth: int
    branching: int
    draft: str
    questions: int
    tokens: int
    block_efficiency: float  # tokens per target pass: accepted + 1
    block_efficiency_se: float  # clustered by question
    tokens_per_s: float | None
    speedup: float | None  # over target-only decoding measured in the same command
    draft_passes_per_step: float

    @property
    def accepted(self) -> float:
        return self.block_efficiency - 1


@dataclass(frozen=True)
class Config:
    """One serving run: ``drafting`` over ``parents`` (a fixed shape) or ``budget`` (DySpec), decided by
    ``verifier`` (``None``: target-only decoding); ``exact`` lists the rules whose exact per-round expectation is
    computed on its rounds, ``base`` the one paired differences are taken against."""

    key: str
    study: str
    label: str
    drafting: str = ""
    parents: tuple[int, ...] | None = None
    budget: int | None = None
    verifier: str | None = None
    exact: tuple[str, ...] = ()
    base: str = ""
    draft: str | None = MAIN_DRAFT
    shape: str = ""  # a name of SHAPES for the verifier study's rows

    def digest(self, setting: dict) -> str:
        """The store's key: everything that changes the run's numbers."""
        text = json.dumps({**asdict(self), **setting}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _fixed(topology: str, depth: int, branching: int) -> tuple[int, ...]:
    from simulator.trees import make_topology

    return tuple(make_topology(topology, depth, branching).parents)


def verifier_configs(draft: str = MAIN_DRAFT) -> list[Config]:
    """The verifier study with ``draft``: each fixed shape drafted once, the rules lossless under its drafting on
    its rounds. Layer Verification lifting RRS on a tree is the one rule left to its sampled mean (its run decides
    by it): its reference sums each node's flows over every tuple of candidates, ``s^k`` tuples for ``k`` children
    over a support of ``s ≈ 500`` tokens, minutes a round at ``k = 2``. Another draft than the main one gets keys
    prefixed ``trained-``."""
    main = [
        Config("chain-iid", "verifiers", "chain (3, 1)", "iid", _fixed(*SHAPES["chain"]), None, "tv-sps",
               ("tv-sps", "tv-rrs", "tv-kseq", "bv", "trv", "lv-rrs", "gbv"), "tv-sps", shape="chain"),
        Config("complete-iid", "verifiers", "complete (3, 2)", "iid", _fixed(*SHAPES["complete"]), None, "lv-rrs",
               ("tv-sps", "tv-rrs", "tv-kseq", "trv"), "tv-rrs", shape="complete"),
        Config("complete-wor", "verifiers", "complete (3, 2)", "without-replacement", _fixed(*SHAPES["complete"]),
               None, "tv-rrsw", ("tv-sps", "tv-rrsw", "dyspec", "trv", "lv-sps"), "tv-rrsw", shape="complete"),
        Config("multi-chain-iid", "verifiers", "multi-chain (3, 3)", "iid", _fixed(*SHAPES["multi-chain"]), None,
               "gbv", ("tv-sps", "tv-rrs", "tv-kseq", "trv", "gbv"), "tv-rrs", shape="multi-chain"),
    ]
    return main if draft == MAIN_DRAFT else [replace(c, key=f"trained-{c.key}", draft=draft) for c in main]


DYSPEC_RULES = ("tv-rrsw", "dyspec", "trv", "tv-sps")


def complete_within(budget: int) -> tuple[int, int]:
    """(depth, 2) of the largest complete binary tree with at most ``budget`` draft tokens."""
    depth = 1
    while 2 ** (depth + 2) - 2 <= budget:
        depth += 1
    return depth, 2


def dyspec_configs(budget: int) -> list[Config]:
    """DySpec's dynamic tree and the chain and complete tree of the same budget (the Sequoia-style tree needs
    DySpec's rounds first: :func:`sequoia_config`)."""
    depth, branching = complete_within(budget)
    common = dict(study="dyspec", verifier="tv-rrsw", exact=DYSPEC_RULES, base="tv-rrsw", budget=budget)
    return [
        Config(f"dyspec-{budget}", label=f"DySpec greedy ({budget} tokens)", drafting="dyspec", **common),
        Config(f"chain-{budget}", label=f"chain ({budget}, 1)", drafting="without-replacement",
               parents=_fixed("chain", budget, 1), **common),
        Config(f"complete-{budget}", label=f"complete ({depth}, {branching})", drafting="without-replacement",
               parents=_fixed("complete", depth, branching), **common),
    ]


def rank_rates(rounds: Sequence[dict]) -> list[float]:
    """``P(the r-th child is accepted | its parent reached, children 1..r−1 rejected)`` for r = 1, 2, ..., from
    rounds' trees (``parents``) and accepted nodes: every node of an accepted path with children is a trial of
    its ranks up to the one accepted (all of them where none was)."""
    tried: list[int] = []
    won: list[int] = []
    for r in rounds:
        parents, node = r["parents"], r["node"]
        children: dict[int, list[int]] = {}
        for v in range(1, len(parents)):
            children.setdefault(parents[v], []).append(v)
        path = [node]
        while path[-1] > 0:
            path.append(parents[path[-1]])
        path.reverse()  # root ... accepted node
        for i, u in enumerate(path):
            kids = children.get(u, [])
            accepted = kids.index(path[i + 1]) if i + 1 < len(path) else None
            for rank in range(len(kids) if accepted is None else accepted + 1):
                while len(tried) <= rank:
                    tried.append(0)
                    won.append(0)
                tried[rank] += 1
                won[rank] += rank == accepted
    return [w / t for w, t in zip(won, tried)]


def sequoia_tree(rates: Sequence[float], budget: int) -> tuple[int, ...]:
    """The tree of ``budget`` draft tokens a greedy search finds heaviest when a node weighs the product, along its
    path, of ``P(accepted at its rank | parent reached) = rate_r Π_{j<r}(1 − rate_j)`` (the positional model of
    Sequoia, Chen et al., NeurIPS 2024, arXiv:2402.12374): the heaviest frontier node added each time, a node's
    rank-r child offered once its rank-(r−1) child is in. BFS order."""
    reach = []
    rejected = 1.0
    for rate in rates:
        reach.append(rejected * rate)
        rejected *= 1 - rate
    nodes = [(-1, 0, 1.0)]  # (parent, rank, weight), in the order added
    frontier = {(0, 0): reach[0]} if reach else {}
    while len(nodes) - 1 < budget and frontier:
        (parent, rank), weight = max(frontier.items(), key=lambda item: (item[1], -item[0][0], -item[0][1]))
        del frontier[(parent, rank)]
        nodes.append((parent, rank, weight))
        if rank + 1 < len(reach):
            frontier[(parent, rank + 1)] = nodes[parent][2] * reach[rank + 1]
        frontier[(len(nodes) - 1, 0)] = weight * reach[0]
    children: dict[int, list[int]] = {}
    for v in sorted(range(1, len(nodes)), key=lambda v: nodes[v][1]):
        children.setdefault(nodes[v][0], []).append(v)
    order = [0]
    for u in order:  # breadth first, siblings by rank
        order.extend(children.get(u, []))
    new_id = {old: new for new, old in enumerate(order)}
    return tuple([-1] + [new_id[nodes[old][0]] for old in order[1:]])


def sequoia_config(budget: int, rates: Sequence[float]) -> Config:
    parents = sequoia_tree(rates, budget)
    from simulator.trees import node_depths

    return Config(f"sequoia-{budget}", "dyspec", f"Sequoia-style ({budget} tokens, depth {max(node_depths(parents))})",
                  "without-replacement", parents, budget, "tv-rrsw", DYSPEC_RULES, "tv-rrsw")


def not_lossless(configs: Sequence[Config]) -> list[str]:
    """A line for every rule of ``configs`` (the deciding one and those evaluated on its rounds) that is not
    lossless under its configuration's drafting, or a negative control (:meth:`exact.subject.Subject.measurement_note`):
    the report's configurations pair each rule with a drafting it claims, so this is empty unless one is changed."""
    from exact.subject import subject

    lines = []
    for config in configs:
        for rule in dict.fromkeys([*([config.verifier] if config.verifier else []), *config.exact]):
            note = subject(rule).measurement_note(config.drafting)
            if note is not None:
                lines.append(f"{config.key}: {note}")
    return lines


def _lossless_claimed(rule: str, drafting: str) -> bool:
    from exact.subject import subject

    return subject(rule).lossless_under(drafting)


def aded_configs() -> list[Config]:
    return [Config("aded", "aded", "ADED tri-gram (24 × 4)", "aded", None, None, "match", ("match", "tv-det"),
                   "match", draft=None),
            Config("target", "aded", "target only", draft=None)]


# ---- running and the store ----------------------------------------------------------------------------------------

class Store:
    """``<root>/<config digest>/<question id>.json``: one configuration's record of one question, written when the
    question is done (to a temporary name, then renamed), so an interrupted run loses at most the question it was
    on. The digest covers the configuration and the setting (target, tokens, seed, processing, corpus); after a
    change of code, remove the store (or pass ``--fresh``) to measure again."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, digest: str, question_id: object) -> Path:
        return self.root / digest / f"{question_id}.json"

    def get(self, digest: str, question_id: object) -> dict | None:
        path = self.path(digest, question_id)
        return read_json(path, "store") if path.is_file() else None

    def put(self, digest: str, question_id: object, record: dict) -> None:
        path = self.path(digest, question_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(".partial")
        write_json(scratch, record, "store")
        scratch.replace(path)


@dataclass
class Runner:
    """Models, tokenizer and setting of a real-report run, loaded on first use (a run whose every question is in the
    store loads nothing)."""

    target: str
    questions: Sequence[dict]
    new_tokens: int
    seed: int
    device: str
    store: Store
    tick: Callable[[str, int], None] | None = None
    draft_spec: str = MAIN_DRAFT  # the draft of every configuration that reads one
    loaded: dict = field(default_factory=dict)
    seconds: float = 0.0  # wall time of the questions run in this command (stored ones excluded)

    @property
    def setting(self) -> dict:
        """What changes every run's numbers; a trained draft's weights too (by their SHA-256), so retraining it
        measures again."""
        setting = {"target": self.target, "new_tokens": self.new_tokens, "seed": self.seed,
                   "temperature": TEMPERATURE, "top_k": TOP_K, "draft_spec": self.draft_spec}
        from simulator.real.fetch import cache_dir
        from simulator.real.trained_draft import RECIPES, TRAINING_RECORD, trained_directory

        if self.draft_spec in RECIPES:
            record = read_json(trained_directory(self.draft_spec, cache_dir()) / TRAINING_RECORD, "draft")
            setting["draft_weights"] = record["weights_sha256"]
        return setting

    def models(self) -> dict:
        if not self.loaded:
            import torch

            from simulator.real.causal_lm import load_pair, load_tokenizer

            draft, target = load_pair(self.draft_spec, self.target, torch.float32, self.device)
            tokenizer, _ = load_tokenizer(self.target)
            self.loaded.update(draft=draft, target=target, tokenizer=tokenizer)
        return self.loaded

    def run(self, config: Config) -> list[dict]:
        """Every question's record of ``config``, from the store or measured now."""
        digest = config.digest({**self.setting, **({"corpus": self.corpus_digest()} if config.drafting == "aded"
                                                   else {})})
        records = []
        for index, question in enumerate(self.questions):
            record = self.store.get(digest, question["question_id"])
            if record is None:
                start = time.perf_counter()
                record = self._answer(config, question, index)
                self.seconds += time.perf_counter() - start
                self.store.put(digest, question["question_id"], record)
            records.append(record)
            if self.tick is not None:
                self.tick(config.key, len(self.questions))
        return records

    def corpus(self) -> list[list[int]]:
        """ADED's corpus: the chat of each shipped instruction with the target's own answer (top-k sampling,
        seed ``seed + i``), stored once."""
        path = self.store.root / f"aded-corpus-{self.new_tokens}-{self.seed}.json"
        if path.is_file():
            return read_json(path, "store")
        from simulator.real.causal_lm import Processing
        from simulator.real.kv_cache import CachedLM
        from simulator.real.spec_bench import chat_ids, shipped_instructions, target_generate

        m = self.models()
        stop = [m["tokenizer"].eos_token_id]
        texts = []
        for i, instruction in enumerate(shipped_instructions()):
            prompt = chat_ids(m["tokenizer"], [{"role": "user", "content": instruction}])
            answer = target_generate(CachedLM(m["target"], Processing(TEMPERATURE, TOP_K)), prompt, CORPUS_TOKENS,
                                     self.seed + i, stop).tokens
            texts.append(prompt + answer)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, texts, "store")
        return texts

    def corpus_digest(self) -> str:
        return hashlib.sha256(json.dumps(self.corpus()).encode()).hexdigest()[:16]

    def _drafter(self, config: Config):
        from simulator.drafting import FixedShape
        from simulator.drafting.drafter_registry import DrafterOptions, make_drafter
        from simulator.trees import make_topology

        if config.parents is not None:
            return FixedShape(make_topology("explicit", parents=config.parents), config.drafting)
        vocab = self.models()["target"].config.vocab_size
        if config.drafting == "aded":
            return make_drafter("aded", options=DrafterOptions(corpus=self.corpus()), vocab=vocab)
        return make_drafter(config.drafting, options=DrafterOptions(budget=config.budget))

    def _answer(self, config: Config, question: dict, index: int) -> dict:
        from exact.enumeration import expected_acceptance, restrict_round
        from simulator.real.causal_lm import Processing
        from simulator.real.kv_cache import CachedLM
        from simulator.real.spec_bench import chat_ids, speculative_generate, target_generate
        from simulator.verifiers import VERIFIERS

        m = self.models()
        processing = Processing(TEMPERATURE, TOP_K)
        context = chat_ids(m["tokenizer"], [{"role": "user", "content": str(question["turns"][0])}])
        stop = [m["tokenizer"].eos_token_id]
        seed = self.seed + 1000 * index
        if config.verifier is None:
            out = target_generate(CachedLM(m["target"], processing), context, self.new_tokens, seed, stop)
            return {"tokens": len(out.tokens), "emitted": len(out.tokens), "steps": len(out.accept_lengths),
                    "seconds": out.seconds, "draft_passes": 0, "exact_seconds": 0.0, "rounds": []}
        rounds: list[dict] = []

        def observe(rows) -> None:
            r = rows.round
            drafted = restrict_round(r.parents, r.tokens, rows.p.cpu().numpy(), rows.q.cpu().numpy(), rows.sampled)
            depth, node = 0, r.node
            while node > 0:
                depth, node = depth + 1, r.parents[node]
            rounds.append({"sampled": depth, "node": r.node, "parents": list(r.parents),
                           "support": len(drafted.support),
                           "exact": {name: expected_acceptance(VERIFIERS[name].fn, drafted).accepted
                                     for name in config.exact}})

        start = time.perf_counter()
        draft = None if config.draft is None else CachedLM(m["draft"], processing)
        out = speculative_generate(draft, CachedLM(m["target"], processing), context, self._drafter(config),
                                   config.verifier, self.new_tokens, seed, stop, observe)
        return {"tokens": len(out.tokens), "emitted": sum(out.accept_lengths), "steps": len(out.accept_lengths),
                "seconds": out.seconds, "draft_passes": out.draft_passes,
                "exact_seconds": time.perf_counter() - start - out.seconds, "rounds": rounds}


def run_real_pair(target: str, questions: Sequence[dict], new_tokens: int, seed: int, device: str, store: Path,
                  tick: Callable[[str, int], None] | None = None,
                  trained: str | None = None) -> tuple[list[tuple[Config, list[dict]]], Runner]:
    """Every configuration's records, in the report's order (DySpec's at each budget before the Sequoia-style tree
    built from its rounds); with ``trained`` (a draft's name or folder), the verifier study again with it.

    Every configuration (a drafter, a tree and the rule that decides the run) is one KV-cached serving run per question
    on SmolLM2-135M-Instruct with a draft of its own layers. On each round the exact engine
    (:func:`exact.enumeration.expected_acceptance`) gives every listed rule's ``E[τ | the drafted tree and its rows]``
    over that rule's own choices: their mean over rounds has the sampled mean's expectation and much less noise, and
    rules evaluated on the same rounds give paired differences. Standard errors are clustered by question; the
    deciding rule's sampled mean is checked against its exact mean. Three studies: TRV, BV, LV and GBV against token
    verification on fixed shapes; DySpec's dynamic tree against fixed trees of the same budget (a chain, a complete
    binary tree, and the Sequoia-style tree from the rank acceptance rates of DySpec's own rounds); ADED's tri-gram
    drafts against a draft-model chain and target-only decoding. Results are kept per configuration and question
    (:class:`Store`), so an interrupted run resumes.
    """
    runner = Runner(target, questions, new_tokens, seed, device, Store(store), tick)
    done: list[tuple[Config, list[dict]]] = []
    for config in verifier_configs():
        done.append((config, runner.run(config)))
    if trained is not None:
        other = Runner(target, questions, new_tokens, seed, device, Store(store), tick, draft_spec=trained)
        for config in verifier_configs(trained):
            done.append((config, other.run(config)))
    for budget in BUDGETS:
        for config in dyspec_configs(budget):
            done.append((config, runner.run(config)))
        dyspec_rounds = [r for record in done[-3][1] for r in record["rounds"]]
        config = sequoia_config(budget, rank_rates(dyspec_rounds))
        done.append((config, runner.run(config)))
    for config in aded_configs():
        done.append((config, runner.run(config)))
    return done, runner


# ---- statistics ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    """A mean over rounds and its standard error clustered by question (the ratio estimator's: rounds of one
    answer share its context, so they are not independent draws)."""

    mean: float
    se: float

    @classmethod
    def of(cls, per_question: Sequence[Sequence[float]]) -> "Estimate":
        sums = np.array([sum(values) for values in per_question], dtype=float)
        counts = np.array([len(values) for values in per_question], dtype=float)
        mean = sums.sum() / counts.sum()
        q = len(sums)
        if q < 2:
            return cls(float(mean), float("nan"))
        se = math.sqrt(q / (q - 1) * float(((sums - mean * counts) ** 2).sum())) / counts.sum()
        return cls(float(mean), se)

    def text(self, digits: int = 3) -> str:
        return f"{self.mean:.{digits}f} ± {self.se:.{digits}f}"


@dataclass(frozen=True)
class Summary:
    """One configuration over every question."""

    config: Config
    records: list[dict]

    def rounds(self, key: Callable[[dict], float]) -> list[list[float]]:
        return [[key(r) for r in record["rounds"]] for record in self.records]

    def value(self, rule: str) -> Callable[[dict], float]:
        """A round's value for ``rule``: its exact expectation where computed, else (the deciding rule) its
        sampled acceptance, which has the same expectation."""
        return (lambda r: r["exact"][rule]) if rule in self.config.exact else (lambda r: r["sampled"])

    @property
    def rules(self) -> tuple[str, ...]:
        """The rules of the run's rows: the exact ones, and the deciding rule where it has no exact expectation."""
        extra = () if self.config.verifier in self.config.exact else (self.config.verifier,)
        return self.config.exact + extra

    def exact(self, rule: str) -> Estimate:
        return Estimate.of(self.rounds(self.value(rule)))

    def sampled(self) -> Estimate:
        return Estimate.of(self.rounds(lambda r: r["sampled"]))

    def paired(self, rule: str) -> Estimate:
        """``rule`` − ``base``, round by round."""
        own, base = self.value(rule), self.value(self.config.base)
        return Estimate.of(self.rounds(lambda r: own(r) - base(r)))

    def check(self) -> Estimate | None:
        """Sampled − exact of the deciding rule, round by round (expectation 0); ``None`` where it has no exact
        expectation."""
        if self.config.verifier not in self.config.exact:
            return None
        return Estimate.of(self.rounds(lambda r: r["sampled"] - r["exact"][self.config.verifier]))

    @property
    def tokens(self) -> int:
        return sum(r["tokens"] for r in self.records)

    @property
    def steps(self) -> int:
        return sum(r["steps"] for r in self.records)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / sum(r["seconds"] for r in self.records)

    @property
    def draft_passes_per_step(self) -> float:
        return sum(r["draft_passes"] for r in self.records) / self.steps

    def nodes(self) -> tuple[float, int]:
        """Mean draft tokens per tree, and the deepest tree's depth."""
        from simulator.trees import node_depths

        trees = [r["parents"] for record in self.records for r in record["rounds"]]
        return (float(np.mean([len(t) - 1 for t in trees])) if trees else 0.0,
                max((max(node_depths(t)) for t in trees), default=0))


# ---- the report: computing, then rendering -------------------------------------------------------------------------

@dataclass(frozen=True)
class RealPairResults:
    """What the report shows, computed from every configuration's records (:func:`real_pair_results`)."""

    done: list[tuple[Config, list[dict]]]  # every configuration's records, in the report's order
    summaries: dict[str, Summary]  # by configuration key
    question_ids: list
    new_tokens: int
    baseline: float  # target-only decoding's tokens/s, measured in the same command
    checks: list[tuple[str, Estimate]]  # each deciding rule's sampled − exact mean, where it has an exact one
    instructions: int  # ADED's corpus: the shipped instructions answered

    @property
    def trained(self) -> list[Summary]:
        """The verifier study's runs with another draft than the main one."""
        return [self.summaries[c.key] for c, _ in self.done if c.study == "verifiers" and c.draft != MAIN_DRAFT]

    def study(self, name: str) -> list[Summary]:
        """The runs of study ``name`` (``verifiers``, ``dyspec``, ``aded``), in order."""
        return [self.summaries[c.key] for c, _ in self.done if c.study == name]

    @property
    def warnings(self) -> list[str]:
        """A line for each rule not lossless under its run's drafting (:func:`not_lossless`): shown before the first
        table, so that such a row cannot pass for a lossless rule's."""
        return not_lossless([config for config, _ in self.done])


@dataclass(frozen=True)
class Provenance:
    """Where and how a report was made, for its header: the command line, the machine in words, its core count
    and 1-minute load average before and after the run, this command's wall time, the time every stored question
    took to measure, and the date."""

    command: str
    machine: str
    cores: int | None
    load: tuple[float, float]
    seconds: float
    stored_seconds: float
    date: str


def real_pair_results(done: list[tuple[Config, list[dict]]], question_ids: list, new_tokens: int,
                      instructions: int) -> RealPairResults:
    """The summaries, the target-only baseline and every deciding rule's sampled-against-exact check of ``done``
    (:func:`run_real_pair`'s records); ``instructions``: how many shipped instructions ADED's corpus answers."""
    summaries = {config.key: Summary(config, records) for config, records in done}
    checks = [(config.key, check) for config, _ in done
              if config.study == "verifiers" and (check := summaries[config.key].check()) is not None]
    for budget in BUDGETS:
        checks += [(key, summaries[key].check()) for key in _budget_keys(budget)]
    checks.append(("aded", summaries["aded"].check()))
    return RealPairResults(done, summaries, question_ids, new_tokens, summaries["target"].tokens_per_s, checks,
                           instructions)


def _budget_keys(budget: int) -> tuple[str, ...]:
    return f"dyspec-{budget}", f"chain-{budget}", f"complete-{budget}", f"sequoia-{budget}"


def write_real_pair_report(out: Path, done: list[tuple[Config, list[dict]]], question_ids: list, new_tokens: int,
                           command: str, device: str, load: tuple[float, float], seconds: float,
                           stored_seconds: float) -> None:
    """``real_pair.md``, ``real_pair.json`` and ``real_pair.png`` in ``out``; ``load`` is the machine's 1-minute
    load average before and after the run; ``seconds`` the wall time of this command, ``stored_seconds`` that of
    every stored question (serving and exact expectations)."""
    import torch
    import transformers

    from simulator.real.spec_bench import shipped_instructions

    results = real_pair_results(done, question_ids, new_tokens, len(shipped_instructions()))
    machine = (f"{platform.machine()}, {torch.get_num_threads()} torch threads, device `{device}`; torch "
               f"{torch.__version__}, transformers {transformers.__version__}")
    run = Provenance(command, machine, os.cpu_count(), load, seconds, stored_seconds,
                     datetime.date.today().isoformat())
    write_text(out / "real_pair.md", real_pair_markdown(results, run), "out")
    write_json(out / "real_pair.json", real_pair_json(results, command, load), "out")
    plot_real_pair(out / "real_pair.png", results)


def real_pair_markdown(results: RealPairResults, run: Provenance) -> str:
    """``real_pair.md``."""
    lines = _header_lines(results, run)
    lines += _verifier_lines(results)
    if results.trained:
        lines += _speed_lines(results)
    lines += _dyspec_lines(results)
    lines += _aded_lines(results)
    lines += [
        "",
        "## Sampled against exact",
        "",
        f"Every deciding rule's sampled − exact mean, in standard errors: "
        + ", ".join(f"{key} {c.mean / c.se:+.1f}" for key, c in results.checks if c.se > 0)
        + f". Within 2: {sum(abs(c.mean) <= 2 * c.se for _, c in results.checks)} of {len(results.checks)} "
        "(about 95% expected).",
        "",
        "![exact accepted tokens per step](real_pair.png)",
        "",
    ]
    return "\n".join(lines)


def _header_lines(results: RealPairResults, run: Provenance) -> list[str]:
    trained = results.trained
    question_ids = results.question_ids
    return [
        "# Verifiers and drafters on a real trained pair: SmolLM2-135M-Instruct on MT-bench",
        "",
        f"Generated by `{run.command}` on {run.date} ({run.machine}; 1-minute load average "
        f"{run.load[0]:.1f} before the run and {run.load[1]:.1f} after it, on {run.cores} cores). This command took "
        f"{run.seconds:.0f} s; measuring every stored question took {run.stored_seconds / 60:.1f} min (serving and "
        "exact expectations; the store is `reports/store/real_pair`, and a rerun reads it).",
        "",
        f"Target SmolLM2-135M-Instruct (30 layers, vocabulary 49,152; `specproof fetch smollm2`). Draft: the "
        f"target's own layers, `{MAIN_DRAFT}` (26 layers)"
        + (f"; the verifier study again with `{trained[0].config.draft}`, a draft trained for the target "
           "(`specproof train-draft`: 3 layers started from the target's first 3, a head of the 8,192 tokens its "
           "answers use most; reports/trained_draft.md)" if trained else "") + ". MT-bench questions "
        f"{', '.join(str(q) for q in question_ids)} ({len(question_ids)} questions, first turns, chat template), "
        f"up to {results.new_tokens} new tokens or the end-of-sequence token; temperature {TEMPERATURE:g}, top-k "
        f"{TOP_K} (transformers' default for sampling) on both models. Trees are (depth, branching).",
        "",
        "**How to read the numbers.** Accepted tokens per step (a step is one target pass; block efficiency − 1). "
        "*Exact* is the mean over the run's rounds of the rule's `E[τ | drafted tree, rows]`, computed by the exact "
        "engine on every round (`exact.enumeration.expected_acceptance`: the rule's own choices enumerated on the "
        "round's top-k support): the same expectation as the *sampled* mean of the rule that decided the run, with "
        "less noise. Rules listed under one run are evaluated on the same rounds, so their *paired* differences have "
        "standard errors of their own. Standard errors (±) are clustered by question. The *check* column is the "
        "deciding rule's sampled − exact mean, which should be 0 within about two standard errors. Tokens/s and "
        f"speed-ups are wall-clock on this machine against target-only decoding ({results.baseline:.2f} tokens/s, "
        "measured in the same command); the exact expectations are not timed.",
        "",
    ] + (["**Not lossless runs.** " + " ".join(f"{w}." for w in results.warnings), ""] if results.warnings else [])


def _verifier_lines(results: RealPairResults) -> list[str]:
    lines = ["## TRV, BV, LV and GBV against token verification (the same rounds)", ""]
    for s in results.study("verifiers"):
        config, check = s.config, s.check()
        lines += [f"**{config.label}, {config.drafting} drafting, draft `{config.draft}`**, decided by "
                  f"`{config.verifier}`: "
                  f"{s.steps} rounds, {s.tokens} tokens, "
                  f"{s.tokens_per_s:.2f} tokens/s (speed-up {s.tokens_per_s / results.baseline:.2f}); sampled "
                  f"{s.sampled().text()}" + (f", check {check.text()}." if check else
                                             f" (`{config.verifier}` has no exact expectation here: its row is "
                                             "sampled, its paired difference sampled − exact)."), "",
                  f"| rule | accepted per step | − `{config.base}` (paired) |", "|---|---|---|"]
        for rule in s.rules:
            paired = "—" if rule == config.base else s.paired(rule).text()
            kind = "exact" if rule in config.exact else "sampled"
            lines.append(f"| `{rule}` | {s.exact(rule).text()} ({kind}) | {paired} |")
        lines.append("")
    return lines


def _speed_lines(results: RealPairResults) -> list[str]:
    lines = [
        "## Speed: the two drafts side by side",
        "",
        "The deciding rule of each run above; its accepted tokens per step (exact where it has one), draft "
        "passes and wall-clock speed-up over target-only decoding. These are the report's top-k 50 rows on "
        "trees of depth 3; benchmarks/real_speed.py (reports/real_speed.md) measures shallower trees and "
        "temperature 1 with nothing cut.",
        "",
        "| tree | drafting | rule | draft | accepted per step | draft passes per step | tokens/s | speed-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in results.study("verifiers"):
        config = s.config
        lines.append(f"| {config.label} | {config.drafting} | `{config.verifier}` | `{config.draft}` | "
                     f"{s.exact(config.verifier).text()} | {s.draft_passes_per_step:.2f} | "
                     f"{s.tokens_per_s:.2f} | {s.tokens_per_s / results.baseline:.2f} |")
    lines.append("")
    return lines


def _dyspec_lines(results: RealPairResults) -> list[str]:
    lines = [
        "## DySpec's dynamic tree against fixed trees of the same budget",
        "",
        "Without-replacement drafting, each tree verified by `tv-rrsw` (DySpec's own verification, `dyspec`, and "
        "TRV on the same rounds). The Sequoia-style tree is the heaviest tree of the budget under the rank "
        "acceptance rates measured on DySpec's rounds of that budget (a node weighs the product of its ranks' "
        "acceptance along its path). Trees of one budget are separate runs: their differences (− DySpec) are "
        "unpaired, with independent standard errors.",
        "",
        "| budget | tree | tokens per tree | depth (max) | `tv-rrsw` exact | − DySpec | `dyspec` exact | `trv` exact "
        "| sampled | check | draft passes per step | tokens/s | speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for budget in BUDGETS:
        reference = results.summaries[f"dyspec-{budget}"].exact("tv-rrsw")
        for key in _budget_keys(budget):
            s = results.summaries[key]
            mean_nodes, deepest = s.nodes()
            own = s.exact("tv-rrsw")
            diff = "—" if key.startswith("dyspec") else \
                f"{own.mean - reference.mean:+.3f} ± {math.hypot(own.se, reference.se):.3f}"
            lines.append(f"| {budget} | {s.config.label} | {mean_nodes:.1f} | {deepest} | {own.text()} | {diff} | "
                         f"{s.exact('dyspec').text()} | {s.exact('trv').text()} | {s.sampled().text()} | "
                         f"{s.check().text()} | {s.draft_passes_per_step:.2f} | {s.tokens_per_s:.2f} | "
                         f"{s.tokens_per_s / results.baseline:.2f} |")
    return lines


def _aded_lines(results: RealPairResults) -> list[str]:
    aded, chain, baseline = results.summaries["aded"], results.summaries["chain-iid"], results.baseline
    return [
        "",
        "## ADED's tri-gram drafts against a draft-model chain and target-only decoding",
        "",
        "ADED reads no draft model: its candidates come from a tri-gram table built from a corpus (the target's own "
        f"answers, {CORPUS_TOKENS} tokens each, to the {results.instructions} instructions of "
        "simulator/data/instructions.txt, none "
        "MT-bench's) and updated after every round from the output (App. Alg. 2); each question starts from the "
        "corpus table. Its drafts are deterministic, so sample-and-match (`match`) and deterministic RRS "
        "(`tv-det`) are its lossless rules.",
        "",
        "| drafting | draft model | rule | exact accepted per step | sampled | check | tokens/s | speed-up |",
        "|---|---|---|---|---|---|---|---|",
        f"| ADED (24 candidates × 4 tokens) | none | `match` | {aded.exact('match').text()} | "
        f"{aded.sampled().text()} | "
        f"{aded.check().text()} | {aded.tokens_per_s:.2f} | {aded.tokens_per_s / baseline:.2f} |",
        f"| ADED, same rounds | none | `tv-det` | {aded.exact('tv-det').text()} | — | — | — | — |",
        f"| chain (3, 1), i.i.d. | `{MAIN_DRAFT}` | `tv-sps` | {chain.exact('tv-sps').text()} | "
        f"{chain.sampled().text()} | {chain.check().text()} | {chain.tokens_per_s:.2f} | "
        f"{chain.tokens_per_s / baseline:.2f} |",
        f"| target only | none | — | 0 | 0 | — | {baseline:.2f} | 1.00 |",
    ]


def real_pair_json(results: RealPairResults, command: str, load: tuple[float, float]) -> dict:
    """``real_pair.json``: the verifier study's rows as ``specproof real-transfer`` reads them
    (:class:`RealRow`), and every configuration's numbers."""
    baseline = results.baseline
    rows = []
    for s in results.study("verifiers"):
        config = s.config
        topology, depth, branching = SHAPES[config.shape]
        for rule in s.rules:
            e = s.exact(rule)
            decided = rule == config.verifier
            rows.append({**asdict(RealRow(rule, config.drafting, config.shape, depth, branching, config.draft,
                                          len(s.records), s.tokens, 1 + e.mean, e.se,
                                          s.tokens_per_s if decided else None,
                                          s.tokens_per_s / baseline if decided else None, s.draft_passes_per_step)),
                         "lossless_claimed": _lossless_claimed(rule, config.drafting)})
    configs = []
    for config, _ in results.done:
        s = results.summaries[config.key]
        entry = {**asdict(config), "tokens": s.tokens, "steps": s.steps, "tokens_per_s": s.tokens_per_s,
                 "speedup": s.tokens_per_s / baseline,
                 "lossless_claimed": {rule: _lossless_claimed(rule, config.drafting)
                                      for rule in dict.fromkeys([*filter(None, [config.verifier]), *config.exact])}}
        if config.verifier is not None:
            check = s.check()
            entry.update(sampled=asdict(s.sampled()), check=None if check is None else asdict(check),
                         exact={rule: asdict(s.exact(rule)) for rule in config.exact},
                         paired={rule: asdict(s.paired(rule)) for rule in s.rules if rule != config.base},
                         draft_passes_per_step=s.draft_passes_per_step)
        configs.append(entry)
    return {"command": command, "questions": results.question_ids, "new_tokens": results.new_tokens,
            "turns": "first", "processing": {"temperature": TEMPERATURE, "top_k": TOP_K},
            "baseline_tokens_per_s": baseline, "load_average": list(load), "rows": rows, "configs": configs}


def plot_real_pair(path: Path, results: RealPairResults) -> None:
    """``real_pair.png``: the verifier study's exact accepted tokens per step (left) and DySpec against fixed trees
    by budget (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    summaries = results.summaries
    labels, values, errors = [], [], []
    for s in summaries.values():
        if s.config.study != "verifiers":
            continue
        for rule in s.rules:
            e = s.exact(rule)
            drafting = "wor" if s.config.drafting == "without-replacement" else s.config.drafting
            mark = "" if s.config.draft == MAIN_DRAFT else " (trained)"
            labels.append(f"{rule}\n{s.config.shape} {drafting}{mark}")
            values.append(e.mean)
            errors.append(e.se)
    left.bar(range(len(values)), values, yerr=errors, capsize=2, color="tab:blue")
    left.set_xticks(range(len(values)), labels, rotation=90, fontsize=6)
    left.set_ylabel("exact accepted tokens per step (± SE)")
    left.set_title("verifiers on the same rounds", fontsize=9)
    for kind, colour in (("dyspec", "tab:red"), ("chain", "tab:grey"), ("complete", "tab:orange"),
                         ("sequoia", "tab:green")):
        points = [summaries[f"{kind}-{b}"].exact("tv-rrsw") for b in BUDGETS]
        right.errorbar(BUDGETS, [p.mean for p in points], yerr=[p.se for p in points], marker="o", capsize=3,
                       label=kind, color=colour)
    right.set_xscale("log", base=2)
    right.set_xticks(BUDGETS, [str(b) for b in BUDGETS])
    right.set_xlabel("draft tokens per tree")
    right.set_ylabel("tv-rrsw exact accepted tokens per step")
    right.set_title("DySpec against fixed trees", fontsize=9)
    right.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def stored_seconds(done: list[tuple[Config, list[dict]]]) -> float:
    """The wall time every stored question took to measure: serving and exact expectations."""
    return sum(r["seconds"] + r["exact_seconds"] for _, records in done for r in records)
