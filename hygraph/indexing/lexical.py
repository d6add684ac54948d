"""The lexical stage: BM25 postings over chunks (title + text) and over entity names, built and updated.

Build analyzes every chunk and entity once; an update analyzes only the new chunks and
entities and drops the rows of removed ones (core/lexical.py `update`), so its cost follows
the change. Entities are indexed by id, their normalized name, which never changes for an
entity while its displayed surface form may.
"""

from __future__ import annotations

from typing import Sequence

from hygraph.core import lexical
from hygraph.core.lexical import LexicalIndex


def build_lexical(chunk_ids: Sequence[str], chunk_texts: Sequence[str],
                  entity_ids: Sequence[str] | None) -> dict[str, LexicalIndex]:
    """{"chunks": postings of the chunk texts, "entities": postings of the entity names (graph indexes only)}."""
    out = {"chunks": lexical.build(list(chunk_ids), [lexical.analyze(t) for t in chunk_texts])}
    if entity_ids is not None:
        out["entities"] = lexical.build(list(entity_ids), [lexical.analyze(e) for e in entity_ids])
    return out


def update_lexical(current: dict[str, LexicalIndex], removed_chunks: Sequence[str], new_chunk_ids: Sequence[str],
                   new_chunk_texts: Sequence[str], removed_entities: Sequence[str],
                   new_entities: Sequence[str]) -> dict[str, LexicalIndex]:
    """The postings after a batch: removed and replaced chunks out, new chunks in; entities likewise."""
    out = {"chunks": lexical.update(current["chunks"], removed_chunks, list(new_chunk_ids),
                                    [lexical.analyze(t) for t in new_chunk_texts])}
    if "entities" in current:
        out["entities"] = lexical.update(current["entities"], removed_entities, list(new_entities),
                                         [lexical.analyze(e) for e in new_entities])
    return out
