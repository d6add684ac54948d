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
from operator import itemgetter
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from hygraph.core.retrieval.context import (Context, ContextItem, LazySources, LazyTextItem, Search,
                                            passages_from_chunks)
from hygraph.core.retrieval.linking import name_vectors
from hygraph.core.retrieval.view import REQUIRED, Embed, IndexView, QuestionEntities, read_many

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
    # The searches with the question's own vector run while its entity spans are extracted and embedded.
    question_searches = search.start([("hyperedges", query_vec[None, :], k_h, None),
                                      ("chunks", query_vec[None, :], k if k_chunk is None else k_chunk, None)])
    spans = question_entities(question)
    entity_query = name_vectors([", ".join(spans)], view, embed)[0] if spans else query_vec
    [entity_hits] = search("entities", entity_query[None, :], k_v, None)
    edge_hits, dense_hits = (hits[0] for hits in question_searches())

    # Each view lookup decodes from the mapped columns and the expansion meets the same hyperedges and hub
    # entities many times: every item's extraction score, members and chunks are read once per query
    # (`_Reads`), and each wave of items is read in one call per field (`_Memo.fill`: one key search and one
    # column read for all of them, where a lookup per item cost more than the expansion itself). The
    # additions below keep the order of the plain loops, so the sums and ties are the same.
    reads = _Reads(view)
    reads.entity_score.fill(u for u, _ in entity_hits)
    retrieved_entities = _scored_above(entity_hits, reads.entity_score.__getitem__, tau_v)
    reads.entity_edges.fill(retrieved_entities)
    reads.edge_score.fill(chain((e for e, _ in edge_hits),
                                (e for v in retrieved_entities for e in reads.entity_edges[v])))
    edge_score = _scored_above(edge_hits, reads.edge_score.__getitem__, tau_h)
    for v, s in retrieved_entities.items():
        for e in reads.entity_edges[v]:
            value = s * reads.edge_score[e]
            if value > edge_score.get(e, -np.inf):
                edge_score[e] = value
    entity_score = dict(retrieved_entities)
    reads.members.fill(edge_score)
    reads.entity_score.fill(u for e in edge_score for u in reads.members[e])
    for e, s in edge_score.items():
        for u in reads.members[e]:
            value = s * reads.entity_score[u]
            if value > entity_score.get(u, -np.inf):
                entity_score[u] = value

    reads.edge_chunks.fill(edge_score)
    reads.entity_chunks.fill(entity_score)
    evidence: dict[str, float] = {}
    _spread(evidence, ((reads.edge_chunks[e], s) for e, s in edge_score.items()))
    _spread(evidence, ((reads.entity_chunks[u], s) for u, s in entity_score.items()))

    dense_ranking = [cid for cid, _ in dense_hits]
    graph_ranking = sorted(evidence, key=evidence.__getitem__, reverse=True)  # stable: ties in insertion order
    if dense_ranking:
        if dense_ranking[0] in evidence:  # evidence's chunks are distinct: it is in the ranking once
            graph_ranking.remove(dense_ranking[0])
        graph_ranking.insert(0, dense_ranking[0])
    fused, fused_scores = _reciprocal_rank_fusion(dense_ranking, graph_ranking)
    # Hub entities spread evidence over thousands of chunks: each chunk's passage is looked up once, only
    # until k passages are found, and the chunk items are the fused chunks of those passages, found from
    # the passages' chunk lists rather than by looking up the passage of every fused chunk.
    doc_of = _DocOf(view)
    entity_text, edge_text = _EntityText(view), _Texts(view.hyperedge_text)
    passages = passages_from_chunks(
        (ContextItem(cid, "chunk", "", score, (doc_of[cid],)) for cid, score in zip(fused, fused_scores)),
        view.titles, k)
    rank = dict(zip(fused, range(len(fused))))
    kept = {cid: p.id for p in passages for cid in view.doc_chunks.get(p.id, ()) if cid in rank}

    return Context(
        chunks=[ContextItem(cid, "chunk", view.chunk_text[cid], fused_scores[rank[cid]], (kept[cid],))
                for cid in sorted(kept, key=rank.__getitem__)],
        # Texts and sources (`doc_of` of the item's chunks) are read when used: the prompt budget keeps the
        # best-scored hundred or so of the hundreds of items.
        entities=[LazyTextItem.deferred(u, "entity", entity_text, s, LazySources(doc_of, reads.entity_chunks[u]))
                  for u, s in _best_first(entity_score.items())],
        hyperedges=[LazyTextItem.deferred(e, "hyperedge", edge_text, s, LazySources(doc_of, reads.edge_chunks[e]),
                                          links=tuple(reads.members[e]))
                    for e, s in _best_first(edge_score.items())],
        passages=passages,
        notes={"question_entities": list(spans)},
    )


