"""The Monte Carlo engine (docs/engines.md, "Monte Carlo"): the papers' toy methodology with real statistics, each
trial on its own counter stream; per seed the mean accepted length, TVDs and a chi-square test
(:func:`monte_carlo`)."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from fractions import Fraction

from simulator.errors import InvalidParameterError, SizeLimitError
from simulator.models import ModelPair, ModelView
from simulator.montecarlo.batched import batched_rounds, has_batched_path, path_nodes
from simulator.montecarlo.context_rows import ContextRows, DeviceRows
from simulator.randomness import CounterRandomness
from simulator.speculation import RoundOutcome, complete, speculate
from simulator.montecarlo.statistics import ChiSquare, chi_square, detectable_tvd
from simulator.drafting import Drafter, FixedShape
from simulator.verifiers.registry import Verifier, check_pairing

BASELINE_KEY = 2**32 - 2  # the baseline sampler's stream: default_rng([seed, BASELINE_KEY])
BATCH = 20_000  # the most trials per chunk
BATCH_NODES = 2**18  # the most trials × tree nodes per chunk
REFERENCE_CHUNK = 1000  # the most trials per chunk of the reference path (which reports progress per chunk)
BATCH_BYTES = 512 * 2**20  # a chunk's working arrays: about four [trials, nodes, V + 4] float64 arrays at most
PATH_BATCH = 2**16  # the most trials per chunk of an array rule that reads each trial's path only (token verification)
PATH_CELLS = 2**19  # ... and the most trials × nodes it reads per trial
DRAFT_CELLS = 2**21  # ... and the most trials × tree nodes (the draft's node ids, int64: 16 MiB)
DEVICE_BATCH_NODES = 2**22  # on a GPU: the most trials × tree nodes per chunk (launches amortised, not cache-sized)
DEVICE_BATCH_BYTES = 8 * 2**30  # on a GPU: a chunk's working arrays at most
TABLE_BYTES = 2 * 2**30  # the most a seed's tables (context rows, their running sums, the target joint) may take
ALPHA = 1e-3  # false-alarm rate of the combined test (Bonferroni over seeds)
POWER = 0.9  # the power at which the detectable TVD is stated
#: Most trials per seed a run may ask for: 10^12 rounds take days at the engine's fastest (0.2 µs a trial), and
#: past about 10^19 the power bound's arithmetic no longer holds (its root solver meets a NaN).
MAX_TRIALS = 10**12
PILOT_SECONDS = 0.2  # the pilot: the first seed's chunks are timed until those after its first take this long
REFERENCE_SECONDS = 0.5  # the reference path's chunks are sized to take about this long (progress; see run_seed)
REFERENCE_FIRST = 8  # the reference path's first chunk
ANNOUNCE_SECONDS = 10.0  # a run estimated to take longer has its estimate shown (specproof mc, on standard error)


def batch_size(nodes: int, vocab: int, device: str | None = None, path: int | None = None) -> int:
    """Trials per chunk: :data:`BATCH`, fewer for trees of more than :data:`BATCH_NODES` ``/ BATCH`` nodes (so a
    chunk's per-node arrays stay about as large as cache-friendly; ~35% more trials per second on complete(b = 2,
    H = 4) than chunks of :data:`BATCH`) and for trees whose per-trial arrays would pass :data:`BATCH_BYTES`.
    An array rule that reads only ``path`` nodes of each trial (token verification: the root and the children of
    the nodes on its path) has chunks of up to :data:`PATH_BATCH` trials, :data:`PATH_CELLS` trials × ``path`` and
    :data:`DRAFT_CELLS` trials × ``nodes``: its arrays are a trial's path, and larger chunks spread each array
    operation's fixed cost over more trials (tv-rrs on complete(2, 4), V = 15: 58,254 trials a chunk, 1.6x the
    trials per second of 8,456).
    On a GPU (``device`` other than the CPU) kernel launches, not the cache, bound a chunk's speed: chunks of
    :data:`DEVICE_BATCH_NODES` trials × nodes, within :data:`DEVICE_BATCH_BYTES`.
    Results never depend on it (each trial reads its own counter stream)."""
    if device is None or device.startswith("cpu"):
        trials, cells, memory = BATCH, BATCH_NODES, BATCH_BYTES
        if path is not None:
            return max(1, min(PATH_BATCH, PATH_CELLS // path, DRAFT_CELLS // nodes,
                              memory // (4 * 8 * path * (vocab + 4))))
    else:
        trials, cells, memory = DEVICE_BATCH_NODES, DEVICE_BATCH_NODES, DEVICE_BATCH_BYTES
    return max(1, min(trials, cells // nodes, memory // (4 * 8 * nodes * (vocab + 4))))


def table_bytes(vocab: int, height: int) -> int:
    """Bytes of a seed's tables: ``p`` and ``q`` rows of every context up to depth ``H`` with their running
    sums (:class:`ContextRows`), and the target's joint over ``V^(H+1)`` cells."""
    contexts = sum(vocab**j for j in range(height + 1))
    return 8 * vocab * 2 * (2 * contexts - vocab**height) + 8 * vocab ** (height + 1)


