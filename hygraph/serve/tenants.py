"""One index as the ingress sees it: its journal, its versions, its updater's name, and the
read-your-writes floor of this ingress replica for it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from hygraph.updater.names import updater_name
from hygraph.config import HygraphConfig
from hygraph.store.journal import Journal
from hygraph.store.object_journal import open_journal
from hygraph.store.versions import IndexStore


@dataclass
class Tenant:
    name: str
    path: str | Path  # an s3:// uri for a default index on object storage
    cfg: HygraphConfig  # the service's config, sharing its vector store server for a named index
    journal: Journal
    store: IndexStore
    updater_name: str
    _floor: int = 0  # the highest version a job status from this replica has called done
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, name: str, path: str | Path, cfg: HygraphConfig) -> "Tenant":
        store = IndexStore(path, **cfg.store.model_dump())
        return cls(name, path, cfg, open_journal(path, store.objects), store, updater_name(path))

    @property
    def floor(self) -> int:
        return self._floor

    def raise_floor(self, version: int) -> None:
        with self._lock:
            self._floor = max(self._floor, version)
