"""Medusa's typical acceptance (``typical``, docs/lossy.md): its exact TVD against a hand derivation, Monte Carlo
against the exact law, and medusa-llm 0.1's own ``evaluate_posterior`` (``--adapter medusa``) against the rule.

The kernel tests run the module as shipped (``specproof fetch medusa-posterior``); they are skipped, saying so,
where it is not in the cache (the suite has no network)."""

from __future__ import annotations

import json
import math
import random
from fractions import Fraction as F

import pytest
from click.testing import CliRunner

from exact import certify, round_law
from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError, UndecidedComparisonError
from simulator.models import SyntheticModel, TableModel
from simulator.montecarlo.engine import run_trials
from simulator.real.fetch import cached
from simulator.trees import DraftTree, make_topology
from simulator.verifiers import VERIFIERS
from specproof.cli.app import main

TYPICAL = VERIFIERS["typical"]


def test_worked_instance_equals_the_hand_derivation():
    """V = 2, two i.i.d. children of the root drafted from (1/2, 1/2); the target's root row (4/5, 1/5), after
    token 0 (1/3, 2/3), elsewhere (1/2, 1/2); posterior_threshold 1/2, posterior_alpha 2/5.

    At the root ``H ≤ −(4/5 log 4/5 + 1/5 log 1/5) ≈ 0.5004 < log 2`` (the 1e-5 only lowers it), so
    ``2/5 · exp(−H) > 1/5``: token 1 fails, token 0 (4/5 > 1/2) passes. Drafts (0, ·) and (·, 0), probability
    3/4, accept token 0 and emit the argmax after it, 1: sequence (0, 1). Drafts (1, 1), 1/4, accept nothing and
    emit the root's argmax, 0, then the target completes: (0, 0) with 1/3, (0, 1) with 2/3. The law puts
    11/12 on (0, 1) and 1/12 on (0, 0); the target 8/15, 4/15, 1/10, 1/10; TVD = 11/12 − 8/15 + 0 = 23/60,
    E[τ] = 3/4, position 0's TVD 1/5."""
    model = TableModel(2, {None: [F(1, 2), F(1, 2)]}, {(): [F(4, 5), F(1, 5)], (0,): [F(1, 3), F(2, 3)],
                                                       None: [F(1, 2), F(1, 2)]})
    drafter = FixedShape(make_topology("complete", 1, 2))
    cert = certify(model, drafter, TYPICAL.build({"posterior_threshold": 0.5, "posterior_alpha": 0.4}))
    assert (cert.tvd, cert.expected_accepted, cert.position_tvd[0]) == (F(23, 60), F(3, 4), F(1, 5))
    assert not cert.lossless
    # the negative control of the entropy term: at the defaults (threshold 0.09) token 1 passes too, and every
    # draft is accepted: law (0, 1) 3/4, (1, 0) 1/4 (argmax after 1 of (1/2, 1/2) is 0), TVD 3/4 − 8/15 + 1/4 −
    # 1/10 = 11/30
    default = certify(model, drafter, TYPICAL.fn)
    assert (default.tvd, default.expected_accepted) == (F(11, 30), 1)


def test_lossless_where_nothing_passes_and_the_correction_is_sampled():
    """posterior_threshold 1 and posterior_alpha ≥ V: no token exceeds the threshold, and ``correction=sample``
    draws from the target: LOSSLESS; the shipped argmax at the same thresholds is not."""
    model = SyntheticModel(3, seed=2)
    drafter = FixedShape(make_topology("complete", 1, 2))
    knobs = {"posterior_threshold": 1, "posterior_alpha": 3}
    assert certify(model, drafter, TYPICAL.build({**knobs, "correction": "sample"})).lossless
    assert not certify(model, drafter, TYPICAL.build(knobs)).lossless


