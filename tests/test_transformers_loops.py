"""transformers' own speculative loops certified (docs/loops.md, "transformers' other speculative decoders"): DFlash
on the tiny Llama, the Gemma 4 assistant and multi-token prediction on their tiny pairs, each as installed and, for
DFlash and MTP, on the releases before and after transformers#47932 (5.15.0 and 5.15.1, ``specproof fetch``), run
with ``--import-path`` in a process of their own.

The verdicts are checked against laws derived here from the models' rows, without the loops' code: DFlash's with the
draft's raw row as its q (5.15.0's defect) and with the processed row (the fix, which must equal plain sampling), and
the Gemma 4 assistant's greedy draft verified with the raw softmax as q (LOSSY as installed) or as the point mass it is
(lossless). The releases' runs need ``specproof fetch transformers-5.15.0`` and ``transformers-5.15.1`` and skip
without them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from exact.generation_law import certify_loop  # noqa: E402
from simulator.errors import InvalidParameterError  # noqa: E402
from simulator.loops.builtin import load_loop, plain_sampling  # noqa: E402
from simulator.loops.sampling import Sampling  # noqa: E402
from simulator.loops.tiny_pairs import SEEDED_PAIRS, tiny_dflash_assistant  # noqa: E402
from simulator.real.fetch import cached  # noqa: E402
from specproof.cli.certify_loop import transformers_release  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TOP2 = Sampling(top_k=2)  # the sampling of every check here: top-k below the vocabulary of 4


def _release(name: str) -> str:
    folder = cached(name)
    if folder is None:
        pytest.skip(f"needs transformers' release: run `specproof fetch {name}` first")
    return str(folder)


def _cli(*args: str, json_out: Path) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "specproof.cli", "certify", *args, "--vocab", "4", "--top-k", "2",
                           "--json", str(json_out)], capture_output=True, text=True, cwd=REPO, timeout=600)
    return proc.returncode, json.loads(json_out.read_text()) if json_out.exists() else {}, proc.stdout + proc.stderr


def _tvd(law: dict, other: dict) -> float:
    return sum(abs(law.get(k, 0.0) - other.get(k, 0.0)) for k in set(law) | set(other)) / 2


def _row(model, ids: list[int]):
    """The target's processed row after ``ids`` (plain sampling's, top-k 2), float64; each computed once."""
    rows = model.__dict__.setdefault("_test_rows", {})
    if tuple(ids) not in rows:
        with torch.no_grad():
            rows[tuple(ids)] = TOP2.probs(model(torch.tensor([ids]))[0, -1], ids)
    return rows[tuple(ids)]


def _out(draw, q, target):
    """The law of the token a speculative-sampling step emits: a draft drawn from ``draw``, accepted with
    min(1, target(x) / q(x)), else a token from the residual (target − q)+ normalised, as transformers'
    ``_speculative_sampling`` computes it. With q = draw it is ``target`` (Leviathan et al., 2023)."""
    accepted = draw * torch.clamp(target / torch.where(q > 0, q, 1.0), max=1.0)
    rejected = 1 - accepted.sum()
    residual = torch.clamp(target - q, min=0)
    return accepted + (rejected * residual / residual.sum() if rejected > 1e-15 else 0), accepted, rejected, residual


def _plain(target) -> dict:
    """Plain sampling's law of 3 tokens after the prompt [0], over the continuations it gives mass."""
    law = {}
    for a in range(4):
        for b in range(4):
            if _row(target, [0])[a] * _row(target, [0, a])[b] == 0:
                continue
            for c in range(4):
                law[a, b, c] = float(_row(target, [0])[a] * _row(target, [0, a])[b] * _row(target, [0, a, b])[c])
    return law


# ---- DFlash ----------------------------------------------------------------------------------------------------

def _dflash_rows(target, assistant, context: list[int], anchor: int):
    """The draft's raw rows of one DFlash block: the assistant's pass over the anchor and the mask tokens, reading
    the target's hidden states of ``context``, through the target's head (as ``DFlashTokenCandidateGenerator``
    feeds it)."""
    from transformers.cache_utils import DFlashCache

    hf, config = target.hf, assistant.config
    with torch.no_grad():
        hidden = hf(torch.tensor([context]), output_hidden_states=True).hidden_states[1]
        noise = torch.tensor([[anchor] + [config.mask_token_id] * (config.block_size - 1)])
        cache = DFlashCache(config=config)
        cache.set_previous_accepted_tokens(len(context))
        span = len(context) + config.block_size
        out = assistant(noise_embeds=hf.get_input_embeddings()(noise), context_hidden_states=hidden,
                        position_ids=torch.arange(span)[None], attention_mask=torch.ones(1, span, dtype=torch.long),
                        cache=cache)
        return hf.get_output_embeddings()(out.last_hidden_state[:, 1:])[0].double()


