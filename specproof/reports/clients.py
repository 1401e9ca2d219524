"""The clients report (``specproof clients``; docs/kernels.md, "Code people ship"): samplers other projects ship,
certified unmodified through the shipped adapters, and their whole generation loops (docs/loops.md), each by the
very command a reader can paste."""

from __future__ import annotations

import json
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

from specproof.reports.portable import messages

VLLM_KERNEL = "vllm.model_executor.layers.rejection_sampler:RejectionSampler.forward"
HF_KERNEL = "transformers.generation.utils:_speculative_sampling"
EAGLE_KERNEL = "eagle.model.utils:evaluate_posterior"
MEDUSA_KERNEL = "medusa.model.utils:evaluate_posterior"
SGLANG_KERNEL = "sglang.kernels.ops.speculative.reject_sampling:chain_speculative_sampling_triton"
VLLM_V1_KERNEL = "vllm.v1.sample.rejection_sampler:rejection_sample"
MRV2_KERNEL = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils:rejection_sample"
VLLM_FORWARD = "vllm.v1.sample.rejection_sampler:RejectionSampler.forward"
#: a batch of three requests for vLLM 0.11.0's forward (examples/vllm_batch/), its greedy request's temperature left
#: to be written: -1 (the sampler's GREEDY_TEMPERATURE) or 0 (as vLLM 0.11.0's InputBatch writes it)
MIXED_BATCH = ("--kernel", VLLM_FORWARD, "--adapter", "vllm-v1-forward", "--import-path", "{folder}", "--request")
RANDOM_REQUESTS = ("--request", "table=examples/vllm_batch/top_k.json,temperature=0.5,top_k=2,seed=7,depth=1",
                   "--request", "table=examples/vllm_batch/top_p.json,top_p=0.75,depth=1")
CHAIN2 = ["--topology", "chain", "--depth", "2"]
EAGLE_TREE = ["--topology", "complete", "--branching", "2", "--depth", "2", "--drafting", "without-replacement",
              "--schemes", "without-replacement"]
RATIONAL = ["--model", "random-rational", "--vocab", "3", "--seeds", "3"]
MEDUSA_TREE = ["--adapter", "medusa", "--import-path", "{folder}", "--topology", "complete", "--branching", "2",
               "--depth", "2"]
SYNTHETIC = ["--model", "synthetic", "--vocab", "3"]
TINY_LOOP = ["--vocab", "4", "--top-k", "2"]  # a loop's pair of vocabulary 4, top-k below it (docs/loops.md)


@dataclass(frozen=True)
class Client:
    """One certification: what is certified, the ``certify`` arguments after ``specproof certify``, what the row expects
    (``LOSSLESS``/``LOSSY``, or ``REFUSED``: exit 2, a kernel the capture cannot resolve) and why; ``needs``, the
    ``specproof fetch`` artifact whose folder replaces ``{folder}`` in the arguments."""

    source: str
    args: tuple[str, ...]
    expected: str
    why: str
    needs: str | None = None


def _mrv2_lossy(mode: str, kwargs: str, rule: str, why: str) -> Client:
    """vLLM 0.33.0 Model Runner V2's ``rejection_sample`` on one of its lossy-by-design paths (``--kernel-kwargs``
    ``kwargs``), expected LOSSY with the exact TVD of the built-in rule ``rule`` (docs/lossy.md)."""
    return Client(f"vLLM 0.33.0 Model Runner V2 `rejection_sample` (Triton), {mode}, use_fp64",
                  ("--kernel", MRV2_KERNEL, "--adapter", "vllm-mrv2", "--import-path", "{folder}", "--kernel-kwargs",
                   f"use_fp64=True,{kwargs}", *CHAIN2, *RATIONAL), "LOSSY",
                  f"lossy by design (docs/lossy.md#{rule}): {why}", needs="vllm-mrv2")


