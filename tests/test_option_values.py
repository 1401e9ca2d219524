"""Every numeric option of every command, found by walking the click command tree, takes ``inf``, ``-inf``,
``nan``, huge and negative values cleanly: accepted as the number given (``inf`` only where its help says what it
means), or refused as a usage error (exit 2) naming the option; never an exception, which the command line
would turn into exit 3. Parsing only: no command runs."""

from __future__ import annotations

import math

import click
import pytest

from specproof.cli.app import main
from specproof.cli.params import NUMERIC_TYPES, Limit

BAD_VALUES = ("inf", "-inf", "nan", "99999999999999999999999", "1e300", "-1")


def commands(group: click.Group, path: tuple[str, ...] = ()):
    """``(name path, command)`` for every command under ``group``, recursively."""
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def is_numeric(param: click.Parameter) -> bool:
    return isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType, *NUMERIC_TYPES))


def numeric_options(group: click.Group):
    return [(path, command, param) for path, command in commands(group) for param in command.params
            if is_numeric(param)]


def filler(command: click.Command, skip: click.Parameter) -> list[str]:
    """Values for the command's required parameters besides ``skip`` (a choice's first, else a word)."""
    args: list[str] = []
    for param in command.params:
        if param is skip or not param.required:
            continue
        value = param.type.choices[0] if isinstance(param.type, click.Choice) else "x"
        args += [value] if isinstance(param, click.Argument) else [param.opts[0], value]
    return args


def problem(command: click.Command, param: click.Option, value: str) -> str | None:
    """What is wrong with how ``command`` parses ``param`` set to ``value`` (``None``: nothing)."""
    flag = max(param.opts, key=len)
    try:
        ctx = command.make_context(command.name or "cmd", [*filler(command, param), flag, value])
    except click.UsageError as err:
        message = err.format_message()
        if err.exit_code != 2 or flag not in message:
            return f"refused without naming {flag} or with exit {err.exit_code}: {message}"
        return None
    except Exception as err:  # noqa: BLE001 — any other way out is the bug this test looks for
        return f"{type(err).__name__} while parsing: {err}"
    got = ctx.params[param.name]
    given = int(value) if value.lstrip("-").isdigit() and isinstance(got, int) else float(value)
    if not isinstance(got, (int, float)) or isinstance(got, bool) or (isinstance(got, float) and math.isnan(got)):
        return f"accepted as {got!r}"
    if math.isinf(given):
        if "inf" not in (param.help or ""):
            return f"accepted {value} as {got!r}, and its help does not say what inf means"
        return None if got in (0, given) else f"accepted {value} as {got!r}"
    return None if got == given else f"accepted {value} as {got!r}: a silent clamp or rounding"


def problems(group: click.Group) -> list[str]:
    """Every mishandled value of every numeric option under ``group``, and every numeric option whose type is
    not one of the validated ones (so that an option added later is held to them)."""
    found = []
    for path, command, param in numeric_options(group):
        where = f"{' '.join(path)} {max(param.opts, key=len)}"
        if not isinstance(param.type, NUMERIC_TYPES):
            found.append(f"{where}: plain {param.type.name} type, not one of specproof.cli.params.NUMERIC_TYPES")
        for value in BAD_VALUES:
            trouble = problem(command, param, value)
            if trouble is not None:
                found.append(f"{where} {value}: {trouble}")
    return found


def test_every_numeric_option_of_every_command_takes_bad_values_cleanly():
    options = numeric_options(main)
    assert len(options) > 100  # the walk reaches every command family
    assert {" ".join(p) for p, _, _ in options} >= {"certify", "mc", "hunt", "prove", "report", "gate", "real"}
    assert problems(main) == []


def test_inf_means_no_limit_and_nan_is_refused_naming_the_option():
    certify = main.commands["certify"]
    assert certify.make_context("certify", ["--timeout", "inf"]).params["timeout"] == 0
    assert certify.make_context("certify", ["--shrink-time", "inf"]).params["shrink_time"] == math.inf
    assert main.commands["hunt"].make_context("hunt", ["--time-limit", "inf"]).params["time_limit"] == math.inf
    for command, flag in (("certify", "--shrink-time"), ("mc", "--timeout"), ("hunt", "--time-limit")):
        with pytest.raises(click.UsageError) as err:
            main.commands[command].make_context(command, [flag, "nan"])
        assert f"'{flag}'" in err.value.format_message()
    for command, flag, value in (("hunt", "--hunt-seed", "-1"), ("hunt", "--vocab", "0"),
                                 ("mc", "--trials", "99999999999999999999999"), ("certify", "--depth", "10**6")):
        with pytest.raises(click.UsageError) as err:
            main.commands[command].make_context(command, [flag, value])
        assert f"'{flag}'" in err.value.format_message()


def test_the_check_rejects_planted_options_that_mishandle_inf():
    class Crashing(click.types.FloatParamType):  # a numeric type whose conversion overflows on inf
        def convert(self, value, param, ctx):
            return int(float(value))

    @click.group()
    def planted() -> None:
        pass

    @planted.command()
    @click.option("--timeout", type=float, default=10.0, help="seconds")
    @click.option("--wait", type=Limit(), default=1.0, help="seconds to wait")  # takes inf, help silent on it
    @click.option("--deadline", type=Crashing(), default=1.0, help="seconds (inf: none)")
    @click.option("--retries", type=Limit(integer=True), default=3, help="retries (0 or inf: no limit)")
    def run(timeout: float, wait: float, deadline: int, retries: int) -> None:
        pass

    found = problems(planted)
    assert "run --timeout: plain float type, not one of specproof.cli.params.NUMERIC_TYPES" in found, found
    assert "run --timeout nan: accepted as nan" in found, found
    assert any(f.startswith("run --timeout inf: accepted inf as inf, and its help does not say") for f in found)
    assert any(f.startswith("run --wait inf: accepted inf as 0, and its help does not say") for f in found)
    assert any(f.startswith("run --deadline inf: OverflowError while parsing") for f in found), found
    assert not any(f.startswith("run --retries") for f in found), found  # the validated type, documented
