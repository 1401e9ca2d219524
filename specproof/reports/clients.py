"""The clients report (``specproof clients``): samplers other projects ship, certified unmodified through the
shipped adapters, each by the very command a reader can paste (docs/kernels.md, "Code people ship").

Each row runs ``specproof certify ... --json`` in a fresh process, exactly as written in the report, and reads
the verdict, TVD, support violation, executions and time from the certificate. Sources: transformers' sampler as
installed; vLLM 0.6.3's ``RejectionSampler`` from ``specproof fetch vllm-sampler`` (its two modules only; a row
that cannot fetch them says so and is not counted as a verdict).
"""

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

VLLM_KERNEL = "vllm.model_executor.layers.rejection_sampler:RejectionSampler.forward"
HF_KERNEL = "transformers.generation.utils:_speculative_sampling"
RATIONAL = ["--model", "random-rational", "--vocab", "3", "--seeds", "3"]
SYNTHETIC = ["--model", "synthetic", "--vocab", "3"]


@dataclass(frozen=True)
class Client:
    """One certification: what is certified, the ``certify`` arguments after ``specproof certify``, what the
    row expects (``LOSSLESS``/``LOSSY``) and why."""

    source: str
    args: tuple[str, ...]
    expected: str
    why: str
    needs_vllm: bool = False


CLIENTS = (
    Client("transformers `_speculative_sampling` (installed)",
           ("--kernel", HF_KERNEL, "--adapter", "chain", "--topology", "chain", "--depth", "3", *RATIONAL),
           "LOSSLESS", "standard speculative sampling, float64 rows"),
    Client("transformers `_speculative_sampling` (installed)",
           ("--kernel", HF_KERNEL, "--adapter", "chain", "--topology", "chain", "--depth", "3", "--dtype", "float32",
            *RATIONAL), "LOSSLESS", "the same in float32: judged at float32's tolerance"),
    Client("vLLM 0.6.3 `RejectionSampler.forward`",
           ("--kernel", VLLM_KERNEL, "--adapter", "vllm", "--import-path", "{vllm}", "--topology", "chain",
            "--depth", "2", *RATIONAL), "LOSSY",
           "its residual `clamp(q − p, min=finfo(float32).tiny)` emits tokens the target excludes with probability "
           "about tiny: a support violation", needs_vllm=True),
    Client("vLLM 0.6.3 `RejectionSampler.forward`",
           ("--kernel", VLLM_KERNEL, "--adapter", "vllm", "--import-path", "{vllm}", "--topology", "chain",
            "--depth", "2", *SYNTHETIC), "LOSSLESS",
           "no zero in the target's rows, so no support to violate: the clamp's mass (about 1e-38) is far below the "
           "tolerance",
           needs_vllm=True),
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


def _vllm_folder() -> tuple[str | None, str]:
    """The folder of vLLM's sampler modules (fetched once), or None and why not."""
    from simulator.errors import SpecproofError
    from simulator.torch_path.fetch import fetch

    try:
        return str(fetch("vllm-sampler")), ""
    except SpecproofError as err:
        return None, f"not run: {err.message}"


def run_client(client: Client, vllm: str | None, vllm_note: str) -> Result:
    """Certify one row in a fresh ``specproof`` process and read its certificate."""
    shown = ["specproof", "certify", *(a.replace("{vllm}", '"$(specproof fetch vllm-sampler)"') for a in client.args)]
    result = Result(client.source, " ".join(shown), client.expected, client.why)
    if client.needs_vllm and vllm is None:
        result.note = vllm_note
        return result
    with tempfile.TemporaryDirectory(prefix="specproof-clients-") as folder:
        out = Path(folder) / "cert.json"
        args = [a.replace("{vllm}", vllm or "") for a in client.args]
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "specproof.cli", "certify", *args, "--json", str(out)],
                              capture_output=True, text=True)
        result.seconds = time.perf_counter() - start
        if proc.returncode not in (0, 1) or not out.exists():
            result.verdict = f"error (exit {proc.returncode})"
            result.note = (proc.stderr.strip().splitlines() or ["no message"])[-1][:300]
            return result
        cert = json.loads(out.read_text())
    shown_cert = cert.get("deciding", cert)
    result.verdict = "LOSSLESS" if cert["lossless"] else "LOSSY"
    result.tvd = str(shown_cert.get("tvd"))
    result.off_support = str(shown_cert.get("off_support"))
    result.executions = int(shown_cert.get("executions", 0))
    result.precision = str(shown_cert.get("tolerance_reason", ""))
    return result


def _number(text: str) -> str:
    """A certificate's number (a float, or an exact fraction as text) to three digits."""
    try:
        value = float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        return text
    return "0" if value == 0 else f"{value:.3g}"


def write_clients_report(out: Path, command: str) -> bool:
    """Run every row of :data:`CLIENTS`; write ``clients.md`` and ``clients.json`` in ``out``. True when every row
    that ran gave its expected verdict."""
    import torch
    import transformers

    vllm, vllm_note = _vllm_folder()
    results = [run_client(c, vllm, vllm_note) for c in CLIENTS]
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Samplers other projects ship, certified unmodified",
        "",
        f"Generated by `{command}` ({platform.machine()}, Python {platform.python_version()}, torch "
        f"{torch.__version__}, transformers {transformers.__version__}). Each row is the command shown, run in a "
        "fresh process; its code is the project's own, imported as shipped (transformers as installed; vLLM 0.6.3's "
        "two sampler modules from its wheel, `specproof fetch vllm-sampler`), through a built-in adapter. Nothing of "
        "theirs is copied here. Model pairs: three random rational pairs of vocabulary 3 (zeros in both rows; the "
        "verdict covers those pairs only) or the synthetic pair (no zeros). The TVD and support violation are the "
        "deciding pair's; the time is the whole command's, start-up included.",
        "",
        "| source | verdict | expected | TVD | support violation | executions | time (s) | why |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        mark = "" if r.as_expected or r.verdict == "not run" else " **(unexpected)**"
        lines.append(f"| {r.source} | {r.verdict}{mark} | {r.expected} | {_number(r.tvd)} | {_number(r.off_support)} "
                     f"| {r.executions:,} | {r.seconds:.1f} | {r.why}{'; ' + r.note if r.note else ''} |")
    lines += ["", "## Commands", ""]
    for r in results:
        lines += [f"* {r.source}, expected {r.expected}:", "", "  ```bash", f"  {r.command}", "  ```", ""]
    lines += ["## Precision judged", ""]
    lines += [f"* `{shlex.join(r.command.split()[2:4])}` …: {r.precision}" for r in results if r.precision]
    (out / "clients.md").write_text("\n".join(lines) + "\n")
    (out / "clients.json").write_text(json.dumps({"command": command, "rows": [asdict(r) for r in results]},
                                                 indent=1) + "\n")
    return all(r.as_expected for r in results if r.verdict != "not run")
