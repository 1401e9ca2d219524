"""vLLM 0.33.0 Model Runner V2's lossy-by-design rules, ``fly`` and ``forced-rate`` (docs/lossy.md): their exact
laws against hand derivations, Monte Carlo against the exact law, the shipped ``rejection_sample`` (``specproof
fetch vllm-mrv2``) against the built-in rules, and their knobs' typed errors.

The hand instance: ``V = 2``, every row ``p = (1/2, 1/2)``, ``q = (1/4, 3/4)``, a chain of depth 2. Token 0 is
accepted natively with probability ``q/p = 1/2``, token 1 always; ``(q − p)_+`` is all on token 1; the target's
entropy ``H(1/4, 3/4) ≈ 0.562`` passes FLy's default threshold 0.3 and its default window is ``min(6, 1) = 1``.

* ``fly``: a rejection at position 0 is deferred, and stands if position 1 is accepted natively. The law of the first
  two tokens (the third is always the target's) is ``(1,1): 3/8 + 1/16·3/4 = 27/64``, ``(1,0): 1/8 + 1/16·1/4 =
  9/64``, ``(0,1): 1/8 + 1/16 + 1/8 = 20/64``, ``(0,0): 1/16 + 1/16 = 8/64`` (the last 1/16 of each: the deferral
  failed, token 1 resampled at position 0 and the rest from the target), against the target's ``36, 12, 12, 4``
  (/64): TVD ``12/64 = 3/16``; ``P(τ = 2) = 3/4``, ``P(τ = 1) = 3/16``, so ``E[τ] = 27/16``. Above the entropy (0.6)
  nothing is deferred: speculative sampling, TVD 0 and ``E[τ] = 3/4 + 9/16 = 21/16``.
* ``forced-rate`` at ``synthetic_acceptance_rates = [3/4, 1/2]``: conditional rates ``3/4, 2/3``, so ``τ = 0, 1, 2``
  with probability ``1/4, 1/4, 1/2`` (``E[τ] = 5/4``); after a rejection token 1. First two tokens: ``(0,0): 1/8``,
  ``(0,1): 1/4``, ``(1,0): 3/16``, ``(1,1): 7/16`` against ``1/16, 3/16, 3/16, 9/16``: TVD ``1/8``.
"""

from __future__ import annotations

import importlib.util
import math
from fractions import Fraction as F

import numpy as np
import pytest

from exact import certify, round_law
from simulator.drafting import FixedShape
from simulator.drafting.drafter_registry import make_drafter
from simulator.errors import InvalidParameterError
from simulator.verifiers.knobs import parse_kwargs
from simulator.models import RandomRationalModel, TableModel
from simulator.montecarlo.engine import mean_and_se, run_trials
from simulator.real.fetch import cached
from simulator.trees import make_topology
from simulator.verifiers.lossy.fly import top_entropy_at_least
from simulator.verifiers.registry import VERIFIERS, load_verifier

HAND = TableModel(2, {None: [F(1, 2), F(1, 2)]}, {None: [F(1, 4), F(3, 4)]})
MC = TableModel(3, {None: [F(1, 2), F(1, 4), F(1, 4)]}, {None: [F(1, 4), F(1, 4), F(1, 2)]})


def _chain(model, depth: int = 2):
    return make_drafter("iid", make_topology("chain", depth, 1), model)


def _rule(name: str, **knobs):
    return load_verifier(name, knobs)[1]


def test_fly_on_the_hand_instance():
    cert = certify(HAND, _chain(HAND), _rule("fly"))
    assert (cert.tvd, cert.expected_accepted) == (F(3, 16), F(27, 16))
    assert cert.counterexample.sequence == (1, 1, 1) and cert.counterexample.verifier_prob == F(81, 256)


@pytest.mark.parametrize("knobs", [{"fly_entropy_threshold": 0.6},  # above H(q) ≈ 0.562
                                   {"fly_entropy_threshold": 1.1},  # above log 3: the registry's lossless point
                                   {"fly_window_size": 0},  # FLy off, the kernel's default
                                   {"fly_window_size": 2}])  # not below the depth: i + W < k never holds
