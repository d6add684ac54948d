"""The updater's index: a published version's tables, read in place, plus the changes of one batch.

Stage updates read rows through `get` (the batch's own changes first, then the version's
segments) and record new, changed and deleted rows with `put` and `delete`; nothing is
loaded that the batch does not touch. Publishing writes exactly the recorded changes as the
next version's delta segments (`changes`). A batch that fails is dropped with its state:
the version it read is untouched.
"""

from __future__ import annotations

import copy
from typing import Any, Iterable

from hygraph.store.artifacts import ARTIFACTS, Artifact, RowT
from hygraph.store.manifest import Manifest
from hygraph.store.table import Table
from hygraph.store.versions import Version

_GONE = object()


class IndexState:
    def __init__(self, version: Version) -> None:
        self.base = version
        self.version = version.version
        # The next version's manifest, edited by the stages (counts, pending summaries, M ...).
        self.manifest: Manifest = copy.deepcopy(version.manifest)
        self._changes: dict[str, dict[str, Any]] = {}

    @property
    def dims(self) -> dict[str, int]:
        return self.manifest.dims

    def table(self, artifact: Artifact[Any]) -> Table[Any] | None:
        return self.base.table(artifact) if self.base.has(artifact) else None

    def has_artifact(self, artifact: Artifact[Any]) -> bool:
        return self.base.has(artifact) or artifact.name in self._changes

    def get(self, artifact: Artifact[RowT], key: str) -> RowT | None:
        changed = self._changes.get(artifact.name)
        if changed is not None and key in changed:
            row = changed[key]
            return None if row is _GONE else row
        table = self.table(artifact)
        return table.get(key) if table is not None else None

    def require(self, artifact: Artifact[RowT], key: str) -> RowT:
        row = self.get(artifact, key)
        if row is None:
            raise KeyError(f"{artifact.name}: no row {key!r}")
        return row

    def contains(self, artifact: Artifact[Any], key: str) -> bool:
        changed = self._changes.get(artifact.name)
        if changed is not None and key in changed:
            return changed[key] is not _GONE
        table = self.table(artifact)
        return table is not None and key in table

    def put(self, artifact: Artifact[RowT], row: RowT) -> None:
        self._changes.setdefault(artifact.name, {})[row.id] = row  # type: ignore[attr-defined]

    def delete(self, artifact: Artifact[Any], key: str) -> None:
        self._changes.setdefault(artifact.name, {})[key] = _GONE

    def delete_all(self, artifact: Artifact[Any], keys: Iterable[str]) -> None:
        for key in keys:
            self.delete(artifact, key)

    def changes(self, artifact: Artifact[RowT]) -> tuple[list[RowT], list[str]]:
        """(rows written, keys deleted) by this batch."""
        changed = self._changes.get(artifact.name, {})
        rows = [r for r in changed.values() if r is not _GONE]
        dead = [k for k, r in changed.items() if r is _GONE]
        return rows, dead

    def changed_artifacts(self) -> list[Artifact[Any]]:
        return [ARTIFACTS[name] for name in self._changes]

    def count(self, artifact: Artifact[Any]) -> int:
        """Live rows after this batch's changes."""
        table = self.table(artifact)
        n = len(table) if table is not None else 0
        for key, row in self._changes.get(artifact.name, {}).items():
            before = table is not None and key in table
            n += (row is not _GONE) - before
        return n
