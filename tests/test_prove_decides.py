"""``specproof prove`` decides or says why (exact/prove/proof.py, specproof/cli/prove_commands.py, docs/proofs.md): the block
verification plugin whose residual takes the next position's weight (tests/plugins/bv_next_weight.py) REFUTED at
V = 3 on a depth-2 chain with a witness ``certify --case`` calls LOSSY; a random choice the rule cannot make (a
categorical of zero mass) pruned where it is reached with probability zero and a finding where it is not; the size
estimated up front and refused past ``--max-cells``; ``--timeout`` saying what was decided; UNDECIDED exit 4."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

from exact import certify
from exact.prove.proof import Tally
from exact.prove.prover import prove
from exact.reproducer import load_reproducer
from exact.subject import subject
from specproof.cli.app import main
from simulator.drafting import FixedShape
from simulator.errors import RandomnessError
from simulator.models import SyntheticModel, TableModel
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = "tests.plugins.bv_next_weight:bv_next_weight"
CHAIN = make_topology("chain", 1, 1)


def _cli(*args: str):
    """The command in this process (click's runner): exit code, both streams, and its wall-clock seconds."""
    started = time.perf_counter()
    result = CliRunner().invoke(main, list(args))
    return result, time.perf_counter() - started


def test_next_weight_plugin_is_refuted_at_three_tokens_and_certify_case_calls_the_witness_lossy(tmp_path):
    """The issue's plugin at V = 3 on a depth-2 chain: REFUTED (exit 1), its witness a reproducer that the ordinary
    engine certifies LOSSY through ``certify --case`` (exit 1) — while Sun et al.'s ``bv`` on the same rows is
    lossless, so the loss is the residual's weight and nothing else of the case."""
    case = tmp_path / "case.json"
    run = subprocess.run([sys.executable, "-m", "specproof.cli", "prove", "--verifier", FIXTURE, "--topology",
                          "chain", "--depth", "2", "--vocab", "3", "--case-out", str(case)],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1 and run.stdout.startswith("REFUTED"), run.stdout + run.stderr
    check, _ = _cli("certify", "--case", str(case))
    assert check.exit_code == 1 and "LOSSY" in check.stdout, check.output
    witness = load_reproducer(case)
    assert witness.parents == (-1, 0, 1) and witness.vocab == 3
    assert all(sum(row) == 1 and min(row) >= 0 for table in (witness.p, witness.q) for row in table.values())
    assert witness.certify().tvd > 0 and witness.certify(subject("bv")).tvd == 0


def test_correct_block_verification_is_still_proved_through_the_command():
    """The positive control: ``bv`` PROVED (exit 0) on the depth-1 chain at V = 2, with the 12 paths and 60 cells
    the committed table (reports/proofs.md) lists for it."""
    run, _ = _cli("prove", "--verifier", "bv", "--topology", "chain", "--depth", "1", "--vocab", "2")
    assert run.exit_code == 0 and run.stdout.startswith("PROVED"), run.output
    assert "12 paths, 60 cells" in run.stdout


@pytest.mark.slow
def test_depth_two_at_two_tokens_is_refused_up_front_by_max_cells_within_10_s():
    """The plugin at V = 2 on a depth-2 chain (about 350 runs of the symbolic program before any cell) under
    ``--max-cells 100``: refused before the symbolic run, exit 2, the message naming the option and the estimate,
    within 10 s of starting the command."""
    run, seconds = _cli("prove", "--verifier", FIXTURE, "--topology", "chain", "--depth", "2", "--vocab", "2",
                        "--max-cells", "100")
    assert run.exit_code == 2 and "max_cells" in run.stderr and "--max-cells" in run.stderr, run.output
    low = int(re.search(r"at least ([\d,]+) with 95% confidence", run.stderr).group(1).replace(",", ""))
    assert low > 100 and "over the limit of 100 cells" in run.stderr
    assert seconds < 10, seconds


def test_max_cells_stops_a_proof_that_passes_it_as_it_goes():
    """``bv`` on the depth-1 chain at V = 2: 12 paths (reports/proofs.md), so the estimate fits 30; the count of
    runs plus cells then passes 30 among its 60 cells and stops the proof there — at 31 exactly, the stage and the
    counts named."""
    run, _ = _cli("prove", "--verifier", "bv", "--topology", "chain", "--depth", "1", "--max-cells", "30")
    assert run.exit_code == 2 and "as it went" in run.stderr and "--max-cells" in run.stderr, run.output
    runs, decided = (int(n) for n in re.search(r"stage cells: (\d+) runs of the symbolic program, (\d+) cells "
                                                r"decided", run.stderr).groups())
    assert runs + decided == 31 and runs >= 12


def test_undecided_exits_4():
    """K-SEQ is UNDECIDED without a run (ρ* is a bisection): exit 4, not 3 (every command's internal error)."""
    run, _ = _cli("prove", "--verifier", "tv-kseq", "--vocab", "2")
    assert run.exit_code == 4 and run.stdout.startswith("UNDECIDED"), run.output


@pytest.mark.slow
def test_timeout_prints_what_was_decided_so_far(monkeypatch):
    """A proof stopped by ``--timeout`` during its cells: exit 2, the time-limit error naming the stage, the runs,
    the cells decided (proved and failing) and the regions still open. Each cell is slowed to 0.2 s so that the
    limit fires among the 60 cells of ``bv`` on the depth-1 chain at V = 2 whatever the machine's speed."""
    original = Tally.cell

    def slow(self, cell, open_regions):
        original(self, cell, open_regions)
        time.sleep(0.2)
    monkeypatch.setattr(Tally, "cell", slow)
    result, _ = _cli("prove", "--verifier", "bv", "--topology", "chain", "--depth", "1", "--timeout", "3")
    assert result.exit_code == 2, result.output
    message = result.stderr
    assert "timeout" in message and "stage cells" in message, message
    proved, failing = (int(n) for n in re.search(r"\((\d+) proved, (\d+) failing\)", message).groups())
    assert 1 <= proved < 60 and failing == 0 and "no finding yet" in message
    assert re.search(r"cells decided \(.*\), \d+ open", message)


def _residual_draw(tree, p, q, rng):
    """SpS on a one-node chain that first draws a token from the root's residual ``(q − p)+`` (a draw its output
    ignores): a categorical of zero total mass wherever ``q = p`` at the root — a set of measure zero that every
    round reaches."""
    rng.categorical([max(a - b, 0) for a, b in zip(q[0], p[0])])
    return VERIFIERS["tv-sps"].fn(tree, p, q, rng)


def test_zero_mass_choice_reached_with_positive_probability_is_refuted_with_a_failing_witness():
    """Random pairs never show it (certified lossless), the symbolic run does: REFUTED with a witness where the
    root's ``q`` equals its ``p`` (so every residual weight is 0), where the exact engine's run raises too."""
    drafter = FixedShape(CHAIN, "iid")
    assert all(certify(SyntheticModel(vocab=2, seed=s), drafter, _residual_draw).lossless for s in range(4))
    proof = prove(_residual_draw, CHAIN, "iid", 2)
    assert proof.verdict == "REFUTED" and "zero total mass" in proof.failure
    p, q = proof.witness.p[()], proof.witness.q[()]
    assert all(max(a - b, 0) == 0 for a, b in zip(q, p))
    with pytest.raises(RandomnessError, match="zero total mass"):
        proof.witness.certify()


def _stop_never_taken(tree, p, q, rng):
    """On a root alone, emits the root's target sample (lossless), after a Bernoulli of ``h = max(a − 3b², 0)``
    (``a, b = q(0), q(1)``) whose success draws from weights ``|a − b|``, ``|1 − a − 2b|``, of zero total mass
    where ``a = b = 1/3`` — exactly where ``h = 0``: a branch never taken, though the linear relaxation cannot tell
    (``b²`` is a variable of its own to it)."""
    a, b = q[0][0], q[0][1]
    if rng.bernoulli(max(a - 3 * b * b, 0)):
        rng.categorical([abs(a - b), abs(1 - a - 2 * b)])
    return 0, rng.categorical(q[0])


def test_zero_mass_choice_reached_with_probability_zero_is_pruned_and_proved():
    """The branch stops once in the symbolic run, and the proof is PROVED: on the stopped path's region ``a = b``
    and ``a + 2b = 1`` substituted leave its probability ``h = 0``. The exact engine agrees at the point itself
    (where the plain ``h`` is 1/3 − 3/9 = 0)."""
    root = make_topology("chain", 0, 1)
    proof = prove(_stop_never_taken, root, "iid", 3)
    assert proof.verdict == "PROVED" and proof.stops == 1 and all(c.holds for _, c in proof.stopped)
    third = Fraction(1, 3)
    rows = {(): (third, third, third)}
    assert certify(TableModel(3, rows, rows), FixedShape(root, "iid"), _stop_never_taken).lossless
