from __future__ import annotations

from hygraph.store.journal import Journal


def test_jobs_are_appended_in_order_with_growing_offsets(tmp_path):
    j = Journal(tmp_path)
    a = j.append("insert", {"documents": [{"id": "d1", "text": "one"}]})
    b = j.append("delete", {"ids": ["d1"]})
    assert 0 < a.end_offset < b.end_offset == j.path.stat().st_size
    jobs = list(j.jobs())
    assert [(x.job_id, x.op) for x in jobs] == [(a.job_id, "insert"), (b.job_id, "delete")]
    assert jobs[0].payload == {"documents": [{"id": "d1", "text": "one"}]}
    assert [x.job_id for x in j.jobs(after_offset=a.end_offset)] == [b.job_id]
    assert j.find(b.job_id).end_offset == b.end_offset
    assert j.find("missing") is None


def test_a_torn_last_line_is_not_a_job(tmp_path):
    j = Journal(tmp_path)
    a = j.append("insert", {"documents": []})
    with j.path.open("ab") as fh:
        fh.write(b'{"job_id": "torn", "op": "ins')
    assert [x.job_id for x in j.jobs()] == [a.job_id]


def test_an_empty_journal_has_no_jobs(tmp_path):
    assert list(Journal(tmp_path).jobs()) == []
