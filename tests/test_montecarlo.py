"""The Monte Carlo engine: counter streams, batched paths against the reference, means against exact E[τ],
the statistics it reports, and determinism across batch sizes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from exact import round_law
from simulator.montecarlo.batched import BATCHED, batched_rounds, has_batched_path
from simulator.montecarlo.context_rows import ContextRows
from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError
from simulator.models import RandomRationalModel, SyntheticModel
from simulator.montecarlo.engine import (Histogram, encode, empirical_tvd, monte_carlo, run_trials, target_table)
from simulator.randomness import CounterRandomness, counter_uniform, counter_uniforms
from simulator.montecarlo.statistics import chi_square, detectable_tvd, power_lower_bound
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS

from oracles import target_joint


def _splitmix64_uint64(seed: int, trials: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The counter stream written directly in numpy's uint64 (the oracle of the int64 implementation)."""
    golden = np.uint64(0x9E3779B97F4A7C15)

    def mix(z):
        z = z ^ (z >> np.uint64(30))
        z = z * np.uint64(0xBF58476D1CE4E5B9)
        z = z ^ (z >> np.uint64(27))
        z = z * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    with np.errstate(over="ignore"):
        key = mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * golden + golden)
        z = mix(mix((trials.astype(np.uint64) << np.uint64(20)) | index.astype(np.uint64)) + key)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def test_counter_stream_is_bit_identical_on_numpy_and_torch_and_equal_to_uint64_splitmix():
    rng = np.random.default_rng(3)
    trials, index = rng.integers(0, 2**43, 5000), rng.integers(0, 2**20, 5000)
    for seed in (0, 5, 2**40 + 3, 2**63 + 7, 2**64 - 1):
        expected = _splitmix64_uint64(seed, trials, index)
        assert np.array_equal(counter_uniform(seed, trials, index), expected)
        torch = pytest.importorskip("torch")
        got = counter_uniform(seed, torch.from_numpy(trials), torch.from_numpy(index))
        assert got.dtype == torch.float64 and np.array_equal(got.numpy(), expected)


def test_counter_streams_are_uniform_independent_and_batch_free():
    u = counter_uniforms(5, np.arange(20_000), 0, 16)
    assert stats.kstest(u.ravel(), "uniform").pvalue > 1e-3
    # Neighbouring indices and neighbouring trials are uncorrelated (|r| < 5 sigma of 1/sqrt(n)).
    for a, b in ((u[:, 0], u[:, 1]), (u[:-1, 0], u[1:, 0])):
        assert abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(len(a))
    # A trial's numbers do not depend on which other trials share the call, nor on where the read starts.
    assert np.array_equal(counter_uniforms(5, np.array([17]), 0, 16)[0], u[17])
    assert np.array_equal(counter_uniforms(5, np.array([17]), 3, 5)[0], u[17, 3:8])
    rng = CounterRandomness(5, 17)
    assert [rng.bernoulli(1.0) for _ in range(16)] and rng.consumed == 16
    assert not np.array_equal(counter_uniforms(6, np.array([17]), 0, 16)[0], u[17])


CONFIGS = [(4, "complete", 2, 2), (5, "tapered", 3, 3), (3, "multi-chain", 3, 2), (2, "chain", 4, 1),
           (6, "explicit", None, None)]


@pytest.mark.slow
@pytest.mark.parametrize("name", BATCHED)
@pytest.mark.parametrize("vocab,shape,depth,branching", CONFIGS)
def test_batched_path_returns_the_reference_outcome_of_every_trial(name, vocab, shape, depth, branching):
    model = SyntheticModel(vocab, rho=0.3, seed=vocab)
    topology = (make_topology("explicit", parents=[-1, 0, 0, 0, 1, 3, 3, 4]) if shape == "explicit"
                else make_topology(shape, depth, branching))
    if not has_batched_path(name, "iid", vocab, topology):
        pytest.skip(f"{name} is not defined on {shape} drafts")
    trials = 300 if name == "lv-gr" else 1500  # lv-gr's reference path solves GR per node and trial
    accepted, sequences = run_trials(model, FixedShape(topology), VERIFIERS[name].fn, 11, range(trials))
    batched_accepted, codes = batched_rounds(model, topology, "iid", name, 11, np.arange(trials))
    assert np.array_equal(batched_accepted, accepted)
    assert np.array_equal(codes, encode(sequences, vocab))


