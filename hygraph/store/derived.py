"""A version's derived read structures as files that every reader on a node maps: computed once, shared.

Some read structures follow from a whole version and are not stored with it (the BM25 statistics
and the hybrid graph's walk span every document; a version writes only the rows that changed). A
reader derives them when it loads a version, and N Retriever replicas on a node held N private
copies of them. Here the first reader writes them as plain arrays under
`derived/<index uid>-<version>-f<format>/` of the index directory and every reader maps those files, so the
replicas of a node share one copy of their pages.

- numbers: one `.npy` file per array, mapped read-only;
- strings: offsets (int64) and UTF-8 bytes, read in place, with a sorted 64-bit hash index
  (`segment.key_hash`, like a segment's key index) when they are looked up by value.

The files are a cache, not part of the version: written into a temporary directory and renamed
into place (a reader sees all of them or none), computed under a lock so that replicas loading the
same new version compute it once. They weigh about a seventh of the version's segments and every
loaded version has its own, so they do not wait out the versions' grace period: a reader that has
mapped a version removes the directories of older ones (readers still on those keep their
mappings; one that loads an older version later derives it again), and garbage collection removes
any left by versions it removes.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from hygraph.errors import StoreError
from hygraph.processes import locked
from hygraph.store.segment import Strings, hashes, key_hash

# The layout below; a reader of another format recomputes. 2: what store/delta.py patches from; 3: graph.score.
FORMAT = 3


class StringIndex(Mapping[str, int]):
    """Value -> position of mapped strings, through their sorted hashes; the bytes are compared after a hash
    matches, so a collision never answers a wrong position."""

    # Answers kept, found or not: each query looks up a few hundred ids (its walk's seeds: the chunks the searches
    # found), many of them the same as the queries before it asked for, and a hash lookup costs ~2 us.
    RECENT = 4096

    def __init__(self, strings: Strings, sorted_hashes: np.ndarray, rows: np.ndarray) -> None:
        self.strings, self.hashes, self.rows = strings, sorted_hashes, rows
        self._recent: dict[str, int | None] = {}

    def get(self, key: object, default: int | None = None) -> int | None:  # type: ignore[override]
        if not isinstance(key, str):
            return default
        # -1: not asked yet (rows are >= 0). One read, not `in` then `[]`: another thread may clear it between.
        row = self._recent.get(key, -1)
        if row == -1:
            if len(self._recent) >= self.RECENT:
                self._recent.clear()
            row = self._recent[key] = self._find(key)
        return default if row is None else row

    def _find(self, key: str) -> int | None:
        h = key_hash(key)
        i = int(self.hashes.searchsorted(h))
        raw = None
        while i < len(self.hashes) and self.hashes[i] == h:
            row = int(self.rows[i])
            raw = raw if raw is not None else key.encode("utf-8")
            if self.strings.equals(row, raw):
                return row
            i += 1
        return None

    def __getitem__(self, key: str) -> int:
        row = self.get(key)
        if row is None:
            raise KeyError(key)
        return row

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return len(self.strings)

    def __iter__(self) -> Iterator[str]:
        return iter(self.strings)


class Derived:
    """The mapped files of one derived directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _load(self, name: str) -> np.ndarray:
        try:
            # A plain ndarray view of the mapping: numpy's memmap subclass adds a Python call to every index.
            return np.load(self.directory / f"{name}.npy", mmap_mode="r", allow_pickle=False).view(np.ndarray)
        except (OSError, ValueError) as exc:
            raise StoreError(f"derived file {self.directory.name}/{name}.npy is unreadable: {exc}") from None

    def has(self, name: str) -> bool:
        """Whether the array or string table `name` was written."""
        return any((self.directory / f"{name}{suffix}.npy").is_file() for suffix in ("", ".offsets"))

    def array(self, name: str) -> np.ndarray:
        return self._load(name)

    def strings(self, name: str) -> Strings:
        return Strings(self._load(f"{name}.offsets"), memoryview(self._load(f"{name}.bytes")).cast("B"))

    def index(self, name: str) -> StringIndex:
        keys = self._load(f"{name}.keys")
        return StringIndex(self.strings(name), keys[0], keys[1])


