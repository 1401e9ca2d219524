"""Symbolic rows and a number type whose comparisons become branches (docs/proofs.md, "How it works"): the reference
rules run unchanged on :class:`Sym`, and :func:`symbolic_paths` yields each path's output, probability and sign
conditions."""

from __future__ import annotations

import contextvars
import functools
import itertools
import math
import operator
import random
from fractions import Fraction
from typing import Callable, Iterator, Sequence

import sympy as sp

from simulator.errors import ChoiceLimitError, RandomnessError, SymbolicError
from simulator.limits import MAX_CHOICES_PER_EXECUTION

from exact.enumeration import replayed
from .rational_lp import satisfiable

#: The three signs of an atom: negative, zero, positive.
SIGNS = (-1, 0, 1)
ALL = frozenset(SIGNS)
Context = tuple[int, ...]

_ACTIVE: contextvars.ContextVar["SymbolicChooser | None"] = contextvars.ContextVar("symbolic_chooser",
                                                                                     default=None)


def rational(c) -> Fraction:
    """A coefficient of the symbols' ring (sympy's ``QQ``) as a :class:`fractions.Fraction`."""
    return Fraction(int(c.numerator), int(c.denominator))


def context_key(context: Context) -> str:
    """A context as the tables write it (``""`` the empty prefix, ``"0,2"``)."""
    return ",".join(map(str, context))


class Space:
    """The symbols of the rows a symbolic run may read: ``p`` at ``p_contexts``, ``q`` at ``q_contexts``.

    Each row holds ``V − 1`` symbols; its last entry is ``1 − Σ`` of them. Every symbol is non-negative (the
    rational LP's variables are), and :meth:`domain` states each row's last entry ``≥ 0``. ``shared``: one ``p``
    row and one ``q`` row serve every context (context-independent models: :meth:`context_free`).
    ``draft_models``: with ``k ≥ 2``, the rows ``drafts[i]`` of draft models ``i = 1..k−1`` at ``p_contexts`` too
    (symbols ``d{i}_…``), ``p`` being draft model 0's (docs/models.md, "Several draft models")."""

    def __init__(self, vocab: int, p_contexts: Sequence[Context], q_contexts: Sequence[Context],
                 shared: bool = False, draft_models: int = 1) -> None:
        if vocab < 2:
            raise SymbolicError("vocab", f"a symbolic row needs at least 2 tokens, got vocab = {vocab}")
        names: list[str] = []
        slots: dict[tuple[str, Context], list[int]] = {}
        self.drafts = ("p", *(f"drafts[{i}]" for i in range(1, draft_models)))  # the draft models' row names
        prefixes = [("p", "p"), ("q", "q"), *((f"drafts[{i}]", f"d{i}_") for i in range(1, draft_models))]
        for name, prefix in prefixes:
            for ctx in q_contexts if name == "q" else p_contexts:
                slots[name, tuple(ctx)] = list(range(len(names), len(names) + vocab - 1))
                label = "_".join(map(str, ctx)) if ctx else "r"
                names += [f"{prefix}{label}_{i}" for i in range(vocab - 1)]
        self.vocab = vocab
        self.shared = shared
        self.draft_models = draft_models
        self.field, *self.gens = sp.field(names, sp.QQ)
        self.ring = self.field.ring
        self.names = names
        self.slots = slots
        self.one = self.field(1)
        self._rows: dict[tuple[str, Context], tuple[Sym, ...]] = {}
        ring_gens = self.ring.gens
        for key, idx in slots.items():
            entries = [self.gens[i] for i in idx]
            # summed in the polynomial ring: the field's sum cancels a gcd at every step (0.7 s a row at V = 50)
            last = self.field(self.ring.one - sum((ring_gens[i] for i in idx), self.ring.zero))
            self._rows[key] = tuple(Sym(e, self) for e in entries + [last])
        #: the signs the domain allows an atom that is ± a row entry (each symbol, each row's last entry): ``≥ 0``
        self.domain_signs: dict[object, frozenset[int]] = {}
        for row in self._rows.values():
            for entry in row:
                sign, atom = normalise(entry.value.numer)
                self.domain_signs[atom] = frozenset((0, sign))

    @classmethod
    def context_free(cls, vocab: int, draft_models: int = 1) -> "Space":
        """One symbolic ``p`` row (one per draft model) and one ``q`` row, read at every context."""
        return cls(vocab, [()], [()], shared=True, draft_models=draft_models)

    def row(self, name: str, context: Context) -> tuple["Sym", ...]:
        key = (name, () if self.shared else tuple(context))
        if key not in self._rows:
            raise SymbolicError("context", f"the rule read {name}({context_key(context) or 'root'}), a row outside "
                                           "the symbolic space of this shape")
        return self._rows[key]

    def domain(self) -> list[tuple[list[Fraction], Fraction, str]]:
        """Each row's last entry ``1 − Σ s ≥ 0`` as linear forms (the symbols' own ``≥ 0`` is the LP's)."""
        out = []
        for idx in self.slots.values():
            coeffs = [Fraction(0)] * len(self.names)
            for i in idx:
                coeffs[i] = Fraction(-1)
            out.append((coeffs, Fraction(1), ">="))
        return out

    def evaluate(self, poly, point: Sequence[Fraction]) -> Fraction:
        """A polynomial of the ring at a rational point (one value per symbol)."""
        total = Fraction(0)
        for monom, c in poly.terms():
            term = rational(c)
            for i, e in enumerate(monom):
                if e:
                    term *= point[i] ** e
            total += term
        return total

    def rows_at(self, point: Sequence[Fraction]) -> dict[str, dict[Context, tuple[Fraction, ...]]]:
        """Every row of the space at ``point``, exact."""
        out: dict[str, dict[Context, tuple[Fraction, ...]]] = {name: {} for name in ("q", *self.drafts)}
        for (name, ctx), idx in self.slots.items():
            entries = [point[i] for i in idx]
            out[name][ctx] = tuple(entries + [1 - sum(entries, Fraction(0))])
        return out