@pytest.mark.slow
def test_batched_paths_match_the_reference_on_random_explicit_trees():
    from exact.instances import random_shape
    rng = np.random.default_rng(0)
    for i in range(8):
        vocab, topology = int(rng.integers(2, 5)), random_shape(rng, "explicit", 7)
        model = SyntheticModel(vocab, rho=float(rng.random()), tau_p=0.5 + float(rng.random()), seed=i)
        rows = ContextRows(model, topology.height)
        for name in (n for n in BATCHED if has_batched_path(n, "iid", vocab, topology)):
            accepted, sequences = run_trials(model, FixedShape(topology), VERIFIERS[name].fn, i, range(150))
            batched = batched_rounds(model, topology, "iid", name, i, np.arange(150), rows)
            assert np.array_equal(batched[0], accepted) and np.array_equal(batched[1], encode(sequences, vocab))


def test_batched_gr_solves_lazily_where_a_dense_table_would_not_fit():
    """9^3 candidate tuples per context: GR's flows are built per (context, tuple) reached, still exactly."""
    model, topology = SyntheticModel(9, rho=0.4, seed=3), make_topology("complete", 2, 3)
    accepted, sequences = run_trials(model, FixedShape(topology), VERIFIERS["tv-gr"].fn, 2, range(300))
    batched = batched_rounds(model, topology, "iid", "tv-gr", 2, np.arange(300))
    assert np.array_equal(batched[0], accepted) and np.array_equal(batched[1], encode(sequences, 9))


def test_the_draft_drawn_on_demand_is_the_reference_draft_and_token_verification_reads_only_its_path():
    """Monte Carlo's draft draws a token when an array rule first reads it (:class:`IidDraft`). Every token read,
    lazily or with the whole tree, is the reference drafter's on the same counter stream; token verification
    (RRS on complete(b = 2, H = 3): 14 draft tokens) draws only the children of the nodes on its path, at most
    ``2·H`` per trial, and still returns the reference's outcome of every trial."""
    from simulator.models import ModelView
    from simulator.montecarlo.batched import IidDraft
    from simulator.verifiers.batched.frame import Batch, CounterStream, TreeShape
    model, topology, trials = SyntheticModel(4, rho=0.3, seed=1), make_topology("complete", 3, 2), 400
    rows = ContextRows(model, topology.height)
    drawn, sample = [], rows.sample

    def counted(which, ids, u):
        drawn.extend(ids.tolist() if which == "p" else ())
        return sample(which, ids, u)

    rows.sample = counted
    stream = CounterStream(5, np.arange(trials))
    draft = IidDraft(topology.parents, rows, stream)
    shape = TreeShape(topology.parents, np, None)
    node, y = VERIFIERS["tv-rrs"].array_rule.run(Batch(shape, draft, rows, stream))
    assert 0 < len(drawn) <= 2 * topology.height * trials < 14 * trials
    view = ModelView(model, "float")
    reference = [FixedShape(topology).draft(view, CounterRandomness(5, t)).tree for t in range(trials)]
    for t in range(trials):  # the path the array rule walked, and its tokens
        path = [int(node[t])]
        while path[-1]:
            path.append(topology.parents[path[-1]])
        for v in path[:-1]:
            assert draft._ids[v, t] == draft._ids[topology.parents[v], t] * 4 + reference[t].tokens[v] + 1
    whole = IidDraft(topology.parents, rows, CounterStream(5, np.arange(trials)))
    assert [list(map(int, row[1:])) for row in whole.tokens] == [list(r.tokens[1:]) for r in reference]
    accepted, sequences = run_trials(model, FixedShape(topology), VERIFIERS["tv-rrs"].fn, 5, range(trials))
    assert np.array_equal(shape.depths[node], accepted)