@lru_cache(maxsize=None)
def _dflash_hand_law(raw: bool) -> tuple[dict, dict]:
    """(law, plain) of 3 tokens after the prompt [0], tiny Llama seed 0, V = 4, top-k 2, draft depth 2: the target's
    first token, then a block of 2 candidates drawn from the processed rows and verified against ``q`` = the raw
    softmax (``raw``: 5.15.0) or the processed row (the fix). After an accepted first candidate the third token is
    the second candidate's step; after a rejection one token is left, and DFlash drafts no block for it
    (``max_length − length − 1 = 0``): the target draws it."""
    target, draft = SEEDED_PAIRS["tiny-llama"](4, 0)
    assistant = tiny_dflash_assistant(target, 3, draft.seed)

    def step(raw_row, before: list[int]):
        draw = TOP2.probs(raw_row, before)
        return draw, (torch.softmax(raw_row, -1) if raw else draw)

    law = {}
    first = _row(target, [0])
    for a in range(4):
        if first[a] == 0:
            continue
        rows = _dflash_rows(target, assistant, [0], a)
        draw1, q1 = step(rows[0], [0, a])
        _, accepted, rejected, residual = _out(draw1, q1, _row(target, [0, a]))
        for b in range(4):
            if accepted[b] == 0 and residual[b] == 0:
                continue
            draw2, q2 = step(rows[1], [0, a, b])
            third = _row(target, [0, a, b])
            after_accept = _out(draw2, q2, third)[0]
            reject_b = rejected * residual[b] / residual.sum() if rejected > 1e-15 else 0
            for c in range(4):
                law[a, b, c] = float(first[a] * (accepted[b] * after_accept[c] + reject_b * third[c]))
    return law, _plain(target)


@pytest.mark.slow
def test_dflash_as_installed_is_lossless_as_the_fixed_hand_law():
    """The installed release certified LOSSLESS, as the law derived here with the processed row as q (the
    derivation's control: plain sampling to float32 rounding); with the raw row the derived law is far from it."""
    target, draft = SEEDED_PAIRS["tiny-llama"](4, 0)
    cert = certify_loop(load_loop("transformers-dflash", 2), plain_sampling, target, draft, (0,), 3, {"top_k": 2})
    assert cert.lossless and cert.tvd < 1e-6 and cert.expected_passes < 3  # drafts were accepted: it weighed something
    fixed, plain = _dflash_hand_law(raw=False)
    assert _tvd(fixed, plain) < 1e-6 and abs(sum(fixed.values()) - 1) < 1e-9
    assert _tvd(*_dflash_hand_law(raw=True)) > 0.1


@pytest.mark.slow
@pytest.mark.parametrize("version, lossless", [("5.15.0", False), ("5.15.1", True)])
def test_dflash_on_its_own_release(version, lossless, tmp_path):
    """#47932's defect on 5.15.0 (the raw row as q: LOSSY, its exact TVD the hand law's) and its fix in 5.15.1, the
    same models, each release imported first in a process of its own."""
    folder = _release(f"transformers-{version}")
    code, cert, said = _cli("--loop", "transformers-dflash", "--model", "tiny-llama", "--import-path", folder,
                            json_out=tmp_path / "cert.json")
    assert code == (0 if lossless else 1), said
    assert cert["config"]["transformers"] == {"version": version, "from": str(Path(folder).resolve())}
    assert f"transformers {version}, imported from {Path(folder).resolve()}" in said
    hand, plain = _dflash_hand_law(raw=not lossless)
    assert abs(float(Fraction(cert["tvd"]["exact"])) - _tvd(hand, plain)) < 1e-6
    if not lossless:
        ce = cert["counterexample"]
        assert abs(ce["loop_prob"]["float"] - hand[tuple(ce["sequence"])]) < 1e-6
        assert abs(ce["reference_prob"]["float"] - plain[tuple(ce["sequence"])]) < 1e-6


# ---- Gemma 4's assistant ---------------------------------------------------------------------------------------

