"""Trained drafts: the pruned head's rows, losslessness with a pruned draft (and the control that verifies its
tokens against the full head's rows), the head's choice, the name a draft is found by, and ``specproof
train-draft`` end to end on a tiny random-weight pair."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import copy  # noqa: E402

from click.testing import CliRunner  # noqa: E402

from simulator.drafting import FixedShape  # noqa: E402
from simulator.errors import InvalidParameterError  # noqa: E402
from simulator.real.causal_lm import CausalLMPair, Processing, ReprocessedDraft, load_causal_lm  # noqa: E402
from simulator.real.draft_training import (Generations, TrainingPlan, choose_head_tokens,  # noqa: E402
                                                 head_coverage)
from simulator.real.pruned_head import PrunedHead, prune_head  # noqa: E402
from simulator.trees import make_topology  # noqa: E402
from tests.test_real import _save_pair_with_tokenizer, end_to_end_tvd, tiny_pair  # noqa: E402,F401


def test_the_pruned_head_gives_the_kept_rows_logits_and_minus_infinity_elsewhere():
    torch.manual_seed(0)
    weight, hidden = torch.randn(6, 3), torch.randn(2, 4, 3)
    kept = torch.tensor([4, 0, 3])
    logits = PrunedHead(weight, kept)(hidden)
    assert logits.shape == (2, 4, 6)
    full = torch.einsum("btd,vd->btv", hidden, weight)  # the whole head, computed another way
    assert torch.allclose(logits[..., [0, 3, 4]], full[..., [0, 3, 4]], atol=1e-6)
    assert torch.isinf(logits[..., [1, 2, 5]]).all() and (logits[..., [1, 2, 5]] < 0).all()
    # the processed row is the softmax over the kept tokens alone: probability 0 elsewhere, no NaN
    row = Processing()(logits[0, 0])
    expected = torch.softmax(full[0, 0, [0, 3, 4]].double(), dim=-1)
    assert torch.allclose(row[[0, 3, 4]], expected) and float(row[[1, 2, 5]].abs().sum()) == 0


@pytest.mark.parametrize("kept", [[0, 0, 1], [0, 6], [-1], []])
def test_a_bad_head_token_list_names_the_field(kept):
    with pytest.raises(InvalidParameterError) as err:
        PrunedHead(torch.zeros(6, 3), torch.tensor(kept, dtype=torch.long))
    assert err.value.field == "head_tokens"


@pytest.mark.parametrize("name,shape,depth,branching,drafting", [
    ("tv-sps", "chain", 2, 1, "iid"),
    pytest.param("trv", "complete", 2, 2, "iid", marks=pytest.mark.slow),  # 13 s on 2 cores
])
def test_a_pruned_draft_is_lossless_and_reading_the_full_heads_rows_is_not(tiny_pair, name, shape, depth, branching,
                                                                            drafting):
    draft, target = tiny_pair
    pruned = prune_head(copy.deepcopy(draft), torch.tensor([0, 2, 3]))
    pair = CausalLMPair(pruned, target, [1, 2])
    tree = FixedShape(make_topology(shape, depth, branching), drafting)
    tvd, accepted = end_to_end_tvd(pair, tree, name)
    assert tvd <= 1e-6, tvd  # float32 rounding of the two attention layouts (tests/test_real.py)
    assert 0 < accepted < depth
    # the control: tokens drafted from the pruned head, verified against the whole head's rows
    whole = CausalLMPair(draft, target, [1, 2])
    assert end_to_end_tvd(pair, ReprocessedDraft(tree, whole, Processing()), name)[0] > 1e-4


def test_the_head_keeps_the_tokens_with_the_most_label_mass_and_the_stop_tokens():
    data = Generations([[0, 1, 2]], [1], [torch.tensor([[3, 1], [4, 3]], dtype=torch.int32)],
                       [torch.tensor([[0.5, 0.25], [0.4, 0.1]], dtype=torch.float16)])
    # mass: token 3 → 0.6, token 4 → 0.4, token 1 → 0.25; the stop token 0 is always kept
    assert choose_head_tokens(data, 6, 3, always=[0]).tolist() == [0, 3, 4]
    assert choose_head_tokens(data, 6, 2).tolist() == [3, 4]
    assert head_coverage(data, torch.tensor([3, 4]), 6) == pytest.approx(1.0 / 1.25, rel=1e-3)
    with pytest.raises(InvalidParameterError):
        choose_head_tokens(data, 6, 7)


@pytest.mark.parametrize("change,field", [({"layers": ()}, "layers"), ({"layers": (0, 0)}, "layers"),
                                          ({"epochs": 0}, "epochs"), ({"prompts": ()}, "prompts"),
                                          ({"learning_rate": 2.0}, "learning_rate"), ({"steps": 0}, "steps")])
def test_a_bad_training_plan_names_the_field(change, field):
    with pytest.raises(InvalidParameterError) as err:
        TrainingPlan(**{"prompts": ("hi",), "layers": (0,), "head_tokens": 4, **change})
    assert err.value.field == field


def test_a_draft_not_trained_yet_says_which_command_makes_it(tmp_path):
    with pytest.raises(InvalidParameterError) as err:
        load_causal_lm("smollm2-draft", field="draft", cache_dir=str(tmp_path))
    assert err.value.field == "draft" and "specproof train-draft" in str(err.value)


def test_train_draft_runs_end_to_end_on_a_tiny_pair_and_its_loss_falls(tmp_path):
    from specproof.cli import app as cli

    _, target = _save_pair_with_tokenizer(tmp_path)
    model = transformers.LlamaForCausalLM.from_pretrained(target)
    with torch.no_grad():  # sharp rows: a one-layer draft starts far from them and has something to learn
        model.lm_head.weight.mul_(30)
    model.save_pretrained(target)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("abc\nhello there\nfed cab\nno\n")
    out = tmp_path / "trained"  # not "draft": the pair's own draft model is there, which train-draft will not replace
    result = CliRunner().invoke(cli.main, [
        "train-draft", "--target", target, "--layers", "0", "--head-tokens", "12", "--prompts", str(prompts),
        "--samples", "2", "--new-tokens", "8", "--generation-batch", "3", "--epochs", "40",
        "--learning-rate", "0.01", "--check-questions", "0", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    record = json.loads((out / "training.json").read_text())
    losses = record["losses"]
    assert len(losses) == 40 and sum(losses[-5:]) < 0.9 * sum(losses[:5])  # it learns the target's labels (seen: 0.84)
    kept = json.loads((out / "head_tokens.json").read_text())
    assert len(kept) == 12 and record["plan"]["layers"] == [0]
    draft = load_causal_lm(str(out), torch.float32, "draft")
    assert draft.config.num_hidden_layers == 1 and isinstance(draft.get_output_embeddings(), PrunedHead)
    with torch.no_grad():
        row = Processing()(draft(input_ids=torch.tensor([[1, 2, 3]])).logits[0, -1])
    outside = [t for t in range(row.shape[0]) if t not in set(kept)]
    assert float(row[outside].sum()) == 0 and abs(float(row.sum()) - 1) < 1e-9
    # the same seed and plan give the same losses
    again = tmp_path / "again"
    CliRunner().invoke(cli.main, [
        "train-draft", "--target", target, "--layers", "0", "--head-tokens", "12", "--prompts", str(prompts),
        "--samples", "2", "--new-tokens", "8", "--generation-batch", "3", "--epochs", "40",
        "--learning-rate", "0.01", "--check-questions", "0", "--out", str(again)], catch_exceptions=False)
    assert json.loads((again / "training.json").read_text())["losses"] == losses


@pytest.mark.parametrize("args,field,words", [
    (["--out", "/proc/specproof-draft"], "out", "/proc"),
    (["--out", "EXISTING"], "out", "is not a draft"),
    (["--layers", "0,99"], "layers", "the target has layers 0..1"),
    (["--head-tokens", "10000000"], "head_tokens", "at most that many"),
    (["--questions", "MISSING"], "questions", "cannot read"),
])
def test_train_draft_checks_every_output_and_option_before_any_work(tmp_path, monkeypatch, args, field, words):
    """``--out /proc/td`` was refused after generating and training (about 30 minutes), throwing the draft away;
    ``--layers 0,99`` after the generation; ``--head-tokens 10000000`` was clamped to the vocabulary. All are
    refused now before the target's weights load (its config is read for the layers and vocabulary)."""
    from simulator.real import causal_lm as real
    from specproof.cli import app as cli

    def no_work(*args, **kwargs):
        raise AssertionError("the target's weights loaded before the refusal")

    monkeypatch.setattr(real, "load_causal_lm", no_work)
    (tmp_path / "pair").mkdir()
    _, target = _save_pair_with_tokenizer(tmp_path / "pair")
    existing = tmp_path / "mine"
    existing.mkdir()
    (existing / "notes.txt").write_text("keep me")
    args = [str(existing) if a == "EXISTING" else str(tmp_path / "missing.jsonl") if a == "MISSING" else a
            for a in args]
    out = [] if "--out" in args else ["--out", str(tmp_path / "draft")]
    layers = [] if "--layers" in args else ["--layers", "0"]  # the tiny target has 2 layers, the name's draft 3
    check = [] if "--questions" in args else ["--check-questions", "0"]  # no MT-bench to fetch
    result = CliRunner().invoke(cli.main, ["train-draft", "--target", target, *layers, *check, *out, *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {field}: ") and words in result.stderr, result.stderr
    assert (existing / "notes.txt").read_text() == "keep me" and not (tmp_path / "draft").exists()
