"""One immutable segment of an artifact: rows, a key index and tombstones, memory-mapped for reading.

Files, under `segments/<artifact>/` (objects of the index's store, `store/objects.py`; a reader maps local
files: the index's own on a local disk, the node's cached copies of an index on S3):
- `<name>.arrow`: the rows, an uncompressed Arrow IPC file (one record batch), so a reader maps
  it and reads columns in place: processes that map the same segment share its pages;
- `<name>.keys.npy`: int64 (2, m): row 0 the sorted 64-bit hashes of every key the segment
  speaks for, row 1 what each hash points at, a row number (>= 0) or a tombstone (-1 - i);
- `<name>.dead.arrow`: the keys of the tombstones (rows deleted from older segments).

A segment shadows older ones: a key it holds as a row or a tombstone is decided here. Keys are
compared as strings after the hash matches, so a hash collision never mixes two rows.
"""

from __future__ import annotations

import hashlib
from codecs import utf_8_decode as _utf_8_decode
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, overload

import numpy as np
import pyarrow as pa

from hygraph.errors import StoreError
from hygraph.store.artifacts import Artifact, Column, Kind, arrow_type
from hygraph.store.files import fsync_file

DELETED = -1  # `Segment.find`: the key is tombstoned here
SILENT = -2  # `Segment.find_many`: the segment says nothing of the key
# A segment file's name -> a local file holding it (the index's own file, or a node's cached copy), None if absent.
Source = Callable[[str], Optional[Path]]


