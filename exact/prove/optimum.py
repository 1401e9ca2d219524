"""The exact ceiling of one instance (:func:`optimum`; docs/optimum.md): the largest ``E[τ]`` any lossless verifier
could reach, an LP solved by HiGHS and settled in exact rationals, and the optimal verifier as a runnable module
(:func:`verifier_module`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Sequence

from simulator.drafting import DRAFTING, Drafter
from simulator.errors import InvalidParameterError
from simulator.models import ModelPair, ModelView
from simulator.numeric import rational
from simulator.verifiers import VERIFIERS

from ..enumeration import enumerate_outcomes

#: The most LP columns :func:`optimum` builds (the estimate ``V^(nodes−1) · nodes · V``, before merging).
MAX_COLUMNS = 250_000
#: A float value above this is in the primal support.
SUPPORT_TOLERANCE = 1e-11
#: A column whose float reduced cost is within this of 0 is tight (in the dual system).
TIGHT_TOLERANCE = 1e-9
#: HiGHS's methods and tolerances. Interior point with crossover to a vertex is about twice as fast as the dual
#: simplex on trees, whose LPs have few rows per column (complete b=2, H=2, synthetic V = 5: 2,525 rows, 74,625
#: columns, 2.2 s against 5.2 s); the dual simplex about twice as fast on chains, which have many (chain depth 4,
#: synthetic V = 5: 3,750 rows, 15,625 columns, 4.6 s against 11.5 s). Above this share of rows per column the
#: dual simplex runs. At HiGHS's default tolerance 1e-7 a basic variable of -1e-14 is left out of the support and
#: the support's exact system is inconsistent (tapered b=3, H=2, V=3); at 1e-10 it is not.
SIMPLEX_ROW_SHARE = 0.1
HIGHS_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}
#: Denominators allowed when a free variable of an exact system takes its float value.
HINT_DENOMINATOR = 10**12

Output = tuple[int, ...]


@dataclass
class Column:
    """One LP variable: drafted tree ``tree`` (index), its node ``node`` (the first with this path), token ``y``."""

    tree: int
    node: int
    y: int
    output: Output
    depth: int


@dataclass
class LP:
    """``max c·x`` subject to ``A x = b``, ``x ≥ 0``; ``A`` by column (row index → coefficient), exact."""

    columns: list[Column]
    entries: list[dict[int, object]]
    b: list
    c: list
    trees: list  # (DraftTree, P(T))
    height: int
    vocab: int

    @property
    def rows(self) -> int:
        return len(self.b)


@dataclass
class Optimum:
    """The settled optimum: ``E[τ]*`` exact, whether the primal point and the dual certificate checked exactly."""

    optimum: Fraction
    float_optimum: float
    primal_checked: bool
    dual_checked: bool
    #: ``b^T y = c^T x`` exactly: with both checks, ``optimum`` is the exact maximum
    closed: bool
    columns: int
    rows: int
    trees: int
    seconds: float
    timings: dict = field(default_factory=dict)
    #: the exact primal point: column index → value (positive entries only)
    primal: dict = field(default_factory=dict, repr=False)
    #: the exact dual: one value per row (the blocks of trees first, then the classes of sequences of Σ^(H+1))
    dual: list = field(default_factory=list, repr=False)
    lp: LP | None = field(default=None, repr=False)

    @property
    def proved(self) -> bool:
        return self.primal_checked and self.dual_checked and self.closed

    def to_json(self) -> dict:
        return {"optimum": str(self.optimum), "optimum_float": float(self.optimum),
                "highs_optimum": self.float_optimum, "primal_checked": self.primal_checked,
                "dual_checked": self.dual_checked, "closed": self.closed, "columns": self.columns, "rows": self.rows,
                "trees": self.trees, "seconds": round(self.seconds, 3),
                "timings": {k: round(v, 3) for k, v in self.timings.items()}}


def column_estimate(nodes: int, vocab: int) -> int:
    """``V^(nodes−1) · nodes · V``: at most that many drafted trees times their columns."""
    return vocab ** (nodes - 1) * nodes * vocab


def check_size(drafter: Drafter, vocab: int, max_columns: int = MAX_COLUMNS) -> int:
    """Refuse a drafter the LP does not take (not a fixed shape) or a shape whose column estimate is over
    ``max_columns``, naming ``vocab`` where the tree fits at a smaller vocabulary, else the tree (``depth``, or
    ``parents`` for an explicit one); return the estimate."""
    scheme = getattr(drafter, "scheme", None)
    topology = getattr(drafter, "topology", None)
    if scheme not in DRAFTING or topology is None:
        raise InvalidParameterError("drafting", f"the optimum takes fixed-shape schemes only ({', '.join(DRAFTING)}), "
                                                f"got {scheme!r}")
    nodes = len(topology.parents)
    estimate = column_estimate(nodes, vocab)
    if estimate <= max_columns:
        return estimate
    size = (f"the LP would have about {estimate:,} columns (V^(nodes−1)·nodes·V with {nodes} nodes, V = {vocab}), "
            f"over the limit of {max_columns:,}")
    if column_estimate(nodes, 2) <= max_columns:  # the vocabulary is what makes it too big
        low, high = 2, vocab  # the largest V that fits: fits at low, not at high
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if column_estimate(nodes, mid) <= max_columns else (low, mid)
        raise InvalidParameterError("vocab", f"{size}: reduce --vocab (this tree fits up to V = {low}), or "
                                             "--depth or --branching")
    field = "parents" if getattr(topology, "name", "") == "explicit" else "depth"
    raise InvalidParameterError(field, f"{size}; this tree is over it at any vocabulary (V = 2: "
                                       f"{column_estimate(nodes, 2):,}): reduce " +
                                ("the tree (--parents)" if field == "parents" else "--depth or --branching"))


def paths_key(tree) -> tuple:
    """What the LP sees of a drafted tree: the set of its nodes' root paths, sorted. Two trees with the same set
    (siblings in another order, a duplicate sibling more or less) have the same columns, so they share one block
    with their probabilities added: a solution splits back in proportion, so the optimum is the same."""
    return tuple(sorted({tree.path(v) for v in range(len(tree.parents))}))


def drafted_trees(view: ModelView, drafter: Drafter, merge: bool = True) -> list:
    """Every drafted tree with its exact probability; trees with the same :func:`paths_key` merged (``merge``),
    else only identical ones (parents and tokens)."""
    merged: dict[tuple, list] = {}
    for draft, prob in enumerate_outcomes(lambda rng: drafter.draft(view, rng), True):
        tree = draft.tree
        key = paths_key(tree) if merge else (tuple(tree.parents), tuple(tree.tokens))
        if key in merged:
            merged[key][1] += prob
        else:
            merged[key] = [tree, prob]
    return [(tree, prob) for tree, prob in merged.values() if prob > 0]


def _completions(view: ModelView, height: int):
    """``completion(o)``: the target's law of ``s ∈ Σ^(H+1)`` given the output ``o`` (``s`` as its index in
    lexicographic order → ``q(s[|o|:] | o)``), cached."""
    vocab = view.vocab
    cache: dict[Output, dict[int, object]] = {}

    def index_base(o: Output) -> int:
        base = 0
        for tok in o:
            base = base * vocab + tok
        return base * vocab ** (height + 1 - len(o))

    def completion(o: Output) -> dict[int, object]:
        got = cache.get(o)
        if got is not None:
            return got
        if len(o) == height + 1:
            got = {index_base(o): rational(1)}
        else:
            got = {}
            for x, px in enumerate(view.q(o)):
                if px > 0:
                    for s, ps in completion(o + (x,)).items():
                        got[s] = px * ps
        cache[o] = got
        return got

    return completion


def build_lp(model: ModelPair, drafter: Drafter, context: Sequence[int] = (), merge: bool = True) -> LP:
    """The LP of one instance, exact (module docstring); ``merge``: one block per :func:`paths_key` and one row per
    class of sequences (:func:`_sequence_classes`), both keeping the feasible set of the output law.

    Variables ``π(T, v, y) ≥ 0``, one per drafted tree ``T`` (probability ``P(T)``), accepted node ``v`` and next token
    ``y``, whose output is ``o = path(v) + (y,)``; rows ``Σ_{v,y} π(T, v, y) = P(T)`` for every drafted tree, and
    ``Σ_{(T,v,y): o ⊑ s} π(T, v, y) · q(s[|o|:] | o) = q(s)`` for every ``s ∈ Σ^(H+1)`` (the output completed by the
    target reproduces the target); objective ``Σ π · depth(v)``. Columns that give the same output in the same tree
    (siblings drafted with the same token) enter every row alike with the same depth, so they are one column; trees
    with the same root paths (siblings in another order under i.i.d. drafting, a duplicate sibling more or less) have
    the same columns and share one block, their probabilities added, a solution splitting back in proportion. Both
    merges keep the optimum.
    """
    view = ModelView(model, "fraction", tuple(context))
    height = drafter.height
    vocab = view.vocab
    trees = drafted_trees(view, drafter, merge)
    completion = _completions(view, height)
    n_trees = len(trees)
    columns: list[Column] = []
    entries: list[dict[int, object]] = []
    for t, (tree, _) in enumerate(trees):
        seen: set[Output] = set()
        for v in range(len(tree)):
            path = tree.path(v)
            if path in seen:
                continue
            seen.add(path)
            for y in range(vocab):
                o = path + (y,)
                col = {t: rational(1)}
                for s, coef in completion(o).items():
                    col[n_trees + s] = coef
                columns.append(Column(t, v, y, o, len(path)))
                entries.append(col)
    target = completion(())
    sequences = vocab ** (height + 1)
    row_of = _sequence_classes(columns, target, vocab, height) if merge else list(range(sequences))
    n_rows = max(row_of) + 1
    b = [prob for _, prob in trees] + [rational(0)] * n_rows
    for s_index, prob in target.items():
        b[n_trees + row_of[s_index]] += prob
    if merge:
        for col in entries:
            merged: dict[int, object] = {}
            for i, a in col.items():
                key = i if i < n_trees else n_trees + row_of[i - n_trees]
                merged[key] = merged.get(key, 0) + a
            col.clear()
            col.update(merged)
    c = [rational(col.depth) for col in columns]
    return LP(columns, entries, b, c, trees, height, vocab)


def _sequence_classes(columns: list[Column], target: dict[int, object], vocab: int, height: int) -> list[int]:
    """One row per class of sequences: ``s`` and ``s'`` share a class when the outputs that are prefixes of them
    are the same (``s`` and ``s'`` agree up to the longest prefix that is an output) and both or neither have
    target probability 0. Where ``q(s) > 0`` the row of ``s`` is ``q(s)`` times ``Σ_{o ⊑ s} L(o) / q(o) = 1``, the
    same equation across the class, so their sum is equivalent to each; where ``q(s) = 0`` each row has
    non-negative coefficients and right side 0, so their sum being 0 forces each to be. Returns the class of each
    sequence index."""
    outputs = {col.output for col in columns}
    classes: dict[tuple, int] = {}
    row_of = []
    for s_index in range(vocab ** (height + 1)):
        digits, rest = [], s_index
        for _ in range(height + 1):
            rest, d = divmod(rest, vocab)
            digits.append(d)
        seq = tuple(reversed(digits))
        longest = max((k for k in range(1, height + 2) if seq[:k] in outputs), default=0)
        key = (seq[:longest], s_index in target)
        row_of.append(classes.setdefault(key, len(classes)))
    return row_of


# ---- exact sparse linear algebra -------------------------------------------------------------------------------
def solve_sparse(equations: list[tuple[dict[int, object], object]], hint: dict[int, object],
                 optional: Sequence[tuple[dict[int, object], object]] = (),
                 variables: int | None = None) -> dict[int, object] | None:
    """A solution of the equations (each ``({variable: coefficient}, rhs)``), exact, or ``None`` if they are
    inconsistent. Gaussian elimination with a sparsest-row, rarest-column pivot; then the ``optional`` equations in
    their order, each reduced against the pivots so far and kept where it adds a pivot (one that is inconsistent
    with them is dropped), until ``variables`` variables have a pivot; a variable no pivot determines takes its
    ``hint`` value (0 if none)."""
    eqs = [dict(e) for e, _ in equations]
    rhs = [r for _, r in equations]
    occurs: dict[int, set[int]] = {}
    for i, e in enumerate(eqs):
        for j in e:
            occurs.setdefault(j, set()).add(i)
    active = set(range(len(eqs)))
    order: list[tuple[int, int]] = []  # (equation, pivot variable)
    zero = rational(0)
    while active:
        i = min(active, key=lambda k: len(eqs[k]))
        active.discard(i)
        e = eqs[i]
        if not e:
            if rhs[i] != 0:
                return None
            continue
        j = min(e, key=lambda k: len(occurs[k]))
        pivot = e[j]
        for k in list(occurs[j]):
            if k == i or k not in active:
                continue
            other = eqs[k]
            factor = other[j] / pivot
            for jj, a in e.items():
                value = other.get(jj, zero) - factor * a
                if value == 0:
                    if jj in other:
                        del other[jj]
                        occurs[jj].discard(k)
                else:
                    if jj not in other:
                        occurs.setdefault(jj, set()).add(k)
                    other[jj] = value
            rhs[k] = rhs[k] - factor * rhs[i]
        for jj in e:
            occurs[jj].discard(i)
        order.append((i, j))
    if optional:
        _extend_lazily(eqs, rhs, order, optional, variables)
    values: dict[int, object] = {}
    pivots = {j for _, j in order}
    for i, j in reversed(order):
        e = eqs[i]
        acc = rhs[i]
        for jj, a in e.items():
            if jj == j:
                continue
            if jj not in values:
                values[jj] = hint.get(jj, zero) if jj not in pivots else zero
            acc = acc - a * values[jj]
        values[j] = acc / e[j]
    return values


def _extend_lazily(eqs: list, rhs: list, order: list, optional, variables: int | None) -> None:
    """:func:`solve_sparse`'s optional equations: each reduced against the recorded pivots (earliest first; a
    recorded equation holds no earlier pivot, so a heap of recorded indices suffices), recorded with a pivot of its
    own where something is left. Stops once ``variables`` pivots exist."""
    import heapq

    zero = rational(0)
    position = {j: k for k, (_, j) in enumerate(order)}
    for e_in, r_in in optional:
        if variables is not None and len(position) >= variables:
            return
        e, r = dict(e_in), r_in
        heap = [position[j] for j in e if j in position]
        heapq.heapify(heap)
        while heap:
            k = heapq.heappop(heap)
            i, j = order[k]
            if j not in e:
                continue
            factor = e[j] / eqs[i][j]
            for jj, a in eqs[i].items():
                value = e.get(jj, zero) - factor * a
                if value == 0:
                    e.pop(jj, None)
                else:
                    if jj not in e and jj in position:
                        heapq.heappush(heap, position[jj])
                    e[jj] = value
            r = r - factor * rhs[i]
        if not e:
            continue  # implied by the pivots, or inconsistent with them: either way it adds nothing
        j = min(e, key=lambda jj: (len(str(e[jj])), jj))
        eqs.append(e)
        rhs.append(r)
        order.append((len(eqs) - 1, j))
        position[j] = len(order) - 1


def _rationalised(value: float):
    return rational(Fraction(value).limit_denominator(HINT_DENOMINATOR))


# ---- the LP, solved and settled ---------------------------------------------------------------------------------
def _float_solve(lp: LP, generate: bool = False):
    """HiGHS on the LP: ``(value, x, y)`` in floats. ``generate``: column generation from the dual, starting from
    the root's columns (answering from the target at once is feasible for every tree) and adding every column of
    positive reduced cost ``c_j − A_j^T y`` until none is left; the exact settling then checks the whole LP."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import csc_matrix

    data, rows, cols = [], [], []
    for j, col in enumerate(lp.entries):
        for i, a in col.items():
            rows.append(i)
            cols.append(j)
            data.append(float(a))
    A = csc_matrix((data, (rows, cols)), shape=(lp.rows, len(lp.columns)))
    b = np.array([float(v) for v in lp.b])
    c = np.array([float(v) for v in lp.c])
    active = np.flatnonzero(c == 0) if generate else np.arange(len(c))
    method = "highs-ds" if lp.rows > SIMPLEX_ROW_SHARE * len(lp.columns) else "highs-ipm"
    while True:
        res = linprog(-c[active], A_eq=A[:, active], b_eq=b, bounds=(0, None), method=method,
                      options=HIGHS_OPTIONS)
        if res.status != 0:
            raise RuntimeError(f"HiGHS did not solve the optimum's LP: {res.message}")  # always feasible
        dual = -res.eqlin.marginals
        if not generate:
            break
        priced = c - A.T @ dual
        priced[active] = 0
        entering = np.flatnonzero(priced > TIGHT_TOLERANCE)
        if not len(entering):
            break
        active = np.concatenate([active, entering])
    x = np.zeros(len(c))
    x[active] = res.x
    return -float(res.fun), list(x), list(dual)