def test_fly_where_nothing_is_deferred_is_lossless(knobs):
    cert = certify(HAND, _chain(HAND), _rule("fly", **knobs))
    assert cert.lossless and cert.tvd == 0 and cert.expected_accepted == F(21, 16)
    # the negative control is the default knobs above: 3/16


def test_forced_rate_on_the_hand_instance():
    cert = certify(HAND, _chain(HAND), _rule("forced-rate", synthetic_acceptance_rates=[0.75, 0.5]))
    assert (cert.tvd, cert.expected_accepted) == (F(1, 8), F(5, 4))


def test_forced_rate_emits_token_0_where_the_residual_is_empty():
    # q = p: vLLM's residual logits are all -inf, and its Gumbel-max breaks the tie to the left
    same = TableModel(3, {None: [F(1, 4), F(1, 4), F(1, 2)]}, {None: [F(1, 4), F(1, 4), F(1, 2)]})
    law = round_law(same, _chain(same), _rule("forced-rate", synthetic_acceptance_rates=[0, 0])).completed()
    assert sum(prob for seq, prob in law.items() if seq[0] == 0) == 1


@pytest.mark.parametrize(("name", "knobs"), [("fly", {}), ("forced-rate", {"synthetic_acceptance_rates": [0.8, 0.64]})])
def test_monte_carlo_agrees_with_the_exact_law(name, knobs):
    verifier = _rule(name, **knobs)
    law = round_law(MC, _chain(MC), verifier)
    completed = law.completed()
    cell = max(completed, key=completed.get)
    trials = 6000
    accepted, sequences = run_trials(MC, FixedShape(make_topology("chain", 2, 1)), verifier, 17, range(trials))
    mean, se = mean_and_se(np.bincount(accepted, minlength=3))
    assert abs(mean - float(law.expected_accepted())) <= 3 * se
    prob = float(completed[cell])
    freq = float(np.mean(np.all(sequences == np.array(cell), axis=1)))
    assert abs(freq - prob) <= 3 * math.sqrt(prob * (1 - prob) / trials)


def test_top_k_entropy_is_decided_exactly():
    point = [1, 0, 0]  # entropy 0, decided rationally
    assert top_entropy_at_least(point, 3, 0, "fly", "r") and not top_entropy_at_least(point, 3, F(1, 10), "fly", "r")
    half = [F(1, 2), F(1, 2), 0]  # log 2 = 0.693147180559945...
    assert top_entropy_at_least(half, 3, F("0.6931471805599453"), "fly", "r")
    assert not top_entropy_at_least(half, 3, F("0.6931471805599454"), "fly", "r")
    assert not top_entropy_at_least([F(1, 3)] * 3 + [0], 2, F(74, 100), "fly", "r")  # top 2 only: 2/3 log 3 ≈ 0.732


@pytest.mark.parametrize(("name", "knobs", "field"), [
    ("fly", {"fly_window_size": -1}, "fly_window_size"),
    ("fly", {"fly_window_size": 1.5}, "fly_window_size"),
    ("fly", {"fly_entropy_threshold": -0.1}, "fly_entropy_threshold"),
    ("fly", {"fly_entropy_top_k": 0}, "fly_entropy_top_k"),
    ("forced-rate", {"synthetic_acceptance_rates": [1.2, 0.5]}, "synthetic_acceptance_rates"),
    ("forced-rate", {"synthetic_acceptance_rates": [0.5, 0.8]}, "synthetic_acceptance_rates"),  # increasing
    ("forced-rate", {"synthetic_acceptance_rates": 1.5}, "synthetic_acceptance_rates"),
    ("forced-rate", {"synthetic_acceptance_rates": []}, "synthetic_acceptance_rates"),
])
def test_bad_knob_values_are_refused_naming_the_knob(name, knobs, field):
    with pytest.raises(InvalidParameterError, match=f"verifier-kwargs.{field}"):
        load_verifier(name, knobs)


