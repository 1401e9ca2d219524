"""Monte Carlo near the machine's limit: the reference tv-rrs command at two commits side by side, and this machine's
random-gather rate and streaming bandwidth with the fraction of them the trial loop reaches.

Usage: ``python3 benchmarks/mc_limit.py --before DIR [--after .] [--repeats 5] [--rows LOG]
[--out /tmp/mc_limit.md]`` with ``DIR`` a checkout of the other commit (``git worktree add DIR COMMIT``); the
section printed is the one of ``reports/benchmarks.md`` ("Monte Carlo near the machine's limit").

Side by side, in fresh processes of each checkout in turn, ``--repeats`` times (ratios: the median of the repeats'
ratios, times: the medians):

* the whole command ``specproof mc --verifier tv-rrs --model synthetic --topology complete --branching 2 --depth 4
  --vocab 15 --seeds 1 --trials 1000000``, CPU seconds (user + system) of the process;
* its parts in one process (:data:`CHILD`): the model set-up (``ContextRows``: ``p`` and ``q`` at all 54,241
  contexts), the trial loop (10^6 trials in the chunks that checkout's engine picks, tables built on first use
  included), with a hash of every trial's accepted length and completed sequence and of the rows' bytes: the two
  must agree.

The machine (this process, numpy): the random-gather rate, ``np.take`` of random indices into a float64 table the
size of the model's ``q`` rows (6.5 MB; also the ``p`` rows, 0.4 MB), in blocks of a chunk's size and of 2^20; the
streaming bandwidth of a 256 MiB copy. The loop's gathers are counted in the after checkout by wrapping the two
ways it gathers (the array API's ``take``, and the row source's ``entry``): elements gathered per trial, and
calls per chunk. ``fraction of the gather limit`` = trials/s × gathers per trial / gathers/s.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from side_by_side import checkouts, read_rows, two_commit_parser  # benchmarks/, the script's own folder

COMMAND = ["mc", "--verifier", "tv-rrs", "--model", "synthetic", "--topology", "complete", "--branching", "2",
           "--depth", "4", "--vocab", "15", "--seeds", "1", "--trials", "1000000"]
TRIALS = 10**6
ROW_KEYS = ("repeat", "before", "after")

# Runs in the checkout under test: the command's parts, timed in CPU seconds; ``count`` wraps the gathers.
CHILD = r"""
import hashlib, json, resource, sys
def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
start = cpu()
import numpy as np
import array_api_compat.numpy as xnp
from simulator.models import SyntheticModel
from simulator.trees import make_topology
from simulator.montecarlo import engine
from simulator.montecarlo.context_rows import ContextRows
from simulator.montecarlo import batched
imported = cpu()
count = sys.argv[2] == "count"
calls, elements, reads = [0], [0], [0]
if count:
    take, entry, sample = xnp.take, ContextRows.entry, ContextRows.sample
    def counted_take(x, indices, /, **kwargs):
        calls[0] += 1
        elements[0] += int(np.size(indices))
        return take(x, indices, **kwargs)
    def counted_entry(self, which, ids, x):
        calls[0] += 1
        elements[0] += int(np.size(ids))
        reads[0] += int(np.size(ids))
        return entry(self, which, ids, x)
    def counted_sample(self, which, ctx, u):
        reads[0] += int(np.size(ctx))
        return sample(self, which, ctx, u)
    xnp.take, ContextRows.entry, ContextRows.sample = counted_take, counted_entry, counted_sample
trials = int(sys.argv[1])
topology = make_topology("complete", 4, 2)
model = SyntheticModel(15, seed=0)
before_rows = cpu()
rows = ContextRows(model, 4)
set_up = cpu() - before_rows
path = getattr(batched, "path_nodes", None)
nodes = len(topology.parents)
chunk = engine.batch_size(nodes, 15, None, path("tv-rrs", topology)) if path else engine.batch_size(nodes, 15)
digests, accepted_counts = (hashlib.sha256(), hashlib.sha256()), np.zeros(6, dtype=np.int64)
before_loop = cpu()
for first in range(0, trials, chunk):
    accepted, codes = batched.batched_rounds(model, topology, "iid", "tv-rrs", 0,
                                             np.arange(first, min(trials, first + chunk)), rows, trials)
    accepted_counts += np.bincount(accepted, minlength=6)
    digests[0].update(accepted.tobytes())
    digests[1].update(codes.tobytes())
loop = cpu() - before_loop
rows_digest = hashlib.sha256(rows.p.tobytes() + rows.q.tobytes()).hexdigest()[:16]
print(json.dumps({"import_s": imported - start, "set_up_s": set_up, "loop_s": loop, "chunk": chunk,
                  "trials_per_s": trials / loop, "calls_per_chunk": calls[0] * chunk / trials,
                  "gathers_per_trial": elements[0] / trials, "reads_per_trial": reads[0] / trials,
                  "rows": rows_digest, "trials_digest": digests[0].hexdigest()[:16] + digests[1].hexdigest()[:16],
                  "accepted": accepted_counts.tolist()}))
