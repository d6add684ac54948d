"""Knowledge -> snapshot tables (Parquet), with the provenance lists retrieval needs."""

from __future__ import annotations

from typing import Any

from hygraph.indexing.knowledge import Knowledge


def entity_table(kb: Knowledge, ids: list[str]) -> dict[str, list[Any]]:
    ents = [kb.entities[i] for i in ids]
    return {"id": ids, "name": [e.name for e in ents], "type": [e.type for e in ents],
            "description": [e.description for e in ents], "score": [float(e.score) for e in ents],
            "chunks": [sorted(kb.entity_chunks.get(i, ())) for i in ids]}


def relation_table(kb: Knowledge, ids: list[str]) -> dict[str, list[Any]]:
    rels = [kb.relations[i] for i in ids]
    return {"id": ids, "head": [r.head for r in rels], "relation": [r.relation for r in rels],
            "tail": [r.tail for r in rels], "score": [float(r.score) for r in rels],
            "chunks": [sorted(kb.relation_chunks.get(i, ())) for i in ids]}


def hyperedge_table(kb: Knowledge, ids: list[str]) -> dict[str, list[Any]]:
    hes = [kb.hyperedges[i] for i in ids]
    return {"id": ids, "text": [h.text for h in hes], "entities": [list(h.entities) for h in hes],
            "score": [float(h.score) for h in hes], "chunks": [sorted(kb.hyperedge_chunks.get(i, ())) for i in ids]}


def entity_text(kb: Knowledge, eid: str) -> str:
    """What an entity's text vector embeds: its name (questions name entities, not descriptions)."""
    return kb.entities[eid].name


def relation_text(kb: Knowledge, rid: str) -> str:
    """The triplet text HyGRAG filters relations by: surface names, not normalized ids."""
    r = kb.relations[rid]
    return f"{kb.entities[r.head].name} {r.relation} {kb.entities[r.tail].name}"
