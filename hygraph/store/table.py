"""An artifact as one version sees it: its segments, oldest first, read as one keyed table.

The newest segment that holds a key (as a row or a tombstone) decides it. Lookups cost one
hash and one binary search per segment, newest first; compaction keeps the number of
segments small. Reads never copy a column: values are decoded from the mapped files.
"""

from __future__ import annotations

from dataclasses import fields
from itertools import repeat
from typing import Any, Generic, Iterator, Sequence

import numpy as np
import pyarrow as pa

from hygraph.store.artifacts import Artifact, RowT
from hygraph.store.segment import DELETED, SILENT, Segment, Source, hashes, key_hash

# Key locations a table keeps (about 130 bytes each, the key included), shared by the requests a process runs side
# by side. A hypergraph query reads a median of 500 entity and 485 chunk keys: at 4,096, sixteen queries at once in
# one process cleared the kept locations before each had read its keys' next column, and a hypergraph query cost
# 40 ms of CPU against 24 alone; at 16,384 it cost 30 ms, as with no bound (docs/bench/retriever_concurrency.md).
RECENT = 16384
_ROWS = 1 << 40  # a kept location's segment place is its multiple of this, the row the rest
_ABSENT = -1  # a kept location: no live row
_UNKNOWN = -2  # `_codes`: a key whose location is not kept
_MISSING = object()  # `value`'s default: no stored value is this object


