"""`hypergraph` (HyperGraphRAG §4.2-4.3): entity and hyperedge retrieval weighted by extraction
scores, bidirectional expansion over the bipartite hypergraph, fused with dense chunks.

Thresholds are on the cosine scale. The paper's tau_V = 50 and tau_H = 5 belong to its own
implementation's score scale; here a retrieval score is cosine x extraction score, both at most 1.
Measured with the bundled all-MiniLM-L6-v2: a question's entity spans score about 0.1-0.3 against
unrelated entity names and 0.45-1.0 against the same or closely related names, so tau_V = 0.3
(times extraction scores of 0.7-0.9) keeps the entities the question names and drops the rest.
Against a whole question, unrelated fact sentences score below about 0.15 and on-topic ones
0.3-0.75, bridge facts included, so tau_H = 0.2 is looser, as the paper's tau_H is looser than
its tau_V: a fact may be relevant without naming the question's entities.

Passage ranking: reciprocal-rank fusion (Cormack et al. 2009, c = 60) of two chunk rankings,
  - dense: the top k_chunk chunks by cosine to the question (K_chunk);
  - graph: chunks ranked by the evidence K_H puts on them. Every hyperedge and entity of K_H
    spreads its score evenly over the chunks it was extracted from (a fact's sources, an
    entity's mentions), and a chunk's evidence is what it receives. A chunk that states a
    retrieved fact and mentions several retrieved entities collects most; a mention of a hub
    entity is worth little, one of a rare entity much. This is how a multi-hop bridge passage
    (one that mentions an entity reached only through a retrieved fact, and that the question's
    embedding does not resemble) gets a graph rank.
RRF scores a chunk sum(1 / (c + rank)) over the lists it is in, so agreement between the lists
wins and a graph-only bridge chunk at graph rank r ties with a dense-only chunk at dense rank r
(ties go to the dense ranking). The top dense chunk is seeded at the head of the graph list too:
it then scores the maximum 2 / (c + 1) and stays first, so fusion can add bridge passages
without displacing the question's best direct match. Scores are divided by that maximum, so
chunks score in (0, 1] like the entity and hyperedge items they share a prompt budget with.
"""

from __future__ import annotations

from itertools import chain
from typing import Iterable, Mapping, Sequence

import numpy as np

from hygraph.core.graph import HybridGraph
from hygraph.core.retrieval.context import (Context, ContextItem, LazySources, LazyTextItem, Search,
                                            passages_from_chunks)
from hygraph.core.retrieval.linking import name_vectors
from hygraph.core.retrieval.view import Embed, IndexView, QuestionEntities, read_many

_RRF_C = 60
# An item's passages are read together from this many chunks on (a hub entity's); an item of a few chunks, as most
# are, reads them one by one, which costs less than preparing a read of several keys.
_FILL_FROM = 8


