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
    if len(distinct) > 1:
        return "per pair: " + ", ".join(map(str, names))
    others = sorted({name for pair in tied or [] for name in pair})
    return distinct[0] + (f" (tied: {', '.join(others)})" if others and len(names) == 1 else "")


def describe(plan: Frontier) -> str:
    """The instance in words: the pair or pairs, the shape and drafting, the arithmetic."""
    base, pair = plan.base, plan.base.model
    seeds = f"seed {pair.seed}" if plan.seeds == 1 else \
        f"{plan.seeds} pairs, seeds {pair.seed}–{pair.seed + plan.seeds - 1} (each cell the mean over them)"
    model = (f"synthetic (V = {pair.vocab}, ρ = {pair.rho:g}, τ_p = {pair.tau_p:g}, τ_q = {pair.tau_q:g})"
             if pair.model_kind == "synthetic" else f"{pair.model_kind} (V = {pair.vocab})")
    return (f"{model}, {seeds}; {base.topology} tree, depth {base.depth}, branching {base.branching}, "
            f"{base.drafting} drafting; {base.arithmetic} arithmetic")


def frontier_markdown(plan: Frontier, summary: dict, command: str) -> str:
    """The references' table, then per rule its points: the swept values, ``E[τ]``, the TVD over ``Σ^(H+1)``, the
    KL divergence, what the point buys over the best lossless rule and its share of the ceiling."""
    lines = ["# The lossy frontier", "", f"`{command}`", "", describe(plan), "",
             "## Lossless references", "",
             "The best lossless built-in rule (the rules claiming the drafting on the shape, ranked by exact E[τ]) "
             "and the ceiling E[τ]*, the best any lossless verifier could reach (`specproof optimum`).", "",
             "| model | best lossless rule | its E[τ] | ceiling E[τ]* |", "|---|---|---|---|"]
    references = {tuple(r["model"]): r for r in summary["references"]}
    for ref in summary["references"]:
        ceiling = _float(ref["ceiling"]) if "ceiling" in ref else ref["ceiling_missing"]
        lines.append(f"| {_setting(ref['model'])} | {_best_name(ref['best'], ref['tied'])} | "
                     f"{_float(ref['best_expected_accepted'])} | {ceiling} |")
    for rule in plan.rules:
        points = [p for p in summary["points"] if p["rule"] == rule]
        names = [name for name, _ in points[0]["swept"]]
        header = [MODEL_LABELS.get(n, f"`{n}`") for n in names]
        lines += ["", f"## {rule}", ""]
        fixed = [f"{n} = {value_text(v)}" for n, v in points[0]["knobs"] if n not in names]
        if fixed:
            lines += [f"Fixed: {', '.join(fixed)}.", ""]
        lines += ["| " + " | ".join(header + ["E[τ]", "TVD", "KL (nats)", "ΔE[τ] over best lossless",
                                              "E[τ] / E[τ]*"]) + " |",
                  "|" + "---|" * (len(header) + 5)]
        for point in points:
            values = [value_text(v) for _, v in point["swept"]]
            if "refused" in point:
                lines.append("| " + " | ".join(values + [f"refused: {point['refused']}"] + [""] * 4) + " |")
                continue
            ref = references[tuple(point["model"])]
            gain = (point["expected_accepted"] - ref["best_expected_accepted"]
                    if ref["best_expected_accepted"] is not None else None)
            share = point["expected_accepted"] / ref["ceiling"] if ref.get("ceiling") else None
            lines.append("| " + " | ".join(values + [_float(point["expected_accepted"]), _float(point["tvd"]),
                                                      _float(point["kl"]), _float(gain, True), _float(share)]) + " |")
    return "\n".join(lines) + "\n"


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

    references = [{"model": values(r["model"]), "best": r["best"], "tied": r["tied"],
                   "best_expected_accepted": num(r["best_expected_accepted"]),
                   "ceiling": num(r.get("ceiling"), "fraction"), "ceiling_proved": r.get("ceiling_proved"),
                   "ceiling_missing": r.get("ceiling_missing"), "rules": r["rules"]} for r in summary["references"]]
    points = [{"rule": p["rule"], "knobs": values(p["knobs"]), "model": values(p["model"]),
              **{k: num(p[k]) for k in ("expected_accepted", "tvd") if k in p},
              **({"kl": num(p["kl"])} if "kl" in p else {}), **({"refused": p["refused"]} if "refused" in p else {}),
              "pairs": p["pairs"]} for p in summary["points"]]
    base, pair = plan.base, plan.base.model
    return {"command": command, "rules": list(plan.rules),
            "sweeps": {s.name: [value_text(v) for v in s.values] for s in plan.sweeps},
            "fixed": values(plan.fixed),
            "instance": {"model": pair.model_kind, "vocab": pair.vocab, "seeds": summary["seeds"],
                         **({name: getattr(pair, name) for name in MODEL_OPTIONS} if pair.model_kind == "synthetic"
                            else {"zero_prob": pair.zero_prob}),
                         "topology": base.topology, "depth": base.depth, "branching": base.branching,
                         "drafting": base.drafting, "arithmetic": arithmetic},
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
    """``E[τ]`` against the TVD: each rule's points (one colour per rule and model setting) joined along their
    frontier (the points no other of the rule beats on both counts), the best lossless rule marked at TVD 0, the
    ceiling as a dashed horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 5))
    colours = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"] * 8)
    settings = [tuple(r["model"]) for r in summary["references"]]
    for rule in plan.rules:
        for model in settings:
            points = [(float(p["tvd"]), float(p["expected_accepted"])) for p in summary["points"]
                      if p["rule"] == rule and tuple(p["model"]) == model and "refused" not in p]
            if not points:
                continue
            colour = next(colours)
            label = rule if len(settings) == 1 else f"{rule} ({_setting(model)})"
            ax.scatter(*zip(*points), color=colour, s=18, label=label)
            ax.plot(*zip(*_pareto(points)), color=colour, linewidth=1.2)
    for ref in summary["references"]:
        where = "" if len(settings) == 1 else f" ({_setting(ref['model'])})"
        if ref["best_expected_accepted"] is not None:
            ax.scatter([0.0], [float(ref["best_expected_accepted"])], marker="*", s=160, color="black", zorder=5,
                       label=f"best lossless: {_best_name(ref['best'])}{where}")
        if "ceiling" in ref:
            ax.axhline(float(ref["ceiling"]), color="grey", linestyle="--", linewidth=1,
                       label=f"ceiling E[τ]*{where}")
    ax.set_xlabel("exact TVD to the target over Σ^(H+1)")
    ax.set_ylabel("E[τ] (accepted draft tokens per round)")
    ax.set_xlim(left=0)
    ax.set_title(describe(plan), fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=110)
    except OSError as err:
        raise OutputError("out", f"cannot write {path}: {err.strerror or err}") from None
    finally:
        plt.close(figure)