def key_hash(key: str) -> int:
    """64-bit signed hash of a key (blake2b), the same in every process and on every machine."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def hashes(keys: Iterable[str]) -> np.ndarray:
    """`key_hash` of each key: the digests joined and read as one little-endian array (half the cost of making an
    int of each)."""
    blake2b = hashlib.blake2b
    digests = b"".join([blake2b(k.encode("utf-8"), digest_size=8).digest() for k in keys])
    return np.frombuffer(digests, dtype="<i8").astype(np.int64)


@dataclass(frozen=True)
class SegmentInfo:
    name: str
    rows: int
    dead: int
    bytes: int


def _write_ipc(path: Path, table: pa.Table) -> None:
    """One record batch, also when empty (a segment of tombstones only)."""
    batch = table.combine_chunks().to_batches()
    with pa.OSFile(str(path), "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_batch(batch[0] if len(batch) == 1 else pa.RecordBatch.from_pylist([], schema=table.schema))
    fsync_file(path)


def write_segment(directory: Path, name: str, rows: pa.Table, dead: Sequence[str]) -> SegmentInfo:
    """Write one segment (every file fsynced); `rows` must have unique `id`s, none of them in `dead`."""
    directory.mkdir(parents=True, exist_ok=True)
    ids = rows.column("id").to_pylist()
    if len(set(ids)) != len(ids):
        raise StoreError(f"segment {name}: duplicate ids")
    if set(dead) & set(ids):
        raise StoreError(f"segment {name}: a key is both a row and a tombstone")
    keys = np.concatenate([hashes(ids), hashes(dead)])
    targets = np.concatenate([np.arange(len(ids), dtype=np.int64), -1 - np.arange(len(dead), dtype=np.int64)])
    order = np.argsort(keys, kind="stable")
    files = [directory / f"{name}.arrow", directory / f"{name}.keys.npy"]
    _write_ipc(files[0], rows)
    np.save(files[1], np.stack([keys[order], targets[order]]), allow_pickle=False)
    fsync_file(files[1])
    if dead:
        files.append(directory / f"{name}.dead.arrow")
        _write_ipc(files[2], pa.table({"id": pa.array(list(dead), pa.large_string())}))
    return SegmentInfo(name, len(ids), len(dead), sum(f.stat().st_size for f in files))


def segment_files(directory: Path, name: str) -> list[Path]:
    return [directory / f"{name}{suffix}" for suffix in (".arrow", ".keys.npy", ".dead.arrow")]


def _open_ipc(path: Path) -> pa.RecordBatch:
    reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
    if reader.num_record_batches != 1:
        raise StoreError(f"{path}: expected one record batch, found {reader.num_record_batches}")
    return reader.get_batch(0)


class Strings(Sequence[str]):
    """Strings read in place from mapped buffers: int64 offsets and UTF-8 bytes (a segment's string column,
    a derived string table); a part of them is a view of the same buffers."""

    def __init__(self, offsets: np.ndarray, data: memoryview) -> None:
        self.offsets, self.data = offsets, data
        # The same offsets read as Python ints: indexing a memoryview costs a third of indexing the array.
        self._at = memoryview(offsets)
        self._arrow: pa.Array | None = None  # `many`'s Arrow array over the same buffers, made on first use

    @classmethod
    def of(cls, array: pa.Array) -> "Strings":
        array = array.cast(pa.large_string()) if array.type != pa.large_string() else array
        _, offsets, data = array.buffers()
        # Bytes compare as unsigned: an Arrow buffer's own memoryview format is signed char.
        return cls(np.frombuffer(offsets, dtype=np.int64)[array.offset:array.offset + len(array) + 1],
                   memoryview(data).cast("B") if data is not None else memoryview(b""))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, row: int) -> str: ...

    @overload
    def __getitem__(self, row: slice) -> list[str]: ...

    def __getitem__(self, row: int | slice) -> str | list[str]:
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        if row < 0:
            row += len(self)
            if row < 0:
                raise IndexError(row)
        # Past the end, _at[row + 1] raises the IndexError that ends an iteration. Decoded from the mapped
        # bytes in place (no copy into a bytes object first), by the codec's own function (final: a cut
        # character raises as str() would), cheaper than str(view, "utf-8").
        at = self._at
        return _utf_8_decode(self.data[at[row]:at[row + 1]], "strict", True)[0]

    def many(self, rows: np.ndarray) -> list[str]:
        """The strings of these rows: one Arrow take and conversion over the same buffers (no copy of them), a
        tenth of the cost of decoding row by row from a few dozen rows on."""
        if self._arrow is None:
            self._arrow = pa.LargeStringArray.from_buffers(len(self), pa.py_buffer(self.offsets),
                                                           pa.py_buffer(self.data))
        return self._arrow.take(rows).to_pylist()

    def part(self, start: int, stop: int) -> "Strings":
        return Strings(self.offsets[start:stop + 1], self.data)

    def equals(self, row: int, key: bytes) -> bool:
        at = self._at
        start, end = at[row], at[row + 1]
        return end - start == len(key) and self.data[start:end] == key

    def equals_many(self, rows: np.ndarray, keys: Sequence[bytes]) -> np.ndarray:
        """`equals` of each row and the key at the same place, as a bool array: the lengths compared, then the
        bytes of all the same-length pairs in one array comparison (a Python compare per key cost twice as much)."""
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        starts = self.offsets[rows]
        same = self.offsets[rows + 1] - starts == lengths
        pairs = np.flatnonzero(same & (lengths > 0))
        if len(pairs):
            sizes = lengths[pairs]
            wanted = np.frombuffer(b"".join([keys[i] for i in pairs.tolist()]), dtype=np.uint8)
            firsts = np.cumsum(sizes) - sizes  # each key's first byte in `wanted`
            # Byte j of pair p sits at starts[p] + j in the data and at firsts[p] + j in `wanted`.
            at = np.repeat(starts[pairs] - firsts, sizes) + np.arange(len(wanted))
            differ = np.add.reduceat(np.frombuffer(self.data, dtype=np.uint8)[at] != wanted, firsts)
            same[pairs[differ > 0]] = False
        return same


class _Numbers:
    """A list<int64|float32> column: one numpy view per row."""

    def __init__(self, array: pa.Array) -> None:
        self.offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[array.offset:array.offset + len(array) + 1]
        self.values = array.values.to_numpy(zero_copy_only=True)

    def __getitem__(self, row: int) -> np.ndarray:
        return self.values[self.offsets[row]:self.offsets[row + 1]]

    def many(self, rows: np.ndarray) -> list[np.ndarray]:
        return [self[row] for row in rows.tolist()]


class _Vectors:
    def __init__(self, array: pa.Array) -> None:
        width = array.type.list_size
        self.matrix = array.values.to_numpy(zero_copy_only=True).reshape(-1, width)[array.offset:]

    def __getitem__(self, row: int) -> np.ndarray:
        return self.matrix[row]

    def many(self, rows: np.ndarray) -> list[np.ndarray]:
        return list(self.matrix[rows])


class _Lists:
    """A list<string> column: Arrow builds the Python strings (fastest for long lists)."""

    def __init__(self, array: pa.Array) -> None:
        self.array = array

    def __getitem__(self, row: int) -> tuple[str, ...]:
        return tuple(self.array[row].as_py())

    def many(self, rows: np.ndarray) -> list[tuple[str, ...]]:
        # One Arrow take and conversion for all the rows: a row's own scalar and `as_py` cost more than its strings.
        return list(map(tuple, self.array.take(rows).to_pylist()))


class _Scalars:
    def __init__(self, array: pa.Array) -> None:
        self.values = array.to_numpy(zero_copy_only=True)

    def __getitem__(self, row: int) -> Any:
        return self.values[row].item()

    def many(self, rows: np.ndarray) -> list[Any]:
        return self.values[rows].tolist()


def _reader(column: Column, array: pa.Array) -> Any:
    kind = column.kind
    if kind is Kind.STR:
        return Strings.of(array)
    if kind in (Kind.INT, Kind.FLOAT):
        return _Scalars(array)
    if kind is Kind.STRS:
        return _Lists(array)
    if kind is Kind.VECTOR:
        return _Vectors(array)
    return _Numbers(array)


def _with_defaults(artifact: Artifact[Any], batch: pa.RecordBatch) -> pa.RecordBatch:
    """A segment written before a column was added reads it as the column's default, in the artifact's column
    order, so its batches concatenate with newer segments' (compaction) and its rows read as newer rows do."""
    missing = [c for c in artifact.columns if c.default is not None and c.name not in batch.schema.names]
    if not missing:
        return batch
    arrays = {name: batch.column(name) for name in batch.schema.names}
    for c in missing:
        arrays[c.name] = pa.array([c.default] * batch.num_rows, arrow_type(c, {}))
    names = [c.name for c in artifact.columns if c.name in arrays]
    return pa.RecordBatch.from_arrays([arrays[n] for n in names], schema=pa.schema(
        [batch.schema.field(n) if n in batch.schema.names else pa.field(n, arrays[n].type, nullable=False)
         for n in names]))


