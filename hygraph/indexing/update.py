"""Apply a batch of journal jobs to an index version without a rebuild (ARCHITECTURE.md §7).

Insert: chunk, embed, extract the new documents; grow the knowledge and the hybrid graph
by the build's rules; embed only new nodes (Cleora by propagation into the new nodes);
update the hierarchy selectively (`hierarchy_update`); place new chunks in the hyperbolic
space. Delete: withdraw the documents' chunks and everything only they supported.
The result is the next snapshot version plus the vector rows to upsert and to retire.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from hygraph.backends.embedder import Embedder
from hygraph.backends.llm.base import LLM
from hygraph.config import HygraphConfig
from hygraph.core import cleora, hyperbolic
from hygraph.core.hierarchy import layer0_features
from hygraph.indexing import tables
from hygraph.indexing.build import CHUNK_COLS, build_graph
from hygraph.indexing.chunker import chunk_documents
from hygraph.indexing.hierarchy_build import _Texts
from hygraph.indexing.hierarchy_update import update_leiden, update_lsh
from hygraph.indexing.lexical import update_lexical
from hygraph.indexing.stages import _tokenizer
from hygraph.indexing.state import IndexState
from hygraph.model import Document, Entity
from hygraph.store.journal import Job

# Manifest key of the layer-0 nodes whose hierarchy step was deferred: {"chunks", "entities",
# "since" (epoch s of the first deferral), "after_offset" (journal offset the deferral began after)}.
PENDING = "summaries_pending"


@dataclass
class Batch:
    """The net effect of consecutive journal jobs: documents to add, documents to remove."""

    add: dict[str, Document] = field(default_factory=dict)
    remove: set[str] = field(default_factory=set)
    end_offset: int = 0
    job_ids: list[str] = field(default_factory=list)


def fold_jobs(jobs: Sequence[Job], present: Mapping[str, str]) -> Batch:
    """Replay jobs in order over the documents present (id -> text): a re-sent identical document is
    a no-op, a new text under an existing id replaces it, a delete of an absent id does nothing."""
    batch = Batch()
    live = {d: True for d in present}
    for job in jobs:
        batch.job_ids.append(job.job_id)
        batch.end_offset = job.end_offset
        if job.op == "insert":
            for row in job.payload["documents"]:
                doc = Document(row["id"], row["text"], row.get("title", ""), row.get("metadata") or {})
                if live.get(doc.id) and doc.id not in batch.add and present.get(doc.id) == doc.text:
                    continue
                if live.get(doc.id) and doc.id in present:
                    batch.remove.add(doc.id)
                batch.add[doc.id] = doc
                live[doc.id] = True
        else:
            for doc_id in job.payload["ids"]:
                if doc_id in batch.add:
                    del batch.add[doc_id]
                if doc_id in present:
                    batch.remove.add(doc_id)
                live[doc_id] = False
    return batch


@dataclass
class Delta:
    """What an apply changed: vector rows per kind to upsert (ids, vectors, layers) and ids to retire."""

    upserts: dict[str, tuple[list[str], np.ndarray, list[int] | None]] = field(default_factory=dict)
    retired: dict[str, list[str]] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


class Applier:
    """Edits an IndexState in place, one batch at a time; models are the updater's own."""

    def __init__(self, cfg: HygraphConfig, embedder: Embedder, llm: LLM, device: str = "cpu") -> None:
        self.cfg, self.embedder, self.llm, self.device = cfg, embedder, llm, device

    def apply(self, state: IndexState, batch: Batch, defer_summaries: bool = False) -> Delta:
        """`defer_summaries`: a batch that only adds leaves its hierarchy step to `summarize_pending`
        (the documents are served at once, their summaries a version later); the pending nodes are
        kept in the manifest, so they survive a restart. A batch that removes anything always runs
        it, pending nodes included, so no summary keeps quoting deleted text."""
        t0 = time.perf_counter()
        before = {role: u.calls for role, u in self.llm.usage.roles.items()}
        delta = Delta()
        removed_chunks = [c for c, d in zip(state.cols["id"], state.cols["doc_id"]) if d in batch.remove]
        removed_text = [t for t, d in zip(state.cols["text"], state.cols["doc_id"]) if d in batch.remove]
        new_docs = list(batch.add.values())
        chunks = chunk_documents(new_docs, _tokenizer(self.cfg.embedder.model), self.cfg.chunking.size_tokens,
                                 self.cfg.chunking.overlap_tokens)
        vectors = (self.embedder.encode([c.text for c in chunks]) if chunks
                   else np.zeros((0, state.cols["embedding"].shape[1]), np.float32))

        old = _snapshot_ids(state)
        gone = set(removed_chunks)
        keep = np.array([c not in gone for c in state.cols["id"]], dtype=bool)
        state.docs = [d for d in state.docs if d.id not in batch.remove] + new_docs
        for k in CHUNK_COLS:
            state.cols[k] = [v for v, kept in zip(state.cols[k], keep) if kept]
        state.cols["id"] += [c.id for c in chunks]
        state.cols["doc_id"] += [c.doc_id for c in chunks]
        state.cols["ordinal"] += [c.ordinal for c in chunks]
        state.cols["text"] += [c.text for c in chunks]
        state.cols["n_tokens"] += [c.n_tokens for c in chunks]
        state.cols["title"] += [c.title for c in chunks]
        state.cols["embedding"] = np.vstack([state.cols["embedding"][keep], vectors]).astype(np.float32)
        delta.upserts["chunks"] = ([c.id for c in chunks], vectors, None)

        summaries_rebuilt = 0
        if state.kb is not None:
            summaries_rebuilt = self._graph(state, chunks, removed_chunks, removed_text, old, delta,
                                            defer_summaries)
        if state.hyp is not None:
            self._hyperbolic(state, keep, len(chunks), delta)
        new = _snapshot_ids(state)
        _lexical(state, removed_chunks, chunks, old, new)
        for kind in old:
            gone = sorted(old[kind] - new[kind])
            if gone:
                delta.retired.setdefault(kind, []).extend(gone)
        calls = {role: u.calls - before.get(role, 0) for role, u in self.llm.usage.roles.items()
                 if u.calls - before.get(role, 0)}
        delta.stats = {"documents_added": len(new_docs), "documents_removed": len(batch.remove),
                       "chunks_added": len(chunks), "chunks_removed": len(removed_chunks),
                       **_touched(delta, summaries_rebuilt, calls, t0)}
        return delta

    def summarize_pending(self, state: IndexState) -> Delta:
        """The hierarchy step that `apply(defer_summaries=True)` left for later, for every batch since."""
        t0 = time.perf_counter()
        before = {role: u.calls for role, u in self.llm.usage.roles.items()}
        pending = state.manifest.pop(PENDING, None)
        delta = Delta()
        if pending is None or state.hier is None:
            return delta
        old = _snapshot_ids(state)
        rebuilt = self._hierarchy(state, pending["chunks"], pending["entities"], [], [], old, delta)
        gone = sorted(old["summaries"] - set(state.hier.ids))
        if gone:
            delta.retired["summaries"] = gone
        calls = {role: u.calls - before.get(role, 0) for role, u in self.llm.usage.roles.items()
                 if u.calls - before.get(role, 0)}
        delta.stats = {"summarized_nodes": len(pending["chunks"]) + len(pending["entities"]),
                       **_touched(delta, rebuilt, calls, t0)}
        return delta

    def _graph(self, state: IndexState, chunks: list, removed_chunks: list[str], removed_text: list[str],
               old: dict[str, set[str]], delta: Delta, defer_summaries: bool) -> int:
        kb = state.kb
        assert kb is not None and state.graph is not None and state.cleora is not None
        stale = self._withdraw(kb, removed_chunks, removed_text)
        for ex in (self.llm.extract(chunks) if chunks else []):
            kb.add(ex, ex.chunk_id)
        kb.finish()
        old_graph, old_cleora, old_entity_vecs = state.graph, state.cleora, state.entity_vecs
        graph = build_graph(self.cfg, state.cols, kb)
        row = old_graph.node_index
        carried = np.array([row.get(n, -1) for n in graph.node_ids], dtype=np.int64)
        is_new = carried < 0
        base = np.zeros((graph.n_nodes, old_cleora.shape[1]), np.float32)
        base[~is_new] = old_cleora[carried[~is_new]]
        c = self.cfg.cleora
        state.cleora = cleora.cleora_extend(graph.adjacency, graph.node_ids, base, is_new,
                                            iterations=c.iterations, seed=c.seed)
        state.graph = graph

        new_entities = [e for e in graph.entity_ids if e not in old["entities"]]
        new_relations = [r for r in kb.relations if r not in old["relations"]]
        new_hyperedges = [h for h in graph.hyperedge_ids if h not in old["hyperedges"]]
        texts = ([tables.entity_text(kb, e) for e in new_entities] + [tables.relation_text(kb, r) for r in new_relations]
                 + [kb.hyperedges[h].text for h in new_hyperedges])
        vecs = self.embedder.encode(texts) if texts else np.zeros((0, old_entity_vecs.shape[1]), np.float32)
        n_e, n_r = len(new_entities), len(new_relations)
        ent_vec = dict(zip(new_entities, vecs[:n_e]))
        old_ent_row = {e: i for i, e in enumerate(old_graph.entity_ids)}
        state.entity_vecs = np.vstack([ent_vec[e] if e in ent_vec else old_entity_vecs[old_ent_row[e]]
                                       for e in graph.entity_ids]).astype(np.float32) \
            if graph.entity_ids else np.zeros((0, old_entity_vecs.shape[1]), np.float32)
        delta.upserts["entities"] = (new_entities, vecs[:n_e], None)
        delta.upserts["relations"] = (new_relations, vecs[n_e:n_e + n_r], None)
        delta.upserts["hyperedges"] = (new_hyperedges, vecs[n_e + n_r:], None)
        if state.hier is None:
            return 0
        present = set(graph.chunk_ids) | set(graph.entity_ids)
        pending = state.manifest.pop(PENDING, None) or {"chunks": [], "entities": [], "since": time.time(),
                                                        "after_offset": state.manifest.get("journal_offset", 0)}
        # Pending nodes a later batch deleted are gone; a replaced one is placed once, with its new text.
        new_chunks = [c for c in dict.fromkeys(pending["chunks"] + [c.id for c in chunks]) if c in present]
        new_entities = [e for e in dict.fromkeys(pending["entities"] + new_entities) if e in present]
        if defer_summaries and not removed_chunks and not stale and (old["chunks"] | old["entities"]) <= present:
            state.manifest[PENDING] = {**pending, "chunks": new_chunks, "entities": new_entities}
            return 0
        return self._hierarchy(state, new_chunks, new_entities, removed_chunks, stale, old, delta)

    @staticmethod
    def _withdraw(kb: Any, removed_chunks: list[str], removed_text: list[str]) -> list[str]:
        """Delete's knowledge step; returns surviving entities whose description quoted a removed chunk.

        Those descriptions are cleared (no deleted text may stay retrievable), and the
        entities count as changed, so the summaries over them are rebuilt too.
        """
        gone = set(removed_chunks)
        touched = [e for e, cids in kb.entity_chunks.items() if cids & gone]
        kb.remove_chunks(removed_chunks)
        stale = []
        for eid in touched:
            ent = kb.entities.get(eid)
            # Descriptions are sentences of a chunk, cut with an ellipsis when long.
            quote = ent.description.rstrip("…") if ent is not None else ""
            if quote and any(quote in t for t in removed_text):
                kb.entities[eid] = Entity(ent.id, ent.name, ent.type, "", ent.score)
                stale.append(eid)
        return stale

    def _hierarchy(self, state: IndexState, new_chunks: list[str], new_entities: list[str], replaced: list[str],
                   stale: list[str], old: dict[str, set[str]], delta: Delta) -> int:
        assert state.hier is not None and state.kb is not None and state.graph is not None
        h = self.cfg.hierarchy
        texts = _Texts(state.cols, state.kb)

        def summarize(members: list[list[str]], leaves: list[list[str]], known: Mapping[str, str]) -> list[str]:
            return self.llm.summarize([texts.request(m, lv, known) for m, lv in zip(members, leaves)])

        layer0 = set(state.graph.chunk_ids) | set(state.graph.entity_ids)
        # A replaced document keeps its chunk ids: those rows leave and come back with the new text.
        removed = ((old["chunks"] | old["entities"]) - layer0) | (set(replaced) & set(new_chunks)) | set(stale)
        new_entities = new_entities + [e for e in stale if e not in set(new_entities)]
        if state.hier.partitioner == "lsh":
            graph = state.graph
            n_chunks = len(graph.chunk_ids)
            chunk_row = {c: i for i, c in enumerate(graph.chunk_ids)}
            ent_row = {e: i for i, e in enumerate(graph.entity_ids)}

            def features0(ids: list[str]) -> np.ndarray:
                text = np.vstack([state.cols["embedding"][chunk_row[i]] if i in chunk_row
                                  else state.entity_vecs[ent_row[i]] for i in ids])
                struct = state.cleora[[chunk_row[i] if i in chunk_row else n_chunks + ent_row[i] for i in ids]]
                blocks = {"text": text, "cleora": struct}
                return layer0_features(*(blocks[f] for f in h.layer0_features))

            result = update_lsh(state.hier, h, features0, [*new_chunks, *new_entities], removed,
                                summarize, self._encode_texts, self.device)
        else:
            result = update_leiden(state.hier, self.cfg.updates.tau_attach, new_entities, new_chunks, removed,
                                   summarize, self._encode_texts)
        state.hier = result.result
        row = {sid: i for i, sid in enumerate(state.hier.ids)}
        fresh = [s for s in result.fresh if s in row]
        delta.upserts["summaries"] = (fresh, state.hier.embeddings[[row[s] for s in fresh]]
                                      if fresh else np.zeros((0, state.hier.embeddings.shape[1]), np.float32),
                                      [state.hier.layers[row[s]] for s in fresh])
        return len(fresh)

    def _encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.encode(list(texts))

    def _hyperbolic(self, state: IndexState, keep: np.ndarray, n_new: int, delta: Delta) -> None:
        """HyperRAG §3.1-3.2 for new chunks: explicit edges to every chunk, then training of the new rows
        only; the norm bound M grows (and every stored vector is rewritten) only when a new point needs it."""
        assert state.hyp is not None
        hc = self.cfg.hyperbolic
        kept_rows = np.flatnonzero(keep)
        renumber = np.full(len(keep), -1, dtype=np.int64)
        renumber[kept_rows] = np.arange(kept_rows.size)
        edges = renumber[state.hyp["edges"]]
        edges = edges[(edges >= 0).all(axis=1)]
        points = state.hyp["points"][kept_rows]
        n_kept = kept_rows.size
        if n_new:
            new_emb = state.cols["embedding"][n_kept:]
            points = np.vstack([points, hyperbolic.init_from_text(new_emb, hc.dim, hc.seed)])
            all_edges = hyperbolic.explicit_edges(hyperbolic.key_terms(state.cols["text"]), theta=hc.theta,
                                                  max_neighbors=hc.max_neighbors)
            touching = all_edges[(all_edges >= n_kept).any(axis=1)]
            edges = np.vstack([edges, touching]) if touching.size else edges
            trainable = np.zeros(len(points), dtype=bool)
            trainable[n_kept:] = True
            points = hyperbolic.train_poincare(points, touching, epochs=hc.epochs, lr=hc.lr, negatives=hc.negatives,
                                               batch_size=hc.batch_size, seed=hc.seed, trainable_mask=trainable)
        state.hyp["points"], state.hyp["edges"] = points, edges.astype(np.int64)
        ids = state.cols["id"]
        bound = hyperbolic.norm_bound(hyperbolic.lorentz_lift(points[n_kept:])) if n_new else 0.0
        if bound > state.hyp["M"]:
            state.hyp["M"] = hyperbolic.norm_bound(hyperbolic.lorentz_lift(points))
            rows = np.arange(len(points))
        else:
            rows = np.arange(n_kept, len(points))
        delta.upserts["hyperbolic"] = ([ids[i] for i in rows],
                                       hyperbolic.storage_vectors(points[rows], state.hyp["M"]).astype(np.float32),
                                       None)


