"""The one input rule for ids and texts: hand-checked cases, then properties over arbitrary strings."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hygraph.errors import InputError
from hygraph.input_rules import (MAX_ID_CHARS, check_id, check_json, check_metadata, check_nonblank_text,
                                 check_text, depth, preview)

HOSTILE_IDS = ["zz'] or id not in ['", "D'Arcy-notes", 'say "hi"', "a\\b", "a/b/../c", "x?y=1#z", "50%",
               "‘curly’ “quotes”", "naïve ☃ 東京", "id with spaces", "[1, 2]", "or 1=1 --", "a" * MAX_ID_CHARS]


@pytest.mark.parametrize("doc_id", HOSTILE_IDS)
def test_hostile_but_printable_ids_are_data(doc_id):
    assert check_id(doc_id, "id") == doc_id


@pytest.mark.parametrize("doc_id, why", [
    ("", "empty"), ("a" * (MAX_ID_CHARS + 1), "exceeds"), ("a\nb", "U+000A"), ("a\x00b", "U+0000"),
    ("a\ud800b", "U+D800"), ("a\u2028b", "U+2028"), (" lead", "whitespace"), ("trail\t", "U+0009"),
    (".", "not a valid id"), ("..", "not a valid id"), (42, "string"),
    # Invisible format characters (Cf): a zero-width space alone, a BOM prefix, a right-to-left override.
    ("\u200b", "U+200B at position 0"), ("\ufeffreport", "U+FEFF"), ("invoice-\u202egnp.exe", "U+202E at position 8"),
    ("a\u200db", "U+200D"), ("soft\u00adhyphen", "U+00AD"),
])
def test_ids_that_cannot_be_stored_or_addressed_are_refused(doc_id, why):
    with pytest.raises(InputError, match=re.escape(why)):
        check_id(doc_id, "documents.0.id")


def test_text_keeps_tabs_and_newlines_and_refuses_other_controls_and_surrogates():
    assert check_text("a\tb\nc\r\n", "text") == "a\tb\nc\r\n"
    with pytest.raises(InputError, match=r"text: a lone surrogate \(U\+D800\) at position 5"):
        check_text("Oahu \ud800 luau", "text")
    with pytest.raises(InputError, match="control character"):
        check_text("bell\x07", "text")
    with pytest.raises(InputError, match="exceeds the limit of 3"):
        check_text("abcd", "text", max_chars=3)
    with pytest.raises(InputError, match="must not be empty"):
        check_nonblank_text(" \n ", "text")


def test_nonblank_text_needs_a_visible_character_and_text_keeps_format_characters():
    for invisible in ["\u200b", "\u200b\u200c\u200d\ufeff", " \u2060\t\u202e "]:
        with pytest.raises(InputError, match="question: must hold a visible character"):
            check_nonblank_text(invisible, "question")
    # Joiners and direction marks are part of real text: emoji sequences, Hebrew inside Latin.
    for text in ["\U0001F469\u200d\U0001F4BB", "say \u200fשלום\u200f", "x\u200b"]:
        assert check_nonblank_text(text, "question") == text


def test_metadata_depth_and_size_are_bounded():
    deep: dict = {}
    node = deep
    for _ in range(20):
        node["k"] = {}
        node = node["k"]
    assert depth(deep) == 21
    with pytest.raises(InputError, match="nested deeper than 16"):
        check_metadata(deep, "metadata")
    with pytest.raises(InputError, match="bytes exceeds"):
        check_metadata({"blob": "x" * 20_000}, "metadata")
    with pytest.raises(InputError, match=r"metadata\.tags\.1"):
        check_json({"tags": ["ok", "bad\x00"]}, "metadata")
    assert check_metadata({"source": "wiki", "n": [1, 2.5, None, True]}, "m")["source"] == "wiki"


def test_preview_is_bounded_and_printable():
    assert preview("x" * 1000, 10) == "x" * 10 + "…"
    assert "\\n" in preview("a\nb") and "\\ud800" in preview("\ud800")


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_any_string_is_accepted_or_refused_with_an_input_error(text):
    """Never another exception; what is accepted survives JSON, UTF-8 and a one-line log."""
    for check in (check_id, check_text):
        try:
            out = check(text, "field")
        except InputError as exc:
            assert str(exc).startswith("field") and len(str(exc)) < 200
            continue
        assert json.loads(json.dumps(out, ensure_ascii=False)) == out
        out.encode("utf-8")
        if check is check_id:
            assert "\n" not in out and "\r" not in out and out == out.strip()
            assert not any(unicodedata.category(c) == "Cf" for c in out)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_metadata_numbers_must_be_json_numbers(value):
    with pytest.raises(InputError, match=r"documents\.0\.metadata\.score: .* is not a JSON number"):
        check_metadata({"score": value}, "documents.0.metadata")
    with pytest.raises(InputError, match="not a JSON number"):
        check_metadata({"scores": [1.0, value]}, "m")
