"""The exact cross-check on a real pair's rows (``specproof certify --model causal-lm``, docs/cli/certify.md): every
rule's exact law of one round on the rows generation computes, against the target's joint from plain forward
passes (:class:`SupportPair`)."""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from simulator.drafting import Drafter, FixedShape
from simulator.errors import InvalidParameterError
from simulator.models import Context, sequence_law
from simulator.real.causal_lm import Processing, check_vocabularies
from simulator.real.kv_cache import CachedLM
from simulator.verifiers.registry import Verifier, load_verifier

#: LOSSLESS means TVD ≤ this (and no mass on a sequence the plain joint gives probability 0)
TOLERANCE = 1e-6
TOLERANCE_REASON = ("float64 models, but transformers' LlamaRMSNorm normalises in float32 whatever the model's "
                    "dtype: the tree passes the rule reads and the plain passes of the target's joint sum in other "
                    "orders, so they agree only to float32 rounding (~1e-7 per row); a wrong mask, position or "
                    "processing moves the law by 1e-4 or more")
#: the most contexts whose rows the support may need (every reachable context up to depth H): one tree pass holds
#: them all, and its rows are a [contexts, vocabulary] float64 array (1,024 × 49,152: 400 MB)
MAX_CONTEXTS = 1024
#: the most contexts one plain pass runs as a batch (each holds its own copy of the prompt's keys and values)
PLAIN_BATCH = 64


def _cache_keyword(model) -> str:
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class PlainRows:
    """Processed next-token rows of ``prompt + context`` from transformers' own causal forward passes: the
    prompt's keys and values computed once, then each context fed on top of them with the model's own causal
    mask and positions (no attention mask, no position ids given); contexts of one length run as batches of up to
    :data:`PLAIN_BATCH`, each its own sequence. ``passes`` counts forward passes."""

    def __init__(self, model, prompt: Sequence[int], processing: Processing) -> None:
        self.model, self.processing = model, processing
        self._keyword = _cache_keyword(model)
        with torch.no_grad():
            out = model(input_ids=torch.tensor([list(prompt)], device=model.device), use_cache=True,
                        logits_to_keep=1)
        self.passes = 1
        self._prompt_cache = getattr(out, self._keyword)
        self.root = processing(out.logits[0, -1])

    @torch.no_grad()
    def rows(self, contexts: Sequence[Context]) -> list[torch.Tensor]:
        """The row of each context (``()``: the prompt's own)."""
        out: list[torch.Tensor | None] = [self.root if not c else None for c in contexts]
        by_length: dict[int, list[int]] = {}
        for i, c in enumerate(contexts):
            if c:
                by_length.setdefault(len(c), []).append(i)
        for where_all in by_length.values():
            for start in range(0, len(where_all), PLAIN_BATCH):
                where = where_all[start:start + PLAIN_BATCH]
                cache = copy.deepcopy(self._prompt_cache)
                if len(where) > 1:
                    cache.batch_repeat_interleave(len(where))
                ids = torch.tensor([list(contexts[i]) for i in where], device=self.model.device)
                logits = self.model(input_ids=ids, use_cache=True, logits_to_keep=1,
                                    **{self._keyword: cache}).logits[:, -1]
                self.passes += 1
                for i, row in zip(where, self.processing(logits)):
                    out[i] = row
        return out  # type: ignore[return-value]


def _trie(contexts: Sequence[Context]) -> tuple[list[Context], list[int]]:
    """``contexts`` and their prefixes as a BFS-ordered tree (by depth, then lexicographically; the root ``()``
    first) and its parent list."""
    keys = sorted({c[:d] for c in contexts for d in range(len(c) + 1)} | {()}, key=lambda k: (len(k), k))
    node = {k: i for i, k in enumerate(keys)}
    return keys, [-1] + [node[k[:-1]] for k in keys[1:]]


