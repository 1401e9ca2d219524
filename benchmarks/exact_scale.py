"""How large a tree the exact engine certifies within a time budget: eagerly, on demand, and by recursion.

Usage: ``python3 benchmarks/exact_scale.py [--budget 600] [--verifiers tv-rrs,trv,...] [--branching 2,3]
[--vocab 2,3,4] [--max-depth 4] [--modes eager,lazy,recursion] [--out reports/exact_scale.md] [--update]``.

Depths 1, 2, … of each rule's shape are certified exactly in a child process killed at ``--budget`` seconds,
until one does not finish; a cell gives the largest depth that did, its time and executions. Modes: eager
drafting, on demand (:mod:`simulator.drafting.lazy_draft`), the rule's recursion (``certify --method recursion``).
``--update`` reruns only the named rows' ``--modes``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

from exact import certify
from simulator.drafting import FixedShape
from simulator.drafting.lazy_draft import Eager
from simulator.limits import limits
from simulator.models import SyntheticModel
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from specproof.reports.portable import portable_command


def shape_of(name: str) -> str:
    shapes = VERIFIERS[name].shapes
    return "complete" if "complete" in shapes else VERIFIERS[name].default_shape


MODES = ("eager", "lazy", "recursion")  # drafting every tree first; drafting on demand; the rule's recursion


def _certify(name: str, shape: str, depth: int, branching: int, vocab: int, mode: str, out) -> None:
    spec = VERIFIERS[name]
    drafter = FixedShape(make_topology(shape, depth, branching), spec.lossless_under[0])
    start = time.perf_counter()
    with limits(max_executions=None):
        cert = certify(SyntheticModel(vocab, seed=0), Eager(drafter) if mode == "eager" else drafter, name,
                       method="recursion" if mode == "recursion" else "enumerate")
    out.put({"seconds": time.perf_counter() - start, "executions": cert.executions, "lossless": cert.lossless})


def run(name: str, shape: str, depth: int, branching: int, vocab: int, mode: str, budget: float) -> dict | None:
    """One certificate in a child process; ``None`` past ``budget`` seconds."""
    out = multiprocessing.Queue()
    child = multiprocessing.Process(target=_certify, args=(name, shape, depth, branching, vocab, mode, out))
    child.start()
    child.join(budget)
    if child.is_alive():
        child.kill()
        child.join()
        return None
    return out.get() if child.exitcode == 0 else None


def largest(name: str, branching: int, vocab: int, mode: str, budget: float, max_depth: int) -> dict:
    """The largest depth certified within ``budget``, and the first that was not."""
    best: dict = {"depth": 0}
    for depth in range(1, max_depth + 1):
        result = run(name, shape_of(name), depth, branching, vocab, mode, budget)
        if result is None:
            return {**best, "failed_at": depth, "budget": budget}
        best = {"depth": depth, **result, "budget": budget}
        print(json.dumps({"verifier": name, "b": branching, "V": vocab, "mode": mode, **best}), file=sys.stderr)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=600.0, help="seconds per certificate")
    parser.add_argument("--verifiers", default=",".join(n for n, s in VERIFIERS.items() if not s.is_control))
    parser.add_argument("--branching", default="2,3")
    parser.add_argument("--vocab", default="2,3,4")
    parser.add_argument("--max-depth", type=int, default=4)
    parser.add_argument("--modes", default=",".join(MODES), help="the columns to run (others kept with --update)")
    parser.add_argument("--out", default="reports/exact_scale.md")
    parser.add_argument("--update", action="store_true",
                        help="keep the rows of --out's JSON for the cells not rerun (their command stays listed)")
    args = parser.parse_args()
    names = args.verifiers.split(",")
    command = portable_command(["python3", "benchmarks/exact_scale.py", *sys.argv[1:]])
    stored = json.loads(Path(args.out).with_suffix(".json").read_text()) if args.update else {"rows": []}
    if isinstance(stored, list):  # the first layout: rows only, the command in the markdown
        stored = {"commands": ["python3 benchmarks/exact_scale.py --budget 30 --vocab 4 --branching 2 "
                               "--max-depth 3 --out reports/exact_scale.md"], "rows": stored}
    previous = {(r["verifier"], r["b"], r["V"]): r for r in stored["rows"]}
    wanted = args.modes.split(",")
    rows = []
    for name in names:
        for b in [int(x) for x in args.branching.split(",")]:
            if shape_of(name) == "chain" and b != 2:
                continue  # a chain has one child per node: b does not apply
            for vocab in [int(x) for x in args.vocab.split(",")]:
                modes = MODES if VERIFIERS[name].exact_law is not None else MODES[:2]
                old = previous.get((name, b, vocab), {})
                rows.append({"verifier": name, "shape": shape_of(name), "b": b, "V": vocab,
                             **{mode: largest(name, b, vocab, mode, args.budget, args.max_depth) if mode in wanted
                                else old.get(mode) for mode in modes}})
    rerun = {(r["verifier"], r["b"], r["V"]) for r in rows}
    kept = [r for r in stored["rows"] if (r["verifier"], r["b"], r["V"]) not in rerun]
    order = {name: i for i, name in enumerate(VERIFIERS)}
    rows = sorted(kept + rows, key=lambda r: (order.get(r["verifier"], len(order)), r["b"], r["V"]))
    commands = (stored.get("commands", []) if args.update else []) + [command]
    Path(args.out).with_suffix(".json").write_text(json.dumps({"commands": commands, "rows": rows}, indent=1))

    def cell(r: dict | None, unit: str = "executions") -> str:
        if r is None:
            return "–"
        budget = r.get("budget", 30)  # the rows before budgets were recorded ran under 30 s
        if r["depth"] == 0:
            return f"– (depth 1 > {budget:g} s)"
        text = f"H = {r['depth']}: {r['executions']:,} {unit}, {r['seconds']:.1f} s"
        return text + (f" (H = {r['failed_at']}: > {budget:g} s)" if "failed_at" in r else "")

    lines = ["# Exact certification: the largest tree within a time budget, eager and lazy drafting, and by recursion", "",
             "Commands (later ones rerun the rows of their verifiers): " + "; ".join(f"`{c}`" for c in commands)
             + f". Machine: {os.cpu_count()} cores, {platform.machine()}, {platform.platform()}, "
             f"Python {platform.python_version()}. Each certificate: exact fractions, synthetic model (seed 0), the "
             "first drafting scheme the rule is lossless under, in a child process killed at its budget (a cell past it "
             "says which); "
             f"depths 1..{args.max_depth} tried in order. *Eager*: every draft tree enumerated, then the verifier on "
             "each (the engine before drafting on demand); *lazy*: a draft token is a choice only when the verifier "
             "reads it; *recursion*: the rule's exact recursion, which enumerates no trees (`certify --method "
             "recursion`, docs/engines.md: TRV over subtrees, LV with the deepest level in closed form). Executions: the "
             "enumerated choice-tree leaves (rounds), completed sequences not counted; for the recursion, its "
             "sub-problems (TRV: subtrees solved; LV: drafts above the deepest level).", "",
             "| verifier | shape | b | V | eager | lazy | recursion |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['verifier']}` | {r['shape']} | {r['b']} | {r['V']} | {cell(r['eager'])} | "
                     f"{cell(r['lazy'])} | {cell(r.get('recursion'), 'sub-problems')} |")
    lines.append("")
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
