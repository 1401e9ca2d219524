"""Model pairs (docs/models.md): a draft ``p`` and a target ``q``, each a next-token row per context, lazy and
deterministic (a context's rows depend only on the parameters and the context): :class:`SyntheticModel`,
:class:`TableModel`, :class:`RandomRationalModel`, and :class:`ModelView`, one round's validated rows."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from ..errors import InvalidDistributionError, InvalidParameterError
from ..jsonfile import read_json
from ..numeric import Number, as_distribution, check_arithmetic, parse_probability
from .draft_rows import DraftRows

Context = tuple[int, ...]


class ModelPair(Protocol):
    """A draft/target pair over tokens ``0..vocab-1``."""

    vocab: int

    def p(self, context: Context) -> Sequence[Number]: ...

    def q(self, context: Context) -> Sequence[Number]: ...


def _check_int(value: object, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidParameterError(field, f"must be an integer ≥ {minimum}, got {value!r}")
    return int(value)


def checked_number(value: object, field: str, low: float, high: float, low_open: bool = False) -> float:
    """``value`` as a float when it is a finite number (not a bool) in ``[low, high]`` (``(low, high]`` with
    ``low_open``); :class:`InvalidParameterError` on ``field`` otherwise: a model's parameters and a battery's."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidParameterError(field, f"must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v > high or v < low or (low_open and v == low):
        bracket = "(" if low_open else "["
        raise InvalidParameterError(field, f"must lie in {bracket}{low}, {high}], got {value!r}")
    return v


def _context_seed(seed: int, context: Context) -> np.random.Generator:
    """A generator keyed by ``(seed, context)`` alone: ``SeedSequence([seed, len(context), *context])``; the length
    makes the key injective. Where every entry fits 32 bits the key goes in as the ``uint32`` array that
    SeedSequence would make of the list (one word an entry), which skips its entry-by-entry conversion: the same
    generator, a third less time (the synthetic model's set-up draws one per context)."""
    key = [seed, len(context), *context]
    try:
        words = np.array(key, dtype=np.uint32)
    except OverflowError:  # an entry of 2^32 or more: SeedSequence splits it into words itself
        return np.random.default_rng(np.random.SeedSequence(key))
    return np.random.default_rng(np.random.SeedSequence(words))


def _context_normals(seed: int, tokens: np.ndarray, count: int) -> np.ndarray:
    """``[m, count]``: the first ``count`` standard normals of :func:`_context_seed`'s generator for each row of
    ``tokens`` (``[m, ℓ]``, contexts of one length), computed on arrays where the key is one ``uint32`` word an entry
    (:func:`simulator.models.seeded_normals.standard_normals`), generator by generator otherwise."""
    from .seeded_normals import standard_normals

    m, length = tokens.shape
    if not 0 <= seed < 2**32 or (tokens.size and not 0 <= int(tokens.min()) <= int(tokens.max()) < 2**32):
        return np.array([_context_seed(seed, tuple(int(t) for t in row)).standard_normal(count) for row in tokens]
                        ).reshape(m, count)
    key = np.empty((m, length + 2), dtype=np.uint32)
    key[:, 0], key[:, 1], key[:, 2:] = seed, length, tokens
    return standard_normals(key, count)