def test_a_list_of_rates_the_wrong_length_is_named_when_the_chain_is_verified():
    with pytest.raises(InvalidParameterError, match="verifier-kwargs.synthetic_acceptance_rates"):
        certify(HAND, _chain(HAND), _rule("forced-rate", synthetic_acceptance_rates=[0.8]))


def test_one_rate_is_vllms_list_of_its_powers_and_the_default_is_0_8():
    laws = [round_law(MC, _chain(MC), _rule("forced-rate", **knobs)).completed()
            for knobs in ({"synthetic_acceptance_rates": 0.8}, {"synthetic_acceptance_rates": [0.8, 0.64]}, {})]
    assert laws[0] == laws[1] == laws[2]


def test_fly_at_depth_one_is_speculative_sampling():
    # vLLM's config refuses FLy below depth 2; its default window there, min(6, 0) = 0, defers nothing
    assert certify(HAND, _chain(HAND, 1), _rule("fly")).lossless


def test_registered_lossy_by_design_on_chains_with_a_list_typed_on_the_command_line():
    assert all(VERIFIERS[n].lossy_by_design and VERIFIERS[n].shapes == ("chain",) for n in ("fly", "forced-rate"))
    assert parse_kwargs("synthetic_acceptance_rates=[0.8,0.64],x=1", "verifier-kwargs") == {
        "synthetic_acceptance_rates": [0.8, 0.64], "x": 1}


# -- the shipped code: vLLM 0.33.0 MRV2's rejection_sample, unmodified, under Triton's interpreter ----------------

MRV2 = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils:rejection_sample"
#: the kernel's law against the exact rule's: it rounds the rows' logs, the entropy and the rates to float32
#: (relative 6e-8 each, a few dozen per sequence); measured differences stay below 7e-8
SHIPPED_TOLERANCE = 1e-6
RATES = {2: [0.8, 0.64], 3: [0.95, 0.9025, 0.857375]}  # conditional 0.8 and 0.95 per position
#: (depth, vocab, verifier knobs, kernel kwargs, seeds): random rational pairs where the rule is lossy, and none whose
#: rejected row has q = p (there the capture refuses the kernel's argmax over an all -inf residual)
SHIPPED = [
    (2, 3, "fly", {}, {"fly_window_size": 1, "fly_entropy_threshold": 0.3}, (4, 8, 10)),
    (3, 2, "fly", {"fly_entropy_threshold": 0.6}, {"fly_window_size": 2, "fly_entropy_threshold": 0.6}, (1, 6, 8)),
    (2, 3, "forced-rate", {"synthetic_acceptance_rates": RATES[2]}, {"synthetic_acceptance_rates": RATES[2]},
     (10, 12, 13)),
    (3, 2, "forced-rate", {"synthetic_acceptance_rates": RATES[3]}, {"synthetic_acceptance_rates": RATES[3]},
     (1, 7, 15)),
]


@pytest.mark.slow
@pytest.mark.parametrize(("depth", "vocab", "name", "knobs", "kernel_kwargs", "seeds"), SHIPPED)
def test_shipped_mrv2_gives_the_built_in_rules_exact_tvd(depth, vocab, name, knobs, kernel_kwargs, seeds):
    pytest.importorskip("torch")
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed: pip install -e '.[triton]'")
    folder = cached("vllm-mrv2")
    if folder is None:
        pytest.skip("vLLM 0.33.0's Model Runner V2 modules are not in the cache: run `specproof fetch vllm-mrv2`")
    from simulator.kernels.kernel import Kernel

    kernel = Kernel(MRV2, "vllm-mrv2", import_path=[str(folder)], kwargs={"use_fp64": True, **kernel_kwargs})
    for seed in seeds:
        model = RandomRationalModel(vocab, seed=seed)
        built_in = certify(model, _chain(model, depth), _rule(name, **knobs))
        shipped = certify(model, _chain(model, depth), kernel)
        assert built_in.tvd > 0 and not shipped.lossless, seed
        assert abs(float(shipped.tvd - built_in.tvd)) < SHIPPED_TOLERANCE, seed
        assert abs(float(shipped.expected_accepted - built_in.expected_accepted)) < SHIPPED_TOLERANCE, seed
