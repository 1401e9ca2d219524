"""Batched Monte Carlo rounds (docs/engines.md, "Batched rounds"): many trials of one configuration at once,
decided by the rule's array rule (:mod:`simulator.verifiers.batched`), each returning exactly what the reference
path returns for the same trial."""

from __future__ import annotations

from typing import Any

import numpy as np
from array_api_compat import array_namespace, to_device

from simulator.montecarlo.context_rows import ContextRows, DeviceRows
from simulator.errors import InvalidParameterError
from simulator.models import ModelPair
from simulator.trees import Topology, node_levels
from simulator.verifiers import VERIFIERS
from simulator.verifiers.batched.frame import Batch, CounterStream, TreeShape

#: the verifiers the batched rounds can run: an array rule, and later tokens that follow the target
BATCHED = tuple(name for name, spec in VERIFIERS.items()
                if spec.array_rule is not None and spec.array_rule.target_completion)


def has_batched_path(name: str, drafting: str, vocab: int, topology: Topology | None = None) -> bool:
    """Whether :func:`batched_rounds` runs ``name``: an array rule in the registry, i.i.d. drafting, a topology the rule
    is defined on."""
    spec = VERIFIERS.get(name)
    return (name in BATCHED and drafting == "iid" and vocab >= 2
            and (topology is None or topology.name in spec.shapes))


def path_nodes(name: str, topology: Topology) -> int | None:
    """The most nodes ``name``'s array rule reads in one trial where it reads only each trial's path
    (:meth:`~simulator.verifiers.batched.ref.ArrayRuleRef.path_nodes`), else ``None``: the engine's chunks are sized
    by it."""
    return VERIFIERS[name].array_rule.path_nodes(topology.parents)


class IidDraft:
    """Every trial's i.i.d. draft (``simulator.drafting`` order: node ``v`` reads its trial's uniform ``v − 1``),
    each token drawn when an array rule first reads it (:class:`~simulator.verifiers.batched.frame.DraftSource`).

    The counter streams make this exact: a node's uniform is a function of its position, so a token drawn late,
    or never, changes no other draw, and the array rule's own draws start past the draft's ``n − 1`` uniforms as
    before. Token verification reads only the candidates of the nodes on its path (at most 8 of complete(b = 2,
    H = 4)'s 30 draft tokens; with SpS, RRS and K-SEQ a candidate only once those before it were rejected), and
    the rest of the tree is never drawn. An array rule that reads every node
    (:attr:`tokens`, :attr:`ids`) has the whole tree drawn a depth at a time, one draw for all the depth's nodes
    of all trials. Row ids are context ids (:class:`~simulator.montecarlo.context_rows.ContextRows`): the child
    of id ``i`` by token ``x`` is ``i·V + x + 1``. Arrays are node-major (``[n, B]``: a depth's parents are whole
    rows), handed over as transposed views."""

    def __init__(self, parents: tuple[int, ...], rows: ContextRows | DeviceRows, stream: CounterStream) -> None:
        xp = self.xp = array_namespace(stream.pos)
        self.parents, self.rows, self.stream = parents, rows, stream
        self.size, n = stream.pos.shape[0], len(parents)
        self.start = stream.skip(n - 1)  # node v's uniform is at start + v − 1
        # the same start for every tree (a fresh stream): a number, not a gather per read
        self._start = int(self.start[0]) if self.size and bool(xp.all(self.start == self.start[0])) else None
        on = stream.pos.device
        self.parent = xp.asarray([max(0, u) for u in parents], dtype=xp.int64, device=on)
        # A node's id is written when it is drawn, before it is read: only the root's (context 0) is set here.
        self._flat_ids = xp.empty(n * self.size, dtype=xp.int64, device=on)
        self._flat_ids[: self.size] = 0
        self._ids = xp.reshape(self._flat_ids, (n, self.size))  # a view: 1-D gathers (a third of 2-D's time) read it
        self._tokens = None  # every node's token [n, B], once every node is drawn (:meth:`_draw_all`)

    def node_ids(self, trees: Any, nodes: Any) -> Any:
        return self.xp.take(self._flat_ids, nodes * self.size + trees)

    def read(self, trees: Any, nodes: Any, parent_ids: Any = None) -> Any:
        xp = self.xp
        if parent_ids is None:
            parent_ids = xp.take(self._flat_ids, xp.take(self.parent, nodes) * self.size + trees)
        at = nodes - 1 + (self._start if self._start is not None else xp.take(self.start, trees))
        drawn = self.rows.sample("p", parent_ids, self.stream.at(trees, at))
        self._flat_ids[nodes * self.size + trees] = parent_ids * self.rows.vocab + drawn + 1  # tokens: _draw_all
        return drawn

    def children(self, trees: Any, kids: Any) -> Any:
        xp = self.xp
        row, col = xp.nonzero(kids >= 0)
        out = xp.zeros(kids.shape, dtype=xp.int64, device=self.stream.pos.device)
        out[row, col] = self.read(trees[row], kids[row, col])
        return out

    @property
    def tokens(self) -> Any:
        self._draw_all()
        return self._tokens.T

    @property
    def ids(self) -> Any:
        self._draw_all()
        return self._ids.T

    def _draw_all(self) -> None:
        """Draws every node, a depth at a time (once; a node drawn before is drawn again, to the same token)."""
        if self._tokens is not None:
            return
        xp, on, everyone = self.xp, self.stream.pos.device, slice(None)
        self._tokens = xp.zeros((len(self.parents), self.size), dtype=xp.int64, device=on)
        for level in node_levels(self.parents)[1:]:
            start, end = level[0], level[-1] + 1  # BFS: a depth is a run of node ids
            steps = xp.arange(start - 1, end - 1, dtype=xp.int64, device=on)
            uniforms = self.stream.at(everyone, self.start[None, :] + steps[:, None])  # [L, B]
            above = self._ids[self.parent[start:end]]  # [L, B]
            drawn = self.rows.sample("p", xp.reshape(above, (-1,)), xp.reshape(uniforms, (-1,)))
            self._tokens[start:end] = xp.reshape(drawn, above.shape)
            self._ids[start:end] = above * self.rows.vocab + self._tokens[start:end] + 1