def test_monte_carlo_agrees_with_the_exact_law():
    """Synthetic pair V = 3, complete(b = 2, H = 2), temperature 1/2 (the squared rows renormalised: exact),
    thresholds that reject some drafts (E[τ] ≈ 1.52), a sampled correction: E[τ] and the likeliest sequence's
    probability within 3 standard errors."""
    model, drafter = SyntheticModel(3, rho=0.6, seed=1), FixedShape(make_topology("complete", 2, 2))
    verify = TYPICAL.build({"temperature": 0.5, "correction": "sample", "posterior_threshold": 0.45,
                            "posterior_alpha": 0.9})
    law = round_law(model, drafter, verify)
    trials = 4000
    accepted, sequences = run_trials(model, drafter, verify, 7, range(trials))
    mean, se = accepted.mean(), accepted.std(ddof=1) / math.sqrt(trials)
    assert abs(mean - float(law.expected_accepted())) < 3 * se, (mean, float(law.expected_accepted()), se)
    cell, prob = max(law.completed().items(), key=lambda item: item[1])
    seen = sum(tuple(row) == tuple(cell) for row in sequences.tolist()) / trials
    assert abs(seen - float(prob)) < 3 * math.sqrt(float(prob) * (1 - float(prob)) / trials), (seen, float(prob))


@pytest.mark.parametrize("knobs, field", [
    ({"posterior_threshold": -0.1}, "posterior_threshold"), ({"posterior_alpha": "x"}, "posterior_alpha"),
    ({"temperature": 0}, "temperature"), ({"correction": "greedy"}, "correction"), ({"alpha": 1}, "alpha")])
def test_bad_knobs_are_refused_naming_the_knob(knobs, field):
    with pytest.raises(InvalidParameterError) as err:
        TYPICAL.build(knobs)
    assert err.value.field == f"verifier-kwargs.{field}"


def test_an_exact_tie_of_the_entropy_threshold_is_refused():
    """Target row (1, 0): ``H = −log(1 + 1e-5)``, so ``exp(−H) = 100001/100000``, and posterior_alpha
    100000/100001 makes the entropy threshold exactly 1, the drafted token's probability; posterior_threshold 1
    leaves the decision to that comparison. (A decimal alpha cannot tie a row of V = 2 or 3: the smallest uniform
    row it ties has 2,400 tokens.)"""
    verify = TYPICAL.build({"posterior_threshold": 1, "posterior_alpha": F(100000, 100001)})
    tree = DraftTree((-1, 0), (None, 0))
    with pytest.raises(UndecidedComparisonError) as err:
        verify(tree, [[F(1, 2), F(1, 2)], None], [[F(1), F(0)], [F(1, 2), F(1, 2)]], None)
    assert err.value.field == "typical.q[]"
    # a hair above or below the tie is decided
    for alpha, node in ((F(100000, 100001) + F(1, 10**9), 0), (F(100000, 100001) - F(1, 10**9), 1)):
        out = TYPICAL.build({"posterior_threshold": 1, "posterior_alpha": alpha})(
            tree, [[F(1, 2), F(1, 2)], None], [[F(1), F(0)], [F(1, 2), F(1, 2)]], None)
        assert out[0] == node


def test_longest_prefix_then_likelihood_then_first():
    """Root row (1/2, 3/10, 1/5) with the defaults: every token passes (threshold 0.09). Two candidates of one
    token each: the likelier wins; on an exact tie, the first (torch.argmax); an accepted leaf emits the argmax
    of its row, the smallest index on a tie."""
    verify = TYPICAL.fn
    q = [[F(1, 2), F(3, 10), F(1, 5)], [F(1, 2), F(1, 2), F(0)], [F(0), F(1, 2), F(1, 2)]]
    assert verify(DraftTree((-1, 0, 0), (None, 1, 0)), None, q, None) == (2, 1)
    assert verify(DraftTree((-1, 0, 0), (None, 0, 1)), None, q, None) == (1, 0)
    tie = [[F(2, 5), F(2, 5), F(1, 5)], q[1], q[2]]
    assert verify(DraftTree((-1, 0, 0), (None, 1, 0)), None, tie, None) == (1, 0)


# medusa-llm 0.1's own evaluate_posterior through --adapter medusa

MEDUSA = "medusa.model.utils:evaluate_posterior"
#: node 2 is a leaf at depth 1: its candidate is padded
RAGGED = [-1, 0, 0, 1, 1]


