import json

import pytest

from hygraph.errors import InputError
from hygraph.model import (Document, Relation, Hyperedge, load_corpus, load_questions, load_triples, normalize_name,
                           read_span, scan_corpus)


def _write(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_ids_are_content_derived_and_stable():
    a = Document.make("Some text", title="T")
    b = Document.make("Some text", title="T")
    assert a.id == b.id and len(a.id) == 40
    assert Document.make("x", id="given").id == "given"
    same = Relation.make("lothair ii", "married", "TEUTBERGA")
    assert Relation.make("Lothair II", "married", "Teutberga").id == same.id
    assert Hyperedge.make("A met B.", ["B", "A"]).entities == ("a", "b")


def test_normalize_name_merges_case_space_punctuation():
    assert normalize_name("  U.S.  Army ") == normalize_name("us army") == "us army"
    assert normalize_name("Saint-Maurice's Abbey") == "saintmaurices abbey"


def test_corpus_error_names_file_line_and_field(tmp_path):
    p = _write(tmp_path / "c.jsonl", [{"id": "a", "text": "ok"}, {"id": "b", "title": "no text"}])
    with pytest.raises(InputError, match=r"c\.jsonl:2: missing field 'text'"):
        load_corpus(p)
    p = _write(tmp_path / "d.jsonl", [{"id": "a", "text": "ok"}, "{not json"])
    with pytest.raises(InputError, match=r"d\.jsonl:2: not valid JSON"):
        load_corpus(p)
    p = _write(tmp_path / "e.jsonl", [{"id": "a", "text": 3}])
    with pytest.raises(InputError, match=r"field 'text' must be str"):
        load_corpus(p)
    p = _write(tmp_path / "f.jsonl", [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}])
    with pytest.raises(InputError, match="duplicate id 'a'"):
        load_corpus(p)


def test_a_scanned_corpus_read_in_spans_is_the_loaded_corpus(tmp_path):
    # Lines end at "\n" only: a raw U+2028 or U+2029 inside a text (valid JSON) stays in its line, CRLF and
    # blank lines are allowed, and every span starts at a line of its own.
    p = tmp_path / "c.jsonl"
    p.write_bytes('{"id":"a","text":"x\u2028y\u2029z"}\r\n\n  \n{"id":"b","title":"T","text":"é"}\n'
                  '{"text":"no id"}\n{"id":"d","text":"last, no newline"}'.encode())
    scan = scan_corpus(p, span_documents=2)
    docs = load_corpus(p)
    assert [d.text for d in docs] == ["x\u2028y\u2029z", "é", "no id", "last, no newline"]
    assert scan.documents == 4 and scan.text_bytes.tolist() == [len(d.full_text.encode()) for d in docs]
    assert [(s.start, s.first_line) for s in scan.spans][0] == (0, 1) and scan.spans[-1].end == p.stat().st_size
    assert [s.first_line for s in scan.spans] == [1, 5]
    assert [d for s in scan.spans for d in read_span(p, s)] == docs
    ids: set[str] = set()
    scan_corpus(p, ids=ids)
    assert ids == {d.id for d in docs}


def test_a_corpus_scan_names_the_bad_line(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_bytes(b'{"id":"a","text":"ok"}\n{"id":"b","text":"\xff\xfe"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:2: not valid UTF-8"):
        scan_corpus(p)
    p.write_bytes(b'{"id":"a","text":"ok"}\n{"id":"a","text":"again"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:2: duplicate id 'a' \(first at line 1\)"):
        scan_corpus(p)
    # Among many ids, the duplicate is named at its second line, after the hashes found the clash.
    rows = [{"id": f"doc-{i}", "text": "t"} for i in range(1000)] + [{"id": "doc-417", "text": "again"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=r"c\.jsonl:1001: duplicate id 'doc-417' \(first at line 418\)"):
        scan_corpus(p)
    p.write_bytes(b"\n \n")
    with pytest.raises(InputError, match="no documents"):
        scan_corpus(p)


def test_ids_whose_hashes_clash_are_compared_whole(tmp_path, monkeypatch):
    # A deliberately weak hash (the id's length) makes distinct ids clash: the second pass compares them
    # whole, passes distinct ones and still names a real duplicate.
    import hygraph.model as model

    monkeypatch.setattr(model, "_id_hash", len)
    p = _write(tmp_path / "c.jsonl", [{"id": i, "text": "t"} for i in ("ab", "cd", "ef", "x")])
    assert scan_corpus(p).documents == 4
    p = _write(tmp_path / "c.jsonl", [{"id": i, "text": "t"} for i in ("ab", "cd", "x", "cd")])
    with pytest.raises(InputError, match=r"c\.jsonl:4: duplicate id 'cd' \(first at line 2\)"):
        scan_corpus(p)


def test_corpus_full_text_is_title_then_text(tmp_path):
    p = _write(tmp_path / "c.jsonl", [{"id": "a", "title": "Title", "text": "Body."}])
    [doc] = load_corpus(p)
    assert doc.full_text == "Title\nBody."


def test_questions_validate(tmp_path):
    p = _write(tmp_path / "q.jsonl", [{"id": "1", "question": "  ", "answers": ["x"]}])
    with pytest.raises(InputError, match="field 'question' is empty"):
        load_questions(p)
    p = _write(tmp_path / "q2.jsonl", [{"id": "1", "question": "who?", "answers": []}])
    with pytest.raises(InputError, match="answers"):
        load_questions(p)


def test_triples_keep_only_well_formed(tmp_path):
    p = _write(tmp_path / "t.jsonl", [{"passage_id": "p", "triples": [["a", "r", "b"], ["a", "b"]], "entities": ["a"]}])
    [rec] = load_triples(p)
    assert rec.triples == (("a", "r", "b"),) and rec.entities == ("a",)
