"""How long a loop certificate (``specproof certify --loop``, docs/loops.md) takes: runs enumerated and seconds.

Usage: ``python3 benchmarks/loop_scale.py [--budget 600] [--repeats 1] [--only NAME,...]
[--out reports/loop_scale.md] [--render]``.

Each configuration (a loop on the tiny Llama pair at one vocabulary, seed, top-k, draft depth, length and prompt)
is certified in a fresh child process killed at ``--budget`` seconds; a row gives the verdict, the runs of the loop
and of plain sampling enumerated, the child's start-up (imports, the two models) and certificate seconds (the
fastest of ``--repeats`` children), and the load average around it. The done-when commands of issue 65 then run as
a user types them, timed whole.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specproof.reports.portable import portable_command  # noqa: E402

EXAMPLE = "examples.loops:speculative_sampling"
TWIN = "examples.loops:raw_draft_row"
ASSISTED, LOOKUP = "transformers-assisted", "transformers-prompt-lookup"


def config(loop: str, vocab: int, seed: int = 0, top_k: int = 2, depth: int = 2, tokens: int = 3,
           prompt: str = "0") -> dict:
    return {"loop": loop, "vocab": vocab, "seed": seed, "top_k": top_k, "depth": depth, "tokens": tokens,
            "prompt": prompt}


#: the configurations, by name: the done-when size (V = 4, top-k 2, depth 2, N = 3) for each loop, then V = 6 at
#: two seeds (seed 0's draft and target share no top-2 token after the prompt: no draft is ever accepted), prompt
#: lookup after a prompt ``a,b,a`` whose candidate ``b`` the target's top-2 keeps, one token more, and top-k 3
CONFIGS = {
    "assisted-v4": config(ASSISTED, 4),
    "lookup-v4": config(LOOKUP, 4),
    "lookup-v4-repeat": config(LOOKUP, 4, prompt="3,2,3"),
    "example-v4": config(EXAMPLE, 4),
    "twin-v4": config(TWIN, 4),
    "assisted-v6": config(ASSISTED, 6),
    "lookup-v6": config(LOOKUP, 6),
    "example-v6": config(EXAMPLE, 6),
    "assisted-v6-seed1": config(ASSISTED, 6, seed=1),
    "lookup-v6-seed1-repeat": config(LOOKUP, 6, seed=1, prompt="0,1,0"),
    "example-v6-seed1": config(EXAMPLE, 6, seed=1),
    "assisted-v4-n4": config(ASSISTED, 4, tokens=4),
    "lookup-v4-n4": config(LOOKUP, 4, tokens=4),
    "example-v4-n4": config(EXAMPLE, 4, tokens=4),
    "assisted-v4-k3": config(ASSISTED, 4, top_k=3),
    "example-v4-k3": config(EXAMPLE, 4, top_k=3),
}

#: issue 65's done-when commands, run as typed
DONE_WHEN = [
    ["specproof", "certify", "--loop", ASSISTED, "--model", "tiny-llama", "--vocab", "4", "--top-k", "2",
     "--max-new-tokens", "3"],
    ["specproof", "certify", "--loop", LOOKUP, "--model", "tiny-llama", "--vocab", "4", "--top-k", "2",
     "--max-new-tokens", "3"],
]


def child(given: dict) -> None:
    """One certificate, in this (fresh) process: its result as one JSON line on standard output."""
    start = time.perf_counter()
    import torch

    from exact.generation_law import certify_loop
    from simulator.loops.builtin import load_loop, plain_sampling
    from simulator.loops.models import tiny_llama_pair
    from simulator.loops.sampling import Sampling

    target, draft = tiny_llama_pair(given["vocab"], given["seed"])
    loop = load_loop(given["loop"], given["depth"])
    prompt = tuple(int(t) for t in given["prompt"].split(","))
    sampling = Sampling(top_k=given["top_k"]).as_dict()
    ready = time.perf_counter()
    cert = certify_loop(loop, plain_sampling, target, draft, prompt, given["tokens"], sampling)
    done = time.perf_counter()
    import transformers

    print(json.dumps({"versions": f"torch {torch.__version__}, transformers {transformers.__version__}",
                      "startup": ready - start, "seconds": done - ready, "lossless": cert.lossless,
                      "tvd": float(cert.tvd), "runs": cert.executions, "reference_runs": cert.reference_executions,
                      "passes": float(cert.expected_passes), "threads": torch.get_num_threads()}))


def timed(command: list[str], budget: float) -> tuple[subprocess.CompletedProcess | None, float, float]:
    """``(the finished process or None past the budget, wall seconds, CPU seconds of the child)``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    before, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    try:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=budget)
    except subprocess.TimeoutExpired:
        done = None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, time.perf_counter() - wall, cpu


def measure(name: str, given: dict, budget: float, repeats: int) -> dict:
    """The fastest of ``repeats`` children (a child past the budget or failing ends the repeats), every try kept
    under ``tries``."""
    tries = []
    for _ in range(repeats):
        load = os.getloadavg()[0]
        done, wall, cpu = timed([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(given)], budget)
        row = {"wall": wall, "cpu": cpu, "load": [load, os.getloadavg()[0]]}
        if done is None:
            row["error"] = f"> {budget:g} s"
        elif done.returncode != 0:
            row["error"] = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        else:
            row |= json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps({"name": name, **row}), file=sys.stderr)
        tries.append(row)
        if "error" in row:
            break
    best = tries[-1] if "error" in tries[-1] else min(tries, key=lambda r: r["seconds"])
    return {"name": name, **given, "budget": budget, **best, "tries": tries}