@dataclass(frozen=True)
class RawStrings:
    """A string table already laid out as files hold it (patched from another directory's, store/delta.py):
    int64 offsets, UTF-8 bytes and, for an indexed table, its (2, n) sorted hashes and rows."""

    offsets: np.ndarray
    data: np.ndarray
    keys: np.ndarray | None = None


def write(directory: Path, arrays: Mapping[str, np.ndarray], strings: Mapping[str, Sequence[str] | RawStrings],
          indexed: Sequence[str] = ()) -> None:
    """Arrays and string tables into `directory` (created); `indexed` names the tables looked up by value."""
    directory.mkdir(parents=True)
    for name, array in arrays.items():
        np.save(directory / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
    for name, values in strings.items():
        if isinstance(values, RawStrings):
            np.save(directory / f"{name}.offsets.npy", values.offsets, allow_pickle=False)
            np.save(directory / f"{name}.bytes.npy", values.data, allow_pickle=False)
            if values.keys is not None:
                np.save(directory / f"{name}.keys.npy", values.keys, allow_pickle=False)
            continue
        encoded = pa.array(list(values), pa.large_string())
        _, offsets, data = encoded.buffers()
        np.save(directory / f"{name}.offsets.npy", np.frombuffer(offsets, dtype=np.int64)[:len(encoded) + 1],
                allow_pickle=False)
        np.save(directory / f"{name}.bytes.npy",
                np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8),
                allow_pickle=False)
        if name in indexed:
            keys = hashes(values)
            order = np.argsort(keys, kind="stable")
            np.save(directory / f"{name}.keys.npy", np.stack([keys[order], order.astype(np.int64)]),
                    allow_pickle=False)


def directory_name(uid: str | None, version: int) -> str:
    return f"{uid or 'index'}-{version:06d}-f{FORMAT}"


_NAME = re.compile(r"^(?P<uid>\w+)-(?P<version>\d{6,})-f(?P<format>\d+)$")


def parse_name(name: str) -> tuple[str, int, int] | None:
    """(uid, version, format) of a derived directory's name, None for another name."""
    m = _NAME.match(name)
    return (m["uid"], int(m["version"]), int(m["format"])) if m is not None else None


def shared(root: Path, name: str, compute: Callable[[Path], None]) -> Derived:
    """The derived directory `root/name`, computed by `compute(directory)` where no process has yet.

    Raises OSError where `root` cannot be written (the caller keeps the structures in memory).
    """
    final = root / name
    if not (final / "DONE").is_file():
        with locked(root / f"{name}.lock"):
            if not (final / "DONE").is_file():
                tmp = root / f".{name}.{os.getpid()}.tmp"
                shutil.rmtree(tmp, ignore_errors=True)
                try:
                    compute(tmp)
                    (tmp / "DONE").touch()
                    shutil.rmtree(final, ignore_errors=True)  # a directory a crash left without DONE
                    try:
                        os.rename(tmp, final)
                    except OSError:
                        if not (final / "DONE").is_file():  # not another process's finished copy
                            raise
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    return Derived(final)


def remove(root: Path, keep: Callable[[str, int, int], bool]) -> int:
    """Remove the derived directories (with their lock and temporary files) for which `keep(uid, version,
    format)` is false; returns how many directories went. Other files are left alone. A reader that mapped
    files of a removed directory keeps reading them: a mapping outlives the file's name."""
    removed = 0
    for path in root.iterdir() if root.is_dir() else ():
        m = _NAME.match(path.name.removeprefix(".").split(".")[0])
        if m is None or keep(m["uid"], int(m["version"]), int(m["format"])):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed += not path.name.startswith(".")
        else:
            path.unlink(missing_ok=True)
    return removed