def _blocks(contexts: Sequence[Context]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The positions of ``contexts`` of each length and their tokens ``[m, ℓ]``."""
    by_length: dict[int, list[int]] = {}
    for i, context in enumerate(contexts):
        by_length.setdefault(len(context), []).append(i)
    return [(np.array(at), np.array([contexts[i] for i in at], dtype=np.int64).reshape(len(at), length))
            for length, at in by_length.items()]


class ContextTree(Sequence):
    """Every context of length ``≤ height`` over ``vocab`` tokens, by length and then base-``vocab`` code (the
    order of :class:`simulator.montecarlo.context_rows.ContextRows`), as a sequence of tuples that also hands its
    blocks of one length over as token arrays (:meth:`blocks`)."""

    def __init__(self, vocab: int, height: int) -> None:
        self.vocab, self.height = vocab, height
        self.offsets = [sum(vocab**j for j in range(level)) for level in range(height + 2)]

    def __len__(self) -> int:
        return self.offsets[-1]

    def __getitem__(self, i: int) -> Context:  # type: ignore[override]
        if not 0 <= i < len(self):
            raise IndexError(i)
        level = max(k for k in range(self.height + 1) if self.offsets[k] <= i)
        code, out = i - self.offsets[level], []
        for _ in range(level):
            code, token = divmod(code, self.vocab)
            out.append(token)
        return tuple(reversed(out))

    def __iter__(self) -> Iterator[Context]:
        for level in range(self.height + 1):
            yield from itertools.product(range(self.vocab), repeat=level)

    def level(self, length: int) -> np.ndarray:
        """``[V^ℓ, ℓ]``: the contexts of length ``ℓ`` by code, first token first."""
        codes = np.arange(self.vocab**length, dtype=np.int64)
        powers = self.vocab ** np.arange(length - 1, -1, -1, dtype=np.int64)
        return (codes[:, None] // powers[None, :]) % self.vocab

    def blocks(self) -> list[tuple[slice, np.ndarray]]:
        return [(slice(self.offsets[k], self.offsets[k + 1]), self.level(k)) for k in range(self.height + 1)]


def _softmax(logits: np.ndarray) -> list[float]:
    return _softmax_array(logits).tolist()


def _softmax_array(logits: np.ndarray) -> np.ndarray:
    """The softmax over the last axis (one row, or many)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


class SyntheticModel:
    """``ℓ^p = ρu + (1−ρ)ε^p``, ``ℓ^q = ρu + (1−ρ)ε^q``, ``p = softmax(ℓ^p/τ_p)``, ``q = softmax(ℓ^q/τ_q)``.

    ``u, ε^p, ε^q ~ N(0, I_V)`` are drawn per context from a generator keyed by ``(seed, context)``.
    The paper's base configuration is ``vocab=15, rho=0.5, tau_p=tau_q=1``.

    Several draft models (docs/models.md): ``rho`` a list ``ρ_0, …, ρ_{k−1}`` gives draft model ``i`` the logits
    ``ρ_i u + (1−ρ_i) ε^{p_i}``; the target keeps ``ρ_0`` (``ℓ^q = ρ_0 u + (1−ρ_0) ε^q``), and ``ε^{p_1}, …`` are
    drawn after ``u, ε^{p_0}, ε^q`` from the same generator, so the target and draft model 0 are those of
    ``rho=ρ_0``.

    The toy study's model: Layer Verification's App. G (Cha et al., AdaptFM at ICML 2026).
    """

    def __init__(self, vocab: int = 15, rho: float | Sequence[float] = 0.5, tau_p: float = 1.0, tau_q: float = 1.0,
                 seed: int = 0) -> None:
        self.vocab = _check_int(vocab, "vocab", 1)
        self.rhos = _check_rhos(rho)
        self.rho = self.rhos[0]  # the target's, and draft model 0's
        self.draft_models = len(self.rhos)
        self.tau_p = checked_number(tau_p, "tau_p", 0.0, math.inf, low_open=True)
        self.tau_q = checked_number(tau_q, "tau_q", 0.0, math.inf, low_open=True)
        self.seed = _check_int(seed, "seed", 0)

    def _normals(self, context: Context) -> np.ndarray:
        """``[k + 2, V]``: ``u, ε^{p_0}, ε^q`` and then ``ε^{p_1}, …, ε^{p_{k−1}}``."""
        return _context_seed(self.seed, context).standard_normal((self.draft_models + 2, self.vocab))

    def logits(self, context: Context) -> tuple[np.ndarray, np.ndarray]:
        """The draft and target logits ``(ℓ^p, ℓ^q)`` of a context (draft model 0's ``ℓ^p``)."""
        u, eps_p, eps_q = self._normals(context)[:3]
        return self.rho * u + (1 - self.rho) * eps_p, self.rho * u + (1 - self.rho) * eps_q

    def p(self, context: Context) -> list[float]:
        return _softmax(self.logits(context)[0] / self.tau_p)

    def q(self, context: Context) -> list[float]:
        return _softmax(self.logits(context)[1] / self.tau_q)

    def draft_rows(self, context: Context) -> list[list[float]]:
        """Every draft model's row at ``context``, draft model 0 (:meth:`p`) first."""
        normals = self._normals(context)
        u, eps = normals[0], [normals[1], *normals[3:]]
        return [_softmax((rho * u + (1 - rho) * e) / self.tau_p) for rho, e in zip(self.rhos, eps)]

    def row_arrays(self, contexts: Sequence[Context]) -> tuple[np.ndarray, np.ndarray]:
        """``p`` (draft model 0's) and ``q`` of many contexts as arrays ``[C, V]``, the numbers :meth:`p` and
        :meth:`q` give: each
        context's normals from its own generator (once for both rows), then the same elementwise arithmetic on all rows
        at once (a row's sum over its last axis is the sum a single row gets; the tests compare every row). The
        generators run on arrays, a block of contexts of one length at a time
        (:func:`simulator.models.seeded_normals.standard_normals`: the same normals in a fifth of the time);
        ``contexts`` may be a :class:`ContextTree`, whose blocks are arrays already."""
        blocks = contexts.blocks() if isinstance(contexts, ContextTree) else _blocks(contexts)
        normals = np.empty((len(contexts), 3, self.vocab))
        for at, tokens in blocks:
            normals[at] = _context_normals(self.seed, tokens, 3 * self.vocab).reshape(-1, 3, self.vocab)
        u, eps_p, eps_q = normals[:, 0], normals[:, 1], normals[:, 2]
        logits_p, logits_q = self.rho * u + (1 - self.rho) * eps_p, self.rho * u + (1 - self.rho) * eps_q
        return _softmax_array(logits_p / self.tau_p), _softmax_array(logits_q / self.tau_q)

    def describe(self) -> dict:
        return {"model": "synthetic", "vocab": self.vocab,
                "rho": self.rho if self.draft_models == 1 else list(self.rhos), "tau_p": self.tau_p,
                "tau_q": self.tau_q, "seed": self.seed}


def _check_rhos(rho: object) -> tuple[float, ...]:
    """``rho`` (one number, or one per draft model) as a tuple of numbers in ``[0, 1]``; typed errors name ``rho``."""
    if isinstance(rho, (str, bytes)) or not isinstance(rho, Sequence):
        return (checked_number(rho, "rho", 0.0, 1.0),)
    if len(rho) == 0:
        raise InvalidParameterError("rho", "needs at least one value (one per draft model)")
    return tuple(checked_number(r, "rho", 0.0, 1.0) for r in rho)


class RandomRationalModel:
    """Rows of small integer weights (``1..max_weight``, each zeroed with probability ``zero_prob``), per context.

    At least one weight of each row stays positive. Rows are exact ``Fraction``s, so certificates on this
    model are exact and zeros in ``p`` and ``q`` (disjoint supports included) occur often. With ``draft_models``
    ``k ≥ 2`` the rows of draft models ``1..k−1`` are drawn after ``p`` and ``q`` from the same generator, so the
    target and draft model 0 are those of one draft model.
    """

    def __init__(self, vocab: int = 3, seed: int = 0, max_weight: int = 4, zero_prob: float = 0.25,
                 draft_models: int = 1) -> None:
        self.vocab = _check_int(vocab, "vocab", 1)
        self.seed = _check_int(seed, "seed", 0)
        self.max_weight = _check_int(max_weight, "max_weight", 1)
        self.zero_prob = checked_number(zero_prob, "zero_prob", 0.0, 1.0)
        self.draft_models = _check_int(draft_models, "draft-models", 1)

    def _rows(self, context: Context) -> list[list[Fraction]]:
        """``p``, ``q``, then draft models ``1..k−1``."""
        rng = _context_seed(self.seed, context)
        rows = []
        for _ in range(self.draft_models + 1):
            weights = rng.integers(1, self.max_weight + 1, size=self.vocab)
            weights[rng.random(self.vocab) < self.zero_prob] = 0
            if weights.sum() == 0:
                weights[rng.integers(self.vocab)] = rng.integers(1, self.max_weight + 1)
            s = int(weights.sum())
            rows.append([Fraction(int(w), s) for w in weights])
        return rows

    def p(self, context: Context) -> list[Fraction]:
        return self._rows(context)[0]

    def q(self, context: Context) -> list[Fraction]:
        return self._rows(context)[1]

    def draft_rows(self, context: Context) -> list[list[Fraction]]:
        """Every draft model's row at ``context``, draft model 0 (:meth:`p`) first."""
        rows = self._rows(context)
        return [rows[0], *rows[2:]]

    def describe(self) -> dict:
        return {"model": "random-rational", "vocab": self.vocab, "seed": self.seed,
                "max_weight": self.max_weight, "zero_prob": self.zero_prob,
                **({"draft_models": self.draft_models} if self.draft_models > 1 else {})}


class TableModel:
    """Explicit rows per context. ``p_rows``/``q_rows`` map a context tuple to a row; the key ``None`` is the
    row for every context not listed. A missing context with no default is an error naming it.

    ``other_drafts``: the tables of draft models ``1..k−1`` (each like ``p_rows``) for a model with several draft
    models, ``p_rows`` being draft model 0's (docs/models.md).
    """

    def __init__(self, vocab: int, p_rows: Mapping[Context | None, Sequence[Number]],
                 q_rows: Mapping[Context | None, Sequence[Number]],
                 other_drafts: Sequence[Mapping[Context | None, Sequence[Number]]] = ()) -> None:
        self.vocab = _check_int(vocab, "vocab", 1)
        self.draft_models = 1 + len(other_drafts)
        self._drafts = [_draft_name(i, self.draft_models) for i in range(self.draft_models)]
        self._rows = {"p": dict(p_rows), "q": dict(q_rows),
                      **{name: dict(rows) for name, rows in zip(self._drafts[1:], other_drafts)}}
        for name, rows in self._rows.items():
            for ctx, row in rows.items():
                as_distribution(row, self.vocab, row_field(self._field(name), ctx), "fraction")

    def _field(self, name: str) -> str:
        return self._drafts[0] if name == "p" else name

    def _row(self, name: str, context: Context) -> Sequence[Number]:
        rows = self._rows[name]
        if context in rows:
            return rows[context]
        if None in rows:
            return rows[None]
        raise InvalidDistributionError(row_field(self._field(name), context),
                                       "context not in the table and no '*' default row")

    def p(self, context: Context) -> Sequence[Number]:
        return self._row("p", context)

    def q(self, context: Context) -> Sequence[Number]:
        return self._row("q", context)

    def draft_rows(self, context: Context) -> list[Sequence[Number]]:
        """Every draft model's row at ``context``, draft model 0 (:meth:`p`) first."""
        return [self._row("p", context), *(self._row(name, context) for name in self._drafts[1:])]

    def rows(self, name: str) -> dict[Context | None, Sequence[Number]]:
        """Every ``name`` row (``"p"`` or ``"q"``; ``"drafts[i]"`` for draft model ``i ≥ 1``) by context, ``None``
        for the default row."""
        return dict(self._rows[name])

    @classmethod
    def from_json(cls, data: object, source: str = "table") -> "TableModel":
        """Read ``{"vocab": V, "p": {CTX: row}, "q": {CTX: row}}``; CTX is ``""`` (empty prefix),
        ``"0,2"`` (comma-separated tokens) or ``"*"`` (default); rows are numbers or ``"num/den"`` strings.
        Several draft models: ``"drafts": [{CTX: row}, …]`` (at least two tables, draft model 0 first) in place of
        ``"p"``."""
        if not isinstance(data, dict):
            raise InvalidParameterError(source, "must be a JSON object with vocab, p and q")
        if "drafts" in data and "p" in data:
            raise InvalidParameterError(f"{source}.drafts", "give either p (one draft model) or drafts (several), "
                                                            "not both")
        for key in ("vocab", "drafts" if "drafts" in data else "p", "q"):
            if key not in data:
                raise InvalidParameterError(f"{source}.{key}", "missing")
        vocab = _check_int(data["vocab"], f"{source}.vocab", 1)
        if "drafts" in data:
            drafts = data["drafts"]
            if not isinstance(drafts, list) or len(drafts) < 2:
                raise InvalidParameterError(f"{source}.drafts", "must list at least two draft tables (one draft "
                                                                "model: give p)")
            named = [(f"drafts[{i}]", raw) for i, raw in enumerate(drafts)]
        else:
            named = [("p", data["p"])]
        tables = [_read_table(raw, f"{source}.{name}", vocab) for name, raw in [*named, ("q", data["q"])]]
        try:
            return cls(vocab, tables[0], tables[-1], tables[1:-1])
        except InvalidDistributionError as err:
            raise InvalidDistributionError(f"{source}.{err.field}", err.message) from None

    @classmethod
    def from_file(cls, path: str | Path) -> "TableModel":
        return cls.from_json(read_json(path, "table"), "table")

    def describe(self) -> dict:
        return {"model": "table", "vocab": self.vocab,
                **({"draft_models": self.draft_models} if self.draft_models > 1 else {})}


def _draft_name(i: int, count: int) -> str:
    """How draft model ``i``'s table is named (in errors, :meth:`TableModel.rows`, the JSON): ``p`` for one draft
    model, ``drafts[i]`` for several."""
    return "p" if count == 1 else f"drafts[{i}]"


def _read_table(raw: object, field: str, vocab: int) -> dict[Context | None, list[Number]]:
    """One ``{CTX: row}`` table of a table model's JSON."""
    if not isinstance(raw, dict):
        raise InvalidParameterError(field, "must map contexts to rows")
    rows: dict[Context | None, list[Number]] = {}
    for key, row in raw.items():
        at = f'{field}["{key}"]'
        if not isinstance(row, list):
            raise InvalidDistributionError(at, "must be a list of probabilities")
        rows[_parse_context(key, vocab, at)] = [parse_probability(v, f"{at}[{i}]") for i, v in enumerate(row)]
    return rows


def _context_key(context: Context | None) -> str:
    return "*" if context is None else ",".join(map(str, context))


def row_field(name: str, context: Context | None) -> str:
    """How a row is named in errors: ``q["0,2"]`` (context tokens), ``p[""]`` (empty prefix), ``p["*"]``."""
    return f'{name}["{_context_key(context)}"]'


def _parse_context(key: str, vocab: int, field: str) -> Context | None:
    if key == "*":
        return None
    if key.strip() == "":
        return ()
    try:
        tokens = tuple(int(t) for t in key.split(","))
    except ValueError:
        raise InvalidParameterError(field, "context keys are '', '*' or comma-separated tokens") from None
    if any(not 0 <= t < vocab for t in tokens):
        raise InvalidParameterError(field, f"context has a token outside 0..{vocab - 1}")
    return tokens


class ModelView:
    """One round's view of a model pair: rows for ``context + suffix``, validated once, in one arithmetic.

    ``p(suffix)`` and ``q(suffix)`` take the suffix relative to the round's context (the drafted path).
    Under ``fraction`` arithmetic float rows are converted exactly and renormalised exactly. A model with several
    draft models (``draft_models ≥ 2``) gives ``p`` as a :class:`~simulator.models.draft_rows.DraftRows`: draft model
    0's row with every draft model's row, each validated, in ``.models``; with one, a plain tuple.
    """

    def __init__(self, model: ModelPair, arithmetic: str = "fraction", context: Context = ()) -> None:
        self.model = model
        self.vocab = model.vocab
        self.arithmetic = check_arithmetic(arithmetic)
        self.context = tuple(context)
        self.draft_models: int = getattr(model, "draft_models", 1)
        self._cache: dict[tuple[str, Context], tuple[Number, ...]] = {}

    def _get(self, name: str, suffix: Context) -> tuple[Number, ...]:
        key = (name, suffix)
        row = self._cache.get(key)
        if row is None:
            full = self.context + suffix
            if name == "p" and self.draft_models > 1:
                row = DraftRows([as_distribution(raw, self.vocab, row_field(_draft_name(i, self.draft_models), full),
                                                 self.arithmetic)
                                 for i, raw in enumerate(self.model.draft_rows(full))])  # type: ignore[attr-defined]
            else:
                raw = getattr(self.model, name)(full)
                row = as_distribution(raw, self.vocab, row_field(name, full), self.arithmetic)
            self._cache[key] = row
        return row

    def prefetch(self, name: str, suffixes: Sequence[Context]) -> None:
        """Compute the ``name`` rows (``"p"`` or ``"q"``) of many suffixes together when the model can
        (:meth:`simulator.real.causal_lm.CausalLMPair.batch_rows`: one tree-attention pass for a whole layer or
        tree); other models are asked row by row when a row is read. Rows already in this view are not recomputed."""
        batch = getattr(self.model, "batch_rows", None)
        todo = [s for s in dict.fromkeys(tuple(s) for s in suffixes) if (name, s) not in self._cache]
        if batch is None or not todo or (name == "p" and self.draft_models > 1):  # several drafts: read by _get
            return
        for suffix, raw in zip(todo, batch(name, [self.context + s for s in todo])):
            self._cache[name, suffix] = as_distribution(raw, self.vocab, row_field(name, self.context + suffix),
                                                        self.arithmetic)

    def p(self, suffix: Context) -> tuple[Number, ...]:
        return self._get("p", tuple(suffix))

    def q(self, suffix: Context) -> tuple[Number, ...]:
        return self._get("q", tuple(suffix))

    @property
    def key(self) -> tuple:
        """Equal for views that give the same rows (same model object, arithmetic and context)."""
        return ("view", id(self.model), self.arithmetic, self.context)

    def advanced(self, block: Context) -> "ModelView":
        """The view of the next round, after ``block`` was generated."""
        return ModelView(self.model, self.arithmetic, self.context + tuple(block))


#: Model kinds by name (``make_model``; the command line's ``--model``).
MODELS: dict[str, str] = {
    "synthetic": "correlated Gaussian logits (docs/models.md): --vocab --rho --tau-p --tau-q --seed",
    "table": "explicit rows per context from --table FILE (floats or 'num/den' strings)",
    "random-rational": "small-integer weights per context, exact rationals with zeros: --vocab --seed",
}


def table_json(model: ModelPair, depth: int) -> dict:
    """``model``'s exact rows at every context of at most ``depth`` tokens, as the JSON ``--model table`` reads
    (:meth:`TableModel.from_json`), with no ``"*"`` row: a reproducer that needs neither the model's kind nor its
    seed, and that names any context a later use reads beyond ``depth``. Several draft models: every one's table
    (``"drafts"``)."""
    from ..numeric import to_json_number

    view = ModelView(model, "fraction")
    contexts = [ctx for n in range(depth + 1) for ctx in itertools.product(range(model.vocab), repeat=n)]

    def table(row: Callable[[Context], Sequence[Number]]) -> dict[str, list]:
        return {",".join(map(str, ctx)): [to_json_number(x, "fraction") for x in row(ctx)] for ctx in contexts}

    if view.draft_models > 1:  # every draft model's table (TableModel.from_json's "drafts")
        drafts = [table(lambda ctx, i=i: view.p(ctx).models[i]) for i in range(view.draft_models)]
        return {"vocab": model.vocab, "drafts": drafts, "q": table(view.q)}
    return {"vocab": model.vocab, "p": table(view.p), "q": table(view.q)}


def make_model(model_kind: str, table_path: str | Path | None, vocab: int, seed: int,
               rho: float | Sequence[float] = 0.5, tau_p: float = 1.0, tau_q: float = 1.0, zero_prob: float = 0.25,
               draft_models: int = 1) -> ModelPair:
    """A model pair by kind (:data:`MODELS`), as ``--model`` builds it: typed errors name the field.

    Several draft models (docs/models.md): a synthetic model takes one ``rho`` per draft model, a random-rational one
    ``draft_models``, a table its ``"drafts"`` list."""
    draft_models = _check_int(draft_models, "draft-models", 1)
    several_rhos = not isinstance(rho, (int, float)) and len(_check_rhos(rho)) > 1
    if model_kind == "synthetic":
        if draft_models != 1:
            raise InvalidParameterError("draft-models", "a synthetic model takes one --rho per draft model "
                                                        "(--rho 0.3,0.8), not --draft-models")
        return SyntheticModel(vocab, rho, tau_p, tau_q, seed)
    if model_kind not in MODELS:
        raise InvalidParameterError("model", f"unknown model kind {model_kind!r}; choose from {sorted(MODELS)}")
    if several_rhos:
        raise InvalidParameterError("rho", f"several values of --rho set a synthetic model's draft models; "
                                           f"--model {model_kind} does not take them")
    if model_kind == "random-rational":
        return RandomRationalModel(vocab, seed, zero_prob=zero_prob, draft_models=draft_models)
    if draft_models != 1:
        raise InvalidParameterError("draft-models", "a table gives several draft models by its \"drafts\" list, "
                                                    "not --draft-models")
    if table_path is None:
        raise InvalidParameterError("table", "--model table needs --table FILE")
    return TableModel.from_file(table_path)


def sequence_law(row: Callable[[Context], Sequence[Number]], length: int,
                 one: Number = 1.0) -> dict[Context, Number]:
    """The law of ``length`` tokens drawn one after another from ``row(context)`` (zero cells omitted): the
    target's joint ``q^length`` when ``row`` is a target row. ``one`` sets the arithmetic (``Fraction(1)``)."""
    out: dict[Context, Number] = {}
    stack: list[tuple[Context, Number]] = [((), one)]
    while stack:
        block, prob = stack.pop()
        if len(block) == length:
            out[block] = prob
            continue
        for x, px in enumerate(row(block)):
            if px > 0:
                stack.append((block + (x,), prob * px))
    return out
