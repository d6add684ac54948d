"""A version's hyperbolic points held in the reader's process, and the online learner's moves that keep them current.

`hyperbolic` queries search the chunks' Poincaré points (the k nearest the question) and read the points of about
thirty candidates. On the vector store those are two requests a query, each a few ms of the store server's CPU
(the largest single cost of the mode after the question encoder). A version of at most `exact_max_rows` chunks
holds its points here instead: the stored vectors (`core.hyperbolic.storage_vectors`, 34 floats a chunk) read at
load, searched exactly by inner product (which ranks by Poincaré distance whatever the norm bound M, since the
query vector's last coordinate is 0) and read back as points with `from_storage`.

The collection is still the truth: the online learner moves points in it between versions. It also records each
round of moves in a bounded feed (updater/moves.py) at a position (`epoch`, `seq`); a reader asks for the moves
after its position and applies them (`LivePoints.apply`). Each row carries the version it was read at, and a move
made under an older version is not applied to a row read at a newer one: that row was replaced (a document
updated under the same chunk id) or read after the move was already stored.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from hygraph.core.hyperbolic import from_storage
from hygraph.errors import StoreError
from hygraph.store.exact import ExactVectors

# Reads the stored vectors of ids from the collection, in order, seeing every write persisted before the call.
ReadRows = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class PointMoves:
    """The online learner's moves of one collection's points after a feed position, up to (`epoch`, `seq`).

    `reset`: the asked position is not in the feed (another epoch: the updater restarted; or moves after it
    were dropped from the bounded feed), so the reader reads every row again and takes this position.
    """

    collection: str
    epoch: str
    seq: int
    ids: list[str] = field(default_factory=list)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))  # stored vectors, a row per id
    versions: list[int] = field(default_factory=list)  # the version each move was made under, a row per id
    reset: bool = False


@dataclass(frozen=True)
class _Rows:
    """One consistent state: the matrix searched, each row's version, and the feed position it reflects."""

    exact: ExactVectors
    matrix: np.ndarray
    stamps: np.ndarray
    epoch: str | None
    seq: int


class LivePoints:
    """The stored hyperbolic vectors of one version's chunks, held in process (see the module docstring)."""

    def __init__(self, collection: str, version: int, ids: list[str], matrix: np.ndarray, stamps: np.ndarray,
                 epoch: str | None = None, seq: int = 0) -> None:
        self.collection, self.version, self.ids = collection, version, ids
        self.row = {cid: i for i, cid in enumerate(ids)}
        self._state = _Rows(ExactVectors.of(ids, matrix), matrix, stamps, epoch, seq)
        self._apply = threading.Lock()

    @classmethod
    def read(cls, collection: str, version: int, ids: list[str], read_rows: ReadRows,
             previous: "LivePoints | None" = None, changed: set[str] | None = None) -> "LivePoints":
        """Version `version`'s points: every row read from the store; or, given the points `previous` held of
        the same collection, theirs (at their feed position) for every id but those `changed` since then."""
        if previous is None or previous.collection != collection or changed is None:
            matrix = _rows(read_rows, ids)
            return cls(collection, version, ids, matrix, np.full(len(ids), version, np.int64))
        state = previous._state  # one snapshot: the rows and the position they reflect go together
        fresh = [cid for cid in ids if cid in changed or cid not in previous.row]
        read = dict(zip(fresh, _rows(read_rows, fresh))) if fresh else {}
        reused = np.array([previous.row.get(cid, -1) if cid not in read else -1 for cid in ids], np.int64)
        matrix = np.empty((len(ids), state.matrix.shape[1] if len(state.matrix) else _width(read)), np.float32)
        stamps = np.full(len(ids), version, np.int64)
        kept = reused >= 0
        matrix[kept] = state.matrix[reused[kept]]
        stamps[kept] = state.stamps[reused[kept]]
        for i in np.flatnonzero(~kept).tolist():
            matrix[i] = read[ids[i]]
        return cls(collection, version, ids, matrix, stamps, state.epoch, state.seq)

    @property
    def position(self) -> tuple[str | None, int]:
        """The feed position (epoch, seq) the held rows reflect; (None, 0) before the first feed read."""
        state = self._state
        return state.epoch, state.seq

    def search(self, queries: np.ndarray, k: int, layer: int | None = None) -> list[list[tuple[str, float]]]:
        """The k nearest chunks (Poincaré distance) per query vector (`core.hyperbolic.query_vector`)."""
        return self._state.exact.search(queries, k, layer)

    def points(self, chunk_ids: Sequence[str]) -> np.ndarray:
        """The Poincaré points of `chunk_ids`, in order."""
        state = self._state
        try:
            rows = [self.row[cid] for cid in chunk_ids]
        except KeyError as exc:
            raise StoreError(f"{self.collection}: version {self.version} holds no point for chunk "
                             f"{str(exc.args[0])[:80]!r}") from None
        return from_storage(state.matrix[rows]) if rows else np.zeros((0, state.matrix.shape[1] - 2))

    def apply(self, moves: PointMoves, read_rows: ReadRows) -> int:
        """Take `moves` (from this collection's feed, after `position`); returns the rows moved. A reset reads
        every row again (after the feed answered, so every move up to its position is in the store)."""
        if moves.collection != self.collection:
            return 0
        with self._apply:
            state = self._state
            if moves.reset:
                matrix = _rows(read_rows, self.ids)
                self._state = _Rows(ExactVectors.of(self.ids, matrix), matrix,
                                    np.full(len(self.ids), self.version, np.int64), moves.epoch, moves.seq)
                return len(self.ids)
            if (moves.epoch, moves.seq) == (state.epoch, state.seq):
                return 0
            taken: dict[int, int] = {}  # row -> the latest move of it
            for i, (cid, made) in enumerate(zip(moves.ids, moves.versions)):
                row = self.row.get(cid)
                if row is not None and made >= state.stamps[row]:
                    taken[row] = i
            if taken:
                matrix = state.matrix.copy()  # copied, not written in place: a running search reads the old one
                matrix[list(taken)] = moves.vectors[list(taken.values())]
                self._state = _Rows(ExactVectors.of(self.ids, matrix), matrix, state.stamps, moves.epoch, moves.seq)
            else:
                self._state = _Rows(state.exact, state.matrix, state.stamps, moves.epoch, moves.seq)
            return len(taken)


def _rows(read_rows: ReadRows, ids: Sequence[str]) -> np.ndarray:
    return np.ascontiguousarray(read_rows(ids), dtype=np.float32) if ids else np.zeros((0, 0), np.float32)


def _width(read: dict[str, np.ndarray]) -> int:
    return len(next(iter(read.values()))) if read else 0
