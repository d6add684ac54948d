"""The index directory: numbered versions that share segments, an atomically moved `CURRENT`, GC.

Layout:
- `index.json`: the index's identity (a uid that names its vector collections);
- `segments/<artifact>/<version>-<seq>.*`: immutable segments (`store/segment.py`);
- `versions/NNNNNN.json`: a version's manifest, naming the segments of each artifact;
- `versions/.tmp-N-pid`: version N reserved by a live writer;
- `versions/.collections-N.json`: the vector collections version N's writer creates, recorded before
  it creates them; once N is published its manifest names them, and if N never is (its writer died),
  garbage collection hands them to the caller to drop;
- `CURRENT`: the published version;
- `derived/`: read structures that readers derive from a version, shared by a node's readers
  (`store/derived.py`); a cache, removed with its version.

A new version writes segments for the rows that changed, fsyncs them, then its manifest (temp
file, fsync, rename), then moves `CURRENT` the same way; everything else is referenced from
earlier versions. A reader resolves `CURRENT` once and maps the segments its manifest names,
so it never sees a half-written version; a crash leaves at most segments no manifest names,
which garbage collection removes. Compaction rewrites an artifact's small delta segments (or
all of them) into one, as a version of its own with the same content.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import pyarrow as pa

from hygraph.errors import InputError, StoreError
from hygraph.processes import locked, pid_alive
from hygraph.store import derived
from hygraph.store.artifacts import ARTIFACTS, Artifact, RowT
from hygraph.store.files import fsync_dir, write_atomic
from hygraph.store.manifest import Manifest, TableRef
from hygraph.store.segment import DELETED, key_hash, segment_files, write_segment
from hygraph.store.table import Table

_TMP = re.compile(r"^\.tmp-(\d+)-(\d+)$")
_RECORD = re.compile(r"^\.collections-(\d+)\.json$")
_MANIFEST = re.compile(r"^(\d{6,})\.json$")
_SEGMENT = re.compile(r"^(\d{6,})-(\d+)\.(arrow|keys\.npy|dead\.arrow)$")


class Version:
    """One published version: its manifest and every artifact's segments, mapped at open."""

    def __init__(self, store: "IndexStore", manifest: Manifest) -> None:
        self.store, self.manifest, self.version = store, manifest, manifest.version
        self._tables: dict[str, Table[Any]] = {}
        try:
            for name, ref in manifest.tables.items():
                artifact = ARTIFACTS[name]
                self._tables[name] = Table(artifact, store.segment_dir(name), ref.segments, ref.rows)
        except KeyError as exc:
            raise StoreError(f"index version {self.version} names an unknown artifact {exc}") from None

    def has(self, artifact: Artifact[Any]) -> bool:
        return artifact.name in self._tables

    def table(self, artifact: Artifact[RowT]) -> Table[RowT]:
        try:
            return self._tables[artifact.name]
        except KeyError:
            raise StoreError(f"index version {self.version} has no {artifact.name}") from None


