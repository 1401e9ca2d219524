"""A plugin draws only from its ``rng`` (docs/plugins.md, "Draw only from rng"): one drawing from Python's ``random``
(``random.random()`` included), numpy's generators, ``os.urandom`` or torch is refused with exit 2 naming the
source and the plugin's line, on every command that runs a plugin (certify, law, mc, prove, hunt, gate). The same
rule through ``rng`` (``sps_rng``) passes every command: the control. With the watch taken out, the refusal goes:
the test would catch a command that lost it.

The plugins are tests/plugins/outside_rng.py; each marks its draw with ``# draw: SOURCE``.
"""

from __future__ import annotations

import inspect
import json
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import simulator.speculation
from exact.subject import subject
from simulator.errors import RandomSourceError
from simulator.random_sources import call_plugin, scan_plugin
from specproof.cli import app as cli
from tests.plugins import outside_rng

MODULE = "tests.plugins.outside_rng"
#: each plugin and the source its refusal names
SOURCES = {"sps_python_random": "random.random", "sps_random_choice": "random.choice",
           "sps_numpy_generator": "numpy.random.Generator", "sps_numpy_global": "np.random.rand",
           "sps_urandom": "os.urandom", "sps_torch": "torch.rand"}
COMMANDS = ("certify", "law", "mc", "prove", "hunt", "gate")


def draw_line(plugin: str) -> int:
    """The line of ``plugin``'s draw, found by its ``# draw:`` mark."""
    lines, start = inspect.getsourcelines(getattr(outside_rng, plugin))
    return start + next(i for i, line in enumerate(lines) if "# draw:" in line)


def arguments(command: str, plugin: str, tmp_path: Path) -> list[str]:
    """A small run of ``command`` on the plugin."""
    verifier = f"{MODULE}:{plugin}"
    shape = ["--topology", "chain", "--depth", "1"]
    if command == "certify":
        return ["certify", "--verifier", verifier, *shape, "--vocab", "3", "--model", "random-rational"]
    if command == "law":
        case = tmp_path / "case.json"
        case.write_text(json.dumps({"vocab": 2, "parents": [-1, 0], "tokens": [None, 1],
                                    "p": {"0": ["1/2", "1/2"]}, "q": {"0": ["1/4", "3/4"], "1": ["1/3", "2/3"]},
                                    "verifier": verifier}))
        return ["law", "--case", str(case)]
    if command == "mc":
        return ["mc", "--verifier", verifier, *shape, "--seeds", "1", "--trials", "200"]
    if command == "prove":
        return ["prove", "--verifier", verifier, *shape, "--vocab", "2", "--case-out", str(tmp_path / "case.json")]
    if command == "hunt":
        return ["hunt", "--verifier", verifier, *shape, "--time-limit", "2", "--shrink-time", "1",
                "--case-out", str(tmp_path / "case.json")]
    config = tmp_path / "specproof.toml"
    config.write_text(f'[gate]\nstate = "state"\nhunt_seconds = 0\n\n[battery]\nseeds = [0]\nvocab = [2]\n'
                      f'topologies = ["chain"]\ndepth = 1\n\n[[check]]\nverifier = "{verifier}"\n'
                      'expect = "lossless"\n')
    return ["gate", "--config", str(config)]


def invoke(args: list[str]):
    return CliRunner().invoke(cli.main, args, catch_exceptions=False)


def _cases():
    for plugin, source in SOURCES.items():
        for command in COMMANDS:
            marks = [pytest.mark.slow] if plugin == "sps_torch" else []  # importing torch takes seconds
            yield pytest.param(plugin, source, command, marks=marks, id=f"{command}-{plugin}")


@pytest.mark.parametrize("plugin, source, command", _cases())
def test_a_draw_outside_rng_is_refused_naming_the_source_and_line(plugin, source, command, tmp_path):
    if plugin == "sps_torch":
        pytest.importorskip("torch")
    result = invoke(arguments(command, plugin, tmp_path))
    assert result.exit_code == 2, result.output
    assert source in result.output and "a draw outside rng" in result.output, result.output
    assert f"outside_rng.py:{draw_line(plugin)}" in result.output, result.output
    assert "Traceback" not in result.output, result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_the_same_rule_through_rng_passes_every_command(command, tmp_path):
    result = invoke(arguments(command, "sps_rng", tmp_path))
    assert result.exit_code == 0, result.output
    assert "outside rng" not in result.output


def test_without_the_watch_the_draw_is_not_refused(tmp_path, monkeypatch):
    """The planted bug: decide() calling a plugin directly. The refusal is gone, so the test above would fail."""
    monkeypatch.setattr(simulator.speculation, "call_plugin", lambda fn, *args: fn(*args))
    result = invoke(arguments("law", "sps_python_random", tmp_path))
    assert "a draw outside rng" not in result.output, result.output


def test_the_scan_follows_bound_names_aliases_closures_and_attributes():
    from random import random as closed_over

    def closure(tree, p, q, rng):
        return 0, int(closed_over() < 0.5)

    for plugin, source in ((outside_rng.sps_bound, "bound_random (random.random)"),
                           (outside_rng.sps_aliased, "r.uniform (random.uniform)"),
                           (outside_rng.sps_held, "a numpy.random.Generator (the plugin's generator)"),
                           (closure, "random.random (the plugin's closed_over)")):
        with pytest.raises(RandomSourceError, match=re.escape(source)):
            scan_plugin(plugin)
    scan_plugin(outside_rng.sps_names_random_in_text)  # the control: a string is no draw


def test_a_plugin_catching_the_refusal_still_gets_none():
    """The refusal is kept and raised again when the plugin returns: catching it buys no verdict."""
    def catches(tree, p, q, rng):
        draw = getattr(random, "ran" + "dom")  # looked up at run time: past the scan, met by the replaced name
        try:
            draw()
        except RandomSourceError:
            pass
        return 0, 0
    with pytest.raises(RandomSourceError, match="random.random"):
        call_plugin(catches, None, None, None, None)
    assert call_plugin(lambda tree, p, q, rng: (0, 1), None, None, None, None) == (0, 1)  # the control


def test_the_random_module_is_itself_again_after_a_plugin():
    original = random.random
    with pytest.raises(RandomSourceError):
        call_plugin(lambda *a: random.random(), None, None, None, None)
    assert random.random is original and "random" not in vars(random.Random)
    assert subject(f"{MODULE}:sps_rng").schemes == ("iid",)
