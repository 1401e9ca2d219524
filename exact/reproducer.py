"""Reproducer files (docs/gate.md, "Reproducers and shrinking"): a model pair as a table, a tree shape, a drafting
scheme and the subject (:class:`Reproducer`), which ``specproof certify --case FILE`` certifies again."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Sequence

from simulator.drafting.drafter_registry import DRAFTERS, DrafterOptions, make_drafter
from simulator.drafting import Drafter, FixedShape
from simulator.drafting.dyspec import DySpecBudget, DySpecThreshold
from simulator.errors import InvalidParameterError, SpecproofError
from simulator.jsonfile import read_json, write_json
from simulator.models import Context, ModelPair, TableModel
from simulator.numeric import Number, check_arithmetic, is_rational, to_json_number
from simulator.trees import check_parents, make_topology

from .certificate import Certificate, certify
from .subject import Subject, subject

Rows = dict[Context, tuple[Number, ...]]


class RecordingModel:
    """A model pair that remembers every context whose rows were read (a reproducer keeps exactly those); with
    several draft models, every draft model's rows (``drafts_read``: models ``1..k−1``)."""

    def __init__(self, model: ModelPair) -> None:
        self.model, self.vocab = model, model.vocab
        self.draft_models: int = getattr(model, "draft_models", 1)
        self.read: dict[str, dict[Context, Sequence[Number]]] = {"p": {}, "q": {}}
        self.drafts_read: list[dict[Context, Sequence[Number]]] = [{} for _ in range(self.draft_models - 1)]

    def tables(self) -> tuple[Rows, Rows, tuple[Rows, ...]]:
        """The rows read: ``p``, ``q`` and draft models ``1..k−1``, by context."""
        rows = lambda read: {ctx: tuple(row) for ctx, row in read.items()}  # noqa: E731
        return rows(self.read["p"]), rows(self.read["q"]), tuple(rows(read) for read in self.drafts_read)

    def draft_rows(self, context: Context) -> list[Sequence[Number]]:
        rows = self.model.draft_rows(context)  # type: ignore[attr-defined]
        for read, row in zip([self.read["p"], *self.drafts_read], rows):
            read[tuple(context)] = row
        return rows

    def _row(self, name: str, context: Context):
        row = getattr(self.model, name)(context)
        self.read[name][tuple(context)] = row
        return row

    def p(self, context: Context):
        return self._row("p", context)

    def q(self, context: Context):
        return self._row("q", context)


