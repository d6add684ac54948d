"""`hybrid`: HyGRAG's context- and relation-aware bi-level retrieval (§3.2, Alg. 2, eqs. 14-20).

Four vector searches, one per collection; the rest is set operations over the hits, bounded
by the retrieved items' degrees and the retrieved communities' sizes, never a scan of a whole
collection. The helpers below the strategy (`select_relations`, `chunks_under`, the item
builders) are shared with `collapsed` and `local_global`.
"""

from __future__ import annotations

from itertools import chain
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from hygraph.core.retrieval.context import Context, Item, Search, passages_from_chunks
from hygraph.core.retrieval.view import IndexView

# A similarity search deeper than k scores candidates that a top-k search would not reach
# (relations around the entity set, graph-reached chunks). 20 x k keeps one search per
# collection cheap; the cap bounds it for large k.
POOL_FACTOR = 20
MAX_POOL = 1000


def pool_size(k: int) -> int:
    """HyGRAG eq. 19 filter depth: hits fetched to score candidates beyond the top k (20 x k, at most 1000, >= k)."""
    return max(k, min(POOL_FACTOR * k, MAX_POOL))


def hybrid(query_vec: np.ndarray, k: int, view: IndexView, search: Search, *,
           relation_k: int | None = None, relation_pool: int | None = None,
           chunk_pool: int | None = None) -> Context:
    """HyGRAG Alg. 2 / eqs. 14-20: summaries, chunks and entities by similarity, then relations around them.

    - eq. 14: the top-k summaries over every layer; eq. 15: the top-k chunks; eq. 16: the
      top-k entities (the chunk search goes `chunk_pool` deep, its first k hits are eq. 15).
    - eq. 17: the entity set E_all is the retrieved entities, the layer-0 members of the
      retrieved communities (`summary_leaves`), and the entities mentioned in the retrieved
      chunks (the chunk-entity edges E^ce, eq. 5, of Alg. 2 line 9).
    - eqs. 18-19: the `relation_k` relations touching E_all most similar to the query
      (`select_relations`: one `relation_pool`-deep search intersected with the candidates).

    Passage ranking (recall@k is computed on it). Dense similarity finds the first hop of a
    multi-hop question but ranks the second-hop passage low, because the question does not
    name the bridge entity. The retrieved relations do: "X directed by Y" leads to Y's passage.
    - dense list D: the chunk hits, by similarity;
    - graph list G: the chunks of D reached from the retrieved relations, as their source
      chunks (`relation_chunks`) or as mentions of their head or tail entity (`entity_chunks`),
      by similarity. G is restricted to D: every chunk in it has a similarity, and a hub
      entity's long mention list only probes D;
    - fused order: D's best chunk first (the dense first hop is the most reliable hit), then
      alternately the best not yet placed chunk of G and of D, G first. A graph-reached chunk
      is promoted ahead of dense-only chunks of similar rank, while the dense ranking still
      fills every other slot, so a noisy G cannot push all dense hits out of the top k.
    `passages` are the fused order's passages (first appearance, score = that chunk's
    similarity), at most k; `chunks` are the fused order's first k chunks.

    Summaries carry no `sources`: an upper-layer community covers a large share of the corpus.
    """
    q = query_vec[None, :]
    relation_k = relation_k or k
    summary_hits = search("summaries", q, k, None)[0]
    chunk_hits = search("chunks", q, max(k, chunk_pool or pool_size(k)), None)[0]
    entity_hits = search("entities", q, k, None)[0]
    relation_hits = search("relations", q, max(relation_k, relation_pool or pool_size(relation_k)), None)[0]

    communities = [sid for sid, _ in summary_hits]
    entity_ids = [eid for eid, _ in entity_hits]
    # E_all is only ever asked about the ends of the searched relations, so the community
    # members are looked up among those ends only.
    ends = {end for rid, _ in relation_hits for end in (view.relations[rid][0], view.relations[rid][2])}
    entity_set = set(entity_ids) | searched_members(communities, ends, view)
    retrieved_chunks = {cid for cid, _ in chunk_hits[:k]}

    def in_entity_set(eid: str) -> bool:
        return eid in entity_set or not retrieved_chunks.isdisjoint(view.entity_chunks.get(eid, ()))

    # lazy: the community members are walked only when the search yields too few candidates
    fallback_order = chain(entity_ids, *(view.summary_leaves.get(sid, ()) for sid in communities))
    relations = select_relations(relation_hits, in_entity_set, fallback_order, relation_k, view)

    similarity = dict(chunk_hits)
    dense_order = [cid for cid, _ in chunk_hits]
    reached = _reached_chunks(relations, view, similarity)
    graph_order = [cid for cid in dense_order if cid in reached]
    fused = _alternate(dense_order, graph_order)
    chunks = [chunk_item(cid, similarity[cid], view) for cid in fused]
    return Context(
        summaries=[summary_item(sid, score, view) for sid, score in summary_hits],
        chunks=chunks[:k],
        entities=[entity_item(eid, score, view) for eid, score in entity_hits],
        relations=[relation_item(rid, score, view) for rid, score in relations],
        passages=passages_from_chunks(chunks, view.titles, k),
    )


