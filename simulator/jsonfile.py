"""Reading the project's input files (tables, cases, corpora) and writing its outputs, with typed errors that name
the option or file: an unreadable, binary, malformed or too deeply nested input, an output path checked before
the work starts, a write that fails anyway (:class:`~simulator.errors.OutputError`)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .errors import InvalidParameterError, OutputError


def read_text(path: str | Path, field: str) -> str:
    """A text file's contents; unreadable or undecodable (binary) files raise :class:`InvalidParameterError` on
    ``field``."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise InvalidParameterError(field, f"cannot read {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise InvalidParameterError(field, f"{path} is not UTF-8 text (byte {err.start}: {err.reason}): is it a "
                                           "binary file?") from None


def read_json(path: str | Path, field: str) -> object:
    """Parse a JSON file; an unreadable, binary, malformed or too deeply nested file raises
    :class:`InvalidParameterError` on ``field``."""
    text = read_text(path, field)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidParameterError(field, f"{path} is not JSON: {err}") from None
    except RecursionError:
        raise InvalidParameterError(field, f"{path} nests arrays or objects too deeply to read") from None


def check_output_file(path: str | Path | None, field: str) -> None:
    """Refuse, before any computation, an output file whose directory does not exist, is not a directory or
    cannot be written, and a path that is a directory (:class:`OutputError` on ``field``)."""
    if path is None:
        return
    _refuse_empty(path, field, "file")
    path = Path(path)
    if path.is_dir():
        raise OutputError(field, f"{path} is a directory; give a file name")
    _check_writable_dir(path.parent if str(path.parent) else Path("."), field, f"for {path}")
    if path.exists():
        try:
            with open(path, "a"):  # opened to append, nothing written: the file is left as it is
                pass
        except OSError as err:
            raise OutputError(field, f"cannot write {path}: {err.strerror or err}") from None


def check_output_dir(path: str | Path, field: str) -> None:
    """Refuse, before any computation, an output folder that cannot be created or written: the nearest existing
    ancestor must be a writable directory (:class:`OutputError` on ``field``). An empty path is refused: it would
    write into the current folder (``--out ''``, an unset shell variable)."""
    _refuse_empty(path, field, "folder")
    path = Path(path)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise OutputError(field, f"{existing} is a file, so the folder {path} cannot be made there")
    _check_writable_dir(existing, field, f"to make or fill {path}")


def _refuse_empty(path: str | Path, field: str, kind: str) -> None:
    if str(path) == "":  # Path("") is Path("."): the current folder
        raise OutputError(field, f"the path is empty: give a {kind} name (an unset shell variable?)"
                                 + ("; for the current folder, give ." if kind == "folder" else ""))


def _check_writable_dir(folder: Path, field: str, purpose: str) -> None:
    if not folder.exists():
        raise OutputError(field, f"the folder {folder} does not exist {purpose}: create it first")
    if not folder.is_dir():
        raise OutputError(field, f"{folder} is not a folder {purpose}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(field, f"the folder {folder} is not writable {purpose}")
    try:  # access() says yes to root in /proc or on some mounts: try a file there
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".specproof-probe-")
    except OSError as err:
        raise OutputError(field, f"cannot write in the folder {folder} {purpose}: {err.strerror or err}") from None
    os.close(handle)
    os.unlink(probe)


def write_text(path: str | Path, text: str, field: str) -> None:
    """Write ``text``; a failure (a full disk, a folder removed meanwhile) is :class:`OutputError` naming the
    file and ``field``."""
    try:
        Path(path).write_text(text)
    except OSError as err:
        raise OutputError(field, f"cannot write {path}: {err.strerror or err}") from None


def write_json(path: str | Path, data: object, field: str = "json") -> None:
    """Write ``data`` as indented JSON (:func:`write_text`). A NaN or infinity is refused (JSON has none):
    numbers that do not exist are written as ``null`` by the code that knows why."""
    write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n", field)