def normalise(poly) -> tuple[int, object]:
    """``poly = c · atom`` with ``atom`` primitive and its leading coefficient positive: ``(sign of c, atom)``."""
    content, primitive = poly.primitive()
    sign = 1 if content > 0 else -1
    if primitive.LC < 0:
        primitive, sign = -primitive, -sign
    return sign, primitive


@functools.lru_cache(maxsize=65536)
def factor_signs(value) -> tuple[int, list[tuple[object, int]]]:
    """A non-zero rational function as ``(sign of its constant factor, [(atom, multiplicity), …])`` over the
    irreducible factors of its numerator and denominator."""
    sign, atoms = 1, []
    for poly in (value.numer, value.denom):
        coeff, factors = poly.factor_list()
        sign *= 1 if coeff > 0 else -1
        for factor, multiplicity in factors:
            s, atom = normalise(factor)
            sign *= s ** multiplicity
            atoms.append((atom, multiplicity))
    return sign, atoms


class PathDead(BaseException):
    """A path assumed a sign its conditions rule out: it is dropped. A ``BaseException``, so that a rule's own
    ``except Exception`` (and :func:`simulator.speculation.decide`'s wrapping of a rule's errors) lets it pass."""


class PathStuck(BaseException):
    """A path reached a random choice that cannot be made on part of its region — a categorical of zero total
    mass, a negative weight, a Bernoulli probability outside ``[0, 1]`` — carrying that :class:`RandomnessError`.
    The path stops there with the probability of reaching that point and the signs it assumed (the failure's own
    conditions included). Whether that probability is zero throughout the region (the branch is never taken, as
    the exact engine never takes a branch of probability zero) or not (the rule fails on model pairs it reaches:
    a finding) is decided like an identity, on cells (:mod:`exact.prove.proof`). A ``BaseException`` for the reason
    :class:`PathDead` is."""

    def __init__(self, error: RandomnessError) -> None:
        super().__init__(str(error))
        self.error = error


_OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


@functools.lru_cache(maxsize=1 << 18)
def _arithmetic(op: str, field: int, a, b):
    """One operation of the field ``field`` (its ``id``: a cached element keeps its field alive, and elements of two
    fields may compare equal), remembered: the enumeration replays each path's prefix, so a rule recomputes the
    same rational functions again and again, and each result costs a polynomial gcd."""
    return _OPERATORS[op](a, b)


class Sym:
    """A rational function of a :class:`Space`'s symbols, with the operators the reference rules use.

    Arithmetic with ints, :class:`fractions.Fraction` and other :class:`Sym` stays exact; a float raises
    :class:`SymbolicError` (the rule computes in floats). Comparisons ask the active :class:`SymbolicChooser`."""

    __slots__ = ("value", "space")

    def __init__(self, value, space: Space) -> None:
        self.value = value
        self.space = space

    def _lift(self, other):
        if isinstance(other, Sym):
            return other.value
        if isinstance(other, bool):
            return self.space.field(int(other))
        if isinstance(other, int):
            return self.space.field(other)
        if isinstance(other, Fraction):
            return self.space.field(sp.QQ(other.numerator, other.denominator))
        if isinstance(other, float):
            raise SymbolicError("arithmetic", f"a float ({other!r}) met a symbolic row: the rule computes in floats, "
                                              "which a proof for every model pair cannot follow")
        return NotImplemented

    def _new(self, value) -> "Sym":
        return Sym(value, self.space)

    def _apply(self, op: str, a, b) -> "Sym":
        if a is NotImplemented or b is NotImplemented:
            return NotImplemented
        if op == "/" and b == 0:
            raise ZeroDivisionError("symbolic division by zero")
        return self._new(_arithmetic(op, id(self.space.field), a, b))

    def __add__(self, other):
        return self._apply("+", self.value, self._lift(other))

    __radd__ = __add__

    def __sub__(self, other):
        return self._apply("-", self.value, self._lift(other))

    def __rsub__(self, other):
        return self._apply("-", self._lift(other), self.value)

    def __mul__(self, other):
        return self._apply("*", self.value, self._lift(other))

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._apply("/", self.value, self._lift(other))

    def __rtruediv__(self, other):
        return self._apply("/", self._lift(other), self.value)

    def __pow__(self, exponent):
        if isinstance(exponent, int) and not isinstance(exponent, bool):
            return self._new(self.value ** exponent)
        raise SymbolicError("arithmetic", f"a symbolic power needs an integer exponent, got {exponent!r}")

    def __neg__(self):
        return self._new(-self.value)

    def __pos__(self):
        return self

    def __abs__(self):
        return self if self >= 0 else -self

    def _compare(self, other, test: Callable[[int], bool]) -> bool:
        o = self._lift(other)
        if o is NotImplemented:
            return NotImplemented
        return chooser().decide(self.value - o, test)

    def __lt__(self, other):
        return self._compare(other, lambda s: s < 0)

    def __le__(self, other):
        return self._compare(other, lambda s: s <= 0)

    def __gt__(self, other):
        return self._compare(other, lambda s: s > 0)

    def __ge__(self, other):
        return self._compare(other, lambda s: s >= 0)

    def __eq__(self, other):
        return self._compare(other, lambda s: s == 0)

    def __ne__(self, other):
        return self._compare(other, lambda s: s != 0)

    def __bool__(self) -> bool:
        return chooser().decide(self.value, lambda s: s != 0)

    def __hash__(self) -> int:
        return hash(self.value)

    def __float__(self) -> float:
        raise SymbolicError("arithmetic", "a symbolic probability was converted to a float: the rule computes in "
                                          "floats, which a proof for every model pair cannot follow")

    def __repr__(self) -> str:
        return f"Sym({self.value.as_expr()})"