class Segment:
    """A mapped segment: `find` a key, read a column value at a row, or scan its batch."""

    def __init__(self, artifact: Artifact[Any], source: Source, name: str) -> None:
        self.artifact, self.name = artifact, name
        try:
            rows, keys = source(f"{name}.arrow"), source(f"{name}.keys.npy")
            if rows is None or keys is None:
                raise StoreError(f"segment {artifact.name}/{name} is missing from the index")
            self.batch = _with_defaults(artifact, _open_ipc(rows))
            index = np.load(keys, mmap_mode="r", allow_pickle=False)
            dead_path = source(f"{name}.dead.arrow")
            self.dead = Strings.of(_open_ipc(dead_path).column(0)) if dead_path is not None else None
        except (OSError, pa.ArrowInvalid) as exc:
            raise StoreError(f"segment {artifact.name}/{name} is unreadable: {exc}") from None
        # Plain ndarray views of the mapping: numpy's memmap subclass adds a Python call to every index.
        self.hashes, self.targets = index[0].view(np.ndarray), index[1].view(np.ndarray)
        # The same read as Python ints (a memoryview's item costs a third of a numpy scalar's): `find` walks them.
        self._hashes_at, self._targets_at = memoryview(self.hashes), memoryview(self.targets)
        self.n_dead = len(self.dead.offsets) - 1 if self.dead is not None else 0
        self._columns: dict[str, Any] = {}
        self.ids = self.column("id")

    def __len__(self) -> int:
        return self.batch.num_rows

    def column(self, name: str) -> Any:
        reader = self._columns.get(name)
        if reader is None:
            col = next(c for c in self.artifact.columns if c.name == name)
            reader = self._columns[name] = _reader(col, self.batch.column(name))
        return reader

    def find(self, key: str, h: int) -> int | None:
        """The row holding `key`, DELETED when this segment tombstones it, None when it says nothing."""
        i = int(self.hashes.searchsorted(h))
        hashes, n, raw = self._hashes_at, len(self.hashes), None
        while i < n and hashes[i] == h:
            target = self._targets_at[i]
            raw = raw if raw is not None else key.encode("utf-8")
            if target >= 0:
                if self.ids.equals(target, raw):
                    return target
            elif self.dead is not None and self.dead.equals(-1 - target, raw):
                return DELETED
            i += 1
        return None

    def find_many(self, keys: Sequence[str], key_hashes: np.ndarray) -> np.ndarray:
        """`find` of each key (its hash at the same place), SILENT where this segment says nothing of it: one
        search of the sorted hashes for all the keys; a key whose hash matches is still compared as a string."""
        out = np.full(len(keys), SILENT, dtype=np.int64)
        n = len(self.hashes)
        if n == 0 or not len(keys):
            return out
        at = self.hashes.searchsorted(key_hashes)
        matched = np.flatnonzero(self.hashes[np.minimum(at, n - 1)] == key_hashes)
        targets = self.targets[at[matched]]
        # The first entry of the hash is nearly always the key (a 64-bit hash), compared for all the keys at once;
        # `find` walks the rest (a tombstone, a collision).
        rows = targets >= 0
        first = np.zeros(len(matched), dtype=bool)
        first[rows] = self.ids.equals_many(targets[rows], [keys[i].encode("utf-8") for i in matched[rows].tolist()])
        out[matched[first]] = targets[first]
        for i in matched[~first].tolist():
            row = self.find(keys[i], int(key_hashes[i]))
            if row is not None:
                out[i] = row
        return out

    def dead_keys(self) -> list[str]:
        return [self.dead[i] for i in range(self.n_dead)] if self.dead is not None else []
