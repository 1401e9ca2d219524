"""Nothing hangs and nothing runs away with memory: size refusals, execution and time limits, choice budgets.

Every command that could grow without bound runs in a subprocess under a 3 GiB address-space limit and a
wall-clock timeout, so a regression fails the test instead of taking the machine down. Sizes are chosen far
out of reach (``--depth 50 --branching 10``), not at the edge of what a later speed-up makes feasible.
"""

from __future__ import annotations

import math
import re
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from fractions import Fraction as F

import pytest

from exact import certify, fixed_tree_law
from exact.enumeration import enumerate_outcomes
from exact.generation_law import generation_law
from exact.size import estimate_round
from simulator.drafting import FixedShape
from simulator.errors import ExecutionLimitError, InvalidParameterError, SizeLimitError
from simulator.limits import limits, suggested_limit
from simulator.drafting.dyspec import DySpecThreshold
from simulator.models import ModelView, SyntheticModel
from simulator.montecarlo.engine import check_tables, table_bytes
from simulator.trees import DraftTree, make_topology, shape_size

MEMORY = 3 * 2**30


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run_capped(args, cwd=None, timeout=120):
    """A specproof command under the memory cap; the test fails (does not hang) past ``timeout``."""
    exe = shutil.which("specproof")
    cmd = [exe] if exe else [sys.executable, "-m", "specproof.cli"]
    return subprocess.run(cmd + args, capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          preexec_fn=_cap_memory)


