"""The journal of an index on object storage (store/object_journal.py): over a local directory's objects and
a real S3 server (SeaweedFS on loopback, tests/s3server.py), no mocks."""

from __future__ import annotations

import json
import threading


from hygraph.model import Document
from hygraph.store.journal import DeleteDocuments, FileJournal, InsertDocuments, Malformed, request_of
from hygraph.store.manifest import Manifest, PendingChunks
from hygraph.store.object_journal import HINT, HINT_EVERY, ObjectJournal, job_key, open_journal
from hygraph.store.objects import LocalObjects, open_objects


def _insert(doc_id: str) -> InsertDocuments:
    return InsertDocuments((Document(doc_id, f"text of {doc_id}"),))


def test_jobs_are_numbered_in_order_and_read_from_an_offset(uri):
    j = ObjectJournal(open_objects(uri))
    a, b, c = j.append(_insert("d1")), j.append(DeleteDocuments(("d1",))), j.append(_insert("d2"))
    assert (a.end_offset, b.end_offset, c.end_offset) == (1, 2, 3)
    assert j.objects.list("journal/jobs/") == [job_key(0), job_key(1), job_key(2)]
    jobs = list(j.jobs())
    assert [(x.job_id, x.op, x.end_offset) for x in jobs] == [(a.job_id, "insert", 1), (b.job_id, "delete", 2),
                                                              (c.job_id, "insert", 3)]
    assert jobs[0].request == _insert("d1") and jobs[1].request == DeleteDocuments(("d1",))
    # Applied up to a's end offset: what remains starts with b.
    assert [x.job_id for x in j.jobs(a.end_offset)] == [b.job_id, c.job_id]
    assert list(j.jobs(c.end_offset)) == []
    found = j.find(b.job_id)
    assert found is not None and found.end_offset == 2 and found.request is None and found.op == "delete"
    assert j.find("missing") is None
    d = j.append(_insert("d3"))
    assert j.find(d.job_id).end_offset == 4  # found among what was appended since the last look


