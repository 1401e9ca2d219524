"""``specproof certify --kernel ... --request ...``: a batched kernel (``--adapter vllm-v1-forward``) certified on a
batch of requests, each request's law against its own reference (docs/kernels.md; :func:`exact.pairs.certify_batch`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from simulator.errors import InvalidParameterError
from simulator.numeric import human_number
from specproof.cli.certificate_text import discrepancy_lines, verdict
from specproof.cli.output import write_output
from specproof.cli.progress import mass_bar

if TYPE_CHECKING:
    from specproof.cli.requests import CertifyRequest


def certify_batch(request: CertifyRequest) -> None:
    """Certify ``--kernel`` through its batched adapter on the ``--request`` batch: exit 0 LOSSLESS, 1 LOSSY."""
    from exact.pairs import certify_batch as certify
    from simulator.kernels.batch import parse_request
    from simulator.models import TableModel

    spec = request.model

    def model_of(index: int, model_seed: int | None, table: str | None):
        if table is not None:
            return TableModel.from_file(table)
        if model_seed is not None and spec.model_kind == "table":
            raise InvalidParameterError(f"request[{index}].model_seed", "--model table has no seed: give the "
                                                                        "request its own table=FILE instead")
        return spec.build(spec.seed + index if model_seed is None else model_seed)

    batch = [parse_request(text, i, model_of, request.shape.depth) for i, text in enumerate(request.requests)]
    kernel = request.subject.kernel.build()
    if not kernel.batched:
        raise InvalidParameterError("request", f"--request makes a batch for a batched adapter (vllm-v1-forward); "
                                               f"--adapter {kernel.adapter} verifies one tree per call: drop --request")
    config = {"requests": [{"request": text, **r.model.describe()} for text, r in zip(request.requests, batch)],
              **kernel.describe()}
    with mass_bar(1, f"certify {kernel.kernel}") as bar, request.limits.applied(bar.update):
        cert = certify(batch, kernel, config)
    click.echo(f"{cert.kernel}: {verdict(cert.lossless)} (a batch of {len(batch)} request(s) through adapter "
               f"{kernel.adapter}, their draws enumerated jointly; {kernel.dtype} rows, judged at "
               f"{kernel.judged_precision()[0]} precision; tolerance {cert.tolerance:g})")
    for line in batch_lines(cert):
        click.echo(line)
    click.echo(f"  tolerance: {cert.tolerance_reason}")
    click.echo("  covers: these requests' model pairs, drafts and sampling parameters, in this order: another batch "
               "is another check")
    write_output(request.json_out, cert.to_json())
    sys.exit(0 if cert.lossless else 1)


def batch_lines(cert, indent: str = "  ") -> list[str]:
    """Each request's verdict, TVD, support violation, worst sequence and E[accepted]; the joint's TVD to the product
    of the requests' laws; the executions."""
    lines = []
    for r in cert.requests:
        lines.append(f"{indent}request {r.index} ({r.request}): {verdict(r.lossless)}, TVD {human_number(r.tvd)} to "
                     f"{r.reference}; E[accepted] = {human_number(r.expected_accepted)}")
        lines += discrepancy_lines(r.off_support, r.counterexample, indent * 2, "the kernel", "its reference")
    lines.append(f"{indent}joint: TVD {human_number(cert.joint_tvd)} of the batch's law to the product of its "
                 "requests' laws" + (" (their draws independent)" if cert.joint_tvd <= cert.tolerance else
                                     ": the requests' draws depend on each other"))
    lines.append(f"{indent}{cert.executions:,} executions enumerated (each one call of the kernel on the whole batch)")
    return lines
