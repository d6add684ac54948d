"""The engine's Search over one loaded version: unknown rows dropped, several searches side by side."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np

from hygraph.backends.vectorstore import Hit
from hygraph.store.reading import VersionSearch


class RecordingStore:
    """Answers each collection with fixed hits; waits until `parallel` searches are inside at once."""

    def __init__(self, parallel: int) -> None:
        self.inside = threading.Barrier(parallel, timeout=10)
        self.threads: list[str] = []

    def search(self, name: str, queries: np.ndarray, k: int, layer: int | None = None) -> list[list[Hit]]:
        self.threads.append(threading.current_thread().name)
        self.inside.wait()  # raises BrokenBarrierError when the searches ran one after another
        return [[Hit(f"{name}-a", 0.9), Hit("stale", 0.8), Hit(f"{name}-b", 0.7)][:k] for _ in queries]


def loaded(kinds: list[str]) -> SimpleNamespace:
    known = {kind: {f"col_{kind}-a", f"col_{kind}-b"} for kind in kinds}
    view = SimpleNamespace(known=lambda kind: known[kind])
    return SimpleNamespace(collections={kind: f"col_{kind}" for kind in kinds}, view=view, exact={})


def test_many_runs_the_searches_side_by_side_and_answers_in_request_order() -> None:
    kinds = ["summaries", "chunks", "entities", "relations"]
    store = RecordingStore(parallel=4)
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="search") as pool:
        search = VersionSearch(store, loaded(kinds), pool)
        q = np.zeros((1, 3), np.float32)
        answers = search.many([(kind, q, 3, None) for kind in kinds])
    # the row the version does not know ("stale") is dropped from every answer
    assert answers == [[[(f"col_{kind}-a", 0.9), (f"col_{kind}-b", 0.7)]] for kind in kinds]
    assert all(name.startswith("search") for name in store.threads)


def test_one_search_runs_in_the_callers_thread() -> None:
    store = RecordingStore(parallel=1)
    with ThreadPoolExecutor(max_workers=2) as pool:
        search = VersionSearch(store, loaded(["chunks"]), pool)
        [answer] = search.many([("chunks", np.zeros((2, 3), np.float32), 1, None)])
    assert answer == [[("col_chunks-a", 0.9)], [("col_chunks-a", 0.9)]]
    assert store.threads == [threading.current_thread().name]


def test_started_searches_run_while_the_caller_works_and_are_collected_in_request_order() -> None:
    kinds = ["chunks", "relations"]
    # the caller is the third party at the barrier: the searches wait inside until it arrives, so they must
    # already run while it works, and collecting them afterwards answers both
    store = RecordingStore(parallel=3)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="search") as pool:
        search = VersionSearch(store, loaded(kinds), pool)
        collect = search.start([(kind, np.zeros((1, 3), np.float32), 3, None) for kind in kinds])
        store.inside.wait()
        answers = collect()
    assert answers == [[[(f"col_{kind}-a", 0.9), (f"col_{kind}-b", 0.7)]] for kind in kinds]
