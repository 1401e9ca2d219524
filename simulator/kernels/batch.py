"""A batch of requests a serving engine verifies in one call (docs/kernels.md, "vllm-v1-forward"): each request's
model pair, number of drafts and sampling parameters as the engine holds them (:class:`BatchRequest`), and the row
each request is held to (:class:`ReferencePair`): its target's row processed as it is sampled, or its argmax."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from simulator.errors import InvalidParameterError
from simulator.verifiers.knobs import parse_kwargs
from simulator.loops.sampling import Sampling
from simulator.models import Context, ModelPair

#: vLLM's ``_SAMPLING_EPS``: a request whose temperature is below it is sampled greedily
GREEDY_BELOW = 1e-5
#: the values a greedy request's temperature is written as in vLLM's ``SamplingMetadata``: 0, as vLLM 0.11.0's
#: ``InputBatch`` writes it, or -1, the ``GREEDY_TEMPERATURE`` its rejection sampler compares with
GREEDY_TEMPERATURES = (0.0, -1.0)
#: a request's fields on the command line (``--request NAME=VALUE,...``)
REQUEST_FIELDS = ("temperature", "top_k", "top_p", "seed", "depth", "model_seed", "table")
#: how far a top-p cut must sit from a cumulative mass for float32 arithmetic to decide it as float64 does (float32
#: rounds at 6e-8 relative; a few operations per mass stay far below)
CUT_MARGIN = 1e-6


@dataclass(frozen=True)
class BatchRequest:
    """One request of a batch: its ``model`` pair (the draft's rows ``p``, the target's raw rows ``q``), the ``depth``
    of its chain of drafts, and its sampling parameters as vLLM's ``SamplingParams`` hold them: ``temperature``
    (``0`` or ``-1``: greedy, written into the metadata as given), ``top_k`` (0: no cut), ``top_p`` (1: no cut) and
    ``seed`` (the request draws from a ``torch.Generator`` of its own, ``SamplingMetadata.generators``; ``None``:
    from torch's default generator). :meth:`check` validates it."""

    model: ModelPair
    depth: int = 2
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def sampling(self) -> Sampling | None:
        """The processing of a random request's target rows (``None`` for a greedy one)."""
        return None if self.greedy else Sampling(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    def check(self, index: int) -> None:
        """Refuse a bad field with :class:`InvalidParameterError` naming ``request[index].field``."""
        name = f"request[{index}]"
        for field, value, minimum in (("depth", self.depth, 1), ("top_k", self.top_k, 0),
                                      ("seed", self.seed, 0)):
            if value is None and field == "seed":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise InvalidParameterError(f"{name}.{field}", f"must be an integer ≥ {minimum}, got {value!r}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or (
                t < GREEDY_BELOW and t not in GREEDY_TEMPERATURES):
            raise InvalidParameterError(f"{name}.temperature", f"must be ≥ {GREEDY_BELOW:g}, or 0 or -1 for a greedy "
                                                               f"request, got {t!r}")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise InvalidParameterError(f"{name}.top_p", f"must be a number in (0, 1], got {self.top_p!r}")
        if self.greedy and (self.top_k or self.top_p != 1):
            field = "top_k" if self.top_k else "top_p"
            raise InvalidParameterError(f"{name}.{field}", "a greedy request (temperature 0 or -1) has no top-k or "
                                                           "top-p: vLLM resets them")

    def describe(self) -> str:
        what = f"greedy (temperature written as {self.temperature:g})" if self.greedy else self.sampling.describe()
        return f"{what}, {self.depth} draft(s)" + ("" if self.seed is None else f", own generator (seed {self.seed})")


def parse_request(text: str, index: int, model_of, depth: int) -> BatchRequest:
    """``--request NAME=VALUE,...`` (:data:`REQUEST_FIELDS`; absent fields take their defaults): request ``index``
    on the pair ``model_of(index, model_seed, table)`` (``None`` for a field not given), with ``depth`` drafts unless
    it says."""
    fields = parse_kwargs(text, f"request[{index}]")
    unknown = sorted(set(fields) - set(REQUEST_FIELDS))
    if unknown:
        raise InvalidParameterError(f"request[{index}].{unknown[0]}",
                                    f"unknown field: one of {', '.join(REQUEST_FIELDS)}")
    model = model_of(index, fields.pop("model_seed", None), fields.pop("table", None))
    request = BatchRequest(model, **{"depth": depth, **fields})
    request.check(index)
    return request


class ReferencePair:
    """The model pair request ``index`` is held to: its draft rows, and its target's rows as it is sampled. A greedy
    request's row is a point mass on the first largest entry of the raw row (torch's ``argmax``); a random request's
    is the raw row's logits processed by :meth:`simulator.loops.sampling.Sampling.probs`: divided by the
    temperature, then cut to the top ``k`` (ties with the ``k``-th kept), then to the top-``p`` nucleus (in ascending
    order, the tokens whose cumulative probability is ≤ 1 − top_p removed, the likeliest kept), in float64.

    A row where that cut is not decided to float32's precision is refused (:class:`InvalidParameterError` on
    ``request[index].top_p``): a cumulative mass within :data:`CUT_MARGIN` of ``1 − top_p``, or two equal
    probabilities the cut separates (which of them a sort puts first decides it)."""

    def __init__(self, request: BatchRequest, index: int) -> None:
        self.request, self.index = request, index
        self.vocab = request.model.vocab

    def p(self, context: Context) -> Sequence:
        return self.request.model.p(context)

    def q(self, context: Context) -> list:
        raw = list(self.request.model.q(context))
        sampling = self.request.sampling
        if sampling is None:
            top = raw.index(max(raw))
            return [int(i == top) for i in range(len(raw))]
        import torch

        logits = torch.tensor([float(x) for x in raw], dtype=torch.float64).log()
        row = sampling.probs(logits, ())
        if sampling.top_p < 1:
            self._check_cut(sampling, logits, row, context)
        return row.tolist()

    def _check_cut(self, sampling: Sampling, logits, row, context: Context) -> None:
        kept = row > 0
        for shifted in (max(sampling.top_p - CUT_MARGIN, sampling.top_p / 2), min(1.0, sampling.top_p + CUT_MARGIN)):
            moved = Sampling(sampling.temperature, sampling.top_k, shifted).probs(logits, ()) > 0
            if not (moved == kept).all():
                raise InvalidParameterError(f"request[{self.index}].top_p", f"{sampling.top_p:g} cuts the target's "
                                            f"row after {list(context)} within {CUT_MARGIN:g} of a cumulative mass, "
                                            "where float32 arithmetic may cut it otherwise: choose another top_p")
        before = Sampling(sampling.temperature, sampling.top_k).probs(logits, ()).tolist()
        cut = {before[i] for i in range(len(before)) if before[i] > 0 and not kept[i]}
        if any(before[i] in cut for i in range(len(before)) if kept[i]):
            raise InvalidParameterError(f"request[{self.index}].top_p", f"{sampling.top_p:g} separates two equal "
                                        f"probabilities of the target's row after {list(context)}, which a sort "
                                        "may order either way: choose another top_p or model")
