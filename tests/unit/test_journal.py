from __future__ import annotations

import pytest

from hygraph.errors import InputError, StoreError
from hygraph.model import Document
from hygraph.store.journal import (MAX_ERROR_CHARS, DeleteDocuments, FileJournal, InsertDocuments, Malformed, job_error,
                                     request_of)


def test_jobs_are_appended_in_order_with_growing_offsets(tmp_path):
    j = FileJournal(tmp_path)
    a = j.append(request_of("insert", {"documents": [{"id": "d1", "text": "one"}]}))
    b = j.append(request_of("delete", {"ids": ["d1"]}))
    assert 0 < a.end_offset < b.end_offset == j.path.stat().st_size
    jobs = list(j.jobs())
    assert [(x.job_id, x.op) for x in jobs] == [(a.job_id, "insert"), (b.job_id, "delete")]
    assert jobs[0].request == InsertDocuments((Document("d1", "one"),))
    assert jobs[1].request == DeleteDocuments(("d1",))
    assert [x.job_id for x in j.jobs(after_offset=a.end_offset)] == [b.job_id]
    assert j.find(b.job_id).end_offset == b.end_offset
    assert j.find("missing") is None


def test_a_torn_last_line_is_not_a_job(tmp_path):
    j = FileJournal(tmp_path)
    a = j.append(request_of("insert", {"documents": []}))
    with j.path.open("ab") as fh:
        fh.write(b'{"job_id": "torn", "op": "ins')
    assert [x.job_id for x in j.jobs()] == [a.job_id]


def test_an_empty_journal_has_no_jobs(tmp_path):
    assert list(FileJournal(tmp_path).jobs()) == []


def test_requests_are_checked_before_anything_is_written(tmp_path):
    j = FileJournal(tmp_path)
    for request, field in [
        (InsertDocuments((Document("ok", "x"), Document("a\nb", "x"))), "documents.1.id"),
        (InsertDocuments((Document("ok", "Oahu \ud800 luau"),)), "documents.0.text"),
        (InsertDocuments((Document("ok", "x", metadata={"k": "\x00"}),)), "documents.0.metadata"),
        (DeleteDocuments(("x" * 300,)), "ids.0"),
    ]:
        with pytest.raises(InputError, match=field):
            j.append(request)
    with pytest.raises(InputError, match="op"):
        request_of("truncate", {})
    assert not j.path.exists()
    hostile = j.append(request_of("insert", {"documents": [{"id": "zz'] or id not in ['", "text": "D'Arcy"}]}))
    assert [x.request for x in j.jobs()] == [hostile.request]


def test_a_malformed_line_becomes_an_invalid_job_and_later_jobs_still_parse(tmp_path):
    """Lines written by hand or by a version without the input rules must never stop the reader."""
    j = FileJournal(tmp_path)
    a = j.append(request_of("insert", {"documents": [{"id": "d1", "text": "one"}]}))
    with j.path.open("ab") as fh:
        fh.write(b'{"job_id": "' + b"f" * 32
                 + b'", "op": "insert", "accepted_at": 1, "documents": [{"id": "a\\nb", "text": "x"}]}\n')
        fh.write(b"not json at all\n")
        fh.write(b'{"job_id": 7}\n')
    b = j.append(request_of("delete", {"ids": ["d1"]}))
    jobs = list(j.jobs())
    assert [x.op for x in jobs] == ["insert", "invalid", "invalid", "invalid", "delete"]
    assert jobs[1].job_id == "f" * 32 and isinstance(jobs[1].request, Malformed)
    assert "documents.0.id" in jobs[1].request.error
    assert jobs[2].job_id.startswith("offset-") and jobs[3].job_id.startswith("offset-")
    assert (jobs[0].job_id, jobs[-1].job_id) == (a.job_id, b.job_id)
    assert j.find(b.job_id).op == "delete"


def test_failed_errors_are_one_bounded_line(tmp_path):
    j = FileJournal(tmp_path)
    j.mark_failed("abc", "StoreError: parse error near '" + "x" * 5000 + "'\nsecond line")
    error = j.failed()["abc"]
    assert "\n" not in error and len(error) <= MAX_ERROR_CHARS + 1
    with (j.path.parent / "failed.jsonl").open("a") as fh:
        fh.write('{"job_id": "torn", "err')
    assert set(j.failed()) == {"abc"}


def test_a_job_error_quotes_no_other_document():
    """What a poller reads: an input rule's message about this job's own field, else only the kind."""
    clash = StoreError("chunks: id 'mine:0' shares its key with stored id 'payroll-2026-confidential:3'")
    assert job_error(clash) == "StoreError: the job could not be applied (the updater's log has the details)"
    assert job_error(KeyError("someone-elses-doc")).startswith("KeyError:") and "someone" not in job_error(
        KeyError("someone-elses-doc"))
    assert job_error(InputError("documents.0.id: must not be empty")) == "InputError: documents.0.id: must not be empty"
