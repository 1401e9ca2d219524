"""Samplers other projects ship, certified through the shipped adapters as reports/clients.md does.

vLLM 0.6.3's ``RejectionSampler`` runs from its own two modules (``specproof fetch vllm-sampler``; the test is
skipped, saying so, where they are not in the cache, since fetching downloads a 195 MB wheel). What it must give
is derived from its source: its residual ``clamp(q − p, min=finfo(float32).tiny)`` gives a token the target
excludes the weight ``tiny`` against a residual of total mass below 1, so the support violation is positive and
of the order of ``tiny`` (1.2e-38), far below any float tolerance.
"""

from __future__ import annotations

import json
import sys
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from simulator.kernels.conventions import vllm_adapter  # noqa: E402
from simulator.real.fetch import cached  # noqa: E402
from specproof.cli.app import main  # noqa: E402

VLLM = "vllm.model_executor.layers.rejection_sampler:RejectionSampler.forward"


def test_the_vllm_hook_installs_stand_ins_only_where_missing(monkeypatch):
    mine = type(sys)("vllm.envs")
    monkeypatch.setitem(sys.modules, "vllm.envs", mine)
    monkeypatch.delitem(sys.modules, "vllm.logger", raising=False)
    vllm_adapter.before_kernel_import()
    assert sys.modules["vllm.envs"] is mine  # an imported module is left alone
    assert sys.modules["vllm.logger"].init_logger("x").name == "x"
    monkeypatch.delitem(sys.modules, "vllm.logger")


def test_vllm_063_sampler_is_lossy_by_a_support_violation_of_about_tiny(tmp_path, monkeypatch):
    folder = cached("vllm-sampler")
    if folder is None:
        pytest.skip("vLLM's sampler modules are not in the cache: run `specproof fetch vllm-sampler` (a 195 MB "
                    "download) to run this test")
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", list(sys.path))
    out = tmp_path / "cert.json"
    result = CliRunner().invoke(main, ["certify", "--kernel", VLLM, "--adapter", "vllm", "--import-path", str(folder),
                                       "--topology", "chain", "--depth", "2", "--model", "random-rational",
                                       "--vocab", "3", "--json", str(out)])
    assert result.exit_code == 1, result.output
    mass = Fraction(json.loads(out.read_text())["off_support"])
    tiny = Fraction(torch.finfo(torch.float32).tiny)
    assert tiny / 4 < mass < 4 * tiny
    assert "finfo(float32).tiny" in result.output and "LOSSY whatever the tolerance" in result.output
