"""Real causal-LM pairs: one-pass tree attention against per-path forward passes, and the exact end-to-end law
on tiny Llama pairs (random weights, vocabulary 4, two layers, saved and loaded through the loading code).

The exact engine enumerates every draft tree; the draft rows come from the draft model, the target rows from
one tree-scoring pass of the target per tree (as generation gets them), and the completed law of the first
``H+1`` tokens is compared with the target's joint from plain forward passes of every prefix.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import copy  # noqa: E402
import itertools  # noqa: E402

from exact import round_law  # noqa: E402
from simulator.drafting import FixedShape  # noqa: E402
from simulator.errors import InvalidParameterError  # noqa: E402
from simulator.models import ModelView  # noqa: E402
from simulator.real.causal_lm import (CausalLMPair, Processing, ReprocessedDraft, load_causal_lm,  # noqa: E402
                                       score_tree)
from simulator.trees import DraftTree, make_topology  # noqa: E402

VOCAB = 4


def _save_tiny_llama(path, seed: int) -> str:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # sharper logits than the default init, so draft and target really differ
        model.lm_head.weight.mul_(40)
    model.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("llama")
    draft = load_causal_lm(_save_tiny_llama(root / "draft", 1))
    target = load_causal_lm(_save_tiny_llama(root / "target", 2))
    return draft, target


# transformers' LlamaRMSNorm normalises in float32 whatever the model's dtype, so a float64 model run on two
# attention layouts (one tree pass, one pass per path: sums in other orders) agrees only to float32 rounding:
# a 1e-16 difference before a cast can flip a float32 rounding (~6e-8 relative). Seen: 1.3e-7 (transformers
# 5.23); a wrong mask or wrong positions moves rows by 1e-2 or more (the tests below).
@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-6), (torch.float32, 1e-5)])
def test_tree_attention_equals_each_path_run_alone(tiny_pair, dtype, tolerance, torch_device):
    target = copy.deepcopy(tiny_pair[1]).to(dtype=dtype, device=torch_device)
    prompt = [1, 3, 0]
    tree = DraftTree([-1, 0, 0, 1, 1, 2, 3], [None, 2, 0, 1, 3, 3, 0], VOCAB)
    processing = Processing(temperature=0.8, top_k=3)
    rows = score_tree(target, prompt, tree, processing)
    worst = 0.0
    with torch.no_grad():
        for v in range(len(tree)):
            ids = torch.tensor([prompt + list(tree.path(v))], device=torch_device)
            alone = processing(target(input_ids=ids).logits[0, -1])
            worst = max(worst, float((rows[v] - alone).abs().max()))
    assert rows.device.type == torch_device
    assert worst <= tolerance


def plain_joint(target, prompt: list[int], length: int) -> dict[tuple[int, ...], float]:
    """The target's joint over ``Σ^length`` after ``prompt``, from a plain forward pass of every prefix."""
    rows = {}
    with torch.no_grad():
        for n in range(length):
            for prefix in itertools.product(range(VOCAB), repeat=n):
                ids = torch.tensor([prompt + list(prefix)], device=target.device)
                rows[prefix] = torch.softmax(target(input_ids=ids).logits[0, -1], dim=-1).tolist()
    joint = {}
    for seq in itertools.product(range(VOCAB), repeat=length):
        prob = 1.0
        for k, token in enumerate(seq):
            prob *= rows[seq[:k]][token]
        joint[seq] = prob
    return joint


def end_to_end_tvd(pair: CausalLMPair, drafter, name: str) -> tuple[float, float]:
    """TVD of the exact law of the first ``H+1`` tokens (every draft tree enumerated; rows as generation
    computes them: a draft pass per layer, one target pass per tree) to the plain-pass joint; and ``E[τ]``."""
    law = round_law(pair, drafter, name, "float")
    completed = law.completed()
    joint = plain_joint(pair.target, list(pair.prompt), drafter.height + 1)
    return 0.5 * sum(abs(completed.get(z, 0.0) - joint[z]) for z in joint), float(law.expected_accepted())


