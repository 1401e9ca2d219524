"""The text of a certificate on the terminal: its TVD, E[accepted], counterexample and reach, and how exact it is."""

from __future__ import annotations

from fractions import Fraction

import click

from exact.subject import Subject
from simulator.completion import REFERENCES
from simulator.numeric import Number, human_number


#: floats that stand in for a zero, ``(name, value)``: a clamp to ``finfo.tiny`` (``clamp(q - p, min=tiny)``) or to
#: the smallest subnormal leaves mass of about their size where the target has none. float16's are left out: they
#: are ordinary probabilities (6e-5, 6e-8), no sign of a clamp
FLOAT_FLOORS = (("finfo(float64).tiny", 2.0**-1022), ("float64's smallest subnormal", 2.0**-1074),
                ("finfo(float32).tiny", 2.0**-126), ("float32's smallest subnormal", 2.0**-149))
#: a support violation within this factor of a floor, either way, is traced to it (about one floor per excluded
#: token at each position a rejection reaches: at most the vocabulary times the depth)
FLOOR_FACTOR = 2**10


def support_source(mass: Number) -> str:
    """Where a support violation's ``mass`` likely comes from, when it is within :data:`FLOOR_FACTOR` of one of
    :data:`FLOAT_FLOORS` (``"; about 0.99 × finfo(float32).tiny (1.2e-38): ..."``), else ``""``."""
    for name, floor in FLOAT_FLOORS:
        ratio = Fraction(mass) / Fraction(floor)
        if Fraction(1, FLOOR_FACTOR) <= ratio <= FLOOR_FACTOR:
            return f"; about {float(ratio):.2g} × {name} ({floor:.2g}): a clamp to it where a zero belongs?"
    return ""


def certificate_lines(cert, indent: str = "  ") -> list[str]:
    """The lines under a verdict: TVD, E[accepted], a support violation, the counterexample, the rule's reach and
    the size of the computation."""
    lines = [f"{indent}TVD to q^(H+1) = {human_number(cert.tvd)}", *price_lines(cert, indent),
             *reference_lines(cert, indent), f"{indent}E[accepted] = {human_number(cert.expected_accepted)}; "
             f"block efficiency {human_number(cert.expected_accepted + 1)}"]
    lines += discrepancy_lines(cert.off_support, cert.counterexample, indent)
    if cert.reach is not None:  # what the rule reached on this instance, and what that hides
        lines += cert.reach.lines_text(indent)
    lines.append(f"{indent}{cert.executions:,} " + ("executions enumerated" if cert.method == "enumerate" else
                                                     "sub-problems of the exact recursion solved (token "
                                                     "verification: node and context; TRV: subtrees; LV: drafts above "
                                                     "the deepest level)"))
    return lines


def price_lines(cert, indent: str = "  ") -> list[str]:
    """Where the law differs from the target, what else it costs: each position's marginal TVD and the KL divergence
    (none when the TVD is 0)."""
    if not cert.tvd or not cert.position_tvd:
        return []
    kl = ("∞ (the law puts mass on sequences the target excludes)" if cert.kl == float("inf")
          else f"{cert.kl:.6g} nats (a float computed from the exact law)")
    return [f"{indent}TVD per position: " + ", ".join(human_number(v) for v in cert.position_tvd),
            f"{indent}KL(law ‖ target) = {kl}"]


def reference_lines(cert, indent: str = "  ") -> list[str]:
    """The distance to each further reference law of the rule (greedy decoding, for a rule relaxing it), with the
    verdict against it."""
    return [f"{indent}TVD to {REFERENCES[name][0]} = {human_number(distance.tvd)}: "
            f"{verdict(cert.lossless_against(name))} against it" for name, distance in cert.references.items()]


def discrepancy_lines(off_support: Number, counterexample, indent: str = "  ", subject: str = "the verifier",
                      reference: str = "the target") -> list[str]:
    """A lossy verdict's support violation and counterexample, each a line when there is one: ``subject``'s law held
    to ``reference``'s."""
    lines = []
    if off_support:
        lines.append(f"{indent}support violation: mass {human_number(off_support)} on sequences {reference} gives "
                     f"probability 0, LOSSY whatever the tolerance{support_source(off_support)}")
    if counterexample is not None:
        lines.append(f"{indent}counterexample: sequence {list(counterexample.sequence)} has probability "
                     f"{human_number(counterexample.verifier_prob)} under {subject}, "
                     f"{human_number(counterexample.target_prob)} under {reference}")
    return lines


def exactness(cert, kernel_spec, arithmetic: str) -> str:
    """How exact a verdict is, for its first line: rationals, float64 with its tolerance, or a kernel's dtype,
    precision and uniforms."""
    if kernel_spec is not None:
        return (f"torch kernel through adapter {kernel_spec.adapter}, {kernel_spec.dtype} rows, judged at "
                f"{kernel_spec.judged_precision()[0]} precision, {kernel_spec.uniforms} uniforms; tolerance "
                f"{human_number(cert.tolerance)}")
    return "exactly, rationals" if arithmetic == "fraction" else f"float64, tolerance {cert.tolerance:g}"


def verdict(lossless: bool) -> str:
    return "LOSSLESS" if lossless else "LOSSY"


def settings(config: dict) -> str:
    """A configuration as ``key value, key value``: the shape and drafting a verdict was reached on."""
    return ", ".join(f"{k} {v}" for k, v in config.items())


def several_drafts(config: dict) -> dict:
    """The draft models of a model's description ``config`` where it has several (``{"rho": [0.3, 0.8]}``, one
    synthetic draft model per value, or ``{"draft_models": 3}``), else ``{}``: one draft model's output unchanged."""
    if isinstance(config.get("rho"), list):
        return {"rho": config["rho"]}
    return {"draft_models": config["draft_models"]} if config.get("draft_models", 1) > 1 else {}


def model_name(config: dict) -> str:
    """A model's name as a verdict's line gives it (``config``: its description), with its draft models where it has
    several: ``synthetic (2 draft models, rho 0.3 and 0.8)`` or ``random-rational (3 draft models)``."""
    several = several_drafts(config)
    if "rho" in several:
        rho = " and ".join(f"{r:g}" for r in several["rho"])
        return f"{config['model']} ({len(several['rho'])} draft models, rho {rho})"
    return f"{config['model']} ({several['draft_models']} draft models)" if several else config["model"]


def echo_control_note(what: Subject, scheme: str) -> None:
    """The control-run line of a run under a drafting scheme the subject does not claim (exact/subject.py)."""
    note = what.control_note(scheme)
    if note is not None:
        click.echo(note)
