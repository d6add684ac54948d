"""What one index version holds, read back for people and consoles: its documents in a stable order,
one document, and its counts.

Documents are listed in code-point order of their ids, so a page boundary ("after this id") means
the same thing in every version: a listing continued across an update neither repeats nor skips a
document that was there before and after it. The sorted id list is built on the first listing of a
version (one pass over the ids column) and kept with the version.
"""

from __future__ import annotations

import bisect
import json
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from hygraph.store.artifacts import DOCUMENTS
from hygraph.store.versions import Version

COUNTED = ("documents", "chunks", "entities", "relations", "hyperedges", "summaries")


@dataclass(frozen=True)
class DocumentPage:
    documents: list[dict[str, Any]]  # {"id", "title", "chars", "chunks", "metadata"} in id order
    total: int
    next_after: str | None  # the last id of this page when more follow


class Catalog:
    def __init__(self, version: Version) -> None:
        self.version = version
        self._sorted: list[str] | None = None
        self._lock = threading.Lock()

    def _ids(self) -> list[str]:
        with self._lock:
            if self._sorted is None:
                self._sorted = sorted(self.version.table(DOCUMENTS).ids())
            return self._sorted

    def page(self, limit: int, after: str | None = None, offset: int = 0) -> DocumentPage:
        """`limit` documents after the id `after` (a previous page's `next_after`), else from position `offset`."""
        ids = self._ids()
        start = bisect.bisect_right(ids, after) if after is not None else offset
        chosen = ids[start:start + limit]
        table = self.version.table(DOCUMENTS)
        docs = [{"id": i, "title": table.value(i, "title"), "chars": len(table.value(i, "text")),
                 "chunks": len(table.value(i, "chunks")), "metadata": json.loads(table.value(i, "metadata"))}
                for i in chosen]
        more = start + len(chosen) < len(ids)
        return DocumentPage(docs, len(ids), chosen[-1] if more and chosen else None)

    def document(self, doc_id: str) -> dict[str, Any] | None:
        row = self.version.table(DOCUMENTS).get(doc_id)
        if row is None:
            return None
        return {"id": row.id, "title": row.title, "text": row.text, "chars": len(row.text), "chunks": len(row.chunks),
                "metadata": json.loads(row.metadata)}

    def holds(self, doc_id: str) -> bool:
        return doc_id in self.version.table(DOCUMENTS)

    def stats(self) -> dict[str, Any]:
        """The version's counts (CONTRACT's `hygraph index` fields), its number, and when it was published."""
        m = self.version.manifest
        layers = m.hierarchy.layers if m.hierarchy is not None else int(m.stats.get("layers", 0))
        return {**{k: int(m.counts.get(k, 0)) for k in COUNTED}, "layers": layers, "index_version": m.version,
                "updated_at": datetime.fromtimestamp(m.created, timezone.utc).isoformat(timespec="seconds"),
                "journal_offset": m.journal_offset}