def _lexical(state: IndexState, removed_chunks: list[str], chunks: list, old: dict[str, set[str]],
             new: dict[str, set[str]]) -> None:
    """The lexical stage's update: BM25 postings of removed and replaced chunks out, new ones in."""
    state.cols["lexical"] = update_lexical(
        state.cols["lexical"], removed_chunks, [c.id for c in chunks], [c.text for c in chunks],
        sorted(old["entities"] - new["entities"]), sorted(new["entities"] - old["entities"]))


def _touched(delta: Delta, summaries_rebuilt: int, calls: dict[str, int], t0: float) -> dict[str, Any]:
    return {"summaries_rebuilt": summaries_rebuilt,
            "nodes_touched": sum(len(ids) for ids, _, _ in delta.upserts.values())
            + sum(len(v) for v in delta.retired.values()),
            "llm_calls": calls, "seconds": round(time.perf_counter() - t0, 3)}


def _snapshot_ids(state: IndexState) -> dict[str, set[str]]:
    out = {"chunks": set(state.cols["id"]), "entities": set(), "relations": set(), "hyperedges": set(),
           "summaries": set()}
    if state.graph is not None and state.kb is not None:
        out["entities"] = set(state.graph.entity_ids)
        out["relations"] = set(state.kb.relations)
        out["hyperedges"] = set(state.graph.hyperedge_ids)
    if state.hier is not None:
        out["summaries"] = set(state.hier.ids)
    if state.hyp is not None:
        out["hyperbolic"] = out["chunks"]
    return out