class SupportPair:
    """A draft and a target causal LM after ``prompt``, as a model pair over their reachable support.

    A context is reachable when each of its tokens has mass in the draft or the target row before it, plain or
    tree pass (what drafting, any verifier's emitted token and completion can reach). The reachable contexts are
    those of depth ``≤ height``; the support is the union of the positive tokens of their rows (the draft's below
    depth ``height``). Token ``i`` of this pair is ``tokens[i]`` of the model. Rows are the model's rows read at
    those tokens, renormalised by nothing.

    * ``p(c)``, ``q(c)`` — tree-pass rows, as the serving loop computes them (:class:`CachedLM`, both caches
      holding the prompt but its last token): the draft scores the tree of every reachable context of depth
      ``< height`` a level at a time (the first pass feeds the prompt's last token, each later level's nodes see
      the earlier levels in the cache), the target scores every reachable context in one pass. Where a tree row
      gives mass to a token its plain row does not (a bug, or a near-tie at the top-k boundary), the contexts
      through it are reachable too, and the trees are scored again with them.
    * :meth:`plain_joint` — the target's joint over ``Σ^length`` from :class:`PlainRows` alone.

    Why the support: a real vocabulary (49,152 tokens for SmolLM2) is far too large to enumerate or to run rules on
    row by row. Top-k processing zeroes every token outside the support, so the restriction drops no mass and
    renormalises nothing; a row that puts mass outside it is refused, never cut. Nothing iterates over the full
    vocabulary beyond one tensor operation per row. The tree is the union of every tree the drafter can draft, so
    each pass holds every sibling a row could wrongly see; :class:`PlainRows` uses transformers' own mask and
    positions, none of specproof's tree code. The certificate allows :data:`TOLERANCE`
    (:func:`exact.certificate.certify_against`).
    """

    def __init__(self, draft, target, prompt: Sequence[int], draft_processing: Processing,
                 target_processing: Processing, height: int) -> None:
        check_vocabularies(draft, target)
        if len(prompt) < 2:
            raise InvalidParameterError("prompt", "needs at least two tokens")
        if isinstance(height, bool) or not isinstance(height, int) or height < 0:
            raise InvalidParameterError("depth", f"must be an integer ≥ 0, got {height!r}")
        self.draft, self.target, self.prompt = draft, target, tuple(int(t) for t in prompt)
        self.draft_processing, self.target_processing = draft_processing, target_processing
        self.height = height
        self.full_vocab = int(target.config.vocab_size)
        self._models = {"p": (draft, draft_processing), "q": (target, target_processing)}
        self._plain_source = {name: PlainRows(model, self.prompt, processing)
                              for name, (model, processing) in self._models.items()}
        self._cached: dict[str, CachedLM] = {}
        self.tree_passes = {"p": 0, "q": 0}
        self.rescored = 0  # times the trees were scored again with contexts only tree rows reach
        contexts: set[Context] = {()}
        plain: dict[tuple[str, Context], dict[int, float]] = {}  # rows kept sparse: their positive entries
        self._grow(contexts, plain, [()], lambda key: plain[key])
        while True:
            tree = self._score_trees(contexts)
            more = [c + (t,) for (name, c), row in tree.items() if len(c) < height for t in row
                    if c + (t,) not in contexts]
            if not more:
                break
            self.rescored += 1
            contexts.update(more)
            self._grow(contexts, plain, more, lambda key: plain[key] if key not in tree else tree[key])
        rows = list(plain.values()) + list(tree.values())
        self.tokens: tuple[int, ...] = tuple(sorted({t for row in rows for t in row}))
        self.vocab = len(self.tokens)
        self._index = {t: i for i, t in enumerate(self.tokens)}
        self._plain = {(name, self.restricted(c)): self._restrict(row, name, c) for (name, c), row in plain.items()}
        self._tree = {(name, self.restricted(c)): self._restrict(row, name, c) for (name, c), row in tree.items()}

    # ---- the support --------------------------------------------------------------------------------------
    def _names(self, context: Context) -> tuple[str, ...]:
        return ("p", "q") if len(context) < self.height else ("q",)

    def _grow(self, contexts: set[Context], plain: dict, frontier: list[Context], row) -> None:
        """Add to ``contexts`` every context reachable from ``frontier`` through tokens positive in the plain rows
        (or in ``row(key)``, the freshest row of a context), computing the plain rows of every new context."""
        while frontier:
            for name in ("p", "q"):
                todo = [c for c in frontier if name in self._names(c) and (name, c) not in plain]
                plain.update(zip(((name, c) for c in todo), map(_sparse, self._plain_source[name].rows(todo))))
            deeper = []
            for c in frontier:
                if len(c) < self.height:
                    found = set()
                    for name in ("p", "q"):
                        found |= set(plain[name, c]) | set(row((name, c)))
                    deeper.extend(c + (t,) for t in sorted(found) if c + (t,) not in contexts)
            contexts.update(deeper)
            if len(contexts) > MAX_CONTEXTS:
                raise InvalidParameterError("top_k", f"the reachable contexts up to depth {self.height} pass "
                                                     f"{MAX_CONTEXTS:,}: lower --top-k or --depth")
            frontier = deeper

    @torch.no_grad()
    def _score_trees(self, contexts: set[Context]) -> dict[tuple[str, Context], dict[int, float]]:
        """Tree-pass rows (sparse) of every context: the draft's below depth ``height`` a level at a
        time, the target's in one pass; each model's cache cut back to the prompt but its last token after."""
        out: dict[tuple[str, Context], dict[int, float]] = {}
        for name, (model, processing) in self._models.items():
            lm = self._cached.get(name)
            if lm is None:
                lm = self._cached[name] = CachedLM(model, processing)
                lm.extend(self.prompt[:-1], (-1,), (0,), ())
                lm.commit(())
            keys, parents = _trie([c for c in contexts if name in self._names(c)])
            tokens = [0] + [k[-1] for k in keys[1:]]
            depth = [len(k) for k in keys]
            batches = ([[v for v in range(1, len(keys)) if depth[v] == d] for d in range(max(depth) + 1)]
                       if name == "p" else [list(range(1, len(keys)))])
            for nodes in batches:
                pending = lm.fed < len(self.prompt)
                rows = lm.extend(self.prompt, parents, tokens, nodes)
                self.tree_passes[name] += 1
                out.update(zip(((name, keys[v]) for v in ([0] if pending else []) + nodes), map(_sparse, rows)))
            lm.rewind(len(self.prompt) - 1)
        return out

    def restricted(self, context: Sequence[int]) -> Context:
        """A context in model token ids, in this pair's ids."""
        return tuple(self._index[t] for t in context)

    def original(self, context: Sequence[int]) -> Context:
        """A context in this pair's ids, in model token ids."""
        return tuple(self.tokens[i] for i in context)

    def _restrict(self, row: dict[int, float], name: str, context: Context) -> list[float]:
        """A sparse row at the support's tokens; refused if it has mass elsewhere."""
        stray = sorted(set(row) - set(self._index))
        if stray:
            raise InvalidParameterError("context", f"the {name} row after {list(context)} puts mass on token(s) "
                                                   f"{stray[:5]} outside the support")
        return [row.get(t, 0.0) for t in self.tokens]

    def _row(self, name: str, context: Context) -> list[float]:
        try:
            return self._tree[name, tuple(context)]
        except KeyError:  # the engines read reachable contexts only
            raise InvalidParameterError("context", f"{name} row after {list(self.original(context))}: not a context "
                                                   f"reachable within {self.height + 1} tokens") from None

    def p(self, context: Context) -> list[float]:
        return self._row("p", context)

    def q(self, context: Context) -> list[float]:
        return self._row("q", context)

    def plain_joint(self, length: int) -> dict[tuple[int, ...], float]:
        """``q^length`` after the prompt from the plain rows alone (zero cells omitted), in this pair's ids."""
        return sequence_law(self._plain_row, length)

    def _plain_row(self, context: Context) -> list[float]:
        key = ("q", tuple(context))
        if key not in self._plain:  # a context only tree rows reach: its plain row has no mass there
            full = self.original(context)
            self._plain[key] = self._restrict(_sparse(self._plain_source["q"].rows([full])[0]), "q", full)
        return self._plain[key]

    @property
    def passes(self) -> dict[str, dict[str, int]]:
        """Forward passes run so far, per model: plain (the prompt's included) and tree (the cache's prefill
        not counted)."""
        return {name: {"plain": self._plain_source[name].passes, "tree": self.tree_passes[name]}
                for name in ("p", "q")}

    def tree_gap(self) -> float:
        """The largest difference between a tree-pass row and the plain-pass row of the same context."""
        return max((max(abs(a - b) for a, b in zip(row, self._plain[key])) for key, row in self._tree.items()
                    if key in self._plain), default=0.0)

    def describe(self) -> dict:
        return {"model": "causal-lm", "vocab": self.full_vocab, "support": self.vocab, "prompt": list(self.prompt),
                "draft_processing": vars(self.draft_processing), "target_processing": vars(self.target_processing)}