def hypergraph(question: str, query_vec: np.ndarray, k: int, view: IndexView, search: Search, embed: Embed,
               question_entities: QuestionEntities, *, k_v: int = 60, tau_v: float = 0.3, k_h: int = 60,
               tau_h: float = 0.2, k_chunk: int | None = None) -> Context:
    """HyperGraphRAG §4.2-4.3: entities (eq. 8), hyperedges (eq. 9), expansion (eq. 10-11), K* = K_H ∪ K_chunk.

    Entities are searched with the embedding of the question's extracted entity spans joined
    into one text (the question's own vector when none were extracted; the entity's own vector when the text
    is the name of an index entity: `name_vectors`); the k_v nearest are
    scored cosine x entity score and kept above tau_v. Hyperedges likewise with the question
    vector, k_h, hyperedge score and tau_h. Expansion adds the hyperedges of the retrieved
    entities and the entities of every hyperedge in K_H; an expanded item scores the best score
    of an item that reached it times its own extraction score. K_chunk is the k_chunk (default
    k) nearest chunks. Passages: the module docstring's fusion, top k.
    """
    if view.graph is None or view.graph_score is None:
        raise ValueError("hypergraph needs the view's hybrid graph and its node scores")
    # The searches with the question's own vector run while its entity spans are extracted and embedded.
    question_searches = search.start([("hyperedges", query_vec[None, :], k_h, None),
                                      ("chunks", query_vec[None, :], k if k_chunk is None else k_chunk, None)])
    spans = question_entities(question)
    entity_query = name_vectors([", ".join(spans)], view, embed)[0] if spans else query_vec
    [entity_hits] = search("entities", entity_query[None, :], k_v, None)
    edge_hits, dense_hits = (hits[0] for hits in question_searches())

    # The expansion runs on the graph's node numbers: its adjacency holds the hypergraph's incidence (entity -
    # hyperedge) and provenance (entity - chunk, hyperedge - chunk), and `graph_score` each node's extraction
    # score. A query reaches hundreds of entities and thousands of chunks; looking each up by id cost more
    # than the expansion itself. Items are taken in the order the paper's loops meet them (the first meeting
    # breaks ties), so the scores and rankings are those of loops over ids.
    g, score = view.graph, view.graph_score
    graph = _Bipartite(g)
    entities, entity_s = _scored_above(entity_hits, g.node_index, score, tau_v)
    hits, hit_s = _scored_above(edge_hits, g.node_index, score, tau_h)
    reached, by = graph.neighbours(entities, graph.hyperedges)
    edges, edge_s = _best_of(np.concatenate([hits, reached]), np.concatenate([hit_s, entity_s[by] * score[reached]]))
    members, by = graph.neighbours(edges, graph.entities)
    nodes, node_s = _best_of(np.concatenate([entities, members]),
                             np.concatenate([entity_s, edge_s[by] * score[members]]))

    # Evidence: each item's score split evenly over its chunks, facts first; a chunk's sum adds its shares in item
    # order (`bincount` adds in input order), and the graph ranking breaks ties by first meeting.
    edge_chunks, edge_by = graph.neighbours(edges, graph.chunks)
    node_chunks, node_by = graph.neighbours(nodes, graph.chunks)
    met = np.concatenate([edge_chunks, node_chunks])
    share = np.concatenate([(edge_s / np.maximum(np.bincount(edge_by, minlength=len(edges)), 1))[edge_by],
                            (node_s / np.maximum(np.bincount(node_by, minlength=len(nodes)), 1))[node_by]])
    evidence = np.bincount(met, weights=share, minlength=graph.chunks.stop)
    touched = _first_met(met)
    graph_ranking = touched[np.argsort(-evidence[touched], kind="stable")].tolist()

    dense_ranking = [at for at in (g.node_index.get(cid) for cid, _ in dense_hits) if at is not None]
    if dense_ranking:
        if dense_ranking[0] in graph_ranking:  # it is there once: the ranking's chunks are distinct
            graph_ranking.remove(dense_ranking[0])
        graph_ranking.insert(0, dense_ranking[0])
    fused, fused_scores = _reciprocal_rank_fusion(dense_ranking, graph_ranking)
    # Hub entities spread evidence over thousands of chunks: each chunk's passage is looked up once, only
    # until k passages are found, and the chunk items are the fused chunks of those passages, found from
    # the passages' chunk lists rather than by looking up the passage of every fused chunk.
    doc_of = _DocOf(view)
    chunk_ids = g.chunk_ids
    passages = passages_from_chunks(
        (ContextItem(chunk_ids[at], "chunk", "", s, (doc_of[chunk_ids[at]],)) for at, s in zip(fused, fused_scores)),
        view.titles, k)
    rank = dict(zip(fused, range(len(fused))))
    kept: dict[int, tuple[str, str]] = {}
    for p in passages:
        for cid in view.doc_chunks.get(p.id, ()):
            at = g.node_index.get(cid)
            if at in rank:
                kept[at] = (cid, p.id)

    # Texts, sources (the passages of an item's chunks) and a fact's members are made when used: the prompt
    # budget keeps the best-scored hundred or so of the hundreds of items, and reads theirs together.
    sources = _NeighbourIds(graph, graph.chunks, chunk_ids, doc_of=doc_of)
    links = _NeighbourIds(graph, graph.entities, g.entity_ids)
    node_rank, edge_rank = np.argsort(-node_s, kind="stable"), np.argsort(-edge_s, kind="stable")
    links.pending = edges[edge_rank].tolist()
    entity_text, edge_text = _EntityText(view), _Texts(view.hyperedge_text)
    return Context(
        chunks=[ContextItem(cid, "chunk", view.chunk_text[cid], fused_scores[rank[at]], (doc,))
                for at, (cid, doc) in sorted(kept.items(), key=lambda kept_at: rank[kept_at[0]])],
        entities=[LazyTextItem.deferred(u, "entity", entity_text, s, LazySources(sources, node))
                  for u, s, node in zip(_names(g.entity_ids, nodes[node_rank] - graph.entities.start),
                                        node_s[node_rank].tolist(), nodes[node_rank].tolist())],
        hyperedges=[LazyTextItem.deferred(e, "hyperedge", edge_text, s, LazySources(sources, node),
                                          links=LazySources(links, node))
                    for e, s, node in zip(_names(g.hyperedge_ids, edges[edge_rank] - graph.hyperedges.start),
                                          edge_s[edge_rank].tolist(), edges[edge_rank].tolist())],
        passages=passages,
        notes={"question_entities": list(spans)},
    )