def check_primal(lp: LP, x: dict[int, object]) -> bool:
    """Whether ``x`` (column → value, missing = 0) is exactly feasible: ``x ≥ 0`` and ``A x = b``."""
    if any(v < 0 for v in x.values()):
        return False
    lhs = [rational(0)] * lp.rows
    for j, v in x.items():
        if v != 0:
            for i, a in lp.entries[j].items():
                lhs[i] += a * v
    return all(l == r for l, r in zip(lhs, lp.b))


def column_values(lp: LP, y: Sequence, zero=0) -> list:
    """``A_j^T y`` for every column ``j``. A column has coefficient 1 on its tree's row, and on the sequence rows
    the target's completion of its output alone; so the sequence part is summed once per distinct output, not
    once per column (the same output recurs in many trees: at V = 5 on a chain of depth 4, 3,905 outputs for
    15,625 columns, and the short outputs have the most sequence rows)."""
    blocks = len(lp.trees)
    shared: dict[Output, object] = {}
    out = []
    for col, entries in zip(lp.columns, lp.entries):
        part = shared.get(col.output)
        if part is None:
            part = shared[col.output] = sum((a * y[i] for i, a in entries.items() if i >= blocks), zero)
        out.append(y[col.tree] + part)
    return out


def check_dual(lp: LP, y: Sequence) -> bool:
    """Whether ``y`` is exactly dual feasible: ``A^T y ≥ c`` on every column."""
    return all(value >= c for value, c in zip(column_values(lp, y, rational(0)), lp.c))