def batched_rounds(model: ModelPair, topology: Topology, drafting: str, name: str, seed: int,
                   trials: np.ndarray, rows: ContextRows | DeviceRows | None = None,
                   run_trials: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Accepted lengths and completed-sequence codes (as :func:`simulator.montecarlo.engine.encode`) of ``trials``, as
    numpy arrays. With ``rows`` a :class:`~simulator.montecarlo.context_rows.DeviceRows` the rounds run on its torch
    device (the same array rule, the same counter streams: the same numbers in float64). ``run_trials``: the trials per
    seed of the run these belong to (:attr:`~simulator.verifiers.batched.frame.Batch.trials`).

    Each trial reads its counter stream (:func:`simulator.randomness.counter_uniform`) in the reference's order
    (i.i.d. draft in BFS order, the rule's draws, the completion), so it returns what
    :func:`simulator.montecarlo.engine.run_trials` returns on the reference path (tested for every array rule and
    topology); LV's closed-form flow and GR's stacked solves agree with the reference to rounding.
    """
    if not has_batched_path(name, drafting, model.vocab, topology):
        raise InvalidParameterError("verifier", f"no batched path for {name} with {drafting} drafting")
    rows = rows or ContextRows(model, topology.height)
    vocab, height = model.vocab, topology.height
    xp = array_namespace(rows.q)
    trials = xp.asarray(np.asarray(trials, dtype=np.int64), device=rows.q.device)
    stream = CounterStream(seed, trials)
    draft = IidDraft(topology.parents, rows, stream)
    shape = TreeShape(topology.parents, xp, rows.q.device)
    node, y = VERIFIERS[name].array_rule.run(Batch(shape, draft, rows, stream, run_trials))
    accepted_len = shape.depths[node]
    # Completion with the target up to H+1 tokens, from the id of path + (y,), of length τ+1.
    ids = draft.node_ids(xp.arange(node.shape[0], device=rows.q.device), node) * vocab + y + 1
    length = accepted_len + 1
    for _ in range(height):
        grow = xp.nonzero(length < height + 1)[0]
        if grow.shape[0] == 0:
            break
        x = rows.sample("q", ids[grow], stream.take(grow))
        ids[grow] = ids[grow] * vocab + x + 1
        length[grow] += 1
    return (np.asarray(to_device(accepted_len, "cpu")), np.asarray(to_device(ids - rows.offsets[height + 1], "cpu")))
