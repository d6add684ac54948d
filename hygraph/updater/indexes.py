"""Making and removing the named indexes of a service, as Ray work the ingress starts.

An index is made empty by its own OnlineUpdater (started with `create_empty`), which writes its
first version before it applies the journal, so inserts sent at once wait only for that. Removal
kills the index's updater, then a Ray task drops its vector collections and its files; the
registry has taken the index out of sight before (store/registry.py). Nothing here imports the
update path: the ingress stays light, the actor and the task import what they need.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hygraph.updater.actor import start_updater, stop_updater
from hygraph.config import HygraphConfig
from hygraph.store.object_journal import open_journal
from hygraph.store.registry import IndexRegistry
from hygraph.store.versions import IndexStore

log = logging.getLogger("hygraph.indexes")


def create(cfg: HygraphConfig, path: str) -> None:
    """Start the new index's updater, which writes its empty first version."""
    start_updater(cfg, path, create_empty=True)


def remove(cfg: HygraphConfig, name_path: str | Path, detached: str) -> Any:
    """Stop the updater of the index that was at `name_path` (now at `detached`: the same prefix on object
    storage), then drop its collections and files in a Ray task; returns the task's ref."""
    import ray

    stop_updater(name_path)
    return ray.remote(num_cpus=0, max_retries=3)(_remove).remote(cfg.model_dump(mode="json"), detached)


def resume_removals(cfg: HygraphConfig, registry: IndexRegistry) -> list[Any]:
    """Removals a stopped service left unfinished (its indexes renamed out of sight, not yet purged)."""
    import ray

    return [ray.remote(num_cpus=0, max_retries=3)(_remove).remote(cfg.model_dump(mode="json"), location)
            for location in registry.detached()]


def start_named_updaters(cfg: HygraphConfig, registry: IndexRegistry) -> list[str]:
    """At service start: the updaters of the named indexes with work left (a first version not yet written,
    journaled writes not yet applied, deferred summaries), so it is done without waiting for a new write;
    the others start on their next write. Returns their names."""
    started = []
    for name in registry.names()[1:]:
        path = registry.location(name)
        store = IndexStore(path, cache_dir=cfg.store.cache_dir)
        if store.current_version() is not None:
            manifest = store.manifest()
            journal = open_journal(path, store.objects)
            if (not journal.pending(manifest.journal_offset) and manifest.summaries_pending is None
                    and not manifest.chunks_pending):
                continue
        start_updater(cfg, path, create_empty=True)
        started.append(name)
    return started


def _remove(config: dict[str, Any], path: str) -> dict[str, Any]:
    from hygraph.indexing.build import remove_index

    result = remove_index(HygraphConfig.model_validate(config), path)
    log.info("removed index files at %s and %d vector collections", path, result["collections_dropped"])
    return result
