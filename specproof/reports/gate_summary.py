"""What the gate writes: a Markdown summary (for a person, or ``$GITHUB_STEP_SUMMARY``) and JUnit XML for any CI
system's test report."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from specproof.gate.runner import CheckOutcome

FAILURE, ERROR = "failure", "error"


def testcases(outcomes: list[CheckOutcome]) -> list[tuple[str, str, str | None, str | None]]:
    """``(class, name, FAILURE or ERROR or None, message)`` for every JUnit testcase.

    One testcase per instance (class: the check), failing when a check expected lossless is LOSSY there (a loop's
    message names the continuation that differs most) or its ``E[τ]`` (a loop's ``E[tokens per target pass]``)
    moved from the baseline, in error when its certificate raised a typed error; per control one ``control
    flagged`` testcase, failing when no instance is LOSSY; per lossless check one ``hunt`` testcase when a hunt ran or
    erred (a loop is not hunted).
    """
    out = []
    for o in outcomes:
        lossless = o.check.expect == "lossless"
        for case in o.cases:
            if case.error:
                out.append((o.check.name, case.key, ERROR, case.error))
                continue
            why = []
            if lossless and case.lossy:
                why.append(f"LOSSY: TVD {case.shown('tvd')}, off-support mass {case.shown('off_support')}"
                           + (f"; {case.worst}" if case.worst else ""))
            if any(c is case for c in o.over_budget):
                why.append(f"OVER BUDGET: TVD {case.shown('tvd')} > {o.check.tvd_budget}")
            if case.moved:
                name, now, old = case.moved
                why.append(f"{name} {now} moved from baseline {old}")
            if why and o.reproducer:
                why.append(f"reproducer: {o.reproducer} (specproof certify --case {o.reproducer})")
            out.append((o.check.name, case.key, FAILURE if why else None, "; ".join(why) or None))
        if o.check.expect == "lossy":
            flagged = len(o.lossy_cases)
            msg = None if flagged or o.errors else f"expected LOSSY, certified LOSSLESS on all {len(o.cases)} instances"
            out.append((o.check.name, "control flagged", FAILURE if msg else None, msg))
        if o.error:
            out.append((o.check.name, "hunt", ERROR, o.error))
        elif o.hunt is not None:
            msg = o.hunt_failure
            if msg and o.reproducer:
                msg += f"; reproducer: {o.reproducer}"
            out.append((o.check.name, "hunt", FAILURE if msg else None, msg))
    return out


def junit(outcomes: list[CheckOutcome], seconds: float) -> str:
    cases = testcases(outcomes)
    failures = sum(1 for _, _, kind, _ in cases if kind == FAILURE)
    errors = sum(1 for _, _, kind, _ in cases if kind == ERROR)
    suites = ET.Element("testsuites", tests=str(len(cases)), failures=str(failures), errors=str(errors),
                        time=f"{seconds:.3f}")
    suite = ET.SubElement(suites, "testsuite", name="specproof gate", tests=str(len(cases)),
                          failures=str(failures), errors=str(errors), time=f"{seconds:.3f}")
    for cls, name, kind, msg in cases:
        case = ET.SubElement(suite, "testcase", classname=cls, name=name)
        if kind:
            kind_type = "specproof.regression" if kind == FAILURE else "specproof.error"
            ET.SubElement(case, kind, message=msg, type=kind_type).text = msg
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell (a ``|`` or a line break in an error message would split the row)."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(outcomes: list[CheckOutcome], command: str) -> str:
    lines = ["# specproof gate", "", f"`{command}`", "",
             "| check | expected | instances | LOSSY on | baseline | hunt | result |",
             "|---|---|---|---|---|---|---|"]
    for o in outcomes:
        with_base = [c for c in o.cases if c.baseline is not None and c.error is None]
        moved = sum(1 for c in o.cases if c.moved)
        base = (f"{len(with_base) - moved} equal, {moved} moved" if with_base else "no baseline")
        hunt = ("ERROR" if o.error else "not hunted (a loop)" if o.check.loop else "—" if o.hunt is None else
                "LOSS FOUND" if o.hunt["lossy"] else f"none in {o.hunt['pairs']} pairs")
        result = []
        if o.failures:
            result.append("REGRESSION: " + "; ".join(o.failures))
        if o.errors:
            more = f" (and {len(o.errors) - 1} more)" if len(o.errors) > 1 else ""
            result.append(f"ERROR: {o.errors[0]}{more}")
        lines.append(f"| {_cell(o.check.name)} | {_cell(o.expected)} | {len(o.cases)} | {len(o.lossy_cases)} | "
                     f"{base} | {hunt} | {_cell('; '.join(result) or 'holds')} |")
    reproducers = [o for o in outcomes if o.reproducer]
    if reproducers:
        lines += ["", "Reproducers (certify with `specproof certify --case FILE`):", ""]
        lines += [f"- {o.check.name}: `{o.reproducer}`" for o in reproducers]
    lines += ["", "A LOSSLESS verdict covers the instances listed (model pairs, shapes, drafting), not every pair."]
    if any(o.check.loop for o in outcomes):
        lines += ["A loop check's baseline column compares E[tokens per target pass], within the gate's tolerance; "
                  "loops are not hunted: each covers its tiny pairs, prompt, length and sampling parameters."]
    return "\n".join(lines) + "\n"