CLIENTS = (
    Client("transformers `_speculative_sampling` (installed)",
           ("--kernel", HF_KERNEL, "--adapter", "chain", "--topology", "chain", "--depth", "3", *RATIONAL),
           "LOSSLESS", "standard speculative sampling, float64 rows"),
    Client("transformers `_speculative_sampling` (installed)",
           ("--kernel", HF_KERNEL, "--adapter", "chain", "--topology", "chain", "--depth", "3", "--dtype", "float32",
            *RATIONAL), "LOSSLESS", "the same in float32: judged at float32's tolerance"),
    Client("vLLM 0.6.3 `RejectionSampler.forward`",
           ("--kernel", VLLM_KERNEL, "--adapter", "vllm", "--import-path", "{folder}", "--topology", "chain",
            "--depth", "2", *RATIONAL), "LOSSY",
           "its residual `clamp(q − p, min=finfo(float32).tiny)` emits tokens the target excludes with probability "
           "about tiny: a support violation", needs="vllm-sampler"),
    Client("vLLM 0.6.3 `RejectionSampler.forward`",
           ("--kernel", VLLM_KERNEL, "--adapter", "vllm", "--import-path", "{folder}", "--topology", "chain",
            "--depth", "2", *SYNTHETIC), "LOSSLESS",
           "no zero in the target's rows, so no support to violate: the clamp's mass (about 1e-38) is far below the "
           "tolerance",
           needs="vllm-sampler"),
    Client("EAGLE (eagle-llm 1.2.1) `evaluate_posterior`",
           ("--kernel", EAGLE_KERNEL, "--adapter", "eagle", "--import-path", "{folder}", *EAGLE_TREE, *RATIONAL),
           "LOSSLESS", "recursive rejection sampling without replacement: the k-th sibling verified against the draft "
                       "row without the earlier ones, which each rejection subtracts; children drafted without "
                       "replacement, as EAGLE's drafter draws them", needs="eagle-posterior"),
    Client("EAGLE (eagle-llm 1.2.1) `evaluate_posterior`",
           ("--kernel", EAGLE_KERNEL, "--adapter", "eagle", "--import-path", "{folder}", *EAGLE_TREE, "--uniforms",
            "grid", *RATIONAL), "LOSSY",
           "its coin `r = random.random()` is 0 with probability 2^-53, and `r <= px / qx` then accepts a draft the "
           "target gives 0: a support violation of 2^-53 times the chance that such a draft is compared",
           needs="eagle-posterior"),
    Client("Medusa (medusa-llm 0.1) `evaluate_posterior`, typical acceptance at its defaults",
           ("--kernel", MEDUSA_KERNEL, *MEDUSA_TREE, *SYNTHETIC), "LOSSY",
           "lossy by design (docs/lossy.md): drafts whose target probability passes min(0.09, 0.3·exp(−H)) are "
           "accepted, the longest passing candidate wins and the next token is the target's argmax; the TVD equals "
           "`--verifier typical`'s exactly (the synthetic pair has no exact likelihood tie, which Medusa's float sum "
           "of logs would break by rounding)", needs="medusa-posterior"),
    Client("Medusa (medusa-llm 0.1) `evaluate_posterior`, typical acceptance, other knobs",
           ("--kernel", MEDUSA_KERNEL, *MEDUSA_TREE, "--kernel-kwargs",
            "posterior_threshold=0.3,posterior_alpha=0.5,temperature=0.7", *SYNTHETIC), "LOSSY",
           "the same knobs given to `--verifier typical --verifier-kwargs` give the same exact TVD",
           needs="medusa-posterior"),
    Client("SGLang 0.5.23 `chain_speculative_sampling_triton` (Triton), chain mode",
           ("--kernel", SGLANG_KERNEL, "--adapter", "sglang", "--import-path", "{folder}", *CHAIN2, *RATIONAL),
           "LOSSLESS", "speculative sampling in one Triton kernel under Triton's interpreter: coins drawn in torch, "
                       "the residual by an inverse-CDF walk; E[τ] equal to `--verifier tv-sps`'s on each pair",
           needs="sglang-reject"),
    Client("SGLang 0.5.23 `chain_speculative_sampling_triton` (Triton), block mode",
           ("--kernel", SGLANG_KERNEL, "--adapter", "sglang", "--import-path", "{folder}", "--kernel-kwargs",
            "block_verification=True", *CHAIN2, *RATIONAL), "LOSSLESS",
           "the Block Verification paper's Algorithm 2 in the same kernel; E[τ] equal to `--verifier bv`'s on each "
           "pair (4/9, 109/105, 4/15; tests/test_sglang.py)", needs="sglang-reject"),
    Client("vLLM 0.11.0 v1 `rejection_sample` (Triton), with draft probabilities",
           ("--kernel", VLLM_V1_KERNEL, "--adapter", "vllm-v1", "--import-path", "{folder}", *CHAIN2, *RATIONAL),
           "LOSSLESS", "float64 uniforms and float32 exponentials drawn in torch, the acceptance and the recovered "
                       "token's race argmax((q − p)+ / E) in Triton; one exponential row shared by every position, "
                       "harmless since only the first rejected position's race is read (judged at float32)",
           needs="vllm-v1"),
    Client("vLLM 0.11.0 v1 `rejection_sample` (Triton), draft_probs=None, point-mass draft",
           ("--kernel", VLLM_V1_KERNEL, "--adapter", "vllm-v1-no-draft-probs", "--import-path", "{folder}", *CHAIN2,
            "--model", "table", "--table", "examples/point_mass_draft.json"), "LOSSLESS",
           "production's call (n-gram and greedy drafts give no probabilities): draft x accepted with probability "
           "q(x), recovered from q without x; E[accepted] = 7/12 by hand", needs="vllm-v1"),
    Client("vLLM 0.11.0 v1 `rejection_sample` (Triton), draft_probs=None, random draft",
           ("--kernel", VLLM_V1_KERNEL, "--adapter", "vllm-v1-no-draft-probs", "--import-path", "{folder}", *CHAIN2,
            *RATIONAL), "LOSSLESS",
           "taking a random draft as certain is still lossless (accept with q(x), recover from q without x), at a "
           "lower acceptance than speculative sampling's", needs="vllm-v1"),
    Client("vLLM 0.33.0 Model Runner V2 `rejection_sample` (Triton), token mode, use_fp64",
           ("--kernel", MRV2_KERNEL, "--adapter", "vllm-mrv2", "--import-path", "{folder}", "--kernel-kwargs",
            "use_fp64=True", *CHAIN2, *RATIONAL), "LOSSLESS",
           "coins drawn in the kernel (tl_rand32: tl.rand per (seed, position)), log q(x) > log u + log p(x); the "
           "rejected or bonus token by Gumbel-max, its noise −log(−log u) of a murmur3 hash of (seed, position, "
           "token), taken as one uniform per key; E[τ] equal to tv-sps's (tests/test_vllm_mrv2.py)",
           needs="vllm-mrv2"),
    Client("vLLM 0.33.0 Model Runner V2 `rejection_sample` (Triton), block mode, use_fp64",
           ("--kernel", MRV2_KERNEL, "--adapter", "vllm-mrv2", "--import-path", "{folder}", "--kernel-kwargs",
            "use_fp64=True,use_block_verification=True", *CHAIN2, *RATIONAL), "LOSSLESS",
           "block verification with its residual masses and the same resampling; E[τ] equal to bv's", needs="vllm-mrv2"),
    Client("vLLM 0.33.0 Model Runner V2 `rejection_sample` (Triton), its default float32 noise",
           ("--kernel", MRV2_KERNEL, "--adapter", "vllm-mrv2", "--import-path", "{folder}", *CHAIN2, *RATIONAL),
           "REFUSED", "in float32 the Gumbel noise's log(1 − u) is a degree-8 polynomial series near 0 "
                      "(`_log1p_neg_stable`, error below 6e-7): an approximation whose law is not exactly a race, "
                      "refused at its line (gumbel.py:158); no verdict", needs="vllm-mrv2"),
    _mrv2_lossy("FLy (rejection_method=\"fly\")", "fly_window_size=1,fly_entropy_threshold=0.3", "fly",
                "a rejection where the target's top-3 entropy is ≥ 0.3 deferred and kept when the next position is "
                "accepted natively; its TVD is `--verifier fly`'s exact 53/180 on the deciding pair "
                "(tests/test_lossy_fly.py: equal within 1e-6 at depths 2 and 3)"),
    _mrv2_lossy("synthetic acceptance", "synthetic_acceptance_rates=[0.8,0.64]", "forced-rate",
                "drafts accepted at forced rates 0.8 per position whatever the target says, then (q − p)+ resampled; "
                "its TVD is `--verifier forced-rate`'s exact 16/25 on the deciding pair, all of it mass on "
                "sequences the target excludes"),
    Client("MLX-LM 0.32.2 `speculative_generate_step` (installed, the `mlx` extra), a whole loop",
           ("--loop", "mlx-lm", "--model", "tiny-llama", "--vocab", "4", "--top-k", "2", "--depth", "1",
            "--max-new-tokens", "3"), "LOSSLESS",
           "sample-and-match on MLX copies of the tiny Llamas, its sampler's own filters in MLX's order with the draw "
           "through torch; held to plain sampling in MLX's order (plain-mlx), judged at float32 (docs/loops.md)"),
    Client("vLLM 0.11.0 v1 `RejectionSampler.forward`, a greedy request (temperature -1) beside two random ones",
           (*MIXED_BATCH, "table=examples/vllm_batch/greedy.json,temperature=-1", *RANDOM_REQUESTS), "LOSSLESS",
           "forward as shipped, with its SamplingMetadata and top-k/top-p filter, on a batch jointly enumerated: the "
           "greedy request emits its target's argmax (E[accepted] = 5/8 by hand), one at temperature 0.5 and top-k "
           "2 on its own generator and one at top-p 0.75 each the law of its processed target (acceptances 9/34 and "
           "11/15 by hand), the requests' draws independent", needs="vllm-v1"),
    Client("vLLM 0.11.0 v1 `RejectionSampler.forward`, the greedy request's temperature 0, as its InputBatch writes it",
           (*MIXED_BATCH, "table=examples/vllm_batch/greedy.json,temperature=0", *RANDOM_REQUESTS), "REFUSED",
           "vLLM 0.11.0's InputBatch writes a greedy request's temperature as 0, its rejection sampler looks for "
           "GREEDY_TEMPERATURE = -1 (vllm#27077, fixed after 0.11.0): in a batch with random requests the greedy row "
           "is divided by 0 and its probabilities are NaN, refused where the recovered-token kernel reads them "
           "(rejection_sampler.py:611); no verdict", needs="vllm-v1"),
    Client("transformers assisted generation (installed), whole loop",
           ("--loop", "transformers-assisted", "--model", "tiny-llama", *TINY_LOOP), "LOSSLESS",
           "generate(assistant_model=...) on two tiny Llamas, every draw enumerated, against plain sampling"),
    Client("transformers DFlash (installed), whole loop",
           ("--loop", "transformers-dflash", "--model", "tiny-llama", *TINY_LOOP), "LOSSLESS",
           "generate(speculation_type=\"dflash\") with a tiny MuseGlimmerAssistantModel drafting 2 tokens a block; "
           "the candidates' processed rows returned as q"),
    Client("transformers 5.15.0 DFlash, whole loop",
           ("--loop", "transformers-dflash", "--model", "tiny-llama", *TINY_LOOP, "--import-path", "{folder}"),
           "LOSSY", "transformers#47932: candidates drawn from the processed rows, the raw rows returned as q; the "
                    "TVD equals the law derived with the raw row (tests/test_transformers_loops.py)",
           needs="transformers-5.15.0"),
    Client("transformers 5.15.1 DFlash, whole loop",
           ("--loop", "transformers-dflash", "--model", "tiny-llama", *TINY_LOOP, "--import-path", "{folder}"),
           "LOSSLESS", "the fix: the processed rows re-assigned before they are returned; same models as 5.15.0's row",
           needs="transformers-5.15.1"),
    Client("transformers Gemma 4 assistant (installed), whole loop",
           ("--loop", "transformers-gemma4-assistant", "--model", "tiny-gemma4", *TINY_LOOP), "LOSSY",
           "SinglePositionMultiTokenCandidateGenerator drafts the argmax of the assistant's row, but the acceptance "
           "test and residual read the row's softmax as the draft's q; the TVD equals the law derived so"),
    Client("transformers MTP (installed), whole loop",
           ("--loop", "transformers-mtp", "--model", "tiny-deepseek-v3", *TINY_LOOP), "LOSSLESS",
           "generate(use_mtp=True) on a tiny DeepSeek-V3 with one MTP layer"),
    Client("transformers 5.15.0 MTP, whole loop",
           ("--loop", "transformers-mtp", "--model", "tiny-deepseek-v3", *TINY_LOOP, "--import-path", "{folder}"),
           "LOSSY", "MtpModel.forward returns the raw logits as q while drawing from the processed ones (#47932's "
                    "class; fixed in 5.15.1)", needs="transformers-5.15.0"),
)



