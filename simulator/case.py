"""``CASE.json``: one fixed draft tree with its rows, for ``specproof law`` (docs/certificates.md).

:func:`load_case` reads and validates a file (fields: :func:`parse_case`). A sampled draft never holds a token its
parent's draft row gives probability zero, so such a case is refused; ``"draft": "deterministic"`` declares
point-mass candidates, on which only the rules that never read ``p`` at a drafted token are defined.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .jsonfile import read_json
from .errors import InvalidParameterError, InvalidTreeError
from .models.draft_rows import DraftRows
from .numeric import Number, as_distribution, parse_probability
from .trees import DraftTree


@dataclass(frozen=True)
class Case:
    vocab: int
    tree: DraftTree
    p: tuple[tuple[Number, ...] | None, ...]
    q: tuple[tuple[Number, ...], ...]
    verifier: str
    draft: str = "sampled"
    #: a lossy-by-design rule's knob values (docs/lossy.md)
    verifier_kwargs: dict = field(default_factory=dict)

    @property
    def draft_models(self) -> int:
        """How many draft models the draft rows hold (``"drafts"`` in the file; 1 without)."""
        return next((len(row.models) for row in self.p if isinstance(row, DraftRows)), 1)


DRAFTS = ("sampled", "deterministic")


def _rows(data: dict, name: str, n: int, vocab: int, needed: list[bool], arithmetic: str) -> list:
    raw = data.get(name)
    if not isinstance(raw, dict):
        raise InvalidParameterError(name, "must be an object from node index to a row of probabilities")
    rows: list = [None] * n
    for key, row in raw.items():
        try:
            v = int(key)
        except ValueError:
            raise InvalidParameterError(f'{name}["{key}"]', "keys are node indices") from None
        if not 0 <= v < n:
            raise InvalidTreeError(f'{name}["{key}"]', f"no node {v} in a tree of {n} nodes")
        if not isinstance(row, list):
            raise InvalidParameterError(f'{name}["{key}"]', "must be a list of probabilities")
        field = f'{name}["{key}"]'
        values = [parse_probability(x, f"{field}[{i}]") for i, x in enumerate(row)]
        rows[v] = as_distribution(values, vocab, field, arithmetic)
    for v in range(n):
        if needed[v] and rows[v] is None:
            raise InvalidParameterError(f'{name}["{v}"]', "missing row for this node")
    return rows


def parse_case(data: object, arithmetic: str) -> Case:
    """A case from its JSON object. Fields: ``vocab``; ``parents`` (root first, ``-1``; BFS order); ``tokens``
    (``null`` for the root); ``p`` and ``q``, objects from node index (a string) to a row of probabilities (numbers,
    or exact ``"3/10"`` strings) — ``p`` for every non-leaf node, ``q`` for every node; ``verifier`` (a built-in
    name or ``module:function``); optionally ``verifier_kwargs``, a lossy-by-design rule's knob values (an object of
    NAME: VALUE, docs/lossy.md), and ``draft``: ``"sampled"`` (the default) or ``"deterministic"``
    (point-mass candidates such as ADED's, REST's, EAGLE's top-k, whose tokens need not be supported by ``p``;
    only the rules that never read ``p`` at a drafted token, such as ``tv-det`` and ``match``, are defined there).
    Several draft models (docs/models.md): ``drafts``, a list of two or more objects like ``p`` (draft model 0
    first), in place of ``p``; each inner node's draft row is then a :class:`~simulator.models.draft_rows.DraftRows`
    of theirs, and a sampled token needs some draft model's row to support it."""
    if not isinstance(data, dict):
        raise InvalidParameterError("case", "must be a JSON object")
    if "drafts" in data and "p" in data:
        raise InvalidParameterError("drafts", "give either p (one draft model) or drafts (several), not both")
    for key in ("vocab", "parents", "tokens", "drafts" if "drafts" in data else "p", "q", "verifier"):
        if key not in data:
            raise InvalidParameterError(key, "missing from the case")
    vocab = data["vocab"]
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        raise InvalidParameterError("vocab", f"must be an integer ≥ 1, got {vocab!r}")
    if not isinstance(data["parents"], list):
        raise InvalidTreeError("parents", "must be a list")
    if not isinstance(data["tokens"], list):
        raise InvalidTreeError("tokens", "must be a list")
    tree = DraftTree(data["parents"], data["tokens"], vocab)
    n = len(tree)
    p = _draft_rows(data, n, vocab, [bool(tree.children(v)) for v in range(n)], arithmetic)
    q = _rows(data, "q", n, vocab, [True] * n, arithmetic)
    if not isinstance(data["verifier"], str):
        raise InvalidParameterError("verifier", "must be a name or module:function")
    knobs = data.get("verifier_kwargs", {})
    if not isinstance(knobs, dict):
        raise InvalidParameterError("verifier_kwargs", "must be an object of NAME: VALUE")
    draft = data.get("draft", "sampled")
    if draft not in DRAFTS:
        raise InvalidParameterError("draft", f"must be one of {DRAFTS}, got {draft!r}")
    if draft == "sampled":
        for v in range(1, n):
            parent, token = tree.parents[v], tree.tokens[v]
            if all(row[token] == 0 for row in getattr(p[parent], "models", (p[parent],))):
                raise InvalidTreeError(f"tokens[{v}]", f"node {v} drafts token {token}, which p[\"{parent}\"] gives "
                                                       "probability 0: no sampled draft holds it (mark point-mass "
                                                       "candidates with \"draft\": \"deterministic\")")
    return Case(vocab, tree, tuple(p), tuple(q), data["verifier"], draft, knobs)


def _draft_rows(data: dict, n: int, vocab: int, needed: list[bool], arithmetic: str) -> list:
    """The draft row of each node: ``p``'s, or with ``drafts`` a :class:`DraftRows` of every draft model's."""
    if "drafts" not in data:
        return _rows(data, "p", n, vocab, needed, arithmetic)
    drafts = data["drafts"]
    if not isinstance(drafts, list) or len(drafts) < 2:
        raise InvalidParameterError("drafts", "must list two or more objects like p, draft model 0 first (one draft "
                                              "model: give p)")
    tables = [_rows({f"drafts[{i}]": raw}, f"drafts[{i}]", n, vocab, needed, arithmetic)
              for i, raw in enumerate(drafts)]
    return [DraftRows([t[v] for t in tables]) if all(t[v] is not None for t in tables) else None for v in range(n)]


def load_case(path: str | Path, arithmetic: str) -> Case:
    return parse_case(read_json(path, "case"), arithmetic)
