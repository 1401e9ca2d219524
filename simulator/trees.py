"""Draft-tree shapes (:func:`make_topology`; docs/drafting.md) and the :class:`DraftTree` a verifier sees. A tree is
a parent list in BFS order: node 0 is the root, children of a node are contiguous and ordered."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Sequence

from .errors import InvalidParameterError, InvalidTreeError

#: The most nodes a draft tree may have (EAGLE-style trees hold 10–100; DySpec's budgets reach a few hundred):
#: a shape beyond it is refused before it is built, since every engine allocates per node.
MAX_TREE_NODES = 100_000

TOPOLOGIES: dict[str, str] = {
    "chain": "a single path of H draft tokens",
    "multi-chain": "the root has b children, each continuing as a chain to depth H",
    "complete": "every node above depth H has b children",
    "tapered": "root has b children; a node with sibling index i of s siblings has max(s-i, 1) children",
    "binary": "complete tree with b = 2",
    "explicit": "any BFS-ordered parent list given with --parents (EAGLE-style sparse trees)",
}


def check_parents(parents: Sequence[object], field: str = "parents") -> tuple[int, ...]:
    """Validate a BFS-ordered parent list and return it as a tuple of ints."""
    if len(parents) == 0:
        raise InvalidTreeError(field, "empty: a tree has at least the root")
    out: list[int] = []
    for i, par in enumerate(parents):
        if isinstance(par, bool) or not isinstance(par, int):
            raise InvalidTreeError(f"{field}[{i}]", f"not an integer: {par!r}")
        if i == 0:
            if par != -1:
                raise InvalidTreeError(f"{field}[0]", f"the root's parent must be -1, got {par}")
        elif not 0 <= par < i:
            raise InvalidTreeError(f"{field}[{i}]", f"parent {par} must be an earlier node (0..{i - 1})")
        elif i > 1 and par < out[-1]:
            raise InvalidTreeError(f"{field}[{i}]", f"parent {par} after {out[-1]}: nodes are not in BFS order")
        out.append(par)
    return tuple(out)


@dataclass(frozen=True)
class Topology:
    """A named tree shape: the parent list every draft of this shape starts from."""

    name: str
    parents: tuple[int, ...]

    @cached_property
    def height(self) -> int:
        return node_depths(self.parents)[-1] if len(self.parents) > 1 else 0

    def levels(self) -> list[list[int]]:
        """The node ids of each depth, shallowest first (BFS order makes each a run of consecutive ids)."""
        return node_levels(self.parents)


def node_depths(parents: Sequence[int]) -> list[int]:
    """The depth of every node of a BFS-ordered parent list (the root: 0)."""
    depths = [0] * len(parents)
    for i in range(1, len(parents)):
        depths[i] = depths[parents[i]] + 1
    return depths


def node_children(parents: Sequence[int]) -> list[list[int]]:
    """The children of every node of a parent list, in index order."""
    out: list[list[int]] = [[] for _ in parents]
    for v in range(1, len(parents)):
        out[parents[v]].append(v)
    return out


def node_levels(parents: Sequence[int]) -> list[list[int]]:
    """The node ids of each depth, shallowest first."""
    depths = node_depths(parents)
    out: list[list[int]] = [[] for _ in range(max(depths) + 1)]
    for node, depth in enumerate(depths):
        out[depth].append(node)
    return out


def _grow(height: int, n_children: Callable[[int, int, int], int]) -> tuple[int, ...]:
    """BFS growth: ``n_children(depth, sibling_index, sibling_count)`` children per node above ``height``."""
    parents = [-1]
    frontier = [(0, 0, 1)]  # (node, sibling index, sibling count) at the current depth
    for depth in range(height):
        nxt = []
        for node, idx, sibs in frontier:
            count = n_children(depth, idx, sibs)
            for j in range(count):
                nxt.append((len(parents), j, count))
                parents.append(node)
        frontier = nxt
    return tuple(parents)


def make_topology(name: str, depth: int = 2, branching: int = 2,
                  parents: Sequence[int] | None = None) -> Topology:
    """Build a topology by name; ``explicit`` takes ``parents``. Raises a typed error naming the field.

    The shapes of Layer Verification's App. G, Fig. 4 (Cha et al., AdaptFM at ICML 2026): ``chain(H)``,
    ``multi-chain(b, H)`` (the root has ``b`` children, each continuing as a chain), ``complete(b, H)``,
    ``tapered(b, H)`` (the root has ``b`` children; a non-root node with sibling index ``idx`` among ``s`` siblings
    has ``max(s − idx, 1)`` children), ``binary(H)`` (``complete(2, H)``), and ``explicit``, any BFS parent list.
    """
    if name not in TOPOLOGIES:
        raise InvalidParameterError("topology", f"unknown topology {name!r}; choose from {sorted(TOPOLOGIES)}")
    if name == "explicit":
        if parents is None:
            raise InvalidParameterError("parents", "the explicit topology needs a parent list")
        return Topology(name, check_parents(list(parents)))
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise InvalidParameterError("depth", f"must be an integer ≥ 0, got {depth!r}")
    if isinstance(branching, bool) or not isinstance(branching, int) or branching < 1:
        raise InvalidParameterError("branching", f"must be an integer ≥ 1, got {branching!r}")
    b = 2 if name == "binary" else branching
    size = shape_size(name, depth, b)
    if size > MAX_TREE_NODES:
        at_least = "at least " if name == "tapered" or depth >= MAX_TREE_NODES else ""  # a lower bound there
        raise InvalidParameterError("depth", f"{name}(b={b}, H={depth}) has {at_least}{_count(size)} nodes, over the "
                                             f"limit of {MAX_TREE_NODES:,} a draft tree may have: reduce --depth or "
                                             "--branching")
    rules: dict[str, Callable[[int, int, int], int]] = {
        "chain": lambda d, i, s: 1,
        "multi-chain": lambda d, i, s: b if d == 0 else 1,
        "complete": lambda d, i, s: b,
        "binary": lambda d, i, s: b,
        "tapered": lambda d, i, s: b if d == 0 else max(s - i, 1),
    }
    return Topology(name, _grow(depth, rules[name]))


def parse_parents(text: str | None) -> list[int] | None:
    """``"-1,0,0,1"`` as a parent list (``None`` stays ``None``); a typed error on ``parents`` otherwise."""
    if text is None:
        return None
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise InvalidTreeError("parents", f"expected comma-separated integers, got {text!r}") from None


def shape_from_options(topology: str | None, depth: int, branching: int,
                       parents: str | None) -> tuple[str, Topology]:
    """The shape the command line's ``--topology``, ``--depth``, ``--branching`` and ``--parents`` name:
    ``complete`` by default, ``explicit`` whenever a parent list is given."""
    parent_list = parse_parents(parents)
    name = "explicit" if parent_list is not None else topology or "complete"
    return name, make_topology(name, depth, branching, parent_list)


def shape_size(name: str, depth: int, branching: int) -> int:
    """The number of nodes of a named shape, computed without building it (``explicit`` has no closed form);
    past :data:`MAX_TREE_NODES` a tapered shape's count may stop early at a lower bound."""
    b = 2 if name == "binary" else branching
    if name == "chain":
        return depth + 1
    if name == "multi-chain":
        return 1 + b * depth
    if name in ("complete", "binary"):
        if b >= 2 and depth >= MAX_TREE_NODES:  # 2^(H+1) nodes at least: past the limit, not worth the power
            return 2 ** MAX_TREE_NODES.bit_length()
        return depth + 1 if b == 1 else (b ** (depth + 1) - 1) // (b - 1)
    if name == "tapered":
        # Children form sibling groups: a group of s nodes has children groups of sizes s, s−1, …, 2 and then
        # 1 for the last sibling (max(s − i, 1)); count groups by size, level by level. Counting stops once past
        # MAX_TREE_NODES (the result is then a lower bound, still past the limit).
        if depth > MAX_TREE_NODES or (depth > 0 and b > MAX_TREE_NODES):
            return MAX_TREE_NODES + 1
        groups = {b: 1} if depth > 0 else {}
        nodes = 1
        for _ in range(depth):
            nodes += sum(s * n for s, n in groups.items())
            if nodes > MAX_TREE_NODES:
                return nodes
            nxt: dict[int, int] = {}
            for s, n in groups.items():
                for child_group in range(s, 0, -1):
                    nxt[child_group] = nxt.get(child_group, 0) + n
            groups = nxt
        return nodes
    raise InvalidParameterError("topology", f"no closed-form size for {name!r}")