@dataclass
class Result:
    source: str
    command: str
    expected: str
    why: str
    verdict: str = "not run"
    tvd: str = ""
    off_support: str = ""
    executions: int = 0
    seconds: float = 0.0
    precision: str = ""
    note: str = ""

    @property
    def as_expected(self) -> bool:
        return self.verdict == self.expected


def _fetched(name: str) -> tuple[str | None, str]:
    """The folder of artifact ``name`` (fetched once), or None and why not."""
    from simulator.errors import SpecproofError
    from simulator.real.fetch import fetch

    try:
        return str(fetch(name)), ""
    except SpecproofError as err:
        return None, f"not run: {err.message}"


def run_client(client: Client, fetched: tuple[str | None, str] = (None, "")) -> Result:
    """Certify one row in a fresh ``specproof`` process and read its certificate; ``fetched`` is the folder of
    the artifact it needs, or None and why not."""
    shown = ["specproof", "certify", *(a.replace("{folder}", f'"$(specproof fetch {client.needs})"')
                                       for a in client.args)]
    result = Result(client.source, " ".join(shown), client.expected, client.why)
    folder_of_artifact, note = fetched
    if client.needs is not None and folder_of_artifact is None:
        result.note = note
        return result
    with tempfile.TemporaryDirectory(prefix="specproof-clients-") as folder:
        out = Path(folder) / "cert.json"
        args = [a.replace("{folder}", folder_of_artifact or "") for a in client.args]
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "specproof.cli", "certify", *args, "--json", str(out)],
                              capture_output=True, text=True)
        result.seconds = time.perf_counter() - start
        said = messages(proc.stderr) or ["no message"]  # a library's warnings are not the command's message
        if proc.returncode == 2 and client.expected == "REFUSED":  # a typed refusal, as expected: its reason
            result.verdict = "REFUSED"
            result.note = _portable(said[0][:300], client, folder_of_artifact)
            return result
        if proc.returncode not in (0, 1) or not out.exists():
            result.verdict = f"error (exit {proc.returncode})"
            result.note = _portable(said[-1][:300], client, folder_of_artifact)
            return result
        cert = json.loads(out.read_text())
    shown_cert = cert.get("deciding", cert)
    result.verdict = "LOSSLESS" if cert["lossless"] else "LOSSY"
    result.tvd = _exact_text(shown_cert.get("tvd"))
    result.off_support = _exact_text(shown_cert.get("off_support"))
    result.executions = int(shown_cert.get("executions", 0))
    result.precision = _portable(str(shown_cert.get("tolerance_reason", "")), client, folder_of_artifact)
    return result


