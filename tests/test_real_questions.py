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