def settle(lp: LP, x_float: Sequence[float], y_float: Sequence[float], timings: dict | None = None):
    """The exact primal point and dual certificate HiGHS's floats propose: ``(x, y)``, each ``None`` where its
    exact system was inconsistent.

    HiGHS's vertex (the dual simplex, or interior point and crossover) proposes; the float solution's support gives a
    primal system solved exactly (sparse elimination), checked ``x ≥ 0`` and every equality exactly; the support's
    columns and the others HiGHS's duals leave tight give a dual system ``A_J^T y = c_J`` solved exactly, checked
    ``A^T y ≥ c`` on every column; ``b^T y = c^T x`` then closes the proof (weak duality).
    """
    timings = {} if timings is None else timings
    start = time.perf_counter()
    support = [j for j, v in enumerate(x_float) if v > SUPPORT_TOLERANCE]
    by_row: dict[int, dict[int, object]] = {i: {} for i in range(lp.rows)}
    for j in support:
        for i, a in lp.entries[j].items():
            by_row[i][j] = a
    equations = [(by_row[i], lp.b[i]) for i in range(lp.rows)]
    x = solve_sparse(equations, {j: _rationalised(x_float[j]) for j in support})
    timings["primal"] = time.perf_counter() - start
    start = time.perf_counter()
    # The support's columns must be tight (complementary slackness, so that b^T y = c^T x); the other columns
    # HiGHS leaves tight pin down the rest, surest first, until every row's multiplier has a pivot.
    in_support = set(support)
    values = column_values(lp, y_float, 0.0)
    slack = {j: abs(values[j] - float(lp.c[j])) for j in range(len(lp.columns)) if j not in in_support}
    tight = sorted((j for j, v in slack.items() if v < TIGHT_TOLERANCE), key=lambda j: (slack[j], len(lp.entries[j])))
    hint = {i: _rationalised(v) for i, v in enumerate(y_float)}
    y_map = solve_sparse([(lp.entries[j], lp.c[j]) for j in support], hint,
                         [(lp.entries[j], lp.c[j]) for j in tight], lp.rows)
    y = None if y_map is None else [y_map.get(i, hint[i]) for i in range(lp.rows)]
    timings["dual"] = time.perf_counter() - start
    return x, y