def _sparse(row: torch.Tensor) -> dict[int, float]:
    """A full-vocabulary row's positive entries, token → probability (the floats the row holds)."""
    at = torch.nonzero(row > 0).flatten()
    return dict(zip(at.tolist(), row[at].tolist()))


def monte_carlo_accepted(pair: SupportPair, drafter: Drafter, verifier: str | Verifier, trials: int,
                         seed: int = 0) -> tuple[float, float]:
    """Mean accepted length and its standard error over ``trials`` rounds of the Monte Carlo engine's reference
    path (:func:`simulator.montecarlo.engine.run_trials`: each trial on its own counter stream) on ``pair``'s
    rows."""
    from simulator.models import ModelView
    from simulator.montecarlo.engine import mean_and_se, run_trials

    _, fn = (None, verifier) if callable(verifier) else load_verifier(verifier)
    accepted, _ = run_trials(pair, drafter, fn, seed, range(trials), ModelView(pair, "float"))
    return mean_and_se(np.bincount(accepted, minlength=drafter.height + 1))


#: the most passes :class:`RoundPasses` remembers (each row by its nonzero entries: a few per row under top-k)
MEMO_PASSES = 20_000


class RoundPasses:
    """``lm`` (a :class:`CachedLM` holding a fixed prefix) for many first rounds, each forward pass computed once.

    Every first round starts from the same cache, so a pass is fixed by the calls of its round so far (the tokens
    fed, the tree and the nodes): the same calls give the same rows, bit for bit, on a deterministic device. The
    rows of a call already made are taken from a memo; a new call first feeds ``lm`` the round's earlier calls it
    skipped, so its keys and values are those of the round, then runs for real. The serving loop around it
    (drafting, the rule, the cache's commit) runs every round. Rows are kept by their nonzero entries (top-k rows:
    k per row), at most :data:`MEMO_PASSES` passes. ``computed`` counts the passes run, ``passes`` the
    passes the rounds asked for (as :class:`CachedLM`'s)."""

    def __init__(self, lm: CachedLM) -> None:
        self.lm, self.start = lm, lm.fed
        self.memo: dict[tuple, torch.Tensor] = {}
        self.calls: list[tuple] = []  # this round's calls: (context, parents, tokens, nodes)
        self.fed_calls = 0  # how many of them lm has been fed
        self.passes = 0
        self.committed = False

    @property
    def computed(self) -> int:
        return self.lm.passes

    @property
    def model(self):
        """The model ``lm`` runs (the serving loop reads its vocabulary and device)."""
        return self.lm.model

    def extend(self, context: Sequence[int], parents: Sequence[int], tokens: Sequence[int],
               nodes: Sequence[int]) -> torch.Tensor:
        if self.committed:
            raise InvalidParameterError("rounds", "a round's passes after its commit: rewind first")
        call = (tuple(context[self.start:]), tuple(parents), tuple(int(t) for t in tokens), tuple(nodes))
        self.calls.append(call)
        self.passes += 1
        key = tuple((c, p, tuple(t[v] for v in n), n) for c, p, t, n in self.calls)
        kept = self.memo.get(key)
        if kept is not None:
            at, values, shape = kept
            return torch.zeros(shape, dtype=values.dtype, device=values.device).index_put_(at, values)
        for pending, tree, fed, which in self.calls[self.fed_calls:-1]:
            self.lm.extend(list(context[:self.start]) + list(pending), tree, fed, which)
        rows = self.lm.extend(context, parents, tokens, nodes)
        self.fed_calls = len(self.calls)
        if len(self.memo) < MEMO_PASSES:
            at = torch.nonzero(rows, as_tuple=True)
            self.memo[key] = (at, rows[at], rows.shape)
        return rows

    def commit(self, path: Sequence[int]) -> None:
        """The round's end: nothing to keep, the next round starts from the prefix again (:meth:`rewind`)."""
        self.committed = True

    def rewind(self) -> None:
        """Back to the prefix for the next round."""
        if self.fed_calls:
            self.lm.rewind(self.start)
        self.calls, self.fed_calls, self.committed = [], 0, False


