"""A resumable `hygraph index`: each finished stage's outputs kept under `<index>/builds/<fingerprint>/`.

A build is named by the fingerprint of its inputs (the corpus, triples and KG files' bytes, the config's
`index_hash` and the graph flag), so a rerun of the same command after a crash finds its checkpoint and
loads every finished stage instead of computing it again; a rerun with other inputs removes the stale
checkpoint, and `--restart` discards it. The ingest stage keeps its work per Ray Data batch
(`ingest/shard-*.arrow`, stages/ingest.py); the other stages write their outputs once done. The
vector collections a build created and those it fully wrote are recorded with the version they are
named after, so a resumed build that reserves the same version keeps those fully written, and
continues one cut off mid-write with the rows it lacks (stages/vectors.py). Every file is written
whole or not at all (store/stage_files.py), and the record (`build.json`) is rewritten atomically
after each stage. The snapshot's tables are recorded as each is stored, with the version they belong to: a resumed
build that takes that version's number again keeps them (`SnapshotTables`). The commit removes the
checkpoint.

The hybrid graph, a pure and quick function of the knowledge, is derived again rather than stored, and only
when a stage or table that needs it is not kept; the knowledge itself (a shuffle over the whole corpus) is kept
as its merged tables. The driver opens the
checkpoint and the assembling actor (indexing/assemble.py) carries on with it, and the stages it runs as
Ray tasks beside it (indexing/beside.py) write their outputs there: the checkpoint directory must be
reachable from all of them. Only the assembler writes the record (from two threads: its stages, and the
one that records a finished task).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np
import pyarrow as pa

from hygraph.errors import InputError, StoreError
from hygraph.indexing.progress import Stages
from hygraph.indexing.stages.hierarchy import HierarchyResult
from hygraph.indexing.stages.hyperbolic import Trained
from hygraph.indexing.stages.knowledge_merge import Folded
from hygraph.processes import locked, pid_alive
from hygraph.store import stage_files
from hygraph.store.artifacts import ARTIFACTS, LEXICAL_CHUNKS, LEXICAL_ENTITIES, Artifact, PostingsRow, RowT
from hygraph.store.files import write_atomic
from hygraph.store.versions import VersionWriter, WrittenTable

T = TypeVar("T")
FORMAT = 1
BUILDS = "builds"  # under the index directory
RECORD = "build.json"
# The assembler records a task that finished (indexing/beside.py) from a thread of its own, while its stages
# record theirs: the record is changed and serialized under this lock.
_RECORD_LOCK = threading.Lock()


@dataclass
class BuildRecord:
    """What a build has finished, rewritten after every stage."""

    fingerprint: str
    pid: int  # the process building now; a live one owns the checkpoint
    done: list[str] = field(default_factory=list)  # finished stages, in the order they finished
    seconds: dict[str, float] = field(default_factory=dict)  # what each finished stage took when it ran
    llm_calls: dict[str, dict[str, int]] = field(default_factory=dict)  # stage -> role -> calls it made
    generation: int | None = None  # the version the vector collections below are named after
    collections: dict[str, str] = field(default_factory=dict)  # kind -> collection created, filled and sealed
    created: dict[str, str] = field(default_factory=dict)  # kind -> collection created (filled or not)
    # artifact -> the snapshot table stored for `generation`: {"segment", "rows", "files", "stats"}
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    format: int = FORMAT

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> "BuildRecord":
        try:
            raw = json.loads(data)
            if raw.get("format") != FORMAT:
                raise StoreError(f"{where}: build checkpoint format {raw.get('format')} is not {FORMAT}")
            known = {f.name for f in fields(BuildRecord)}
            return BuildRecord(**{k: v for k, v in raw.items() if k in known})
        except (ValueError, TypeError, AttributeError) as exc:
            raise StoreError(f"{where}: not a readable build checkpoint record ({exc})") from None


def fingerprint(corpus: str | Path, triples: str | Path | None, kg: str | Path | None, index_hash: str,
                graph: bool) -> str:
    """The build's identity: every input file's bytes (length-prefixed, so no two inputs run together), the
    settings that shape an index and the graph flag."""
    h = hashlib.sha256()
    for label, path in (("corpus", corpus), ("triples", triples), ("kg", kg)):
        h.update(f"{label}:".encode())
        if path is None:
            h.update(b"none;")
            continue
        p = Path(path)
        h.update(f"{p.stat().st_size};".encode())
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    h.update(f"index_hash:{index_hash};graph:{int(graph)}".encode())
    return h.hexdigest()[:24]


def _read_record(directory: Path) -> BuildRecord | None:
    path = directory / RECORD
    return BuildRecord.from_json(path.read_bytes(), str(path)) if path.is_file() else None


class Checkpoint:
    """One build's checkpoint directory and record. Opening it removes the checkpoints of other builds that no
    live process owns (and this one's too with `restart`)."""

    def __init__(self, index_dir: str | Path, fp: str, restart: bool = False) -> None:
        self.builds = Path(index_dir) / BUILDS
        self.dir = self.builds / fp
        self.resumed: list[str] = []
        self.bytes_written = 0
        with locked(self.builds / ".lock"):
            for other in sorted(p for p in self.builds.iterdir() if p.is_dir()):
                try:
                    owner = _read_record(other)
                except StoreError:
                    owner = None  # unreadable: nothing to keep
                if owner is not None and owner.pid != os.getpid() and pid_alive(owner.pid):
                    if other == self.dir:
                        raise InputError(f"another `hygraph index` (pid {owner.pid}) is building the same inputs "
                                         f"into {index_dir}")
                    continue  # a live build of other inputs keeps its checkpoint
                if other != self.dir or restart:
                    shutil.rmtree(other)
            self.dir.mkdir(exist_ok=True)
            try:
                record = _read_record(self.dir)
            except StoreError:
                record = None  # a record from another format: start over
                shutil.rmtree(self.dir)
                self.dir.mkdir()
            self.record = record or BuildRecord(fp, os.getpid())
            self.record.pid = os.getpid()
            self._save()

    def _save(self) -> None:
        write_atomic(self.dir / RECORD, self.record.to_json())

    def reload(self) -> None:
        """Read the record again: another process (an assembling actor that was lost) carried the build on."""
        self.record = _read_record(self.dir) or self.record

    def done(self, stage: str) -> bool:
        return stage in self.record.done

    def finish(self, stage: str, seconds: float, llm_calls: dict[str, int] | None = None) -> None:
        """Record `stage` as finished: its outputs are on disk."""
        with _RECORD_LOCK:
            if stage not in self.record.done:
                self.record.done.append(stage)
            self.record.seconds[stage] = seconds
            if llm_calls:
                self.record.llm_calls[stage] = dict(llm_calls)
            self._save()

    def llm_calls(self) -> dict[str, int]:
        """The LLM calls the recorded stages made, per role (added to this run's, the build's total)."""
        out: dict[str, int] = {}
        for calls in self.record.llm_calls.values():
            for role, n in calls.items():
                out[role] = out.get(role, 0) + n
        return out

    def shard_dir(self, stage: str) -> Path:
        path = self.dir / stage
        path.mkdir(exist_ok=True)
        return path

    def kept_collections(self, generation: int) -> dict[str, str]:
        """The collections fully written for `generation`; a record for another generation is reset (its
        collections are garbage collected as those of a build that never published)."""
        with _RECORD_LOCK:
            self._for(generation)
            return dict(self.record.collections)

    def partial_collections(self, generation: int) -> dict[str, str]:
        """The collections an earlier run created for `generation` but did not seal (it was cut off while it
        filled them, or while the server indexed them): a resumed writer continues them."""
        with _RECORD_LOCK:
            self._for(generation)
            return {k: n for k, n in self.record.created.items() if self.record.collections.get(k) != n}

    def _for(self, generation: int) -> None:
        if self.record.generation != generation:
            self.record.generation, self.record.collections, self.record.created = generation, {}, {}
            self.record.tables = {}
            self._save()

    def table_segments(self) -> list[tuple[str, str]]:
        """(artifact, segment) of each snapshot table an earlier run stored for the recorded generation: what
        the rerun's writer keeps when it takes that version's number (`IndexStore.begin`)."""
        return [(name, entry["segment"]) for name, entry in self.record.tables.items()]

    def kept_tables(self, generation: int) -> dict[str, dict[str, Any]]:
        """The snapshot tables recorded as stored for `generation` (a record for another one is reset)."""
        with _RECORD_LOCK:
            self._for(generation)
            return dict(self.record.tables)

    def table_written(self, name: str, table: WrittenTable, stats: dict[str, Any]) -> None:
        with _RECORD_LOCK:
            self.record.tables[name] = {"segment": table.segment, "rows": table.rows, "files": table.files,
                                        "stats": stats}
            self._save()

    def collection_created(self, kind: str, name: str) -> None:
        with _RECORD_LOCK:
            self.record.created[kind] = name
            self._save()

    def collection_written(self, kind: str, name: str) -> None:
        with _RECORD_LOCK:
            self.record.collections[kind] = name
            self._save()

    def write_arrays(self, name: str, arrays: dict[str, np.ndarray]) -> None:
        self.bytes_written += stage_files.write_arrays(self.dir / f"{name}.npz", arrays)

    def read_arrays(self, name: str) -> dict[str, np.ndarray]:
        return stage_files.read_arrays(self.dir / f"{name}.npz")

    def write_table(self, name: str, table: pa.Table) -> None:
        self.bytes_written += stage_files.write_table(self.dir / f"{name}.arrow", table)

    def read_table(self, name: str) -> pa.Table:
        return stage_files.read_table(self.dir / f"{name}.arrow")

    def remove(self) -> None:
        """The build committed: its checkpoint is no longer needed."""
        shutil.rmtree(self.dir, ignore_errors=True)


class SnapshotTables:
    """The snapshot's tables as a build writes them, one segment each: each is recorded in the checkpoint once
    it is stored, and those an earlier run of this build stored whole are kept (`VersionWriter.reuse`: the
    killed run's version number is taken again) instead of being made and written again. Without a checkpoint
    (an empty index's first version) it writes every table and records none."""

    def __init__(self, w: VersionWriter, ckpt: Checkpoint | None) -> None:
        self._w, self._ckpt = w, ckpt
        self._stats: dict[str, dict[str, Any]] = {}
        self.kept: list[str] = []
        for name, entry in (ckpt.kept_tables(w.version) if ckpt is not None else {}).items():
            try:
                table = WrittenTable(str(entry["segment"]), int(entry["rows"]),
                                     {str(k): int(v) for k, v in entry["files"].items()})
            except (KeyError, TypeError, ValueError, AttributeError):
                continue  # not a record this code wrote: the table is written again
            if name in ARTIFACTS and w.reuse(ARTIFACTS[name], table):
                self.kept.append(name)
                self._stats[name] = dict(entry.get("stats") or {})

    def has(self, artifact: Artifact[Any]) -> bool:
        return artifact.name in self._w.tables

    def rows(self, artifact: Artifact[Any]) -> int:
        return self._w.tables[artifact.name].rows

    def stats(self, artifact: Artifact[Any]) -> dict[str, Any]:
        """What was recorded with the table when it was written (`replace`'s `stats`)."""
        return self._stats[artifact.name]

    def replace(self, artifact: Artifact[RowT], rows: list[RowT], dims: dict[str, int],
                stats: dict[str, Any] | None = None) -> None:
        self._w.replace(artifact, rows, dims)
        self._stored(artifact, stats or {})

    def replace_table(self, artifact: Artifact[Any], table: pa.Table) -> None:
        self._w.replace_table(artifact, table)
        self._stored(artifact, {})

    def _stored(self, artifact: Artifact[Any], stats: dict[str, Any]) -> None:
        self._stats[artifact.name] = stats
        if self._ckpt is not None:
            self._ckpt.table_written(artifact.name, self._w.written(artifact), stats)


def resumable(stages: Stages, ckpt: Checkpoint, name: str, compute: Callable[[], T], save: Callable[[T], None],
              load: Callable[[], T], llm_calls: Callable[[], dict[str, int]] = dict, timed: bool = True) -> T:
    """Stage `name`: loaded from the checkpoint when an earlier run finished it, else computed and saved.
    `timed=False`: `compute` times the stage itself (under `name`)."""
    if ckpt.done(name):
        with stages.stage(name):
            stages.note(f"{name}: resumed from the checkpoint (it took {ckpt.record.seconds[name]:.1f}s)")
            value = load()
        ckpt.resumed.append(name)
        return value
    if timed:
        with stages.stage(name):
            value = compute()
    else:
        value = compute()
    save(value)
    ckpt.finish(name, stages.seconds.get(name, 0.0), llm_calls())
    return value


def save_hierarchy(ckpt: Checkpoint, result: HierarchyResult) -> None:
    table = pa.table({"id": pa.array(result.ids, pa.string()), "layer": pa.array(result.layers, pa.int64()),
                      "text": pa.array(result.texts, pa.string()),
                      "children": pa.array(result.children, pa.list_(pa.string())),
                      "extra": pa.array(result.extra, pa.list_(pa.string())),
                      "key": pa.array(result.keys, pa.string()),
                      "codes": pa.array([c.tolist() for c in result.codes], pa.list_(pa.int64()))},
                     metadata={"partitioner": result.partitioner})
    ckpt.write_table("hierarchy", table)
    ckpt.write_arrays("hierarchy", {**{f"part{i}": p for i, p in enumerate(result.embedding_parts)},
                                    **{f"planes{layer}": p for layer, p in result.hyperplanes.items()}})


def load_hierarchy(ckpt: Checkpoint) -> HierarchyResult:
    table = ckpt.read_table("hierarchy")
    arrays = ckpt.read_arrays("hierarchy")
    col = table.to_pydict()
    parts = sorted((int(k[4:]), v) for k, v in arrays.items() if k.startswith("part"))
    return HierarchyResult(ids=col["id"], layers=col["layer"], texts=col["text"], children=col["children"],
                           extra=col["extra"], keys=col["key"], codes=[np.asarray(c, np.int64) for c in col["codes"]],
                           embedding_parts=[v for _, v in parts],
                           hyperplanes={int(k[6:]): v for k, v in arrays.items() if k.startswith("planes")},
                           partitioner=table.schema.metadata[b"partitioner"].decode())


def save_hyperbolic(ckpt: Checkpoint, trained: Trained) -> None:
    ckpt.write_table("hyperbolic", pa.table({"terms": pa.array([sorted(t) for t in trained.terms],
                                                                pa.list_(pa.string()))}))
    ckpt.write_arrays("hyperbolic", {"edges": trained.edges, "points": trained.points,
                                     "M": np.array(trained.M, np.float64)})


def load_hyperbolic(ckpt: Checkpoint) -> Trained:
    terms = [set(t) for t in ckpt.read_table("hyperbolic").column("terms").to_pylist()]
    arrays = ckpt.read_arrays("hyperbolic")
    return Trained(terms, arrays["edges"], arrays["points"], float(arrays["M"]))


def save_knowledge(ckpt: Checkpoint, folded: Folded) -> None:
    """The knowledge shuffle's ordered tables (stages/knowledge_merge.py), a file per kind."""
    for kind, table in zip(_KNOWLEDGE_KINDS, folded):
        ckpt.write_table(f"knowledge_{kind}", table)


def load_knowledge(ckpt: Checkpoint) -> Folded:
    ents, rels, hes = (ckpt.read_table(f"knowledge_{kind}") for kind in _KNOWLEDGE_KINDS)
    return ents, rels, hes


_KNOWLEDGE_KINDS = ("entities", "relations", "hyperedges")


def save_lexical(ckpt: Checkpoint, tables: dict[Artifact[PostingsRow], pa.Table]) -> None:
    for artifact, table in tables.items():
        ckpt.write_table(artifact.name, table)


def load_lexical(ckpt: Checkpoint, graph: bool) -> dict[Artifact[PostingsRow], pa.Table]:
    """The postings tables `save_lexical` kept: the entities' too for a graph index."""
    return {a: ckpt.read_table(a.name) for a in (LEXICAL_CHUNKS, LEXICAL_ENTITIES) if graph or a is LEXICAL_CHUNKS}


def save_named(ckpt: Checkpoint, stage: str, arrays: dict[str, np.ndarray], ids: dict[str, list[str]]) -> None:
    """Arrays whose rows follow id lists (Cleora: graph nodes; knowledge vectors: entities, relations,
    hyperedges); the ids are stored with them so a load can check they still line up."""
    ckpt.write_arrays(stage, arrays)
    ckpt.write_table(stage, pa.table({k: pa.array([json.dumps(v)], pa.string()) for k, v in ids.items()}))


def named_ids(ckpt: Checkpoint, stage: str) -> dict[str, list[str]]:
    """The id lists `save_named` stored with a stage's arrays."""
    return {k: json.loads(v[0]) for k, v in ckpt.read_table(stage).to_pydict().items()}


def load_named(ckpt: Checkpoint, stage: str, ids: dict[str, list[str]]) -> dict[str, np.ndarray]:
    stored = named_ids(ckpt, stage)
    for key, expect in ids.items():
        if stored.get(key) != list(expect):
            raise StoreError(f"{ckpt.dir}: the {stage} checkpoint's {key} ids differ from this build's "
                             "(rerun with --restart)")
    return ckpt.read_arrays(stage)