def test_drafting_runs_one_draft_pass_per_layer_and_one_target_pass_per_tree(tiny_pair):
    draft, target = tiny_pair
    pair = CausalLMPair(draft, target, [1, 2], Processing(temperature=0.9))
    view = ModelView(pair, "float")
    from simulator.randomness import SamplingRandomness
    drafted = FixedShape(make_topology("complete", 3, 2), "iid").draft(view, SamplingRandomness([5]))
    assert pair.passes == {"p": 3, "q": 1}  # depth 3: layers 0, 1, 2 have children
    worst = 0.0
    for v in range(len(drafted.tree)):
        path = drafted.tree.path(v)
        worst = max(worst, max(abs(a - b) for a, b in zip(drafted.q[v], pair.q(path))))
        if drafted.p[v] is not None:
            worst = max(worst, max(abs(a - b) for a, b in zip(drafted.p[v], pair.p(path))))
    assert worst <= 1e-10  # the batched rows are the plain passes' rows


@pytest.mark.parametrize("name,shape,depth,branching,drafting", [
    ("tv-rrsw", "complete", 2, 2, "without-replacement"),
    ("bv", "chain", 2, 1, "iid"),
    ("trv", "complete", 2, 2, "iid"),
    ("lv-rrs", "tapered", 2, 2, "iid"),
])
def test_exact_end_to_end_law_on_a_tiny_llama_pair(tiny_pair, name, shape, depth, branching, drafting, torch_device):
    draft, target = (copy.deepcopy(model).to(torch_device) for model in tiny_pair)
    pair = CausalLMPair(draft, target, [1, 2], Processing(temperature=1.0), Processing(temperature=1.0))
    tvd, accepted = end_to_end_tvd(pair, FixedShape(make_topology(shape, depth, branching), drafting), name)
    assert tvd <= 1e-6, tvd  # rows agree to float32 rounding (see above); the controls below exceed 1e-4
    assert 0 < accepted < depth  # a real draft: sometimes accepted, not always


@pytest.mark.slow
def test_mismatched_draft_temperature_is_flagged_by_the_same_check(tiny_pair):
    draft, target = tiny_pair
    pair = CausalLMPair(draft, target, [1, 2])
    # Tokens are sampled at temperature 1, but verification reads draft rows processed at 0.7.
    drafter = ReprocessedDraft(FixedShape(make_topology("complete", 2, 2), "without-replacement"), pair,
                               Processing(temperature=0.7))
    assert end_to_end_tvd(pair, drafter, "tv-rrsw")[0] > 1e-4


def test_tree_scoring_with_sequential_positions_is_flagged(tiny_pair, sequential_tree_positions):
    """A common deployment bug: numbering the tree's tokens 0..L−1 instead of by depth."""
    draft, target = tiny_pair
    pair = CausalLMPair(draft, target, [1, 2])
    drafter = FixedShape(make_topology("complete", 2, 2), "without-replacement")
    assert end_to_end_tvd(pair, drafter, "tv-rrsw")[0] > 1e-4  # measured 3.8e-4


def test_processing_is_checked_and_keeps_the_top_tokens():
    probs = Processing(top_k=2)(torch.tensor([0.0, 2.0, 1.0, -1.0]))
    assert float(probs[1] + probs[2]) == pytest.approx(1.0) and float(probs[0]) == 0.0
    nucleus = Processing(top_p=0.5)(torch.log(torch.tensor([0.1, 0.6, 0.3])))
    assert nucleus.tolist() == pytest.approx([0.0, 1.0, 0.0])
    for field, kwargs in (("temperature", dict(temperature=0.0)), ("top_k", dict(top_k=-1)),
                          ("top_p", dict(top_p=1.5))):
        with pytest.raises(InvalidParameterError) as err:
            Processing(**kwargs)
        assert err.value.field == field


