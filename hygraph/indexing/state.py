"""A whole index version in memory, as the updater edits it: loaded from a snapshot, written as the next.

The tables are the ones `hygraph index` writes; the Knowledge is rebuilt from the entity,
relation and hyperedge tables with their supporting chunk lists, the summary hierarchy
from the summaries table, its embeddings and the stored hyperplanes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from hygraph.core.graph import HybridGraph
from hygraph.indexing.build import CHUNK_COLS
from hygraph.indexing.hierarchy_build import HierarchyResult
from hygraph.indexing.knowledge import Knowledge
from hygraph.indexing.lexical import build_lexical
from hygraph.model import Document, Entity, Hyperedge, Relation
from hygraph.store.graph_io import read_graph
from hygraph.store.lexical_io import KINDS, has_lexical, read_lexical
from hygraph.store.snapshot import Snapshot


@dataclass
class IndexState:
    version: int
    manifest: dict[str, Any]
    docs: list[Document]
    cols: dict[str, Any]  # CHUNK_COLS lists, "embedding" (n_chunks, dim), "lexical" {kind: BM25 postings}
    kb: Knowledge | None = None
    graph: HybridGraph | None = None
    cleora: np.ndarray | None = None  # rows follow graph.node_ids
    entity_vecs: np.ndarray | None = None  # rows follow graph.entity_ids
    hier: HierarchyResult | None = None
    hyp: dict[str, Any] | None = None  # points, edges, M (rows follow cols["id"])

    @property
    def node_vecs(self) -> dict[str, np.ndarray]:
        return {"cleora": self.cleora, "entities": self.entity_vecs}


def _knowledge(snap: Snapshot) -> Knowledge:
    kb = Knowledge()
    ent = snap.table("entities").to_pydict()
    for eid, name, typ, desc, score, chunks in zip(ent["id"], ent["name"], ent["type"], ent["description"],
                                                   ent["score"], ent["chunks"]):
        kb.entities[eid] = Entity(eid, name, typ, desc, score)
        kb.entity_chunks[eid] = set(chunks)
        # Surface-form counts are not stored; weighing the kept name by its mentions lets new
        # mentions outvote it only when they outnumber the old ones.
        kb._names[eid] = Counter({name: max(1, len(chunks))})
    rel = snap.table("relations").to_pydict()
    for rid, h, r, t, score, chunks in zip(rel["id"], rel["head"], rel["relation"], rel["tail"], rel["score"],
                                           rel["chunks"]):
        kb.relations[rid] = Relation(rid, h, r, t, score)
        kb.relation_chunks[rid] = set(chunks)
    he = snap.table("hyperedges").to_pydict()
    for hid, text, ents, score, chunks in zip(he["id"], he["text"], he["entities"], he["score"], he["chunks"]):
        kb.hyperedges[hid] = Hyperedge(hid, text, tuple(ents), score)
        kb.hyperedge_chunks[hid] = set(chunks)
    return kb


def _hierarchy(snap: Snapshot) -> HierarchyResult:
    sm = snap.table("summaries").to_pydict()
    hier = HierarchyResult(partitioner=snap.manifest["hierarchy"]["partitioner"])
    for sid, layer, text, children, leaves, key in zip(sm["id"], sm["layer"], sm["text"], sm["children"],
                                                       sm["leaves"], sm["key"]):
        hier.add(sid, layer, text, children, leaves, key)
    hier.embeddings = np.array(snap.array("summary_embeddings"), dtype=np.float32)
    layer = 1
    while snap.has(f"hyperplanes_L{layer}"):
        hier.hyperplanes.append(np.array(snap.array(f"hyperplanes_L{layer}")))
        layer += 1
    return hier


def _lexical(snap: Snapshot, cols: dict[str, Any]) -> dict[str, Any]:
    """The BM25 postings; a version written before the lexical stage existed gets them built here once."""
    if has_lexical(snap, "chunks"):
        return {kind: read_lexical(snap, kind) for kind in KINDS if has_lexical(snap, kind)}
    entity_ids = snap.table("graph_entity_ids").column("id").to_pylist() if snap.has("graph_entity_ids") else None
    return build_lexical(cols["id"], cols["text"], entity_ids)


def load_state(snap: Snapshot) -> IndexState:
    d = snap.table("documents").to_pydict()
    docs = [Document(i, x, t) for i, t, x in zip(d["id"], d["title"], d["text"])]
    cols: dict[str, Any] = snap.table("chunks").select(list(CHUNK_COLS)).to_pydict()
    cols["embedding"] = np.array(snap.array("chunk_embeddings"), dtype=np.float32)
    cols["lexical"] = _lexical(snap, cols)
    state = IndexState(version=snap.version, manifest=snap.manifest, docs=docs, cols=cols)
    if not snap.has("entities"):
        return state
    state.kb = _knowledge(snap)
    state.graph = read_graph(snap)
    state.cleora = np.array(snap.array("cleora"), dtype=np.float32)
    state.entity_vecs = np.array(snap.array("entity_embeddings"), dtype=np.float32)
    if snap.has("summaries"):
        state.hier = _hierarchy(snap)
    if snap.has("hyperbolic_points"):
        state.hyp = {"points": np.array(snap.array("hyperbolic_points"), dtype=np.float64),
                     "edges": np.array(snap.array("hyperbolic_edges"), dtype=np.int64),
                     "M": float(snap.manifest["hyperbolic"]["M"])}
    return state