def _exact_text(value: object) -> str:
    """A certificate's number as text: a kernel certificate's as written, a loop certificate's
    ``{"float": …, "exact": "num/den"}`` by its exact fraction."""
    return str(value["exact"]) if isinstance(value, dict) else str(value)


def _portable(text: str, client: Client, folder: str | None) -> str:
    """``text`` with the fetched artifact's folder written as the command writes it, ``$(specproof fetch NAME)``,
    and the home folder as ``~``: a committed report names no folder of the machine that wrote it."""
    if folder and client.needs is not None:
        text = text.replace(folder, f"$(specproof fetch {client.needs})")
    return text.replace(str(Path.home()), "~")


def _number(text: str) -> str:
    """A certificate's number (a float, or an exact fraction as text) to three digits."""
    try:
        value = float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        return text
    return "0" if value == 0 else f"{value:.3g}"


def run_clients() -> list[Result]:
    """Every row of :data:`CLIENTS` run, each artifact fetched once (a row whose artifact cannot be fetched is
    not run, saying why)."""
    fetched = {name: _fetched(name) for name in dict.fromkeys(c.needs for c in CLIENTS if c.needs is not None)}
    return [run_client(c, fetched.get(c.needs, (None, ""))) for c in CLIENTS]


def write_clients_report(out: Path, command: str) -> bool:
    """Run every row of :data:`CLIENTS`; write ``clients.md`` and ``clients.json`` in ``out``. True when every row
    that ran gave its expected verdict.

    Each row runs ``specproof certify ... --json`` in a fresh process, exactly as written in the report, and reads the
    verdict, TVD, support violation, executions and time from the certificate. Sources: transformers' sampler as
    installed; the others from ``specproof fetch`` (a row that cannot fetch its modules says so and is not counted as
    a verdict).
    """
    import torch
    import transformers

    results = run_clients()
    out.mkdir(parents=True, exist_ok=True)
    machine = (f"{platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}, transformers "
               f"{transformers.__version__}")
    (out / "clients.md").write_text(clients_markdown(results, command, machine))
    (out / "clients.json").write_text(json.dumps({"command": command, "rows": [asdict(r) for r in results]},
                                                 indent=1) + "\n")
    return all(r.as_expected for r in results if r.verdict != "not run")


