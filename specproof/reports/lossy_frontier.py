"""``specproof frontier``'s outputs (docs/lossy.md, "The frontier"): the Markdown tables (the lossless references,
then a table per rule), the JSON with every pair's exact numbers, and the plot of ``E[τ]`` against the TVD
(:func:`frontier_markdown`, :func:`frontier_json`, :func:`plot_frontier`)."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

from exact.certificate import FLOAT_TOLERANCE
from specproof.frontier_cells import value_text
from simulator.errors import OutputError
from simulator.numeric import to_json_number
from simulator.verifiers import VERIFIERS
from specproof.frontier import MODEL_OPTIONS, Frontier

#: the Markdown name of a model option
MODEL_LABELS = {"rho": "ρ", "tau_p": "τ_p", "tau_q": "τ_q"}


def _float(value, signed: bool = False) -> str:
    """A number of a table: 6 significant digits; a float within certify's tolerance of 0 is 0 (its rounding)."""
    if value is None:
        return "—"
    if isinstance(value, float) and abs(value) <= FLOAT_TOLERANCE:
        return "0"
    value = float(value)
    return "∞" if math.isinf(value) else f"{value:+.6g}" if signed else f"{value:.6g}"


def _setting(model: tuple) -> str:
    return ", ".join(f"{MODEL_LABELS[name]} = {value_text(value)}" for name, value in model) or "—"


def _best_name(names: list, tied: list | None = None) -> str:
    """The best lossless rule, the same on every pair or named per pair; with the rules tied with it (one pair)."""
    distinct = list(dict.fromkeys(names))
    if distinct == [None]:
        return "none claims this drafting on this shape"
    if len(distinct) > 1:  # how many pairs each rule is best on, most first
        counts = sorted(((names.count(name), str(name)) for name in distinct), key=lambda c: -c[0])
        return "per pair: " + ", ".join(f"{name} ×{count}" for count, name in counts)
    others = sorted({name for pair in tied or [] for name in pair})
    return distinct[0] + (f" (tied: {', '.join(others)})" if others and len(names) == 1 else "")


def describe(plan: Frontier) -> str:
    """The instance in words: the pair or pairs, the shape or shapes and drafting, the arithmetic."""
    base, pair = plan.base, plan.base.model
    seeds = f"seed {pair.seed}" if plan.seeds == 1 else \
        f"{plan.seeds} pairs, seeds {pair.seed}–{pair.seed + plan.seeds - 1} (each cell the mean over them)"
    model = (f"synthetic (V = {pair.vocab}, ρ = {pair.rho:g}, τ_p = {pair.tau_p:g}, τ_q = {pair.tau_q:g})"
             if pair.model_kind == "synthetic" else f"{pair.model_kind} (V = {pair.vocab})")
    shapes = plan.shape_list()
    shape = (f"{base.topology} tree, depth {base.depth}, branching {base.branching}" if len(shapes) == 1 else
             "shapes " + "; ".join(s.label() for s in shapes))
    return f"{model}, {seeds}; {shape}, {base.drafting} drafting; {base.arithmetic} arithmetic"


def _ratio(point: dict, ref: dict) -> tuple:
    """What a point buys over the best lossless rule, and its share of the ceiling (``None`` where missing)."""
    gain = (point["expected_accepted"] - ref["best_expected_accepted"]
            if ref["best_expected_accepted"] is not None else None)
    share = point["expected_accepted"] / ref["ceiling"] if ref.get("ceiling") else None
    return gain, share


def frontier_markdown(plan: Frontier, summary: dict, command: str, sections: tuple[str, ...] = ()) -> str:
    """The header (the command, the instance), then for given points the headline table (:func:`headline_table`),
    else the references' table and per rule its points: the swept values, ``E[τ]``, the TVD over ``Σ^(H+1)``, the
    KL divergence, what the point buys over the best lossless rule and its share of the ceiling. ``sections``,
    Markdown sections another part of specproof writes (the real pair's), follow as given."""
    lines = ["# The lossy frontier", "", f"`{command}`", "", describe(plan), ""]
    lines += headline_table(plan, summary) if plan.given else _sweep_tables(plan, summary)
    return "\n".join(lines) + "\n" + "".join("\n" + section.rstrip("\n") + "\n" for section in sections)