def chooser() -> "SymbolicChooser":
    active = _ACTIVE.get()
    if active is None:
        raise SymbolicError("arithmetic", "a symbolic value was compared outside a symbolic run")
    return active


class SymbolicChooser:
    """The randomness interface and the comparison oracle of one path: follows ``prefix`` of branch indices, then
    branch 0, and records every branch point's width (the enumerator's replay, as :mod:`exact.enumeration`).

    Every comparison becomes a branch on the signs of its irreducible factors (*atoms*), every random choice a branch
    of rational probability. A sign is pruned only when its conditions provably cannot hold
    (:class:`LinearFeasibility`), so no region that exists is dropped.
    """

    def __init__(self, space: Space, prefix: Sequence[int], feasible: Callable[[dict], bool],
                 pick: Callable[[int], int] | None = None) -> None:
        self.space = space
        self._prefix = prefix
        self._feasible = feasible
        self._pick = pick  # past the prefix: which of n options to take (default the first; random for an estimate)
        self.taken: list[int] = []
        self.widths: list[int] = []
        self.prob = space.one
        self.signs: dict[object, frozenset[int]] = {}

    # ---- signs -----------------------------------------------------------------------------------------
    def allowed(self, atom) -> frozenset[int]:
        return self.signs.get(atom, ALL) & self.space.domain_signs.get(atom, ALL)

    def _branch(self, options: list):
        """Take the prefix's option (or the first) among ``options``; record the width when there is a choice."""
        if len(options) == 1:
            return options[0]
        k = len(self.taken)
        if k >= MAX_CHOICES_PER_EXECUTION:
            raise ChoiceLimitError("rng", f"one symbolic path made more than {MAX_CHOICES_PER_EXECUTION:,} choices")
        index = self._prefix[k] if k < len(self._prefix) else 0 if self._pick is None else self._pick(len(options))
        self.taken.append(index)
        self.widths.append(len(options))
        return options[index]

    def _outcomes(self, value, test: Callable[[int], bool]) -> list[tuple[bool, dict]]:
        """The feasible ways ``test(sign(value))`` can come out: ``(outcome, sign sets to assume)``. A single open
        atom is split by outcome (``g < 0`` against ``g ≥ 0``); several are split sign by sign."""
        if not hasattr(value, "numer"):  # sympy hands back a plain number from some operations on constants
            value = self.space.field(value)
        if value == 0:
            return [(test(0), {})]
        constant, atoms = factor_signs(value)
        fixed = constant
        open_atoms = []
        for atom, multiplicity in atoms:
            allowed = self.allowed(atom)
            relevant = allowed if multiplicity % 2 else frozenset(min(abs(s), 1) for s in allowed)
            if len(relevant) == 1:
                fixed *= next(iter(relevant)) ** multiplicity if multiplicity % 2 else next(iter(relevant))
            else:
                open_atoms.append((atom, multiplicity, allowed))
        if not open_atoms:
            return [(test(fixed), {})]
        options: list[tuple[bool, dict]] = []
        if len(open_atoms) == 1:
            atom, multiplicity, allowed = open_atoms[0]
            by_outcome: dict[bool, set[int]] = {}
            for s in sorted(allowed):
                sign = fixed * (s ** multiplicity if multiplicity % 2 else abs(s))
                by_outcome.setdefault(test(sign), set()).add(s)
            options = [(out, {atom: frozenset(signs)}) for out, signs in sorted(by_outcome.items(), reverse=True)]
        else:
            for combo in itertools.product(*(sorted(a) for _, _, a in open_atoms)):
                sign = fixed
                for (_, multiplicity, _), s in zip(open_atoms, combo):
                    sign *= s ** multiplicity if multiplicity % 2 else abs(s)
                options.append((test(sign), {atom: frozenset((s,)) for (atom, _, _), s in zip(open_atoms, combo)}))
        return [(out, assume) for out, assume in options if self._feasible({**self.signs, **assume})]

    def _assume(self, assume: dict) -> None:
        for atom, signs in assume.items():
            self.signs[atom] = self.signs.get(atom, ALL) & signs

    def decide(self, value, test: Callable[[int], bool]) -> bool:
        """``test(sign(value))`` on this path, branching where the path leaves it open."""
        options = self._outcomes(value, test)
        if not options:
            raise PathDead()
        outcome, assume = self._branch(options)
        self._assume(assume)
        return outcome

    def require(self, value, test: Callable[[int], bool]) -> None:
        """Assume ``test(sign(value))`` (a branch taken with positive probability); the path dies where it fails."""
        options = [o for o in self._outcomes(value, test) if o[0]]
        if not options:
            raise PathDead()
        self._assume(self._branch(options)[1])

    # ---- randomness --------------------------------------------------------------------------------------
    def _lift(self, value):
        return value.value if isinstance(value, Sym) else Sym(self.space.one, self.space)._lift(value)

    def bernoulli(self, prob) -> bool:
        p = self._lift(prob)
        if self.decide(p, lambda s: s < 0) or self.decide(p - self.space.one, lambda s: s > 0):
            raise PathStuck(RandomnessError("prob", "a bernoulli probability leaves [0, 1] on part of the model pairs"))
        outcome = self._branch([True, False])
        chance = p if outcome else self.space.one - p
        self.require(chance, lambda s: s > 0)
        self.prob = self.prob * chance
        return outcome

    def categorical(self, weights: Sequence) -> int:
        values = [self._lift(w) for w in weights]
        for i, w in enumerate(values):
            if self.decide(w, lambda s: s < 0):
                raise PathStuck(RandomnessError(f"weights[{i}]", "a categorical weight is negative on part of the "
                                                                 "model pairs"))
        mass = sum(values, self.space.field(0))
        if not self.decide(mass, lambda s: s > 0):
            raise PathStuck(RandomnessError("weights", "categorical weights have zero total mass on part of the model "
                                                       "pairs"))
        index = self._branch([i for i, w in enumerate(values) if w != 0])
        self.require(values[index], lambda s: s > 0)
        self.prob = self.prob * values[index] / mass
        return index