@pytest.mark.parametrize("name", ["tv-rrs", "lv-gr"])
def test_batched_path_does_not_depend_on_batch_size(name):
    model, topology = SyntheticModel(5, seed=2), make_topology("complete", 3, 2)
    rows = ContextRows(model, 3)
    run = 10**6  # the run's trials per seed: large enough that lv-gr warm-starts GR at most contexts
    whole = batched_rounds(model, topology, "iid", name, 4, np.arange(3000), rows, run)
    for shared in (rows, None):  # per-context tables (GR's mass grid among them) shared, or built afresh per part
        parts = [batched_rounds(model, topology, "iid", name, 4, np.arange(a, b), shared or ContextRows(model, 3), run)
                 for a, b in ((1234, 3000), (0, 7), (7, 1234))]
        assert np.array_equal(whole[0], np.concatenate([p[0] for p in parts[1:] + parts[:1]]))
        assert np.array_equal(whole[1], np.concatenate([p[1] for p in parts[1:] + parts[:1]]))


def test_set_probabilities_equal_the_sum_over_tuples():
    """P(set X = S) for k i.i.d. draws, by its closed form per set, against the sum over all V^k tuples."""
    import itertools
    from simulator.verifiers.batched.gr_stacks import set_probabilities, token_sets
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(4), size=5) * (rng.random((5, 4)) > 0.2)
    p /= p.sum(axis=1, keepdims=True)
    for k in range(1, 5):
        rows, _ = token_sets(4, k)
        brute = np.zeros((5, len(rows.member)))
        index = {tuple(np.flatnonzero(m)): r for r, m in enumerate(rows.member)}
        for t in itertools.product(range(4), repeat=k):
            brute[:, index[tuple(sorted(set(t)))]] += np.prod(p[:, list(t)], axis=1)
        assert np.allclose(set_probabilities(p, k), brute, rtol=1e-14, atol=0), k
        assert np.allclose(set_probabilities(p, k).sum(axis=1), 1.0, rtol=1e-14)


def _lv_gr_problems(rng: np.random.Generator, vocab: int, k: int, count: int) -> tuple:
    """LV's transformed GR problems at random masses on :func:`token_sets` rows: ``(rows, probs, reject, q, inner)``,
    the last token LV's undrafted dummy."""
    from simulator.verifiers.batched.gr_stacks import set_probabilities, token_sets
    from simulator.verifiers.flows import alpha_star
    rows, _ = token_sets(vocab, k)
    probs, reject, q, inner = [], [], [], []
    for _ in range(count):
        p = np.r_[rng.dirichlet(np.ones(vocab - 1)), 0.0]
        mass = rng.uniform(0.2, 1.0)
        q_ext = np.r_[mass * rng.dirichlet(np.ones(vocab - 1)), 1 - mass]
        _, star = alpha_star(tuple(p), tuple(q_ext), k)
        inside = np.isin(np.arange(vocab), sorted(star))
        probs.append(set_probabilities(p[None], k)[0])
        reject.append((rows.member <= inside).all(axis=1))
        q.append(q_ext)
        inner.append(inside)
    return (rows, *map(np.array, (probs, reject, q, inner)))


def test_gr_solver_gives_an_instance_the_same_theta_in_any_stack():
    # LV's transformed GR problems at random masses, solved as one stack and one by one: equal bit for bit, θ and
    # the flow the solver hands back, which is also the flow evaluated afresh at θ (also bit for bit).
    from simulator.verifiers.gr_solver import gr_dual_batch, routed_flow, routed_sums
    rows, probs, reject, q, inner = _lv_gr_problems(np.random.default_rng(5), 7, 2, 40)
    stacked, flow = gr_dual_batch(rows, probs, reject, q, inner)
    for m in range(len(q)):
        alone = gr_dual_batch(rows, probs[m:m + 1], reject[m:m + 1], q[m:m + 1], inner[m:m + 1])
        assert np.array_equal(alone[0][0], stacked[m]) and np.array_equal(alone[1][0], flow[m])
    weights = np.exp(stacked)
    share = probs / routed_sums(rows, weights, reject, inner, 1.0)
    assert np.array_equal(routed_flow(rows, share, weights, reject, inner), flow)
    assert not np.array_equal(routed_flow(rows, share, weights, reject, ~inner), flow)  # the control: H* swapped
    # BLAS sums a partial tile of rows in another order than a full one: stacks of every size and offset
    rows, probs, reject, q, inner = _lv_gr_problems(np.random.default_rng(6), 15, 2, 300)
    stacked, flow = gr_dual_batch(rows, probs, reject, q, inner)
    for at in (slice(1, 4), slice(3, 36), slice(5, 155), slice(7, 300)):
        part = gr_dual_batch(rows, probs[at], reject[at], q[at], inner[at])
        assert np.array_equal(part[0], stacked[at]) and np.array_equal(part[1], flow[at])