def _scored_above(hits: list[tuple[str, float]], extraction_score: Callable[[str], float],
                  tau: float) -> dict[str, float]:
    """Eq. 8 / 9: similarity x extraction score, kept when above tau, best first."""
    scored = ((item_id, sim * extraction_score(item_id)) for item_id, sim in hits)
    return dict(_best_first((i, s) for i, s in scored if s > tau))


def _spread(evidence: dict[str, float], scored: Iterable[tuple[Sequence[str], float]]) -> None:
    """Each item's score split evenly over its chunks, added in item order (one call for all the items)."""
    get = evidence.get
    for chunk_ids, score in scored:
        if chunk_ids:
            share = score / len(chunk_ids)
            for cid in chunk_ids:
                evidence[cid] = get(cid, 0.0) + share


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


def _best_first(scored: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    # A reversed sort is stable too: equal scores keep their order.
    return sorted(scored, key=itemgetter(1), reverse=True)


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


class _Memo(dict):
    """`memo[key]`: the view field's value of `key`, read once per query. A dict, so that a key read before costs
    one dict lookup and no Python call (the expansion reads hub entities hundreds of times a query); `fill` reads
    many keys in one call, and a key not filled is read alone."""

    def __init__(self, field: Mapping[str, Any], default: Any = REQUIRED) -> None:
        super().__init__()
        self.field, self.default = field, default

    def fill(self, keys: Iterable[str]) -> None:
        todo = [key for key in dict.fromkeys(keys) if key not in self]
        if todo:
            self.update(zip(todo, read_many(self.field, todo, self.default)))

    def __missing__(self, key: str) -> Any:
        got = self[key] = self.field[key] if self.default is REQUIRED else self.field.get(key, self.default)
        return got


class _DocOf(_Memo):
    """Chunk id -> its passage id, each looked up in the view once per query (hub entities share chunks)."""

    def __init__(self, view: IndexView) -> None:
        super().__init__(view.chunk_doc)

    def __call__(self, chunk_ids: Sequence[str]) -> tuple[str, ...]:
        """The passages of the chunks, first-mention order, each once."""
        if len(chunk_ids) >= _FILL_FROM:
            self.fill(chunk_ids)
        return tuple(dict.fromkeys(map(self.__getitem__, chunk_ids)))

    def prepare(self, calls: Iterable[tuple[Sequence[str]]]) -> None:
        """Reads the passages of the chunks of all these calls together (`LazySources.prepare_all`: the prompt's
        items, one read of the view rather than one per item)."""
        self.fill(chain.from_iterable(args[0] for args in calls))


class _Reads:
    """The view's entity and hyperedge fields that the expansion reads, each item's read once per query."""

    def __init__(self, view: IndexView) -> None:
        self.entity_score = _Memo(view.entity_score)
        self.edge_score = _Memo(view.hyperedge_score)
        self.members = _Memo(view.hyperedge_entities)
        self.entity_edges = _Memo(view.entity_hyperedges, ())
        self.entity_chunks = _Memo(view.entity_chunks, ())
        self.edge_chunks = _Memo(view.hyperedge_chunks, ())
