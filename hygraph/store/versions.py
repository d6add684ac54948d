"""An index: numbered versions that share segments, a `CURRENT` pointer, a writer lease, GC.

An index lives in a local directory or under an S3 prefix (`s3://bucket/prefix`); every file below is an
object of `store/objects.py`, and nothing else opens them. Layout (keys under the index root):
- `index.json`: the index's identity (a uid that names its vector collections), created once;
- `segments/<artifact>/<version>-<seq>.*`: immutable segments (`store/segment.py`);
- `versions/NNNNNN.json`: a version's manifest, naming the segments of each artifact;
- `CURRENT`: the version readers load;
- `leases/writer/<epoch>.json`: the writer lease (`store/lease.py`): one writer at a time;
- `leases/readers/<holder>.json`: the version each reader serves; garbage collection spares those versions;
- `collections/NNNNNN.json`: the vector collections version N's writer creates, recorded before it creates
  them; once N is published its manifest names them, and if N never is (its writer died), garbage
  collection hands them to the caller to drop.
Node-local, never shared (`Objects.local_dir`: the directory itself, or a directory per index under
`store.cache_dir` for S3): `derived/`, read structures readers derive from a version (`store/derived.py`),
and for S3 the cached copies of segments that readers map.

A writer takes the lease (`begin`), numbers its version past every published one and the last holder's,
writes segments for the rows that changed (in place on a local disk; on S3 into a local staging directory,
uploaded, and kept as the node's cached copy), then commits: it checks it still holds the lease (fencing),
writes the manifest with `put_if_absent` (of two writers of version N only one publishes it; the other gets
a StoreError), then moves `CURRENT`. Readers follow `CURRENT` only: a writer that died between the manifest
and `CURRENT` left a published version that the next writer makes current when it takes the lease (a
reader never has to list versions). A reader resolves `CURRENT` once and maps the segments its manifest
names, so it never sees a half-written version; a crash leaves at most segments no manifest names, which
garbage collection removes. Compaction rewrites an artifact's small delta segments (or all of them) into
one, as a version of its own with the same content.

No file lock or process id is needed for correctness: the lease and the conditional manifest write decide
between writers on one machine or many.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator, Sequence

import pyarrow as pa

from hygraph.errors import InputError, StoreError
from hygraph.store import derived, lease
from hygraph.store.artifacts import ARTIFACTS, Artifact, RowT
from hygraph.store.lease import LeaseRecord, ReaderLease, WriterLease
from hygraph.store.manifest import Manifest, TableRef
from hygraph.store.objects import DEFAULT_CACHE_BYTES, Objects, open_objects
from hygraph.store.segment import DELETED, Source, key_hash, segment_files, write_segment
from hygraph.store.table import Table

_MANIFEST = re.compile(r"^versions/(\d{6,})\.json$")
_RECORD = re.compile(r"^collections/(\d{6,})\.json$")
_SEGMENT = re.compile(r"^segments/([^/]+)/(\d{6,})-(\d+)\.(arrow|keys\.npy|dead\.arrow)$")
_SEGMENT_NAME = re.compile(r"^\d{6,}-\d+$")


class Version:
    """One published version: its manifest and every artifact's segments, mapped at open."""

    def __init__(self, store: "IndexStore", manifest: Manifest, reuse: "Version | None" = None) -> None:
        self.store, self.manifest, self.version = store, manifest, manifest.version
        self._tables: dict[str, Table[Any]] = {}
        # A segment's name is never given to other content once published, so the mapped segments of `reuse`
        # (an earlier version of this store) that this one names again are shared, not opened again.
        before = reuse._tables if reuse is not None and reuse.store is store else {}
        try:
            for name, ref in manifest.tables.items():
                artifact = ARTIFACTS[name]
                self._tables[name] = Table(artifact, store.segment_source(name), ref.segments, ref.rows,
                                           reuse=before.get(name))
        except KeyError as exc:
            raise StoreError(f"index version {self.version} names an unknown artifact {exc}") from None

    def has(self, artifact: Artifact[Any]) -> bool:
        return artifact.name in self._tables

    def table(self, artifact: Artifact[RowT]) -> Table[RowT]:
        try:
            return self._tables[artifact.name]
        except KeyError:
            raise StoreError(f"index version {self.version} has no {artifact.name}") from None


