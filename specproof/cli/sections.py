"""Option help in sections: every command lists its options under headings a user can scan (Model pair, Draft
tree and drafting, Verifier, Limits, Output …), from the one helper :func:`section`."""

from __future__ import annotations

from typing import Callable

import click

#: the heading of options no section claims (``--help`` among them)
DEFAULT_SECTION = "Options"
#: click's widest option column: a longer option's help starts on the next line
COLUMN_MAX = 30


def section(title: str, *options: Callable) -> Callable:
    """A decorator applying the click ``options`` (option decorators, or other sections) in order, their help
    listed under ``title``; options an inner section already claimed keep its heading."""

    def apply(fn: Callable) -> Callable:
        before = {id(param) for param in getattr(fn, "__click_params__", [])}
        for option in reversed(options):
            fn = option(fn)
        for param in fn.__click_params__:
            if id(param) not in before and not hasattr(param, "help_section"):
                param.help_section = title
        return fn

    return apply


class SectionedHelp(click.Command):
    """A command whose ``--help`` writes its options section by section, in the order they are declared."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                sections.setdefault(getattr(param, "help_section", DEFAULT_SECTION), []).append(record)
        # one column for the help text in every section: each section's first term padded to the widest that
        # click keeps on the option's line (longer ones get a line of their own, as click does)
        width = min(max((len(term) for rows in sections.values() for term, _ in rows), default=0), COLUMN_MAX)
        for title, records in sections.items():
            first, help_text = records[0]
            with formatter.section(title):
                formatter.write_dl([(first.ljust(width), help_text), *records[1:]], col_max=COLUMN_MAX)