def _count(n: int) -> str:
    """A node count for a message: exact when short, else its power of ten."""
    return f"{n:,}" if n < 10**12 else f"about 10^{len(str(n)) - 1}"


class TreeStructure:
    """What a tree's shape answers, from ``parents``, ``_children`` (lists of child ids) and ``_depths``: shared by
    :class:`DraftTree` and the lazily drafted tree (:class:`simulator.drafting.lazy_draft.LazyTree`)."""

    parents: list[int] | tuple[int, ...]
    _children: Sequence[Sequence[int]]
    _depths: list[int]

    def __len__(self) -> int:
        return len(self.parents)

    def children(self, v: int) -> tuple[int, ...]:
        """The children of node ``v``, in order.

        Parameters
        ----------
        v : int
            A node id, ``0 ≤ v < len(tree)``.

        Returns
        -------
        tuple of int
            Their ids, contiguous and increasing (BFS order); empty for a leaf.
        """
        return tuple(self._children[v])

    def depth(self, v: int) -> int:
        """The depth of node ``v``: 0 at the root, the number of draft tokens on its path.

        Parameters
        ----------
        v : int
            A node id.

        Returns
        -------
        int
            Its depth.
        """
        return self._depths[v]

    @property
    def height(self) -> int:
        """The tree's height ``H``: the depth of its deepest node."""
        return max(self._depths)

    def is_chain(self) -> bool:
        return all(len(c) <= 1 for c in self._children)

    def chain_nodes(self) -> list[int]:
        """The nodes of a chain from the root down (the caller checks :meth:`is_chain`)."""
        nodes = [0]
        while self._children[nodes[-1]]:
            nodes.append(self._children[nodes[-1]][0])
        return nodes

    def leaf_paths(self) -> list[list[int]]:
        """Every root-to-leaf path as its node ids from the root, sorted: the leaves in depth-first order, each
        node's children in the order they were drafted (the candidates of EAGLE's and Medusa's tree buffers)."""
        paths = []
        for leaf in (v for v in range(len(self)) if not self._children[v]):
            path = [leaf]
            while path[-1] != 0:
                path.append(self.parents[path[-1]])
            paths.append(path[::-1])
        return sorted(paths)


