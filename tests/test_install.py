"""The project installs as a user gets it (``pip install .``, not editable): every package and data file is in the
wheel, and the ``specproof`` entry point runs from outside the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_non_editable_install_runs_specproof_from_elsewhere(tmp_path):
    target = tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "--target", str(target), str(REPO)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    env = {**os.environ, "PYTHONPATH": str(target)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([sys.executable, "-c", "import specproof, simulator, exact; print(specproof.__file__, "
                            "simulator.__file__, exact.__file__)"], capture_output=True, text=True, cwd=elsewhere,
                           env=env, timeout=60)
    assert where.returncode == 0, where.stderr
    assert all(path.startswith(str(target)) for path in where.stdout.split()), where.stdout
    assert (target / "simulator" / "data" / "layer_verification_toy.json").exists()  # package data shipped
    helped = subprocess.run([str(target / "bin" / "specproof"), "--help"], capture_output=True, text=True,
                            cwd=elsewhere, env=env, timeout=60)
    assert helped.returncode == 0, helped.stderr
    for command in ("certify", "prove", "mc", "report", "gate", "hunt", "zoo", "kernels", "real", "fetch", "list"):
        assert command in helped.stdout
    listed = subprocess.run([str(target / "bin" / "specproof"), "list"], capture_output=True, text=True,
                            cwd=elsewhere, env=env, timeout=60)
    assert listed.returncode == 0 and "tv-rrs" in listed.stdout, listed.stderr
