"""ADED's adaptive drafts (Liu et al., AAAI 2025, arXiv:2407.12021; docs/drafting.md): a tri-gram table
(:class:`TrigramTable`, Eq. 1, App. Alg. 2) searched by MCTS (:func:`mcts_candidates`, App. Alg. 1), and the
drafter :class:`Aded`, whose ``advance`` updates the table with the generated text."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property, lru_cache
from typing import Iterable, Sequence

import numpy as np

from ..errors import InvalidParameterError
from ..models import Context, ModelPair, ModelView
from ..numeric import normalise
from ..randomness import SamplingRandomness
from ..trees import MAX_TREE_NODES, DraftTree
from .shapes import Draft

START = -1  # the start marker padding each corpus sequence and a short prompt
Key = tuple[int, int]


@dataclass(frozen=True)
class TrigramTable:
    """Scores ``score(c | a, b)``, per bigram sorted by score (descending), ties by token. From a corpus: Eq. 1,
    ``P(c | a, b) = C(a, b, c) / C(a, b)``, keeping the ``top`` most frequent continuations of each bigram (the
    paper's elimination threshold ``t``, 12); sequences are padded with two start markers (``-1``) so a prompt
    shorter than two tokens has a row. Scores are exact rationals."""

    rows: tuple[tuple[Key, tuple[tuple[int, Fraction], ...]], ...]

    @classmethod
    def from_corpus(cls, corpus: Iterable[Sequence[int]], vocab: int, top: int = 12) -> "TrigramTable":
        counts: dict[Key, dict[int, int]] = {}
        for i, sequence in enumerate(corpus):
            tokens = list(sequence)
            for j, t in enumerate(tokens):
                if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
                    raise InvalidParameterError(f"corpus[{i}][{j}]", f"not a token id in 0..{vocab - 1}: {t!r}")
            padded = [START, START] + tokens
            for a, b, c in zip(padded, padded[1:], padded[2:]):
                row = counts.setdefault((a, b), {})
                row[c] = row.get(c, 0) + 1
        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise InvalidParameterError("top", f"must be an integer ≥ 1, got {top!r}")
        rows = {key: {c: Fraction(n, sum(row.values())) for c, n in row.items()} for key, row in counts.items()}
        return cls._of(rows, top)

    @classmethod
    def _of(cls, rows: dict[Key, dict[int, Fraction]], top: int | None = None) -> "TrigramTable":
        ranked = {key: tuple(sorted(row.items(), key=lambda item: (-item[1], item[0]))[:top])
                  for key, row in rows.items()}
        return cls(tuple(sorted(ranked.items())))

    @cached_property
    def _index(self) -> dict[Key, tuple[tuple[int, Fraction], ...]]:
        return dict(self.rows)

    @cached_property
    def _hash(self) -> int:
        return hash(self.rows)

    def __hash__(self) -> int:
        """Hashed once: a table is a key of the candidates' cache, and hashing every score again took most of a
        draft's time on a real corpus."""
        return self._hash

    def row(self, a: int, b: int) -> tuple[tuple[int, Fraction], ...]:
        """The continuations of ``(a, b)`` with their scores, best first (empty when unseen)."""
        return self._index.get((a, b), ())

    def score(self, a: int, b: int, c: int) -> Fraction:
        return dict(self.row(a, b)).get(c, Fraction(0))

    def adjusted(self, tokens: Sequence[int], max_length: int, increment: Fraction,
                 max_prob: Fraction) -> "TrigramTable":
        """App. Alg. 2 on the last ``max_length`` tokens: every tri-gram among them gains ``increment`` up to
        ``max_prob``; an unseen one enters at ``increment``."""
        rows = {key: dict(row) for key, row in self.rows}
        recent = list(tokens)[max(0, len(tokens) - max_length):]
        for a, b, c in zip(recent, recent[1:], recent[2:]):
            row = rows.setdefault((a, b), {})
            row[c] = min(row[c] + increment, max_prob) if c in row else increment
        return self._of(rows)


@dataclass(frozen=True)
class AdedConfig:
    """The paper's MCTS settings (iterations 150, length 4, 24 candidates, C1 = 32, C2 = 8) and ours for
    Alg. 2 (not given in the paper): tri-grams of the last 8 tokens gain 1/10, capped at 1."""

    iterations: int = 150
    length: int = 4
    candidates: int = 24
    c1: float = 32.0
    c2: float = 8.0
    increment: Fraction = Fraction(1, 10)
    max_prob: Fraction = Fraction(1)
    max_length: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("iterations", "length", "candidates", "max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(name, f"must be an integer ≥ 1, got {value!r}")
        if self.candidates * self.length >= MAX_TREE_NODES:
            raise InvalidParameterError("candidates", f"{self.candidates} candidates of {self.length} tokens: a draft "
                                                      f"tree may have at most {MAX_TREE_NODES:,} nodes")
        for name in ("c1", "c2"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InvalidParameterError(name, f"must be a positive number, got {value!r}")


@dataclass(eq=False)
class _Node:
    word: int
    prev: int
    parent: "_Node | None"
    prior: float = 1.0
    children: list["_Node"] = field(default_factory=list)
    visits: int = 0
    total: float = 0.0


def _select(node: _Node, c1: float, c2: float) -> _Node:
    visits = sum(child.visits for child in node.children)
    explore = c1 + math.log((visits + c2 + 1) / c2)
    best, best_score = node.children[0], -math.inf
    for child in node.children:
        q = child.total / child.visits if child.visits else 0.0
        score = q + explore * child.prior * math.sqrt(visits) / (1 + child.visits)
        if score > best_score:
            best, best_score = child, score
    return best


def _expand(node: _Node, table: TrigramTable) -> None:
    row = table.row(node.prev, node.word)
    mass = float(sum(s for _, s in row))
    node.children = [_Node(word, node.word, node, float(s) / mass) for word, s in row]


def mcts_candidates(table: TrigramTable, context: Context, config: AdedConfig) -> list[tuple[int, ...]]:
    """The top ``config.candidates`` continuations of ``context`` (up to ``config.length`` tokens each).

    App. Alg. 1 with the PUCT score of Eqs. 2–3, ``Q(s,a) + E·P(s,a)·sqrt(Σ_b N(s,b)) / (1 + N(s,a))``,
    ``E = C1 + log((Σ_b N(s,b) + C2 + 1) / C2)``: selection by PUCT (``Q`` the mean rollout score, ``0`` unvisited;
    ``P`` the table's scores at the node, normalised; ties to the first child), expansion of every continuation at
    once (Alg. 1 line 17) moving to the last, a rollout sampling continuations by score, the score ``1 + Σ`` of the
    table's scores along the sentence, backpropagation. The rollouts' sentences are ranked by score (ties by
    tokens). Alg. 1 seeds its own generator; ours is seeded by ``(seed, context)``."""
    prev, last = ((START, START) + tuple(context))[-2:]
    root = _Node(last, prev, None)
    rng = np.random.default_rng([config.seed, len(context), *(t + 1 for t in context)])
    sentences: dict[tuple[int, ...], float] = {}
    for _ in range(config.iterations):
        node, state = root, [prev, last]
        while node.children and len(state) - 2 < config.length:  # selection
            node = _select(node, config.c1, config.c2)
            state.append(node.word)
        if not node.children and len(state) - 2 < config.length:  # expansion
            _expand(node, table)
            if node.children:
                node = node.children[-1]
                state.append(node.word)
        while len(state) - 2 < config.length:  # simulation
            row = table.row(state[-2], state[-1])
            if not row:
                break
            weights = np.array([float(s) for _, s in row])
            pick = int(np.searchsorted(np.cumsum(weights), rng.random() * weights.sum(), side="right"))
            state.append(row[min(pick, len(row) - 1)][0])
        score = 1.0 + sum(float(table.score(*state[i - 2:i + 1])) for i in range(2, len(state)))
        while node is not None:  # backpropagation
            node.visits += 1
            node.total += score
            node = node.parent
        sentence = tuple(state[2:])
        if sentence:
            sentences[sentence] = max(score, sentences.get(sentence, -math.inf))
    ranked = sorted(sentences, key=lambda s: (-sentences[s], s))
    return ranked[: config.candidates]


@lru_cache(maxsize=4096)
def cached_candidates(table: TrigramTable, context: Context, config: AdedConfig) -> tuple[tuple[int, ...], ...]:
    """:func:`mcts_candidates`, remembered for the last 4,096 ``(table, context, config)``: a draft is a function
    of them, and the reference drafter and its array kernel ask for the same ones."""
    return tuple(mcts_candidates(table, context, config))


def candidate_tree(candidates: Sequence[Sequence[int]], vocab: int) -> DraftTree:
    """The candidates merged into one BFS-ordered tree: a shared prefix appears once; children in the order
    their first candidate ranks."""
    trie: dict[tuple[int, ...], list[int]] = {(): []}
    for candidate in candidates:
        for depth in range(1, len(candidate) + 1):
            prefix = tuple(candidate[:depth])
            if prefix not in trie:
                trie[prefix] = []
                trie[prefix[:-1]].append(prefix[-1])
    parents, tokens, order = [-1], [None], [()]
    for index, prefix in enumerate(order):
        for token in trie[prefix]:
            parents.append(index)
            tokens.append(token)
            order.append(prefix + (token,))
    return DraftTree(parents, tokens, vocab)


@dataclass(frozen=True)
class Aded:
    """The ADED drafter: deterministic drafts from the current table, which ``advance`` updates.

    Its candidates are merged into one tree (:func:`candidate_tree`); a draft is a deterministic function of the
    table and the context. ``advance`` is the paper's self-improvement. Alg. 2's constants, which the paper does not
    give, are ours (:class:`AdedConfig`).
    """

    table: TrigramTable
    config: AdedConfig = AdedConfig()
    scheme: str = "aded"
    size_options = ("candidates", "candidate-length")

    def log10_trees(self, vocab: int) -> float:
        """One tree per context: the candidates come from the table, not from the randomness interface."""
        return 0.0

    @property
    def height(self) -> int:
        return self.config.length

    def draft(self, view: ModelView, rng=None) -> Draft:
        """The draft for ``view``'s context. The rows ``p`` are the table's (normalised; uniform where the
        table has no row): ADED's own model, which sample-and-match never reads."""
        tree = candidate_tree(cached_candidates(self.table, view.context, self.config), view.vocab)
        p_rows = []
        for v in range(len(tree)):
            if not tree.children(v):
                p_rows.append(None)
                continue
            history = ((START, START) + view.context + tree.path(v))[-2:]
            scores = dict(self.table.row(*history))
            row = [scores.get(x, Fraction(0)) for x in range(view.vocab)]
            row = list(normalise(row)) if sum(row) > 0 else [Fraction(1, view.vocab)] * view.vocab
            p_rows.append(tuple(row) if view.arithmetic == "fraction" else tuple(float(x) for x in row))
        return Draft(tree, tuple(p_rows), tuple(view.q(tree.path(v)) for v in range(len(tree))))

    def advance(self, generated: Context) -> "Aded":
        table = self.table.adjusted(generated, self.config.max_length, self.config.increment, self.config.max_prob)
        return Aded(table, self.config, self.scheme)

    def describe(self) -> dict:
        return {"drafting": self.scheme, "iterations": self.config.iterations, "length": self.config.length,
                "candidates": self.config.candidates, "c1": self.config.c1, "c2": self.config.c2}


def sample_corpus(model: ModelPair, sequences: int = 32, length: int = 12, seed: int = 0) -> list[list[int]]:
    """A stand-in corpus for a synthetic model: ``sequences`` texts of ``length`` tokens from the *draft*
    model ``p`` (general language, not the target's own outputs), each from its own seeded stream."""
    view = ModelView(model, "float")
    corpus = []
    for i in range(sequences):
        rng = SamplingRandomness([seed, i])
        text: list[int] = []
        for _ in range(length):
            text.append(rng.categorical(view.p(tuple(text))))
        corpus.append(text)
    return corpus