@dataclass(frozen=True)
class Reproducer:
    """A model table, a drafting configuration and a subject description. As JSON::

        {"specproof": "reproducer", "vocab": 2,
         "p": {"": ["1/2", "1/2"]}, "q": {"": ["1", "0"], "0": ["1/2", "1/2"], "1": ["0", "1"]},
         "parents": [-1, 0], "drafting": "iid",
         "subject": {"verifier": "bug-residual-q"}, "arithmetic": "fraction"}

    ``p``/``q`` hold the rows of every context the certification reads (keys as in ``--table``: ``""`` the round's
    empty prefix, ``"0,1"`` a context); several draft models: ``"drafts"``, every draft model's rows (``p`` first),
    in place of ``"p"``, as a table's JSON has them; ``parents`` is the fixed shape (absent for DySpec's dynamic trees, which
    take ``options``: ``budget``, or ``threshold`` and ``max_depth``). ``found`` (informative) records the TVD and
    size.

    A loss is a property of the output law over every draft tree the drafter can produce, so a reproducer keeps the
    drafting, not one fixed tree: certifying it enumerates them again.
    """

    vocab: int
    p: Rows
    q: Rows
    drafting: str
    subject: dict
    parents: tuple[int, ...] | None = None  # fixed shapes
    options: dict = field(default_factory=dict)  # DySpec: budget, threshold, max_depth
    arithmetic: str = "fraction"
    drafts: tuple[Rows, ...] = ()  # several draft models: the rows of models 1..k−1 (``p`` is model 0's)

    def model(self) -> TableModel:
        return TableModel(self.vocab, self.p, self.q, self.drafts)

    def drafter(self) -> Drafter:
        if self.parents is not None:
            return FixedShape(make_topology("explicit", parents=self.parents), self.drafting)
        return make_drafter(self.drafting, options=DrafterOptions(**self.options))

    def certify(self, verifier: Subject | None = None) -> Certificate:
        """Certify the subject (or ``verifier`` in its place: a fix checked on the same case)."""
        checked = verifier or subject(self.subject, "case.subject")
        return certify(self.model(), self.drafter(), checked.fn, self.arithmetic,
                       config={"model": "table (reproducer)", "vocab": self.vocab, **self.shape_json()})

    @property
    def nodes(self) -> int:
        """Draft nodes of the fixed shape (DySpec: its budget)."""
        return len(self.parents) - 1 if self.parents is not None else int(self.options.get("budget", 0))

    def size(self) -> tuple:
        """The shrinker's order: fewest nodes, then vocabulary, depth, branching, then the simplest rows (most
        zeros, then smallest denominators)."""
        rows = [*self.p.values(), *self.q.values(), *(row for table in self.drafts for row in table.values())]
        nonzero = sum(1 for row in rows for v in row if v != 0)
        denominators = sum(Fraction(v).denominator for row in rows for v in row)
        return (self.nodes, self.vocab, self.depth, self.branching, nonzero, denominators)

    @property
    def depth(self) -> int:
        if self.parents is None:
            return int(self.options.get("max_depth", self.options.get("budget", 0)))
        return make_topology("explicit", parents=self.parents).height

    @property
    def branching(self) -> int:
        if self.parents is None:
            return 0
        return max([self.parents[1:].count(v) for v in range(len(self.parents))], default=0)

    def shape_json(self) -> dict:
        return ({"parents": list(self.parents), "drafting": self.drafting} if self.parents is not None
                else {"drafting": self.drafting, **self.options})

    def to_json(self, cert: Certificate | None = None) -> dict:
        num = lambda v: to_json_number(v, "fraction" if is_rational(v) else "float")  # noqa: E731
        json_rows = lambda table: {",".join(map(str, ctx)): [num(v) for v in row]  # noqa: E731
                                   for ctx, row in sorted(table.items())}
        drafts = {"drafts": [json_rows(t) for t in (self.p, *self.drafts)]} if self.drafts else {"p": json_rows(self.p)}
        rows = {**drafts, "q": json_rows(self.q)}
        out = {"specproof": "reproducer", "vocab": self.vocab, **rows, **self.shape_json(), "subject": self.subject,
               "arithmetic": self.arithmetic,
               "size": {"nodes": self.nodes, "vocab": self.vocab, "depth": self.depth, "branching": self.branching}}
        if cert is not None:
            out["found"] = {"lossless": cert.lossless, "tvd": cert.to_json()["tvd"],
                            "off_support": cert.to_json()["off_support"]}
        return out

    def write(self, path: str | Path, cert: Certificate | None = None) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, self.to_json(cert), "case_out")
        return path


def capture(model: ModelPair, drafter: Drafter, what: Subject, arithmetic: str) -> Reproducer:
    """The reproducer of one instance: the subject certified once on a recording model, and the rows it read.

    Parameters
    ----------
    model : ModelPair
        The model pair certified.
    drafter : Drafter
        A fixed shape or DySpec's drafter (ADED's table depends on its history: refused).
    what : Subject
        The verifier, plugin or kernel (:func:`exact.subject.subject`).
    arithmetic : {"fraction", "float"}
        The certification's arithmetic, recorded in the case.

    Returns
    -------
    Reproducer
        A table model of the rows read, the shape and scheme, and the subject: ``specproof certify --case`` certifies
        it again.

    Raises
    ------
    InvalidParameterError
        A drafter a reproducer cannot hold.
    SpecproofError
        Whatever :func:`exact.certificate.certify` raises on the instance.
    """
    recording = RecordingModel(model)
    certify(recording, drafter, what.fn, arithmetic)
    return _recorded(recording, drafter, what, arithmetic)


def _recorded(recording: RecordingModel, drafter: Drafter, what: Subject, arithmetic: str) -> Reproducer:
    p, q, drafts = recording.tables()
    parents, options = _shape(drafter)
    return Reproducer(recording.vocab, p, q, drafter.scheme, what.description, parents, options, arithmetic, drafts)