@pytest.mark.parametrize("args,options", [
    (["certify", "--verifier", "tv-sps", "--depth", "50", "--branching", "10"], ["--depth", "--branching"]),
    (["certify", "--verifier", "tv-sps", "--topology", "chain", "--depth", "50"], ["--max-executions", "--depth"]),
    (["certify", "--verifier", "tv-rrsw", "--drafting", "dyspec", "--budget", "1000"], ["--max-executions", "--budget"]),
    (["certify", "--verifier", "tv-rrs", "--vocab", "100000"], ["--max-executions", "--vocab"]),
    (["certify", "--verifier", "tv-rrs", "--depth", "12"], ["--max-executions", "--depth"]),
    (["generate", "--verifier", "tv-rrs", "--exact", "--tokens", "30"], ["--max-executions", "--tokens"]),
    (["mc", "--verifier", "tv-rrs", "--depth", "50", "--branching", "10"], ["--depth", "--branching"]),
    (["mc", "--verifier", "tv-sps", "--topology", "chain", "--depth", "50"], ["--vocab", "--depth"]),
    (["mc", "--verifier", "tv-rrs", "--vocab", "100000"], ["--vocab", "--depth"]),
    (["generate", "--verifier", "tv-rrs", "--depth", "50", "--branching", "10"], ["--depth", "--branching"]),
])
@pytest.mark.slow
def test_out_of_reach_runs_are_refused_at_once_naming_the_options(args, options):
    start = time.perf_counter()
    result = run_capped(args, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert time.perf_counter() - start < 30
    assert all(o in result.stderr for o in options), result.stderr


@pytest.mark.slow
def test_a_refused_report_writes_nothing(tmp_path):
    out = tmp_path / "never"
    result = run_capped(["report", "--out", str(out), "--cert-depth", "50", "--cert-branching", "10"], timeout=60)
    assert result.returncode == 2 and "--cert-depth" in result.stderr, result.stderr
    assert not out.exists()
    result = run_capped(["report", "--out", str(out), "--cert-depth", "12"], timeout=60)
    assert result.returncode == 2 and "--cert-depth" in result.stderr and "--max-executions" in result.stderr
    assert "--method" not in result.stderr  # the table certifies by enumeration: report takes no --method
    assert not out.exists()


def test_shape_sizes_are_closed_forms_of_the_built_trees():
    # Independent of the refusal: the closed forms count what _grow builds, node for node.
    for name in ("chain", "multi-chain", "complete", "binary", "tapered"):
        for depth in range(5):
            for b in range(1, 4):
                assert shape_size(name, depth, b) == len(make_topology(name, depth, b).parents)
    assert shape_size("complete", 50, 10) == (10**51 - 1) // 9
    with pytest.raises(InvalidParameterError) as err:
        make_topology("tapered", 40, 10)
    assert err.value.field == "depth"


def test_the_estimate_counts_what_the_run_enumerates():
    # tv-rrs on complete(2, 2), V = 3: 3^6 = 729 i.i.d. trees (every row positive), 27 completed sequences.
    model, drafter = SyntheticModel(3), FixedShape(make_topology("complete", 2, 2))
    estimate = estimate_round(model, drafter, "tv-rrs")
    assert round(10 ** estimate.log10_trees) == 729 and round(10 ** estimate.log10_sequences) == 27
    # Without replacement: 3·2 choices per pair of children, three inner nodes: 6^3 trees.
    wor = estimate_round(model, FixedShape(make_topology("complete", 2, 2), "without-replacement"), "tv-rrsw")
    assert round(10 ** wor.log10_trees) == 216
    # DySpec's Alg. 2 (t = 1/4, two layers) is bounded by 16.3^4 trees, far above the few it drafts: when the
    # bound times the probe passes the limit, the trees are counted by enumerating the drafter alone.
    threshold = DySpecThreshold(0.25, 2)
    bound = threshold.log10_trees(3)
    with limits(10**6):
        counted = estimate_round(model, threshold, "match")
    assert counted.counted and 10 ** counted.log10_trees < 10 ** bound / 100
    assert counted.log10_trees == math.log10(sum(1 for _ in enumerate_outcomes(
        lambda rng: threshold.draft(ModelView(model), rng))))


@pytest.mark.slow
def test_run_time_count_stops_a_run_the_estimate_underrates(tmp_path):
    # One tree of the 3^6 (all tokens 2) costs 2^16 executions, every other one: the estimate's random descents
    # (64 of them, seeded) miss it and the estimate passes; the count then stops the run with exit 2 and says
    # how far it got.
    (tmp_path / "sly.py").write_text(textwrap.dedent('''
        from fractions import Fraction

        def uneven(tree, p, q, rng):
            if any(t != 2 for t in tree.tokens[1:]):
                return 0, 0
            for _ in range(16):
                rng.bernoulli(Fraction(1, 2))
            return 0, 0
    '''))
    result = run_capped(["certify", "--verifier", "sly:uneven", "--max-executions", "20000"], cwd=tmp_path)
    assert result.returncode == 2 and "stopped after 20,000 executions" in result.stderr, result.stderr
    with limits(50), pytest.raises(ExecutionLimitError):
        certify(SyntheticModel(3), FixedShape(make_topology("complete", 2, 2)), "tv-rrs")


def test_law_has_no_estimate_and_is_stopped_by_the_count(tmp_path):
    tree = DraftTree([-1, 0, 0], [None, 0, 1], 2)
    rows = [(F(1, 2), F(1, 2))] * 3
    fixed_tree_law(tree, rows, rows, "tv-rrs", 2)  # two executions: the first child is accepted, y ~ q_1
    with limits(1), pytest.raises(ExecutionLimitError) as err:
        fixed_tree_law(tree, rows, rows, "tv-rrs", 2)
    assert err.value.field == "max_executions"


def test_progress_reports_the_whole_probability_mass_once():
    seen = []
    with limits(progress=seen.append):
        certify(SyntheticModel(3), FixedShape(make_topology("complete", 2, 2)), "tv-rrs")
        certify(SyntheticModel(3, seed=1), FixedShape(make_topology("chain", 2)), "bv")
        # several rounds' laws inside one computation: the rounds report nothing, the generated sequences all
        generation_law(SyntheticModel(3), FixedShape(make_topology("chain", 1)), "tv-sps", 4)
    assert math.isclose(sum(seen), 3.0, rel_tol=1e-12) and all(x > 0 for x in seen)


PLUGINS = '''
from fractions import Fraction


def rng_forever(tree, p, q, rng):
    while True:
        rng.bernoulli(Fraction(1, 2))


def spin_forever(tree, p, q, rng):
    while True:
        pass
'''


@pytest.fixture
def plugins(tmp_path):
    (tmp_path / "loops.py").write_text(PLUGINS)
    return tmp_path


@pytest.mark.slow
def test_an_endless_loop_of_rng_calls_stops_at_the_choice_budget_naming_the_verifier(plugins):
    for command in (["certify", "--topology", "chain", "--depth", "1"],
                    ["mc", "--topology", "chain", "--depth", "1", "--seeds", "1", "--trials", "100"]):
        result = run_capped([*command, "--verifier", "loops:rng_forever"], cwd=plugins, timeout=60)
        assert result.returncode == 2, result.stderr
        assert "loops:rng_forever" in result.stderr and "loops.py:7" in result.stderr, result.stderr


@pytest.mark.slow
def test_a_loop_without_rng_is_stopped_by_the_timeout(plugins):
    for command in (["certify", "--topology", "chain", "--depth", "1"], ["law", "--case", "case.json"],
                    ["mc", "--topology", "chain", "--depth", "1", "--seeds", "1", "--trials", "100"]):
        (plugins / "case.json").write_text('{"vocab": 2, "parents": [-1], "tokens": [null], "q": {"0": [0.5, 0.5]},'
                                           ' "p": {}, "verifier": "loops:spin_forever"}')
        start = time.perf_counter()
        result = run_capped([*command, "--verifier", "loops:spin_forever", "--timeout", "1"]
                            if command[0] != "law" else [*command, "--timeout", "1"], cwd=plugins, timeout=60)
        assert result.returncode == 2 and "error: timeout:" in result.stderr, result.stderr
        assert time.perf_counter() - start < 20


def test_monte_carlo_tables_are_sized_before_they_are_built():
    # V = 15, H = 4 (the paper's base): rows of 1 + 15 + … + 15^4 contexts, q and p with running sums, and the
    # 15^5-cell joint: 8·15·2·(2·54241 − 50625) + 8·15^5 bytes.
    assert table_bytes(15, 4) == 8 * 15 * 2 * (2 * 54241 - 15**4) + 8 * 15**5
    check_tables(15, 5)  # the ablations' deepest cells fit
    with pytest.raises(SizeLimitError) as err:
        check_tables(15, 8)
    assert err.value.field == "vocab" and "GiB" in err.value.message


def test_a_limit_hit_says_its_time_and_a_limit_that_lets_the_run_finish():
    """The message gives the seconds the finished part took and a --max-executions that runs it to the end: the
    same run under the suggested value (parsed from the message) finishes, and under the hit limit does not."""
    model, drafter = SyntheticModel(3), FixedShape(make_topology("complete", 2, 2))
    whole = certify(model, drafter, "tv-rrs")  # the run's own size, counted by the engine
    total = whole.executions + 3 ** 3  # choice-tree leaves and completed sequences
    with limits(total // 2), pytest.raises(ExecutionLimitError) as err:
        certify(model, drafter, "tv-rrs")
    message = err.value.message
    assert re.search(r"stopped after [\d,]+ executions in \d+\.\d s", message), message
    asked = int(re.search(r"--max-executions (\d+)", message).group(1))
    assert asked >= total, (asked, total, message)
    with limits(asked):
        assert certify(model, drafter, "tv-rrs").tvd == whole.tvd
    # a quarter more than the run's size, rounded up to two significant digits
    assert suggested_limit(2000) == 2500 and suggested_limit(562_130) == 710_000 and suggested_limit(12) == 15


def test_an_estimate_refusal_names_a_limit_that_fits_it():
    """The up-front refusal names a --max-executions above the estimate, and none for a size no run could end."""
    model = SyntheticModel(4)
    small = estimate_round(model, FixedShape(make_topology("complete", 2, 2)), "tv-rrs")
    with pytest.raises(SizeLimitError) as err:
        small.check(10)
    asked = int(re.search(r"--max-executions (\d+)", err.value.message).group(1))
    assert asked >= 10 ** small.log10_executions
    huge = estimate_round(SyntheticModel(15), FixedShape(make_topology("complete", 12, 2)), "tv-rrs")
    with pytest.raises(SizeLimitError) as err:
        huge.check(10)
    assert "--max-executions" not in err.value.message.split("(--max-executions)")[1], err.value.message
    assert "would not finish" in err.value.message


@pytest.mark.slow
def test_the_default_limit_runs_the_documented_sizes_to_the_end():
    """docs/limits.md names tv-rrs on complete(b = 2, H = 3) at V = 6 (562,130 executions; the old default of
    500,000 stopped it at 87.8% of the mass) and TRV's recursion at V = 15, H = 2 (800,177 counted): with default
    options the first runs to its verdict, and both fit the default."""
    from simulator.limits import DEFAULT_MAX_EXECUTIONS

    assert max(562_130, 800_177) < DEFAULT_MAX_EXECUTIONS
    result = run_capped(["certify", "--verifier", "tv-rrs", "--topology", "complete", "--branching", "2", "--depth",
                         "3", "--vocab", "6", "--model", "synthetic"], timeout=900)
    assert result.returncode == 0 and "tv-rrs: LOSSLESS" in result.stdout, result.stderr
