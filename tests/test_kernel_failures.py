"""An error raised inside a kernel says where: the kernel's line, the probability of the branch it was raised on
and the choices that led there, and (with ``--case-out``) a reproducer that fails the same way.

The expected branch probability is derived by hand: on the table below, drafting token 1 has probability 1/2 and
rejecting it ``1 − min(1, (1/4)/(1/2)) = 1/2``, so the only failing branch has probability 1/4.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from exact import certify  # noqa: E402
from simulator.drafting import FixedShape  # noqa: E402
from simulator.errors import VerifierFailure  # noqa: E402
from simulator.kernels.kernel import Kernel  # noqa: E402
from simulator.models import TableModel  # noqa: E402
from simulator.trees import make_topology  # noqa: E402
from specproof.cli.app import main as cli  # noqa: E402

TABLE = {"vocab": 2, "p": {"*": ["1/2", "1/2"]}, "q": {"*": ["3/4", "1/4"]}}


def fails_when_token_one_is_rejected(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Standard speculative sampling on a chain of one draft, except that it raises where token 1 is rejected."""
    draft, target = candidate_logits[0, 0].exp(), new_logits[0].exp()
    x = int(candidate_input_ids[0, 0])
    if torch.rand(()) < (target[0, x] / draft[x]).clamp(max=1):
        return torch.tensor([[x, int(torch.multinomial(target[1], 1))]]), 1
    if x == 1:
        raise IndexError("a residual that was never built")
    residual = (target[0] - draft).clamp(min=0)
    return torch.multinomial(residual, 1).reshape(1, 1), 0


def _kernel() -> Kernel:
    return Kernel("test_kernel_failures:fails_when_token_one_is_rejected", "chain",
                  fn=fails_when_token_one_is_rejected)


def test_the_error_carries_its_branch_probability():
    model = TableModel(2, {(): (Fraction(1, 2), Fraction(1, 2))},
                       {(): (Fraction(3, 4), Fraction(1, 4)), (0,): (Fraction(3, 4), Fraction(1, 4)),
                        (1,): (Fraction(3, 4), Fraction(1, 4))})
    with pytest.raises(VerifierFailure, match="IndexError") as caught:
        certify(model, FixedShape(make_topology("chain", depth=1), "iid"), _kernel())
    assert caught.value.branch.prob == Fraction(1, 4)
    assert [taken for taken, _ in caught.value.branch.choices][-1] == 1  # the rejection: the second branch


def test_the_command_names_line_probability_and_writes_a_case_that_fails_again(tmp_path):
    table, case = tmp_path / "table.json", tmp_path / "case.json"
    table.write_text(json.dumps(TABLE))
    args = ["certify", "--kernel", "test_kernel_failures:fails_when_token_one_is_rejected", "--adapter", "chain",
            "--model", "table", "--table", str(table), "--topology", "chain", "--depth", "1"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "test_kernel_failures.py" in result.output and "probability 0.25" in result.output
    assert "--case-out" in result.output and not case.exists()  # written only when asked for
    result = CliRunner().invoke(cli, [*args, "--case-out", str(case)])
    assert result.exit_code == 2 and f"written to {case}" in result.output
    again = CliRunner().invoke(cli, ["certify", "--case", str(case)])
    assert again.exit_code == 2 and "a residual that was never built" in again.output
    assert "probability 0.25" in again.output


def test_a_correct_kernel_on_the_same_table_certifies(tmp_path):
    """The negative control of the fixture itself: without the planted raise the kernel is lossless."""
    table = tmp_path / "table.json"
    table.write_text(json.dumps(TABLE))
    result = CliRunner().invoke(cli, ["certify", "--kernel", "specproof.gate.torch_kernels:sps_chain", "--adapter", "chain",
                                      "--model", "table", "--table", str(table), "--topology", "chain",
                                      "--depth", "1"])
    assert result.exit_code == 0 and "LOSSLESS" in result.output
