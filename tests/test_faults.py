"""The fault battery: every way a user's file, module, output path, environment or code can go wrong gets the
exit code of docs/cli/README.md's table, names the culprit, and prints no traceback; an interrupt exits 130; a
verdict survives a failed write."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

from specproof.cli.app import main
from simulator.numeric import digit_count, human_number, parse_probability, to_json_number

from test_cli import write_case

REPO = Path(__file__).resolve().parents[1]
CHAIN = ["--topology", "chain", "--depth", "1", "--vocab", "2"]


def cli(args: list[str]):
    """The command in this process (click's runner): exit code and both streams."""
    return CliRunner().invoke(main, args)


def assert_refused(result, code: int, *names: str) -> None:
    """``code``, every name in the output, and no traceback."""
    text = result.output if hasattr(result, "output") else result.stdout + result.stderr
    got = result.exit_code if hasattr(result, "exit_code") else result.returncode
    assert got == code, text
    for name in names:
        assert name in text, (name, text)
    assert "Traceback" not in text and "internal error" not in text, text


def plugin(tmp_path: Path, monkeypatch, name: str, body: str) -> str:
    """A plugin module ``name`` in a fresh working directory; its ``module:function``."""
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:verify"


# ---- user code: imports, exits, interrupts ---------------------------------------------------------------------
@pytest.mark.parametrize("option", ["--verifier", "--kernel"])
def test_a_module_raising_at_import_is_named_with_its_line(tmp_path, monkeypatch, option):
    if option == "--kernel":
        pytest.importorskip("torch")
    name = f"raises_on_import_{option[2:]}"
    spec = plugin(tmp_path, monkeypatch, name, "x = 1\nraise RuntimeError('no GPU here')\n")
    result = cli(["certify", option, spec, *CHAIN, *(["--adapter", "chain"] if option == "--kernel" else [])])
    assert_refused(result, 2, option[2:], name, "RuntimeError: no GPU here", f"{name}.py:2")


@pytest.mark.parametrize("body", ["import sys\nsys.exit(0)\n", "raise KeyboardInterrupt\n"])
def test_a_module_exiting_or_interrupting_at_import_is_a_typed_error(tmp_path, monkeypatch, body):
    name = "exits_on_import" if "exit" in body else "interrupts_on_import"
    result = cli(["certify", "--verifier", plugin(tmp_path, monkeypatch, name, body), *CHAIN])
    assert_refused(result, 2, name)


EXITING = "import sys\ndef verify(tree, p, q, rng):\n    sys.exit({code})\n"


@pytest.mark.parametrize("code", [0, 1, None])
def test_a_plugin_calling_sys_exit_never_exits_with_its_code(tmp_path, monkeypatch, code):
    spec = plugin(tmp_path, monkeypatch, f"exits_{code}", EXITING.format(code=code))
    result = cli(["certify", "--verifier", spec, *CHAIN])
    assert_refused(result, 2, "SystemExit", f"exits_{code}.py:3")
    # the control: the same module returning a decision certifies
    (tmp_path / "returns.py").write_text("def verify(tree, p, q, rng):\n    return 0, rng.categorical(q[0])\n")
    assert cli(["certify", "--verifier", "returns:verify", *CHAIN]).exit_code == 0


def test_sys_exit_0_in_law_and_gate_is_exit_2(tmp_path, monkeypatch):
    spec = plugin(tmp_path, monkeypatch, "exits_law", EXITING.format(code=0))
    assert_refused(cli(["law", "--case", str(write_case(tmp_path, verifier=spec))]), 2, "SystemExit")
    config = tmp_path / "specproof.toml"
    config.write_text(f'[gate]\nhunt_seconds = 0\n[battery]\nmodels = ["random-rational"]\nseeds = [0]\n'
                      f'vocab = [2]\ntopologies = ["chain"]\ndepth = 1\n[[check]]\nverifier = "{spec}"\n'
                      'expect = "lossless"\n')
    result = cli(["gate", "--config", str(config)])
    assert result.exit_code == 2, result.output
    assert "SystemExit" in result.output and "Traceback" not in result.output


def test_a_plugin_raising_keyboard_interrupt_without_a_signal_is_exit_2(tmp_path, monkeypatch):
    spec = plugin(tmp_path, monkeypatch, "interrupts", "def verify(tree, p, q, rng):\n    raise KeyboardInterrupt\n")
    assert_refused(cli(["certify", "--verifier", spec, *CHAIN]), 2, "KeyboardInterrupt", "interrupts.py:2")


GATE = ('[gate]\nhunt_seconds = 0\n[battery]\nmodels = ["random-rational"]\n'
        'seeds = [0, 1, 2, 3, 4, 5, 6, 7]\nvocab = [4]\ntopologies = ["complete"]\ndepth = 2\n'
        '[[check]]\nverifier = "lv-kseq"\nexpect = "lossless"\n')
LONG = {"certify": ["certify", "--verifier", "tv-kseq", "--depth", "3", "--vocab", "5", "--timeout", "60"],
        "report": ["report", "--out", "{tmp}/r", "--jobs", "1"],
        "gate": ["gate", "--config", "{tmp}/specproof.toml"]}


@pytest.mark.parametrize("command,sig", [("certify", signal.SIGINT), ("certify", signal.SIGTERM),
                                         ("report", signal.SIGINT), ("gate", signal.SIGINT)])
@pytest.mark.slow
def test_an_interrupt_exits_130_whatever_the_run_was_doing(tmp_path, command, sig):
    (tmp_path / "specproof.toml").write_text(GATE)
    args = [a.format(tmp=tmp_path) for a in LONG[command]]
    proc = subprocess.Popen([sys.executable, "-m", "specproof.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    time.sleep(2.0)  # past start-up, inside the computation
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err


# ---- files -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,field", [
    (["certify", "--verifier", "tv-sps", "--model", "table", "--table", "{bin}"], "table"),
    (["certify", "--case", "{bin}"], "case"),
    (["law", "--case", "{bin}"], "case"),
    (["law", "--case", "{deep}"], "case"),
    (["certify", "--case", "{deep}"], "case"),
    (["gate", "--config", "{bin}"], "config"),
])
def test_binary_and_too_deep_files_are_refused_naming_the_option(tmp_path, args, field):
    (tmp_path / "x.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    args = [a.format(bin=tmp_path / "x.bin", deep=tmp_path / "deep.json") for a in args]
    assert_refused(cli(args), 2, f"{field}:")


# ---- outputs -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,field", [
    (["certify", "--verifier", "tv-sps", *CHAIN, "--json", "{missing}/c.json"], "json"),
    (["mc", "--verifier", "tv-sps", *CHAIN, "--trials", "100", "--json", "{missing}/m.json"], "json"),
    (["generate", "--verifier", "tv-sps", *CHAIN, "--exact", "--tokens", "2", "--json", "{missing}/g.json"], "json"),
    (["hunt", "--verifier", "tv-sps", "--time-limit", "1", "--json", "{missing}/h.json"], "json"),
    (["theorems", "--out", "{missing}/t.md"], "out"),
    (["report", "--out", "{file}/r"], "out"),
    (["dynamic", "--out", "{file}/d"], "out"),
    (["zoo", "--out", "{file}/z"], "out"),
])
def test_an_unwritable_output_is_refused_before_anything_runs(tmp_path, args, field):
    (tmp_path / "afile").write_text("")
    args = [a.format(missing=tmp_path / "nowhere", file=tmp_path / "afile") for a in args]
    start = time.monotonic()
    result = cli(args)
    assert_refused(result, 2, f"{field}:")
    assert "LOSSLESS" not in result.output and time.monotonic() - start < 5


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device that is always full")
def test_a_full_disk_after_the_verdict_keeps_the_verdict_and_its_code():
    lossless = cli(["certify", "--verifier", "tv-sps", *CHAIN, "--json", "/dev/full"])
    assert lossless.exit_code == 0 and "LOSSLESS" in lossless.output
    assert "/dev/full" in lossless.output and "No space left" in lossless.output
    lossy = cli(["certify", "--verifier", "bug-residual-q", *CHAIN, "--model", "random-rational", "--seeds", "8",
                 "--json", "/dev/full"])
    assert lossy.exit_code == 1 and "LOSSY" in lossy.output and "/dev/full" in lossy.output