def test_writers_in_two_threads_never_share_a_number(uri):
    """Each thread is its own writer (as two processes are): both start at the same number and race."""
    objects = open_objects(uri)
    per_thread = 12
    appended: list[list[int]] = [[], []]

    def write(slot: int) -> None:
        journal = ObjectJournal(objects)
        for i in range(per_thread):
            appended[slot].append(journal.append(_insert(f"t{slot}-{i}")).end_offset)

    threads = [threading.Thread(target=write, args=(slot,)) for slot in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    offsets = appended[0] + appended[1]
    assert sorted(offsets) == list(range(1, 2 * per_thread + 1))  # distinct, and no gap
    assert all(a < b for a, b in zip(appended[0], appended[0][1:]))  # each writer's jobs in its own order
    jobs = list(ObjectJournal(objects).jobs())
    assert [x.end_offset for x in jobs] == list(range(1, 2 * per_thread + 1))
    assert sorted(x.request.documents[0].id for x in jobs) == sorted(
        f"t{slot}-{i}" for slot in (0, 1) for i in range(per_thread))


def test_a_new_writer_starts_past_the_tail_whatever_the_hint_says(tmp_path):
    objects = LocalObjects(tmp_path)
    first = ObjectJournal(objects)
    for i in range(HINT_EVERY + 2):
        first.append(_insert(f"d{i}"))
    assert json.loads(objects.get(HINT)) == {"next": HINT_EVERY + 1}
    assert ObjectJournal(objects).append(_insert("next")).end_offset == HINT_EVERY + 3
    objects.put(HINT, b'{"next": 3}')  # behind (a slower writer's hint landed last): the tail is listed from it
    assert ObjectJournal(objects).append(_insert("after stale")).end_offset == HINT_EVERY + 4
    objects.put(HINT, b"not a hint")
    assert ObjectJournal(objects).append(_insert("after junk")).end_offset == HINT_EVERY + 5
    # A writer whose number was taken meanwhile by another takes the next free one.
    behind, ahead = ObjectJournal(objects), ObjectJournal(objects)
    behind.append(_insert("x"))
    ahead.append(_insert("y"))
    ahead.append(_insert("z"))
    assert behind.append(_insert("w")).end_offset == HINT_EVERY + 9


def test_malformed_objects_become_invalid_jobs_and_later_jobs_still_parse(uri):
    objects = open_objects(uri)
    j = ObjectJournal(objects)
    a = j.append(_insert("d1"))
    objects.put(job_key(1), b'{"job_id": "' + b"f" * 32
                + b'", "op": "insert", "accepted_at": 1, "documents": [{"id": "a\\nb", "text": "x"}]}')
    objects.put(job_key(2), b"not json at all")
    objects.put(job_key(3), b'{"job_id": 7}')
    objects.put("journal/jobs/notes.txt", b"written by hand: not a job's key")
    b = j.append(DeleteDocuments(("d1",)))
    assert b.end_offset == 5  # past the hand-written objects
    jobs = list(j.jobs())
    assert [x.op for x in jobs] == ["insert", "invalid", "invalid", "invalid", "delete"]
    assert jobs[1].job_id == "f" * 32 and isinstance(jobs[1].request, Malformed)
    assert "documents.0.id" in jobs[1].request.error
    assert [x.job_id for x in jobs[2:4]] == ["offset-3", "offset-4"]
    assert (jobs[0].job_id, jobs[-1].job_id) == (a.job_id, b.job_id)
    assert j.pending(0) == 2  # the malformed ones are never applied
    j.mark_failed("offset-3", "InputError: not a well-formed job")
    assert j.failed() == {"offset-3": "InputError: not a well-formed job"}


def test_status_moves_from_queued_to_running_to_done_or_failed(uri):
    j = ObjectJournal(open_objects(uri))
    a = j.append(_insert("a"))
    b = j.append(_insert("b"))
    assert j.status(a, None) == ("queued", None) and j.running() == set()
    j.set_running([a.job_id, b.job_id])
    assert j.status(a, Manifest()) == ("running", None)
    j.set_running([])
    applied_a = Manifest(journal_offset=a.end_offset)
    assert j.status(a, applied_a) == ("done", None) and j.status(b, applied_a) == ("queued", None)
    assert j.pending(applied_a.journal_offset) == 1
    sliced = Manifest(journal_offset=b.end_offset, chunks_pending=[PendingChunks("b", b.job_id, 4)])
    assert j.status(b, sliced) == ("running", None)  # its document's later chunks still to come
    j.mark_failed(b.job_id, "StoreError: the job could not be applied\nsecond line")
    assert j.status(b, applied_a) == ("failed", "StoreError: the job could not be applied")
    assert j.pending(applied_a.journal_offset) == 0
    j.objects.put("journal/failed/junk.json", b"[1, 2]")  # not a failure record: ignored
    j.objects.put("journal/running.json", b"{broken")
    assert set(j.failed()) == {b.job_id} and j.running() == set()


def test_queued_writes_decide_what_is_held(uri):
    j = ObjectJournal(open_objects(uri))
    first = j.append(request_of("insert", {"documents": [{"id": "new", "text": "t"}]}))
    j.append(request_of("delete", {"ids": ["old"]}))
    assert j.holds_after("new", 0, held=False) and not j.holds_after("new", first.end_offset, held=False)
    assert not j.holds_after("old", 0, held=True) and j.holds_after("other", 0, held=True)


def test_open_journal_picks_the_file_journal_for_a_directory_and_objects_for_s3(uri, tmp_path):
    journal = open_journal(uri)
    if uri.startswith("s3://"):
        assert isinstance(journal, ObjectJournal) and journal.objects.uri == uri
    else:
        assert isinstance(journal, FileJournal) and journal.path == tmp_path / "idx" / "journal" / "journal.jsonl"
        job = journal.append(_insert("d"))
        assert job.end_offset == journal.path.stat().st_size  # byte offsets, as ever


class _LostAnswer(LocalObjects):
    """A store whose first job write lands but whose answer is lost: S3's retried PUT then gets a 412."""

    lost = 1

    def put_if_absent(self, key: str, data: bytes, durable: bool = True) -> bool:
        stored = super().put_if_absent(key, data, durable)
        if stored and key.startswith("journal/jobs/") and self.lost:
            self.lost -= 1
            return False
        return stored


def test_a_write_whose_answer_was_lost_is_recorded_once(tmp_path):
    j = ObjectJournal(_LostAnswer(tmp_path))
    first = j.append(_insert("d1"))
    assert first.end_offset == 1 and j.append(_insert("d2")).end_offset == 2
    assert [x.job_id for x in j.jobs()][0] == first.job_id and len(list(j.jobs())) == 2
