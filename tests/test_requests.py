"""The front door: each model-and-tree command builds one frozen request, runs one function per mode, and builds
its model, drafter and verifier once per model seed; its help lists options in sections."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import exact.subject
import simulator.drafting.drafter_registry as drafter_registry
from simulator.models import model_pairs
from specproof.cli import app as cli
from specproof.cli import certify_commands
from specproof.cli.requests import CertifyRequest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def builds(monkeypatch) -> dict[str, int]:
    """Counts of model pairs constructed (any class, any caller), drafters made and verifiers imported."""
    counts = {"model": 0, "drafter": 0, "verifier": 0}

    def counting(key, fn):
        def wrapper(*args, **kwargs):
            counts[key] += 1
            return fn(*args, **kwargs)
        return wrapper

    for cls in (model_pairs.SyntheticModel, model_pairs.RandomRationalModel, model_pairs.TableModel):
        monkeypatch.setattr(cls, "__init__", counting("model", cls.__init__))
    monkeypatch.setattr(drafter_registry, "make_drafter", counting("drafter", drafter_registry.make_drafter))
    import specproof.cli.specs as specs
    monkeypatch.setattr(specs, "make_drafter", counting("drafter", specs.make_drafter))
    monkeypatch.setattr(exact.subject, "load_verifier", counting("verifier", exact.subject.load_verifier))
    return counts


def invoke(*args: str):
    return CliRunner().invoke(cli.main, list(args))


@pytest.mark.parametrize("model", ["synthetic", "random-rational"])
def test_certify_builds_the_model_drafter_and_verifier_once(builds, model):
    result = invoke("certify", "--verifier", "tv-rrs", "--model", model, "--vocab", "2", "--depth", "1")
    assert result.exit_code == 0, result.output
    assert builds == {"model": 1, "drafter": 1, "verifier": 1}


def test_certify_builds_each_seeds_model_once(builds):
    result = invoke("certify", "--verifier", "tv-rrs", "--model", "random-rational", "--vocab", "2", "--depth", "1",
                    "--seeds", "3")
    assert result.exit_code == 0, result.output
    assert builds == {"model": 3, "drafter": 3, "verifier": 1}


def test_certify_of_a_plugin_imports_it_once(builds):
    result = invoke("certify", "--verifier", "examples.plugin_verifier:my_tv", "--topology", "chain", "--depth", "2",
                    "--model", "random-rational", "--vocab", "2")
    assert result.exit_code == 0, result.output
    assert builds == {"model": 1, "drafter": 1, "verifier": 1}


def test_mc_builds_each_seeds_model_once(builds):
    result = invoke("mc", "--verifier", "tv-sps", "--vocab", "2", "--depth", "1", "--seeds", "2", "--trials", "200")
    assert result.exit_code in (0, 1), result.output
    assert builds == {"model": 2, "drafter": 1, "verifier": 1}


@pytest.mark.parametrize("args, mode", [
    (("--verifier", "tv-sps"), "model"),
    (("--case", "examples/case.json"), "case"),
    (("--model", "causal-lm", "--verifier", "tv-sps", "--target", "t", "--draft", "d", "--prompt", "hi",
      "--top-k", "2"), "causal-lm"),
])
def test_certify_calls_one_function_per_mode(monkeypatch, args, mode):
    calls = []
    for name, fn_mode in (("certify_model", "model"), ("certify_case", "case"), ("certify_causal_lm", "causal-lm")):
        monkeypatch.setattr(certify_commands, name, lambda request, m=fn_mode: calls.append((m, request)))
    result = invoke("certify", *args)
    assert result.exit_code == 0, result.output
    assert [m for m, _ in calls] == [mode]
    request = calls[0][1]
    assert isinstance(request, CertifyRequest) and request.mode == mode
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.pairs = 2  # type: ignore[misc]


def test_the_request_records_the_options_given(monkeypatch):
    seen = []
    monkeypatch.setattr(certify_commands, "certify_model", seen.append)
    assert invoke("certify", "--verifier", "tv-sps", "--depth", "2", "--vocab", "3").exit_code == 0
    request = seen[0]
    # --depth 2 and --vocab 3 are the defaults' values, given all the same; --seed is left at its default
    assert {"verifier", "depth", "vocab"} <= request.given and "seed" not in request.given
    assert request.shape.drafting is None  # not given: the verifier's claimed scheme, resolved when it runs
    assert request.model.vocab == 3 and request.subject.verifier == "tv-sps"


def test_certify_help_is_in_sections():
    text = invoke("certify", "--help").output
    headings = [line[:-1] for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert headings == ["Model pair", "Real pair (--model causal-lm)", "Generation loop (--loop)",
                        "Sampling (--model causal-lm, --loop)", "Draft tree and drafting", "Verifier",
                        "Kernel (instead of --verifier)",
                        "Batch (a batched adapter: vllm-v1-forward)", "Reproducer", "Computation", "Limits", "Output", "Options"]
    # every option of the command appears once
    params = [p for p in cli.main.commands["certify"].params if isinstance(p, click.Option)]
    for param in params:
        assert text.count(f"  {max(param.opts, key=len)} ") + text.count(f"  {max(param.opts, key=len)}\n") \
            + text.count(f"{max(param.opts, key=len)} /") >= 1, param.name


@pytest.mark.parametrize("name", ["mc", "generate", "hunt", "optimum"])
def test_the_other_request_commands_have_sections(name):
    text = invoke(name, "--help").output
    for heading in ("Model pair:", "Draft tree and drafting:"):
        assert heading in text, (name, text)


def test_nothing_below_the_command_line_reads_click():
    """The request is where click ends: no module outside specproof/cli imports it, nor do the specs."""
    offenders = []
    for package in ("simulator", "exact", "specproof"):
        for path in (REPO / package).rglob("*.py"):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith("specproof/cli/") and rel != "specproof/cli/specs.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
            names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
            if any(name == "click" or name.startswith("click.") for name in names):
                offenders.append(rel)
    assert offenders == []


def test_every_command_with_many_options_lists_them_in_sections():
    """One helper renders every command's help: a command of eight options or more groups them under two headings
    or more, in the order they are declared (command_line() records a run in that order)."""
    for name, command in cli.main.commands.items():
        result = invoke(name, "--help")
        assert result.exit_code == 0, (name, result.output)
        options = [p for p in command.params if isinstance(p, click.Option)]
        headings = {getattr(p, "help_section", "Options") for p in options}
        if len(options) >= 8:
            assert len(headings) >= 2, name
