import pytest

from hygraph.indexing.update import fold_jobs, slice_length, slice_pending, summary_slice
from hygraph.model import Chunk, Document
from hygraph.store.journal import DeleteDocuments, InsertDocuments, Job


def _insert(n: int, doc_id: str, text: str) -> Job:
    return Job(f"j{n}", InsertDocuments((Document(doc_id, text),)), n * 10, 0.0, "insert")


def _delete(n: int, doc_id: str) -> Job:
    return Job(f"j{n}", DeleteDocuments((doc_id,)), n * 10, 0.0, "delete")


def test_fold_jobs_replays_in_order():
    present = {"a": Document("a", "old a"), "b": Document("b", "b text")}
    batch = fold_jobs([_insert(1, "a", "old a"),  # identical re-send: nothing
                       _insert(2, "b", "new b"),  # replacement
                       _insert(3, "c", "c text"), _delete(4, "c"),  # added then deleted: nothing
                       _delete(5, "zzz"),  # absent: nothing
                       _delete(6, "a"), _insert(7, "a", "old a")], present)  # deleted then re-added
    assert set(batch.add) == {"b", "a"} and batch.add["b"].text == "new b"
    assert batch.remove == {"a", "b"}
    assert batch.end_offset == 70 and batch.job_ids == [f"j{i}" for i in range(1, 8)]


def test_a_re_sent_text_with_new_metadata_replaces_the_document():
    present = {"a": Document("a", "text", metadata={"n": 1}), "b": Document("b", "text", metadata={"n": 1})}
    jobs = [Job("j1", InsertDocuments((
        Document("a", "text", metadata={"n": 1}),  # the same text and metadata: nothing to do
        Document("b", "text", metadata={"n": True}))), 10, 0.0, "insert")]  # true is not 1: replaced
    batch = fold_jobs(jobs, present)
    assert set(batch.add) == {"b"} and batch.remove == {"b"} and batch.add["b"].metadata == {"n": True}


@pytest.mark.parametrize("chunks,entities,limit,want", [
    (2, 14, None, (2, 14)),   # no limit: everything
    (2, 14, 16, (2, 14)),     # fits
    (4, 28, 16, (2, 14)),     # half of each: about the first two documents' chunks with their entities
    (3, 0, 2, (2, 0)),
    (0, 5, 2, (0, 2)),
    (1, 30, 1, (1, 0)),       # the slice never exceeds the limit
    (10, 10, 3, (2, 1)),
])
def test_a_summary_slice_takes_the_same_share_of_pending_chunks_and_entities(chunks, entities, limit, want):
    got = slice_pending(chunks, entities, limit)
    assert got == want
    assert sum(got) == min(chunks + entities, limit or chunks + entities)


@pytest.mark.parametrize("age,period,want", [(0.0, 30.0, 8), (29.9, 30.0, 8), (30.0, 30.0, 16), (95.0, 30.0, 64),
                                             (1e9, 30.0, 8 << 16), (5.0, 0.0, 8 << 16)])
def test_a_summary_slice_doubles_for_each_period_the_backlog_waited(age, period, want):
    assert summary_slice(age, period, 8) == want


@pytest.mark.parametrize("age,node_s,budget,want", [
    (95.0, 0.05, 4.0, 64),       # 8 << 3 = 64 fits in 4 s at 0.05 s a node (80)
    (1e9, 0.05, 4.0, 80),        # a backlog's doubling stops at what 4 s summarize
    (1e9, 10.0, 4.0, 8),         # never below the base, however slow the last slice was
    (1e9, None, 4.0, 8 << 16),   # no slice measured yet: the doubling alone
])
def test_a_summary_slice_is_bounded_by_seconds_at_the_last_slices_pace(age, node_s, budget, want):
    assert summary_slice(age, 30.0, 8, node_s, budget) == want


def _chunks(*tokens: int) -> list[Chunk]:
    return [Chunk(f"d:{i}", "d", i, "text", n) for i, n in enumerate(tokens)]


@pytest.mark.parametrize("tokens,budget,taken,want", [
    ((1200, 1200, 300), 1200, 0, 1),  # one full chunk per version
    ((1200, 1200, 300), 2400, 0, 2),
    ((1200, 1200, 300), 1000, 0, 1),  # the first is taken however long: every version makes progress
    ((20,) * 100, 1200, 0, 60),       # a burst of one-line documents stays one version
    ((600, 600), 1200, 0, 2),
    ((600, 700), 1200, 0, 1),
    ((700,), 1200, 600, 0),           # a version that took chunks already takes none past the budget
    ((500, 100), 1200, 600, 2),
    ((), 1200, 0, 0),
])
def test_a_slice_takes_whole_chunks_within_its_token_budget(tokens, budget, taken, want):
    assert slice_length(_chunks(*tokens), budget, taken) == want