def check_tables(vocab: int, height: int, options: tuple[str, ...] = ("vocab", "depth")) -> None:
    """Refuse (:class:`SizeLimitError` on ``options[0]``) tables that would pass :data:`TABLE_BYTES`."""
    need = table_bytes(vocab, height) if height * math.log10(max(vocab, 2)) < 15 else math.inf
    if need > TABLE_BYTES:
        size = (f"{need / 2**30:,.1f} GiB" if math.isfinite(need)
                else f"about 10^{(height + 1) * math.log10(vocab):.0f} cells")
        names = ", ".join(f"--{o}" for o in options)
        raise SizeLimitError(options[0], f"Monte Carlo needs the rows of every context up to depth {height} and the "
                                         f"target's joint over V^(H+1) = {vocab}^{height + 1} sequences: {size}, over "
                                         f"the limit of {TABLE_BYTES / 2**30:g} GiB; reduce {names}")



def encode(sequences: np.ndarray, vocab: int) -> np.ndarray:
    """Row ``z`` of ``sequences`` → ``Σ_i z_i V^(H−i)``: the cell of ``Σ^(H+1)`` it falls in."""
    weights = vocab ** np.arange(sequences.shape[1] - 1, -1, -1, dtype=np.int64)
    return sequences.astype(np.int64) @ weights


def _rounds(view: ModelView, drafter: Drafter, verifier: Verifier, seed: int,
            trials: Iterable[int]) -> Iterator[tuple[RoundOutcome, CounterRandomness]]:
    """The reference path: each trial's round on its own counter stream, with the stream (for the completion)."""
    for t in trials:
        rng = CounterRandomness(seed, t)
        yield speculate(view, drafter, verifier, rng), rng


def sample_rounds(model: ModelPair, drafter: Drafter, verifier: Verifier, trials: Iterable[int], seed: int = 0,
                  arithmetic: str = "float") -> Iterator[RoundOutcome]:
    """The rounds of the given trials on the reference path (a trial's outcome depends only on ``(seed, t)`` and
    the configuration — never on how many trials run, in what order or batch); ``arithmetic`` of the model's
    rows."""
    view = ModelView(model, arithmetic)
    for outcome, _ in _rounds(view, drafter, verifier, seed, trials):
        yield outcome


