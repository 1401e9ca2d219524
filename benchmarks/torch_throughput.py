"""Verifier-trials per second of each rule's array rule on torch and on numpy, per verifier and batch size.

Usage: ``python3 benchmarks/torch_throughput.py [--device cpu|cuda] [--batches 1000,10000,100000,1000000]
[--vocab 32] [--dtype float64|float32] [--budget 3] [--verifiers trv,gbv] [--workers 1]
[--out reports/torch_throughput.md]``.

Random rows, tokens and uniforms on ``complete(b=2, H=3)`` (chains for the block verifiers, a multi-chain for
GBV). The time covers ``torch_verify`` alone, after a warm-up, synchronised on a GPU; each cell is the best of
repeated calls within ``--budget`` seconds, torch and numpy alternating. On the CPU numpy's rate stands beside
torch's, with their ratio (numpy's time over torch's). Torch's CPU threads are set as the Monte Carlo engine sets
them, this process's share of the cores among ``--workers`` processes (``set_torch_threads``), and recorded.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

# Torch's CPU allocator maps every large tensor afresh, and the first touch of each page faults: at B = 1e6 a
# [B, V] temporary costs 3-4x numpy's (whose allocator reuses freed memory). Torch's own switch backs large
# allocations by huge pages instead; it is read at torch's first allocation, so it is set before the import.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import torch  # noqa: E402

from simulator.devices import set_torch_threads  # noqa: E402
from simulator.trees import make_topology  # noqa: E402
from simulator.verifiers import flows, rules  # noqa: E402
from simulator.verifiers.batched.torch_verify import TORCH_VERIFIERS, torch_verify  # noqa: E402
from specproof.reports.portable import portable_command  # noqa: E402

CHAINS = ("bv", "greedy-bv", "bug-greedy-bv-nomod")
MULTI_CHAINS = ("gbv", "bug-gbv-clipped")
FLOWS = ("tv-opt", "tv-gr", "lv-opt", "lv-gr")  # a flow solve per tree and node: measured at B = 100 only
FLOW_BATCH = 100


def inputs(name: str, batch: int, vocab: int, dtype: torch.dtype, device: str, seed: int = 0):
    """Random rows, tokens and uniforms for ``batch`` trees, generated on ``device`` (a GPU makes a million
    trees' rows in milliseconds; the CPU's generator, then a copy, would take seconds per cell)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    if name in CHAINS:
        topology = make_topology("chain", 3)
    elif name in MULTI_CHAINS:
        topology = make_topology("multi-chain", 3, 2)
    else:
        topology = make_topology("complete", 3, 2)
    n = len(topology.parents)
    p = torch.rand((batch, n, vocab), generator=gen, dtype=torch.float64, device=device) ** 4
    q = torch.rand((batch, n, vocab), generator=gen, dtype=torch.float64, device=device) ** 4
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    tokens = torch.randint(0, vocab, (batch, n), generator=gen, device=device)  # draft rows are positive: any token
    uniforms = torch.rand((batch, 2 * n + 2), generator=gen, dtype=torch.float64, device=device)
    return topology.parents, tokens, p.to(dtype), q.to(dtype), uniforms.to(dtype)