def symbolic_paths(space: Space, program: Callable[[SymbolicChooser], object], feasible: Callable[[dict], bool],
                   stuck: list | None = None, on_run: Callable[[], None] | None = None
                   ) -> Iterator[tuple[object, object, dict]]:
    """Every path of ``program``: ``(result, probability, sign conditions)``, by the exact engine's walk
    (:func:`exact.enumeration.replayed`). Paths that die are dropped. A path that stops at a random choice it cannot
    make (:class:`PathStuck`) goes to ``stuck`` as ``(error, probability of reaching it, sign conditions)``; without
    ``stuck`` its error is raised. ``on_run`` is called once per run (every leaf of the choice tree, dead or not)."""
    dead = object()

    def run(prefix: tuple[int, ...]) -> tuple[object, SymbolicChooser]:
        result, rng = _run(space, program, feasible, prefix, None, dead)
        if on_run is not None:
            on_run()
        if isinstance(result, PathStuck):
            if stuck is None:
                raise result.error
            stuck.append((result.error, rng.prob, dict(rng.signs)))
            return dead, rng
        return result, rng

    for result, rng in replayed(run):
        if result is not dead:
            yield result, rng.prob, dict(rng.signs)


def _run(space: Space, program: Callable[[SymbolicChooser], object], feasible: Callable[[dict], bool],
         prefix: tuple[int, ...], pick: Callable[[int], int] | None, dead: object) -> tuple[object, SymbolicChooser]:
    """One run of ``program`` along ``prefix`` (then ``pick``'s branches): its result — ``dead`` for a path that
    died, the :class:`PathStuck` for one that stopped — and its chooser."""
    rng = SymbolicChooser(space, prefix, feasible, pick)
    token = _ACTIVE.set(rng)
    try:
        return program(rng), rng
    except PathDead:
        return dead, rng
    except PathStuck as stop:
        return stop, rng
    finally:
        _ACTIVE.reset(token)