def run_trials(model: ModelPair, drafter: Drafter, verifier: Verifier, seed: int, trials: Iterable[int],
               view: ModelView | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Accepted lengths and completed sequences (rows of ``H+1`` tokens) of the given trials (``view``: the
    model's float view, to share its row cache between calls)."""
    view = view or ModelView(model, "float")
    accepted, sequences = [], []
    for outcome, rng in _rounds(view, drafter, verifier, seed, trials):
        accepted.append(outcome.accepted)
        sequences.append(complete(outcome, view, drafter.height, rng))
    return np.array(accepted, dtype=np.int64), np.array(sequences, dtype=np.int64).reshape(len(accepted), -1)


def target_table(model: ModelPair, height: int, rows: ContextRows | None = None) -> np.ndarray:
    """``q^(H+1)`` over every cell of ``Σ^(H+1)`` (index as :func:`encode`), built level by level from the
    target rows of every context (``rows``, built here if not given)."""
    vocab = model.vocab
    check_tables(vocab, height)
    rows = rows or ContextRows(model, height)
    table = np.ones(1)
    for level in range(height + 1):
        block = rows.q[rows.offsets[level]: rows.offsets[level + 1]]
        table = (table[:, None] * block).reshape(-1)
    return table


class Histogram:
    """Counts of the cells ``0 .. size − 1`` observed so far, for the engine's tables of ``V^(H+1)`` cells (held
    densely beside the target table, which has that size). Codes are buffered and counted by one ``bincount``
    once the buffer reaches ``size`` codes, so memory stays within twice the table's whatever the trials, and
    each code costs O(1) (sorting every chunk to merge sparse counts cost half a second per 10^6 trials)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._dense = np.zeros(size, dtype=np.int64)
        self._pending: list[np.ndarray] = []
        self._held = 0

    @classmethod
    def of(cls, codes: np.ndarray, size: int) -> "Histogram":
        out = cls(size)
        out.add(codes)
        return out

    def add(self, codes: np.ndarray) -> None:
        self._pending.append(np.asarray(codes, dtype=np.int64))
        self._held += len(codes)
        if self._held >= self.size:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            counted = np.bincount(np.concatenate(self._pending), minlength=self.size)
            if len(counted) != self.size:
                raise RuntimeError(f"a cell code {len(counted) - 1} outside 0..{self.size - 1}")  # an engine bug
            self._dense += counted
            self._pending, self._held = [], 0

    @property
    def cells(self) -> np.ndarray:
        """The observed cells, ascending."""
        self._flush()
        return np.flatnonzero(self._dense)

    @property
    def counts(self) -> np.ndarray:
        """Their counts."""
        return self._dense[self.cells]

    @property
    def total(self) -> int:
        self._flush()
        return int(self._dense.sum())

    def prefix_counts(self, tail: int, cells: int) -> np.ndarray:
        """Counts per leading block: cell ``z`` falls in ``z // tail`` (the first ``m`` tokens)."""
        return np.bincount(self.cells // tail, weights=self.counts, minlength=cells).astype(np.int64)


def empirical_tvd(observed: Histogram, table: np.ndarray) -> float:
    """``½ Σ_z |N_z/N − q(z)|`` over every cell (unobserved cells contribute ``q(z)``)."""
    freq = observed.counts / observed.total
    at = table[observed.cells]
    return float(0.5 * (np.abs(freq - at).sum() + 1.0 - at.sum()))


def direct_target_sample(table: np.ndarray, seed: int, n: int) -> Histogram:
    """``n`` sequences drawn directly from ``q^(H+1)`` (the paper's baseline sampler), in chunks of one stream. A
    chunk's uniforms are sorted before the search (a histogram does not see their order; sorted, the searches walk
    the table in order: 4x faster on ``15^5`` cells)."""
    generator = np.random.default_rng([seed, BASELINE_KEY])
    cumulative = np.cumsum(table)
    out = Histogram(len(table))
    for start in range(0, n, BATCH):
        uniforms = np.sort(generator.random(min(BATCH, n - start)))
        out.add(np.minimum(np.searchsorted(cumulative, uniforms * cumulative[-1], side="right"), len(table) - 1))
    return out


def check_power(marginal: np.ndarray, trials: int, alpha: float) -> None:
    """Refuse a test that could not detect even a total variation of 1 at power :data:`POWER`: after pooling
    cells expected below 5 (:func:`simulator.montecarlo.statistics.chi_square`) it would have too few cells or
    samples."""
    def usable(n: int) -> int:
        expected = marginal * n
        small = expected < 5
        return int((~small).sum()) + int(expected[small].sum() > 0)

    if not detectable_tvd(trials, usable(trials), alpha, POWER) < 1:
        enough = trials
        while not detectable_tvd(enough, usable(enough), alpha, POWER) < 1 and enough < 2**40:
            enough *= 2
        raise InvalidParameterError("trials", f"{trials:,} trials give the chi-square test {usable(trials)} usable "
                                              f"cell(s) after pooling, too few to detect even a total variation of 1 "
                                              f"at power {POWER:g}: this test has no power; run more trials "
                                              f"({enough:,} suffice here)")


def tested_prefix(vocab: int, height: int, trials: int) -> int:
    """``m``: the longest prefix whose ``V^m`` cells hold ``≥ 20`` samples each on average (at least 1)."""
    m = 1
    while m < height + 1 and vocab ** (m + 1) * 20 <= trials:
        m += 1
    return m


@dataclass(frozen=True)
class SeedResult:
    seed: int
    trials: int
    accept_len_mean: float
    accept_len_se: float  # within this seed: std / sqrt(N)
    tvd: float
    baseline_tvd: float
    test: ChiSquare


def mean_and_se(counts: np.ndarray) -> tuple[float, float]:
    """Mean of the values ``0, 1, …`` with these counts, and its standard error ``s/√N`` (``s`` with ``N − 1``),
    computed exactly in integers and rounded once: the same numbers whatever the order or chunking of the trials.
    ``N ≥ 2``."""
    values = np.arange(len(counts), dtype=object)
    n, s1, s2 = int(counts.sum()), int((values * counts).sum()), int((values * values * counts).sum())
    variance = Fraction(n * s2 - s1 * s1, n * (n - 1))
    return float(Fraction(s1, n)), math.sqrt(float(variance) / n)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.0f} days"


@dataclass(frozen=True)
class RunEstimate:
    """How long a Monte Carlo run takes, from the pilot (the first seed's set-up and first chunks, timed):
    ``seeds × (set_up + trials × per_trial)`` seconds."""

    seeds: int
    trials: int
    set_up: float  # seconds per seed besides its trials: the model's rows and target table, tables built once
    per_trial: float  # seconds per trial: its round and completion, and its share of the baseline's target samples
    pilot_trials: int  # the trials timed

    @property
    def seconds(self) -> float:
        return self.seeds * (self.set_up + self.trials * self.per_trial)

    def describe(self) -> str:
        return (f"about {_duration(self.seconds)}, estimated: {self.seeds:,} seed(s) × ({_duration(self.set_up)} "
                f"set-up + {self.trials:,} trials × {self.per_trial * 1e6:.3g} µs), timed on the first seed's "
                f"set-up and first {self.pilot_trials:,} trials")

    def check(self, timeout: float | None) -> "RunEstimate":
        """Raise :class:`SizeLimitError` (field ``trials``) when the estimate passes ``timeout`` seconds (``None``
        or 0: no limit)."""
        if timeout and self.seconds > timeout:
            raise SizeLimitError("trials", f"{self.describe()}: over the wall-clock limit of {timeout:g} s "
                                           "(--timeout); reduce --trials or --seeds, or raise --timeout (0 for none)")
        return self


class _Pilot:
    """Times the first seed of a run and hands :class:`RunEstimate` to ``report`` once: after the seed's set-up
    and its first chunks, as soon as the chunks after the first (whose time includes tables built once, counted
    as set-up) have taken :data:`PILOT_SECONDS`, or at the seed's end."""

    def __init__(self, seeds: int, trials: int, report: Callable[[RunEstimate], None]) -> None:
        # Loaded on a seed's first use (the test's power, its p-values): once a process, not a seed's set-up.
        import scipy.optimize, scipy.special  # noqa: E401,F401
        self.seeds, self.trials, self.report = seeds, trials, report
        self.mark = time.perf_counter()
        self.set_up = 0.0
        self.baseline = 0.0
        self.chunks: list[tuple[int, float]] = []
        self.done = False

    def lap(self) -> float:
        now = time.perf_counter()
        lap, self.mark = now - self.mark, now
        return lap

    def set_up_done(self, table: np.ndarray, seed: int) -> None:
        """The seed's tables are built; time the baseline's sampler (:func:`_baseline_time`), then the chunks."""
        self.set_up = self.lap()
        self.baseline = _baseline_time(table, seed, self.trials)
        self.lap()

    def chunk(self, trials: int, last: bool) -> None:
        if self.done:
            return
        self.chunks.append((trials, self.lap()))
        (first, first_time), later = self.chunks[0], self.chunks[1:]
        later_time = sum(t for _, t in later)
        if not (last or later_time >= PILOT_SECONDS):
            return
        self.done = True
        later_trials = sum(n for n, _ in later)
        rate = _latest_rate(later) if later else first_time / first
        self.report(RunEstimate(self.seeds, self.trials, self.set_up + max(0.0, first_time - first * rate),
                                rate + self.baseline, first + later_trials))


def _latest_rate(chunks: list[tuple[int, float]]) -> float:
    """Seconds per trial of the latest chunks holding half of these ``(trials, seconds)`` chunks' trials: a
    model's rows are still being cached in the early ones (the reference path reads them row by row)."""
    half, trials, seconds = sum(n for n, _ in chunks) / 2, 0, 0.0
    for n, t in reversed(chunks):
        trials, seconds = trials + n, seconds + t
        if trials >= half:
            break
    return seconds / trials


def _next_chunk(size: int, seconds: float, most: int) -> int:
    """The reference path's next chunk after one of ``size`` trials took ``seconds``: about
    :data:`REFERENCE_SECONDS` long, at most twice ``size`` and at most ``most``."""
    return max(1, min(most, 2 * size, int(size * REFERENCE_SECONDS / max(seconds, 1e-9))))


def _baseline_time(table: np.ndarray, seed: int, trials: int) -> float:
    """Seconds per trial of the baseline's direct target samples (:func:`direct_target_sample`), timed on a
    sample of up to ``4·BATCH`` (drawn and discarded: the baseline's own sample is drawn from its own stream
    afresh)."""
    n = min(trials, 4 * BATCH)
    start = time.perf_counter()
    direct_target_sample(table, seed, n)
    return (time.perf_counter() - start) / n


def run_seed(model: ModelPair, drafter: Drafter, name: str, verifier: Verifier, seed: int, trials: int,
             progress: Callable[[int], None] | None = None, rows: ContextRows | None = None,
             power_alpha: float | None = None, device: str | None = None, pilot: _Pilot | None = None,
             workers: int = 1) -> SeedResult:
    """One model seed: ``rows`` (the model's rows up to depth H) may be shared between verifiers. With
    ``power_alpha`` (the seed's share of the false-alarm rate) a test without power is refused before the trials
    run (:func:`check_power`); the toy study, which reports accepted lengths, runs without it. With ``device`` (a
    torch device) the batched rounds run there (:func:`torch_rows`): the same numbers as on numpy. ``pilot``
    times this seed for the run's estimate (:func:`monte_carlo`); ``workers``: the processes sharing the cores (torch's
    CPU threads)."""
    height = drafter.height
    check_tables(model.vocab, height, ("vocab", *getattr(drafter, "size_options", ("depth",))))
    rows = rows or ContextRows(model, height)
    table = target_table(model, height, rows)
    m = tested_prefix(model.vocab, height, trials)
    tail = model.vocab ** (height + 1 - m)
    marginal = table.reshape(-1, tail).sum(axis=1)
    if power_alpha is not None:
        check_power(marginal, trials, power_alpha)
    accepted_counts = np.zeros(height + 1, dtype=np.int64)
    observed = Histogram(len(table))
    batched = isinstance(drafter, FixedShape) and has_batched_path(name, drafter.scheme, model.vocab,
                                                                    drafter.topology)
    chunk = batch_size(len(drafter.topology.parents) if isinstance(drafter, FixedShape) else height + 1, model.vocab,
                       device if batched else None,
                       path_nodes(name, drafter.topology) if batched else None)
    view = None if batched else ModelView(model, "float")
    if not batched:
        chunk = min(chunk, REFERENCE_CHUNK)
    round_rows = torch_rows(rows, device, workers) if batched and device is not None else rows
    if pilot is not None:
        pilot.set_up_done(table, seed)
    # The batched path runs chunks of the size above. The reference path runs its trials one by one, so its chunks
    # only set how often progress is shown (and the pilot timed): from REFERENCE_FIRST trials, each sized to take
    # about REFERENCE_SECONDS, whatever a trial costs.
    start, size = 0, chunk if batched else min(REFERENCE_FIRST, chunk)
    while start < trials:
        span, began = range(start, min(start + size, trials)), time.perf_counter()
        if batched:
            accepted, codes = batched_rounds(model, drafter.topology, drafter.scheme, name, seed, np.arange(
                span.start, span.stop), round_rows, trials)
        else:
            accepted, sequences = run_trials(model, drafter, verifier, seed, span, view)
            codes = encode(sequences, model.vocab)
        accepted_counts += np.bincount(accepted, minlength=height + 1)
        observed.add(codes)
        if pilot is not None:
            pilot.chunk(len(span), span.stop == trials)
        if progress is not None:
            progress(len(span))
        if not batched:
            size = _next_chunk(size, time.perf_counter() - began, chunk)
        start = span.stop
    mean, se = mean_and_se(accepted_counts)
    return SeedResult(seed, trials, mean, se, empirical_tvd(observed, table),
                      empirical_tvd(direct_target_sample(table, seed, trials), table),
                      chi_square(observed.prefix_counts(tail, len(marginal)), marginal, ALPHA))


@dataclass(frozen=True)
class MCSummary:
    """One configuration over ``seeds`` model seeds; the JSON of ``specproof mc``."""

    verifier: str
    seeds: int
    trials: int
    accept_len_mean: float  # mean accepted draft tokens per round (E[τ]), averaged over seeds
    accept_len_se: float  # standard error across model seeds (within-seed SE when there is one seed)
    tvd: float  # mean over seeds of the TVD of N completed samples to q^(H+1)
    baseline_tvd: float  # the same for N direct target samples
    test_prefix: int  # m: the test compares the first m tokens' law
    test_cells: int
    test_alpha: float
    test_min_p_value: float
    test_rejects: bool
    detectable_tvd: float  # on the first-m-token law, at power POWER, per seed
    per_seed: list[dict]

    def to_json(self) -> dict:
        return asdict(self)


def summarise(name: str, results: list[SeedResult], vocab: int, height: int) -> MCSummary:
    means = np.array([r.accept_len_mean for r in results])
    se = float(means.std(ddof=1) / math.sqrt(len(means))) if len(means) > 1 else results[0].accept_len_se
    trials = results[0].trials
    alpha = ALPHA / len(results)
    m = tested_prefix(vocab, height, trials)
    cells = max(r.test.cells for r in results)
    return MCSummary(
        name, len(results), trials, float(means.mean()), se,
        float(np.mean([r.tvd for r in results])), float(np.mean([r.baseline_tvd for r in results])),
        m, cells, ALPHA, float(min(r.test.p_value for r in results)),
        any(r.test.impossible > 0 or r.test.p_value < alpha for r in results),
        detectable_tvd(trials, cells, alpha, POWER),
        [{"seed": r.seed, "accept_len_mean": r.accept_len_mean, "accept_len_se": r.accept_len_se, "tvd": r.tvd,
          "baseline_tvd": r.baseline_tvd, "test_p_value": r.test.p_value} for r in results])


def torch_rows(rows: ContextRows, device: str, workers: int = 1) -> DeviceRows:
    """``rows`` on a torch device; an unknown or unavailable device is an error naming ``device``. On the CPU torch
    gets this process's share of the cores, ``workers`` processes sharing them
    (:func:`~simulator.devices.set_torch_threads`)."""
    from simulator.devices import set_torch_threads, usable_device

    if usable_device(device).type == "cpu":
        set_torch_threads(workers)
    return DeviceRows(rows, device)


def monte_carlo(model_for_seed: Callable[[int], ModelPair], drafter: Drafter, name: str, verifier: Verifier,
                seeds: int, trials: int, progress: Callable[[int], None] | None = None,
                first_seed: int = 0, device: str | None = None,
                estimate: Callable[[RunEstimate], None] | None = None) -> MCSummary:
    """Run ``trials`` rounds for each model seed ``first_seed … first_seed + seeds − 1`` and summarise; with
    ``device``, the batched rounds on that torch device. ``estimate(RunEstimate)`` is called once, after the
    first seed's pilot (its set-up, then :data:`PILOT_SECONDS` of trials past the first chunk, or one more chunk
    where a chunk takes longer) and before the rest of the run: raising there stops the run. The pilot's trials
    are the run's own; the results are the same with or without it.

    Trial ``t`` under model seed ``s`` drafts, verifies and completes one round on its own counter stream
    (:class:`simulator.randomness.CounterRandomness`), so its result depends only on ``(s, t)``, never on batch size
    or order; :mod:`simulator.montecarlo.batched` runs the same trials in arrays where it has a path. Per seed: the
    mean accepted length, the TVD to ``q^(H+1)`` and to direct target samples, and a chi-square test
    (:func:`tested_prefix`). Memory (:func:`check_tables`), power (:func:`check_power`) and time
    (:class:`RunEstimate`) are checked before a run commits.
    """
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise InvalidParameterError("seeds", f"must be an integer ≥ 1, got {seeds!r}")
    if isinstance(trials, bool) or not isinstance(trials, int) or not 2 <= trials <= MAX_TRIALS:
        raise InvalidParameterError("trials", f"must be an integer in [2, {MAX_TRIALS:.0e}], got {trials!r}")
    if isinstance(first_seed, bool) or not isinstance(first_seed, int) or first_seed < 0:
        raise InvalidParameterError("seed", f"must be an integer ≥ 0, got {first_seed!r}")
    check_pairing(name, drafter.scheme)
    span = range(first_seed, first_seed + seeds)
    pilot = _Pilot(seeds, trials, estimate) if estimate is not None else None
    results = [run_seed(model_for_seed(s), drafter, name, verifier, s, trials, progress, power_alpha=ALPHA / seeds,
                        device=device, pilot=pilot if s == first_seed else None) for s in span]
    return summarise(name, results, model_for_seed(first_seed).vocab, drafter.height)