class Table(Generic[RowT]):
    def __init__(self, artifact: Artifact[RowT], source: Source, names: Sequence[str], rows: int,
                 reuse: "Table[RowT] | None" = None) -> None:
        """`reuse`: a table of the same artifact in an earlier version, whose segments of the same name are taken
        as they are (mapped once: opening a segment costs about a millisecond, and a version shares most)."""
        self.artifact = artifact
        self.segments_names = list(names)
        known = dict(zip(reuse.segments_names, reuse.segments)) if reuse is not None else {}
        self.segments = [known.get(n) or Segment(artifact, source, n) for n in names]
        self._rows = rows
        # Key -> `_ROWS` x the segment's place in `segments` + the row, or ABSENT: ints, not (segment, row) tuples,
        # so the dict holds nothing the garbage collector tracks. Tuples kept from query to query would be
        # promoted to its oldest generation, a few thousand a query, and make it sweep the whole heap every few
        # dozen queries (tens of ms each in a serving process).
        self._recent: dict[str, int] = {}

    def __len__(self) -> int:
        return self._rows

    def prefix(self, n: int) -> "Table[RowT]":
        """The table of this one's first `n` segments (the same mapped segments, none opened again)."""
        out = Table(self.artifact, lambda name: None, [], 0)
        out.segments_names, out.segments = self.segments_names[:n], self.segments[:n]
        return out

    def locate(self, key: str) -> tuple[Segment, int] | None:
        code = self._code(key)
        if code == _ABSENT:
            return None
        at, row = divmod(code, _ROWS)
        return self.segments[at], row

    def _code(self, key: str) -> int:
        # A request reads several columns of the same rows: the last few thousand locations are kept.
        code = self._recent.get(key)
        if code is None:
            code = self._find(key)
            if len(self._recent) >= RECENT:
                self._recent.clear()
            self._recent[key] = code
        return code

    def _find(self, key: str) -> int:
        h = key_hash(key)
        for at in range(len(self.segments) - 1, -1, -1):
            row = self.segments[at].find(key, h)
            if row is not None:
                return _ABSENT if row == DELETED else at * _ROWS + row
        return _ABSENT

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._code(key) != _ABSENT

    def value(self, key: str, column: str) -> Any:
        """One column of one row; KeyError when the key is absent."""
        got = self.value_or(key, column, _MISSING)
        if got is _MISSING:
            raise KeyError(key)
        return got

    def value_or(self, key: str, column: str, default: Any) -> Any:
        """`value`, or `default` when the key is absent."""
        code = self._code(key)
        if code == _ABSENT:
            return default
        at, row = divmod(code, _ROWS)
        return self.segments[at].column(column)[row]

    def values_or(self, keys: Sequence[str], column: str, default: Any) -> list[Any]:
        """`value_or` of each key: the keys located together (one hash search per segment for those not kept),
        and the values read together from each segment's column (one numpy or Arrow read, not one per key)."""
        codes = self._codes(keys)
        live = np.flatnonzero(codes != _ABSENT)
        places, rows = np.divmod(codes[live], _ROWS)
        if len(live) == len(keys) and len(keys) and (places == places[0]).all():
            # Every key a row of one segment (most reads): its column's values are the answer, in key order.
            return self.segments[int(places[0])].column(column).many(rows)
        out: list[Any] = [default] * len(keys)
        for at in np.unique(places).tolist():
            mine = places == at
            for i, value in zip(live[mine].tolist(), self.segments[at].column(column).many(rows[mine])):
                out[i] = value
        return out

    def _codes(self, keys: Sequence[str]) -> np.ndarray:
        """`_code` of each key, as an array; the keys not kept are found together, newest segment first."""
        recent = self._recent
        codes = np.array(list(map(recent.get, keys, repeat(_UNKNOWN))), dtype=np.int64)  # no Python call per key
        unknown = np.flatnonzero(codes == _UNKNOWN)
        if len(unknown):
            todo = [keys[i] for i in unknown.tolist()]
            found = np.full(len(todo), _ABSENT, dtype=np.int64)
            open_ = np.arange(len(todo))  # the keys no newer segment has decided
            key_hashes = hashes(todo)
            for at in range(len(self.segments) - 1, -1, -1):
                if not len(open_):
                    break
                rows = self.segments[at].find_many([todo[i] for i in open_.tolist()], key_hashes[open_])
                decided = rows != SILENT
                found[open_[decided]] = np.where(rows[decided] == DELETED, _ABSENT, at * _ROWS + rows[decided])
                open_ = open_[~decided]
            codes[unknown] = found
            if len(recent) + len(todo) > RECENT:
                recent.clear()
            recent.update(zip(todo, found.tolist()))
        return codes

    def get(self, key: str) -> RowT | None:
        found = self.locate(key)
        if found is None:
            return None
        seg, row = found
        return self.artifact.row(**{f.name: seg.column(f.name)[row] for f in fields(self.artifact.row)})

    def batches(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """The live rows, segment by segment (oldest first), as record batches of `columns`."""
        for _, _, batch in self.batches_at(columns):
            yield batch

    def batches_at(self, columns: Sequence[str] | None = None) -> Iterator[tuple[int, int, pa.RecordBatch]]:
        """`batches`, each with where its rows come from: the segment's position in this table and the first
        row's number in that segment (a batch is a run of consecutive rows)."""
        shadow = np.zeros(0, np.int64)
        live: list[tuple[Segment, np.ndarray]] = []
        for seg in reversed(self.segments):
            keys = seg.hashes
            mask = ~np.isin(hashes_of_rows(seg), shadow)
            live.append((seg, mask))
            shadow = np.union1d(shadow, keys)
        for at, (seg, mask) in enumerate(reversed(live)):
            batch = seg.batch if columns is None else seg.batch.select(list(columns))
            rows = _confirm_shadowed(seg, mask, self._newer(seg))
            if rows.all():
                yield at, 0, batch
            else:
                # Runs of live rows as zero-copy slices of the mapped batch (`batch.filter` would copy them).
                for start, stop in _runs(rows):
                    yield at, start, batch.slice(start, stop - start)

    def _newer(self, seg: Segment) -> list[Segment]:
        return self.segments[self.segments.index(seg) + 1:]

    def ids(self) -> Iterator[str]:
        for batch in self.batches(["id"]):
            yield from batch.column(0).to_pylist()

    def values(self, column: str) -> list[Any]:
        """One column of every live row, oldest segment first (a whole-table read: tools and tests)."""
        return [v for batch in self.batches([column]) for v in batch.column(0).to_pylist()]


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each run of True in a boolean mask."""
    edges = np.flatnonzero(np.diff(np.concatenate([[False], mask, [False]]).astype(np.int8)))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


def hashes_of_rows(seg: Segment) -> np.ndarray:
    """The key hash of every row, in row order."""
    rows = seg.targets >= 0
    out = np.empty(len(seg), np.int64)
    out[seg.targets[rows]] = seg.hashes[rows]
    return out


def _confirm_shadowed(seg: Segment, candidate_live: np.ndarray, newer: list[Segment]) -> np.ndarray:
    """Rows whose hash a newer segment also holds are shadowed only if the key itself is there."""
    live = candidate_live.copy()
    for row in np.flatnonzero(~candidate_live):
        key = seg.ids[row]
        h = key_hash(key)
        live[row] = all(n.find(key, h) is None for n in newer)
    return live