def clients_markdown(results: list[Result], command: str, machine: str) -> str:
    """``clients.md``: the table of verdicts, the commands, and the precision each certificate judged."""
    lines = [
        "# Samplers other projects ship, certified unmodified",
        "",
        f"Generated by `{command}` ({machine}). Each row is the command shown, run in a "
        "fresh process; its code is the project's own, imported as shipped (transformers as installed; vLLM 0.6.3's "
        "two sampler modules from its wheel, `specproof fetch vllm-sampler`; EAGLE's `eagle/model/utils.py` from "
        "eagle-llm 1.2.1's wheel, `specproof fetch eagle-posterior`; Medusa's `medusa/model/utils.py` from "
        "medusa-llm 0.1's wheel, `specproof fetch medusa-posterior`; SGLang 0.5.23's `reject_sampling.py` from its "
        "wheel, `specproof fetch sglang-reject`; vLLM 0.11.0's `rejection_sampler.py` from its sdist, `specproof "
        "fetch vllm-v1`; vLLM 0.33.0's Model Runner V2 modules from its sdist, `specproof fetch vllm-mrv2`), through "
        "a built-in adapter; Triton kernels run under Triton's interpreter on the CPU. "
        "Nothing of theirs is copied here. Model pairs: three random rational pairs of vocabulary 3 (zeros in both "
        "rows; the verdict covers those pairs only) or the synthetic pair (no zeros), or an explicit table "
        "(examples/point_mass_draft.json, a point-mass draft). The TVD and support violation are the "
        "deciding pair's; the time is the whole command's, start-up included. A whole-loop row (`--loop`, "
        "docs/loops.md) runs the engine's generation loop on a seeded tiny pair of vocabulary 4 at top-k 2 against "
        "plain sampling; a release other than the installed one is `specproof fetch transformers-5.15.0`'s folder "
        "(the release with the huggingface-hub and tokenizers it needs), imported first in a process of its own.",
        "",
        "| source | verdict | expected | TVD | support violation | executions | time (s) | why |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        mark = "" if r.as_expected or r.verdict == "not run" else " **(unexpected)**"
        lines.append(f"| {r.source} | {r.verdict}{mark} | {r.expected} | {_number(r.tvd)} | {_number(r.off_support)} "
                     f"| {r.executions:,} | {r.seconds:.1f} | {r.why}{'; ' + r.note if r.note else ''} |")
    lines += ["", "## Compiled, on a GPU", "",
              "Not run: every row above is Triton's interpreter (or torch) on the CPU. The same Triton kernels "
              "compiled, checked decision by decision against specproof's reference rules on replayed uniforms and "
              "against the interpreter, and a statistical verdict on a CUDA-only verifier (FlashInfer's "
              "`chain_speculative_sampling`), need a GPU, and this report was made on a CPU. A "
              "GPU run must set `TRITON_INTERPRET=0` (tests/conftest.py sets it to 1)."]
    lines += ["", "## Lossy by design, shipped only for CUDA", "",
              "Two of the lossy-by-design rules (docs/lossy.md) ship only as CUDA code, so their own code is not run "
              "here: SGLang 0.5.23's threshold acceptance lives in sgl-kernel's CUDA kernel "
              "`tree_speculative_sampling_target_only` (its Triton path, `reject_sampling.py` above, has no "
              "thresholds), and TensorRT-LLM's MTP relaxed acceptance in its C++/CUDA op "
              "`mtp_relaxed_acceptance_op`. Both need a CUDA build of their packages. specproof's `sglang-threshold` "
              "and `relaxed` follow their source lines (docs/lossy.md cites them) and are priced exactly; a GPU "
              "machine with those builds could certify the kernels themselves."]
    lines += ["", "## Commands", ""]
    for r in results:
        lines += [f"* {r.source}, expected {r.expected}:", "", "  ```bash", f"  {r.command}", "  ```", ""]
    lines += ["## Precision judged", ""]
    lines += [f"* `{shlex.join(r.command.split()[2:4])}` …: {r.precision}" for r in results if r.precision]
    return "\n".join(lines) + "\n"
