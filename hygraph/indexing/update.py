"""Apply a batch of journal jobs to the live index without a rebuild (ARCHITECTURE.md §7).

The same stages as the build, each with its update step, in the build's order: ingest the new
documents, then knowledge, graph, structure, vectors, hierarchy (possibly deferred), hyperbolic,
lexical (BM25). Every step reads and writes through one `IndexState`, so the result is exactly the rows that
changed (the next version's delta segments) and the vector rows to upsert and retire.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from hygraph.backends.embedder import Embedder
from hygraph.backends.llm.base import LLM
from hygraph.config import HygraphConfig
from hygraph.indexing.stages import graph as graph_stage
from hygraph.indexing.stages import hierarchy, hyperbolic, ingest, knowledge, lexical, structure, vectors
from hygraph.indexing.stages.hierarchy_layers import LayerIndex
from hygraph.indexing.stages.hyperbolic import TermIndex
from hygraph.indexing.state import IndexState
from hygraph.model import Chunk, Document
from hygraph.store.artifacts import (CHUNKS, DOCUMENTS, ENTITIES, HYPEREDGES, RELATIONS, SUMMARIES, ChunkRow,
                                     DocumentRow, metadata_text)
from hygraph.store.journal import DeleteDocuments, InsertDocuments, Job
from hygraph.store.manifest import PendingChunks, PendingSummaries
from hygraph.store.versions import IndexStore, Version


@dataclass
class Batch:
    """The net effect of consecutive journal jobs: documents to add, documents to remove."""

    add: dict[str, Document] = field(default_factory=dict)
    remove: set[str] = field(default_factory=set)
    end_offset: int = 0
    job_ids: list[str] = field(default_factory=list)
    added_by: dict[str, str] = field(default_factory=dict)  # document id -> the job that wrote it


def summary_slice(age_s: float, period_s: float, base: int, node_s: float | None = None,
                  budget_s: float = math.inf) -> int:
    """Pending nodes one summary slice takes: `base`, doubled for each `period_s` the oldest has waited (a slice
    repeats its upper layers' summaries, so larger slices cost less per node and a backlog the updater could
    not clear in small ones still ends), but no more than `budget_s` seconds at `node_s` seconds a node (the
    last slice's), and never fewer than `base`."""
    doublings = min(16, int(age_s // period_s)) if period_s > 0 else 16
    size = base << doublings
    if node_s is not None and node_s > 0 and budget_s < math.inf:
        size = min(size, max(base, int(budget_s / node_s)))
    return size


def slice_pending(n_chunks: int, n_entities: int, max_nodes: int | None) -> tuple[int, int]:
    """How many of the pending chunks and entities (each list in arrival order) one summary pass takes: the
    same share of both, so a slice covers whole documents' chunks with their entities where it can."""
    total = n_chunks + n_entities
    if max_nodes is None or total <= max_nodes:
        return n_chunks, n_entities
    share = max_nodes / total
    take_chunks = min(n_chunks, math.ceil(n_chunks * share))
    return take_chunks, max(0, min(n_entities, max_nodes - take_chunks))


def slice_length(chunks: Sequence[Chunk], budget_tokens: int, taken_tokens: int = 0) -> int:
    """How many of `chunks` (in order) fit in a version that has taken `taken_tokens` already: whole chunks
    while the total stays within `budget_tokens`, and the first one always when nothing was taken, however
    long, so every version makes progress."""
    total = taken_tokens
    for n, c in enumerate(chunks):
        total += c.n_tokens
        if total > budget_tokens and (n or taken_tokens):
            return n
    return len(chunks)


def _same(held: Document | None, doc: Document) -> bool:
    """A re-sent document is the one held when its text and metadata are (metadata as stored: `true` is not `1`)."""
    return held is not None and held.text == doc.text and metadata_text(held.metadata) == metadata_text(doc.metadata)


def fold_jobs(jobs: Sequence[Job], present: Mapping[str, Document]) -> Batch:
    """Replay jobs in order over the documents present (by id): a re-sent identical document (same text and
    metadata) is a no-op, a new text or new metadata under an existing id replaces it, a delete of an absent id
    does nothing."""
    batch = Batch()
    live: dict[str, bool] = {}  # documents this batch added or deleted; the rest are as `present` says

    def is_live(doc_id: str) -> bool:
        return live[doc_id] if doc_id in live else doc_id in present

    for job in jobs:
        batch.job_ids.append(job.job_id)
        batch.end_offset = job.end_offset
        if isinstance(job.request, InsertDocuments):
            for doc in job.request.documents:
                if is_live(doc.id) and doc.id not in batch.add and _same(present.get(doc.id), doc):
                    continue
                if is_live(doc.id) and doc.id in present:
                    batch.remove.add(doc.id)
                batch.add[doc.id] = doc
                batch.added_by[doc.id] = job.job_id
                live[doc.id] = True
        elif isinstance(job.request, DeleteDocuments):
            for doc_id in job.request.ids:
                if doc_id in batch.add:
                    del batch.add[doc_id]
                if doc_id in present:
                    batch.remove.add(doc_id)
                live[doc_id] = False
    return batch


class PresentDocuments(Mapping[str, Document]):
    """The documents a version holds, by id, for `fold_jobs` (read per id, never listed)."""

    def __init__(self, state: IndexState) -> None:
        self.state = state

    def __getitem__(self, doc_id: str) -> Document:
        row = self.state.get(DOCUMENTS, doc_id)
        if row is None:
            raise KeyError(doc_id)
        return Document(row.id, row.text, row.title, json.loads(row.metadata))

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self.state.contains(DOCUMENTS, doc_id)

    def __iter__(self):  # noqa: ANN204 - a fold never lists the documents
        raise TypeError("the present documents are looked up by id, not listed")

    def __len__(self) -> int:
        return self.state.count(DOCUMENTS)


@dataclass
class LiveIndex:
    """What the updater keeps between batches: the version it applies to and the indexes derived from it."""

    version: Version
    layers: LayerIndex
    terms: TermIndex

    @staticmethod
    def load(store: IndexStore, cfg: HygraphConfig, version: int | None = None) -> "LiveIndex":
        v = store.open(version)
        return LiveIndex(v, LayerIndex.load(v, cfg.hierarchy), TermIndex.load(v, cfg.hyperbolic.hub_df))


@dataclass
class Applied:
    state: IndexState
    delta: vectors.VectorDelta
    stats: dict[str, Any]


class Applier:
    """Runs the stages' updates for one batch; models are the updater's own."""

    def __init__(self, cfg: HygraphConfig, embedder: Embedder, llm: LLM, device: str = "cpu") -> None:
        self.cfg, self.embedder, self.llm, self.device = cfg, embedder, llm, device
        # The chunks of each document whose slices wait, by id, with the text and title they were cut from:
        # tokenizing a 1 MiB text takes seconds, too long to repeat for every slice of 2 chunks.
        self._chunked: dict[str, tuple[str, str, list[Chunk]]] = {}

    def _chunks_of(self, row: DocumentRow) -> list[Chunk]:
        held = self._chunked.get(row.id)
        if held is None or held[0] != row.text or held[1] != row.title:
            held = (row.text, row.title, ingest.chunk(self.cfg, [Document(row.id, row.text, row.title)]))
            self._chunked[row.id] = held
        return held[2]

    def _keep_chunked(self, pending: list[PendingChunks]) -> None:
        waiting = {p.doc_id for p in pending}
        self._chunked = {doc_id: held for doc_id, held in self._chunked.items() if doc_id in waiting}

    def apply(self, live: LiveIndex, batch: Batch, points: hyperbolic.Points,
              defer_summaries: bool = False) -> Applied:
        """`defer_summaries`: a batch that only adds leaves its hierarchy step to `summarize_pending` (the
        documents are served at once, their summaries a version later); the pending nodes are kept in
        the manifest, so they survive a restart. What a batch removes or changes is always taken out of
        the summaries in its own version, so no summary keeps quoting deleted text.

        At most `updates.slice_tokens` tokens of new chunks are applied: the documents past that budget are published
        with the chunks that fit and the rest waits in the manifest for `continue_documents`, so the jobs
        behind a large document wait for one slice, not for the whole document."""
        t0 = time.perf_counter()
        before = self._calls()
        state = IndexState(live.version)
        removed = [state.require(CHUNKS, cid) for d in sorted(batch.remove)
                   for cid in state.require(DOCUMENTS, d).chunks]
        new_docs = list(batch.add.values())
        chunks = ingest.chunk(self.cfg, new_docs)
        # Whole short documents first: one batched with a large document is not held up by its slices.
        sizes = {d.id: sum(c.n_tokens for c in chunks if c.doc_id == d.id) for d in new_docs}
        chunks.sort(key=lambda c: sizes[c.doc_id])  # stable: documents and ordinals keep their order
        now = chunks[:slice_length(chunks, self.cfg.updates.slice_tokens)]
        # A document removed or written again drops its unfinished slices; one cut by the budget adds them.
        m = state.manifest
        m.chunks_pending = [p for p in m.chunks_pending if p.doc_id not in batch.remove and p.doc_id not in batch.add]
        cut = {c.doc_id: c.ordinal for c in reversed(chunks[len(now):])}
        m.chunks_pending += [PendingChunks(d.id, batch.added_by[d.id], cut[d.id]) for d in new_docs if d.id in cut]
        self._keep_chunked(m.chunks_pending)
        for d in new_docs:
            if d.id in cut:
                self._chunked[d.id] = (d.text, d.title, [c for c in chunks if c.doc_id == d.id])
        state.delete_all(DOCUMENTS, batch.remove)
        state.delete_all(CHUNKS, [c.id for c in removed])
        by_doc: dict[str, list[str]] = {}
        for c in now:
            by_doc.setdefault(c.doc_id, []).append(c.id)
        for d in new_docs:
            state.put(DOCUMENTS, DocumentRow(d.id, d.title, d.text, tuple(by_doc.get(d.id, ())),
                                             metadata_text(d.metadata)))
        delta, rebuilt = self._grow(state, live, now, removed, points, defer_summaries)
        return Applied(state, delta, {"documents_added": len(new_docs), "documents_removed": len(batch.remove),
                                      "chunks_added": len(now), "chunks_removed": len(removed),
                                      **self._touched(state, delta, rebuilt, before, t0)})

    def continue_documents(self, live: LiveIndex, points: hyperbolic.Points,
                           defer_summaries: bool = False) -> Applied | None:
        """The next slice (`updates.slice_tokens` tokens of chunks) of the documents `apply` published in part, oldest
        first; None when none waits. Stats name the jobs whose last slice this is (`jobs_finished`)."""
        t0 = time.perf_counter()
        before = self._calls()
        state = IndexState(live.version)
        m = state.manifest
        if not m.chunks_pending:
            return None
        now, finished, rest = [], [], []
        taken = 0  # the tokens of `now`
        for p in m.chunks_pending:
            row = state.get(DOCUMENTS, p.doc_id)
            if row is None:  # deleted meanwhile: nothing left to apply
                continue
            if now and taken >= self.cfg.updates.slice_tokens:  # full: not even chunked again
                rest.append(p)
                continue
            left = [c for c in self._chunks_of(row) if c.ordinal >= p.next_ordinal]
            take = left[:slice_length(left, self.cfg.updates.slice_tokens, taken)]
            now += take
            taken += sum(c.n_tokens for c in take)
            if take:
                state.put(DOCUMENTS, replace(row, chunks=(*row.chunks, *(c.id for c in take))))
            if len(take) < len(left):
                rest.append(replace(p, next_ordinal=left[len(take)].ordinal))
            else:
                finished.append(p.job_id)
        # A job of several documents is finished once none of them has a slice to come.
        waiting = {p.job_id for p in rest}
        finished = list(dict.fromkeys(j for j in finished if j not in waiting))
        m.chunks_pending = rest
        self._keep_chunked(rest)
        delta, rebuilt = self._grow(state, live, now, [], points, defer_summaries)
        return Applied(state, delta, {"chunks_added": len(now), "jobs_finished": finished,
                                      **self._touched(state, delta, rebuilt, before, t0)})

    def _grow(self, state: IndexState, live: LiveIndex, chunks: list[Chunk], removed: list[ChunkRow],
              points: hyperbolic.Points, defer_summaries: bool) -> tuple[vectors.VectorDelta, int]:
        """Every stage's update for new chunks (their documents' rows already written) and removed ones; the
        vector rows and the number of summaries rebuilt."""
        delta = vectors.VectorDelta()
        graph = state.manifest.graph
        ing = ingest.update(chunks, self.embedder, self.llm if graph else None)
        removed_ids = [c.id for c in removed]
        new_ids = [c.id for c in ing.chunks]
        kc = knowledge.update(state, removed, ing.extractions) if graph else knowledge.KnowledgeChange()
        none = knowledge.ChunkKnowledge()
        for c, vec in zip(ing.chunks, ing.embeddings):
            ck = kc.chunks.get(c.id, none)
            state.put(CHUNKS, ChunkRow(c.id, c.doc_id, c.ordinal, c.text, c.n_tokens, c.title, tuple(ck.entities),
                                       tuple(ck.relations), tuple(ck.hyperedges), vec))
        delta.add("chunks", new_ids, ing.embeddings)
        delta.retire("chunks", sorted(set(removed_ids) - set(new_ids)))

        rebuilt = 0
        if graph:
            gc = graph_stage.update(state, self.cfg, new_ids, removed_ids, kc)
            structure.update(state, self.cfg.cleora, gc.new_nodes)
            vectors.update(state, self.embedder, kc, delta)
            rebuilt = self._hierarchy(state, live, new_ids, kc, removed_ids, defer_summaries, delta)
        if state.manifest.hyperbolic is not None:
            hyperbolic.update(state, self.cfg.hyperbolic, live.terms, new_ids, [c.text for c in ing.chunks],
                              ing.embeddings, removed_ids, points, delta)
            delta.retire("hyperbolic", sorted(set(removed_ids) - set(new_ids)))
        lexical.update(state, removed_ids, new_ids, [c.text for c in ing.chunks],
                       [*kc.new_entities, *kc.removed_entities])
        self._counts(state)
        return delta, rebuilt

    def summarize_pending(self, live: LiveIndex, max_nodes: int | None = None) -> Applied | None:
        """The hierarchy step that `apply(defer_summaries=True)` left for later: for at most `max_nodes` of
        the pending layer-0 nodes, oldest first (the rest stay pending), so a job that arrives meanwhile
        waits for one slice, not for every summary a stream of inserts left behind."""
        t0 = time.perf_counter()
        before = self._calls()
        state = IndexState(live.version)
        pending = state.manifest.summaries_pending
        if pending is None:
            return None
        chunks = [c for c in pending.chunks if state.contains(CHUNKS, c)]
        entities = [e for e in pending.entities if state.contains(ENTITIES, e)]
        take_chunks, take_entities = slice_pending(len(chunks), len(entities), max_nodes)
        rest = PendingSummaries(chunks[take_chunks:], entities[take_entities:], pending.since, pending.after_offset)
        state.manifest.summaries_pending = rest if rest.chunks or rest.entities else None
        delta = vectors.VectorDelta()
        rebuilt = 0
        if state.manifest.hierarchy is not None:
            rebuilt = hierarchy.update(state, self.cfg, live.layers, self.llm, self._encode, chunks[:take_chunks],
                                       entities[:take_entities], set(), delta, self.device)
        self._counts(state)
        return Applied(state, delta, {"summarized_nodes": take_chunks + take_entities,
                                      "summaries_still_pending": len(rest.chunks) + len(rest.entities),
                                      **self._touched(state, delta, rebuilt, before, t0)})

    def _hierarchy(self, state: IndexState, live: LiveIndex, new_chunks: list[str], kc: knowledge.KnowledgeChange,
                   removed_chunks: list[str], defer: bool, delta: vectors.VectorDelta) -> int:
        """Deferred: new nodes join the pending ones, and only what left (removed and changed nodes, whose old
        text summaries quote) is summarized now. Not deferred: everything, pending nodes included."""
        if state.manifest.hierarchy is None:
            return 0
        m = state.manifest
        pending = m.summaries_pending or PendingSummaries([], [], time.time(), m.journal_offset)
        m.summaries_pending = None
        removed = set(removed_chunks) | kc.removed_entities | set(kc.stale_entities)
        # Pending nodes a later batch deleted are gone; a replaced one is placed once, with its new text.
        chunks = [c for c in dict.fromkeys(pending.chunks + new_chunks) if state.contains(CHUNKS, c)]
        entities = [e for e in dict.fromkeys(pending.entities + kc.new_entities) if state.contains(ENTITIES, e)]
        if defer:
            # A changed entity is placed again now, with the removals, so it is no longer pending.
            stale = set(kc.stale_entities)
            entities = [e for e in entities if e not in stale]
            if chunks or entities:
                m.summaries_pending = replace(pending, chunks=chunks, entities=entities)
            if not removed:
                return 0
            return hierarchy.update(state, self.cfg, live.layers, self.llm, self._encode, [], list(kc.stale_entities),
                                    removed, delta, self.device)
        entities += [e for e in kc.stale_entities if e not in set(entities)]
        return hierarchy.update(state, self.cfg, live.layers, self.llm, self._encode, chunks, entities, removed,
                                delta, self.device)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.encode(list(texts))

    def _calls(self) -> dict[str, int]:
        return {role: u.calls for role, u in self.llm.usage.roles.items()}

    @staticmethod
    def _counts(state: IndexState) -> None:
        state.manifest.counts = {a.name: state.count(a) for a in (DOCUMENTS, CHUNKS, ENTITIES, RELATIONS, HYPEREDGES,
                                                                  SUMMARIES)}

    def _touched(self, state: IndexState, delta: vectors.VectorDelta, rebuilt: int, before: dict[str, int],
                 t0: float) -> dict[str, Any]:
        calls = {role: u.calls - before.get(role, 0) for role, u in self.llm.usage.roles.items()
                 if u.calls - before.get(role, 0)}
        return {"summaries_rebuilt": rebuilt, "nodes_touched": delta.rows, "llm_calls": calls,
                "seconds": round(time.perf_counter() - t0, 3)}