def failing_case(model: ModelPair, drafter: Drafter, what: Subject, arithmetic: str) -> Reproducer | None:
    """The reproducer of a certification that fails inside the subject (an error raised on a branch, by a torch kernel
    say): the rows read up to the failure, which an enumeration of the case reads again in the same order and so
    reaches the same branch.

    Parameters
    ----------
    model, drafter, what, arithmetic
        As :func:`capture`'s.

    Returns
    -------
    Reproducer or None
        The case, or ``None`` when the certification finishes, or fails somewhere no branch locates.
    """
    recording = RecordingModel(model)
    try:
        certify(recording, drafter, what.fn, arithmetic)
    except SpecproofError as err:
        if not hasattr(err, "branch"):
            return None
        return _recorded(recording, drafter, what, arithmetic)
    return None


def pruned(case: Reproducer) -> Reproducer:
    """``case`` keeping only the rows its certification reads.

    Parameters
    ----------
    case : Reproducer
        A reproducer, as read by :func:`load_reproducer`.

    Returns
    -------
    Reproducer
        The same case over the rows its subject reads.

    Raises
    ------
    SpecproofError
        Whatever certifying the case raises.
    """
    return capture(case.model(), case.drafter(), subject(case.subject, "case.subject"), case.arithmetic)


def _shape(drafter: Drafter) -> tuple[tuple[int, ...] | None, dict]:
    if isinstance(drafter, FixedShape):
        return drafter.topology.parents, {}
    if isinstance(drafter, DySpecBudget):
        return None, {"budget": drafter.budget}
    if isinstance(drafter, DySpecThreshold):
        return None, {"threshold": drafter.threshold, "max_depth": drafter.max_depth}
    raise InvalidParameterError("drafting", f"a reproducer of {drafter.scheme!r} drafts is not supported (fixed "
                                            "shapes and DySpec's trees are; ADED's table depends on its history)")


def parse_reproducer(data: object, source: str = "case") -> Reproducer:
    """A reproducer from its JSON object (docs/gate.md, "Reproducers and shrinking").

    Parameters
    ----------
    data : object
        The parsed JSON: ``vocab``, ``p``, ``q`` (rows by context; or ``drafts``, every draft model's), ``drafting``, ``subject``, and ``parents`` for a
        fixed shape (or DySpec's ``budget``, ``threshold``, ``max_depth``); ``arithmetic`` optional.
    source : str
        The field errors are named after (``case``).

    Returns
    -------
    Reproducer
        The case, ready to certify.

    Raises
    ------
    InvalidParameterError
        Anything missing or malformed, naming the field (``case.parents[2]``, ``case.drafting``).
    InvalidDistributionError, InvalidTreeError
        A row that is not a probability vector; a parent list that is not a BFS-ordered tree.
    """
    if not isinstance(data, dict):
        raise InvalidParameterError(source, "must be a JSON object (a reproducer)")
    for key in ("drafting", "subject"):
        if key not in data:
            raise InvalidParameterError(f"{source}.{key}", "missing from the reproducer")
    table = TableModel.from_json({k: data[k] for k in ("vocab", "p", "q", "drafts") if k in data}, source)
    drafting = data["drafting"]
    if drafting not in DRAFTERS:
        raise InvalidParameterError(f"{source}.drafting", f"unknown drafting scheme {drafting!r}")
    parents = None
    options: dict = {}
    if "parents" in data:
        if not isinstance(data["parents"], list):
            raise InvalidParameterError(f"{source}.parents", "must be a list")
        parents = check_parents(data["parents"], f"{source}.parents")
    elif drafting in ("dyspec", "dyspec-threshold"):
        options = {k: data[k] for k in ("budget", "threshold", "max_depth") if k in data}
    else:
        raise InvalidParameterError(f"{source}.parents", f"missing: {drafting!r} drafting needs a fixed shape")
    if not isinstance(data["subject"], dict):
        raise InvalidParameterError(f"{source}.subject", 'must be an object such as {"verifier": "tv-sps"}')
    arithmetic = check_arithmetic(data.get("arithmetic", "fraction"), f"{source}.arithmetic")
    drafts = tuple(table.rows(f"drafts[{i}]") for i in range(1, table.draft_models))
    return Reproducer(table.vocab, table.rows("p"), table.rows("q"), drafting, data["subject"], parents, options,
                      arithmetic, drafts)


def load_reproducer(path: str | Path) -> Reproducer:
    """A reproducer file (``CASE.json``), read and parsed.

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    Reproducer
        As :func:`parse_reproducer` returns it.

    Raises
    ------
    InvalidParameterError
        The file is unreadable or not JSON, or a field is malformed (each names the field).
    """
    return parse_reproducer(read_json(path, "case"), "case")

