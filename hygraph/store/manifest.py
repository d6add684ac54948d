"""The manifest of an index version: one typed record, the only place its keys are spelled.

A version's manifest names the segments of every artifact (`tables`), the vector collections
and what readers and the updater need besides rows: the journal offset applied, the norm
bound of the hyperbolic vectors, the summary step an insert left for later, and statistics.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from hygraph.errors import StoreError

FORMAT = 2  # 1: a directory of Parquet tables per version (before segments)


@dataclass
class TableRef:
    segments: list[str]  # oldest first
    rows: int


@dataclass
class HyperbolicInfo:
    M: float  # norm bound of the stored Lorentz vectors (ARCHITECTURE §5)
    dim: int
    seed: int


@dataclass
class HierarchyInfo:
    partitioner: str
    layers: int
    segments_per_layer: dict[str, int]


@dataclass
class PendingSummaries:
    """Layer-0 nodes whose hierarchy step was deferred (served inserts first, their summaries next)."""

    chunks: list[str]
    entities: list[str]
    since: float  # epoch seconds of the first deferral
    after_offset: int  # journal offset the deferral began after


@dataclass
class PendingChunks:
    """A document applied in slices (`updates.slice_tokens` tokens of chunks per version, so one large
    document never holds up the jobs behind it): its row and first chunks are published, the chunks from
    `next_ordinal` on follow. Its job reads `running` until the last slice lands."""

    doc_id: str
    job_id: str
    next_ordinal: int


@dataclass
class Manifest:
    version: int = 0
    created: float = 0.0
    generation: int = 0  # the version of the full build this one descends from (names its collections)
    config_hash: str = ""
    embedder_model: str = ""
    dims: dict[str, int] = field(default_factory=dict)  # vector widths: "text", "cleora"
    graph: bool = False  # built with extraction (False: --dense-only)
    collections: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    hierarchy: HierarchyInfo | None = None
    hyperbolic: HyperbolicInfo | None = None
    llm_calls: dict[str, int] = field(default_factory=dict)
    journal_offset: int = 0
    base_version: int | None = None
    update: dict[str, Any] | None = None  # what the update that made this version did
    retired: dict[str, list[str]] = field(default_factory=dict)  # vector rows to delete after publishing
    summaries_pending: PendingSummaries | None = None
    chunks_pending: list[PendingChunks] = field(default_factory=list)  # oldest first
    tables: dict[str, TableRef] = field(default_factory=dict)
    format: int = FORMAT

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes | str, where: str) -> "Manifest":
        try:
            raw = json.loads(data)
            if raw.get("format") != FORMAT:
                raise StoreError(f"{where}: index format {raw.get('format', 1)} is not {FORMAT}; rebuild the "
                                 "index with `hygraph index` (versions are now segment manifests)")
            known = {f.name for f in fields(Manifest)}
            m = Manifest(**{k: v for k, v in raw.items() if k in known})
        except (ValueError, TypeError, AttributeError) as exc:
            raise StoreError(f"{where}: not a readable manifest ({exc})") from None
        m.tables = {k: TableRef(**v) for k, v in m.tables.items()}
        m.hierarchy = HierarchyInfo(**m.hierarchy) if isinstance(m.hierarchy, dict) else None
        m.hyperbolic = HyperbolicInfo(**m.hyperbolic) if isinstance(m.hyperbolic, dict) else None
        m.summaries_pending = (PendingSummaries(**m.summaries_pending) if isinstance(m.summaries_pending, dict)
                               else None)
        m.chunks_pending = [PendingChunks(**p) for p in m.chunks_pending]
        return m
