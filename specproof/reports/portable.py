"""Text a committed report can carry: commands and paths without the writing machine's folders, and a command's
messages without the warnings libraries print."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Sequence

#: the repository's root: a path inside it is shown relative to it
REPO = Path(__file__).resolve().parents[2]
#: a line Python's ``warnings`` module prints (``path:line: SomeWarning: message``); the source line it quotes next
#: is indented
WARNING_LINE = re.compile(r"^\S.*:\d+: [A-Z]\w*Warning: ")


def portable_path(path: str, root: Path = REPO) -> str:
    """``path`` as a report shows it: relative to ``root`` when inside it, else its last component after ``.../``
    (a scratch folder, a cache, another machine's output folder: nothing a reader has). A relative path, or a word
    that is not a path, is returned as it is.

    Parameters
    ----------
    path : str
        A command-line word.
    root : Path
        The folder paths are shown relative to; the repository by default.

    Returns
    -------
    str
        The word with no absolute folder of this machine in it.
    """
    if not path.startswith("/") and not re.match(r"^[A-Za-z]:[\\/]", path):
        return path
    absolute = Path(path)
    try:
        return str(absolute.resolve().relative_to(root.resolve())) or "."
    except ValueError:
        return ".../" + absolute.name if absolute.name else "..."


def portable_command(words: Sequence[str], root: Path = REPO) -> str:
    """A command line as a report records it: each absolute path as :func:`portable_path` shows it (``--out=PATH``
    too), quoted for a shell.

    Parameters
    ----------
    words : sequence of str
        The command's words, e.g. ``["python3", "benchmarks/throughput.py", *sys.argv[1:]]``.
    root : Path
        The folder paths are shown relative to; the repository by default.

    Returns
    -------
    str
        One line, the words joined by :func:`shlex.join`.
    """
    shown = []
    for word in words:
        flag, eq, value = word.partition("=")
        shown.append(f"{flag}={portable_path(value, root)}" if eq and flag.startswith("--")
                     else portable_path(word, root))
    return shlex.join(shown)


def messages(stderr: str) -> list[str]:
    """The lines of a command's standard error that are its own: Python warnings a library printed on the way
    (Triton's interpreter warns about NumPy arithmetic it does on purpose) and the source lines they quote are
    left out, and so are blank lines.

    Parameters
    ----------
    stderr : str
        A finished command's standard error.

    Returns
    -------
    list of str
        Its remaining lines, stripped, in order.
    """
    out, after_warning = [], False
    for line in stderr.splitlines():
        if WARNING_LINE.match(line):
            after_warning = True
            continue
        if after_warning and line.startswith((" ", "\t")):
            continue
        after_warning = False
        if line.strip():
            out.append(line.strip())
    return out
