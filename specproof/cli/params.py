"""The command line's parameter types: numbers, limits and output paths refused with a typed error that names
the option (exit 2), and the shared instances the commands use."""

from __future__ import annotations

import math

import click

from simulator.trees import MAX_TREE_NODES


#: The longest finite limit or bound in seconds (about 31 years): a longer one is refused rather than clamped, and
#: ``inf`` says "no limit" where an option takes it.
MAX_SECONDS = 1e9
#: The most worker processes ``--jobs`` may start.
MAX_JOBS = 512


class OptionValueError(click.BadParameter):
    """A refused option value: a click usage error (exit 2), shown as every typed error is,
    ``error: FIELD: …``, naming the option."""

    def show(self, file=None) -> None:
        name = max(self.param.opts, key=len).lstrip("-").replace("-", "_") if self.param is not None else "option"
        hint = self.param.get_error_hint(self.ctx) if self.param is not None else ""
        click.echo(f"error: {name}: invalid {hint}: {self.message}", err=True)


class _Refusing:
    """Mixin: a parameter type whose refusals are :class:`OptionValueError`."""

    def fail(self, message: str, param=None, ctx=None):
        raise OptionValueError(message, ctx=ctx, param=param)


class Whole(_Refusing, click.IntRange):
    """An integer option in ``[minimum, maximum]`` (no bound where ``None``): ``inf``, ``nan``, a fraction and a
    value out of range are refused, naming the option."""

    name = "integer"

    def __init__(self, minimum: int | None = None, maximum: int | None = None) -> None:
        super().__init__(minimum, maximum)


class Real(_Refusing, click.FloatRange):
    """A finite number option in a range; with ``inf_ok``, ``inf`` too (the option's help says what it means).
    ``nan`` is refused, which click's ``FloatRange`` lets through (every comparison with it is false)."""

    name = "number"

    def __init__(self, minimum: float | None = None, maximum: float | None = None, min_open: bool = False,
                 max_open: bool = False, inf_ok: bool = False) -> None:
        super().__init__(minimum, maximum, min_open, max_open)
        self.inf_ok = inf_ok

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if math.isnan(number) or (math.isinf(number) and not (self.inf_ok and number > 0)):
            self.fail(f"{value!r} is not a finite number" + (" (inf: no bound)" if self.inf_ok else ""), param, ctx)
        return number if math.isinf(number) else super().convert(number, param, ctx)


class Reals(Real):
    """:class:`Real`, or a comma-separated list of such numbers (``--rho 0.3,0.8``: one per draft model): one number
    comes back as a float, as :class:`Real` gives it, a list as a tuple of two or more floats; each entry is checked
    as :class:`Real` checks one, and a refusal names the option and the entry."""

    name = "number or list"

    def convert(self, value, param, ctx):
        if isinstance(value, (tuple, list)):
            items = list(value)
        elif isinstance(value, str) and "," in value:
            items = [item.strip() for item in value.split(",")]
        else:
            return super().convert(value, param, ctx)
        if len(items) < 2:
            self.fail(f"{value!r}: a list needs two or more numbers", param, ctx)
        return tuple(super(Reals, self).convert(item, param, ctx) for item in items)


class Limit(_Refusing, click.ParamType):
    """A limit: a number ≥ 0, where 0 and ``inf`` both mean no limit (``inf`` arrives as 0, so the code behind
    the option knows one "none"). ``nan``, a negative number and, for seconds, a finite value past
    :data:`MAX_SECONDS` are refused naming the option; a whole number is required where ``integer``."""

    def __init__(self, integer: bool = False) -> None:
        self.integer = integer
        self.name = "integer limit" if integer else "seconds"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            text = repr(value)
        else:
            text = str(value).strip()
        if text.lower() in ("inf", "+inf", "infinity", "+infinity"):
            return 0
        try:
            number = int(text) if self.integer else float(text)
        except ValueError:
            self.fail(f"{value!r} is not {'a whole number' if self.integer else 'a number'} ≥ 0 (0 or inf: no "
                      "limit)", param, ctx)
        if math.isnan(number) or number < 0:
            self.fail(f"{value!r} is not a limit ≥ 0 (0 or inf: no limit)", param, ctx)
        if not self.integer and number > MAX_SECONDS:
            self.fail(f"{value!r} is past {MAX_SECONDS:g} s: give 0 or inf for no limit", param, ctx)
        return number


class Output(_Refusing, click.Path):
    """A file or folder a command writes (``--out``, ``--json``, ``--case-out`` …): the command checks it with
    :func:`simulator.jsonfile.check_output_file` or ``check_output_dir`` before its work starts; the type marks the
    option so that tests find every output option. An empty path is refused here (``Path("")`` is the current
    folder)."""

    def __init__(self, folder: bool = False) -> None:
        super().__init__(file_okay=not folder, dir_okay=folder)
        self.folder = folder

    def convert(self, value, param, ctx):
        if value == "":
            self.fail(f"the path is empty: give a {'folder' if self.folder else 'file'} name (an unset shell "
                      "variable?)" + ("; for the current folder, give ." if self.folder else ""), param, ctx)
        return super().convert(value, param, ctx)


#: The numeric types the command line's options use; tests/test_option_values.py holds every numeric option to them.
NUMERIC_TYPES = (Whole, Real, Limit)
SEED = Whole(0)
#: a draft tree's depth or branching: no tree may have more than MAX_TREE_NODES nodes
TREE_DEPTH, TREE_BRANCHING = Whole(0, MAX_TREE_NODES), Whole(1, MAX_TREE_NODES)
JOBS = Whole(1, MAX_JOBS)
SECONDS_LIMIT, COUNT_LIMIT = Limit(), Limit(integer=True)
#: a time bound of a search or shrink, where 0 is a bound (of nothing) and inf means none
BOUND_SECONDS = Real(0, MAX_SECONDS, inf_ok=True)
