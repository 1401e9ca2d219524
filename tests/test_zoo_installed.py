"""``specproof zoo`` needs nothing of the repository but the installed package: run from a folder outside it, its
help works and every mutant's subject (torch kernels of :mod:`specproof.gate.mutants` and
:mod:`specproof.gate.torch_kernels`, Triton kernels of :mod:`specproof.gate.triton_kernels`, plugins) resolves, and one kernel mutant certifies LOSSY. The negative
control: a mutant named in a module of the repository's ``examples/`` does not resolve there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESOLVE = """
import sys
from exact.subject import subject
from specproof.gate.zoo import MUTANTS
from specproof.gate.mutants import sps_chain_stub_uniform
from specproof.gate.battery import battery, build, instances
from exact.certificate import certify
for m in MUTANTS:
    subject(m.subject)
what = subject({"kernel": "specproof.gate.mutants:sps_chain_stub_uniform", "adapter": "chain"})
b = battery({"seeds": [0], "vocab": [2], "topologies": ["chain"], "depth": 1})
inst = instances(b, what)[0]
print(len(MUTANTS), certify(*build(inst, b), what.fn, "fraction").lossless)
"""


def outside(tmp_path: Path) -> dict:
    """An environment for a process in ``tmp_path``, outside the repository: no PYTHONPATH into it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert not (tmp_path / "examples").exists() and REPO not in tmp_path.parents
    return env


@pytest.mark.slow
def test_zoo_help_and_its_mutants_work_from_outside_the_repository(tmp_path):
    pytest.importorskip("torch")
    env = outside(tmp_path)
    exe = shutil.which("specproof")
    cmd = [exe] if exe else [sys.executable, "-m", "specproof.cli"]
    helped = subprocess.run(cmd + ["zoo", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0 and "mutation zoo" in helped.stdout, helped.stderr
    run = subprocess.run([sys.executable, "-c", RESOLVE], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    from specproof.gate.zoo import MUTANTS

    assert run.stdout.split() == [str(len(MUTANTS)), "False"]  # every mutant resolved; stub-uniform is LOSSY
    control = subprocess.run([sys.executable, "-c", "from exact.subject import subject\n"
                              "subject({'verifier': 'examples.plugin_verifier:my_tv'})"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert control.returncode != 0 and "examples.plugin_verifier" in control.stderr


def test_the_zoo_modules_are_in_the_package_not_in_examples():
    from setuptools import find_packages

    packages = find_packages(str(REPO), include=["simulator*", "exact*", "specproof*"])  # pyproject's rule
    assert "specproof.gate" in packages
    assert (REPO / "specproof/gate/mutants.py").is_file() and (REPO / "specproof/gate/torch_kernels.py").is_file()
    assert not (REPO / "examples/mutants.py").exists() and not (REPO / "examples/torch_kernels.py").exists()
    zoo = (REPO / "specproof/gate/zoo.py").read_text()
    assert "examples." not in zoo
