"""Hyperbolic points held in a reader's process (store/points.py) and the online learner's feed of moves
(updater/moves.py): searched by Poincaré distance, moved in feed order, never by a move older than the row."""

from __future__ import annotations

import numpy as np
import pytest

from hygraph.core.hyperbolic import poincare_distance, query_vector, storage_vectors
from hygraph.errors import StoreError
from hygraph.store.points import LivePoints, PointMoves
from hygraph.updater.moves import MoveFeed

M = 40.0


def _points(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = rng.normal(size=(n, 4))
    return p / np.linalg.norm(p, axis=1, keepdims=True) * rng.uniform(0.05, 0.9, size=(n, 1))


class Store:
    """The collection's rows as the vector store holds them; counts the rows read."""

    def __init__(self, ids: list[str], points: np.ndarray) -> None:
        self.rows = dict(zip(ids, storage_vectors(points, M).astype(np.float32)))
        self.read = 0

    def move(self, cid: str, point: np.ndarray) -> np.ndarray:
        self.rows[cid] = storage_vectors(point[None, :], M).astype(np.float32)[0]
        return self.rows[cid]

    def __call__(self, ids) -> np.ndarray:
        self.read += len(ids)
        return np.stack([self.rows[i] for i in ids])


def test_search_ranks_by_poincare_distance_and_points_read_back() -> None:
    ids = [f"c{i}" for i in range(30)]
    pts = _points(30)
    held = LivePoints.read("hyp", 3, ids, Store(ids, pts))
    q = _points(1, seed=9)[0]
    hits = held.search(query_vector(q)[None, :], 5)[0]
    nearest = np.argsort(poincare_distance(pts, q[None, :]), kind="stable")[:5]
    assert [cid for cid, _ in hits] == [ids[i] for i in nearest]
    np.testing.assert_allclose(held.points(["c7", "c2"]), pts[[7, 2]], atol=1e-5)
    assert held.points([]).shape == (0, 4)
    with pytest.raises(StoreError, match="no point"):
        held.points(["c7", "absent"])


def test_moves_apply_in_feed_order_and_a_row_read_later_keeps_its_value() -> None:
    ids = ["a", "b", "c"]
    pts = _points(3)
    store = Store(ids, pts)
    held = LivePoints.read("hyp", 5, ids, store)
    assert held.position == (None, 0)
    new_a1, new_a2, new_c = _points(3, seed=1)
    moves = PointMoves("hyp", "e1", 2, ["a", "c", "a", "gone"],
                       storage_vectors(np.stack([new_a1, new_c, new_a2, new_c]), M).astype(np.float32),
                       [5, 4, 6, 6])
    assert held.apply(moves, store) == 1  # "a" (its latest move); "c" was moved under version 4, before its read at 5
    np.testing.assert_allclose(held.points(["a", "b", "c"]), np.stack([new_a2, pts[1], pts[2]]), atol=1e-5)
    assert held.position == ("e1", 2)
    assert held.apply(PointMoves("other", "e1", 9, ["b"], moves.vectors[:1], [9]), store) == 0  # another collection
    assert held.position == ("e1", 2)
    # A reset reads every row again, as the store now holds it.
    store.move("b", new_c)
    store.read = 0
    assert held.apply(PointMoves("hyp", "e2", 7, reset=True), store) == 3 and store.read == 3
    np.testing.assert_allclose(held.points(["b"]), new_c[None, :], atol=1e-5)
    assert held.position == ("e2", 7)


def test_a_newer_version_keeps_unchanged_rows_and_their_position() -> None:
    ids = ["a", "b", "c"]
    pts = _points(4)
    store = Store(ids, pts[:3])
    held = LivePoints.read("hyp", 5, ids, store)
    moved_b = _points(1, seed=2)[0]
    held.apply(PointMoves("hyp", "e1", 3, ["b"], store.move("b", moved_b)[None, :], [5]), store)
    # Version 6 replaced "c" (a new point under the same id) and added "d"; "a" went.
    store.move("c", pts[3])
    store.rows["d"] = storage_vectors(pts[:1] * 0.5, M).astype(np.float32)[0]
    store.read = 0
    after = LivePoints.read("hyp", 6, ["b", "c", "d"], store, held, changed={"c", "d"})
    assert store.read == 2 and after.position == ("e1", 3)
    np.testing.assert_allclose(after.points(["b", "c", "d"]), np.stack([moved_b, pts[3], pts[0] * 0.5]), atol=1e-5)
    # A move of "c" made under version 5 (the chunk before it was replaced) is not applied; one of "b" is.
    stale = storage_vectors(np.stack([pts[0], pts[1]]), M).astype(np.float32)
    assert after.apply(PointMoves("hyp", "e1", 4, ["c", "b"], stale, [5, 5]), store) == 1
    np.testing.assert_allclose(after.points(["b", "c"]), np.stack([pts[1], pts[3]]), atol=1e-5)
    # Another collection (a recalibration's) is read whole.
    store.read = 0
    again = LivePoints.read("hyp2", 7, ["b", "c", "d"], store, after, changed=set())
    assert store.read == 3 and again.position == (None, 0)


def test_feed_answers_moves_after_a_position_and_resets_what_it_cannot_answer() -> None:
    feed = MoveFeed(max_rows=4)
    vec = np.ones((1, 6), np.float32)
    assert feed.since("hyp", None, 0).reset  # a reader new to this feed reads everything, then follows it
    feed.record("hyp", 5, ["a"], vec)
    feed.record("old", 4, ["z"], vec)
    feed.record("hyp", 5, ["b", "c"], 2 * np.ones((2, 6), np.float32))
    got = feed.since("hyp", feed.epoch, 1)
    assert (got.seq, got.ids, got.versions, got.reset) == (3, ["b", "c"], [5, 5], False)
    assert feed.since("hyp", feed.epoch, 0).ids == ["a", "b", "c"]
    assert feed.since("hyp", feed.epoch, 3).ids == [] and not feed.since("hyp", feed.epoch, 3).reset
    assert feed.since("hyp", "another epoch", 3).reset
    feed.record("hyp", 6, ["d", "e"], np.ones((2, 6), np.float32))  # over max_rows: the oldest entries go
    assert feed.since("hyp", feed.epoch, 0).reset and feed.since("hyp", feed.epoch, 1).reset
    assert feed.since("hyp", feed.epoch, 3).ids == ["d", "e"]


def test_a_reader_reads_again_only_the_chunks_whose_terms_row_a_newer_version_wrote(tmp_path) -> None:
    """store/reading.held_points over real versions: v2 replaced "b" and added "d" in a delta segment."""
    from hygraph.store.artifacts import TERMS, TermsRow
    from hygraph.store.manifest import HyperbolicInfo, Manifest
    from hygraph.store.reading import Loaded, held_points
    from hygraph.store.versions import IndexStore

    def commit(base=None, rows=(), dead=()) -> int:
        with store.begin() as w:
            if base is None:
                w.replace(TERMS, list(rows), {})
            else:
                w.change(base, TERMS, list(rows), list(dead), {})
            w.commit(Manifest(dims={}, hyperbolic=HyperbolicInfo(M, 4, 0)))
            return w.version

    class Vectors:
        def __init__(self, rows: Store) -> None:
            self.rows, self.asked = rows, []

        def fetch(self, name: str, ids, fresh: bool = False) -> np.ndarray:
            assert name == "hyp" and fresh  # read as every persisted move left them
            self.asked.append(list(ids))
            return self.rows(ids)

    store = IndexStore(tmp_path, create=True)
    pts = _points(5)
    rows = Store(["a", "b", "c"], pts[:3])
    vectors = Vectors(rows)
    v1 = store.open(commit(rows=[TermsRow(c, ("t",), ()) for c in "abc"]))
    collections = {"hyperbolic": "hyp"}
    first = held_points(v1, collections, None, 10, vectors)
    assert vectors.asked == [["a", "b", "c"]] and held_points(v1, collections, None, 2, vectors) is None
    rows.move("b", pts[3])
    rows.rows["d"] = storage_vectors(pts[4:], M).astype(np.float32)[0]
    v2 = store.open(commit(v1.table(TERMS), rows=[TermsRow("b", ("u",), ()), TermsRow("d", ("t",), ())], dead=["c"]))
    vectors.asked.clear()
    served = Loaded(view=None, collections=collections, version=v1, catalog=None, exact={"hyperbolic": first})
    second = held_points(v2, collections, served, 10, vectors)
    assert sorted(vectors.asked[0]) == ["b", "d"]
    np.testing.assert_allclose(second.points(["a", "b", "d"]), pts[[0, 3, 4]], atol=1e-5)
