"""Exit 0 only with a verdict in hand (docs/cli/README.md#exit-codes): every command runs in a supervised child,
so a plugin that ends its process without a verdict (``os._exit(0)``, a kill), loops inside C code or cancels
the in-process alarm ends in exit 2 naming it, within the time limit and a second or so, leaving no process
behind; an interrupt exits 130 within 10 s with what was computed kept.

The plugins are tests/plugins/vanishing.py. Each check has its negative control: the well-behaved plugin exits 0
with its verdict under the same command, and the same ``os._exit(0)`` run without the supervisor (the command
line called directly, as before it) exits 0 with no output, the lie these tests reject.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from simulator.workers import Ended
from specproof.cli.app import main

REPO = Path(__file__).resolve().parents[1]
PLUGIN = "tests.plugins.vanishing:"
TINY = ["--topology", "chain", "--depth", "1", "--vocab", "2"]
COMMANDS = {"certify": ["certify", *TINY, "--verifier"],
            "mc": ["mc", *TINY, "--seeds", "1", "--trials", "50", "--verifier"],
            "hunt": ["hunt", "--time-limit", "5", "--shrink-time", "1", "--verifier"]}
GATE = ('[gate]\nstate = "state"\nhunt_seconds = 0\ncheck_seconds = {seconds}\n[battery]\nseeds = [0]\n'
        'vocab = [2]\ntopologies = ["chain"]\ndepth = 1\ndrafting = ["iid"]\n\n'
        '[[check]]\nverifier = "tv-sps"\nexpect = "lossless"\n\n'
        '[[check]]\nname = "the plugin"\nverifier = "{plugin}"\nexpect = "lossless"\n')


def specproof(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The ``specproof`` executable (``python -m specproof.cli``), from the repository's root."""
    return subprocess.run([sys.executable, "-m", "specproof.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def gate_config(tmp_path: Path, plugin: str, seconds: float = 600) -> str:
    path = tmp_path / "specproof.toml"
    path.write_text(GATE.format(plugin=PLUGIN + plugin, seconds=seconds))
    return str(path)


def no_verdict(result, *named: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert all(n in result.stderr for n in named), result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


# ---- a process that vanished -------------------------------------------------------------------------------------
def test_os_exit_in_certify_is_exit_2_naming_the_plugin_and_a_returning_plugin_still_certifies():
    no_verdict(specproof(*COMMANDS["certify"], PLUGIN + "exits"), f"verifier {PLUGIN}exits",
               "ended without a verdict", "exited with status 0", "os._exit")
    good = specproof(*COMMANDS["certify"], PLUGIN + "returns")
    assert good.returncode == 0 and "LOSSLESS" in good.stdout, good.stderr


def test_without_the_supervisor_os_exit_would_pass_for_success():
    """The planted bug: the command line called in the process itself, as before supervision."""
    unsupervised = subprocess.run([sys.executable, "-c", "from specproof.cli.app import main; main()",
                                   *COMMANDS["certify"], PLUGIN + "exits"], capture_output=True, text=True, cwd=REPO)
    assert unsupervised.returncode == 0 and unsupervised.stdout == ""


def test_a_killed_plugin_process_is_exit_2_naming_the_signal():
    no_verdict(specproof(*COMMANDS["certify"], PLUGIN + "killed"), "killed by SIGKILL", "OOM killer")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["mc", "hunt"])
def test_os_exit_in_mc_and_hunt_is_exit_2_and_the_control_exits_0(command):
    no_verdict(specproof(*COMMANDS[command], PLUGIN + "exits"), f"verifier {PLUGIN}exits", "exited with status 0")
    good = specproof(*COMMANDS[command], PLUGIN + "returns")
    assert good.returncode == 0, good.stderr


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_os_exit_in_a_gate_check_is_an_error_of_that_check_only(tmp_path, jobs):
    result = specproof("gate", "--config", gate_config(tmp_path, "exits"), "--jobs", jobs)
    no_verdict(result, "check 'the plugin'", "config.check[1]", "ended without a verdict", "exited with status 0")
    assert "| tv-sps | lossless | 1 | 0 | no baseline | — | holds |" in result.stdout
    good = specproof("gate", "--config", gate_config(tmp_path, "returns"), "--jobs", jobs)
    assert good.returncode == 0, good.stdout + good.stderr


# ---- time limits from outside ------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("command,plugin", [("certify", "loops_in_c"), ("mc", "loops_in_c"),
                                            ("certify", "cancels_alarm")])
def test_timeout_stops_a_plugin_the_alarm_cannot_reach_within_a_second_or_two(command, plugin):
    start = time.monotonic()
    result = specproof(*COMMANDS[command], PLUGIN + plugin, "--timeout", "5")
    took = time.monotonic() - start
    no_verdict(result, "error: timeout", "wall-clock limit of 5 s", f"verifier {PLUGIN}{plugin}", "killed")
    assert took < 8.5, took  # 5 s, the 1 s grace, and the start-up on a loaded 2-core machine
    good = specproof(*COMMANDS[command], PLUGIN + "returns", "--timeout", "5")
    assert good.returncode == 0, good.stderr


