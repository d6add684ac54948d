"""The feed of the online learner's moves: readers that hold the hyperbolic points in process (store/points.py)
follow it instead of asking the vector store for points at every query.

Each learning round that moved points appends one entry, after its writes were persisted, so a reader that
reads the collection after it saw a position holds every move up to that position. The feed keeps the newest
`MAX_ROWS` moved rows; a reader that fell further behind, or that asks with another epoch (this updater
restarted, and the moves of the one before are gone with it), is told to read every row again.
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from dataclasses import dataclass

import numpy as np

from hygraph.store.points import PointMoves

# Rows of moves kept (~140 bytes a row): at four learning steps a round and some fifty rows a step, minutes of a
# busy learner, where a reader asks every `serve.version_poll_s`.
MAX_ROWS = 50_000


@dataclass(frozen=True)
class _Entry:
    seq: int
    collection: str
    version: int
    ids: list[str]
    vectors: np.ndarray


class MoveFeed:
    """The bounded feed of moves one updater made, numbered from 1 within its `epoch`."""

    def __init__(self, max_rows: int = MAX_ROWS) -> None:
        self.epoch = uuid.uuid4().hex
        self.max_rows = max_rows
        self._entries: deque[_Entry] = deque()
        self._rows = 0
        self._seq = 0
        self._dropped_through = 0  # the newest seq no longer held
        self._lock = threading.Lock()

    def record(self, collection: str, version: int, ids: list[str], vectors: np.ndarray) -> None:
        """One round's moves of `collection`'s rows (stored vectors), made under `version`, already persisted."""
        if not ids:
            return
        with self._lock:
            self._seq += 1
            self._entries.append(_Entry(self._seq, collection, version, list(ids),
                                        np.asarray(vectors, dtype=np.float32)))
            self._rows += len(ids)
            while self._rows > self.max_rows and len(self._entries) > 1:
                dropped = self._entries.popleft()
                self._rows -= len(dropped.ids)
                self._dropped_through = dropped.seq

    def since(self, collection: str, epoch: str | None, seq: int) -> PointMoves:
        """The moves of `collection` after position (`epoch`, `seq`), up to the newest; a reset when that
        position is not in this feed."""
        with self._lock:
            if epoch != self.epoch or seq < self._dropped_through or seq > self._seq:
                return PointMoves(collection, self.epoch, self._seq, reset=True)
            entries = [e for e in self._entries if e.seq > seq and e.collection == collection]
            newest = self._seq
        if not entries:
            return PointMoves(collection, self.epoch, newest)
        return PointMoves(collection, self.epoch, newest, [cid for e in entries for cid in e.ids],
                          np.concatenate([e.vectors for e in entries]),
                          [e.version for e in entries for _ in e.ids])
