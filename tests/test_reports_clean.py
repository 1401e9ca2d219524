"""The committed reports and the reference name no folder of the machine that wrote them (a home, a scratch or a
work folder) and carry no warning a library printed while they were made. A planted path and a planted warning
are flagged, so the check can fail."""

from __future__ import annotations

import re
from pathlib import Path

from specproof.reports.portable import messages, portable_command, portable_path

REPO = Path(__file__).resolve().parents[1]
#: the text files of the reports and the reference (figures are not read)
TEXT_SUFFIXES = {".md", ".json", ".jsonl", ".txt", ".csv", ".xml", ".html", ".toml"}
#: an absolute folder of one machine: a home, the root's home, a scratch or work folder, a macOS or Windows home
MACHINE_PATH = re.compile(r"(?<![\w.~$])(/root/|/home/\w|/Users/\w|/work/|/tmp/|/var/folders/|[A-Za-z]:\\+Users\\)")
#: a line Python's ``warnings`` module printed: ``some/module.py:463: RuntimeWarning: ...`` (the file name's end is
#: matched by a lookbehind: a leading ``\S+`` would rescan every long run of non-spaces, 20 s over the reports)
WARNING = re.compile(r"(?<=\S)\.py:\d+: [A-Z]\w*Warning: ")


def problems(text: str) -> list[str]:
    """Each machine path and each printed warning of ``text``, with its line number."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [f"line {number}: machine path {m.group(0)!r}" for m in MACHINE_PATH.finditer(line)]
        found += [f"line {number}: a printed warning" for _ in WARNING.finditer(line)]
    return found


def files() -> list[Path]:
    """Every text file under ``reports/`` and ``docs/`` but the git-ignored cell cache ``reports/store/cache`` (not
    committed: a frontier's run leaves thousands of records there)."""
    cache = REPO / "reports" / "store" / "cache"
    return [f for folder in ("reports", "docs") for f in sorted((REPO / folder).rglob("*"))
            if f.is_file() and f.suffix in TEXT_SUFFIXES and cache not in f.parents]


def test_reports_and_docs_name_no_machine_folder_and_carry_no_warning():
    assert len(files()) > 50  # the scan reads the reports and the reference, not an empty folder
    found = [f"{f.relative_to(REPO)}: {p}" for f in files() for p in problems(f.read_text())]
    assert not found, "\n".join(found)


def test_a_planted_path_and_a_planted_warning_are_flagged():
    clean = ("Command: `python3 benchmarks/throughput.py --out .../bench.md --before reports/benchmarks.json`, "
             "the kernel at $(specproof fetch vllm-v1)/vllm/v1/worker/gpu/sampler.py:409; ~/.cache is fine; "
             "https://example.com/tmp/x and vllm/v1/worker/ are not machine folders. A RuntimeWarning is a word.\n")
    assert problems(clean) == []
    planted = clean + ("first at /root/.cache/specproof/vllm-v1/rejection_sampler.py:409\n"
                       "--out /tmp/w/abl3.md, --after /work/main, /home/alice/x, C:\\Users\\bob\\x\n"
                       "/root/.pyenv/lib/python3.11/site-packages/triton/runtime/interpreter.py:463: "
                       "RuntimeWarning: invalid value encountered in subtract\n")
    found = problems(planted)
    assert len(found) == 7, found
    assert sum("printed warning" in p for p in found) == 1


def test_generators_write_portable_commands_and_drop_printed_warnings():
    command = portable_command(["python3", "benchmarks/x.py", "--out", "/tmp/w/abl3.md", f"--before={REPO}/reports",
                                "--device", "cuda"])
    assert command == "python3 benchmarks/x.py --out .../abl3.md --before=reports --device cuda"
    assert problems(command) == []
    assert portable_path("relative/path.md") == "relative/path.md"
    stderr = ("/root/.pyenv/site-packages/triton/runtime/interpreter.py:463: RuntimeWarning: invalid value\n"
              "  return a - b\n\nerror: the kernel's float32 noise is an approximation\n")
    assert messages(stderr) == ["error: the kernel's float32 noise is an approximation"]
