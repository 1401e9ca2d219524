"""``specproof real``'s questions file is checked whole before any model loads: an empty file, a question without
turns, a bad line after blank lines are typed errors naming the file and line (exit 2), never a
ZeroDivisionError after the load. The negative control: a good file with blank lines passes the check and the
run goes on to the models (here an empty directory, refused by name)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

pytest.importorskip("transformers")

from simulator.errors import InvalidParameterError  # noqa: E402
from simulator.real.spec_bench import read_questions  # noqa: E402
from specproof.cli import app as cli  # noqa: E402

GOOD = json.dumps({"question_id": 7, "category": "writing", "turns": ["Say hello.", "And goodbye."]})


@pytest.mark.parametrize("text,where,words", [
    ("", "", "holds no question"),
    ("\n  \n\n", "", "holds no question"),
    (f"\n{GOOD}\n\n" + json.dumps({"question_id": 8, "turns": []}) + "\n", ":4", "question 8 has no turns"),
    (f"{GOOD}\n\n{{not json\n", ":3", "not JSON"),
    (json.dumps({"question_id": 9, "turns": ["ok", ""]}) + "\n", ":1", "not a non-empty string"),
    (json.dumps({"turns": ["no id"]}) + "\n", ":1", "needs a question_id"),
    ("[1, 2, 3]\n", ":1", "needs a question_id"),
    (f"{GOOD}\n\n{GOOD}\n", ":3", "question_id 7 is line 1's too"),  # one store key, one answer id: refused
    (f"{GOOD}\n" + json.dumps({"question_id": "7", "turns": ["hi"]}) + "\n", ":2", "question_id '7' is line 1's"),
])
def test_a_bad_questions_file_is_refused_naming_the_file_and_line(tmp_path, text, where, words):
    path = tmp_path / "q.jsonl"
    path.write_text(text)
    with pytest.raises(InvalidParameterError) as err:
        read_questions(str(path))
    assert err.value.field == "questions" and f"{path}{where}" in err.value.message and words in err.value.message


def test_the_command_refuses_before_loading_and_passes_a_good_file_on(tmp_path):
    (tmp_path / "empty").mkdir()
    path = tmp_path / "q.jsonl"

    def real():
        return CliRunner().invoke(cli.main, ["real", "--draft", str(tmp_path / "empty"), "--target",
                                             str(tmp_path / "empty"), "--questions", str(path), "--verifier", "tv-rrs"])

    path.write_text(json.dumps({"question_id": 1, "turns": []}) + "\n")
    out = real()
    assert out.exit_code == 2 and f"error: questions: {path}:1: question 1 has no turns" in out.stderr, out.output
    assert "config.json" not in out.stderr and "Traceback" not in out.output
    path.write_text(f"\n{GOOD}\n\n")  # the negative control: the questions pass, the empty model is refused
    out = real()
    assert out.exit_code == 2 and "holds no config.json" in out.stderr and "questions" not in out.stderr, out.output
    assert read_questions(str(path)) == [json.loads(GOOD)]


@pytest.mark.parametrize("args,words", [
    (["--drafting", "aded", "--verifier", "match", "--draft", "self:skip=1"], "--drafting aded reads no draft model"),
    (["--drafting", "dyspec", "--verifier", "tv-rrsw"], "--drafting dyspec needs --draft"),
])
def test_a_draft_model_is_named_where_the_drafting_does_or_does_not_read_one(tmp_path, args, words):
    path = tmp_path / "q.jsonl"
    path.write_text(GOOD + "\n")
    out = CliRunner().invoke(cli.main, ["real", "--target", str(tmp_path), "--questions", str(path), *args])
    assert out.exit_code == 2 and f"error: draft: {words}" in out.stderr, out.output


def test_the_real_report_refuses_a_single_question_naming_the_field(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(GOOD + "\n")
    out = CliRunner().invoke(cli.main, ["real-report", "--questions", str(path), "--out", str(tmp_path / "out")])
    assert out.exit_code == 2 and "error: questions: the report's standard errors" in out.stderr, out.output


def test_the_real_report_refuses_duplicate_question_ids_before_any_work(tmp_path):
    """Two questions with one ``question_id`` wrote one store key; refused now, before any model loads."""
    path = tmp_path / "q.jsonl"
    path.write_text(GOOD + "\n" + GOOD.replace("Say hello.", "Say hi.") + "\n")
    out = CliRunner().invoke(cli.main, ["real-report", "--questions", str(path), "--out", str(tmp_path / "out"),
                                        "--target", str(tmp_path / "no-target")])
    assert out.exit_code == 2, out.output
    assert f"error: questions: {path}:2: question_id 7 is line 1's too" in out.stderr, out.stderr
    assert not (tmp_path / "out").exists()


def test_the_real_report_refuses_a_missing_trained_draft_up_front_naming_its_option(tmp_path):
    """``--trained-draft /nonexistent`` was refused after the main draft's study (66 s), naming ``draft``."""
    path = tmp_path / "q.jsonl"
    path.write_text(GOOD + "\n" + GOOD.replace("7", "8") + "\n")
    store = tmp_path / "store"
    out = CliRunner().invoke(cli.main, ["real-report", "--questions", str(path), "--out", str(tmp_path / "out"),
                                        "--store", str(store), "--target", str(tmp_path / "no-target"),
                                        "--trained-draft", str(tmp_path / "nonexistent")])
    assert out.exit_code == 2, out.output
    assert out.stderr.startswith("error: trained_draft: ") and "nonexistent" in out.stderr, out.stderr
    assert not store.exists()


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_real_refuses_an_empty_aded_corpus_naming_it(tmp_path, text):
    path = tmp_path / "q.jsonl"
    path.write_text(GOOD + "\n")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text)
    out = CliRunner().invoke(cli.main, ["real", "--target", str(tmp_path / "no-target"), "--questions", str(path),
                                        "--drafting", "aded", "--verifier", "match", "--aded-corpus", str(corpus)])
    assert out.exit_code == 2 and f"error: aded_corpus: {corpus} holds no text" in out.stderr, out.output