def measure(name: str, batch: int, vocab: int, dtype: torch.dtype, device: str, budget: float) -> dict[str, float]:
    """Trials per second on torch (on ``device``) and, on the CPU, on numpy: the best of calls alternating
    between the two libraries until ``budget`` seconds have passed (at least one call each), so that both
    see the same machine state."""
    libraries = ("torch", "numpy") if device == "cpu" else ("torch",)

    def on(library: str, args: tuple) -> tuple:
        return args if library == "torch" else (args[0],) + tuple(a.numpy() for a in args[1:])

    warm = inputs(name, min(batch, 1000), vocab, dtype, device)
    args = inputs(name, batch, vocab, dtype, device)
    for library in libraries:
        torch_verify(name, *on(library, warm))  # warm-up
    best = {library: math.inf for library in libraries}
    start, calls = time.perf_counter(), 0
    while calls < 1 or time.perf_counter() - start < budget:
        for library in libraries:
            for solver in (flows.gr_flow, flows.opt_flow, rules._outflow):  # time the flow solves, not the cache
                solver.cache_clear()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            begin = time.perf_counter()
            torch_verify(name, *on(library, args))
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            best[library] = min(best[library], time.perf_counter() - begin)
        calls += 1
    return {library: batch / seconds for library, seconds in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", default="1000,10000,100000,1000000")
    parser.add_argument("--vocab", type=int, default=32)
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of repeated calls per cell")
    parser.add_argument("--verifiers", default="", help="only these (comma-separated; default: every rule)")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes sharing the cores: torch gets cores // workers threads (at least one)")
    parser.add_argument("--out", default="reports/torch_throughput.md")
    args = parser.parse_args()
    threads = set_torch_threads(args.workers) if args.device == "cpu" else torch.get_num_threads()
    wanted = [name for name in args.verifiers.split(",") if name] or list(TORCH_VERIFIERS)
    batches = [int(b) for b in args.batches.split(",")]
    dtype = getattr(torch, args.dtype)
    rows = []
    for name in wanted:
        sizes = [FLOW_BATCH] if name in FLOWS else batches
        measured = {b: measure(name, b, args.vocab, dtype, args.device, args.budget) for b in sizes}
        rates = {b: m["torch"] for b, m in measured.items()}
        numpy_rates = {b: m["numpy"] for b, m in measured.items() if "numpy" in m}
        rows.append({"verifier": name, "rates": rates, "numpy": numpy_rates})
        print(json.dumps({"verifier": name, **{str(b): r for b, r in rates.items()},
                          **{f"numpy {b}": r for b, r in numpy_rates.items()}}), file=sys.stderr)
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({os.cpu_count()} cores)"
    command = portable_command(["python3", "benchmarks/torch_throughput.py", *sys.argv[1:]])
    lines = ["# Array rules: verifier-trials per second, torch and numpy", "",
             f"Command: `{command}`. Device: {device}; {platform.machine()}, {platform.platform()}, "
             f"Python {platform.python_version()}, torch {torch.__version__} with {threads} intra-op thread(s) "
             f"(--workers {args.workers}; numpy's elementwise operations run on one); {args.dtype}, "
             f"V = {args.vocab}, "
             "complete(b=2, H=3) trees (chains of depth 3 for block verification, multi-chain(b=2, H=3) for GBV). "
             "The flow-defined rules solve a max-flow or GR's dual per tree and node on the CPU (caches cleared "
             f"before timing): they are measured at B = {FLOW_BATCH}.", "",
             "Each cell: torch's rate; on the CPU also numpy's (the same array rule on numpy arrays) and torch's speed "
             "relative to numpy (numpy's time / torch's). Each rate is the best of repeated calls, the two libraries "
             f"alternating, over {args.budget:g} s per cell (at least one call each). Torch runs with "
             f"`THP_MEM_ALLOC_ENABLE={os.environ['THP_MEM_ALLOC_ENABLE']}` (its allocator's huge pages: without "
             "them each fresh large tensor page-faults, and at B = 1e6 torch's elementwise operations take 2-4x "
             "numpy's time; docs/engines.md).", "",
             "| verifier | " + " | ".join(f"B = {b:,}" for b in batches) + " |",
             "|---|" + "---|" * len(batches)]
    worst = math.inf
    for r in rows:
        cells = []
        for b in (FLOW_BATCH,) if r["verifier"] in FLOWS else batches:
            cell = f"{r['rates'][b]:,.0f}"
            if b in r["numpy"]:
                relative = r["rates"][b] / r["numpy"][b]
                worst = min(worst, relative)
                cell += f" / {r['numpy'][b]:,.0f} ({relative:.2f})"
            cells.append(cell + (f" (B = {b})" if r["verifier"] in FLOWS else ""))
        cells += ["–"] * (len(batches) - len(cells))
        lines.append(f"| `{r['verifier']}` | " + " | ".join(cells) + " |")
    if worst < math.inf:
        lines += ["", f"**Torch on the CPU relative to numpy, worst cell: {worst:.2f}** (the bar: 0.8 from 10^4 trees "
                  "up, with one thread per worker when the workers fill the cores)."]
    if args.device == "cpu":
        lines += ["", "GPU numbers: `reports/torch_throughput_cuda.md` (this script with `--device cuda`).", ""]
    else:
        lines += ["", "Torch alone on the GPU (numpy has no GPU). The flow-defined rules' rates are the CPU's "
                  "flow solver's, reached through the GPU path. CPU numbers for comparison: "
                  "`reports/torch_throughput.md` (another machine).", ""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