class DraftTree(TreeStructure):
    """A drafted tree: the object a verifier receives.

    A verifier reads ``parents``, ``tokens`` (``tokens[0]`` is ``None``), ``children(v)``, ``depth(v)`` and ``path(v)``;
    under the exact engine it receives a tree drafted on demand with the same methods
    (:class:`simulator.drafting.lazy_draft.LazyTree`), not this class.

    Parameters
    ----------
    parents : sequence of int
        The parent of each node in BFS order: ``parents[0] == -1`` (the root, the prefix), every other node's parent
        a smaller index, parents non-decreasing.
    tokens : sequence of int or None
        Each node's token; ``None`` at the root.
    vocab : int, optional
        The vocabulary size: tokens must lie in ``0..vocab-1``.

    Raises
    ------
    InvalidTreeError
        A parent list that is not a BFS-ordered rooted tree, or a token list of the wrong length, with a token at the
        root, or a token that is not an id in range (the field names the entry, ``tokens[3]``).
    """

    def __init__(self, parents: Sequence[int], tokens: Sequence[int | None], vocab: int | None = None) -> None:
        self.parents = check_parents(list(parents))
        if len(tokens) != len(self.parents):
            raise InvalidTreeError("tokens", f"has {len(tokens)} entries for {len(self.parents)} nodes")
        if tokens[0] is not None:
            raise InvalidTreeError("tokens[0]", "the root has no token: use null/None")
        for v, tok in enumerate(tokens[1:], start=1):
            if isinstance(tok, bool) or not isinstance(tok, int):
                raise InvalidTreeError(f"tokens[{v}]", f"not a token id: {tok!r}")
            if tok < 0 or (vocab is not None and tok >= vocab):
                raise InvalidTreeError(f"tokens[{v}]", f"token {tok} outside 0..{(vocab or 0) - 1}")
        self.tokens: tuple[int | None, ...] = tuple(tokens)
        self._children: list[list[int]] = [[] for _ in self.parents]
        for v, par in enumerate(self.parents[1:], start=1):
            self._children[par].append(v)
        self._depths = node_depths(self.parents)
        self._paths: list[tuple[int, ...]] = [()]
        for v in range(1, len(self.parents)):
            self._paths.append(self._paths[self.parents[v]] + (self.tokens[v],))  # type: ignore[operator]

    def path(self, v: int) -> tuple[int, ...]:
        """The tokens from the root to ``v``, root excluded: what accepting ``v`` emits before the correction or bonus
        token.

        Parameters
        ----------
        v : int
            A node id.

        Returns
        -------
        tuple of int
            ``depth(v)`` tokens.
        """
        return self._paths[v]

    def __repr__(self) -> str:
        return f"DraftTree(parents={list(self.parents)}, tokens={list(self.tokens)})"