class VersionWriter:
    """Writes the segments of version `version` and commits its manifest; nothing is visible before."""

    def __init__(self, store: "IndexStore", version: int) -> None:
        self.store, self.version = store, version
        self.tables: dict[str, TableRef] = {}
        self.bytes_written = 0
        self._seq = 0

    def _segment(self, artifact: Artifact[Any], rows: pa.Table, dead: Sequence[str]) -> str:
        name = f"{self.version:06d}-{self._seq}"
        self._seq += 1
        info = write_segment(self.store.segment_dir(artifact.name), name, rows, dead)
        self.bytes_written += info.bytes
        return name

    def replace(self, artifact: Artifact[RowT], rows: list[RowT], dims: dict[str, int]) -> None:
        """The artifact is exactly `rows` (a full build): one segment, no history."""
        self.tables[artifact.name] = TableRef([self._segment(artifact, artifact.to_arrow(rows, dims), [])], len(rows))

    def change(self, base: Table[RowT] | None, artifact: Artifact[RowT], rows: list[RowT], dead: Sequence[str],
               dims: dict[str, int]) -> None:
        """`rows` are added or replace rows of `base`; keys in `dead` are deleted; the rest of `base` is kept."""
        segments = list(base.segments_names) if base is not None else []
        count = len(base) if base is not None else 0
        if base is not None:
            count += sum(1 for r in rows if r.id not in base)  # type: ignore[attr-defined]
            count -= sum(1 for k in dead if k in base)
        dead = [k for k in dead if base is not None and k in base]
        if rows or dead:
            segments.append(self._segment(artifact, artifact.to_arrow(rows, dims), dead))
        self.tables[artifact.name] = TableRef(segments, count)

    def keep(self, base: Table[Any], artifact: Artifact[Any]) -> None:
        self.tables[artifact.name] = TableRef(list(base.segments_names), len(base))

    def compact(self, base: Table[Any], artifact: Artifact[Any], full: bool) -> int:
        """Rewrite `base`'s segments as one (`full`), or its delta segments after the first as one.
        Same rows, fewer segments; returns the bytes written."""
        before = self.bytes_written
        names = list(base.segments_names)
        if full or len(names) <= 2:
            merged = pa.Table.from_batches(list(base.batches()), schema=base.segments[0].batch.schema)
            self.tables[artifact.name] = TableRef([self._segment(artifact, merged, [])], len(base))
        else:
            deltas = Table(artifact, self.store.segment_dir(artifact.name), names[1:], 0)
            first = base.segments[0]
            rows = pa.Table.from_batches(list(deltas.batches()), schema=first.batch.schema)
            dead = sorted({k for seg in deltas.segments for k in seg.dead_keys()
                           if deltas.locate(k) is None and first.find(k, key_hash(k)) not in (None, DELETED)})
            self.tables[artifact.name] = TableRef([names[0], self._segment(artifact, rows, dead)], len(base))
        return self.bytes_written - before

    def commit(self, manifest: Manifest, expect_current: int | None = None) -> Manifest:
        """Publish: the manifest, then `CURRENT`. With `expect_current`, refuse (StoreError) when another
        writer published since that version was read (a full `hygraph index` replacing it)."""
        manifest.version, manifest.created = self.version, time.time()
        manifest.tables = dict(self.tables)
        with self.store.lock():
            cur = self.store.current_version()
            if expect_current is not None and cur != expect_current:
                raise StoreError(f"index version {cur} appeared while version {self.version} was being applied on "
                                 f"{expect_current} (a full `hygraph index`?)")
            write_atomic(self.store.versions_dir / f"{self.version:06d}.json", manifest.to_json())
            if cur is None or self.version > cur:
                write_atomic(self.store.root / "CURRENT", f"{self.version}\n".encode())
        return manifest


@dataclass(frozen=True)
class GcResult:
    versions: list[int]
    segment_files: int
    bytes: int
    # Vector collections only the removed versions named, and those of writers that died before
    # publishing: the caller drops them, then calls `forget_collections(orphaned)`.
    collections: set[str]
    orphaned: list[int]  # the dead writers' versions, whose records are kept until then


