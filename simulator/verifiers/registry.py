"""The built-in verifiers by public name, and loading of a user's ``module:function`` verifier.

A verifier is a plain function ``verify(tree, p, q, rng)`` returning ``(node, y)`` — or
``(node, y, completion)`` when later tokens must follow a modified target (greedy BV). ``lossless_under``
lists the drafting schemes under which the rule is lossless (SPEC §10); a control lists none.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable

from ..errors import InvalidParameterError
from . import block, controls
from .rules import DETERMINISTIC, RRS, RRSW, SPS
from .token_tree import tv

Verifier = Callable[..., tuple]

ALL_SCHEMES = ("iid", "without-replacement", "almost-greedy", "top-k")


@dataclass(frozen=True)
class VerifierSpec:
    name: str
    fn: Verifier
    description: str
    lossless_under: tuple[str, ...]
    chain_only: bool = False

    @property
    def is_control(self) -> bool:
        return not self.lossless_under


_SPECS = [
    VerifierSpec("tv-sps", tv(SPS), "token verification with SpS along the first child",
                 ("iid", "without-replacement")),
    VerifierSpec("tv-rrs", tv(RRS), "token verification with RRS (with replacement)", ("iid",)),
    VerifierSpec("tv-rrsw", tv(RRSW, "without-replacement"), "token verification with RRS without replacement",
                 ("without-replacement",)),
    VerifierSpec("tv-det", tv(DETERMINISTIC), "token verification with deterministic RRS (EAGLE-2)",
                 ALL_SCHEMES),
    VerifierSpec("bv", block.bv, "block verification (Sun et al. 2025, Alg. 2), chains",
                 ("iid", "without-replacement"), chain_only=True),
    VerifierSpec("greedy-bv", block.greedy_bv, "greedy block verification with distribution modification "
                 "(Alg. 4-6), chains", ("iid", "without-replacement"), chain_only=True),
    VerifierSpec("bug-greedy-bv-nomod", controls.bug_greedy_bv_nomod,
                 "CONTROL: greedy BV completed with the unmodified target", (), chain_only=True),
    VerifierSpec("bug-residual-q", controls.bug_residual_q, "CONTROL: TV-SpS resampling from q", ()),
    VerifierSpec("bug-accept-all", controls.bug_accept_all, "CONTROL: accepts every first-child token", ()),
]

VERIFIERS: dict[str, VerifierSpec] = {spec.name: spec for spec in _SPECS}


def load_verifier(name: str) -> tuple[str, Verifier]:
    """A built-in verifier by name, or ``module:function`` imported (the working directory is searched)."""
    if name in VERIFIERS:
        return name, VERIFIERS[name].fn
    if ":" not in name:
        raise InvalidParameterError("verifier", f"unknown verifier {name!r}: a built-in name "
                                                f"({', '.join(VERIFIERS)}) or module:function")
    module_name, _, attr = name.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise InvalidParameterError("verifier", f"cannot import module {module_name!r}: {err}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise InvalidParameterError("verifier", f"{module_name!r} has no function {attr!r}")
    return name, fn
