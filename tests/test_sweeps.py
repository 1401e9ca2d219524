"""No wasted or orphaned work: a store is written by one sweep at a time, a sweep's workers die with it, and a
Monte Carlo run too large for its time limit is refused up front, without changing any result of a run that fits."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import psutil
import pytest
from click.testing import CliRunner

from specproof.cli import app as cli
from simulator.drafting.drafter_registry import make_drafter
from simulator.drafting import FixedShape
from simulator.errors import SizeLimitError, StoreError
from simulator.models import SyntheticModel
from simulator.montecarlo import engine
from simulator.montecarlo.engine import (Histogram, empirical_tvd, encode, mean_and_se, monte_carlo, run_trials,
                                         target_table)
from specproof.study import LOCK_FILE, Cell, Store, run_cells
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS

from test_cli import run

CELL = Cell("tv-sps", "chain", 3, 1, 1, 0.5, 1.0, 1.0, 2, 100)
#: a quick certification table for the report commands below (the table is not what they test)
SMALL_REPORT = ["--tables", "1", "--verifiers", "tv-rrs", "--cert-vocab", "2", "--cert-depth", "1"]


def test_a_store_is_locked_by_its_writer_and_refused_to_a_second_one_naming_the_lock_and_holder(tmp_path):
    one_seed = replace(CELL, seeds=1)
    held = Store(tmp_path)
    with held.lock():
        run_cells([one_seed], held)  # the holder's own sweep and appends share its lock
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
        other = Store(tmp_path)  # another writer, even in this process (a second open file), is refused
        with pytest.raises(StoreError) as err:
            run_cells([CELL], other)
        assert err.value.field == "store"
        assert str(tmp_path / LOCK_FILE) in err.value.message and f"process {os.getpid()}" in err.value.message
        with pytest.raises(StoreError):
            other.save(held.load(CELL, 0), CELL, 0)
        assert other.load(CELL, 0) == held.load(CELL, 0) and other.load(CELL, 1) is None  # reading needs no lock
    run_cells([CELL], Store(tmp_path))  # released at the block's end
    assert Store(tmp_path).load(CELL, 1)["seed"] == 1
    assert Store(tmp_path).file(CELL).read_text().count("\n") == 2  # each record appended once


@pytest.mark.slow
def test_a_second_report_on_a_locked_store_exits_2_naming_the_lock_and_writes_nothing(tmp_path):
    store = Store(tmp_path / "out" / "store")
    with store.lock():
        result = run(["report", "--out", str(tmp_path / "out"), "--seeds", "1", "--trials", "100", *SMALL_REPORT])
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: store: ")
    assert str(store.lock_file) in result.stderr and f"process {os.getpid()}" in result.stderr
    assert [p for p in (tmp_path / "out").rglob("*") if not p.is_dir()] == []  # and its holder left no lock file


def _alive(processes: list[psutil.Process]) -> list[int]:
    """The pids of those still running (a zombie has ended: only its exit status waits to be collected)."""
    def running(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
    return [p.pid for p in processes if running(p)]


def _alive_after(processes: list[psutil.Process], seconds: float) -> list[int]:
    """:func:`_alive` once none is, or ``seconds`` from now."""
    deadline = time.monotonic() + seconds
    while _alive(processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _alive(processes)


@pytest.mark.slow
def test_no_worker_outlives_a_sweep_killed_with_sigkill_and_its_lock_is_released(tmp_path):
    """Two workers busy on seeds of 10^6 trials (seconds each) when the sweep's process is killed outright: the
    supervising parent, whose child runs the sweep and started the workers (docs/limits.md, "Supervision")."""
    out = tmp_path / "out"
    sweep = subprocess.Popen([sys.executable, "-m", "specproof.cli", "report", "--out", str(out), "--jobs", "2",
                              "--seeds", "4", "--trials", "1000000", *SMALL_REPORT],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parent = psutil.Process(sweep.pid)
    deadline = time.monotonic() + 60
    workers: list[psutil.Process] = []
    children: list[psutil.Process] = []
    try:
        while len(workers) < 2 and sweep.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            workers = [p for p in parent.children(recursive=True) if "spawn_main" in " ".join(p.cmdline())]
        assert len(workers) == 2, "the sweep never started its two workers"
        time.sleep(0.5)  # the workers past their start, inside a seed
        children = parent.children(recursive=True)  # the workers and multiprocessing's resource tracker
        assert len(_alive(children)) >= 2
        os.kill(sweep.pid, signal.SIGKILL)
        sweep.wait()
        assert _alive_after(children, 5) == []
    finally:
        sweep.kill()
        for p in children or workers:
            try:
                p.kill()
            except psutil.Error:
                pass
    with Store(out / "store").lock():  # the kernel released the dead sweep's lock: a new sweep may start
        pass


def test_a_process_set_to_die_with_its_parent_dies_with_it():
    """:func:`simulator.workers.die_with_parent`: the kernel's signal on Linux, the polling thread elsewhere (its
    path taken here by a child that calls itself ``darwin``). The test process starts a parent, which starts one
    child of each kind set to die with it; each says what it armed (``PR_GET_PDEATHSIG``, the watching thread),
    and the parent is killed outright."""
    child = ("import ctypes, os, sys, threading, time; sys.platform = sys.argv[2]; "
             "from simulator.workers import die_with_parent; die_with_parent(int(sys.argv[1])); "
             "sig = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0); "
             "watching = any(t.name == 'die-with-parent' for t in threading.enumerate()); "
             "os.write(1, f'{sys.argv[2]} {sig.value} {watching}\\n'.encode()); time.sleep(60)")
    parent = ("import os, subprocess, sys, time; "
              f"kids = [subprocess.Popen([sys.executable, '-c', {child!r}, str(os.getpid()), platform]) "
              "for platform in ('linux', 'darwin')]; "
              "print(*(c.pid for c in kids), flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    children = [psutil.Process(int(pid)) for pid in proc.stdout.readline().split()]
    try:
        armed = {proc.stdout.readline().strip() for _ in children}
        assert armed == {f"linux {int(signal.SIGKILL)} False", "darwin 0 True"}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _alive_after(children, 5) == []
    finally:
        proc.kill()
        for c in children:
            if c.is_running():
                c.kill()


def test_a_worker_whose_parent_is_already_gone_exits_at_once():
    """The parent may die before the worker arms its signal: it then checks that its parent is the one given."""
    result = subprocess.run([sys.executable, "-c", "from simulator.workers import die_with_parent; "
                             "die_with_parent(1); print('still running')"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "still running" not in result.stdout


@pytest.mark.slow
def test_mc_refuses_an_oversized_run_at_once_naming_trials_and_timeout():
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run(["mc", "--verifier", "tv-rrs", "--trials", str(10**12)], timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: trials: ")
    assert "--trials" in result.stderr and "--timeout" in result.stderr and "1800 s" in result.stderr
    # About 2 s on 2 idle cores (start-up, the model, a 0.2 s pilot); the run itself would take weeks. Its CPU
    # time, not the wall clock, so that a busy machine does not fail the test.
    assert (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime) < 8
    for bad in ("0", "-5"):
        result = CliRunner().invoke(cli.main, ["mc", "--verifier", "tv-rrs", "--trials", bad])
        assert result.exit_code == 2 and "error: trials: invalid '--trials': " in result.output, result.output
        assert "not in the range 2<=x<=" in result.output, result.output


def test_the_estimate_comes_from_a_short_pilot_and_refusing_it_stops_the_run():
    done = []
    with pytest.raises(SizeLimitError) as err:
        monte_carlo(lambda s: SyntheticModel(4, seed=s), FixedShape(make_topology("complete", 2, 2)), "tv-rrs",
                    VERIFIERS["tv-rrs"].fn, 3, 10**9, done.append, estimate=lambda e: e.check(60))
    assert err.value.field == "trials"
    assert "--trials" in err.value.message and "--timeout" in err.value.message
    assert 0 < sum(done) < 10**8  # a 0.2 s pilot: far under a second of trials at any speed this engine has


def _seed_by_hand(model, drafter, name: str, seed: int, trials: int) -> dict:
    """One seed's accepted-length mean and TVD from the reference path, every trial in one call."""
    accepted, sequences = run_trials(model, drafter, VERIFIERS[name].fn, seed, range(trials))
    table = target_table(model, drafter.height)
    mean, se = mean_and_se(np.bincount(accepted, minlength=drafter.height + 1))
    return {"accept_len_mean": mean, "accept_len_se": se,
            "tvd": empirical_tvd(Histogram.of(encode(sequences, model.vocab), len(table)), table)}