def _gemma_hand_law(greedy_as_sampled: bool) -> tuple[dict, dict]:
    """(law, plain) of the Gemma 4 assistant's loop at N = 3, draft depth 2: the target's first token; then one
    candidate (the tokens left cap it), the argmax of the assistant's row, verified with ``q`` = that row's raw
    softmax (``greedy_as_sampled``, as transformers does) or the point mass on it (what was drawn); the third token
    the target's. The assistant's row is computed as ``SinglePositionMultiTokenCandidateGenerator`` feeds it."""
    target, draft = SEEDED_PAIRS["tiny-gemma4"](4, 0)
    hf, assistant = target.hf, draft.hf
    with torch.no_grad():
        prefill = hf(torch.tensor([[0]]), output_hidden_states=True, return_shared_kv_states=True)
    law = {}
    first = _row(target, [0])
    for a in range(4):
        if first[a] == 0:
            continue
        with torch.no_grad():
            embeds = torch.cat([hf.get_input_embeddings()(torch.tensor([[a]])), prefill.hidden_states[-1][:, -1:]], -1)
            row = assistant(inputs_embeds=embeds, attention_mask=torch.ones(1, 2, dtype=torch.long),
                            position_ids=torch.tensor([[1]]), shared_kv_states=prefill.shared_kv_states,
                            use_cache=False).logits[0, -1].double()
        drawn = torch.nn.functional.one_hot(row.argmax(), 4).double()
        second = _out(drawn, torch.softmax(row, -1) if greedy_as_sampled else drawn, _row(target, [0, a]))[0]
        for b in range(4):
            if second[b] == 0:
                continue
            third = _row(target, [0, a, b])
            for c in range(4):
                law[a, b, c] = float(first[a] * second[b] * third[c])
    return law, _plain(target)


@pytest.mark.slow
def test_the_gemma4_assistant_verifies_a_greedy_draft_as_sampled():
    """As installed, LOSSY: the assistant's candidate is its argmax, but the acceptance test and the residual read
    the softmax of its row as the draft's q. The hand law with that q gives the certificate's TVD; with the point
    mass actually drawn it is plain sampling (the derivation's control)."""
    target, draft = SEEDED_PAIRS["tiny-gemma4"](4, 0)
    cert = certify_loop(load_loop("transformers-gemma4-assistant", 2), plain_sampling, target, draft, (0,), 3,
                        {"top_k": 2})
    hand, plain = _gemma_hand_law(greedy_as_sampled=True)
    assert not cert.lossless and abs(float(cert.tvd) - _tvd(hand, plain)) < 1e-6 and float(cert.tvd) > 0.3
    assert _tvd(*_gemma_hand_law(greedy_as_sampled=False)) < 1e-6


# ---- multi-token prediction ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_mtp_as_installed_is_lossless():
    target, draft = SEEDED_PAIRS["tiny-deepseek-v3"](4, 0)
    cert = certify_loop(load_loop("transformers-mtp", 2), plain_sampling, target, draft, (0,), 3, {"top_k": 2})
    assert cert.lossless and cert.tvd < 1e-6 and cert.expected_passes < 3


@pytest.mark.slow
def test_mtp_on_5_15_0_returns_the_raw_row(tmp_path):
    """5.15.0's ``MtpModel.forward`` returns the raw logits as q while drawing from the processed ones (#47932's
    class; 5.15.1 returns the processed ones, docs/loops.md): LOSSY on the pair the installed release certifies
    LOSSLESS."""
    folder = _release("transformers-5.15.0")
    code, cert, said = _cli("--loop", "transformers-mtp", "--model", "tiny-deepseek-v3", "--import-path", folder,
                            json_out=tmp_path / "cert.json")
    assert code == 1 and cert["config"]["transformers"]["version"] == "5.15.0", said
    assert float(Fraction(cert["tvd"]["exact"])) > 0.1 and cert["expected_target_passes"]["float"] < 3


# ---- refusals and the release check ----------------------------------------------------------------------------

def test_a_loop_on_a_pair_it_cannot_run_is_refused_naming_it(tmp_path):
    from click.testing import CliRunner

    from simulator.loops.models import prefix_table_pair
    from simulator.models import TableModel
    from specproof.cli.app import main

    target, draft = prefix_table_pair(TableModel.from_file(REPO / "examples" / "prefix_table.json"), 1)
    with pytest.raises(InvalidParameterError, match="preparing loop transformers-dflash"):
        certify_loop(load_loop("transformers-dflash", 2), plain_sampling, target, draft, (0,), 3, {"top_k": 2})
    said = CliRunner().invoke(main, ["certify", "--loop", "transformers-dflash", "--model", "tiny-llama",
                                     "--import-path", str(tmp_path / "absent")])
    assert said.exit_code == 2 and "import-path" in said.output and "is not a directory" in said.output, said.output


def test_a_release_folder_not_the_one_imported_is_refused(tmp_path):
    (tmp_path / "transformers").mkdir()
    with pytest.raises(InvalidParameterError, match="holds transformers, but transformers .* was imported from"):
        transformers_release([str(tmp_path)])
    assert transformers_release([])["from"] == "installed"


def test_the_clients_report_reads_a_loop_certificates_numbers():
    from specproof.reports.clients import CLIENTS, _exact_text, _number

    assert _number(_exact_text({"float": 0.5, "exact": "1/2"})) == "0.5" and _exact_text("1/3") == "1/3"
    loops = [c for c in CLIENTS if "--loop" in c.args]
    assert {c.needs for c in loops} >= {None, "transformers-5.15.0", "transformers-5.15.1"}
    assert all("{folder}" in c.args for c in loops if c.needs is not None)