def test_the_adapter_lays_out_medusas_candidates():
    """Paths [0, 1, 3], [0, 1, 4], [0, 2] (sorted by node ids, as Medusa's cartesian product orders them); the
    short one is padded with token 0 under a row giving it probability 0; knobs not given are Medusa's defaults;
    the answer (candidate 2, length 1) is node 2, and the token the argmax of its row."""
    torch = pytest.importorskip("torch")
    from simulator.kernels.medusa import medusa_adapter

    seen = {}

    def kernel(logits, candidates, **knobs):
        seen.update(logits=logits, candidates=candidates, knobs=knobs)
        return torch.tensor(2), torch.tensor(1)

    tree = DraftTree(RAGGED, (None, 2, 1, 0, 2))
    q = [[F(1, 2), F(1, 4), F(1, 4)], [F(1, 3), F(1, 3), F(1, 3)], [F(0), F(1, 4), F(3, 4)], *[[F(1, 3)] * 3] * 2]
    assert medusa_adapter(kernel, tree, None, q, 3, torch.float64) == (2, 2)
    assert seen["candidates"].tolist() == [[0, 2, 0], [0, 2, 2], [0, 1, 0]]
    probs = seen["logits"].softmax(-1)
    assert torch.allclose(probs[2, 0], torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64))
    assert probs[2, 1].tolist() == [0.0, 1.0, 0.0] and probs[0, 2].tolist() == [1 / 3] * 3  # padding; leaf row
    assert seen["knobs"] == {"temperature": 1.0, "posterior_threshold": 0.09, "posterior_alpha": 0.3}


def _random_table(seed: int, vocab: int = 3) -> dict:
    """Rows of random integer weights 0..97 (a zero a quarter of the time), for every context up to depth 2:
    exact likelihood ties between candidates, which Medusa's float sums of logs break by rounding, are unlikely."""
    rng = random.Random(seed)

    def row():
        weights = [0] * vocab
        while not any(weights):
            weights = [0 if rng.random() < 0.25 else rng.randint(1, 97) for _ in range(vocab)]
        return [f"{w}/{sum(weights)}" for w in weights]

    contexts = ["", *map(str, range(vocab)), *(f"{a},{b}" for a in range(vocab) for b in range(vocab))]
    return {"vocab": vocab, "p": {c: row() for c in contexts[:vocab + 1]} | {"*": row()},
            "q": {c: row() for c in contexts} | {"*": row()}}


@pytest.mark.parametrize("seed, knobs", [(1, ""), (9, "posterior_threshold=0.3,posterior_alpha=0.5"),
                                         (10, "posterior_threshold=0.25,posterior_alpha=0.6,temperature=0.5")])
def test_medusas_own_function_gives_the_rules_exact_tvd(tmp_path, seed, knobs):
    """The same pair, tree and knobs through Medusa's code (the adapter passes Medusa's defaults for knobs not
    given) and through the rule: the same exact TVD and E[τ]. Medusa decides in float64, so they are equal
    wherever no comparison is an exact tie or within rounding of one; the ragged tree pads node 2's candidate."""
    folder = cached("medusa-posterior")
    if folder is None:
        pytest.skip("Medusa's evaluate_posterior is not in the cache: run `specproof fetch medusa-posterior`")
    table = tmp_path / "table.json"
    table.write_text(json.dumps(_random_table(seed)))
    shape = ["--model", "table", "--table", str(table), "--parents", ",".join(map(str, RAGGED))]
    certs = []
    for subject in (["--verifier", "typical", *(["--verifier-kwargs", knobs] if knobs else [])],
                    ["--kernel", MEDUSA, "--adapter", "medusa", "--import-path", str(folder),
                     *(["--kernel-kwargs", knobs] if knobs else [])]):
        out = tmp_path / "cert.json"
        result = CliRunner().invoke(main, ["certify", *subject, *shape, "--json", str(out)])
        assert result.exit_code == 1, result.output
        certs.append(json.loads(out.read_text()))
    rule, kernel = certs
    assert F(rule["tvd"]) > 0 and F(kernel["tvd"]) == F(rule["tvd"])
    assert F(kernel["expected_accepted"]) == F(rule["expected_accepted"])
    if knobs:  # the comparison sees the knobs: at the defaults the rule's TVD is another
        model, drafter = TableModel.from_file(table), FixedShape(make_topology("explicit", parents=RAGGED))
        assert certify(model, drafter, TYPICAL.fn).tvd != F(kernel["tvd"])
