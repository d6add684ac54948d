"""The graph stage: the hybrid graph (HyGRAG eqs. 2-6, HyperGraphRAG eq. 5) built whole, grown in place.

Nodes are chunks, entities and hyperedges; edges are chunk-chunk (more than
`graph.shared_entity_threshold` shared entities, counting those mentioned by at most `graph.hub_chunks`
chunks), entity-entity (relations), entity-chunk (mentions), hyperedge-entity and hyperedge-chunk.
The build runs `build_hybrid_graph` over the whole knowledge and stores each node's neighbour list;
an update adds and removes exactly the nodes and edges the batch's knowledge change implies, by the
same rules, touching only the rows of the nodes at either end. An entity the batch makes a hub, or no
longer a hub, changes the shared count of every pair of its chunks: those chunks' chunk-chunk edges
are worked out again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from hygraph.config import HygraphConfig
from hygraph.core.graph import EDGE_KINDS, HybridGraph, build_hybrid_graph
from hygraph.indexing.stages.knowledge import KnowledgeChange, KnowledgeView
from hygraph.indexing.state import IndexState
from hygraph.store.artifacts import (CHUNKS, ENTITIES, GRAPH, HYPEREDGES, NODE_CHUNK, NODE_ENTITY,
                                     NODE_HYPEREDGE, RELATIONS, GraphNodeRow)

# Edge kind by the unordered pair of node kinds (core.graph.EDGE_KINDS).
_EDGE_KIND = {frozenset([NODE_CHUNK]): "chunk_chunk", frozenset([NODE_ENTITY]): "entity_entity",
              frozenset([NODE_ENTITY, NODE_CHUNK]): "entity_chunk",
              frozenset([NODE_HYPEREDGE, NODE_ENTITY]): "hyperedge_entity",
              frozenset([NODE_HYPEREDGE, NODE_CHUNK]): "hyperedge_chunk"}


def build(cfg: HygraphConfig, chunk_ids: Sequence[str], kb: KnowledgeView) -> HybridGraph:
    chunk_entities: dict[str, set[str]] = {cid: set() for cid in chunk_ids}
    for eid, cids in kb.entity_chunks.items():
        for cid in cids:
            chunk_entities[cid].add(eid)
    return build_hybrid_graph(
        chunk_ids, [chunk_entities[c] for c in chunk_ids],
        [(r.head, r.tail, rid) for rid, r in kb.relations.items()],
        [(hid, kb.hyperedges[hid].entities, cid) for hid, cids in kb.hyperedge_chunks.items() for cid in cids],
        shared_entity_threshold=cfg.graph.shared_entity_threshold, hub_chunks=cfg.graph.hub_chunks)


def build_rows(graph: HybridGraph, cleora: np.ndarray) -> list[GraphNodeRow]:
    """One row per node: its kind, its neighbours (adjacency order) and its Cleora vector."""
    ids = graph.node_ids
    kinds = graph.node_kinds()
    adj = graph.adjacency
    return [GraphNodeRow(ids[i], int(kinds[i]), tuple(ids[j] for j in adj.indices[adj.indptr[i]:adj.indptr[i + 1]]),
                         cleora[i]) for i in range(len(ids))]


def edge_counts(graph: HybridGraph) -> dict[str, int]:
    return graph.edge_counts()


@dataclass
class GraphChange:
    new_nodes: list[str] = field(default_factory=list)  # nodes whose Cleora vector is still to be computed
    removed_nodes: set[str] = field(default_factory=set)


class _Adjacency:
    """The neighbour lists of the nodes an update touches, loaded on first use and written back at the end."""

    def __init__(self, state: IndexState) -> None:
        self.state = state
        self.lists: dict[str, list[str]] = {}
        self.sets: dict[str, set[str]] = {}
        self.kinds: dict[str, int] = {}
        self.dropped: set[str] = set()
        self.edges: Counter[str] = Counter()  # edge count delta per kind

    def _load(self, node: str) -> list[str]:
        if node in self.dropped:
            return []
        if node not in self.lists:
            row = self.state.get(GRAPH, node)
            self.lists[node] = list(row.neighbours) if row is not None else []
            self.sets[node] = set(self.lists[node])
            if row is not None:
                self.kinds.setdefault(node, row.kind)
        return self.lists[node]

    def neighbours(self, node: str) -> list[str]:
        return self._load(node)

    def kind(self, node: str) -> int:
        if node not in self.kinds:
            self._load(node)
        return self.kinds[node]

    def add_node(self, node: str, kind: int) -> None:
        self.dropped.discard(node)
        self.lists[node], self.sets[node], self.kinds[node] = [], set(), kind

    def link(self, a: str, b: str) -> None:
        if a == b or a in self.dropped or b in self.dropped:
            return
        self._load(a)
        if b in self.sets[a]:
            return
        self._load(b)
        for x, y in ((a, b), (b, a)):
            self.lists[x].append(y)
            self.sets[x].add(y)
        self.edges[_EDGE_KIND[frozenset([self.kind(a), self.kind(b)])]] += 1

    def unlink(self, a: str, b: str) -> None:
        if a in self.dropped or b in self.dropped:
            return
        self._load(a)
        if b not in self.sets[a]:
            return
        self._load(b)
        for x, y in ((a, b), (b, a)):
            self.lists[x].remove(y)
            self.sets[x].discard(y)
        self.edges[_EDGE_KIND[frozenset([self.kind(a), self.kind(b)])]] -= 1

    def drop(self, node: str) -> None:
        """Remove a node and its edges; neighbours already dropped are not reloaded."""
        for other in list(self._load(node)):
            self.unlink(node, other)
        self.dropped.add(node)
        del self.lists[node], self.sets[node]


def update(state: IndexState, cfg: HygraphConfig, new_chunks: Sequence[str], removed_chunks: Iterable[str],
           kc: KnowledgeChange) -> GraphChange:
    """Remove the nodes the batch deleted (a replaced chunk too), then add the new chunks, entities and
    hyperedges with their edges, and the new and lost relation edges."""
    removed_chunks = list(removed_chunks)
    adj = _Adjacency(state)
    change = GraphChange()
    gone = [*removed_chunks, *kc.removed_entities, *kc.removed_hyperedges]
    for node in gone:
        if state.contains(GRAPH, node):
            adj.drop(node)
            change.removed_nodes.add(node)
    for rid in kc.removed_relations:
        row = state.base.table(RELATIONS).get(rid)
        if row is not None and row.head != row.tail and not _still_related(state, row.head, row.tail):
            adj.unlink(row.head, row.tail)

    for eid in kc.new_entities:
        adj.add_node(eid, NODE_ENTITY)
        change.new_nodes.append(eid)
    for hid in kc.new_hyperedges:
        adj.add_node(hid, NODE_HYPEREDGE)
        change.new_nodes.append(hid)
    for cid in new_chunks:
        adj.add_node(cid, NODE_CHUNK)
        change.new_nodes.append(cid)
    for cid in new_chunks:
        ck = kc.chunks[cid]
        for eid in ck.entities:
            _ensure_entity(adj, state, eid, change)
            adj.link(cid, eid)
        for hid in ck.hyperedges:
            adj.link(cid, hid)
    entities = {cid: kc.chunks[cid].entities for cid in new_chunks}
    for cid in _hub_changed_chunks(state, cfg.graph.hub_chunks, entities, removed_chunks):
        entities[cid] = state.require(CHUNKS, cid).entities
    for cid, ents in entities.items():
        _relink_chunks(adj, state, cid, ents, cfg.graph.shared_entity_threshold, cfg.graph.hub_chunks)
    for rid in kc.new_relations:
        row = state.require(RELATIONS, rid)
        _ensure_entity(adj, state, row.head, change)
        _ensure_entity(adj, state, row.tail, change)
        adj.link(row.head, row.tail)
    for hid in kc.new_hyperedges:
        row = state.require(HYPEREDGES, hid)
        for eid in row.entities:
            _ensure_entity(adj, state, eid, change)
            adj.link(hid, eid)
        for cid in row.chunks:
            adj.link(hid, cid)

    dim = state.dims["cleora"]
    fresh = set(change.new_nodes)
    for node, neighbours in adj.lists.items():
        old = state.get(GRAPH, node) if node not in fresh else None
        cleora = old.cleora if old is not None else np.zeros(dim, np.float32)
        state.put(GRAPH, GraphNodeRow(node, adj.kind(node), tuple(neighbours), cleora))
    for node in change.removed_nodes - set(adj.lists):
        state.delete(GRAPH, node)
    edges = dict(state.manifest.stats.get("edges") or {k: 0 for k in EDGE_KINDS})
    for kind, n in adj.edges.items():
        edges[kind] = edges.get(kind, 0) + n
    state.manifest.stats["edges"] = edges
    return change


def _hub_changed_chunks(state: IndexState, hub_chunks: int, new: dict[str, Sequence[str]],
                        removed_chunks: Iterable[str]) -> list[str]:
    """The live old chunks of every entity that the batch's mentions moved across `hub_chunks` (counted in the
    version the batch applies to, and now)."""
    touched = {e for ents in new.values() for e in ents}
    for cid in removed_chunks:
        row = state.base.table(CHUNKS).get(cid)
        if row is not None:
            touched.update(row.entities)
    out: dict[str, None] = {}
    for eid in sorted(touched):
        before, after = state.base.table(ENTITIES).get(eid), state.get(ENTITIES, eid)
        was = before is not None and len(before.chunks) > hub_chunks
        if after is not None and (len(after.chunks) > hub_chunks) != was:
            out.update(dict.fromkeys(c for c in after.chunks if c not in new))
    return list(out)


def _relink_chunks(adj: _Adjacency, state: IndexState, cid: str, entities: Sequence[str], threshold: int,
                   hub_chunks: int) -> None:
    """Eq. 2 for one chunk (core.graph's rule): its chunk-chunk edges become the chunks sharing more than
    `threshold` of its entities mentioned by at most `hub_chunks` chunks."""
    shared: Counter[str] = Counter()
    for eid in entities:
        chunks = state.require(ENTITIES, eid).chunks
        if len(chunks) <= hub_chunks:
            shared.update(chunks)
    partners = {other for other, n in shared.items() if n > threshold and other != cid}
    for other in list(adj.neighbours(cid)):
        if other not in partners and adj.kind(other) == NODE_CHUNK:
            adj.unlink(cid, other)
    for other in sorted(partners):
        adj.link(cid, other)


def _ensure_entity(adj: _Adjacency, state: IndexState, eid: str, change: GraphChange) -> None:
    """An entity named by a fact becomes a node even without an entity record (the build's rule)."""
    if eid not in adj.lists and not state.contains(GRAPH, eid):
        adj.add_node(eid, NODE_ENTITY)
        change.new_nodes.append(eid)


def _still_related(state: IndexState, a: str, b: str) -> bool:
    """Whether a relation between entities a and b remains (several relations share one edge)."""
    rows = [state.get(ENTITIES, a), state.get(ENTITIES, b)]
    if any(r is None for r in rows):
        return False
    shorter = min(rows, key=lambda r: len(r.relations))
    for rid in shorter.relations:
        rel = state.get(RELATIONS, rid)
        if rel is not None and {rel.head, rel.tail} == {a, b}:
            return True
    return False