"""


def whole_command(root: Path) -> tuple[float, str]:
    """CPU seconds of the whole command in a fresh process of the checkout at ``root``, and its result lines."""
    env = dict(os.environ, PYTHONPATH=str(root))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "specproof.cli", *COMMAND], cwd=root, env=env, capture_output=True,
                          text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{root}: the command failed:\n{done.stderr}")
    lines = [line.strip() for line in done.stdout.splitlines()
             if line.strip().startswith(("accepted length", "TVD", "chi-square"))]
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), " / ".join(lines)


def parts(root: Path, trials: int, mode: str = "time") -> dict:
    """:data:`CHILD` in a fresh process of the checkout at ``root``."""
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-c", CHILD, str(trials), mode], cwd=root, env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{root}: the parts failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(roots: dict[str, Path], repeats: int) -> list[dict]:
    """One row per repeat: for each checkout in turn, the whole command, then its parts. Each row is printed to
    stderr as a JSON line as it is measured (``--rows`` renders a report from them)."""
    rows = []
    for repeat in range(repeats):
        row: dict = {"repeat": repeat}
        for tag, root in roots.items():
            seconds, out = whole_command(root)
            row[tag] = {"command_s": seconds, "output": out, **parts(root, TRIALS)}
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def best_rate(run, repeats: int = 5) -> float:
    """The best of ``repeats`` runs of ``run()``, which returns (units done, CPU seconds)."""
    return max(done / seconds for done, seconds in (run() for _ in range(repeats)))


def machine(chunk: int) -> dict:
    """This machine's random-gather rate (elements/s) into tables the size of the model's rows, and its streaming
    bandwidth (bytes/s, a copy: read and write)."""
    rng = np.random.default_rng(0)
    out = {}
    for label, size in (("q", 54241 * 15), ("p", 3616 * 15)):
        table = rng.random(size)
        for block in (chunk, 2**20):
            index = rng.integers(0, size, 2**21)

            def run(table=table, index=index, block=block):
                start = time.process_time()
                for first in range(0, len(index), block):
                    np.take(table, index[first: first + block])
                return len(index), time.process_time() - start

            out[f"gather_{label}_{block}"] = best_rate(run)
    a, b = np.ones(2**25), np.empty(2**25)  # 256 MiB each

    def copy():
        start = time.process_time()
        np.copyto(b, a)
        return 2 * a.nbytes, time.process_time() - start

    out["copy_bytes_per_s"] = best_rate(copy)
    return out


def render(rows: list[dict], commits: dict[str, str], limits: dict, counted: dict, counted_before: dict) -> str:
    def med(tag, key):
        return statistics.median(r[tag][key] for r in rows)

    def ratio(key, invert=False):
        values = [(r["after"][key] / r["before"][key]) if invert else (r["before"][key] / r["after"][key])
                  for r in rows]
        return statistics.median(values)

    same_rows = all(r["before"]["rows"] == r["after"]["rows"] for r in rows)
    same_trials = all(r["before"]["trials_digest"] == r["after"]["trials_digest"] for r in rows)
    same_out = all(r["before"]["output"] == r["after"]["output"] for r in rows)
    rate = med("after", "trials_per_s")
    chunk = rows[0]["after"]["chunk"]
    per_trial = counted["gathers_per_trial"]
    lines = [
        "## Monte Carlo near the machine's limit", "",
        f"Command: `python3 benchmarks/mc_limit.py --before <checkout of {commits['before']}> --repeats {len(rows)}`; "
        f"before = `{commits['before']}`, after = `{commits['after']}`. Machine: {os.cpu_count()} cores, "
        f"{platform.machine()}, {platform.platform()}, Python {platform.python_version()}, numpy {np.__version__}; "
        f"{time.strftime('%Y-%m-%d')}. Each repeat runs, for each checkout in turn, the whole command in a fresh "
        "process, then its parts in another (`CHILD` in the script); CPU seconds (user + system); times are the "
        "medians of the repeats, ratios the medians of the repeats' ratios.", "",
        "The command: `specproof mc --verifier tv-rrs --model synthetic --topology complete --branching 2 --depth 4 "
        "--vocab 15 --seeds 1 --trials 1000000`.", "",
        "| | before (CPU s) | after (CPU s) | before / after |", "|---|---|---|---|",
        f"| whole command | {med('before', 'command_s'):.2f} | {med('after', 'command_s'):.2f} | "
        f"{ratio('command_s'):.2f} |",
        f"| model set-up (`ContextRows`, 54,241 contexts) | {med('before', 'set_up_s'):.3f} | "
        f"{med('after', 'set_up_s'):.3f} | {ratio('set_up_s'):.2f} |",
        f"| trial loop, 10^6 trials | {med('before', 'loop_s'):.3f} | {med('after', 'loop_s'):.3f} | "
        f"{ratio('loop_s'):.2f} |",
        f"| imports of the parts' process | {med('before', 'import_s'):.3f} | {med('after', 'import_s'):.3f} | "
        f"{ratio('import_s'):.2f} |", "",
        f"Trials per CPU second in the loop: {med('before', 'trials_per_s'):,.0f} before (chunks of "
        f"{rows[0]['before']['chunk']:,}), {rate:,.0f} after (chunks of {chunk:,}); "
        f"{ratio('trials_per_s', invert=True):.2f}x. Over the whole command: "
        f"{TRIALS / med('before', 'command_s'):,.0f} and {TRIALS / med('after', 'command_s'):,.0f} trials per CPU "
        f"second. The rows' bytes {'are' if same_rows else 'are NOT'} equal at the two commits, every trial's "
        f"accepted length and completed sequence {'are' if same_trials else 'are NOT'} (hashes compared in each "
        f"repeat), and so {'are' if same_out else 'are NOT'} the command's result lines.", "",
        "Gathers of the loop, counted by wrapping the row source's `sample` and `entry` (each a random read of a "
        "table the size of the model's rows: a draw reads the row's guide table and, one time in eight, its running "
        "sums; an entry reads one value) and the array API's `take` (every 1-D gather, into tables and into the "
        f"chunk's own arrays): {counted_before['reads_per_trial']:.1f} table reads a trial before, "
        f"{counted['reads_per_trial']:.1f} after; `take` {counted_before['calls_per_chunk']:,.0f} calls per chunk of "
        f"{counted_before['chunk']:,} trials ({counted_before['gathers_per_trial']:.1f} elements a trial) before, "
        f"{counted['calls_per_chunk']:,.0f} per chunk of {counted['chunk']:,} ({per_trial:.1f} a trial) after "
        "(fancy indexing, which gathers too, is not counted).", "",
        "| this machine | rate |", "|---|---|",
    ]
    for label, table in (("q", "q rows, 6.5 MB"), ("p", "p rows, 0.43 MB")):
        lines.append(f"| random gather into the {table}, blocks of {chunk:,} | "
                     f"{limits[f'gather_{label}_{chunk}'] / 1e6:,.0f} M elements/s |")
        lines.append(f"| random gather into the {table}, blocks of 2^20 | "
                     f"{limits[f'gather_{label}_{2**20}'] / 1e6:,.0f} M elements/s |")
    lines.append(f"| streaming copy, 256 MiB | {limits['copy_bytes_per_s'] / 1e9:,.1f} GB/s (read + write) |")
    limit = limits[f"gather_q_{2**20}"]
    reads, reads_before = counted["reads_per_trial"], counted_before["reads_per_trial"]
    before_rate = med("before", "trials_per_s")
    lines += ["",
              f"**The gather limit.** At {limit / 1e6:,.0f} M random gathers a CPU second (the q-sized table in "
              f"blocks of 2^20), a loop that did nothing but its {reads:.1f} table reads a trial would run "
              f"{limit / reads:,.0f} trials per CPU second: the loop reaches **{rate * reads / limit:.0%}** of that "
              f"(before: {before_rate * reads_before / limit:.0%}). Counting every `take` element as a gather "
              f"({per_trial:.1f} a trial), {rate * per_trial / limit:.0%} (before: "
              f"{before_rate * counted_before['gathers_per_trial'] / limit:.0%}). The rest of the loop's time is "
              "the counter stream's hash (two SplitMix64 rounds a uniform), index arithmetic and the per-operation "
              "cost of numpy calls on the chunk's arrays.", "",
              f"**The bandwidth.** The table reads move {rate * reads * 8 / 1e9:,.2f} GB/s of 8-byte values, "
              f"{rate * reads * 8 / limits['copy_bytes_per_s']:.1%} of the streaming copy's bandwidth; counted as "
              f"whole 64-byte cache lines, {rate * reads * 64 / limits['copy_bytes_per_s']:.0%} (before: "
              f"{before_rate * reads_before * 8 / limits['copy_bytes_per_s']:.1%} and "
              f"{before_rate * reads_before * 64 / limits['copy_bytes_per_s']:.0%}). The tables (p's and q's rows, "
              "running sums, guide tables, the acceptance and residual tables: about 20 MB at V = 15, H = 4) fit the "
              "32 MiB L3 cache, so random reads are not bound by memory bandwidth.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = two_commit_parser("/tmp/mc_limit.md")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    roots, commits = checkouts(args)
    rows = read_rows(parser, args.rows, ROW_KEYS) if args.rows else measure(roots, args.repeats)
    counted = parts(roots["after"], 200_000, "count")
    counted_before = parts(roots["before"], 200_000, "count")
    limits = machine(rows[0]["after"]["chunk"])
    text = render(rows, commits, limits, counted, counted_before)
    Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
