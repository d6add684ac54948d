"""The question types an eval report is broken down by (eval/runner.py `question_types`)."""

from __future__ import annotations

import json

import pytest

from hygraph.errors import InputError
from hygraph.eval.runner import question_types


def test_types_come_from_the_meta_file_beside_the_questions(tmp_path):
    (tmp_path / "set.questions.jsonl").write_text("")
    rows = [{"id": "a", "type": "bridge"}, {"id": "b", "type": "3hop1", "hops": 3}, {"id": "c", "type": "comparison"}]
    (tmp_path / "set.meta.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert question_types(tmp_path / "set.questions.jsonl") == {"a": "bridge", "b": "3-hop", "c": "comparison"}


def test_no_meta_file_no_types(tmp_path):
    assert question_types(tmp_path / "other.questions.jsonl") == {}
    assert question_types(tmp_path / "questions.json") == {}


def test_a_bad_meta_line_is_named(tmp_path):
    (tmp_path / "set.meta.jsonl").write_text('{"id": "a"}\n')
    with pytest.raises(InputError, match="set.meta.jsonl:1"):
        question_types(tmp_path / "set.questions.jsonl")