def estimate_runs(space: Space, program: Callable[[SymbolicChooser], object], feasible: Callable[[dict], bool],
                  descents: int, seed: int = 0) -> Iterator[tuple[float, float]]:
    """Knuth's estimate of the runs :func:`symbolic_paths` makes (the leaves of the choice tree, as
    :mod:`exact.size` estimates the exact engine's): ``descents`` runs that take a uniformly random branch at every
    choice, each giving the product of the branch counts it met. Yields ``(mean, standard error of the mean)``
    after each descent, so that a caller may stop as soon as the estimate settles its question."""
    rng = random.Random(seed)
    samples: list[float] = []
    for _ in range(descents):
        _, chooser = _run(space, program, feasible, (), rng.randrange, None)
        samples.append(float(math.prod(chooser.widths)))
        mean = sum(samples) / len(samples)
        spread = sum((x - mean) ** 2 for x in samples) / (len(samples) - 1) if len(samples) > 1 else math.inf
        yield mean, math.sqrt(spread / len(samples))


class LinearFeasibility:
    """Whether a set of sign conditions can hold, judged by the exact LP on a linear relaxation.

    Every atom is linear in its symbols and its monomials: a monomial of degree ≥ 2 is an LP variable of its own,
    bounded by McCormick's inequalities for values in ``[0, 1]`` (every symbol lies there): ``0 ≤ m ≤ s`` for each
    of its symbols ``s`` and ``m ≥ Σ e_s·s − (degree − 1)``. So "infeasible" is
    exact (the relaxation has no point, so neither has the system) and "feasible" is not a witness: a witness is
    checked on the atoms themselves (:mod:`exact.prove.proof`). The conditions split into groups that share no variable
    (a row's entries and a monomial's symbols belong together); each group is an LP of its own, cached, and the
    system holds iff every group does. The point returned gives the symbols of no group the value 0."""

    def __init__(self, space: Space) -> None:
        self.space = space
        self._cache: dict[frozenset, tuple[bool, dict[int, Fraction] | None]] = {}
        self._answers: dict[frozenset, tuple[bool, list[Fraction] | None]] = {}
        self._forms: dict[object, tuple[dict[int, Fraction], Fraction]] = {}
        self._row_of = {i: tuple(idx) for idx in space.slots.values() for i in idx}
        self._monomials: dict[tuple[int, ...], int] = {}
        self._symbols_of: dict[int, tuple[int, ...]] = {}
        self._monomial_of: dict[int, tuple[int, ...]] = {}

    def _variable(self, monom: tuple[int, ...]) -> int:
        if sum(monom) == 1:
            return monom.index(1)
        if monom not in self._monomials:
            index = len(self.space.names) + len(self._monomials)
            self._monomials[monom] = index
            self._symbols_of[index] = tuple(i for i, e in enumerate(monom) if e)
            self._monomial_of[index] = monom
        return self._monomials[monom]

    def _form(self, atom) -> tuple[dict[int, Fraction], Fraction]:
        if atom not in self._forms:
            coeffs: dict[int, Fraction] = {}
            const = Fraction(0)
            for monom, c in atom.terms():
                value = rational(c)
                if sum(monom) == 0:
                    const = value
                else:
                    coeffs[self._variable(monom)] = value
            self._forms[atom] = (coeffs, const)
        return self._forms[atom]

    def _conditions(self, signs: dict) -> list[tuple[dict[int, Fraction], Fraction, str]] | None:
        out = []
        for atom, allowed in signs.items():
            if allowed == ALL:
                continue
            if not allowed:
                return None
            coeffs, const = self._form(atom)
            neg = ({k: -v for k, v in coeffs.items()}, -const)
            if allowed == frozenset((1,)):
                out.append((coeffs, const, ">"))
            elif allowed == frozenset((-1,)):
                out.append((*neg, ">"))
            elif allowed == frozenset((0,)):
                out.append((coeffs, const, "="))
            elif allowed == frozenset((0, 1)):
                out.append((coeffs, const, ">="))
            elif allowed == frozenset((-1, 0)):
                out.append((*neg, ">="))
        return out

    def _linked(self, variables: set[int]) -> set[int]:
        """``variables`` with their row mates and, for a monomial, its symbols and theirs."""
        out = set(variables)
        for v in variables:
            for s in self._symbols_of.get(v, (v,)):
                out.add(s)
                out.update(self._row_of[s])
        return out

    def point(self, signs: dict) -> tuple[bool, list[Fraction] | None]:
        """``(feasible, a point of the relaxation)`` for ``signs`` (``atom → allowed signs``). The enumeration
        replays each path's prefix, asking the same questions again: answers are kept per set of conditions."""
        key = frozenset(item for item in signs.items() if item[1] != ALL)
        if key not in self._answers:
            self._answers[key] = self._solve(signs)
        ok, point = self._answers[key]
        return ok, None if point is None else list(point)

    def _solve(self, signs: dict) -> tuple[bool, list[Fraction] | None]:
        conditions = self._conditions(signs)
        if conditions is None:
            return False, None
        groups: list[tuple[set[int], list]] = []
        for form in conditions:
            used = self._linked(set(form[0]))
            touching = [g for g in groups if g[0] & used]
            merged = (used.union(*(g[0] for g in touching)), [form] + [f for g in touching for f in g[1]])
            groups = [g for g in groups if not g[0] & used] + [merged]
        point = [Fraction(0)] * len(self.space.names)
        for variables, forms in groups:
            ok, values = self._group(tuple(sorted(variables)), forms)
            if not ok:
                return False, None
            for i, v in values.items():
                if i < len(point):
                    point[i] = v
        return True, point

    def _group(self, variables: tuple[int, ...], forms: list) -> tuple[bool, dict[int, Fraction] | None]:
        key = frozenset((tuple(f[0].get(v, Fraction(0)) for v in variables), f[1], f[2]) for f in forms)
        key = key | {variables}
        if key not in self._cache:
            local = [([f[0].get(v, Fraction(0)) for v in variables], f[1], f[2]) for f in forms]
            position = {v: k for k, v in enumerate(variables)}
            for idx in {self._row_of[v] for v in variables if v in self._row_of}:  # each row's last entry ≥ 0
                local.append(([Fraction(-1) if v in idx else Fraction(0) for v in variables], Fraction(1), ">="))
            for v in variables:  # McCormick: a monomial of [0, 1] values lies below each of its symbols, and
                if v not in self._symbols_of:  # above Σ e_i s_i − (degree − 1)
                    continue
                monom = self._monomial_of[v]
                for s in self._symbols_of[v]:
                    coeffs = [Fraction(0)] * len(variables)
                    coeffs[position[s]], coeffs[position[v]] = Fraction(1), Fraction(-1)
                    local.append((coeffs, Fraction(0), ">="))
                coeffs = [Fraction(0)] * len(variables)
                coeffs[position[v]] = Fraction(1)
                for s in self._symbols_of[v]:
                    coeffs[position[s]] = Fraction(-monom[s])
                local.append((coeffs, Fraction(sum(monom) - 1), ">="))
            ok, values = satisfiable(local, len(variables))
            self._cache[key] = (ok, None if values is None else dict(zip(variables, values)))
        return self._cache[key]

    def __call__(self, signs: dict) -> bool:
        return self.point(signs)[0]