def optimum(model: ModelPair, drafter: Drafter, context: Sequence[int] = (),
            max_columns: int = MAX_COLUMNS, merge: bool = True, generate: bool = False) -> Optimum:
    """``E[τ]*`` of one instance: the largest expected number of accepted draft tokens any lossless verifier could
    reach, proved exactly (docs/optimum.md).

    A lossless verifier is a solution ``π(T, v, y) ≥ 0`` of a linear system, one variable per drafted tree ``T``,
    accepted node ``v`` and next token ``y``: ``Σ_{v,y} π(T, v, y) = P(T)`` for every tree, and the output completed by
    the target reproduces ``q^(H+1)``. Maximising ``Σ π · depth(v)`` gives ``E[τ]*``. The bound is an oracle's (``π``
    may read rows off the drafted tree); it equals the best tree-local rule on chains (Block Verification's Theorem 2)
    and at depth 1. HiGHS solves the LP in floats; the answer is then settled in exact rationals: a primal point and a
    dual certificate checked exactly, and equal objectives close the proof. Floats only propose.

    Parameters
    ----------
    model : ModelPair
        The draft and target models.
    drafter : Drafter
        A fixed shape with a fixed drafting scheme (``iid`` or ``without-replacement``).
    context : sequence of int
        The tokens the round starts after.
    max_columns : int
        The largest LP accepted, estimated as ``V^(nodes−1) · nodes · V`` columns.
    merge : bool
        Merge columns that give the same output in the same tree, and trees with the same root paths (the optimum is
        unchanged: :func:`paths_key`).
    generate : bool
        Solve by column generation from the dual instead of the whole LP at once.

    Returns
    -------
    Optimum
        ``optimum`` (a ``Fraction``, or ``None`` when neither side checked), whether the primal and the dual checked
        exactly and the objectives closed (``proved``), the LP's size and the timings.

    Raises
    ------
    InvalidParameterError
        A drafter that is not a fixed shape with a fixed scheme, or an LP over ``max_columns``.
    """
    check_size(drafter, model.vocab, max_columns)
    began = time.perf_counter()
    timings: dict[str, float] = {}
    lp = build_lp(model, drafter, context, merge)
    timings["build"] = time.perf_counter() - began
    start = time.perf_counter()
    value, x_float, y_float = _float_solve(lp, generate)
    timings["highs"] = time.perf_counter() - start
    x, y = settle(lp, x_float, y_float, timings)
    start = time.perf_counter()
    primal_ok = x is not None and check_primal(lp, x)
    dual_ok = y is not None and check_dual(lp, y)
    primal_value = sum((lp.c[j] * v for j, v in x.items()), rational(0)) if x is not None else None
    dual_value = sum((bi * yi for bi, yi in zip(lp.b, y)), rational(0)) if y is not None else None
    timings["check"] = time.perf_counter() - start
    closed = primal_ok and dual_ok and primal_value == dual_value
    exact_value = primal_value if primal_ok else dual_value if dual_ok else None
    return Optimum(None if exact_value is None else Fraction(int(exact_value.numerator), int(exact_value.denominator)),
                   value, primal_ok, dual_ok, closed, len(lp.columns),
                   lp.rows, len(lp.trees), time.perf_counter() - began, timings,
                   {j: v for j, v in (x or {}).items() if v != 0}, y or [], lp)


