"""The lexical stage: BM25 postings (core/lexical.py) of the chunks (their text; a passage's first chunk begins
with its title) and of the entities (their ids, the normalized names), built whole, updated by the change.

The build analyzes every chunk and entity once. An update analyzes only the new chunks and
entities and deletes the rows of removed ones: a row holds one document's term counts and
nothing about the others (N, document frequencies and the average length follow from the rows
when a version is read, store/view_loader.py), so its cost follows the change. Entities are
indexed by id, which never changes for an entity while its displayed surface form may.
"""

from __future__ import annotations

import gc
from collections import Counter
from contextlib import contextmanager
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from hygraph.core.lexical import analyze
from hygraph.indexing.state import IndexState
from hygraph.store.artifacts import ENTITIES, LEXICAL_CHUNKS, LEXICAL_ENTITIES, Artifact, PostingsRow


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector paused: its full collections walk every live object, so making millions of rows
    costs it time in proportion to the rows made so far. A row is strings, a tuple and an array, none of which
    can form a cycle, so reference counting frees them all. 1.5M entity postings (`build`): 31-35 -> 15-16 CPU s."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def postings(ids: Sequence[str], texts: Sequence[str]) -> list[PostingsRow]:
    """One row per document: its analyzed terms in first-seen order and their counts."""
    rows = []
    with _no_cycle_collection():
        for doc_id, text in zip(ids, texts):
            counts = Counter(analyze(text))  # insertion-ordered: terms in first-seen order
            rows.append(PostingsRow(doc_id, tuple(counts), np.fromiter(counts.values(), np.int64, len(counts))))
    return rows


def build(chunk_ids: Sequence[str], chunk_texts: Sequence[str],
          entity_ids: Sequence[str] | None) -> dict[Artifact[PostingsRow], pa.Table]:
    """Both artifacts' tables (entity postings only for a graph index: `entity_ids` not None), in Arrow: the
    build runs this as a Ray task of its own and keeps them in its checkpoint until the snapshot is written."""
    with _no_cycle_collection():  # the rows' conversion to Arrow too
        out = {LEXICAL_CHUNKS: LEXICAL_CHUNKS.to_arrow(postings(chunk_ids, chunk_texts), {})}
        if entity_ids is not None:
            out[LEXICAL_ENTITIES] = LEXICAL_ENTITIES.to_arrow(postings(entity_ids, entity_ids), {})
    return out


def update(state: IndexState, removed_chunks: Iterable[str], new_chunk_ids: Sequence[str],
           new_chunk_texts: Sequence[str], touched_entities: Iterable[str]) -> None:
    """Removed chunks' rows out, new chunks' rows in (a replaced chunk's row rewritten); each touched entity
    (new or removed by this batch) gets a row when it exists after the batch and loses it when not.

    A version written without this stage's artifacts is left without them (its queries needing BM25 say
    to rebuild): rows for only the changed documents would be taken for the whole collection.
    """
    if not state.has_artifact(LEXICAL_CHUNKS):
        return
    state.delete_all(LEXICAL_CHUNKS, removed_chunks)
    for row in postings(new_chunk_ids, new_chunk_texts):
        state.put(LEXICAL_CHUNKS, row)
    if not state.has_artifact(LEXICAL_ENTITIES):
        return
    added = []
    for eid in dict.fromkeys(touched_entities):
        if not state.contains(ENTITIES, eid):
            state.delete(LEXICAL_ENTITIES, eid)
        elif not state.contains(LEXICAL_ENTITIES, eid):
            added.append(eid)
    for row in postings(added, added):
        state.put(LEXICAL_ENTITIES, row)
