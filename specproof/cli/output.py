"""What a command writes besides its verdict: the command line that re-runs it, JSON and reproducer files written
after the verdict is printed (a failure reported, the verdict kept)."""

from __future__ import annotations

import shlex
from typing import Callable

import click

from simulator.errors import OutputError
from simulator.jsonfile import write_json
from simulator.numeric import human_number
from specproof.gate.shrink import shrink as shrink_case


def command_line(ctx: click.Context) -> str:
    """The command line that re-runs this command: its name and every option's value (defaults included)."""
    words = ["specproof", ctx.info_name or ""]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if not isinstance(param, click.Option) or value is None or value is False:
            continue
        flag = max(param.opts, key=len)
        for item in (value if param.multiple else [value]):
            words += [flag] if param.is_flag else [flag, str(item)]
    return shlex.join(words)


def write_output(path: str | None, data: object, field: str = "json") -> None:
    """Write an output once the verdict is printed: a failure (a full disk) is reported on standard error,
    naming the file, and the command still exits with its verdict's code — the result is never lost."""
    if path:
        kept(lambda: write_json(path, data, field))


def kept(write: Callable[[], object]) -> object:
    """``write()``, reporting an :class:`OutputError` on standard error instead of raising it (``None``)."""
    try:
        return write()
    except OutputError as err:
        click.echo(f"error: {err.field}: {err.message} (the verdict above stands)", err=True)
        return None


def shrunk(case, what, seconds: float, case_out: str) -> dict:
    """Shrink a lossy case, write the reproducer, say so; its JSON for the certificate."""
    found = shrink_case(case, seconds, what)
    small = found.case
    path = kept(lambda: small.write(case_out, found.certificate))
    if path is None:
        return small.to_json(found.certificate)
    ended = "complete" if found.complete else f"stopped at the {seconds:g} s bound"
    click.echo(f"  reproducer: {small.nodes} draft node(s), vocab {small.vocab}, depth {small.depth} "
               f"({found.kept} shrinking steps, {ended}), TVD {human_number(found.certificate.tvd)}; "
               f"written to {path} (specproof certify --case {path})")
    return small.to_json(found.certificate)
