"""The hybrid graph (HyGRAG eqs. 2-6) extended with n-ary hyperedges (HyperGraphRAG eq. 5).

Nodes live in one global index, grouped by kind: chunks first (in the caller's order),
then entities, then hyperedges (both sorted by id, so the index does not depend on
extraction order). The adjacency is one symmetric, binary CSR matrix over all nodes;
an edge's kind follows from the kinds of its two endpoints, so it is not stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from hygraph.core.overlap import pair_overlaps, without_hubs

NODE_KINDS = ("chunk", "entity", "hyperedge")
EDGE_KINDS = ("chunk_chunk", "entity_entity", "entity_chunk", "hyperedge_entity", "hyperedge_chunk")


@dataclass(frozen=True, eq=False)
class HybridGraph:
    """Node ids per kind, the symmetric adjacency over all of them, and the relation triples.

    Global node index: chunk i -> i, entity j -> n_chunks + j, hyperedge h -> n_chunks + n_entities + h.
    `relation_heads`/`relation_tails` are global node indices of each relation's entities,
    aligned with `relation_ids`; several relations between one pair share one adjacency edge.
    The id sequences and `lookup` may be memory-mapped ones shared by the processes of a node;
    without `lookup` a dict over the ids is made.
    """

    chunk_ids: Sequence[str]
    entity_ids: Sequence[str]
    hyperedge_ids: Sequence[str]
    adjacency: sp.csr_matrix
    relation_ids: Sequence[str]
    relation_heads: np.ndarray
    relation_tails: np.ndarray
    lookup: Mapping[str, int] | None = None  # node id -> global node index

    @property
    def n_nodes(self) -> int:
        return len(self.chunk_ids) + len(self.entity_ids) + len(self.hyperedge_ids)

    @property
    def node_ids(self) -> list[str]:
        return [*self.chunk_ids, *self.entity_ids, *self.hyperedge_ids]

    @property
    def chunk_slice(self) -> slice:
        return slice(0, len(self.chunk_ids))

    @property
    def entity_slice(self) -> slice:
        start = len(self.chunk_ids)
        return slice(start, start + len(self.entity_ids))

    @property
    def hyperedge_slice(self) -> slice:
        start = len(self.chunk_ids) + len(self.entity_ids)
        return slice(start, start + len(self.hyperedge_ids))

    @cached_property
    def node_index(self) -> Mapping[str, int]:
        return self.lookup if self.lookup is not None else {node_id: i for i, node_id in enumerate(self.node_ids)}

    def node_kinds(self) -> np.ndarray:
        """Kind code per global node: 0 chunk, 1 entity, 2 hyperedge (positions in NODE_KINDS)."""
        return np.repeat(np.arange(3, dtype=np.int8),
                         [len(self.chunk_ids), len(self.entity_ids), len(self.hyperedge_ids)])

    def _block(self, rows: slice, cols: slice) -> sp.csr_matrix:
        return self.adjacency[rows, cols].tocsr()

    def chunk_entity(self) -> sp.csr_matrix:
        """Eq. 4: the chunk x entity mention incidence, binary (row i = entities mentioned in chunk i)."""
        return self._block(self.chunk_slice, self.entity_slice)

    def entity_graph(self) -> sp.csr_matrix:
        """Eq. 3: entity x entity adjacency weighted by the number of relations joining each pair."""
        n_chunks, n_entities = len(self.chunk_ids), len(self.entity_ids)
        heads = self.relation_heads - n_chunks
        tails = self.relation_tails - n_chunks
        keep = heads != tails
        rows = np.concatenate([heads[keep], tails[keep]])
        cols = np.concatenate([tails[keep], heads[keep]])
        weights = np.ones(rows.size, dtype=np.float32)
        # csr construction sums duplicate (row, col) pairs, which turns parallel relations into counts.
        return sp.csr_matrix((weights, (rows, cols)), shape=(n_entities, n_entities))

    def co_mentions(self) -> sp.csr_matrix:
        """Eq. 4 folded onto entities: entity x entity count of chunks mentioning both (zero diagonal).

        Complements `entity_graph` for community detection where extraction found few relations.
        """
        incidence = self.chunk_entity()
        counts = (incidence.T @ incidence).tocsr()
        counts.setdiag(0)
        counts.eliminate_zeros()
        return counts

    def edge_counts(self) -> dict[str, int]:
        """Undirected edge count per kind in EDGE_KINDS (index statistics)."""
        c, e, h = self.chunk_slice, self.entity_slice, self.hyperedge_slice
        return {
            "chunk_chunk": self._block(c, c).nnz // 2,
            "entity_entity": self._block(e, e).nnz // 2,
            "entity_chunk": self._block(e, c).nnz,
            "hyperedge_entity": self._block(h, e).nnz,
            "hyperedge_chunk": self._block(h, c).nnz,
        }

    def to_arrays(self) -> dict[str, np.ndarray | list[str]]:
        """Plain arrays for columnar storage: id lists, the upper-triangle edge list, the relation triples."""
        upper = sp.triu(self.adjacency, k=1).tocoo()
        order = np.lexsort((upper.col, upper.row))
        return {
            "chunk_ids": list(self.chunk_ids),
            "entity_ids": list(self.entity_ids),
            "hyperedge_ids": list(self.hyperedge_ids),
            "relation_ids": list(self.relation_ids),
            "edge_src": upper.row[order].astype(np.int64),
            "edge_dst": upper.col[order].astype(np.int64),
            "relation_heads": self.relation_heads.astype(np.int64),
            "relation_tails": self.relation_tails.astype(np.int64),
        }

    @staticmethod
    def from_arrays(arrays: dict[str, np.ndarray | list[str]]) -> "HybridGraph":
        """Inverse of `to_arrays`."""
        chunk_ids = [str(x) for x in arrays["chunk_ids"]]
        entity_ids = [str(x) for x in arrays["entity_ids"]]
        hyperedge_ids = [str(x) for x in arrays["hyperedge_ids"]]
        n = len(chunk_ids) + len(entity_ids) + len(hyperedge_ids)
        src = np.asarray(arrays["edge_src"], dtype=np.int64)
        dst = np.asarray(arrays["edge_dst"], dtype=np.int64)
        return HybridGraph(
            chunk_ids=chunk_ids,
            entity_ids=entity_ids,
            hyperedge_ids=hyperedge_ids,
            adjacency=_symmetric(src, dst, n),
            relation_ids=[str(x) for x in arrays["relation_ids"]],
            relation_heads=np.asarray(arrays["relation_heads"], dtype=np.int64),
            relation_tails=np.asarray(arrays["relation_tails"], dtype=np.int64),
        )


def _symmetric(src: np.ndarray, dst: np.ndarray, n: int) -> sp.csr_matrix:
    """Binary symmetric CSR from an undirected edge list (duplicates collapse, self-loops dropped)."""
    keep = src != dst
    rows = np.concatenate([src[keep], dst[keep]])
    cols = np.concatenate([dst[keep], src[keep]])
    adj = sp.csr_matrix((np.ones(rows.size, dtype=np.float32), (rows, cols)), shape=(n, n))
    adj.sum_duplicates()
    adj.data[:] = 1.0
    return adj


def build_hybrid_graph(
    chunk_ids: Sequence[str],
    chunk_entities: Sequence[Iterable[str]],
    relations: Sequence[tuple[str, str, str]],
    hyperedges: Sequence[tuple[str, Iterable[str], str]],
    shared_entity_threshold: int = 3,
    hub_chunks: int | None = None,
) -> HybridGraph:
    """HyGRAG eqs. 2-6 + HyperGraphRAG eq. 5: the hybrid graph over chunks, entities and hyperedges.

    chunk_entities[i]: entity ids mentioned in chunk_ids[i] (eq. 4; repeats are collapsed).
    relations: (head entity id, tail entity id, relation id) triples (eq. 3).
    hyperedges: (hyperedge id, entity ids, source chunk id); the same hyperedge id may come
    from several chunks, its entity sets are then united and it links to each source chunk.
    Two chunks are joined when they share MORE than `shared_entity_threshold` entities (eq. 2), counting
    only entities mentioned by at most `hub_chunks` chunks (None: every entity): a hub entity links no
    pair, which keeps the cost linear in the corpus (core.overlap).
    Entities named only by relations or hyperedges still become entity nodes.
    """
    if shared_entity_threshold < 0:
        raise ValueError(f"shared_entity_threshold must be >= 0, got {shared_entity_threshold}")
    if hub_chunks is not None and hub_chunks < 1:
        raise ValueError(f"hub_chunks must be >= 1, got {hub_chunks}")
    if len(chunk_entities) != len(chunk_ids):
        raise ValueError(f"{len(chunk_ids)} chunk ids but {len(chunk_entities)} entity sets")
    chunk_ids = list(chunk_ids)
    chunk_pos = {cid: i for i, cid in enumerate(chunk_ids)}
    if len(chunk_pos) != len(chunk_ids):
        raise ValueError("duplicate chunk ids")

    mentions = [list(ents) for ents in chunk_entities]
    hyper_entities: dict[str, set[str]] = {}
    hyper_sources: dict[str, set[str]] = {}
    for hid, ents, source in hyperedges:
        if source not in chunk_pos:
            raise ValueError(f"hyperedge {hid!r}: unknown source chunk {source!r}")
        hyper_entities.setdefault(hid, set()).update(ents)
        hyper_sources.setdefault(hid, set()).add(source)

    entity_set = {e for ents in mentions for e in ents}
    entity_set.update(e for h, t, _ in relations for e in (h, t))
    for ents in hyper_entities.values():
        entity_set.update(ents)
    entity_ids = sorted(entity_set)
    hyperedge_ids = sorted(hyper_entities)
    n_chunks, n_entities = len(chunk_ids), len(entity_ids)
    chunk_set, hyperedge_set = set(chunk_ids), set(hyperedge_ids)
    clash = (chunk_set & entity_set) | (chunk_set & hyperedge_set) | (entity_set & hyperedge_set)
    if clash:
        raise ValueError(f"ids used by two node kinds: {sorted(clash)[:5]}")
    entity_pos = {e: n_chunks + j for j, e in enumerate(entity_ids)}
    hyper_base = n_chunks + n_entities

    # Eq. 5: entity-chunk mention edges.
    mention_counts = np.fromiter((len(ents) for ents in mentions), dtype=np.int64, count=n_chunks)
    mention_chunk = np.repeat(np.arange(n_chunks, dtype=np.int64), mention_counts)
    mention_entity = np.fromiter((entity_pos[e] for ents in mentions for e in ents), dtype=np.int64,
                                 count=int(mention_counts.sum()))

    # Eq. 2 via the incidence product: (C C^T)[i, j] = |E_i ∩ E_j|, no pairwise loop.
    incidence = sp.csr_matrix(
        (np.ones(mention_chunk.size, dtype=np.int32), (mention_chunk, mention_entity - n_chunks)),
        shape=(n_chunks, n_entities))
    incidence.sum_duplicates()
    incidence.data[:] = 1
    cc_src_parts, cc_dst_parts = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for i, j, shared in pair_overlaps(without_hubs(incidence, hub_chunks)):
        strong = (i < j) & (shared > shared_entity_threshold)
        cc_src_parts.append(i[strong])
        cc_dst_parts.append(j[strong])
    cc_src, cc_dst = np.concatenate(cc_src_parts), np.concatenate(cc_dst_parts)

    # Eq. 3: entity-entity edges from relation triples.
    relation_ids = [rid for _, _, rid in relations]
    rel_heads = np.fromiter((entity_pos[h] for h, _, _ in relations), dtype=np.int64, count=len(relations))
    rel_tails = np.fromiter((entity_pos[t] for _, t, _ in relations), dtype=np.int64, count=len(relations))

    # HyperGraphRAG eq. 5: bipartite hyperedge-entity storage, plus hyperedge-source chunk links.
    he_src: list[int] = []
    he_dst: list[int] = []
    hc_src: list[int] = []
    hc_dst: list[int] = []
    for h, hid in enumerate(hyperedge_ids):
        node = hyper_base + h
        for e in hyper_entities[hid]:
            he_src.append(node)
            he_dst.append(entity_pos[e])
        for source in hyper_sources[hid]:
            hc_src.append(node)
            hc_dst.append(chunk_pos[source])

    src = np.concatenate([cc_src, rel_heads, mention_chunk, np.asarray(he_src, dtype=np.int64),
                          np.asarray(hc_src, dtype=np.int64)])
    dst = np.concatenate([cc_dst, rel_tails, mention_entity, np.asarray(he_dst, dtype=np.int64),
                          np.asarray(hc_dst, dtype=np.int64)])
    return HybridGraph(
        chunk_ids=chunk_ids,
        entity_ids=entity_ids,
        hyperedge_ids=hyperedge_ids,
        adjacency=_symmetric(src, dst, hyper_base + len(hyperedge_ids)),
        relation_ids=relation_ids,
        relation_heads=rel_heads,
        relation_tails=rel_tails,
    )