# ---- the optimal verifier, runnable ----------------------------------------------------------------------------
def verifier_module(result: Optimum, scheme: str, description: str = "") -> str:
    """The source of a verifier module drawing the optimal ``π``: per block of drafted trees (their sorted root
    paths, :func:`paths_key`), the table of ``(path to v, y, π / P(block))``, drawn with ``rng.categorical``; ``v``
    is the first node of the drafted tree on that path. ``certify`` takes it as
    ``MODULE:verify`` and must find it LOSSLESS with ``E[τ] = E[τ]*`` on the instance it was solved for (on any
    other model pair it is a table of the wrong rows)."""
    lp = result.lp
    if lp is None or not result.primal_checked:
        raise InvalidParameterError("verifier_out", "no exactly checked primal point to write")
    per_tree: dict[int, list] = {}
    for j, value in sorted(result.primal.items()):
        col = lp.columns[j]
        per_tree.setdefault(col.tree, []).append((col.output[:-1], col.y, value / lp.trees[col.tree][1]))
    lines = [f'"""The optimal verifier of one instance, written by ``specproof optimum --verifier-out`` '
             f'(docs/optimum.md).', "",
             f"E[τ]* = {result.optimum}; {description}".rstrip("; "),
             "An oracle's table: its draws use the model's rows off the drafted tree; it is lossless on this "
             "instance only.", '"""', "",
             "from fractions import Fraction", "",
             "#: the sorted root paths of a drafted tree -> ((accepted path, y, probability), ...)",
             "_TABLE = {"]
    for t, (tree, _) in enumerate(lp.trees):
        entries = ", ".join(f'({path!r}, {y}, "{prob}")' for path, y, prob in per_tree.get(t, []))
        lines.append(f"    {paths_key(tree)!r}: ({entries},),")
    lines += ["}",
              "TABLE = {key: tuple((path, y, Fraction(prob)) for path, y, prob in rows) for key, rows in "
              "_TABLE.items()}", "", "",
              "def verify(tree, p, q, rng):",
              '    """The accepted node and the next token, drawn from the optimal π given the tree\'s paths."""',
              "    paths = [tree.path(v) for v in range(len(tree.parents))]",
              "    rows = TABLE[tuple(sorted(set(paths)))]",
              "    path, y, _ = rows[rng.categorical([prob for _, _, prob in rows])]",
              "    return paths.index(path), y", "", "",
              f"verify.schemes = ({scheme!r},)", ""]
    return "\n".join(lines)


