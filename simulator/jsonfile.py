"""Reading the project's JSON inputs (tables, cases) with errors that name the option they came from, and
writing its JSON outputs."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import InvalidParameterError


def read_json(path: str | Path, field: str) -> object:
    """Parse a JSON file; an unreadable or malformed file raises :class:`InvalidParameterError` on ``field``."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as err:
        raise InvalidParameterError(field, f"cannot read {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise InvalidParameterError(field, f"{path} is not JSON: {err}") from None


def write_json(path: str | Path, data: object) -> None:
    """Write ``data`` as indented JSON. A NaN or infinity is refused (JSON has none): numbers that do not exist
    are written as ``null`` by the code that knows why."""
    Path(path).write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
