"""The gate's baselines are keyed by every parameter of an instance: a battery at depth 1 checked against
baselines made at depth 2 finds no baseline (as for a new check), not a moved ``E[τ]``; a real move at the same
key is still a regression (the negative control). The values are derived apart from the gate: SpS's ``E[τ]`` at
depth 1 is ``Σ_x min(p(x), q(x))``."""

from __future__ import annotations

import json
from fractions import Fraction

from specproof.gate.battery import DEFAULTS, baseline_key, battery
from test_gate_faults import gate, sps_acceptance, write

DEPTH_1 = '[battery]\nseeds = [0]\nvocab = [2]\ntopologies = ["chain"]\ndepth = 1\ndrafting = ["iid"]\n\n'
DEPTH_2 = DEPTH_1.replace("depth = 1", "depth = 2")


def test_a_battery_at_depth_1_against_baselines_made_at_depth_2_has_no_baseline_not_a_regression(tmp_path):
    deeper = write(tmp_path, battery=DEPTH_2)
    made = gate("--config", deeper, "--update-baselines")
    assert made.exit_code == 0, made.output
    baselines = json.loads((tmp_path / "specproof-baselines.json").read_text())
    (key,) = baselines["tv-sps"]
    assert "depth=2" in key and Fraction(baselines["tv-sps"][key]) != Fraction(sps_acceptance())
    shallow = write(tmp_path, battery=DEPTH_1)  # the same folder: the same baselines file, another instance
    out = gate("--config", shallow)
    assert out.exit_code == 0, out.output
    assert "no baseline" in out.stdout and "REGRESSION" not in out.stdout and "moved" not in \
        out.stdout.replace("0 moved", "")


def test_a_moved_acceptance_at_the_same_key_is_a_regression(tmp_path):
    config = write(tmp_path, battery=DEPTH_1)
    key = baseline_key({"model": "random-rational", "seed": 0, "vocab": 2, "topology": "chain", "drafting": "iid"},
                       battery({"depth": 1, "seeds": [0], "vocab": [2], "topologies": ["chain"]}))
    path = tmp_path / "specproof-baselines.json"
    path.write_text(json.dumps({"tv-sps": {key: sps_acceptance()}}))
    held = gate("--config", config)
    assert held.exit_code == 0 and "1 equal, 0 moved" in held.stdout, held.output
    path.write_text(json.dumps({"tv-sps": {key: str(Fraction(sps_acceptance()) + Fraction(1, 10**9))}}))
    moved = gate("--config", config)
    assert moved.exit_code == 1 and "moved" in moved.stdout, moved.output


def test_the_key_names_every_parameter_the_instance_depends_on():
    fixed = {"model": "synthetic", "seed": 1, "vocab": 3, "topology": "complete", "drafting": "iid"}
    dynamic = {"model": "random-rational", "seed": 0, "vocab": 2, "drafting": "dyspec"}
    b = battery({})
    assert baseline_key(fixed, b) == "synthetic seed=1 V=3 complete iid depth=2 branching=2 rho=0.5 tau_p=1.0 " \
                                     "tau_q=1.0 fraction"
    assert baseline_key(dynamic, b) == "random-rational seed=0 V=2 dynamic dyspec budget=4 threshold=0.2 " \
                                       "max_depth=2 zero_prob=0.25 fraction"
    for name, other in (("depth", 3), ("branching", 3), ("rho", 0.25), ("arithmetic", "float")):
        assert baseline_key(fixed, {**b, name: other}) != baseline_key(fixed, b), name
    assert baseline_key(fixed, {**b, "zero_prob": 0.5}) == baseline_key(fixed, b)  # not a synthetic model's
    assert set(DEFAULTS) >= {"depth", "branching", "budget", "threshold", "max_depth", "rho", "zero_prob"}
