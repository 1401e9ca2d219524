"""The certification table: every built-in verifier certified exactly on one small synthetic instance.

Each verifier is certified under every drafting scheme it is lossless under (SPEC §10) and, for controls,
under i.i.d. drafting; chain-only rules run on a chain of the same depth; the dynamic drafters run with
:data:`TABLE_DRAFTERS` (small enough to enumerate in seconds). A row passes when the verdict
matches the expectation (lossless rules certified, controls flagged).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.aded import AdedConfig
from simulator.drafters import DRAFTING, DrafterOptions, make_drafter
from simulator.models import ModelPair
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS

from .certificate import Certificate, certify


TABLE_DRAFTERS = DrafterOptions(budget=4, threshold=0.25, max_depth=2,
                                aded=AdedConfig(iterations=20, length=2, candidates=4))


@dataclass(frozen=True)
class TableRow:
    verifier: str
    topology: str
    drafting: str
    expected_lossless: bool
    certificate: Certificate

    @property
    def as_expected(self) -> bool:
        return self.certificate.lossless == self.expected_lossless


def certification_table(model: ModelPair, depth: int = 2, branching: int = 2, arithmetic: str = "fraction",
                        topology: str = "complete") -> list[TableRow]:
    rows = []
    for spec in VERIFIERS.values():
        if spec.demo is not None:
            shape = make_topology("explicit", parents=spec.demo[0])
            label, schemes = f"explicit {list(spec.demo[0])}", (spec.demo[1],)
        else:
            name = topology if topology in spec.shapes else spec.default_shape
            shape = make_topology(name, depth, branching)
            label = f"chain(H={depth})" if name == "chain" else f"{name}(b={branching}, H={depth})"
            schemes = spec.lossless_under or ("iid",)
        for scheme in schemes:
            drafter = make_drafter(scheme, shape, model, TABLE_DRAFTERS)
            tree = label if scheme in DRAFTING else _dynamic_label(drafter)
            cert = certify(model, drafter, spec.name, "float" if spec.float_only else arithmetic)
            rows.append(TableRow(spec.name, tree, scheme, not spec.is_control, cert))
    return rows


def _dynamic_label(drafter) -> str:
    settings = {k: v for k, v in drafter.describe().items() if k != "drafting"}
    return "dynamic(" + ", ".join(f"{k}={v}" for k, v in settings.items()) + ")"


def _fmt(value, digits: int = 6) -> str:
    return f"{float(value):.{digits}g}"


def table_markdown(rows: list[TableRow], title: str) -> str:
    lines = [f"# {title}", "",
             "| verifier | tree | drafting | TVD to q^(H+1) | E[τ] | verdict | expected | counterexample |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.certificate
        tvd = "0 (exact)" if c.lossless and c.arithmetic == "fraction" else _fmt(c.tvd)
        ce = "" if c.counterexample is None else (
            f"{list(c.counterexample.sequence)}: {_fmt(c.counterexample.verifier_prob)} vs "
            f"{_fmt(c.counterexample.target_prob)}")
        verdict = "lossless" if c.lossless else "LOSSY"
        expected = "lossless" if r.expected_lossless else "lossy (control)"
        mark = "" if r.as_expected else " **UNEXPECTED**"
        lines.append(f"| `{r.verifier}` | {r.topology} | {r.drafting} | {tvd} | {_fmt(c.expected_accepted)} | "
                     f"{verdict}{mark} | {expected} | {ce} |")
    return "\n".join(lines) + "\n"