def test_gr_hessian_of_two_token_rows_is_the_general_sum_bit_for_bit():
    """With two tokens a row (k = 2) the solver's Hessian reads each pair's one row once; it must equal the
    general sum over the rows routing to both tokens bit for bit, at random points. The control: the same
    shortcut on three-token rows (k = 3), where a row holding two inner tokens and an outside one routes to the
    outside one only, gives another Hessian."""
    from dataclasses import replace
    from simulator.verifiers.gr_solver import GR_BOUND, _Stack
    rng = np.random.default_rng(11)
    for k, shortcut_holds in ((2, True), (3, False)):
        rows, probs, reject, q, inner = _lv_gr_problems(rng, 6, k, 30)
        assert rows.two_token == (k == 2)
        theta = np.where(inner, rng.uniform(-3, 3, q.shape), -rng.uniform(0, 3, q.shape))
        hessians = [_Stack(replace(rows, two_token=flag), probs, reject, inner, q, np.where(inner, GR_BOUND, 0.0),
                           np.zeros(q.shape, dtype=bool), theta).hessian() for flag in (True, False)]
        assert np.array_equal(*hessians) == shortcut_holds, k


def _lv_gr_nodes(rows: ContextRows, rng: np.random.Generator, k: int, count: int, masses=None) -> tuple:
    """LV's GR problems as the array rule hands them over (``lv_gr_node``'s arguments without the grid): rows of
    random contexts of ``rows`` at random score masses (or ``masses``), random candidates."""
    vocab = rows.vocab
    ids = rng.integers(0, len(rows.p), count)
    mass = rng.uniform(0.05, 1.0, count) if masses is None else masses
    p = np.concatenate([rows.p[ids], np.zeros((count, 1))], axis=1)
    q = np.concatenate([mass[:, None] * rows.q[ids], (1 - mass)[:, None]], axis=1)
    cands = rng.integers(0, vocab, (count, k))
    return p, q, cands, np.stack([ids.astype(float), mass], axis=1)


