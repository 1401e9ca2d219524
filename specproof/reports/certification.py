"""The certification table: every built-in verifier certified exactly on one small synthetic instance
(:func:`certification_table`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from simulator.drafting.aded import AdedConfig
from simulator.drafting.drafter_registry import DRAFTING, DrafterOptions, make_drafter
from simulator.drafting import Drafter, draft_models_for
from simulator.models import ModelPair, RandomRationalModel, SyntheticModel
from simulator.errors import InvalidParameterError
from simulator.numeric import decimal_text
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS

from exact.certificate import Certificate, certify
from exact.size import SizeEstimate, estimate_round


TABLE_DRAFTERS = DrafterOptions(budget=4, threshold=0.25, max_depth=2,
                                aded=AdedConfig(iterations=20, length=2, candidates=4))
#: The similarity of every draft model after the first in the rows drafted by ``k-models`` (one draft model per child)
EXTRA_DRAFT_RHO = 0.8


def with_draft_models(model: ModelPair, count: int) -> ModelPair:
    """``model`` with ``count`` draft models, for rows drafted by ``k-models``: the synthetic pair keeps its target
    and draft model 0 and gains draft models of similarity :data:`EXTRA_DRAFT_RHO`, a random rational pair draws
    the extra draft rows after its own (docs/models.md); a model that has enough already is itself."""
    if getattr(model, "draft_models", 1) >= count:
        return model
    if isinstance(model, SyntheticModel):
        return SyntheticModel(model.vocab, model.rhos + (EXTRA_DRAFT_RHO,) * (count - len(model.rhos)), model.tau_p,
                              model.tau_q, model.seed)
    if isinstance(model, RandomRationalModel):
        return RandomRationalModel(model.vocab, model.seed, model.max_weight, model.zero_prob, draft_models=count)
    raise InvalidParameterError("model", f"k-models drafting needs {count} draft models; this model has "
                                         f"{getattr(model, 'draft_models', 1)}")


@dataclass(frozen=True)
class TableRow:
    verifier: str
    topology: str
    drafting: str
    expected_lossless: bool
    certificate: Certificate

    @property
    def as_expected(self) -> bool:
        """False only when a rule expected lossless is found lossy: a control may miss on one instance."""
        return self.certificate.lossless or not self.expected_lossless

    @property
    def verdict(self) -> str:
        if self.certificate.lossless:
            return "lossless" if self.expected_lossless else "lossless (control not shown here)"
        return "LOSSY" if not self.expected_lossless else "LOSSY **UNEXPECTED**"


@dataclass(frozen=True)
class Planned:
    """One row to certify: verifier, tree label, drafting scheme, drafter and arithmetic."""

    verifier: str
    tree: str
    scheme: str
    drafter: Drafter
    arithmetic: str
    model: ModelPair  #: the table's model, with one draft model per child under ``k-models``


def plan_table(model: ModelPair, depth: int = 2, branching: int = 2, arithmetic: str = "fraction",
               topology: str = "complete") -> list[Planned]:
    """The rows of the table, built but not certified (so their size can be estimated first).

    Each verifier runs under every drafting scheme it is lossless under (docs/rules.md), controls under i.i.d.
    drafting, chain-only rules on a chain, dynamic drafters as :data:`TABLE_DRAFTERS`. A lossless rule certified
    lossless passes. A control certified lossless here is "not shown here", not a contradiction: one instance can miss
    its bug (its ``lossy_on`` names the shapes where it shows); only a proof contradicts an expected loss. The rules
    lossy by design are left out: their price is measured, not a verdict (docs/lossy.md); so is a scheme the model has
    too few draft models for (``k-models`` needs one per child: ``--rho 0.5,0.8`` adds ``khisti-is``'s row).
    """
    plans = []
    for spec in VERIFIERS.values():
        if spec.lossy_by_design:  # priced, not certified: docs/lossy.md
            continue
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
            pair = with_draft_models(model, draft_models_for(scheme, shape))
            plans.append(Planned(spec.name, tree, scheme, drafter, "float" if spec.float_only else arithmetic, pair))
    return plans


def estimate_table(plans: list[Planned]) -> Iterator[SizeEstimate]:
    """Each row's size (:func:`exact.size.estimate_round`), in order, computed as it is asked for (a caller that
    refuses at the first row too large does no more work)."""
    for plan in plans:
        yield estimate_round(plan.model, plan.drafter, plan.verifier, plan.arithmetic)


def certification_table(model: ModelPair, depth: int = 2, branching: int = 2, arithmetic: str = "fraction",
                        topology: str = "complete",
                        tick: Callable[[str, int], None] | None = None) -> list[TableRow]:
    """Certify every row; ``tick(stage, rows)`` after each."""
    plans = plan_table(model, depth, branching, arithmetic, topology)
    rows = []
    for plan in plans:
        cert = certify(plan.model, plan.drafter, plan.verifier, plan.arithmetic)
        rows.append(TableRow(plan.verifier, plan.tree, _scheme_label(plan, model), not VERIFIERS[plan.verifier].is_control,
                             cert))
        if tick is not None:
            tick("certification table", len(plans))
    return rows


def _scheme_label(plan: Planned, model: ModelPair) -> str:
    """The drafting column: the scheme, with the draft models' similarities where the row added draft models."""
    if plan.model is model:
        return plan.scheme
    return f"{plan.scheme} (ρ = {', '.join(f'{rho:g}' for rho in plan.model.rhos)})"


def _dynamic_label(drafter) -> str:
    settings = {k: v for k, v in drafter.describe().items() if k != "drafting"}
    return "dynamic(" + ", ".join(f"{k}={v}" for k, v in settings.items()) + ")"


def table_markdown(rows: list[TableRow], title: str) -> str:
    lines = [f"# {title}", "",
             "| verifier | tree | drafting | TVD to q^(H+1) | E[τ] | verdict | expected | counterexample |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.certificate
        tvd = "0 (exact)" if c.lossless and c.arithmetic == "fraction" else decimal_text(c.tvd)
        ce = "" if c.counterexample is None else (
            f"{list(c.counterexample.sequence)}: {decimal_text(c.counterexample.verifier_prob)} vs "
            f"{decimal_text(c.counterexample.target_prob)}")
        expected = "lossless" if r.expected_lossless else "lossy (control)"
        lines.append(f"| `{r.verifier}` | {r.topology} | {r.drafting} | {tvd} | {decimal_text(c.expected_accepted)} | "
                     f"{r.verdict} | {expected} | {ce} |")
    lines += ["", "A verdict covers this one model pair. A lossless rule found LOSSY here is a contradiction "
              "(**UNEXPECTED**); a control found lossless here is not: one instance can miss a bug, and only a "
              "proof contradicts a rule expected lossy (`specproof list` names the shapes where each control "
              "shows)."]
    return "\n".join(lines) + "\n"


def table_json(rows: list[TableRow]) -> list[dict]:
    """``certification.json``: each row's verifier, tree, drafting, expectation and verdict with its certificate's
    JSON."""
    return [{"verifier": r.verifier, "topology": r.topology, "drafting": r.drafting,
             "expected_lossless": r.expected_lossless, "verdict": r.verdict.replace("*", ""),
             **r.certificate.to_json()} for r in rows]
