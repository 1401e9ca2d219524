"""The real-pair report (``specproof real-report``, docs/cli/real.md): every verifier of the real path on the shapes
it is defined on, over MT-bench's questions, on a real trained pair (SmolLM2-135M and drafts made of its own
layers): accepted tokens per step with standard errors across questions, block efficiency, tokens/s and the
speed-up over target-only decoding, in ``real_pair.md``/``.json`` and a plot ``real_pair.png``.
"""

from __future__ import annotations

import datetime
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from simulator.jsonfile import write_json, write_text

#: (verifier, drafting, shapes) of the report: the issue's eight rules, bv on chains and gbv on multi-chains only
RULES = (("tv-sps", "iid", None), ("tv-rrs", "iid", None), ("tv-rrsw", "without-replacement", None),
         ("tv-kseq", "iid", None), ("bv", "iid", ("chain",)), ("trv", "iid", None), ("lv-rrs", "iid", None),
         ("gbv", "iid", ("multi-chain",)))
#: shape name -> (topology, depth, branching)
SHAPES = {"chain": ("chain", 3, 1), "complete": ("complete", 3, 2), "multi-chain": ("multi-chain", 3, 3)}
MAIN_DRAFT = "self:skip=12,14,16,18"
#: the contrast row: a draft closer to the target, with the rule and shape of the first row
CONTRAST = ("tv-sps", "iid", "chain", "self:skip=14,16")


@dataclass(frozen=True)
class RealRow:
    verifier: str
    drafting: str
    shape: str
    depth: int
    branching: int
    draft: str
    questions: int
    tokens: int
    block_efficiency: float  # tokens per target pass: accepted + 1
    block_efficiency_se: float  # across questions
    tokens_per_s: float
    speedup: float  # over target-only decoding measured in the same command
    draft_passes_per_step: float

    @property
    def accepted(self) -> float:
        return self.block_efficiency - 1


def planned_rows() -> list[tuple[str, str, str, str]]:
    """``(verifier, drafting, shape, draft)`` of every row: each rule on each of its shapes (all of
    :data:`SHAPES` unless it names some) where it is defined, then the contrast row."""
    from simulator.verifiers import VERIFIERS

    rows = [(name, scheme, shape, MAIN_DRAFT) for name, scheme, shapes in RULES for shape in shapes or SHAPES
            if SHAPES[shape][0] in VERIFIERS[name].shapes]
    return rows + [CONTRAST]


def run_real_pair(target: str, questions: Sequence[dict], new_tokens: int, seed: int, device: str,
                  tick: Callable[[str, int], None] | None = None) -> tuple[list[RealRow], float]:
    """Every planned row over ``questions`` (both turns, chat template), and target-only tokens/s (measured with
    the first row). Models load once; ``self:`` drafts share the target's tensors."""
    import torch

    from simulator.drafting import FixedShape
    from simulator.torch_path.real import Processing, load_pair, load_tokenizer, self_draft
    from simulator.torch_path.spec_bench import run_spec_bench
    from simulator.trees import make_topology

    draft, model = load_pair(MAIN_DRAFT, target, torch.float32, device)
    tokenizer, _ = load_tokenizer(target)
    drafts = {MAIN_DRAFT: draft}
    rows, baseline = [], float("nan")
    plan = planned_rows()
    for i, (name, scheme, shape, spec) in enumerate(plan):
        if spec not in drafts:
            drafts[spec] = self_draft(model, spec)
        topology = make_topology(*SHAPES[shape])
        summary = run_spec_bench(drafts[spec], model, tokenizer, questions, name, FixedShape(topology, scheme), None,
                                 new_tokens, Processing(), seed, f"specproof-{name}", baseline=(i == 0))
        if i == 0:
            baseline = summary.baseline_tokens_per_s
        rows.append(RealRow(name, scheme, shape, SHAPES[shape][1], SHAPES[shape][2], spec, summary.questions,
                            summary.tokens, summary.block_efficiency, summary.block_efficiency_se,
                            summary.tokens_per_s, summary.tokens_per_s / baseline, summary.draft_passes_per_step))
        if tick is not None:
            tick("rows", len(plan))
    return rows, baseline