@dataclass(frozen=True)
class WrittenTable:
    """A table a writer stored as one segment: what a resumed writer of the same version checks and keeps
    (`VersionWriter.reuse`) instead of writing it again."""

    segment: str
    rows: int
    files: dict[str, int]  # file name -> bytes, every file of the segment


class VersionWriter:
    """Writes the segments of version `version` and commits its manifest; nothing is visible before.
    `first_seq`: past the segments of this version kept from its dead writer, whose names stay theirs."""

    def __init__(self, store: "IndexStore", version: int, hold: WriterLease, staging: Path,
                 first_seq: int = 0) -> None:
        self.store, self.version, self.lease, self.staging = store, version, hold, staging
        self.tables: dict[str, TableRef] = {}
        self.bytes_written = 0
        self.committed: Manifest | None = None  # once `commit` returned: what the publisher retires after it
        self._seq = first_seq
        self._files: dict[str, dict[str, int]] = {}  # segment -> its files' sizes, as stored

    def _segment(self, artifact: Artifact[Any], rows: pa.Table, dead: Sequence[str]) -> str:
        name = f"{self.version:06d}-{self._seq}"
        self._seq += 1
        directory = self.staging / "segments" / artifact.name
        info = write_segment(directory, name, rows, dead)
        files = self._files[name] = {}
        for f in segment_files(directory, name):
            if f.is_file():
                files[f.name] = f.stat().st_size
                self.store.objects.put_file(f"segments/{artifact.name}/{f.name}", f)
        self.bytes_written += info.bytes
        return name

    def written(self, artifact: Artifact[Any]) -> WrittenTable:
        """What `replace` stored for `artifact` (one segment)."""
        ref = self.tables[artifact.name]
        (segment,) = ref.segments
        return WrittenTable(segment, ref.rows, dict(self._files[segment]))

    def reuse(self, artifact: Artifact[Any], table: WrittenTable) -> bool:
        """Take `table` as `artifact`'s rows when it is a segment of this version that is stored whole (every
        file there at the size written: the dead writer of this version put it before it died, and `begin`
        kept it); False, and nothing taken, otherwise."""
        if not table.segment.startswith(f"{self.version:06d}-") or not table.files:
            return False
        for name, size in table.files.items():
            if self.store.objects.size(f"segments/{artifact.name}/{name}") != size:
                return False
        self.tables[artifact.name] = TableRef([table.segment], table.rows)
        return True

    def replace(self, artifact: Artifact[RowT], rows: list[RowT], dims: dict[str, int]) -> None:
        """The artifact is exactly `rows` (a full build): one segment, no history."""
        self.replace_table(artifact, artifact.to_arrow(rows, dims))

    def replace_table(self, artifact: Artifact[Any], table: pa.Table) -> None:
        """`replace` with rows already in the artifact's Arrow schema (a build's stage that made them in
        another process)."""
        self.tables[artifact.name] = TableRef([self._segment(artifact, table, [])], table.num_rows)

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
            deltas = Table(artifact, self.store.segment_source(artifact.name), names[1:], 0)
            first = base.segments[0]
            rows = pa.Table.from_batches(list(deltas.batches()), schema=first.batch.schema)
            dead = sorted({k for seg in deltas.segments for k in seg.dead_keys()
                           if deltas.locate(k) is None and first.find(k, key_hash(k)) not in (None, DELETED)})
            self.tables[artifact.name] = TableRef([names[0], self._segment(artifact, rows, dead)], len(base))
        return self.bytes_written - before

    def commit(self, manifest: Manifest, expect_current: int | None = None) -> Manifest:
        """Publish: the manifest (created only if no other writer published this version), then `CURRENT`.
        With `expect_current`, refuse (StoreError) when another writer published since that version was read
        (a full `hygraph index` replacing it). A writer whose lease was taken over is refused too."""
        manifest.version, manifest.created = self.version, time.time()
        manifest.tables = dict(self.tables)
        self.lease.check()
        cur = self.store.current_version()
        if expect_current is not None and cur != expect_current:
            raise StoreError(f"index version {cur} appeared while version {self.version} was being applied on "
                             f"{expect_current} (a full `hygraph index`?)")
        if not self.store.objects.put_if_absent(_manifest_key(self.version), manifest.to_json()):
            raise StoreError(f"{self.store.uri}: index version {self.version} was published by another writer "
                             "first; this one is not published")
        if cur is None or self.version > cur:
            self.store.objects.put("CURRENT", f"{self.version}\n".encode())
        self.committed = manifest
        return manifest


