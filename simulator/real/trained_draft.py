"""Trained drafts by name, without torch (the command line lists them in a bare install): what ``specproof
train-draft`` makes and where ``--draft NAME`` finds it (docs/torch-path.md, "A trained draft")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from simulator.errors import InvalidParameterError

#: the file in a draft folder that lists the head's kept token ids
HEAD_TOKENS = "head_tokens.json"
#: the file in a draft folder that records how it was trained and what it measured
TRAINING_RECORD = "training.json"


@dataclass(frozen=True)
class Recipe:
    """A named draft ``specproof train-draft`` makes for ``target``: decoder ``layers`` of the target to start from
    (in order), a head of the ``head_tokens`` tokens the target's generations use most, and the per-token
    acceptance (``Σ min(p, q)`` at temperature 1 on MT-bench's first turns) it reached when its weights were made,
    with the tolerance a retrained copy must meet."""

    name: str
    target: str
    layers: tuple[int, ...]
    head_tokens: int
    acceptance: float | None = None
    tolerance: float = 0.02


#: every draft ``--draft`` knows by name
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("smollm2-draft", "smollm2", layers=(0, 1, 2), head_tokens=8192, acceptance=0.3014, tolerance=0.03),
)}


def draft_folder(name: str, cache: Path) -> Path:
    """Where the trained draft ``name`` lives: ``<cache>/drafts/<name>``."""
    return cache / "drafts" / name


def trained_directory(name: str, cache: Path, field: str = "draft") -> Path:
    """The folder of trained draft ``name``; one not trained yet raises :class:`InvalidParameterError` on
    ``field`` saying the command that makes it.

    A trained draft is a ``save_pretrained`` folder: a causal LM of the target's class and vocabulary with fewer
    layers, a ``head_tokens.json`` naming the tokens its head keeps (:mod:`simulator.real.pruned_head`) and a
    ``training.json`` recording how it was made and what it measured.
    """
    folder = draft_folder(name, cache)
    if not (folder / "config.json").is_file():
        raise InvalidParameterError(field, f"the draft {name!r} is not in {folder.parent} yet: make it with "
                                           f"`specproof train-draft --name {name}` (about 30 minutes on 2 cores)")
    return folder