# ---- options and environment -----------------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [["--depth", "2"], ["--topology", "chain"], ["--branching", "3"]])
def test_parents_beside_the_shape_options_is_refused(extra):
    assert_refused(cli(["certify", "--verifier", "tv-sps", "--parents", "-1,0,0", *extra]), 2, "parents:",
                   extra[0])
    assert cli(["certify", "--verifier", "tv-sps", "--parents", "-1,0,0"]).exit_code == 0  # the control


def test_a_misspelt_kernel_module_fails_within_two_seconds_before_torch_loads():
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "specproof.cli", "certify", "--kernel", "nomod.x:f"],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert time.monotonic() - start < 2.0
    assert_refused(result, 2, "kernel:", "nomod")


NO_TORCH = "import sys; sys.modules['torch'] = None; from specproof.cli.app import main; main()"


@pytest.mark.parametrize("args", [
    ["certify", "--kernel", "specproof.gate.torch_kernels:sps_chain", "--adapter", "chain"],
    ["kernels", "--out", "{tmp}"],
])
def test_a_missing_extra_is_named_with_its_install_command(tmp_path, args):
    args = [a.format(tmp=tmp_path) for a in args]
    result = subprocess.run([sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, cwd=REPO,
                            timeout=60)
    assert_refused(result, 2, "torch", "pip install -e '.[torch]'")


# ---- printing never fails ----------------------------------------------------------------------------------------
def test_a_fraction_of_ten_thousand_digits_prints_and_round_trips_through_json():
    value = Fraction(10 ** 9_999 + 7, 3 * 10 ** 9_999 + 1)  # 10,000 digits over 10,000: just above 1/3
    assert (digit_count(value.numerator), digit_count(value.denominator)) == (10_000, 10_000)
    text = human_number(value)
    assert text == "0.333333, exactly a fraction of 10000/10000 digits"
    written = to_json_number(value, "fraction")
    assert len(written) == 10_000 + 1 + 10_000
    assert parse_probability(written, "x") == value
    assert human_number(Fraction(1, 10 ** 20_000)) == "1e-20000, exactly a fraction of 1/20001 digits"


@pytest.mark.parametrize("n", [0, 1, 9, 10, 99, 100, 10 ** 15 - 1, 10 ** 15, 2 ** 64, 10 ** 300 - 1, 10 ** 300])
def test_digit_count_is_the_length_of_the_decimal_text(n):
    assert digit_count(n) == len(str(n)) and digit_count(-n) == len(str(n))