def headline_table(plan: Frontier, summary: dict) -> list[str]:
    """One row per given point (its rule, knobs and label) with, per shape, ``E[τ]``, the TVD, ``ΔE[τ]`` over the
    shape's best lossless rule and ``E[τ] / E[τ]*``; a point whose rule is not defined on a shape says so there;
    then a row for the best lossless rule and one for the ceiling, and the best rule's name per shape."""
    shapes = plan.shape_list()
    references = {(r["shape"], tuple(r["model"])): r for r in summary["references"]}
    refs = [references[(shape, ())] for shape in shapes]
    lines = ["## Headline", "",
             "Per shape: `E[τ]` (accepted draft tokens per round), the exact TVD to the target over `Σ^(H+1)`, "
             "`ΔE[τ]` over the shape's best lossless built-in rule (the rules claiming the drafting on the shape, "
             "ranked by exact `E[τ]`), and `E[τ] / E[τ]*`, the share of the ceiling, the best `E[τ]` any lossless "
             "verifier could reach (`specproof optimum`). KL divergences and each pair's numbers are in the JSON.",
             ""]
    header = ["rule", "setting"]
    for shape in shapes:
        header += [f"{shape.label()}: E[τ]", "TVD", "ΔE[τ]", "E[τ] / E[τ]*"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    rows = {(p["rule"], p["knobs"], p["label"], p["shape"]): p for p in summary["points"]}
    for point in plan.points():
        knobs = ", ".join(f"{n} = {value_text(v)}" for n, v in point.knobs) or "defaults"
        cells = [f"`{point.rule}`", knobs + (f" ({point.label})" if point.label else "")]
        for shape, ref in zip(shapes, refs):
            row = rows[(point.rule, point.knobs, point.label, shape)]
            if "undefined" in row:
                cells += ["not defined on this shape", "", "", ""]
            elif "refused" in row:
                cells += [f"refused: {row['refused']}", "", "", ""]
            else:
                gain, share = _ratio(row, ref)
                cells += [_float(row["expected_accepted"]), _float(row["tvd"]), _float(gain, True), _float(share)]
        lines.append("| " + " | ".join(cells) + " |")
    names = [_best_name(ref["best"], ref["tied"]) for ref in refs]
    best = ["best lossless rule", names[0] if len(set(names)) == 1 else
            "; ".join(f"{shape.label()}: {name}" for shape, name in zip(shapes, names))]
    ceiling = ["ceiling E[τ]*", "any lossless verifier"]
    for ref in refs:
        share = (ref["best_expected_accepted"] / ref["ceiling"]
                 if ref.get("ceiling") and ref["best_expected_accepted"] is not None else None)
        best += [_float(ref["best_expected_accepted"]), "0", "+0" if ref["best_expected_accepted"] is not None
                 else "—", _float(share)]
        if "ceiling" in ref:
            ceiling += [_float(ref["ceiling"]), "0", _float(_ratio({"expected_accepted": ref["ceiling"]}, ref)[0],
                                                               True), "1"]
        else:
            ceiling += [ref["ceiling_missing"], "", "", ""]
    return lines + ["| " + " | ".join(best) + " |", "| " + " | ".join(ceiling) + " |"]


def _sweep_tables(plan: Frontier, summary: dict) -> list[str]:
    """The references' table, then a table per rule (a shape column when there are several shapes)."""
    several = len(plan.shape_list()) > 1
    lines = ["## Lossless references", "",
             "The best lossless built-in rule (the rules claiming the drafting on the shape, ranked by exact E[τ]) "
             "and the ceiling E[τ]*, the best any lossless verifier could reach (`specproof optimum`).", "",
             "| " + ("shape | " if several else "") + "model | best lossless rule | its E[τ] | ceiling E[τ]* |",
             "|" + "---|" * (5 if several else 4)]
    references = {(r["shape"], tuple(r["model"])): r for r in summary["references"]}
    for ref in summary["references"]:
        ceiling = _float(ref["ceiling"]) if "ceiling" in ref else ref["ceiling_missing"]
        lines.append("| " + (f"{ref['shape'].label()} | " if several else "") +
                     f"{_setting(ref['model'])} | {_best_name(ref['best'], ref['tied'])} | "
                     f"{_float(ref['best_expected_accepted'])} | {ceiling} |")
    for rule in plan.rules:
        points = [p for p in summary["points"] if p["rule"] == rule]
        names = [name for name, _ in points[0]["swept"]]
        header = (["shape"] if several else []) + [MODEL_LABELS.get(n, f"`{n}`") for n in names]
        lines += ["", f"## {rule}", ""]
        fixed = [f"{n} = {value_text(v)}" for n, v in points[0]["knobs"] if n not in names]
        if fixed:
            lines += [f"Fixed: {', '.join(fixed)}.", ""]
        undefined = list(dict.fromkeys(p["shape"].label() for p in points if "undefined" in p))
        if undefined:
            lines += [f"Not defined on {'; '.join(undefined)} ({points[0]['rule']} is defined on "
                      f"{', '.join(VERIFIERS[rule].shapes)} trees): no rows there.", ""]
        lines += ["| " + " | ".join(header + ["E[τ]", "TVD", "KL (nats)", "ΔE[τ] over best lossless",
                                              "E[τ] / E[τ]*"]) + " |",
                  "|" + "---|" * (len(header) + 5)]
        for point in points:
            if "undefined" in point:
                continue
            values = ([point["shape"].label()] if several else []) + [value_text(v) for _, v in point["swept"]]
            if "refused" in point:
                lines.append("| " + " | ".join(values + [f"refused: {point['refused']}"] + [""] * 4) + " |")
                continue
            gain, share = _ratio(point, references[(point["shape"], tuple(point["model"]))])
            lines.append("| " + " | ".join(values + [_float(point["expected_accepted"]), _float(point["tvd"]),
                                                      _float(point["kl"]), _float(gain, True), _float(share)]) + " |")
    return lines


def frontier_json(plan: Frontier, summary: dict, command: str) -> dict:
    """Everything the tables show, each pair's numbers included; exact numbers as ``"num/den"`` under fraction
    arithmetic (the ceiling always), floats otherwise, KL a float (``"inf"``)."""
    arithmetic = plan.base.arithmetic

    def num(value, exact: str = arithmetic):
        if value is None:
            return None
        if isinstance(value, float) and math.isinf(value):
            return "inf"
        return to_json_number(value, exact) if isinstance(value, Fraction) else value

    def values(pairs) -> dict:
        return {name: value_text(value) for name, value in pairs}

    def shape(value) -> dict:
        return {"topology": value.topology, "depth": value.depth, "branching": value.branching}

    references = [{"shape": shape(r["shape"]), "model": values(r["model"]), "best": r["best"], "tied": r["tied"],
                   "best_expected_accepted": num(r["best_expected_accepted"]),
                   "ceiling": num(r.get("ceiling"), "fraction"), "ceiling_proved": r.get("ceiling_proved"),
                   "ceiling_missing": r.get("ceiling_missing"), "rules": r["rules"]} for r in summary["references"]]
    points = [{"rule": p["rule"], "knobs": values(p["knobs"]), "model": values(p["model"]),
               **({"label": p["label"]} if p["label"] else {}), "shape": shape(p["shape"]),
               **{k: num(p[k]) for k in ("expected_accepted", "tvd") if k in p},
               **({"kl": num(p["kl"])} if "kl" in p else {}),
               **{k: p[k] for k in ("refused", "undefined", "pairs") if k in p}} for p in summary["points"]]
    base, pair = plan.base, plan.base.model
    shapes = plan.shape_list()
    where = ({"topology": base.topology, "depth": base.depth, "branching": base.branching} if len(shapes) == 1
             else {"shapes": [shape(s) for s in shapes]})
    return {"command": command, "rules": list(plan.rules),
            "sweeps": {s.name: [value_text(v) for v in s.values] for s in plan.sweeps},
            "fixed": values(plan.fixed),
            "instance": {"model": pair.model_kind, "vocab": pair.vocab, "seeds": summary["seeds"],
                         **({name: getattr(pair, name) for name in MODEL_OPTIONS} if pair.model_kind == "synthetic"
                            else {"zero_prob": pair.zero_prob}),
                         **where, "drafting": base.drafting, "arithmetic": arithmetic},
            "references": references, "points": points}


def _pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other beats on both counts (a smaller TVD and a larger ``E[τ]``), by TVD."""
    front, best = [], -math.inf
    for tvd, accepted in sorted(points, key=lambda p: (p[0], -p[1])):
        if accepted > best:
            front.append((tvd, accepted))
            best = accepted
    return front


def plot_frontier(plan: Frontier, summary: dict, path: Path) -> None:
    """``E[τ]`` against the TVD, one panel per shape: each rule's points (one colour per rule and model setting,
    the same in every panel), a sweep's joined along their frontier (the points no other of the rule beats on both
    counts), given points labelled with their knob values, on TVD 0 to 1; the best lossless rule a star at TVD 0, the ceiling a dashed
    horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = plan.shape_list()
    figure, axes = plt.subplots(1, len(shapes), figsize=(max(8, 5 * len(shapes)), 5.5), squeeze=False)
    settings = list(dict.fromkeys(tuple(r["model"]) for r in summary["references"]))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 8
    colours = {key: palette[i] for i, key in enumerate((r, m) for r in plan.rules for m in settings)}
    handles: dict[str, object] = {}
    for ax, shape in zip(axes[0], shapes):
        for (rule, model), colour in colours.items():
            rows = [p for p in summary["points"] if p["rule"] == rule and tuple(p["model"]) == model
                    and p["shape"] == shape and "expected_accepted" in p]
            if not rows:
                continue
            points = [(float(p["tvd"]), float(p["expected_accepted"])) for p in rows]
            label = rule if len(settings) == 1 else f"{rule} ({_setting(model)})"
            handles[label] = ax.scatter(*zip(*points), color=colour, s=22)
            if not plan.given:  # a sweep's curve; given points stay markers
                ax.plot(*zip(*_pareto(points)), color=colour, linewidth=1.2)
            else:  # one label per place: settings that land on the same point share it
                texts: dict[tuple[float, float], list[str]] = {}
                for p, (x, y) in zip(rows, points):
                    texts.setdefault((round(x, 3), round(y, 3)), []).append(
                        ", ".join(value_text(v) for _, v in p["knobs"]) or "defaults")
                for (x, y), text in texts.items():
                    ax.annotate(" / ".join(f"({t})" for t in text), (x, y), xytext=(4, 3),
                                textcoords="offset points", fontsize=6, color=colour)
        names = []
        for ref in summary["references"]:
            if ref["shape"] != shape:
                continue
            if ref["best_expected_accepted"] is not None:
                handles["best lossless rule (TVD 0)"] = ax.scatter([0.0], [float(ref["best_expected_accepted"])],
                                                                   marker="*", s=160, color="black", zorder=5)
                names.append(_best_name(ref["best"]))
            if "ceiling" in ref:
                handles["ceiling E[τ]*"] = ax.axhline(float(ref["ceiling"]), color="grey", linestyle="--",
                                                      linewidth=1)
        ax.set_title(shape.label() + (f"; best lossless: {', '.join(dict.fromkeys(names))}" if names else ""),
                     fontsize=8)
        ax.set_xlabel("exact TVD to the target over Σ^(H+1)")
        ax.set_xlim(0, 1.05 if plan.given else None)  # given points: every panel on one scale
    axes[0][0].set_ylabel("E[τ] (accepted draft tokens per round)")
    figure.suptitle(describe(plan), fontsize=8)
    figure.legend(list(handles.values()), list(handles), fontsize=7, loc="lower center",
                  ncol=min(len(handles), 4))
    figure.tight_layout(rect=(0, 0.06 + 0.03 * (len(handles) // 5), 1, 0.97))
    try:
        figure.savefig(path, dpi=110)
    except OSError as err:
        raise OutputError("out", f"cannot write {path}: {err.strerror or err}") from None
    finally:
        plt.close(figure)