def test_loading_a_missing_directory_names_the_field(tmp_path):
    with pytest.raises(InvalidParameterError) as err:
        load_causal_lm(str(tmp_path / "nowhere"))
    assert err.value.field == "model"


def test_loading_onto_an_unusable_device_names_the_field(tmp_path):
    saved = _save_tiny_llama(tmp_path / "m", 1)
    for device in ("no-such-device", "cuda:99"):
        with pytest.raises(InvalidParameterError) as err:
            load_causal_lm(saved, device=device)
        assert err.value.field == "device" and device in str(err.value)


def _save_pair_with_tokenizer(root) -> tuple[str, str]:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    symbols = ["[UNK]", *"abcdefgh ijklmno"[:15]]
    tok = Tokenizer(models.WordLevel({c: i for i, c in enumerate(symbols)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    dirs = []
    for name, seed in (("draft", 3), ("target", 4)):
        torch.manual_seed(seed)
        config = transformers.LlamaConfig(vocab_size=len(symbols), hidden_size=16, intermediate_size=32,
                                          num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                          max_position_embeddings=256)
        transformers.LlamaForCausalLM(config).save_pretrained(root / name)
        transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(root / name)
        dirs.append(str(root / name))
    return dirs[0], dirs[1]


@pytest.mark.slow
def test_specproof_real_runs_end_to_end_and_writes_spec_bench_answers(tmp_path, torch_device):
    import json
    import shutil
    import subprocess
    import sys

    draft, target = _save_pair_with_tokenizer(tmp_path)
    questions = tmp_path / "question.jsonl"
    questions.write_text("\n".join(json.dumps({"question_id": i, "category": "writing", "turns": turns})
                                   for i, turns in enumerate([["abc def"], ["hello", "again"]])) + "\n")
    answers = tmp_path / "answers.jsonl"
    exe = shutil.which("specproof")
    cmd = ([exe] if exe else [sys.executable, "-m", "specproof.cli"]) + [
        "real", "--draft", draft, "--target", target, "--questions", str(questions), "--answers", str(answers),
        "--verifier", "tv-rrs", "--topology", "complete", "--depth", "2", "--branching", "2",
        "--max-new-tokens", "12", "--device", torch_device]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "block efficiency" in result.stdout and "tokens/s" in result.stdout
    lines = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [a["question_id"] for a in lines] == [0, 1]
    for answer, turns in zip(lines, (1, 2)):
        assert {"question_id", "answer_id", "model_id", "choices", "tstamp"} <= set(answer)
        choice = answer["choices"][0]
        assert choice["index"] == 0 and len(choice["turns"]) == turns and all(isinstance(t, str) for t in choice["turns"])
        for new, steps, accepts, wall in zip(choice["new_tokens"], choice["idxs"], choice["accept_lengths"],
                                             choice["wall_time"]):
            assert new == 12 and steps == len(accepts) and wall > 0
            assert all(1 <= a <= 3 for a in accepts) and sum(accepts) >= 12  # depth 2: 1–3 tokens per step


# --- the KV-cached real path (simulator.real.kv_cache, simulator.real.spec_bench) ---------------------

class _FullContext:
    """Plain forward passes of the tiny pair over whole contexts (no prompt apart): a reference view whose
    ``context`` is the round's whole context, as ADED's kernel reads it."""

    def __init__(self, draft, target, processing: Processing) -> None:
        self.draft, self.target, self.processing, self.vocab = draft, target, processing, VOCAB

    def _row(self, model, context) -> list[float]:
        with torch.no_grad():
            return self.processing(model(input_ids=torch.tensor([list(context)])).logits[0, -1]).tolist()

    def p(self, context):
        return self._row(self.draft, context)

    def q(self, context):
        return self._row(self.target, context)


def _round_mismatches(draft, target, name: str, drafter, seed: int, tokens: int = 12) -> tuple[int, int]:
    """Generate ``tokens`` tokens on the cached path, then replay every round on the reference: the reference
    drafter (advanced over the same contexts) on rows from fresh passes over the round's context (no cache) with
    the round's drafting uniforms, and the reference rule with its verification uniforms. Returns (rounds, rounds
    that differ: tree, parents, accepted node or emitted token)."""
    from simulator.randomness import ReplayRandomness
    from simulator.real.kv_cache import CachedLM
    from simulator.real.spec_bench import speculative_generate
    from simulator.verifiers import VERIFIERS

    processing = Processing(temperature=1.0)
    needs_draft = drafter.scheme != "aded"
    result = speculative_generate(CachedLM(draft, processing) if needs_draft else None,
                                  CachedLM(target, processing), [1, 2], drafter, name, tokens, seed)
    wrong, reference = 0, drafter
    for i, r in enumerate(result.rounds):
        reference = reference.advance(r.context) if i else reference
        view = ModelView(_FullContext(draft, target, processing), "float", r.context)
        drafted = reference.draft(view, ReplayRandomness(list(r.draft_uniforms)))
        node, y = VERIFIERS[name].fn(drafted.tree, drafted.p, drafted.q, ReplayRandomness(list(r.verify_uniforms)))[:2]
        wrong += ((tuple(drafted.tree.tokens[1:]) != r.tokens[1:]) or tuple(drafted.tree.parents) != r.parents
                  or (node, y) != (r.node, r.emitted))
    return len(result.rounds), wrong


@pytest.mark.parametrize("name,shape,drafting", [
    ("tv-rrs", ("complete", 2, 2), "iid"),
    ("tv-rrsw", ("complete", 3, 2), "without-replacement"),
    ("bv", ("chain", 3, 1), "iid"),
    ("gbv", ("multi-chain", 2, 3), "iid"),
    ("trv", ("complete", 2, 2), "without-replacement"),
])
def test_cached_generation_decides_as_the_reference_round_by_round(tiny_pair, name, shape, drafting):
    rounds, wrong = _round_mismatches(*tiny_pair, name, FixedShape(make_topology(*shape), drafting), seed=3)
    assert rounds >= 4 and wrong == 0


def _dynamic(scheme: str):
    from simulator.drafting.aded import AdedConfig
    from simulator.drafting.drafter_registry import DrafterOptions, make_drafter

    corpus = [[1, 2, 3, 0, 1, 2, 2, 3], [2, 3, 0, 1, 2, 3, 1, 0]]  # a tri-gram table with several continuations
    options = DrafterOptions(budget=6, threshold=0.1, max_depth=3, corpus=corpus,
                             aded=AdedConfig(iterations=30, length=3, candidates=6))
    return make_drafter(scheme, model=_FullContext(None, None, Processing()), options=options)


@pytest.mark.parametrize("name,scheme", [("tv-rrsw", "dyspec"), ("dyspec", "dyspec"), ("trv", "dyspec-threshold"),
                                         ("match", "aded"), ("tv-det", "aded")])
def test_dynamic_drafts_on_the_cached_path_replay_on_the_reference_drafters(tiny_pair, name, scheme):
    rounds, wrong = _round_mismatches(*tiny_pair, name, _dynamic(scheme), seed=5, tokens=16)
    assert rounds >= 4 and wrong == 0


def test_a_dynamic_kernel_that_skips_renormalising_is_caught_by_the_same_replay(tiny_pair, monkeypatch):
    import simulator.drafting.arrays as arrays
    # The residual after a draw left unnormalised: the same draws from it, but the slot values it opens are off.
    monkeypatch.setattr(arrays, "row_sum", lambda rows: rows[:, :1] * 0 + 1)
    rounds, wrong = _round_mismatches(*tiny_pair, "tv-rrsw", _dynamic("dyspec"), seed=5, tokens=16)
    assert wrong >= 1


def test_a_cache_cut_to_the_wrong_branch_is_caught_by_the_same_replay(tiny_pair, monkeypatch):
    import simulator.real.kv_cache as kv_cache
    keep = kv_cache._keep_positions
    # A cache cut to its first entries instead of the accepted path's: right only when the first branch won.
    monkeypatch.setattr(kv_cache, "_keep_positions", lambda cache, index: keep(cache, torch.arange(len(index))))
    rounds, wrong = _round_mismatches(*tiny_pair, "tv-rrs", FixedShape(make_topology("complete", 2, 2), "iid"), seed=3)
    assert wrong >= 1


def test_cached_rows_follow_plain_forward_passes_token_by_token(tiny_pair):
    from simulator.real.kv_cache import CachedLM
    _, target = tiny_pair
    cached, context = CachedLM(target, Processing()), [1, 2]
    with torch.no_grad():
        for x in [3, 0, 2, 2, 1]:
            row = cached.extend(context, (-1,), (0,), ())[0]
            plain = torch.softmax(target(input_ids=torch.tensor([context])).logits[0, -1].double(), -1)
            assert float((row - plain).abs().max()) <= 1e-6
            cached.commit(())
            context.append(x)
    assert cached.passes == 5


def test_the_cpu_head_gives_the_heads_product_and_leaves_the_model_as_it_was(tiny_pair):
    """Inside a cached pass the output head computes in MKL's faster layout, one row and several; outside, the
    model's own head runs untouched (transformers' generate, measured beside it, gets the model as loaded)."""
    from simulator.real.kv_cache import CachedLM
    _, target = tiny_pair
    head = target.get_output_embeddings()
    lm = CachedLM(target, Processing())
    assert "forward" not in vars(head)
    for hidden in (torch.randn(1, 1, 16, dtype=torch.float64), torch.randn(1, 5, 16, dtype=torch.float64)):
        with torch.no_grad(), lm._head:
            fast = head(hidden)
        assert fast.shape == (*hidden.shape[:-1], VOCAB)
        assert torch.allclose(fast, hidden @ head.weight.T, rtol=1e-12, atol=1e-12)
    assert "forward" not in vars(head) and lm._head.transposed is CachedLM(target, Processing())._head.transposed


@pytest.mark.parametrize("name,shape", [("tv-rrs", ("complete", 2, 2)),
                                        pytest.param("bv", ("chain", 3, 1), marks=pytest.mark.slow)])  # 8 s
def test_remembered_passes_give_the_rounds_computed_passes_give(tiny_pair, name, shape):
    """First rounds with passes taken from a memo decide as the rounds that run every pass, round by round,
    with fewer passes computed."""
    from simulator.real import crosscheck

    drafter, prompt, processing = FixedShape(make_topology(*shape), "iid"), [1, 2, 3], Processing(top_k=3)
    plain = crosscheck.first_rounds(*tiny_pair, prompt, processing, drafter, name, 60, memo=False)
    remembered = crosscheck.first_rounds(*tiny_pair, prompt, processing, drafter, name, 60)
    assert remembered.accepted.tolist() == plain.accepted.tolist()
    assert remembered.passes == plain.passes == plain.computed
    assert 2 < remembered.computed < plain.passes / 2, (remembered.computed, plain.passes)


def test_self_drafts_share_the_targets_tensors_and_name_bad_specs(tiny_pair):
    from simulator.real.causal_lm import self_draft
    _, target = tiny_pair
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(self_draft(target, "self:skip=")(ids).logits, target(ids).logits)
        one, two = self_draft(target, "self:exit=1"), self_draft(target, "self:skip=1")
        assert torch.equal(one(ids).logits, two(ids).logits)  # both keep layer 0 only
        assert not torch.allclose(one(ids).logits, target(ids).logits)
    assert one.config.num_hidden_layers == 1 and target.config.num_hidden_layers == 2
    assert one.model.layers[0].mlp.up_proj.weight.data_ptr() == target.model.layers[0].mlp.up_proj.weight.data_ptr()
    for bad in ("self:skip=0,1", "self:skip=5", "self:exit=0", "self:exit=3", "self:drop=1", "self:skip=x"):
        with pytest.raises(InvalidParameterError) as err:
            self_draft(target, bad)
        assert err.value.field == "draft"
