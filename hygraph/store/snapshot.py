"""Versioned index snapshots: numbered directories of Parquet tables and arrays, and a `CURRENT` pointer.

A version is written into a temporary directory, fsynced, renamed into place, and only
then does `CURRENT` move (temp file, fsync, rename). Readers resolve `CURRENT` once and
read an immutable directory, so they never see a half-written version, and any number
of processes can read while one writes.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hygraph.errors import InputError, StoreError
from hygraph.processes import pid_alive

_TMP = re.compile(r"^\.tmp-(\d+)-(\d+)$")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with path.open("rb") as fh:
        os.fsync(fh.fileno())


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class Snapshot:
    """One immutable version: `manifest`, Parquet tables and numpy arrays (memory-mapped)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.manifest: dict[str, Any] = json.loads((path / "manifest.json").read_text())
        self.version: int = int(self.manifest["version"])

    def has(self, name: str) -> bool:
        return (self.path / f"{name}.parquet").is_file() or (self.path / f"{name}.npy").is_file()

    def table(self, name: str) -> pa.Table:
        path = self.path / f"{name}.parquet"
        if not path.is_file():
            raise StoreError(f"version {self.version} has no table '{name}'")
        return pq.read_table(path)

    def array(self, name: str) -> np.ndarray:
        path = self.path / f"{name}.npy"
        if not path.is_file():
            raise StoreError(f"version {self.version} has no array '{name}'")
        return np.load(path, mmap_mode="r", allow_pickle=False)


class VersionWriter:
    """Collects the files of a new version in a temp directory; `commit` publishes it."""

    def __init__(self, store: "SnapshotStore", version: int, tmp: Path) -> None:
        self.store = store
        self.version = version
        self.tmp = tmp

    def write_table(self, name: str, table: pa.Table | dict[str, Any]) -> None:
        tbl = table if isinstance(table, pa.Table) else pa.table(table)
        pq.write_table(tbl, self.tmp / f"{name}.parquet")

    def write_array(self, name: str, array: np.ndarray) -> None:
        np.save(self.tmp / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)

    def commit(self, manifest: dict[str, Any]) -> Snapshot:
        manifest = {**manifest, "version": self.version, "created": time.time()}
        (self.tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        for f in self.tmp.iterdir():
            _fsync_file(f)
        _fsync_dir(self.tmp)
        final = self.store.versions_dir / f"{self.version:06d}"
        os.replace(self.tmp, final)
        _fsync_dir(self.store.versions_dir)
        self.store._advance_current(self.version)
        return Snapshot(final)


class SnapshotStore:
    """The index directory: `index.json` (identity), `versions/NNNNNN/`, `CURRENT`."""

    def __init__(self, index_dir: str | os.PathLike[str], create: bool = False) -> None:
        self.root = Path(index_dir)
        if not self.root.exists():
            if not create:
                raise InputError(f"index directory {self.root} does not exist (build one with `hygraph index`)")
            self.root.mkdir(parents=True)
        elif not self.root.is_dir():
            raise InputError(f"index directory {self.root} is not a directory")
        self.versions_dir = self.root / "versions"
        ident = self.root / "index.json"
        if create:
            self.versions_dir.mkdir(exist_ok=True)
            with self._lock():
                if not ident.is_file():
                    write_atomic(ident, json.dumps({"uid": uuid.uuid4().hex[:12], "created": time.time()}).encode())
        self.uid: str | None = json.loads(ident.read_text())["uid"] if ident.is_file() else None

    @contextmanager
    def _lock(self) -> Iterator[None]:
        with (self.root / ".lock").open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def versions(self) -> list[int]:
        if not self.versions_dir.is_dir():
            return []
        return sorted(int(p.name) for p in self.versions_dir.iterdir() if p.name.isdigit())

    def current_version(self) -> int | None:
        cur = self.root / "CURRENT"
        return int(cur.read_text().strip()) if cur.is_file() else None

    def open(self, version: int | None = None) -> Snapshot:
        v = self.current_version() if version is None else version
        if v is None:
            raise InputError(f"index directory {self.root} holds no index version (build one with `hygraph index`)")
        path = self.versions_dir / f"{v:06d}"
        if not (path / "manifest.json").is_file():
            raise StoreError(f"index version {v} is missing from {self.versions_dir}")
        return Snapshot(path)

    @contextmanager
    def begin(self) -> Iterator[VersionWriter]:
        """Reserve the next version number; on any exception the temp directory is removed."""
        with self._lock():
            reserved = [int(m.group(1)) for p in self.versions_dir.iterdir()
                        if (m := _TMP.match(p.name))]
            self._clean_stale_tmp()
            version = max(self.versions() + reserved + [0]) + 1
            tmp = self.versions_dir / f".tmp-{version}-{os.getpid()}"
            tmp.mkdir()
        writer = VersionWriter(self, version, tmp)
        try:
            yield writer
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _clean_stale_tmp(self) -> None:
        for p in self.versions_dir.iterdir():
            m = _TMP.match(p.name)
            if m and not pid_alive(int(m.group(2))):
                shutil.rmtree(p, ignore_errors=True)

    def _advance_current(self, version: int) -> None:
        with self._lock():
            cur = self.current_version()
            if cur is None or version > cur:
                write_atomic(self.root / "CURRENT", f"{version}\n".encode())

    def gc(self, keep: int, grace_s: float) -> list[int]:
        """Remove versions older than the newest `keep` and older than `grace_s`; CURRENT always stays.

        Readers that still hold an older version read memory they loaded already; the grace
        period covers a reader that resolved CURRENT just before it moved.
        """
        current = self.current_version()
        now = time.time()
        removed = []
        for v in self.versions()[:-keep]:
            path = self.versions_dir / f"{v:06d}"
            if v == current or now - path.stat().st_mtime < grace_s:
                continue
            # Rename first, so no reader ever opens a half-deleted version.
            doomed = self.versions_dir / f".gc-{v}-{os.getpid()}"
            os.replace(path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
            removed.append(v)
        return removed

    def collection(self, generation: int, kind: str, revision: int = 0) -> str:
        """Vector collection name: unique per index directory, full build (`generation`) and rebuild of
        one kind within it (`revision`, the version that introduced it: a hyperbolic recalibration).
        The kind stays the last `_` field (Milvus rows are tagged with it)."""
        if self.uid is None:
            raise StoreError(f"{self.root} has no index.json")
        return f"hg_{self.uid}_g{generation}{f'r{revision}' if revision else ''}_{kind}"
