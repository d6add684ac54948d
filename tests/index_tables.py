"""What tests read of an index version, through the store's typed artifacts."""

from __future__ import annotations

from pathlib import Path

from hygraph.store.artifacts import CHUNKS, DOCUMENTS, SUMMARIES
from hygraph.store.versions import IndexStore
from hygraph.store.view_loader import load_view


def doc_ids(index_dir: Path, version: int | None = None) -> list[str]:
    return IndexStore(index_dir).open(version).table(DOCUMENTS).values("id")


def chunk_ids(index_dir: Path) -> list[str]:
    return IndexStore(index_dir).open().table(CHUNKS).values("id")


def chunks_of(index_dir: Path, doc_id: str) -> set[str]:
    doc = IndexStore(index_dir).open().table(DOCUMENTS).get(doc_id)
    return set(doc.chunks) if doc is not None else set()


def summaries(index_dir: Path, version: int | None = None) -> dict[str, str]:
    table = IndexStore(index_dir).open(version).table(SUMMARIES)
    return dict(zip(table.values("id"), table.values("text")))


def leaves(index_dir: Path) -> set[str]:
    """Every layer-0 node under some summary of the current version."""
    view = load_view(IndexStore(index_dir).open())
    return {leaf for sid in view.summary_text for leaf in view.summary_leaves[sid]}