@pytest.mark.slow
def test_hunt_is_stopped_after_its_search_and_shrink_time():
    start = time.monotonic()
    result = specproof("hunt", "--time-limit", "2", "--shrink-time", "1", "--verifier", PLUGIN + "loops_in_c")
    no_verdict(result, "error: time_limit", "wall-clock limit of 3 s")
    assert time.monotonic() - start < 7.0


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_gate_check_past_its_time_limit_erred_and_the_others_ran(tmp_path, jobs):
    start = time.monotonic()
    result = specproof("gate", "--config", gate_config(tmp_path, "loops_in_c", seconds=3), "--jobs", jobs)
    no_verdict(result, "check 'the plugin'", "config.gate.check_seconds", "time limit of 3 s")
    assert "| tv-sps | lossless | 1 | 0 | no baseline | — | holds |" in result.stdout
    assert time.monotonic() - start < 10
    override = specproof("gate", "--config", gate_config(tmp_path, "loops_in_c"), "--check-timeout", "2")
    no_verdict(override, "check_timeout", "time limit of 2 s")
    good = specproof("gate", "--config", gate_config(tmp_path, "returns", seconds=3), "--jobs", jobs)
    assert good.returncode == 0, good.stdout + good.stderr


def test_the_gate_check_limit_in_this_process_and_a_bad_override(tmp_path):
    """The gate's own children also under click's test runner (no command supervisor): a looping check is an
    error and the other check holds; a negative override is refused."""
    result = CliRunner().invoke(main, ["gate", "--config", gate_config(tmp_path, "loops_in_c", seconds=1)])
    assert result.exit_code == 2, result.output
    assert "| tv-sps | lossless | 1 | 0 | no baseline | — | holds |" in result.stdout
    assert "config.gate.check_seconds: not certified: the check passed its time limit of 1 s" in result.stderr
    bad = CliRunner().invoke(main, ["gate", "--config", gate_config(tmp_path, "returns"), "--check-timeout", "-1"])
    assert bad.exit_code == 2 and "error: check_timeout" in bad.stderr


# ---- interrupts --------------------------------------------------------------------------------------------------
def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
def test_sigint_stops_a_plugin_looping_in_c_within_10_s():
    proc = subprocess.Popen([sys.executable, "-m", "specproof.cli", *COMMANDS["certify"], PLUGIN + "loops_in_c"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    time.sleep(3.0)
    family = descendants(proc.pid)
    assert proc.poll() is None and family, proc.communicate()
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err, err
    assert time.monotonic() - start < 10
    assert not alive(family)


#: a study that still uses two workers, in about 30 s on 2 cores (its certification table kept small)
REPORT = ["report", "--tables", "1", "--verifiers", "tv-rrs", "--seeds", "3", "--trials", "2000", "--jobs", "2",
          "--cert-vocab", "2", "--cert-depth", "1"]


def study_numbers(out: Path) -> dict:
    """The study's JSON without what differs between runs by design: times, and the command line (its --out)."""
    data = json.loads((out / "toy_study.json").read_text())
    data.pop("command")
    text = json.dumps(data, sort_keys=True)
    return json.loads(text, object_hook=lambda d: {k: v for k, v in d.items() if "second" not in k})


@pytest.mark.slow
def test_sigint_on_a_report_exits_130_within_10_s_and_the_rerun_resumes_to_the_same_numbers(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "specproof.cli", *REPORT, "--out", str(tmp_path / "cut")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    store = tmp_path / "cut" / "store"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:  # until the workers have saved a record
        if sum(len(f.read_text().splitlines()) for f in store.glob("*.jsonl")) >= 1:
            break
        time.sleep(0.2)
    family = descendants(proc.pid)
    assert proc.poll() is None and len(family) >= 3, proc.communicate()  # the command, its two workers
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - start
    assert proc.returncode == 130 and "interrupted" in err, err
    assert took < 10, took
    assert not alive(family), alive(family)
    kept = sum(len(f.read_text().splitlines()) for f in store.glob("*.jsonl"))
    assert kept >= 1
    rerun = specproof(*REPORT, "--out", str(tmp_path / "cut"), timeout=600)
    whole = specproof(*REPORT, "--out", str(tmp_path / "whole"), timeout=600)
    assert rerun.returncode == whole.returncode == 0, rerun.stderr + whole.stderr
    assert study_numbers(tmp_path / "cut") == study_numbers(tmp_path / "whole")


# ---- how a child ended, in words ---------------------------------------------------------------------------------
@pytest.mark.parametrize("ended,words", [(Ended(code=0), "exited with status 0 (os._exit() in user code?)"),
                                         (Ended(code=7), "exited with status 7"),
                                         (Ended(signal=signal.SIGKILL), "killed by SIGKILL (the OOM killer"),
                                         (Ended(signal=signal.SIGSEGV), "killed by SIGSEGV (a crash in C code?)"),
                                         (Ended(signal=200), "killed by signal 200")])
def test_how_a_child_ended_is_said_in_words(ended, words):
    assert words in ended.describe()
    assert "os._exit" not in Ended(code=7).describe()