@dataclass(frozen=True)
class FirstRounds:
    """What :func:`first_rounds` ran: each round's accepted length, the forward passes the rounds asked for and
    those computed (the rest from :class:`RoundPasses`' memo)."""

    accepted: np.ndarray
    passes: int
    computed: int


def first_rounds(draft, target, prompt: Sequence[int], processing: Processing, drafter: FixedShape, verifier: str,
                 rounds: int, first_seed: int = 0, memo: bool = True) -> FirstRounds:
    """Accepted lengths of ``rounds`` real first rounds after ``prompt`` on the KV-cached serving loop
    (:func:`simulator.real.spec_bench.speculative_generate` for one token, seeds ``first_seed …``). Both
    caches hold the prompt but its last token, computed once; each round feeds that token and its tree on top
    and is then cut back, so a round costs what a later round of a generation costs. With ``memo``, a pass the
    rounds already ran is taken from :class:`RoundPasses` (the decisions are the same: tested), which makes
    thousands of rounds affordable: top-k rows draft few distinct trees."""
    from simulator.real.spec_bench import speculative_generate

    if len(prompt) < 2:
        raise InvalidParameterError("prompt", "needs at least two tokens")
    lms = [CachedLM(draft, processing), CachedLM(target, processing)]
    for lm in lms:
        lm.extend(list(prompt[:-1]), (-1,), (0,), ())
        lm.commit(())
    before = sum(lm.passes for lm in lms)
    loops = [RoundPasses(lm) for lm in lms] if memo else lms
    out, passes = np.empty(rounds, dtype=np.int64), 0
    for i in range(rounds):
        generated = speculative_generate(*loops, list(prompt), drafter, verifier, 1, first_seed + i)
        out[i] = generated.accept_lengths[0] - 1
        passes += generated.draft_passes + generated.target_passes
        for loop in loops:
            loop.rewind() if memo else loop.rewind(len(prompt) - 1)
    return FirstRounds(out, passes, sum(lm.passes for lm in lms) - before)
