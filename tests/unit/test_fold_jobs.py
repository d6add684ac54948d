from hygraph.indexing.update import fold_jobs
from hygraph.store.journal import Job


def _insert(n: int, doc_id: str, text: str) -> Job:
    return Job(f"j{n}", "insert", n * 10, {"documents": [{"id": doc_id, "title": "", "text": text}]}, 0.0)


def _delete(n: int, doc_id: str) -> Job:
    return Job(f"j{n}", "delete", n * 10, {"ids": [doc_id]}, 0.0)


def test_fold_jobs_replays_in_order():
    present = {"a": "old a", "b": "b text"}
    batch = fold_jobs([_insert(1, "a", "old a"),  # identical re-send: nothing
                       _insert(2, "b", "new b"),  # replacement
                       _insert(3, "c", "c text"), _delete(4, "c"),  # added then deleted: nothing
                       _delete(5, "zzz"),  # absent: nothing
                       _delete(6, "a"), _insert(7, "a", "old a")], present)  # deleted then re-added
    assert set(batch.add) == {"b", "a"} and batch.add["b"].text == "new b"
    assert batch.remove == {"a", "b"}
    assert batch.end_offset == 70 and batch.job_ids == [f"j{i}" for i in range(1, 8)]