def write_real_pair_report(out: Path, rows: list[RealRow], baseline: float, question_ids: list, new_tokens: int,
                           command: str, device: str, load: tuple[float, float]) -> None:
    """``real_pair.md``, ``real_pair.json`` and ``real_pair.png`` in ``out``; ``load`` is the machine's 1-minute
    load average before and after the run (tokens/s are only comparable on an idle machine)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch
    import transformers

    out.mkdir(parents=True, exist_ok=True)
    machine = (f"{platform.machine()}, {torch.get_num_threads()} torch threads, device `{device}`; torch "
               f"{torch.__version__}, transformers {transformers.__version__}")
    lines = [
        "# Verifiers on a real trained pair: SmolLM2-135M-Instruct on MT-bench",
        "",
        f"Generated by `{command}` on {datetime.date.today().isoformat()} ({machine}; 1-minute load average "
        f"{load[0]:.1f} before the run and {load[1]:.1f} after it, on {os.cpu_count()} cores).",
        "",
        f"Target SmolLM2-135M-Instruct (30 layers, vocabulary 49,152; `specproof fetch smollm2`). Drafts are the "
        f"target's own layers: `{MAIN_DRAFT}` (26 layers), and `{CONTRAST[3]}` (28 layers) for contrast. MT-bench "
        f"questions {', '.join(str(q) for q in question_ids)} ({len(question_ids)} questions, both turns, chat "
        f"template, each turn continuing the conversation), up to {new_tokens} new tokens a turn or the "
        "end-of-sequence token; temperature 1, no top-k or top-p. Trees are (depth, branching).",
        "",
        "Accepted tokens per step is block efficiency − 1 (a step is one target pass). Standard errors are across "
        "questions. Tokens/s and speed-ups are wall-clock on this machine, against target-only decoding "
        f"({baseline:.2f} tokens/s, measured with the first row); they are below 1 because three draft passes of "
        "a 26-layer draft cost more than the tokens they save (reports/real_speed.md).",
        "",
        "| verifier | drafting | tree | draft | accepted per step | block efficiency | tokens | tokens/s | "
        "speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| `{r.verifier}` | {r.drafting} | {r.shape} ({r.depth}, {r.branching}) | `{r.draft}` | "
                     f"{r.accepted:.3f} ± {r.block_efficiency_se:.3f} | {r.block_efficiency:.3f} | {r.tokens} | "
                     f"{r.tokens_per_s:.2f} | {r.speedup:.2f} |")
    lines += ["", "![accepted tokens per step](real_pair.png)", ""]
    write_text(out / "real_pair.md", "\n".join(lines), "out")
    write_json(out / "real_pair.json", {"command": command, "questions": question_ids, "new_tokens": new_tokens,
                                        "baseline_tokens_per_s": baseline, "load_average": list(load),
                                        "rows": [asdict(r) for r in rows]}, "out")
    figure, axis = plt.subplots(figsize=(9, 4))
    labels = [f"{r.verifier}\n{r.shape}" + ("\n" + r.draft.removeprefix("self:") if r.draft != MAIN_DRAFT else "")
              for r in rows]
    colours = {"chain": "tab:blue", "complete": "tab:orange", "multi-chain": "tab:green"}
    axis.bar(range(len(rows)), [r.accepted for r in rows], yerr=[r.block_efficiency_se for r in rows], capsize=3,
             color=[colours[r.shape] if r.draft == MAIN_DRAFT else "tab:grey" for r in rows])
    axis.set_xticks(range(len(rows)), labels, rotation=90, fontsize=7)
    axis.set_ylabel("accepted tokens per step (± SE)")
    axis.set_title("SmolLM2-135M on MT-bench: blue chain (3), orange complete (3, 2), green multi-chain (3, 3), "
                   "grey: 28-layer draft", fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "real_pair.png", dpi=120)
    plt.close(figure)