# ---- the rules against the ceiling ---------------------------------------------------------------------------
@dataclass
class RuleRow:
    """One rule on one instance: its exact ``E[τ]``, whether it is lossless there, and its efficiency
    ``E[τ] / E[τ]*`` (``None`` where it is outside the LP's class: ``outside`` says why)."""

    verifier: str
    lossless: bool
    expected_accepted: Fraction
    efficiency: Fraction | None = None
    outside: str = ""

    @property
    def above_optimum(self) -> bool:
        """A lossless rule above the ceiling: a bug in the rule's certificate or in the LP."""
        return self.lossless and self.efficiency is not None and self.efficiency > 1


#: Why a rule whose output is completed by a modified target is not compared with the per-round LP.
OUTSIDE = "its output is completed by a modified target (lossless over rounds, not per round)"


def claiming_rules(scheme: str, topology: str) -> list[str]:
    """The built-in rules that claim losslessness under drafting ``scheme`` and are defined on ``topology`` (a
    shape's name), in the registry's order: the rules compared with the ceiling."""
    return [name for name, spec in VERIFIERS.items() if scheme in spec.lossless_under and topology in spec.shapes]


def rule_row(model: ModelPair, drafter: Drafter, verifier, best: Fraction | None, name: str | None = None,
             arithmetic: str = "fraction") -> RuleRow:
    """``verifier`` (a name or a function) certified on the instance in ``arithmetic`` and set against ``best``. A
    rule whose output is completed by another rule than the target (greedy BV's modified target) is outside the
    LP's class and gets no efficiency. Lossless: TVD 0 under fractions, within certify's float tolerance under
    floats, and no mass off the target's support. Errors of the certificate (a rule not defined on the shape, a
    limit) propagate."""
    from simulator.completion import TARGET

    from ..certificate import FLOAT_TOLERANCE, round_law

    law = round_law(model, drafter, verifier, arithmetic)
    distance = law.distance()
    accepted = Fraction(law.expected_accepted())
    tolerance = 0 if arithmetic == "fraction" else FLOAT_TOLERANCE
    row = RuleRow(name or str(verifier), distance.tvd <= tolerance and distance.off_support == 0, accepted)
    if any(outcome.completion is not TARGET for outcome in law.outcomes):
        row.outside = OUTSIDE
    elif best is not None and best > 0:
        row.efficiency = accepted / best
    return row


