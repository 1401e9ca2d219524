"""Every command the README shows, run as a new user would after each of its two set-up commands: in a fresh
virtual environment holding only ``pip install -e .`` (no torch), and in the test environment (torch, the test
and real extras). A command passes when it exits 0, 1 or 2, or is still running at 60 s, and prints no traceback:
no documented command may end in exit 3 (a bug) or a Python traceback, whatever is installed."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SECONDS = 60
PARALLEL = 6  # most commands exit at once or wait out their 60 s: six at a time keeps each test near 3 minutes


def readme_commands(text: str) -> list[list[str]]:
    """The ``specproof`` commands of a Markdown text: lines of code blocks (fenced or indented, backslash
    continuations joined, ``# comments`` dropped, each ``&&`` part on its own) and inline code spans that start
    with ``specproof``; in order, without repeats."""
    lines: list[str] = []
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
    indented = re.findall(r"(?m)^(?: {4}|\t)(.*)$", re.sub(r"```.*?```", "", text, flags=re.S))
    for block in [*blocks, "\n".join(indented)]:
        lines += block.replace("\\\n", " ").splitlines()
    lines += re.findall(r"(?<!`)`(specproof [^`]+)`", text)
    found: dict[str, list[str]] = {}
    for line in lines:
        for part in line.split("&&"):
            part = part.split(" #")[0].strip().removeprefix("$ ")
            if part.startswith("specproof ") or part == "specproof":
                try:
                    words = shlex.split(part)
                except ValueError:  # an unbalanced quote in prose: run as written, word by word
                    words = part.split()
                found.setdefault(shlex.join(words), words)
    return list(found.values())


def test_readme_commands_are_found():
    text = "```bash\npython3 -m pip install -e . && specproof report\nspecproof law --case x \\\n  --arithmetic float" \
           "   # a comment\n```\nProse `specproof list` and `pip install x`.\n\n    specproof hunt --time-limit 1\n"
    assert readme_commands(text) == [["specproof", "report"], ["specproof", "law", "--case", "x", "--arithmetic",
                                                                "float"], ["specproof", "hunt", "--time-limit", "1"],
                                     ["specproof", "list"]]


def run_command(words: list[str], executable: str, cwd: Path, env: dict) -> tuple[list[str], int | None, str]:
    """``(words, exit code or None when still running at the timeout, standard error)``; a process group, so
    that a sweep's workers go with it."""
    proc = subprocess.Popen([executable, *words[1:]], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=SECONDS)
        return words, proc.returncode, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        return words, None, err


def project_copy(tmp_path: Path) -> Path:
    """The repository's files in ``tmp_path`` (the commands write reports where they run)."""
    dst = tmp_path / "specproof"
    shutil.copytree(REPO, dst, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".pytest_cache",
                                                             "specproof-report", ".specproof-gate", "build"))
    return dst


def check_commands(executable: str, cwd: Path, env: dict) -> None:
    commands = readme_commands((REPO / "README.md").read_text())
    assert len(commands) >= 5
    with ThreadPoolExecutor(PARALLEL) as pool:
        results = list(pool.map(lambda words: run_command(words, executable, cwd, env), commands))
    bad = [(shlex.join(words), code, err[-2000:]) for words, code, err in results
           if code not in (0, 1, 2, None) or "Traceback" in err]
    assert not bad, "\n\n".join(f"{cmd}: exit {code}\n{err}" for cmd, code, err in bad)


@pytest.mark.slow
def test_every_readme_command_after_the_first_set_up_command(tmp_path):
    project = project_copy(tmp_path)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", "."], cwd=project,
                             capture_output=True, text=True, timeout=900)
    if install.returncode != 0:
        if re.search(r"(?i)connection|network|resolve|proxy|no matching distribution|could not find a version",
                     install.stderr):
            pytest.skip("the package index is unreachable: " + install.stderr.strip().splitlines()[-1])
        pytest.fail(install.stderr)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    check_commands(str(env_dir / "bin" / "specproof"), project, env)


@pytest.mark.slow
def test_every_readme_command_after_the_second_set_up_command(tmp_path):
    project = project_copy(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(project)}
    launcher = tmp_path / "bin" / "specproof"
    launcher.parent.mkdir()
    launcher.write_text(f"#!{sys.executable}\nfrom specproof.cli.launch import main\n\n"
                        "if __name__ == '__main__':\n    main()\n")  # as pip writes an entry point
    launcher.chmod(0o755)
    check_commands(str(launcher), project, env)
