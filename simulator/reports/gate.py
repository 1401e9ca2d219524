"""What the gate writes: a Markdown summary (for a person, or ``$GITHUB_STEP_SUMMARY``) and JUnit XML (for the
test report of any CI system).

JUnit: one ``testcase`` per instance (class: the check), failing when a check expected lossless is LOSSY there or
when its ``E[τ]`` moved from the baseline; per control one ``control flagged`` testcase, failing when no instance
is LOSSY; per lossless check one ``hunt`` testcase when a hunt ran.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from simulator.checks.gate import CheckOutcome


def testcases(outcomes: list[CheckOutcome]) -> list[tuple[str, str, str | None]]:
    """``(class, name, failure message or None)`` for every JUnit testcase."""
    out = []
    for o in outcomes:
        lossless = o.check.expect == "lossless"
        for case in o.cases:
            why = []
            if lossless and case.lossy:
                why.append(f"LOSSY: TVD {case.result['tvd']}, off-support mass {case.result['off_support']}")
            if case.moved:
                why.append(f"E[τ] {case.result['expected_accepted']} moved from baseline {case.baseline}")
            if why and o.reproducer:
                why.append(f"reproducer: {o.reproducer} (specproof certify --case {o.reproducer})")
            out.append((o.check.name, case.key, "; ".join(why) or None))
        if not lossless:
            flagged = len(o.lossy_cases)
            out.append((o.check.name, "control flagged",
                        None if flagged else f"expected LOSSY, certified LOSSLESS on all {len(o.cases)} instances"))
        if o.hunt is not None:
            msg = None
            if o.hunt["lossy"]:
                msg = f"the hunt found a loss after {o.hunt['pairs']} pairs"
                if o.reproducer:
                    msg += f"; reproducer: {o.reproducer}"
            out.append((o.check.name, "hunt", msg))
    return out


def junit(outcomes: list[CheckOutcome], seconds: float) -> str:
    cases = testcases(outcomes)
    failures = sum(1 for *_, msg in cases if msg)
    suites = ET.Element("testsuites", tests=str(len(cases)), failures=str(failures), time=f"{seconds:.3f}")
    suite = ET.SubElement(suites, "testsuite", name="specproof gate", tests=str(len(cases)),
                          failures=str(failures), errors="0", time=f"{seconds:.3f}")
    for cls, name, msg in cases:
        case = ET.SubElement(suite, "testcase", classname=cls, name=name)
        if msg:
            ET.SubElement(case, "failure", message=msg, type="specproof.regression").text = msg
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def markdown(outcomes: list[CheckOutcome], command: str) -> str:
    lines = ["# specproof gate", "", f"`{command}`", "",
             "| check | expected | instances | LOSSY on | E[τ] vs baseline | hunt | result |",
             "|---|---|---|---|---|---|---|"]
    for o in outcomes:
        with_base = [c for c in o.cases if c.baseline is not None]
        moved = sum(c.moved for c in o.cases)
        base = (f"{len(with_base) - moved} equal, {moved} moved" if with_base else "no baseline")
        hunt = "—" if o.hunt is None else ("LOSS FOUND" if o.hunt["lossy"] else f"none in {o.hunt['pairs']} pairs")
        result = "REGRESSION: " + "; ".join(o.failures) if o.failures else "holds"
        lines.append(f"| {o.check.name} | {o.check.expect} | {len(o.cases)} | {len(o.lossy_cases)} | {base} | "
                     f"{hunt} | {result} |")
    reproducers = [o for o in outcomes if o.reproducer]
    if reproducers:
        lines += ["", "Reproducers (certify with `specproof certify --case FILE`):", ""]
        lines += [f"- {o.check.name}: `{o.reproducer}`" for o in reproducers]
    lines += ["", "A LOSSLESS verdict covers the instances listed (model pairs, shapes, drafting), not every pair."]
    return "\n".join(lines) + "\n"