def done_when(budget: float) -> list[dict]:
    """The done-when commands as typed: exit code, verdict line, wall and CPU seconds."""
    rows = []
    for words in DONE_WHEN:
        load = os.getloadavg()[0]
        done, wall, cpu = timed([sys.executable, "-m", "specproof.cli", *words[1:]], budget)
        first = "" if done is None else (done.stdout.splitlines() or [""])[0]
        rows.append({"command": shlex.join(words), "exit": None if done is None else done.returncode,
                     "verdict": first, "wall": wall, "cpu": cpu, "load": [load, os.getloadavg()[0]]})
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def cells(r: dict) -> str:
    prompt = f"[{r['prompt']}]"
    head = f"| `{r['loop']}` | {r['vocab']} | {r['seed']} | {r['top_k']} | {r['tokens']} | {prompt} |"
    load = f"{r['load'][0]:.1f}–{r['load'][1]:.1f}"
    if "error" in r:
        return f"{head} {r['error']} | – | – | – | – | – | {r['wall']:.0f} | {load} |"
    total = r["runs"] + r["reference_runs"]
    verdict = "LOSSLESS" if r["lossless"] else "LOSSY"
    return (f"{head} {verdict} (TVD {r['tvd']:.2g}) | {r['runs']:,} + {r['reference_runs']:,} | {r['passes']:.3g} | "
            f"{r['startup']:.1f} | {r['seconds']:.1f} | {r['seconds'] / total:.3f} | {r['wall']:.0f} | {load} |")


def write(out: Path, command: str, rows: list[dict], checks: list[dict], loads: tuple) -> None:
    threads = next((r["threads"] for r in rows if "threads" in r), "?")
    versions = next((r["versions"] for r in rows if "versions" in r), "torch and transformers not reached")
    lines = [
        "# Loop certificates: runs enumerated and seconds", "",
        f"Made by `{command}`. Machine: {os.cpu_count()} cores, {platform.machine()}, {platform.platform()}, "
        f"Python {platform.python_version()}, {versions}, torch's default {threads} threads; load average (1 minute) "
        f"{loads[0]:.2f} before, {loads[1]:.2f} after, and around each row below. The benchmark's own child counts "
        "for 1 to 2 of it (torch's threads); the rest is other processes sharing the cores, and the seconds are "
        "then upper bounds of an idle machine's.", "",
        "Each row certifies one loop with `specproof certify --loop`'s code (`exact.generation_law.certify_loop`) "
        "on the tiny Llama pair (`--model tiny-llama`: target seed S, draft seed S + 1) against plain sampling with "
        "the same top-k, in a fresh child process killed at its budget. *Runs*: the loop's runs enumerated (one "
        "execution each) + plain sampling's. *Start-up*: the child's imports and the two models; *certificate*: "
        "both laws, the TVD and the marginals; *s / run*: certificate seconds over all runs; each the fastest of "
        "`--repeats` children (every try is in the JSON). `E[passes]`: the "
        "target's expected forward passes; equal to N, no draft token was ever accepted (the verdict then weighs "
        "plain sampling only: docs/loops.md). `--depth 2` throughout: prompt lookup's draft length; the example "
        "loops draft 2 tokens whatever the depth; `transformers-assisted` drafts as its assistant's generation "
        "config says (docs/loops.md#transformers-assisted).", "",
        "| loop | V | seed | top-k | N | prompt | verdict | runs | E[passes] | start-up s | certificate s | s / run | "
        "child wall s | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *[cells(r) for r in rows], "",
        "## The done-when commands, as typed", "",
        "Each in a fresh process (`python -m specproof.cli`), wall and CPU seconds of the whole command, imports "
        "included:", "",
        "| command | exit | first line | wall s | CPU s | load |", "|---|---|---|---|---|---|",
        *[f"| `{c['command']}` | {c['exit']} | {c['verdict']} | {c['wall']:.1f} | {c['cpu']:.1f} | "
          f"{c['load'][0]:.1f}–{c['load'][1]:.1f} |" for c in checks], ""]
    out.write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps({"command": command, "load": list(loads), "rows": rows,
                                                    "done_when": checks}, indent=1) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=600.0, help="seconds per configuration's child")
    parser.add_argument("--only", help=f"configurations to run, comma-separated: {', '.join(CONFIGS)}")
    parser.add_argument("--repeats", type=int, default=1, help="children per configuration: the fastest is shown")
    parser.add_argument("--out", default="reports/loop_scale.md")
    parser.add_argument("--render", action="store_true", help="write --out's Markdown again from its JSON, running "
                                                                  "nothing")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.render:
        stored = json.loads(Path(args.out).with_suffix(".json").read_text())
        write(Path(args.out), stored["command"], stored["rows"], stored["done_when"], tuple(stored["load"]))
        return
    names = args.only.split(",") if args.only else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration {unknown[0]!r}: one of {', '.join(CONFIGS)}")
    command = portable_command(["python3", "benchmarks/loop_scale.py", *sys.argv[1:]])
    before = os.getloadavg()[0]
    rows = [measure(name, CONFIGS[name], args.budget, args.repeats) for name in names]
    checks = done_when(args.budget)
    write(Path(args.out), command, rows, checks, (before, os.getloadavg()[0]))


if __name__ == "__main__":
    main()
