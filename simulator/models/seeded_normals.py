"""Standard normals of many seeded numpy generators at once, bit for bit (:func:`standard_normals`): the synthetic
model's set-up, one generator per context, run on arrays."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

_M32 = 0xFFFFFFFF
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED  # SeedSequence's hash
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_POOL = 4  # SeedSequence's pool size (words)
_PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341  # PCG's 128-bit multiplier
_M128 = (1 << 128) - 1
CHUNK = 8192  # streams run together: their raw words (count × CHUNK × 8 bytes) stay in the cache
_EXTRA_RAWS = 16  # raw words drawn ahead, past ``count``, for the contexts whose draws are not all direct
#: a wedge test this close to its threshold is left to numpy (the heights here and exp may differ in the last bits)
WEDGE_MARGIN = 1e-12
_U64 = np.uint64
_LOW32, _S32, _S58 = _U64(_M32), _U64(32), _U64(58)
_MH, _ML = _U64(_PCG_MULT >> 64), _U64(_PCG_MULT & (2**64 - 1))
_M0, _M1 = _U64(_PCG_MULT & _M32), _U64((_PCG_MULT >> 32) & _M32)


def numpy_normals(entropy: np.ndarray, count: int) -> np.ndarray:
    """The definition: ``default_rng(SeedSequence(entropy[i])).standard_normal(count)`` row by row."""
    out = np.empty((len(entropy), count))
    for i, words in enumerate(entropy):
        out[i] = np.random.default_rng(np.random.SeedSequence(words)).standard_normal(count)
    return out


def standard_normals(entropy: np.ndarray, count: int) -> np.ndarray:
    """``[C, count]`` float64: row ``i`` the first ``count`` standard normals of
    ``default_rng(SeedSequence(entropy[i]))``, for a ``uint32`` entropy array ``[C, L]`` (``L ≥ 1``) — the same bits,
    computed on arrays.

    The synthetic model (:class:`simulator.models.SyntheticModel`) keys a generator by each context; building one per
    context costs about 8 µs, most of the Monte Carlo engine's set-up (54,241 contexts at ``V = 15, H = 4``). The
    three stages numpy runs per generator run here on arrays, one context per element: ``SeedSequence``'s entropy
    pool and ``generate_state(4, uint64)`` (32-bit hashing, O'Neill's seed_seq design); ``PCG64``'s seeding and its
    128-bit LCG (XSL-RR output), in two 64-bit halves with 32-bit partial products; ``Generator.standard_normal``'s
    ziggurat, where a raw 64-bit word gives the layer (8 bits), the sign (1 bit) and a 52-bit abscissa, returned at
    once below the layer's threshold (98.5% of draws), the rest taking the wedge test with one more uniform. The
    tables (layer widths and thresholds) are read off numpy itself at first use, each probed with a chosen raw word;
    the wedge's heights are ``exp(−x²/2)`` of the widths.

    Where these numbers cannot be trusted bit for bit the row is left to numpy: a draw in the tail layer (about one
    context in a hundred), a wedge test within :data:`WEDGE_MARGIN` of its threshold (``exp`` may differ in its last
    bit between libraries), a context that ran past the raw words drawn ahead. A self-check at first use compares
    rows with numpy's; a mismatch (a numpy whose algorithm changed) sends every row to numpy. The tests compare
    millions of draws.
    """
    entropy = np.ascontiguousarray(entropy, dtype=np.uint32)
    if entropy.ndim != 2 or entropy.shape[1] < 1:
        raise ValueError("entropy must be a [C, L] array of uint32 words, L >= 1")
    if len(entropy) == 0 or count == 0:
        return np.zeros((len(entropy), count))
    if _trusted() is None:
        return numpy_normals(entropy, count)
    return _normals(entropy, count)


# ----------------------------------------------------------------------------------------------------------------
# SeedSequence and PCG64, on arrays


def _seed_state(entropy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``SeedSequence(entropy[i]).generate_state(4, uint64)`` of each row, as four ``uint64`` arrays."""
    count, length = entropy.shape
    const = _INIT_A

    def hashmix(value: np.ndarray) -> np.ndarray:
        nonlocal const
        value = value ^ np.uint32(const)
        const = (const * _MULT_A) & _M32
        value = value * np.uint32(const)
        return value ^ (value >> np.uint32(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        r = x * np.uint32(_MIX_L) - y * np.uint32(_MIX_R)
        return r ^ (r >> np.uint32(16))

    zero = np.zeros(count, dtype=np.uint32)
    pool = [hashmix(entropy[:, i] if i < length else zero) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(_POOL, length):
        for dst in range(_POOL):
            pool[dst] = mix(pool[dst], hashmix(entropy[:, src]))
    words = np.empty((count, 2 * _POOL), dtype=np.uint32)
    const = _INIT_B
    for i in range(2 * _POOL):
        value = pool[i % _POOL] ^ np.uint32(const)
        const = (const * _MULT_B) & _M32
        value = value * np.uint32(const)
        words[:, i] = value ^ (value >> np.uint32(16))
    state = words.astype("<u4").view("<u8").astype(np.uint64)  # little-endian pairs, as generate_state
    return state[:, 0].copy(), state[:, 1].copy(), state[:, 2].copy(), state[:, 3].copy()


class _Pcg:
    """PCG64 streams, one per element: the state and increment as ``(high, low)`` 64-bit halves."""

    def __init__(self, hi: np.ndarray, lo: np.ndarray, inc_hi: np.ndarray, inc_lo: np.ndarray) -> None:
        self.hi, self.lo, self.inc_hi, self.inc_lo = hi, lo, inc_hi, inc_lo

    @classmethod
    def seeded(cls, entropy: np.ndarray) -> "_Pcg":
        """``PCG64(SeedSequence(entropy[i]))``: state 0, increment ``2·seq + 1``; a step, the initial state added, a
        step."""
        init_hi, init_lo, seq_hi, seq_lo = _seed_state(entropy)
        inc_hi = (seq_hi << _U64(1)) | (seq_lo >> _U64(63))
        inc_lo = (seq_lo << _U64(1)) | _U64(1)
        pcg = cls(np.zeros_like(init_hi), np.zeros_like(init_lo), inc_hi, inc_lo)
        pcg._step()
        pcg.lo += init_lo
        pcg.hi += init_hi + (pcg.lo < init_lo)
        pcg._step()
        return pcg

    def subset(self, at: np.ndarray) -> "_Pcg":
        return _Pcg(self.hi[at], self.lo[at], self.inc_hi[at], self.inc_lo[at])

    def _step(self, scratch: tuple[np.ndarray, ...] | None = None) -> None:
        """``state ← state·MULT + inc`` modulo 2^128, in place."""
        hi, lo = self.hi, self.lo
        a0, a1, mid, high, p, t = scratch or tuple(np.empty_like(lo) for _ in range(6))
        np.bitwise_and(lo, _LOW32, out=a0)
        np.right_shift(lo, _S32, out=a1)
        # high = the upper 64 bits of lo·MULT_low, from 32-bit partial products
        np.multiply(a0, _M0, out=mid)
        np.right_shift(mid, _S32, out=mid)
        np.multiply(a0, _M1, out=p)
        np.bitwise_and(p, _LOW32, out=t)
        mid += t
        np.right_shift(p, _S32, out=high)
        np.multiply(a1, _M0, out=p)
        np.bitwise_and(p, _LOW32, out=t)
        mid += t
        np.right_shift(p, _S32, out=t)
        high += t
        np.multiply(a1, _M1, out=p)
        high += p
        np.right_shift(mid, _S32, out=mid)
        high += mid
        np.multiply(lo, _MH, out=p)
        high += p
        np.multiply(hi, _ML, out=p)
        high += p
        np.multiply(lo, _ML, out=lo)
        lo += self.inc_lo
        high += self.inc_hi
        high += lo < self.inc_lo  # the carry
        hi[...] = high

    def raws(self, count: int) -> np.ndarray:
        """The next ``count`` outputs of every stream, ``[count, C]`` (``random_raw``): step, then XSL-RR."""
        out = np.empty((count, len(self.lo)), dtype=np.uint64)
        scratch = tuple(np.empty_like(self.lo) for _ in range(6))
        shift, low = scratch[4], scratch[5]
        for k in range(count):
            self._step(scratch)
            word = out[k]
            np.bitwise_xor(self.hi, self.lo, out=word)
            np.right_shift(self.hi, _S58, out=shift)
            np.right_shift(word, shift, out=low)
            np.subtract(_U64(64), shift, out=shift)
            shift &= _U64(63)
            np.left_shift(word, shift, out=word)
            word |= low
        return out


# ----------------------------------------------------------------------------------------------------------------
# The ziggurat


class _Tables:
    """numpy's ziggurat for ``standard_normal``: per layer ``i`` the width ``w[i]`` (``x = abscissa · w[i]``), the
    threshold ``k[i]`` below which an abscissa is returned at once, and the wedge heights ``f[i]``."""

    def __init__(self, width: np.ndarray, threshold: np.ndarray, height: np.ndarray) -> None:
        self.width, self.threshold, self.height = width, threshold, height
        # by the raw word's low 9 bits (layer, then sign): the signed width, the threshold
        self.signed_width = np.concatenate([width, -width])
        self.threshold9 = np.concatenate([threshold, threshold])


def _probe(generator: np.random.Generator, raw: int) -> tuple[float, int]:
    """numpy's ``standard_normal()`` when its stream's next raw word is ``raw``, and the raw words it read. The
    state is set to the one before a state whose output is ``raw`` (high half 0: XSL-RR outputs the low half),
    increment 1."""
    inverse = pow(_PCG_MULT, -1, 1 << 128)
    bit_generator = generator.bit_generator
    bit_generator.state = {"bit_generator": "PCG64", "state": {"state": ((raw - 1) * inverse) & _M128, "inc": 1},
                           "has_uint32": 0, "uinteger": 0}
    value = generator.standard_normal()
    now, state, used = bit_generator.state["state"]["state"], raw, 1
    while state != now and used < 64:
        state, used = (state * _PCG_MULT + 1) & _M128, used + 1
    return value, used


def _direct(generator: np.random.Generator, layer: int, abscissa: int) -> bool:
    """Whether numpy returns the draw of this layer and abscissa at once (one raw word read)."""
    return _probe(generator, layer | (abscissa << 9))[1] == 1


def _read_tables() -> _Tables:
    """The ziggurat's tables, read off numpy: the width of layer ``i`` is the draw of abscissa 1 (sign +); its
    threshold the least abscissa not returned at once, found next to ``2^52·x[i−1]/x[i]`` (the base layer:
    ``x[255]/x[0]``) and checked on both sides; heights ``exp(−x[i]²/2)``, 1 above the top layer."""
    generator = np.random.Generator(np.random.PCG64(0))
    width = np.array([_probe(generator, layer | (1 << 9))[0] for layer in range(256)])
    edge = width * 2.0**52
    threshold = np.zeros(256, dtype=np.uint64)
    for layer in range(256):
        below, above = (edge[255], edge[0]) if layer == 0 else (edge[layer - 1] if layer > 1 else 0.0, edge[layer])
        guess = min(int(below / above * 2**52), 2**52)
        for _ in range(8):  # the guess is off by one in about half the layers
            if guess > 0 and not _direct(generator, layer, guess - 1):
                guess -= 1
            elif guess < 2**52 and _direct(generator, layer, guess):
                guess += 1
            else:
                break
        else:
            low, high = 0, 2**52  # a table unlike the guess: search it
            while low < high:
                mid = (low + high) // 2
                low, high = (mid + 1, high) if _direct(generator, layer, mid) else (low, mid)
            guess = low
        threshold[layer] = guess
    height = np.array([1.0] + [math.exp(-0.5 * x * x) for x in edge[1:]])
    return _Tables(width, threshold, height)


_STATE: dict[str, object] = {}


def _trusted() -> _Tables | None:
    """The tables, read once a process and checked against numpy on a few streams; ``None`` when they disagree."""
    if "tables" not in _STATE:
        _STATE["tables"] = None
        tables = _read_tables()
        _STATE["tables"] = tables
        entropy = np.random.default_rng(12345).integers(0, 2**32, size=(48, 5), dtype=np.uint32)
        if not np.array_equal(_normals(entropy, 64).view(np.uint64), numpy_normals(entropy, 64).view(np.uint64)):
            _STATE["tables"] = None
    return _STATE["tables"]  # type: ignore[return-value]


def _decode(raw: np.ndarray, tables: _Tables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each raw word's low 9 bits (layer, sign), signed value ``±abscissa·w[layer]`` and whether the draw is returned at
    once (abscissa below the layer's threshold)."""
    key = (raw & _U64(0x1FF)).view(np.int64)
    abscissa = raw >> _U64(9)
    abscissa &= _U64((1 << 52) - 1)
    value = abscissa.astype(np.float64)
    value *= tables.signed_width.take(key)
    return key, value, abscissa < tables.threshold9.take(key)


def _normals(entropy: np.ndarray, count: int, fallback: Callable[[np.ndarray, int], np.ndarray] = numpy_normals
             ) -> np.ndarray:
    """:func:`standard_normals` on arrays, :data:`CHUNK` streams at a time (their words stay in the cache); rows it
    cannot finish from ``fallback``."""
    tables: _Tables = _STATE["tables"]  # type: ignore[assignment]
    out = np.empty((len(entropy), count))
    redo = []
    for start in range(0, len(entropy), CHUNK):
        part = entropy[start: start + CHUNK]
        pcg = _Pcg.seeded(part)
        raw = pcg.raws(count)  # [count, m]
        _, value, direct = _decode(raw, tables)
        out[start: start + len(part)] = value.T  # right wherever every draw of the row was direct
        walk = np.flatnonzero(~direct.all(axis=0))
        if len(walk):
            words = np.concatenate([raw[:, walk], pcg.subset(walk).raws(_EXTRA_RAWS)])  # [K, w]
            values, bad = _walk(words, count, tables)
            out[start + walk] = values
            redo.append(start + walk[bad])
    redo_rows = np.concatenate(redo) if redo else np.zeros(0, dtype=np.int64)
    if len(redo_rows):
        out[redo_rows] = fallback(entropy[redo_rows], count)
    return out


def _walk(raw: np.ndarray, count: int, tables: _Tables) -> tuple[np.ndarray, np.ndarray]:
    """The ziggurat run along each column's raw words ``raw [K, m]`` for ``count`` draws: ``[m, count]`` values and
    the columns it could not finish (a tail-layer draw, a wedge test too close to call, past the words drawn)."""
    size, m = raw.shape
    key, value, direct = _decode(raw, tables)
    # A draw that starts at word j is returned at once (the next starts at j + 1), or takes the wedge test with the
    # uniform of word j + 1 (the next draw, or the next try when the test fails, starts at j + 2), or is in the tail
    # layer (left to numpy).
    layer = key & 0xFF
    accept = direct.copy()
    unsure = ~direct & (layer == 0)
    unsure[-1] |= ~direct[-1]  # its wedge uniform lies past the words drawn
    wedge = np.flatnonzero((~direct[:-1] & (layer[:-1] != 0)).ravel())  # flat ids, row-major [K, m]
    at_layer, x = layer.ravel()[wedge], value.ravel()[wedge]
    u = (raw.ravel()[wedge + m] >> _U64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    lhs = (tables.height[at_layer - 1] - tables.height[at_layer]) * u + tables.height[at_layer]
    rhs = np.exp(-0.5 * x * x)
    accept.ravel()[wedge] = lhs < rhs
    unsure.ravel()[wedge] |= np.abs(lhs - rhs) <= WEDGE_MARGIN
    # A row at a time from word 0: where tries start, the draws returned, the first ``count`` of them chosen.
    step = np.where(direct, 1, 2)
    chosen = np.empty_like(direct)
    start = np.zeros(m, dtype=np.int64)
    done = np.zeros(m, dtype=np.int64)  # draws returned so far
    bad = np.zeros(m, dtype=bool)
    here = np.empty(m, dtype=bool)
    for j in range(size):
        np.equal(start, j, out=here)
        start += step[j] * here
        open_ = done < count
        bad |= here & unsure[j] & open_
        np.logical_and(here, accept[j], out=chosen[j])
        chosen[j] &= open_
        done += chosen[j]
    bad |= done < count
    chosen[:, bad] = False
    chosen[:count, bad] = True  # any ``count`` values: the column is left to numpy
    return value.T[chosen.T].reshape(m, count), bad