# ---- checks against the papers (for ``specproof theorems``) ----------------------------------------------------
@dataclass
class Margin:
    """The worst exact margin of a claim over its instances: ``≥ 0`` on each exactly when it holds there."""

    instances: int = 0
    worst: Fraction | None = None
    where: str = ""

    def see(self, margin, where: str) -> None:
        self.instances += 1
        margin = Fraction(int(margin.numerator), int(margin.denominator)) if hasattr(margin, "numerator") else margin
        if self.worst is None or margin < self.worst:
            self.worst, self.where = margin, where

    @property
    def holds(self) -> bool:
        return self.instances > 0 and self.worst is not None and self.worst >= 0


def rule_margins(instances, rules: Sequence[str], equal: bool = False, tick=lambda: None) -> Margin:
    """Over ``instances`` (``(model, drafter, where)``), the worst margin of ``E[τ]* − E[τ](rule)`` (``equal``:
    of ``−|E[τ]* − E[τ](rule)|``) for each named rule: a negative margin is a rule above the ceiling, or off it
    where equality is claimed. An optimum not proved exactly counts as margin −1. A rule outside the per-round LP
    (:data:`OUTSIDE`) is not compared."""
    worst = Margin()
    for model, drafter, where in instances:
        result = optimum(model, drafter)
        if not result.proved:
            worst.see(Fraction(-1), f"{where}: optimum not proved")
            tick()
            continue
        for name in rules:
            row = rule_row(model, drafter, name, result.optimum)
            if row.outside:
                continue
            gap = result.optimum - row.expected_accepted
            worst.see(-abs(gap) if equal else gap, f"{where} vs {name}")
        tick()
    return worst
