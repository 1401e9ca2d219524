"""Symbolic proofs (exact/prove/proof.py, ``specproof prove``): PROVED for every model pair of a shape and vocabulary,
REFUTED with an exact witness that the ordinary exact engine certifies LOSSY, UNDECIDED never passed off as PROVED,
and a written certificate re-checked by a second program (sympy on the JSON, the exact engine at random points)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from fractions import Fraction

import pytest
import sympy as sp

from exact import certify, round_law
from exact.prove.cells import Reduced, vanishing_terms
from exact.recursions.closed_forms import FORMS
from exact.prove.proof import SymbolicView, _expectation, run_paths
from exact.prove.prover import prove
from exact.prove.symbolic import LinearFeasibility, Space, normalise
from exact.reproducer import load_reproducer
from simulator.drafting import FixedShape
from simulator.errors import SymbolicError
from simulator.models import SyntheticModel, TableModel
from simulator.speculation import speculate
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.multipath import _unclipped, greedy_multipath_verify

ONE_LEVEL = make_topology("complete", 1, 2)
CHAIN = make_topology("chain", 1, 1)


@pytest.mark.parametrize("name, scheme, control", [
    ("tv-sps", "iid", "bug-residual-q"),
    ("tv-rrs", "iid", "bug-residual-q"),
    ("tv-rrsw", "without-replacement", "bug-residual-q"),
    ("trv", "iid", "bug-accept-all"),
    ("trv-iid", "iid", "bug-accept-all"),
    ("lv-sps", "iid", "bug-accept-all"),
    ("lv-rrs", "iid", "bug-accept-all"),
    ("match", "iid", "bug-match-per-row"),
])
def test_lossless_rule_is_proved_for_every_pair_and_its_control_refuted(name, scheme, control):
    """A one-level tree with 2 children at V = 2: the rule PROVED (every cell's identity holds), and on the same
    shape a lossy control REFUTED by the same check, with a witness the exact engine certifies LOSSY."""
    proof = prove(name, ONE_LEVEL, scheme, 2)
    assert proof.verdict == "PROVED" and proof.cells and all(c.holds for c in proof.cells)
    refuted = prove(control, ONE_LEVEL, "iid", 2)
    assert refuted.verdict == "REFUTED"
    cert = refuted.witness.certify()
    assert not cert.lossless and cert.tvd > 0


@pytest.mark.slow
def test_tv_sps_is_proved_at_three_tokens():
    """V = 3 (10 symbols): every drafted pair, every sign pattern of ``q − p``, every zero in a row."""
    assert prove("tv-sps", ONE_LEVEL, "iid", 3).verdict == "PROVED"


@pytest.mark.slow
def test_witness_is_a_reproducer_that_certify_case_calls_lossy(tmp_path):
    """The REFUTED command writes the witness; ``specproof certify --case`` (the ordinary engine) finds it LOSSY."""
    case = tmp_path / "case.json"
    cert_json = tmp_path / "proof.json"
    run = subprocess.run([sys.executable, "-m", "specproof.cli", "prove", "--verifier", "bug-residual-q", "--vocab",
                          "2", "--case-out", str(case), "--json", str(cert_json)], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "REFUTED" in run.stdout
    check = subprocess.run([sys.executable, "-m", "specproof.cli", "certify", "--case", str(case)],
                           capture_output=True, text=True)
    assert check.returncode == 1 and "LOSSY" in check.stdout, check.stdout + check.stderr
    assert load_reproducer(case).certify().tvd > 0
    assert json.loads(cert_json.read_text())["verdict"] == "REFUTED"


def _fragile_sps(tree, p, q, rng):
    """SpS on a one-node chain, except that it accepts the drafted token surely when ``2·q(x) = p(x)`` exactly — a
    loss on a measure-zero set of model pairs that random (float) models never hit."""
    x = tree.tokens[1]
    if 2 * q[0][x] == p[0][x]:
        return 1, rng.categorical(q[1])
    return VERIFIERS["tv-sps"].fn(tree, p, q, rng)


def test_plugin_lossy_on_a_measure_zero_set_is_refuted_where_random_certification_misses_it():
    drafter = FixedShape(CHAIN, "iid")
    assert all(certify(SyntheticModel(vocab=2, seed=s), drafter, _fragile_sps).lossless for s in range(8))
    proof = prove(_fragile_sps, CHAIN, "iid", 2)
    assert proof.verdict == "REFUTED"
    p, q = proof.witness.p[()], proof.witness.q[()]
    assert any(2 * q[x] == p[x] for x in range(2))  # the witness lies on the set where the plugin errs
    assert not proof.witness.certify().lossless


def _gbv_worst_path(tree, p, q, rng):
    """CONTROL: GBV that selects the lexicographic *minimum* of the paths but keeps the law of the maximum."""
    def reversed_ratio(qx, px):
        tier, value = _unclipped(qx, px)
        return -tier, -value
    return greedy_multipath_verify(tree, p, q, rng, select_by=reversed_ratio)


@pytest.mark.slow
def test_gbv_ranking_runs_symbolically_and_is_proved_with_a_control_refuted():
    """GBV ranks by ``q/p`` with ``p = 0`` first (a tier, not a float infinity): PROVED on two paths of one token at
    V = 2; the same selection turned upside down (the law kept) REFUTED there, its witness certified LOSSY."""
    paths = make_topology("multi-chain", 1, 2)
    assert prove("gbv", paths, "iid", 2).verdict == "PROVED"
    control = prove(_gbv_worst_path, paths, "iid", 2)
    assert control.verdict == "REFUTED" and not control.witness.certify().lossless


def test_degenerate_cell_yields_the_equalities_it_forces():
    """``q0·r + q1·(1 − r) ≥ 1`` with every value in [0, 1] holds only where ``r·(1 − q0) = 0`` and
    ``(1 − r)·(1 − q1) = 0`` (hand derivation: the four non-negative terms sum to 0); the same condition with 1/2
    in place of 1 forces nothing, and with ``q0 < 1`` and ``0 < r`` added the cell is empty."""
    space = Space(2, [(0,), (1,)], [()])  # three symbols: p(0)_0, p(1)_0 and q(root)_0 play q0, q1 and r
    r, q0, q1 = (space.row(*key)[0].value.numer for key in (("q", ()), ("p", (0,)), ("p", (1,))))
    def conditions(bound, extra=()):
        signs = {normalise(q0 * r + q1 * (1 - r) - bound)[1]: frozenset((0, 1))}
        signs.update({normalise(a)[1]: frozenset((s,)) for a, s in extra})
        return Reduced.of(signs, space)
    forced = vanishing_terms(conditions(1))
    assert {normalise(r * (1 - q0))[1], normalise((1 - r) * (1 - q1))[1]} <= set(forced)
    assert all(block == frozenset((0,)) for block in forced.values())
    names = [str(s) for s in (q0, q1, r)]
    at = {s: space.names.index(s) for s in names}
    for point in ((Fraction(1, 3), 1, 0), (1, Fraction(2, 5), 1), (1, 1, Fraction(1, 2))):  # the cell's points
        values = [Fraction(0)] * len(space.names)
        for name, v in zip(names, point):
            values[at[name]] = Fraction(v)
        assert all(space.evaluate(atom, values) == 0 for atom in forced)  # sound: zero wherever the cell holds
    assert vanishing_terms(conditions(sp.Rational(1, 2))) == {}
    assert vanishing_terms(conditions(1, [(q0 - 1, -1), (r, 1)])) is None


def test_an_equality_no_interior_point_meets_empties_the_cell_and_a_look_alike_stays():
    """``d·p + (1 − d)(1 − p) = 0`` with ``0 < d, p < 1`` has no point: both products are positive (the certificate
    ``d·p + (1 − d)(1 − p) − g ≡ 0`` for ``g = 2dp − d − p + 1``), though the linear relaxation has one. The
    look-alike ``3dp − 2d − p + 1 = 0``, ``d·p + (1 − d)(1 − p) − d(1 − p)`` with a negative term, holds at
    ``d = 3/5``, ``p = 1/4`` (hand check: 9/20 − 24/20 − 5/20 + 20/20 = 0) and is not emptied; without the strict
    bounds the first holds at ``d = 1, p = 0`` and only forces ``d·p = 0`` and ``(1 − d)(1 − p) = 0``."""
    space = Space(2, [(0,), (1,)], [()])
    d, p = (space.row("p", key)[0].value.numer for key in ((0,), (1,)))
    interior = [(d, 1), (d - 1, -1), (p, 1), (p - 1, -1)]
    def cell(equality, bounds):
        signs = {normalise(equality)[1]: frozenset((0,))}
        signs.update({normalise(a)[1]: frozenset((s,)) for a, s in bounds})
        return Reduced.of(signs, space)
    empty = cell(d * p + (1 - d) * (1 - p), interior)
    assert empty.equalities and empty.feasible(LinearFeasibility(space))  # the LP alone cannot refute it
    assert vanishing_terms(empty) is None
    look_alike = cell(d * p + (1 - d) * (1 - p) - d * (1 - p), interior)
    at = [Fraction(0)] * len(space.names)
    at[space.names.index(str(d))], at[space.names.index(str(p))] = Fraction(3, 5), Fraction(1, 4)
    assert all(space.evaluate(a, at) == 0 for a in look_alike.equalities)
    assert vanishing_terms(look_alike) == {}
    forced = vanishing_terms(cell(d * p + (1 - d) * (1 - p), []))
    assert set(forced) == {normalise(d * p)[1], normalise((1 - d) * (1 - p))[1]}


@pytest.mark.slow
def test_khisti_is_is_proved_at_two_tokens_and_its_control_refuted():
    """Khisti et al.'s rule under k-models drafting (two symbolic draft models) at V = 2: every cell's identity holds
    or the cell is empty (two need ``p_1(0)p_2(0) + p_1(1)p_2(1) = 0`` with interior rows: the certificate above);
    the control, SpS against draft model 0's row, REFUTED with a witness the exact engine calls LOSSY (4 s + 2 s)."""
    proof = prove("khisti-is", ONE_LEVEL, "k-models", 2)
    assert proof.verdict == "PROVED" and proof.cells and all(c.holds for c in proof.cells)
    refuted = prove("tests.plugins.khisti_row0:khisti_row0", ONE_LEVEL, "k-models", 2)
    assert refuted.verdict == "REFUTED" and refuted.witness.certify().tvd > 0


def test_expected_accepted_closed_forms_match_the_papers_worked_example_and_the_exact_engine():
    """Sun et al.'s toy pair (context-independent, M_q(A) = 1/3, M_p(A) = 2/3, γ = 2): token verification 10/9,
    block verification 11/9, the full-information coupling 12/9 (the paper's numbers), each equal to the exact
    engine's E[τ] for tv-sps, bv and greedy-bv; and on random exact rows of a depth-2 chain at V = 3 every form
    equals the exact engine's E[τ] for every rule naming it in the registry."""
    chain = make_topology("chain", 2, 1)
    toy = TableModel(2, {None: [Fraction(2, 3), Fraction(1, 3)]}, {None: [Fraction(1, 3), Fraction(2, 3)]})
    for name, paper in (("tv-sps", Fraction(10, 9)), ("bv", Fraction(11, 9)), ("greedy-bv", Fraction(12, 9))):
        general, context_free = FORMS[VERIFIERS[name].chain_expectation]
        assert general.expected_accepted(toy, 2) == paper == round_law(toy, FixedShape(chain, "iid"),
                                                                       name).expected_accepted()
        if context_free is not None:
            assert context_free.expected_accepted(toy, 2) == paper
    rng = random.Random(4)
    def row():
        weights = [rng.randint(0, 5) for _ in range(3)]
        weights[rng.randrange(3)] += 1
        return [Fraction(w, sum(weights)) for w in weights]
    contexts = [(), (0,), (1,), (2,)]
    rows = TableModel(3, {c: row() for c in contexts}, {c: row() for c in contexts + [(a, b) for a in range(3)
                                                                                    for b in range(3)]})
    for name, spec in VERIFIERS.items():
        if spec.chain_expectation:
            scheme = spec.lossless_under[0]
            law = round_law(rows, FixedShape(chain, scheme), name)
            assert FORMS[spec.chain_expectation][0].expected_accepted(rows, 2) == law.expected_accepted(), name


def test_prove_checks_expected_accepted_term_by_term_and_a_wrong_form_fails():
    """On a chain the proof checks E[τ] against the rule's closed form on every cell (every pair of rows, and the
    context-independent form for token verification); on a depth-2 chain token verification checked against block
    verification's form fails (on context-independent rows: BV keeps prefixes SpS rejects), against its own holds."""
    proof = prove("tv-sps", CHAIN, "iid", 2)
    assert [e.holds for e in proof.expectations] == [True, True]
    assert [e.rows for e in proof.expectations] == ["every pair of rows", "context-independent rows"]
    shared = Space.context_free(2)  # Sun et al.'s toy pair is such a point: there BV's 11/9 exceeds SpS's 10/9
    view, feasible, drafter = SymbolicView(shared), LinearFeasibility(shared), FixedShape(make_topology("chain", 2, 1),
                                                                                          "iid")
    rounds = run_paths(shared, lambda rng: speculate(view, drafter, VERIFIERS["tv-sps"].fn, rng).path, feasible,
                       "tv-sps")
    def check(form: str):
        return _expectation(FORMS[form][0], "context-independent rows", rounds, shared, feasible, 2).holds
    assert check("token") and not check("block")


def test_rules_the_symbolic_run_cannot_follow_get_a_typed_error_and_kseq_is_undecided():
    kseq = prove("tv-kseq", ONE_LEVEL, "iid", 2)
    assert kseq.verdict == "UNDECIDED" and "ρ*" in kseq.reason
    with pytest.raises(SymbolicError, match="flow"):
        prove("tv-opt", ONE_LEVEL, "iid", 2)
    with pytest.raises(SymbolicError, match="irrational"):
        prove("bug-dyspec-printed", ONE_LEVEL, "iid", 2)


def _recheck(certificate: dict, subject: str, topology, trials: int, seed: int) -> int:
    """A second program: parse the certificate's rows and cells with sympy, draw random exact points of the domain
    (rows of small integer weights, zeros included), find for every output sequence the cell whose sign
    conditions hold there — exactly one — and compare with the exact engine's completed law at that point: equal
    to the target where the cell's identity holds. Returns how many (point, sequence) pairs in failing cells the
    engine found off the target."""
    symbols = {name: sp.Symbol(name) for name in certificate["symbols"]}
    rows = {key: [sp.sympify(v, locals=symbols) for v in row] for key, row in certificate["rows"].items()}
    cells = [(tuple(c["sequence"]), [(sp.sympify(a, locals=symbols), set(b)) for a, b in c["signs"].items()],
              c["identity_holds"]) for c in certificate["cells"]]
    rng = random.Random(seed)
    vocab = certificate["config"]["vocab"]
    found_off = 0
    for _ in range(trials):
        point = {}
        for row in rows.values():
            weights = [rng.choice([0, 1, 2, 3]) for _ in row]
            weights[rng.randrange(len(row))] += 1
            for entry, w in zip(row[:-1], weights[:-1]):
                point[entry] = sp.Rational(w, sum(weights))
        table: dict = {"p": {}, "q": {}}
        for key, row in rows.items():
            name, ctx = key[0], key[2:-1]
            context = () if ctx == "root" else tuple(int(t) for t in ctx.split(","))
            table[name][context] = [Fraction(str(v.subs(point))) for v in row]
        law = round_law(TableModel(vocab, table["p"], table["q"]), FixedShape(topology, "iid"), subject)
        mine, target = law.completed(), law.target()
        for seq in {c[0] for c in cells}:
            matching = [holds for s, signs, holds in cells
                        if s == seq and all(int(sp.sign(a.subs(point))) in b for a, b in signs)]
            assert len(matching) == 1, (seq, point)  # a sequence's cells partition the space
            agrees = mine.get(seq, 0) == target.get(seq, 0)
            if matching[0]:
                assert agrees, (seq, point)
            found_off += not agrees
    return found_off


@pytest.mark.slow
def test_written_certificate_is_rechecked_independently():
    """PROVED tv-rrs: at 12 random exact points every sequence lies in exactly one cell of the certificate and the
    exact engine's law equals the target there. The same re-check on the REFUTED control's certificate finds
    sequences off the target, all of them in cells the certificate marks failing."""
    proof = json.loads(json.dumps(prove("tv-rrs", ONE_LEVEL, "iid", 2).to_json()))
    assert _recheck(proof, "tv-rrs", ONE_LEVEL, trials=12, seed=1) == 0
    control = json.loads(json.dumps(prove("bug-residual-q", ONE_LEVEL, "iid", 2).to_json()))
    assert _recheck(control, "bug-residual-q", ONE_LEVEL, trials=12, seed=1) > 0


@pytest.mark.slow
def test_prove_stops_at_its_timeout_naming_the_field():
    """A proof too large for its wall-clock limit ends with exit 2 and the field ``timeout``, not a hang."""
    run = subprocess.run([sys.executable, "-m", "specproof.cli", "prove", "--verifier", "lv-rrs", "--vocab", "3",
                          "--timeout", "1"], capture_output=True, text=True)
    assert run.returncode == 2 and "timeout" in run.stderr, run.stdout + run.stderr


def test_proof_table_covers_every_symbolic_rule_under_each_scheme_and_renders_its_rows():
    """``specproof prove-table`` (reports/proofs.md) has a case for every built-in lossless rule the symbolic run can
    follow, under every fixed-shape scheme the rule is lossless under, and one refuting case per control it can
    run; a case's row carries its verdict (or the typed error's reason) into the table."""
    from exact.prove.proof_table import FIXED_SCHEMES, Case, cases, run_case, table_markdown
    table = cases()
    covered = {(c.verifier, c.drafting) for c in table if c.expect == "PROVED"}
    refuted = {c.verifier for c in table if c.expect == "REFUTED"}
    for name, spec in VERIFIERS.items():
        if spec.not_symbolic or spec.undecided_symbolic or spec.float_only:
            continue
        if spec.is_control:
            assert name in refuted, name
            continue
        for scheme in set(spec.lossless_under) & set(FIXED_SCHEMES):
            assert (name, scheme) in covered, (name, scheme)
    rows = [run_case(Case("match", "one level, 2 children", 2), 60), run_case(Case("tv-gr", "chain, depth 1", 2), 60)]
    assert [r["verdict"] for r in rows] == ["PROVED", "error"] and "flow" in rows[1]["reason"]
    text = table_markdown(rows, "specproof prove-table", 60)
    assert "**PROVED**" in text and "tv-gr (chain, depth 1, V = 2): error" in text