def select_relations(relation_hits: Sequence[tuple[str, float]], is_candidate_end: Callable[[str], bool],
                     fallback_entities: Iterable[str], k: int, view: IndexView) -> list[tuple[str, float]]:
    """HyGRAG eqs. 18-19: the k relations with an end in the entity set, most similar to the query first.

    `relation_hits` is a similarity search over the whole relation collection, deeper than k;
    the candidates among them (head or tail accepted by `is_candidate_end`) keep their
    similarity and come first. This scores exactly the candidates the search reached, without
    scanning the collection. When fewer than k are found, the rest are taken from
    `view.entity_relations` of `fallback_entities`, in that order (it should list the entity set
    by priority), until k are collected. Such a relation is outside the search, so its
    similarity is at most the search's last score (the floor); it is scored floor x its
    extraction score, which ranks it after every searched candidate and orders the fallbacks
    by extraction confidence.
    """
    picked: list[tuple[str, float]] = []
    for rid, score in relation_hits:
        head, _, tail, _ = view.relations[rid]
        if is_candidate_end(head) or is_candidate_end(tail):
            picked.append((rid, score))
            if len(picked) == k:
                return picked
    floor = max(relation_hits[-1][1], 0.0) if relation_hits else 0.0
    searched = {rid for rid, _ in relation_hits}
    extra: list[str] = []
    for eid in fallback_entities:
        for rid in view.entity_relations.get(eid, ()):
            if rid not in searched:
                searched.add(rid)
                extra.append(rid)
        if len(picked) + len(extra) >= k:
            break
    extra.sort(key=lambda rid: -view.relations[rid][3])
    return picked + [(rid, floor * view.relations[rid][3]) for rid in extra[:k - len(picked)]]


def _reached_chunks(relations: Sequence[tuple[str, float]], view: IndexView,
                    similarity: dict[str, float]) -> set[str]:
    """Scored chunks that state a relation or mention one of its ends."""
    pool = similarity.keys()
    reached: set[str] = set()
    for rid, _ in relations:
        head, _, tail, _ = view.relations[rid]
        reached |= pool & view.relation_chunks.get(rid, ())
        reached |= pool & view.entity_chunks.get(head, ())
        reached |= pool & view.entity_chunks.get(tail, ())
    return reached


def _alternate(dense_order: Sequence[str], graph_order: Sequence[str]) -> list[str]:
    """Dense head, then one unplaced chunk from the graph list and one from the dense list in turn."""
    out = list(dense_order[:1])
    placed = set(out)
    cursors = [iter(graph_order), iter(dense_order)]
    turn = 0
    while cursors:
        cursor = cursors[turn % len(cursors)]
        cid = next((c for c in cursor if c not in placed), None)
        if cid is None:
            cursors.remove(cursor)
            continue
        out.append(cid)
        placed.add(cid)
        turn += 1
    return out


def chunk_item(cid: str, score: float, view: IndexView) -> Item:
    """HyGRAG eq. 20 context item: a chunk, sourced to its passage."""
    return Item(cid, "chunk", view.chunk_text[cid], score, (view.chunk_doc[cid],))


def summary_item(sid: str, score: float, view: IndexView) -> Item:
    """HyGRAG eq. 20 context item: a community summary with its layer (no sources, see `hybrid`)."""
    return Item(sid, "summary", view.summary_text[sid], score, (), view.summary_layer[sid])


def entity_item(eid: str, score: float, view: IndexView) -> Item:
    """HyGRAG eq. 20 context item: an entity as "name: description", sourced to the passages mentioning it."""
    name = view.entity_name.get(eid, eid)
    desc = view.entity_desc.get(eid, "")
    return Item(eid, "entity", f"{name}: {desc}" if desc else name, score,
                _docs(view.entity_chunks.get(eid, ()), view))


def relation_item(rid: str, score: float, view: IndexView) -> Item:
    """HyGRAG eq. 20 context item: a triplet in entity names, sourced to the passages stating it."""
    head, phrase, tail, _ = view.relations[rid]
    text = f"{view.entity_name.get(head, head)} {phrase} {view.entity_name.get(tail, tail)}"
    return Item(rid, "relation", text, score, _docs(view.relation_chunks.get(rid, ()), view))


def searched_members(summary_ids: Iterable[str], searched: set[str], view: IndexView) -> set[str]:
    """HyGRAG eq. 17 / seed 004 global search: the searched ids that are layer-0 members of the summaries.

    Tests each id of the small searched set for membership in each summary's leaves (`in`)
    instead of listing the leaves: an upper-layer summary covers a large share of the index.
    """
    out: set[str] = set()
    for sid in summary_ids:
        leaves = view.summary_leaves.get(sid, ())
        out.update(x for x in searched if x in leaves)
    return out


def chunks_under(summary_ids: Sequence[str], chunk_hits: Sequence[tuple[str, float]], members: set[str],
                 view: IndexView) -> Iterator[Item]:
    """EraRAG §III-D / seed 004 global search: chunks under the summaries, searched ones (`members`) first.

    The rest follow in summary order and leaf order; the search did not reach them, so their
    similarity is at most its last score, which they are given. Lazy: take what you need.
    """
    yield from (chunk_item(cid, score, view) for cid, score in chunk_hits if cid in members)
    floor = chunk_hits[-1][1] if chunk_hits else 0.0
    placed = set(members)
    for sid in summary_ids:
        for cid in view.summary_leaves.get(sid, ()):
            if cid in view.chunk_text and cid not in placed:
                placed.add(cid)
                yield chunk_item(cid, floor, view)


def until_k_passages(items: Iterable[Item], k: int) -> list[Item]:
    """CONTRACT `passages` cut: chunk items in order until they cover k passages, so a long walk stops early."""
    out: list[Item] = []
    docs: set[str] = set()
    for item in items:
        out.append(item)
        docs.update(item.sources)
        if len(docs) >= k:
            break
    return out


def _docs(chunk_ids: Iterable[str], view: IndexView) -> tuple[str, ...]:
    return tuple(dict.fromkeys(view.chunk_doc[c] for c in chunk_ids))
