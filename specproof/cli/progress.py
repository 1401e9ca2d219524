"""Progress bars on standard error, with an ETA, shown once a run passes two seconds and only on a terminal."""

from __future__ import annotations

import os
import sys

from tqdm import tqdm


def progress_bar(total: float, desc: str, unit: str = "it") -> tqdm:
    """A progress bar with an ETA on standard error, shown once a run passes two seconds (and only on a
    terminal)."""
    return tqdm(total=total, desc=desc, unit=unit, disable=None, file=sys.stderr, delay=2, **bar_width())


def bar_width() -> dict:
    """tqdm's width: the terminal's, followed as it changes; 80 columns where the terminal reports a size of 0 × 0
    (some CI and IDE terminals), with which tqdm would print nothing."""
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        columns = 0
    return {"dynamic_ncols": True} if columns > 0 else {"ncols": 80, "nrows": 24}


def mass_bar(pairs: int, desc: str) -> tqdm:
    """Progress of exact computations, in probability mass enumerated (1 per computation)."""
    return tqdm(total=pairs, desc=desc, disable=None, file=sys.stderr, delay=2, **bar_width(),
                bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]")


class StageBars:
    """``tick(stage, total)``: one more unit of ``stage``; a bar per stage, opened on its first tick."""

    def __init__(self) -> None:
        self.stage: str | None = None
        self.bar: tqdm | None = None

    def __call__(self, stage: str, total: int) -> None:
        if stage != self.stage:
            self.close()
            self.stage, self.bar = stage, progress_bar(total, stage)
        self.bar.update(1)  # type: ignore[union-attr]

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