@pytest.mark.slow
def test_mc_numbers_are_the_same_with_the_estimate_and_without_it(tmp_path):
    """``specproof mc`` (which runs the pilot) against :func:`monte_carlo` without an estimate, on the batched path
    (the same chunks, timed or not); and the reference path, whose chunks grow from a few trials as the pilot
    times them, against every trial run in one call."""
    args = ["--verifier", "tv-rrs", "--vocab", "5", "--depth", "3", "--trials", "20000", "--seeds", "2"]
    result = run(["mc", *args, "--json", str(tmp_path / "mc.json")])
    assert result.returncode == 0, result.stderr
    direct = monte_carlo(lambda s: SyntheticModel(5, seed=s), FixedShape(make_topology("complete", 3, 2)),
                         "tv-rrs", VERIFIERS["tv-rrs"].fn, 2, 20000)
    written = json.loads((tmp_path / "mc.json").read_text())
    # the command line adds what the run claims (docs/plugins.md): tv-rrs under its claimed scheme, not a control
    assert (written.pop("claimed_schemes"), written.pop("control_run")) == (["iid"], False)
    assert written == json.loads(json.dumps(direct.to_json()))

    model = SyntheticModel(4, seed=1)
    drafter = make_drafter("without-replacement", make_topology("complete", 2, 2), model)
    estimates = []
    summary = monte_carlo(lambda s: model, drafter, "tv-sps", VERIFIERS["tv-sps"].fn, 1, 1500, first_seed=1,
                          estimate=estimates.append)
    by_hand = _seed_by_hand(model, drafter, "tv-sps", 1, 1500)
    assert {k: summary.per_seed[0][k] for k in ("accept_len_mean", "tvd")} == \
           {k: by_hand[k] for k in ("accept_len_mean", "tvd")}
    assert summary.accept_len_se == by_hand["accept_len_se"]
    assert len(estimates) == 1 and 0 < estimates[0].pilot_trials <= 1500 and estimates[0].per_trial > 0


def test_reference_chunks_follow_the_time_a_trial_takes():
    assert engine._next_chunk(8, 0.001, 1000) == 16  # fast trials: doubling, up to the most
    assert engine._next_chunk(1000, 0.001, 1000) == 1000
    assert engine._next_chunk(8, 4 * engine.REFERENCE_SECONDS, 1000) == 2  # slow trials: progress every ~0.5 s
    assert engine._next_chunk(1, 100.0, 1000) == 1