def _scored_above(hits: list[tuple[str, float]], node_index: Mapping[str, int], score: np.ndarray,
                  tau: float) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 8 / 9: the hits' nodes and similarity x extraction score, kept when above tau, best first (ties in hit
    order). A hit the version does not hold (a newer version's row of a shared collection) is left out."""
    found = [(at, sim) for at, sim in ((node_index.get(i), sim) for i, sim in hits) if at is not None]
    nodes = np.fromiter((at for at, _ in found), np.int64, len(found))
    s = np.fromiter((sim for _, sim in found), np.float64, len(found)) * score[nodes]
    keep = s > tau
    order = np.argsort(-s[keep], kind="stable")
    return nodes[keep][order], s[keep][order]


def _first_met(nodes: np.ndarray) -> np.ndarray:
    """The distinct nodes in the order they first appear."""
    _, first = np.unique(nodes, return_index=True)
    return nodes[np.sort(first)]


def _best_of(nodes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct node once, in first-met order, with the best of its values."""
    distinct, first, inverse = np.unique(nodes, return_index=True, return_inverse=True)
    best = np.full(len(distinct), -np.inf)
    np.maximum.at(best, inverse, values)
    order = np.argsort(first, kind="stable")
    return distinct[order], best[order]


class _Bipartite:
    """The hybrid graph's rows read as the hypergraph's: a node's neighbours of one kind (a range of node numbers)."""

    def __init__(self, g: HybridGraph) -> None:
        self.indptr, self.indices = g.adjacency.indptr, g.adjacency.indices
        self.chunks, self.entities, self.hyperedges = g.chunk_slice, g.entity_slice, g.hyperedge_slice

    def neighbours(self, rows: np.ndarray, kind: slice) -> tuple[np.ndarray, np.ndarray]:
        """The neighbours of `kind` of each row, row after row (a row's in node order), and for each the position
        in `rows` of the row it came from."""
        rows = np.asarray(rows, np.int64)
        starts = self.indptr[rows].astype(np.int64)
        lengths = self.indptr[rows + 1].astype(np.int64) - starts
        by = np.repeat(np.arange(len(rows)), lengths)
        at = np.arange(int(lengths.sum())) + np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        found = self.indices[at].astype(np.int64)
        keep = (found >= kind.start) & (found < kind.stop)
        return found[keep], by[keep]


def _names(strings: Sequence[str], rows: np.ndarray) -> list[str]:
    """The strings at these rows, in one read where the sequence is a mapped one (`Strings.many`)."""
    many = getattr(strings, "many", None)
    return many(rows) if many is not None else [strings[i] for i in rows.tolist()]


class _NeighbourIds:
    """Node -> the ids of its neighbours of one kind (or their passages, with `doc_of`): the items' LazySources.
    `prepare` reads the neighbours of many nodes together (the prompt's items, `LazySources.prepare_all`); the first
    call for a node not prepared reads the `pending` nodes' together with it (every fact's members, for a response)."""

    def __init__(self, graph: _Bipartite, kind: slice, strings: Sequence[str],
                 doc_of: _DocOf | None = None) -> None:
        self.graph, self.kind, self.strings, self.doc_of = graph, kind, strings, doc_of
        self.known: dict[int, list[str]] = {}
        self.pending: list[int] = []

    def prepare(self, calls: Iterable[tuple[int]]) -> None:
        nodes = [node for node, in calls if node not in self.known]
        if not nodes:
            return
        found, by = self.graph.neighbours(np.asarray(nodes, np.int64), self.kind)
        ids = _names(self.strings, found - self.kind.start)
        cuts = np.searchsorted(by, np.arange(len(nodes) + 1)).tolist()
        for i, node in enumerate(nodes):
            self.known[node] = ids[cuts[i]:cuts[i + 1]]
        if self.doc_of is not None:
            self.doc_of.prepare([(self.known[node],) for node in nodes])

    def __call__(self, node: int) -> Sequence[str]:
        if node not in self.known:
            self.prepare([(n,) for n in self.pending] + [(node,)])
            self.pending = []
        found = self.known[node]
        return self.doc_of(found) if self.doc_of is not None else found


def _reciprocal_rank_fusion(dense_ranking: list[str], graph_ranking: list[str]) -> tuple[list[str], list[float]]:
    """The fused chunks, best first, and their scores (over the maximum 2 / (c + 1)); each list's chunks are
    distinct. In arrays, for the graph list's hundreds of chunks: a chunk missing from a list has rank inf there,
    whose term 1 / (c + inf) is 0.0, so a chunk's score is the same float as the sum of its terms."""
    place = dict(zip(graph_ranking, range(len(graph_ranking))))
    ids = graph_ranking + [cid for cid in dense_ranking if cid not in place]
    place.update(zip(ids[len(graph_ranking):], range(len(graph_ranking), len(ids))))
    graph_rank, dense_rank = np.full(len(ids), np.inf), np.full(len(ids), np.inf)
    graph_rank[:len(graph_ranking)] = np.arange(1, len(graph_ranking) + 1)
    dense_rank[[place[cid] for cid in dense_ranking]] = np.arange(1, len(dense_ranking) + 1)
    fused = 1.0 / (_RRF_C + graph_rank) + 1.0 / (_RRF_C + dense_rank)
    # Best score first, then the better dense rank, then the better graph rank: no two chunks share all three,
    # as every chunk has a rank of its own in one list.
    order = np.lexsort((graph_rank, dense_rank, -fused))
    return [ids[i] for i in order.tolist()], (fused[order] / (2.0 / (_RRF_C + 1))).tolist()


class _Texts:
    """The text of an item, or of many in one read of the view (`LazyTextItem.prepare_texts`: the prompt's)."""

    def __init__(self, field: Mapping[str, str]) -> None:
        self.field = field

    def __call__(self, item_id: str) -> str:
        return self.field[item_id]

    def many(self, item_ids: Sequence[str]) -> list[str]:
        return read_many(self.field, item_ids)


class _EntityText(_Texts):
    """An entity's text: "name: description", or its name alone when it has none."""

    def __init__(self, view: IndexView) -> None:
        super().__init__(view.entity_name)
        self.desc = view.entity_desc

    def __call__(self, item_id: str) -> str:
        return _joined(self.field[item_id], self.desc.get(item_id, ""))

    def many(self, item_ids: Sequence[str]) -> list[str]:
        return list(map(_joined, read_many(self.field, item_ids), read_many(self.desc, item_ids, "")))


def _joined(name: str, desc: str) -> str:
    return f"{name}: {desc}" if desc else name


class _DocOf(dict):
    """Chunk id -> its passage id, each looked up in the view once per query (hub entities share chunks). A dict, so
    that a chunk read before costs one dict lookup and no Python call; `fill` reads many chunks in one call, and a
    chunk not filled is read alone."""

    def __init__(self, view: IndexView) -> None:
        super().__init__()
        self.field = view.chunk_doc

    def fill(self, chunk_ids: Iterable[str]) -> None:
        todo = [cid for cid in dict.fromkeys(chunk_ids) if cid not in self]
        if todo:
            self.update(zip(todo, read_many(self.field, todo)))

    def __missing__(self, chunk_id: str) -> str:
        got = self[chunk_id] = self.field[chunk_id]
        return got

    def __call__(self, chunk_ids: Sequence[str]) -> tuple[str, ...]:
        """The passages of the chunks, first-mention order, each once."""
        if len(chunk_ids) >= _FILL_FROM:
            self.fill(chunk_ids)
        return tuple(dict.fromkeys(map(self.__getitem__, chunk_ids)))

    def prepare(self, calls: Iterable[tuple[Sequence[str]]]) -> None:
        """Reads the passages of the chunks of all these calls together (`LazySources.prepare_all`: the prompt's
        items, one read of the view rather than one per item)."""
        self.fill(chain.from_iterable(args[0] for args in calls))