_SIZES_KEPT = 100_000  # segment sizes an IndexStore remembers

def _manifest_key(version: int) -> str:
    return f"versions/{version:06d}.json"


def _record_key(version: int) -> str:
    return f"collections/{version:06d}.json"


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
    """The index at `index_dir`: a local directory or `s3://bucket/prefix` (`store/objects.py`).
    `cache_dir`/`cache_bytes`: this node's copies of an S3 index's segments (config `store.*`);
    `lease_s`: the term of the writer lease."""

    def __init__(self, index_dir: str | os.PathLike[str], create: bool = False, cache_dir: str = "",
                 cache_bytes: int = DEFAULT_CACHE_BYTES, lease_s: float = lease.DEFAULT_TERM_S) -> None:
        self.objects: Objects = open_objects(index_dir, cache_dir, cache_bytes, create=create)
        self._segment_sizes: dict[tuple[str, str], int] = {}
        self.uri = self.objects.uri
        self.lease_s = lease_s
        self.derived_dir = self.objects.local_dir / "derived"  # this node's read structures (store/derived.py)
        if create:
            self.objects.put_if_absent("index.json", json.dumps({"uid": uuid.uuid4().hex[:12],
                                                                 "created": time.time()}).encode())
        ident = self.objects.get("index.json")
        try:
            self.uid: str | None = json.loads(ident)["uid"] if ident is not None else None
        except (ValueError, KeyError, TypeError):
            raise StoreError(f"{self.uri}/index.json: not an index identity") from None

    def reader_lease(self) -> ReaderLease:
        """A reader's lease on the version it serves (`hold` it before reading that version)."""
        return ReaderLease(self.objects, self.lease_s)

    @property
    def local_dir(self) -> Path:
        """This node's directory for the index: build checkpoints, derived structures, the LLM cache."""
        return self.objects.local_dir

    def segment_source(self, artifact: str) -> Source:
        return lambda name: self.objects.local_path(f"segments/{artifact}/{name}")

    def versions(self) -> list[int]:
        return sorted(int(m.group(1)) for k in self.objects.list("versions/") if (m := _MANIFEST.match(k)))

    def current_version(self) -> int | None:
        data = self.objects.get("CURRENT")
        if data is None:
            return None
        try:
            return int(data.decode().strip())
        except ValueError:
            raise StoreError(f"{self.uri}/CURRENT: not a version number") from None

    def manifest(self, version: int | None = None) -> Manifest:
        """A version's manifest alone (no segments mapped): what job status and the updater's checks read."""
        v = self.current_version() if version is None else version
        if v is None:
            raise InputError(f"index {self.uri} holds no index version (build one with `hygraph index`)")
        data = self.objects.get(_manifest_key(v))
        if data is None:
            if self.objects.size(f"versions/{v:06d}/manifest.json") is not None:
                raise StoreError(f"{self.uri}: index format 1 (a Parquet directory per version) is no longer "
                                 "read; rebuild the index with `hygraph index`") from None
            raise StoreError(f"index version {v} is missing from {self.uri}") from None
        return Manifest.from_json(data, f"{self.uri}/{_manifest_key(v)}")

    def open(self, version: int | None = None, reuse: Version | None = None) -> Version:
        """Version `version` (None: the current one), sharing the segments it has in common with `reuse`."""
        return Version(self, self.manifest(version), reuse)

    def is_published(self, version: int) -> bool:
        """Whether version `version`'s manifest landed: then it is published, even if its writer failed before
        moving `CURRENT` (the next writer moves it)."""
        return self.objects.size(_manifest_key(version)) is not None

    @contextmanager
    def begin(self, prefer: int | None = None, wait_s: float | None = None,
              waiting: Callable[[str], None] | None = None,
              keep: Iterable[tuple[str, str]] = ()) -> Iterator[VersionWriter]:
        """Take the writer lease (waiting at most `wait_s` for another writer, None: as long as it writes, and
        telling `waiting` who holds it while it waits, WriterLease.acquire) and number the next version: past
        every published one and the one the previous holder was writing, or
        `prefer` while that is still above every published version (a resumed build keeps the number its
        vector collections are named after). When the previous holder died writing that number, its segments
        are removed but those named in `keep` ((artifact, segment) pairs: what a resumed build recorded as
        stored whole, `VersionWriter.reuse`). On any exception the version's unpublished segments are removed."""
        hold = WriterLease(self.objects, self.lease_s)
        seen: dict[str, int] = {}

        def number(previous: LeaseRecord | None) -> int:
            seen["top"] = top = max(self.versions(), default=0)
            seen["last"] = last = previous.version if previous is not None else 0
            return prefer if prefer is not None and prefer > top else max(top, last) + 1

        version = hold.acquire(number, wait_s, waiting)
        try:
            current = self.current_version()
            if seen["top"] and (current is None or seen["top"] > current):
                # A writer died between its manifest and CURRENT: the version is published, make it current.
                self.objects.put("CURRENT", f"{seen['top']}\n".encode())
            kept = {(a, s) for a, s in keep if _SEGMENT_NAME.match(s) and int(s.split("-")[0]) == version}
            if seen["last"] == version:
                # The previous holder died writing this number (numbers only grow: no earlier one did).
                self._remove_segments_of(version, kept)
            first_seq = 1 + max((int(s.split("-")[1]) for _, s in kept), default=-1)
            with self._staging() as staging:
                try:
                    yield VersionWriter(self, version, hold, staging, first_seq)
                finally:
                    # Whatever happened after the manifest landed, the version is published and keeps its segments.
                    if not self.is_published(version):
                        self._remove_segments_of(version)
        finally:
            hold.release()

    @contextmanager
    def _staging(self) -> Iterator[Path]:
        """Where a writer writes its segments before they become objects: the index itself on a local disk."""
        directory = self.objects.staging_dir()
        try:
            yield directory
        finally:
            if directory != self.objects.local_dir:
                shutil.rmtree(directory, ignore_errors=True)

    def _remove_segments_of(self, version: int, keep: Collection[tuple[str, str]] = ()) -> None:
        for key in self.objects.list("segments/"):
            m = _SEGMENT.match(key)
            if m and int(m.group(2)) == version and (m.group(1), f"{m.group(2)}-{m.group(3)}") not in keep:
                self.objects.delete(key)

    def record_collections(self, version: int, names: Iterable[str]) -> None:
        """Record (durably) that version `version`'s writer is about to create the vector collections
        `names`, before it creates any: if the version is never published, `gc` returns them. Only the
        holder of the writer lease for `version` calls this."""
        known = self.recorded_collections(version)
        self.objects.put(_record_key(version), json.dumps(sorted(set(known) | set(names))).encode())

    def _parse_record(self, data: bytes, version: int) -> list[str]:
        try:
            names = json.loads(data)
            if not isinstance(names, list):
                raise ValueError("not a list")
        except ValueError:
            raise StoreError(f"{self.uri}/{_record_key(version)}: not a record of vector collections (remove it "
                             f"after dropping the collections hg_{self.uid}_g{version}_* by hand)") from None
        return [str(n) for n in names]

    def _records(self) -> dict[int, str]:
        return {int(m.group(1)): k for k in self.objects.list("collections/") if (m := _RECORD.match(k))}

    def recorded_collections(self, version: int) -> list[str]:
        """The vector collections version `version`'s writer recorded (none once they are forgotten)."""
        data = self.objects.get(_record_key(version))
        return self._parse_record(data, version) if data is not None else []

    def forget_collections(self, versions: Iterable[int]) -> None:
        """Remove the records of `versions`' collections (dropped, or named by a published manifest)."""
        for v in versions:
            self.objects.delete(_record_key(v))

    def every_collection(self) -> set[str]:
        """Every vector collection this index may have: those its versions name (with what they retired
        but not yet dropped) and those its writers recorded. What deleting the index drops."""
        names: set[str] = set()
        for v in self.versions():
            names.update(self.manifest(v).collections.values())
        for v, key in self._records().items():
            data = self.objects.get(key)
            if data is not None:
                names.update(self._parse_record(data, v))
        return names

    def gc(self, keep: int, grace_s: float) -> GcResult:
        """Remove versions older than the newest `keep` and older than `grace_s` that no live reader lease
        names (CURRENT always stays), then every segment no remaining version names and the lease's holder
        is not writing.

        Segments and records are listed before the lease is read, and versions after: a writer that took the
        lease after that read writes only files the listing did not see. A reader names its version in its
        lease before it reads it; the grace period covers a reader that resolved CURRENT just before it moved
        and has not written its lease yet.
        """
        segment_keys = self.objects.list("segments/")
        records = self._records()
        epochs = lease.epochs(self.objects)
        holder = lease.newest(self.objects)[1]
        live = holder is not None and holder.live()
        served = lease.served_versions(self.objects)
        current = self.current_version()
        before = self.versions()

        def writing(v: int) -> bool:
            return live and holder.version == v  # type: ignore[union-attr]

        removed: list[int] = []
        now = time.time()
        named: set[str] = set()
        for v in before[:-keep] if keep > 0 else before:
            manifest = self.manifest(v)
            if v == current or v in served or now - manifest.created < grace_s:
                continue
            named.update(manifest.collections.values())
            self.objects.delete(_manifest_key(v))
            removed.append(v)
        remaining = [v for v in before if v not in removed]
        orphans: dict[int, list[str]] = {}
        for v, key in records.items():
            if v in remaining:
                self.objects.delete(key)  # the manifest names them
            elif not writing(v):
                data = self.objects.get(key)
                if data is not None:
                    orphans[v] = self._parse_record(data, v)
        for names in orphans.values():
            named.update(names)
        referenced: set[tuple[str, str]] = set()
        for v in remaining:
            manifest = self.manifest(v)
            named.difference_update(manifest.collections.values())
            for name, ref in manifest.tables.items():
                referenced.update((name, s) for s in ref.segments)
        n_files = n_bytes = 0
        for key in segment_keys:
            m = _SEGMENT.match(key)
            if m is None or (m.group(1), f"{m.group(2)}-{m.group(3)}") in referenced or writing(int(m.group(2))):
                continue
            n_bytes += self.objects.delete(key)
            n_files += 1
        for epoch in epochs[:-1]:  # past holders' records; the newest is the lease
            self.objects.delete(lease.key(epoch))
        for epoch in lease.epochs(self.objects, lease.UPDATER)[:-1]:  # the same for the updater's lease
            self.objects.delete(lease.key(epoch, lease.UPDATER))
        kept = set(remaining)
        derived.remove(self.derived_dir, lambda uid, v, fmt: (uid, fmt) == (self.uid, derived.FORMAT) and v in kept)
        return GcResult(removed, n_files, n_bytes, named, sorted(orphans))

    def purge(self) -> int:
        """Delete every object of this index, its identity last, so that a removal cut short still shows an
        index to remove again; returns how many objects went. The caller has dropped its collections."""
        keys = [k for k in self.objects.list("") if k != "index.json"]
        for key in keys:
            self.objects.delete(key)
        self.objects.delete("index.json")
        return len(keys) + 1

    def segment_bytes(self, artifact: str, segment: str) -> int:
        """A committed segment's bytes, asked once: a segment never changes, and on object storage each of its
        files is a HEAD request (compaction's check asks for every segment of every artifact)."""
        key = (artifact, segment)
        found = self._segment_sizes.get(key)
        if found is None:
            found = sum(self.objects.size(f"segments/{artifact}/{segment}{suffix}") or 0
                        for suffix in (".arrow", ".keys.npy", ".dead.arrow"))
            if len(self._segment_sizes) >= _SIZES_KEPT:
                self._segment_sizes.clear()
            self._segment_sizes[key] = found
        return found

    def size_bytes(self, version: int | None = None) -> int:
        """Bytes of the segments one version references (what a reader of it maps)."""
        total = 0
        for name, ref in self.manifest(version).tables.items():
            total += sum(self.segment_bytes(name, seg) for seg in ref.segments)
        return total

    def collection(self, generation: int, kind: str, revision: int = 0) -> str:
        """Vector collection name: unique per index, full build (`generation`) and rebuild of
        one kind within it (`revision`, the version that introduced it: a hyperbolic recalibration).
        The kind stays the last `_` field (Milvus rows are tagged with it)."""
        if self.uid is None:
            raise StoreError(f"{self.uri} has no index.json")
        return f"hg_{self.uid}_g{generation}{f'r{revision}' if revision else ''}_{kind}"