@pytest.mark.parametrize("k, scale", [(2, 1e9), (3, 1e9), (2, 400.0), (3, 400.0)])
def test_lv_gr_warm_starts_give_grs_solution_to_the_solvers_tolerance_and_do_not_depend_on_the_batch(k, scale):
    """Layer Verification's GR problems start Newton from a grid of masses per context (MassGrid), the finest grid
    where the run (``scale``: trials times nodes) brings many problems to a context, coarser ones or none where it
    brings fewer (at 400, grids of several sizes, and cold starts at the deepest contexts). The
    solution must be GR's to the solver's tolerance: flows within 1e-11 of the cold start's (the tolerance is
    1e-12 per token, in flow units) — the control, Newton stopped at a loose tolerance, leaves the same comparison
    failing. A coarse grid solves only points of the finest grid at its own steps. On a grid mass, the start is
    the grid point's own cold solution: bit for bit the cold result. A problem's numbers do not depend on what
    else is in the batch or was solved before (a fresh grid, a shared one), and a run too small for a grid starts
    cold wherever it is, solving no grid point."""
    from simulator.verifiers import gr_solver
    from simulator.verifiers.batched.gr_stacks import GRID_STEPS, MassGrid, grid_steps, lv_gr_node
    rows = ContextRows(SyntheticModel(6, rho=0.4, seed=k), 3)
    rng = np.random.default_rng(k)
    p, q, cands, problem = _lv_gr_nodes(rows, rng, k, 600)
    chance = np.prod(p[np.arange(len(p))[:, None], cands], axis=1)[:, None]  # P(X = cands)

    def solve(grid, at=slice(None)):
        return lv_gr_node(p[at], q[at], cands[at], problem[at], grid, scale)

    grid = MassGrid(rows.p, rows.q, rows.reach())
    cold, warm = solve(None), solve(grid)
    assert np.abs(chance * (warm[0] - cold[0])).max() <= 1e-11 and np.abs(warm[1] - cold[1]).max() <= 1e-11
    (points,) = grid._points.values()
    context, step = np.divmod(np.flatnonzero(points.slot >= 0), GRID_STEPS + 1)
    steps = grid_steps(scale * rows.reach()[context])
    assert (steps > 0).all() and (step % (GRID_STEPS // steps) == 0).all()
    assert set(steps.tolist()) == {GRID_STEPS} if scale > 1e6 else len(set(steps.tolist())) >= 2
    loose = gr_solver.GR_NEWTON_TOLERANCE
    try:
        gr_solver.GR_NEWTON_TOLERANCE = 1e-3
        rough = solve(MassGrid(rows.p, rows.q, rows.reach()))
    finally:
        gr_solver.GR_NEWTON_TOLERANCE = loose
    assert np.abs(rough[1] - cold[1]).max() > 1e-9
    shared = MassGrid(rows.p, rows.q, rows.reach())
    solve(shared, slice(300, None))
    for at in (slice(0, 1), slice(0, 300), slice(250, 280)):
        for grid in (MassGrid(rows.p, rows.q, rows.reach()), shared):
            part = solve(grid, at)
            assert np.array_equal(part[0], warm[0][at]) and np.array_equal(part[1], warm[1][at])
    # A run too small for any grid solves nothing and starts cold, even where another run left grid points.
    small = lv_gr_node(p, q, cands, problem, shared, 0.0)
    assert all(np.array_equal(a, b) for a, b in zip(small, cold)) and shared.solved > 0
    fresh = MassGrid(rows.p, rows.q, rows.reach())
    lv_gr_node(p, q, cands, problem, fresh, 0.0)
    assert fresh.solved == 0
    if scale < 1e6:
        return
    on_grid = rng.integers(1, GRID_STEPS + 1, 200) / GRID_STEPS
    p, q, cands, problem = _lv_gr_nodes(rows, rng, k, 200, on_grid)
    for cold_part, warm_part in zip(solve(None), solve(MassGrid(rows.p, rows.q, rows.reach()))):
        assert np.array_equal(cold_part, warm_part)


def test_gr_solver_falls_back_to_lbfgsb_and_hands_back_the_flow_at_its_theta(monkeypatch):
    """An instance Newton stops short on (here: every one, with one iteration allowed) is solved by L-BFGS-B; the
    flow handed back is then evaluated at L-BFGS-B's θ (bit for bit a fresh evaluation) and agrees with Newton's
    solution to L-BFGS-B's accuracy. The control: the flow at L-BFGS-B's θ moved by 1e-3, which the same
    comparison rejects."""
    from simulator.verifiers import gr_solver
    rows, probs, reject, q, inner = _lv_gr_problems(np.random.default_rng(8), 6, 2, 12)
    newton, newton_flow = gr_solver.gr_dual_batch(rows, probs, reject, q, inner)
    monkeypatch.setattr(gr_solver, "GR_NEWTON_ITERATIONS", 1)
    theta, flow = gr_solver.gr_dual_batch(rows, probs, reject, q, inner)
    assert not np.array_equal(theta, newton)  # L-BFGS-B's θ, not Newton's

    def flow_at(theta):
        weights = np.exp(theta)
        share = probs / gr_solver.routed_sums(rows, weights, reject, inner, 1.0)
        return gr_solver.routed_flow(rows, share, weights, reject, inner)

    assert np.array_equal(flow_at(theta), flow)
    assert np.abs(flow - newton_flow).max() <= 1e-6
    assert np.abs(flow_at(theta + 1e-3) - newton_flow).max() > 1e-6


def test_gr_theta_slope_is_the_derivative_in_the_capacities():
    """dθ/ds for capacities s·q (the grid's tangents) against central differences of solutions at s ± h, on the
    coordinates inside their bounds whose H* stays put; the control, the slope for capacities scaled on one token
    only, differs."""
    from simulator.verifiers.gr_solver import GR_BOUND, gr_dual_batch, theta_slope
    rows, probs, reject, q, inner = _lv_gr_problems(np.random.default_rng(3), 7, 2, 40)
    theta, _ = gr_dual_batch(rows, probs, reject, q, inner)
    slope = theta_slope(rows, probs, reject, q, inner, theta)
    h = 1e-5
    up, down = (gr_dual_batch(rows, probs, reject, (1 + d) * q, inner)[0] for d in (h, -h))
    free = (theta > -GR_BOUND + 1) & (theta < np.where(inner, GR_BOUND, 0.0) - 1e-3) & (q > 0)
    difference = (up - down) / (2 * h)
    assert free.sum() > 100
    assert np.allclose(slope[free], difference[free], rtol=1e-3, atol=1e-6)  # h² θ''': up to 5e-5 where θ is stiff
    one = np.zeros_like(q)
    one[:, 0] = q[:, 0]
    assert not np.allclose(theta_slope(rows, probs, reject, one, inner, theta)[free], difference[free],
                           rtol=1e-3, atol=1e-6)


def test_batched_categorical_is_the_shared_rule_at_every_boundary():
    """Batched draws (weights given, or the model's rows by their running sums) pick what
    categorical_from_uniform picks, including zero weights, u = 0, u = 1 (the last positive weight) and u
    exactly at a running sum."""
    from simulator.array_ops import categorical
    from simulator.randomness import categorical_from_uniform
    rng = np.random.default_rng(9)
    weights = rng.random((4000, 6)) * (rng.random((4000, 6)) < 0.6)
    weights[:, 0] += (weights.sum(axis=1) == 0)  # some mass in every row
    running = np.cumsum(weights, axis=1)
    u = rng.random(4000)
    u[:400], u[400:800] = 0.0, 1.0
    u[800:1200] = running[800:1200, 2] / running[800:1200, -1]  # a threshold on a running sum
    expected = [categorical_from_uniform(float(x), list(w)) for x, w in zip(u, weights)]
    assert categorical(weights, u).tolist() == expected
    model = SyntheticModel(4, rho=0.2, seed=1)
    rows = ContextRows(model, 2)
    ctx = rng.integers(0, len(rows.p), 4000)
    assert rows.sample("p", ctx, u).tolist() == [categorical_from_uniform(float(x), list(rows.p[c]))
                                                 for x, c in zip(u, ctx)]
    streams = [CounterRandomness(3, t) for t in (5, 9)]  # the reference path's reads, in order
    assert counter_uniforms(3, np.array([5, 9]), 2, 4).tolist() == [
        [s._next_uniform() for _ in range(6)][2:] for s in streams]


def test_no_batched_path_is_a_typed_error():
    with pytest.raises(InvalidParameterError) as err:
        batched_rounds(SyntheticModel(3), make_topology("chain", 2), "iid", "greedy-bv", 0, np.arange(3))
    assert err.value.field == "verifier"


def test_target_table_equals_brute_force_joint():
    model = RandomRationalModel(3, seed=4)
    table = target_table(model, 2)
    for seq, prob in target_joint(model, 2).items():
        assert table[encode(np.array([seq]), 3)[0]] == pytest.approx(float(prob), abs=1e-15)
    assert table.sum() == pytest.approx(1.0, abs=1e-12)


def test_empirical_tvd_by_hand():
    table = np.array([0.5, 0.25, 0.25, 0.0])
    # Counts 2, 0, 1, 1 of 4: ½(|.5−.5| + |0−.25| + |.25−.25| + |.25−0|) = 0.25.
    assert empirical_tvd(Histogram.of(np.array([0, 0, 2, 3]), 4), table) == pytest.approx(0.25)
    # The same counts arriving in chunks, in another order, give the same histogram.
    chunks = Histogram(4)
    for part in (np.array([3]), np.array([0, 2]), np.array([0])):
        chunks.add(part)
    assert chunks.cells.tolist() == [0, 2, 3] and chunks.counts.tolist() == [2, 1, 1] and chunks.total == 4
    with pytest.raises(RuntimeError, match="outside"):  # a code past the table is an engine bug, not a count
        Histogram.of(np.array([4]), 4).total


@pytest.mark.parametrize("name,shape", [("tv-rrs", "complete"), ("tv-kseq", "tapered"), ("trv", "complete"),
                                        ("lv-rrs", "multi-chain"), ("greedy-bv", "chain")])
@pytest.mark.slow
def test_monte_carlo_mean_agrees_with_exact_expected_accepted(name, shape):
    # Vocab 3, depth 2: small enough for the exact engine. |mean − E[τ]| within 4 standard errors.
    topology = make_topology(shape, 2, 2)
    drafting = "iid"
    summary = monte_carlo(lambda s: SyntheticModel(3, seed=s), FixedShape(topology, drafting), name, VERIFIERS[name].fn,
                          seeds=2, trials=4000)
    for seed_result in summary.per_seed:
        exact = float(round_law(SyntheticModel(3, seed=seed_result["seed"]), FixedShape(topology, drafting),
                                name).expected_accepted())
        assert abs(seed_result["accept_len_mean"] - exact) < 4 * seed_result["accept_len_se"]
    assert not summary.test_rejects


def test_monte_carlo_test_rejects_a_control_it_has_the_power_for():
    # bug-accept-all on a depth-1 tree over 4 tokens: exact TVD on the first token far above what the test
    # detects at power 0.9 with 20,000 samples, so the combined test must reject.
    topology = make_topology("complete", 1, 2)
    summary = monte_carlo(lambda s: SyntheticModel(4, seed=s), FixedShape(topology), "bug-accept-all",
                          VERIFIERS["bug-accept-all"].fn, seeds=1, trials=20_000)
    law = round_law(SyntheticModel(4, seed=0), FixedShape(topology), "bug-accept-all")
    completed = law.completed()
    first = [sum(float(v) for s, v in completed.items() if s[0] == x) for x in range(4)]
    target = SyntheticModel(4, seed=0).q(())
    gap = 0.5 * sum(abs(a - b) for a, b in zip(first, target))
    assert gap > summary.detectable_tvd and summary.test_rejects


def test_power_bound_and_chi_square_calibration():
    # The bound at the detectable TVD is the stated power; a larger N detects a smaller TVD.
    d = detectable_tvd(10_000, 50, 1e-3, 0.9)
    assert power_lower_bound(10_000, 50, d, 1e-3) == pytest.approx(0.9, abs=1e-6)
    assert detectable_tvd(40_000, 50, 1e-3, 0.9) == pytest.approx(d / 2, rel=1e-6)  # ∝ 1/sqrt(N)
    # Under the null the false-alarm rate is about alpha: 400 tests at alpha 0.05 reject 20 ± 4.4·3.
    rng = np.random.default_rng(0)
    prob = np.array([0.4, 0.3, 0.2, 0.1])
    rejects = sum(chi_square(rng.multinomial(500, prob), prob, 0.05).rejects for _ in range(400))
    assert 20 - 14 <= rejects <= 20 + 14


@pytest.mark.slow
def test_mc_cli_writes_the_summary(tmp_path):
    from test_cli import run
    out = tmp_path / "mc.json"
    result = run(["mc", "--vocab", "4", "--depth", "2", "--verifier", "tv-rrs", "--seeds", "2", "--trials", "2000",
                  "--json", str(out)])
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())
    for key in ("accept_len_mean", "accept_len_se", "tvd", "baseline_tvd"):
        assert math.isfinite(summary[key])
    assert run(["mc", "--verifier", "tv-rrs", "--seeds", "0"]).returncode == 2


@pytest.mark.parametrize("name,shape", [("tv-kseq", "complete"), ("trv", "complete"), ("lv-gr", "tapered"),
                                        ("gbv", "multi-chain"), ("tv-gr", "complete")])
def test_monte_carlo_on_torch_gives_the_numpy_numbers(name, shape, torch_device):
    """`specproof mc --device`: the same array rules and counter streams on torch (its CPU, and a CUDA GPU where one
    is present), so every trial's outcome is the numpy run's, and the summaries are equal."""
    model = SyntheticModel(5, rho=0.4, seed=2)
    drafter = FixedShape(make_topology(shape, 3, 2))
    runs = [monte_carlo(lambda s: model, drafter, name, VERIFIERS[name].fn, 2, 3000, device=device)
            for device in (None, torch_device)]
    assert runs[0] == runs[1]


def test_an_unusable_device_names_the_field():
    pytest.importorskip("torch")
    with pytest.raises(InvalidParameterError) as err:
        monte_carlo(lambda s: SyntheticModel(3), FixedShape(make_topology("chain", 2)), "tv-rrs",
                    VERIFIERS["tv-rrs"].fn, 1, 100, device="no-such-device")
    assert err.value.field == "device"


def test_context_rows_in_bulk_are_the_models_rows_and_a_bad_row_is_named():
    """The synthetic model's rows computed for all contexts at once (``row_arrays``, a vectorised softmax) must be
    the numbers ``p(context)`` and ``q(context)`` give, bit for bit, at every context; a model without
    ``row_arrays`` goes row by row to the same numbers; a bad row from ``row_arrays`` is refused naming it."""
    from simulator.errors import InvalidDistributionError

    for model, height in ((SyntheticModel(4, rho=0.3, tau_p=0.6, tau_q=1.7, seed=5), 3), (SyntheticModel(15), 2)):
        rows = ContextRows(model, height)
        contexts = [tuple(int(d) for d in np.unravel_index(c, (model.vocab,) * k)) if k else ()
                    for k in range(height + 1) for c in range(model.vocab**k)]
        assert np.array_equal(rows.q, np.array([model.q(c) for c in contexts]))
        assert np.array_equal(rows.p, np.array([model.p(c) for c in contexts[: len(rows.p)]]))
        # the draft's probability of each context, token by token along its path
        reach = [math.prod(model.p(c[:i])[c[i]] for i in range(len(c))) for c in contexts[: len(rows.p)]]
        assert np.allclose(rows.reach(), reach, rtol=1e-14, atol=0)

    class RowByRow:
        def __init__(self, inner):
            self.inner, self.vocab = inner, inner.vocab
            self.p, self.q = inner.p, inner.q

    model = SyntheticModel(4, seed=2)
    assert np.array_equal(ContextRows(RowByRow(model), 2).q, ContextRows(model, 2).q)

    class Broken(SyntheticModel):
        def row_arrays(self, contexts):
            p, q = super().row_arrays(contexts)
            q[2, 1] = -0.25  # context (1,): after () and (0,) in level order
            return p, q

    with pytest.raises(InvalidDistributionError) as err:
        ContextRows(Broken(4), 2)
    assert err.value.field == 'q["1"][1]'


def test_derived_rows_are_the_chain_and_a_bad_name_is_refused_by_both_row_sources():
    """RRS's target after two rejections (``RrsTarget(2)``, the rows its array step names) must be ``norm((norm((q −
    p)_+) − p)_+)`` computed here by hand, the same in both row sources; rows no rule derives (``RrsTarget(-1)``,
    ``KseqRho(0)``, ``RrsTarget(True)``) and names that are not rows (``"r"``, ``("rrs", 2)``) are refused naming
    ``which``."""
    from simulator.verifiers.batched.frame import DenseRows
    from simulator.verifiers.single_step_arrays import KseqResidual, KseqRho, RrsTarget

    rows = ContextRows(SyntheticModel(5, rho=0.4, seed=3), 2)
    p, q = rows.p[3], rows.q[3]
    r1 = np.maximum(q - p, 0) / np.maximum(q - p, 0).sum()
    r2 = np.maximum(r1 - p, 0) / np.maximum(r1 - p, 0).sum()
    x = np.arange(5)
    assert np.allclose(rows.entry(RrsTarget(2), np.full(5, 3), x), r2, rtol=0, atol=1e-15)
    dense = DenseRows(rows.p[None, :4], rows.q[None, :4])
    assert np.array_equal(dense.entry(RrsTarget(2), np.full(5, 3), x), rows.entry(RrsTarget(2), np.full(5, 3), x))
    assert not np.allclose(rows.entry(RrsTarget(1), np.full(5, 3), x), r2)
    for which in (KseqRho(2), KseqResidual(2)):  # K-SEQ's residual reads its ρ* from the same source
        assert np.array_equal(dense.rows_of(which, np.arange(3)), rows.table(which)[:3])
    for bad in (lambda: RrsTarget(-1), lambda: KseqRho(0), lambda: RrsTarget(True)):
        with pytest.raises(InvalidParameterError) as err:
            bad()
        assert err.value.field == "which"
    for bad in ("r", ("rrs", 2)):
        for source in (rows, dense):
            for read in (source.entry, source.sample):
                with pytest.raises(InvalidParameterError) as err:
                    read(bad, np.full(5, 3), x if read is source.entry else np.full(5, 0.5))
                assert err.value.field == "which"