@pytest.fixture(scope="module")
def tiny_pair_with_tokenizer(tmp_path_factory):
    from test_real import _save_pair_with_tokenizer

    return _save_pair_with_tokenizer(tmp_path_factory.mktemp("pair"))


@pytest.mark.parametrize("verifier,drafting,words", [
    ("tv-rrs", "without-replacement", "tv-rrs claims losslessness under iid, not without-replacement"),
    ("tv-rrs", "dyspec", "tv-rrs claims losslessness under iid, not dyspec"),
    ("bug-accept-all", "aded", "bug-accept-all is a negative control, lossy by design"),
    ("tv-rrs", "iid", None),  # the control: a lossless pair is not marked
    ("match", "aded", None),
])
def test_real_marks_a_run_whose_rule_is_not_lossless_under_its_drafting(tmp_path, tiny_pair_with_tokenizer,
                                                                         verifier, drafting, words):
    """``real`` ran a rule under a drafting it is not lossless under, or a negative control, and said nothing:
    its speed and acceptance read as a lossless rule's (certify calls these pairs LOSSY). It still runs (a
    measurement, exit 0), but says so up front and in its summary, and marks every answer line."""
    draft, target = tiny_pair_with_tokenizer
    questions, answers = tmp_path / "q.jsonl", tmp_path / "answers.jsonl"
    questions.write_text(GOOD + "\n")
    models = ["--target", target] + ([] if drafting == "aded" else ["--draft", draft])
    out = CliRunner().invoke(cli.main, ["real", *models, "--questions", str(questions), "--answers", str(answers),
                                        "--verifier", verifier, "--drafting", drafting, "--depth", "2",
                                        "--max-new-tokens", "3", "--max-questions", "1", "--no-baseline"])
    assert out.exit_code == 0, out.output
    line = json.loads(answers.read_text().splitlines()[0])
    claim = line["claim"]
    assert (claim["verifier"], claim["drafting"]) == (verifier, drafting)
    if words is None:
        assert "NOT LOSSLESS" not in out.output and claim["lossless_claimed"] and claim["note"] is None
        assert line["model_id"] == f"specproof-{verifier}"
        return
    assert out.stderr.startswith(f"warning: NOT LOSSLESS: {words}"), out.stderr
    assert f"  NOT LOSSLESS: {words}" in out.stdout, out.stdout
    assert not claim["lossless_claimed"] and words in claim["note"]
    assert claim["negative_control"] == verifier.startswith("bug-")
    assert line["model_id"] == f"specproof-{verifier}-not-lossless"
