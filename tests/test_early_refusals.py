"""Input known to be bad before the work starts is refused at once (exit 2, the field named), outputs that cannot
be written are refused before the work, and standard output that cannot be written is a typed error."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from exact.prove.prover import MAX_SYMBOLS, check_symbols
from simulator.errors import InvalidParameterError, OutputError, SizeLimitError
from simulator.jsonfile import check_output_dir, check_output_file
from simulator.limits import DEFAULT_MAX_EXECUTIONS, time_limit
from specproof.cli.app import main
from specproof.cli.checks import check_scheduler
from specproof.cli.params import Output
from specproof.gate.battery import battery

ROOT = Path(__file__).resolve().parents[1]
#: seconds a refusal may take in-process (imports done): the work it refuses takes minutes
PROMPT = 10


def invoke(args: list[str], cwd: Path | None = None):
    """The command in-process, stopped after 30 s (a refusal that is missing shows as a timeout, not a hang)."""
    started = time.monotonic()
    with time_limit(30):
        result = CliRunner().invoke(main, args)
    return result, time.monotonic() - started


def gate_config(tmp_path: Path, vocab: int) -> str:
    path = tmp_path / "big.toml"
    path.write_text(f'[gate]\nbaselines = "b.json"\nstate = "state"\n[battery]\nvocab = [{vocab}]\n'
                    '[[check]]\nverifier = "tv-sps"\nexpect = "lossless"\n')
    return str(path)


REFUSALS = [
    pytest.param(["report", "--device", "nosuchdevice"], "device", marks=pytest.mark.slow),  # imports torch: 3 s
    (["report", "--scheduler", "nosuch"], "scheduler"),
    (["report", "--trials", "1000000000000000"], "trials"),
    (["report", "--verifiers", ""], "verifiers"),
    (["certify", "--verifier", "tv-sps", "--table", str(ROOT / "examples/block_example.json")], "table"),
    (["mc", "--verifier", "tv-sps", "--table", str(ROOT / "examples/block_example.json")], "table"),
    (["prove", "--verifier", "trv", "--vocab", "50"], "vocab"),
    (["hunt", "--verifier", "tv-sps", "--vocab", "0"], "vocab"),
    (["hunt", "--verifier", "tv-sps", "--hunt-seed", "-1"], "hunt_seed"),
    (["mc", "--verifier", "tv-sps", "--trials", "99999999999999999999999"], "trials"),
    (["certify", "--verifier", "tv-sps", "--shrink-time", "nan"], "shrink_time"),
    (["gate", "--config", "BIG"], "config.battery.vocab"),
    # round 4 of bad input
    (["optimum", "--schemes", "magic"], "schemes"),
    (["optimum", "--verifier", "tv-sps", "--schemes", "magic"], "schemes"),
    (["optimum", "--vocab", "1000", "--topology", "chain"], "vocab"),
    (["optimum", "--verifier-out", "TMP/optv-bad.name.txt"], "verifier_out"),
    (["zoo", "--out", ""], "out"),
]


@pytest.mark.parametrize("args,field", REFUSALS)
def test_input_known_bad_up_front_is_refused_at_once_naming_the_field(args, field, tmp_path):
    args = [gate_config(tmp_path, 10**6) if a == "BIG" else a.replace("TMP", str(tmp_path)) for a in args]
    if args[0] == "report":
        args += ["--out", str(tmp_path / "report")]
    result, seconds = invoke(args)
    assert result.exit_code == 2, result.output
    assert f"error: {field}: " in result.stderr, result.stderr
    assert seconds < PROMPT, f"{seconds:.1f} s"
    assert not (tmp_path / "report").exists()  # refused before anything is written


def test_the_refusals_stop_at_their_bounds():
    """Controls: the values just inside each bound pass the same checks."""
    for address in ("local", "tcp://127.0.0.1:8786", "127.0.0.1:8786", None):
        check_scheduler(address)
    with pytest.raises(InvalidParameterError, match="scheduler"):
        check_scheduler("tcp://127.0.0.1")
    check_symbols(3, 3)  # the proof table's largest space passes
    symbols = lambda v: (v - 1) * (1 + 1 + v)  # noqa: E731 — one level: the root's p row, q at the root and below
    largest = max(v for v in range(2, 50) if symbols(v) <= MAX_SYMBOLS)
    check_symbols(largest, 1)
    with pytest.raises(SizeLimitError, match=f"{symbols(largest + 1):,} symbols"):
        check_symbols(largest + 1, 1)
    widest = math.isqrt(DEFAULT_MAX_EXECUTIONS)  # V^2 sequences within the default limit: 1414 at 2,000,000
    battery({"vocab": [widest], "depth": 2}, "config.battery")
    with pytest.raises(InvalidParameterError, match=f"{widest + 1:,}"):
        battery({"vocab": [widest + 1], "depth": 2}, "config.battery")
    hunt = main.commands["hunt"]
    assert hunt.make_context("hunt", ["--vocab", "2", "--hunt-seed", "0"]).params["vocab"] == 2


def output_options():
    """``(command, option)`` for every option of type :class:`Output`."""
    return [(name, param) for name, command in main.commands.items() for param in command.params
            if isinstance(param.type, Output)]


#: what each command needs besides the output option for that option to be written (required options, or a flag
#: that makes the output relevant)
NEEDS = {
    "certify": ["--verifier", "tv-sps"], "mc": ["--verifier", "tv-sps"], "generate": ["--verifier", "tv-sps"],
    "hunt": ["--verifier", "tv-sps"], "prove": ["--verifier", "tv-sps"], "gate": ["--config", "x.toml"],
    "real": ["--target", "x", "--draft", "x", "--questions", "x.jsonl", "--verifier", "tv-sps"],
    "frontier": ["--verifier", "sglang-threshold"],
}
NEEDS_FOR = {("certify", "case_out"): ["--shrink"]}


def test_every_output_option_is_checked_before_the_work(tmp_path):
    options = output_options()
    assert len(options) >= 20 and {name for name, _ in options} >= {"certify", "zoo", "report", "real", "gate"}
    plain = tmp_path / "plain"
    plain.write_text("")
    for name, param in options:
        for bad in ("/proc/specproof-unwritable", str(plain / "below-a-file")):
            args = [name, *NEEDS.get(name, []), *NEEDS_FOR.get((name, param.name), []), param.opts[0], bad]
            result, seconds = invoke(args)
            assert result.exit_code == 2, (args, result.output)
            assert result.stderr.startswith("error: ") and "timeout" not in result.stderr, (args, result.stderr)
            assert bad.split("/")[-2] in result.stderr, (args, result.stderr)
            assert seconds < PROMPT, (args, f"{seconds:.1f} s")


def test_an_empty_output_path_is_refused_not_the_current_folder(tmp_path, monkeypatch):
    """``zoo --out ''`` ran into the current folder (``Path("")`` is ``.``): every output option refuses it,
    naming the option, before the work."""
    monkeypatch.chdir(tmp_path)
    for name, param in output_options():
        args = [name, *NEEDS.get(name, []), *NEEDS_FOR.get((name, param.name), []), param.opts[0], ""]
        result, seconds = invoke(args)
        assert result.exit_code == 2, (args, result.output)
        field = max(param.opts, key=len).lstrip("-").replace("-", "_")
        assert result.stderr.startswith(f"error: {field}: ") and "the path is empty" in result.stderr, \
            (args, result.stderr)
        assert seconds < PROMPT, (args, f"{seconds:.1f} s")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(OutputError, match="out: the path is empty"):  # the check every command calls, too
        check_output_dir("", "out")
    with pytest.raises(OutputError, match="json: the path is empty"):
        check_output_file("", "json")


def test_the_output_check_accepts_a_writable_path(tmp_path):
    """Control: the same command with a writable --json writes it."""
    result, _ = invoke(["certify", "--verifier", "tv-sps", "--json", str(tmp_path / "cert.json")])
    assert result.exit_code == 0 and (tmp_path / "cert.json").exists(), result.output


@pytest.mark.parametrize("args", [["list"], ["--help"], ["certify", "--verifier", "tv-sps"]])
def test_standard_output_that_cannot_be_written_is_a_typed_error(args):
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "specproof.cli", *args], stdout=full, stderr=subprocess.PIPE,
                                text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == "error: stdout: cannot write standard output: No space left on device"


@pytest.mark.parametrize("args", [["list"], ["certify", "--verifier", "tv-rrs"]])
def test_a_closed_standard_output_is_a_typed_error_not_a_verdicts_code(args):
    """``specproof list >&-``: file descriptor 1 closed from the start is exit 2 (it was an internal error and
    exit 1, certify's LOSSY code, for a lossless rule)."""
    result = subprocess.run(["bash", "-c", 'exec "$@" >&-', "_", sys.executable, "-m", "specproof.cli", *args],
                            stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: stdout: standard output is closed"), result.stderr
    assert "Traceback" not in result.stderr


def test_standard_output_written_is_exit_0_control(tmp_path):
    with open(tmp_path / "out.txt", "w") as out:
        result = subprocess.run([sys.executable, "-m", "specproof.cli", "list"], stdout=out, stderr=subprocess.PIPE,
                                text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0 and "verifier   tv-sps" in (tmp_path / "out.txt").read_text(), result.stderr


@pytest.mark.slow
def test_documented_inf_means_no_limit_runs_to_its_verdict(tmp_path):
    """``inf`` on each time option is "no limit" (as 0 is for --timeout): the run ends with its verdict."""
    result, _ = invoke(["certify", "--verifier", "tv-sps", "--timeout", "inf"])
    assert result.exit_code == 0 and "LOSSLESS" in result.output, result.output
    result, _ = invoke(["certify", "--verifier", "bug-residual-q", "--shrink", "--shrink-time", "inf",
                        "--case-out", str(tmp_path / "case.json")])
    assert result.exit_code == 1 and "shrinking steps, complete)" in result.output, result.output
    result, _ = invoke(["mc", "--verifier", "tv-sps", "--timeout", "inf", "--trials", "200", "--seeds", "2"])
    assert result.exit_code == 0, result.output
    result, _ = invoke(["hunt", "--verifier", "bug-residual-q", "--time-limit", "inf", "--case-out",
                        str(tmp_path / "found.json")])
    assert result.exit_code == 1 and "LOSSY on pair" in result.output, result.output
