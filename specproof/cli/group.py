"""The ``specproof`` click group and the exit code every way out of a command gets (docs/cli/README.md#exit-codes)."""

from __future__ import annotations

import math
import os
import sys
import traceback
from concurrent.futures.process import BrokenProcessPool

import click

from simulator.errors import SpecproofError
from simulator.usercode import (INTERRUPTED_EXIT, escape_message, interrupted, interrupts_recorded, raised_by_user_code,
                                source_line)
from specproof.cli.sections import SectionedHelp
from specproof.cli.supervisor import SupervisedCommand


class Command(SectionedHelp, SupervisedCommand):
    """Every command: supervised (:class:`SupervisedCommand`), its options' help in sections
    (:class:`SectionedHelp`)."""


class SpecproofGroup(click.Group):
    """The exit codes of every command (docs/cli/README.md#exit-codes): 2 for every typed error (the field named) and
    for an exit or interrupt raised by user code, 130 for a run stopped by SIGINT or SIGTERM whatever code it
    was about to exit with, 3 with a traceback for anything unforeseen: no error can pass for a verdict (1). Its
    commands are :class:`Command`."""

    command_class = Command

    def main(self, *args, **kwargs):
        """click's ``main``, with standard output flushed before the process exits: an output that cannot be
        written (a full disk, ``> /dev/full``), help text included, is a typed error, exit 2, not a traceback
        or Python's exit 120. A closed standard output (``specproof list >&-``) is refused before anything runs:
        a command whose output nobody can read has no verdict to give."""
        try:
            if _stdout_closed():
                _fail("error: stdout: standard output is closed (>&-): nothing the command prints could be read; "
                      "redirect it to a file or /dev/null instead", 2)
            return super().main(*args, **kwargs)
        except OSError as err:  # raised outside a command: click's own help, usage and version text
            if not _stdout_unwritable(err):
                raise
            _stdout_failed(err)
        finally:
            _flush_stdout()

    def invoke(self, ctx: click.Context):
        with interrupts_recorded():
            try:
                result = super().invoke(ctx)
            except BaseException as err:  # noqa: BLE001 — every way out gets its code here
                _exit_for(err)
                raise
            if interrupted():
                _exit_interrupted()
            return result


def _where(err: SpecproofError) -> str:
    """Where an enumeration met ``err`` (:class:`exact.enumeration.Branch`) and where its case went, if known."""
    branch = getattr(err, "branch", None)
    if branch is None:
        return ""
    prob = float(branch.prob)
    scale = f" = 2^{math.log2(prob):.1f}" if 0 < prob < 1e-6 else ""
    choices = ", ".join(f"{taken + 1} of {width}" for taken, width in branch.choices) or "none"
    case = getattr(err, "case", None)
    return (f"\n  on a branch of probability {prob:.6g}{scale}, reached by the choices [{choices}] "
            f"(the branch taken of each random choice, in order)" + (f"\n  case: {case}" if case else ""))


def _exit_for(err: BaseException) -> None:
    """Exit with the code ``err`` stands for; return for a command's own exit and click's usage errors, which
    go on as they are."""
    if interrupted():
        _exit_interrupted()
    if isinstance(err, SystemExit):
        if raised_by_user_code(err):
            _fail(f"error: user code raised {escape_message(err)} ({source_line(err)})", 2)
        return
    if isinstance(err, (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort)):
        return
    if isinstance(err, KeyboardInterrupt):
        _fail(f"error: user code raised {escape_message(err)} ({source_line(err)})", 2)
    if isinstance(err, SpecproofError):
        _fail(f"error: {err.field}: {err.message}{_where(err)}", 2)
    if isinstance(err, BrokenPipeError):  # the reader went away (``| head``): stdout is closed, as SIGPIPE would
        _silence_stdout()
        sys.exit(BROKEN_PIPE_EXIT)
    if isinstance(err, BrokenProcessPool):  # killed from outside: the OOM killer, a kill -9 of one worker
        _fail("error: jobs: a worker process died abruptly (killed, or out of memory), so there is no verdict: run "
              "again, or with fewer --jobs", 2)
    if isinstance(err, OSError) and _stdout_unwritable(err):
        _stdout_failed(err)
    if isinstance(err, OSError) and err.filename is not None:  # a folder removed meanwhile, a full disk
        _fail(f"error: file: {err.filename}: {err.strerror or err}", 2)
    # a bug of specproof's own: never exit 1, which means LOSSY
    _fail("internal error (a bug in specproof, not a verdict):\n" + "".join(traceback.format_exception(err)), 3)


def _fail(message: str, code: int) -> None:
    click.echo(message, err=True)
    sys.exit(code)


def _exit_interrupted() -> None:
    _fail("interrupted (SIGINT or SIGTERM): no verdict", INTERRUPTED_EXIT)


#: the exit status when standard output's reader has gone (the shell's 128 + SIGPIPE)
BROKEN_PIPE_EXIT = 141


def _stdout_closed() -> bool:
    """Whether the process started with file descriptor 1 closed: Python then sets ``sys.stdout`` to ``None``, and
    click would drop every line the command prints (while the next file opened takes descriptor 1)."""
    if sys.stdout is None:
        return True
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test runner's buffer): not closed
        return False
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _stdout_unwritable(err: OSError) -> bool:
    """Whether ``err`` came from writing standard output: raised inside ``click.echo`` (how every command and
    click's help write it) with standard output as its ``file``."""
    tb = err.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code is click.utils.echo.__code__ and frame.f_locals.get("file") in (sys.stdout, sys.__stdout__):
            return True
        tb = tb.tb_next
    return False


def _stdout_failed(err: OSError) -> None:
    _silence_stdout()
    _fail(f"error: stdout: cannot write standard output: {err.strerror or err}", 2)


def _flush_stdout() -> None:
    """Flush standard output as the command ends, its failure a typed error (or the closed reader's 141)."""
    if sys.stdout is None:  # closed from the start: refused in SpecproofGroup.main
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        sys.exit(BROKEN_PIPE_EXIT)
    except OSError as err:
        _stdout_failed(err)


def _silence_stdout() -> None:
    """Point standard output at the null device, so that what is left in its buffer cannot fail again at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test runner's buffer)
        pass


@click.group(cls=SpecproofGroup)
@click.version_option(package_name="specproof")
def main() -> None:
    """specproof: exact certificates and measurements for speculative-decoding verifiers."""
