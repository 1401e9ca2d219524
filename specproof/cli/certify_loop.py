"""``specproof certify --loop``: a whole generation loop on a tiny model pair, certified against plain sampling with
the same parameters (docs/loops.md; :func:`exact.generation_law.certify_loop`). With ``--import-path`` the loop, its
models and the transformers they call are imported in a process of its own, the folders first on its path."""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import click

from simulator.errors import InvalidParameterError
from simulator.numeric import human_number
from simulator.usercode import add_import_path
from simulator.workers import pool_options
from specproof.cli.certificate_text import verdict
from specproof.cli.output import write_output
from specproof.cli.progress import mass_bar

if TYPE_CHECKING:
    from exact.generation_law import LoopCertificate
    from specproof.cli.requests import CertifyRequest
    from specproof.cli.specs import LimitSpec, LoopSpec, ModelSpec

#: what a fetched transformers release brings beside it (``specproof fetch transformers-5.15.0``): none may be
#: imported before the release's folder comes first on the path
RELEASE_MODULES = ("transformers", "huggingface_hub", "tokenizers", "httpx", "httpcore")


def certify_loop(request: CertifyRequest) -> None:
    """Certify ``--loop`` on the tiny pair of ``--model``: exit 0 LOSSLESS, 1 LOSSY."""
    spec = request.loop  # the request's mode is loop: the spec is there
    run = _in_a_process_of_its_own if spec.import_path else _certified
    cert, pair = run(spec, request.model, request.limits)
    click.echo(f"{cert.loop}: {verdict(cert.lossless)} (a whole loop, its draws enumerated; tolerance "
               f"{cert.tolerance:g})")
    click.echo(f"  against {'plain sampling' if cert.reference == 'plain' else cert.reference}; model {pair}; prompt "
               f"{list(spec.prompt_ids)}; {spec.max_new_tokens} new tokens; draft depth {spec.depth}; "
               f"{spec.sampling.describe()}")
    for line in loop_lines(cert):
        click.echo(line)
    click.echo(f"  tolerance: {cert.tolerance_reason}")
    release = cert.config.get("transformers")
    if release is not None:
        where = ("as installed" if release["from"] == "installed" else
                 f"imported from {release['from']} (--import-path), in a process of its own")
        click.echo(f"  transformers {release['version']}, {where}")
    with_release = "" if release is None else f" with transformers {release['version']}"
    click.echo(f"  covers: this model pair, this prompt and these sampling parameters{with_release} only: another "
               "pair, prompt, length, parameter or release is another check")
    write_output(request.json_out, cert.to_json())
    sys.exit(0 if cert.lossless else 1)


def _certified(spec: LoopSpec, model: ModelSpec, limits: LimitSpec) -> tuple[LoopCertificate, str]:
    """The loop's certificate in this process, and the pair's description; the certificate's ``config`` names the
    transformers release the run imported, if any."""
    from exact.generation_law import certify_loop as certify
    from simulator.loops.convention import loop_name

    loop, reference = spec.loops()
    with limits.applied():
        target, draft = spec.pair(model)
    pair = (f"prefix-table {model.table_path} (vocab {target.vocab})" if model.model_kind == "prefix-table"
            else f"{model.model_kind} (vocab {target.vocab}, seed {model.seed})")
    config = {"model": model.model_kind, "pair": pair, "prompt_ids": list(spec.prompt_ids),
              "max_new_tokens": spec.max_new_tokens, "depth": spec.depth, "sampling": spec.sampling.as_dict()}
    release = transformers_release(spec.import_path)
    if release is not None:
        config["transformers"] = release
    with mass_bar(2, f"certify {loop_name(loop)}") as bar, limits.applied(bar.update):
        cert = certify(loop, reference, target, draft, spec.prompt_ids, spec.max_new_tokens,
                       spec.sampling.as_dict(), config=config)
    return cert, pair


def _in_a_process_of_its_own(spec: LoopSpec, model: ModelSpec, limits: LimitSpec) -> tuple[LoopCertificate, str]:
    """:func:`_certified` in a spawned process (a fresh interpreter, dying with this one) whose ``sys.path`` has
    ``--import-path`` first before anything imports transformers: specproof's own process may hold the installed
    transformers, and a module imported once is not imported again from another folder. Its errors come back
    typed."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn"), **pool_options()) as pool:
        return pool.submit(_certified_on_import_path, spec, model, limits).result()


def _certified_on_import_path(spec: LoopSpec, model: ModelSpec, limits: LimitSpec) -> tuple[LoopCertificate, str]:
    """In the spawned process: the import path first, then :func:`_certified`."""
    held = [name for name in RELEASE_MODULES if name in sys.modules]
    if held:  # nothing specproof imports to get here imports them: a bug if it does
        raise RuntimeError(f"{held[0]} was imported before --import-path came first")
    add_import_path(spec.import_path, "import-path")
    return _certified(spec, model, limits)


def transformers_release(import_path: Sequence[str]) -> dict | None:
    """The transformers this process imported: ``{"version": ..., "from": "installed" or the folder}``; None when
    it imported none.

    Raises
    ------
    InvalidParameterError
        A folder of ``import_path`` holds a ``transformers`` package, but the one imported came from elsewhere
        (field ``import-path``).
    """
    module = sys.modules.get("transformers")
    if module is None:
        return None
    where = Path(module.__file__).resolve().parent.parent
    shipped = [Path(d).expanduser().resolve() for d in import_path if (Path(d).expanduser() / "transformers").is_dir()]
    if shipped and where != shipped[0]:
        raise InvalidParameterError("import-path", f"{shipped[0]} holds transformers, but transformers "
                                                   f"{module.__version__} was imported from {where}")
    return {"version": module.__version__, "from": str(where) if shipped else "installed"}


def loop_lines(cert, indent: str = "  ") -> list[str]:
    """The lines under a loop's verdict: TVD, the marginals, the worst continuation, passes and executions."""
    n = len(cert.marginal_tvds)
    lines = [f"{indent}TVD over the {n}-token continuations = {human_number(cert.tvd)}",
             f"{indent}per-position marginal TVD: " + ", ".join(f"{float(t):.3g}" for t in cert.marginal_tvds)]
    if cert.off_support:
        lines.append(f"{indent}support violation: mass {human_number(cert.off_support)} on continuations plain "
                     "sampling never produces (a placeholder token among them?), LOSSY whatever the tolerance")
    if cert.counterexample is not None:
        ce = cert.counterexample
        lines.append(f"{indent}continuation that differs most: {list(ce.sequence)} has probability "
                     f"{human_number(ce.verifier_prob)} under the loop, {human_number(ce.target_prob)} under the "
                     "reference")
    per_pass = ("" if cert.expected_tokens_per_pass is None
                else f"; E[tokens per target pass] = {float(cert.expected_tokens_per_pass):.4g}")
    lines.append(f"{indent}E[target passes] = {float(cert.expected_passes):.4g}{per_pass}")
    if cert.accepted_no_draft:
        lines.append(f"{indent}note: one token per target pass on every run, so no draft token was ever accepted: "
                     "this verdict weighs plain sampling only, not the loop's acceptance (docs/loops.md#a-verdict-"
                     "that-weighed-nothing)")
    lines.append(f"{indent}{cert.executions:,} runs of the loop enumerated ({cert.reference_executions:,} of the "
                 "reference)")
    return lines