class IndexStore:
    def __init__(self, index_dir: str | os.PathLike[str], create: bool = False) -> None:
        self.root = Path(index_dir)
        if not self.root.exists():
            if not create:
                raise InputError(f"index directory {self.root} does not exist (build one with `hygraph index`)")
            self.root.mkdir(parents=True)
        elif not self.root.is_dir():
            raise InputError(f"index directory {self.root} is not a directory")
        self.versions_dir = self.root / "versions"
        self.segments_dir = self.root / "segments"
        self.derived_dir = self.root / "derived"  # read structures derived from a version (store/derived.py)
        ident = self.root / "index.json"
        if create:
            self.versions_dir.mkdir(exist_ok=True)
            self.segments_dir.mkdir(exist_ok=True)
            with self.lock():
                if not ident.is_file():
                    write_atomic(ident, json.dumps({"uid": uuid.uuid4().hex[:12], "created": time.time()}).encode())
        self.uid: str | None = json.loads(ident.read_text())["uid"] if ident.is_file() else None

    def segment_dir(self, artifact: str) -> Path:
        return self.segments_dir / artifact

    def lock(self) -> AbstractContextManager[None]:
        return locked(self.root / ".lock")

    def versions(self) -> list[int]:
        if not self.versions_dir.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.versions_dir.iterdir() if (m := _MANIFEST.match(p.name)))

    def current_version(self) -> int | None:
        cur = self.root / "CURRENT"
        return int(cur.read_text().strip()) if cur.is_file() else None

    def manifest(self, version: int | None = None) -> Manifest:
        """A version's manifest alone (no segments mapped): what job status and the updater's checks read."""
        v = self.current_version() if version is None else version
        if v is None:
            raise InputError(f"index directory {self.root} holds no index version (build one with `hygraph index`)")
        path = self.versions_dir / f"{v:06d}.json"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if (self.versions_dir / f"{v:06d}" / "manifest.json").is_file():
                raise StoreError(f"{self.root}: index format 1 (a Parquet directory per version) is no longer "
                                 "read; rebuild the index with `hygraph index`") from None
            raise StoreError(f"index version {v} is missing from {self.versions_dir}") from None
        return Manifest.from_json(data, str(path))

    def open(self, version: int | None = None) -> Version:
        return Version(self, self.manifest(version))

    @contextmanager
    def begin(self, prefer: int | None = None) -> Iterator[VersionWriter]:
        """Reserve the next version number, or `prefer` while it is still above every published version and
        no live writer holds it (a resumed build keeps the number its vector collections are named after);
        on any exception its unpublished segments are removed."""
        with self.lock():
            reserved = [int(m.group(1)) for p in self.versions_dir.iterdir() if (m := _TMP.match(p.name))]
            self._clean_stale_markers()
            live = {int(m.group(1)) for p in self.versions_dir.iterdir() if (m := _TMP.match(p.name))}
            published = self.versions()
            if prefer is not None and prefer > max(published + [0]) and prefer not in live:
                version = prefer
                self._remove_segments_of(version)  # what the dead writer of that number left
            else:
                version = max(published + reserved + [0]) + 1
            marker = self.versions_dir / f".tmp-{version}-{os.getpid()}"
            marker.mkdir()
        writer = VersionWriter(self, version)
        try:
            yield writer
        finally:
            # Whatever happened after the manifest landed, the version is published and keeps its segments.
            if not (self.versions_dir / f"{version:06d}.json").is_file():
                self._remove_segments_of(version)
            shutil.rmtree(marker, ignore_errors=True)

    def _remove_segments_of(self, version: int) -> None:
        prefix = f"{version:06d}-"
        for directory in self.segments_dir.iterdir() if self.segments_dir.is_dir() else ():
            for f in directory.iterdir():
                if f.name.startswith(prefix):
                    f.unlink(missing_ok=True)

    def _clean_stale_markers(self) -> None:
        for p in self.versions_dir.iterdir():
            m = _TMP.match(p.name)
            if m and not pid_alive(int(m.group(2))):
                shutil.rmtree(p, ignore_errors=True)

    def _record_path(self, version: int) -> Path:
        return self.versions_dir / f".collections-{version}.json"

    def record_collections(self, version: int, names: Iterable[str]) -> None:
        """Record (durably) that version `version`'s writer is about to create the vector collections
        `names`, before it creates any: if the version is never published, `gc` returns them."""
        with self.lock():
            path = self._record_path(version)
            known = json.loads(path.read_bytes()) if path.is_file() else []
            write_atomic(path, json.dumps(sorted(set(known) | set(names))).encode())

    def forget_collections(self, versions: Iterable[int]) -> None:
        """Remove the records of `versions`' collections (dropped, or named by a published manifest)."""
        with self.lock():
            for v in versions:
                self._record_path(v).unlink(missing_ok=True)

    def every_collection(self) -> set[str]:
        """Every vector collection this index may have: those its versions name (with what they retired
        but not yet dropped) and those its writers recorded. What deleting the index drops."""
        names: set[str] = set()
        for v in self.versions():
            names.update(self.manifest(v).collections.values())
        for p in self.versions_dir.iterdir():
            if _RECORD.match(p.name):
                try:
                    names.update(str(n) for n in json.loads(p.read_bytes()))
                except ValueError:
                    raise StoreError(f"{p}: not a record of vector collections") from None
        return names

    def _orphaned_collections(self, live: set[int]) -> dict[int, list[str]]:
        """The recorded collections of versions neither published nor being written (their writer died);
        records of published versions are removed (the manifest names those collections)."""
        out: dict[int, list[str]] = {}
        published = set(self.versions())
        for p in self.versions_dir.iterdir():
            m = _RECORD.match(p.name)
            if m is None:
                continue
            v = int(m.group(1))
            if v in published:
                p.unlink()
            elif v not in live:
                try:
                    names = json.loads(p.read_bytes())
                except ValueError:
                    raise StoreError(f"{p}: not a record of vector collections (remove it after dropping "
                                     f"the collections hg_{self.uid}_g{v}_* by hand)") from None
                out[v] = [str(n) for n in names]
        return out

    def gc(self, keep: int, grace_s: float) -> GcResult:
        """Remove versions older than the newest `keep` and older than `grace_s` (CURRENT always stays),
        then every segment file no remaining version names and no live writer is writing.

        A reader keeps the segments it mapped even when their files go; the grace period covers a
        reader that resolved CURRENT just before it moved and has not mapped its segments yet.
        """
        removed: list[int] = []
        n_files = n_bytes = 0
        with self.lock():
            self._clean_stale_markers()
            current = self.current_version()
            now = time.time()
            named: set[str] = set()
            for v in self.versions()[:-keep] if keep > 0 else self.versions():
                path = self.versions_dir / f"{v:06d}.json"
                if v == current or now - path.stat().st_mtime < grace_s:
                    continue
                named.update(self.manifest(v).collections.values())
                path.unlink()
                removed.append(v)
            writing = {int(m.group(1)) for p in self.versions_dir.iterdir() if (m := _TMP.match(p.name))}
            orphans = self._orphaned_collections(writing)
            for names in orphans.values():
                named.update(names)
            referenced: set[tuple[str, str]] = set()
            for v in self.versions():
                manifest = self.manifest(v)
                named.difference_update(manifest.collections.values())
                for name, ref in manifest.tables.items():
                    referenced.update((name, s) for s in ref.segments)
            for directory in self.segments_dir.iterdir() if self.segments_dir.is_dir() else ():
                for f in directory.iterdir():
                    m = _SEGMENT.match(f.name)
                    if m is None:
                        continue
                    name = f"{m.group(1)}-{m.group(2)}"
                    if (directory.name, name) in referenced or int(m.group(1)) in writing:
                        continue
                    n_bytes += f.stat().st_size
                    n_files += 1
                    f.unlink()
            live = set(self.versions())
            derived.remove(self.derived_dir, lambda uid, v, fmt: (uid, fmt) == (self.uid, derived.FORMAT) and v in live)
            fsync_dir(self.versions_dir)
        return GcResult(removed, n_files, n_bytes, named, sorted(orphans))

    def segment_bytes(self, artifact: str, segment: str) -> int:
        return sum(f.stat().st_size for f in segment_files(self.segment_dir(artifact), segment) if f.is_file())

    def size_bytes(self, version: int | None = None) -> int:
        """Bytes of the segments one version references (what a reader of it maps)."""
        total = 0
        for name, ref in self.manifest(version).tables.items():
            total += sum(self.segment_bytes(name, seg) for seg in ref.segments)
        return total

    def collection(self, generation: int, kind: str, revision: int = 0) -> str:
        """Vector collection name: unique per index directory, full build (`generation`) and rebuild of
        one kind within it (`revision`, the version that introduced it: a hyperbolic recalibration).
        The kind stays the last `_` field (Milvus rows are tagged with it)."""
        if self.uid is None:
            raise StoreError(f"{self.root} has no index.json")
        return f"hg_{self.uid}_g{generation}{f'r{revision}' if revision else ''}_{kind}"
