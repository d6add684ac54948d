"""`local` and `global_`: Adaptive Context GraphRAG's two retrieval paths (seed 004 §III-B).

Local search answers narrow, factual questions from the question entities' neighbourhood;
global search answers broad ones from community summaries and the nodes under them (their
context nodes included: `summary_leaves` lists them). `auto` (routing.py) sends corpus-level
questions to global search.
"""

from __future__ import annotations

import numpy as np

from hygraph.core.retrieval.context import Context, Search, passages_from_chunks, pool_size
from hygraph.core.retrieval.items import (chunk_item, chunks_under, entity_item, relation_item, searched_members,
                                          select_relations, summary_item, until_k_passages)
from hygraph.core.retrieval.view import IndexView, QuestionEntities
from hygraph.model import normalize_name


def local(question: str, query_vec: np.ndarray, k: int, view: IndexView, search: Search,
          question_entities: QuestionEntities) -> Context:
    """Seed 004 §III-B local search: question entities, their relations and neighbours, and the chunks stating them.

    - seed entities: the question's entity surface forms (`question_entities`) whose
      normalized name is an entity id, in question order, then the k entities most similar
      to the query. Named seeds come first: an exact name match is stronger evidence than
      similarity. A seed's score is its similarity when the entity search (`pool_size(k)`
      deep) reached it, else that search's last score, an upper bound.
    - relations: the k relations touching a seed, most similar to the query first
      (`select_relations`, the seeds as fallback order).
    - neighbours: the other ends of those relations, in relation order, scored with their
      relation's score; `entities` lists the seeds then the neighbours.

    Passage ranking: candidate chunks are those that mention a seed or a neighbour or state a
    selected relation. A chunk's support is how many of those entities and relations it
    carries; chunks rank by support, then by similarity to the query (chunks the
    `pool_size(k)`-deep chunk search did not reach come after those it did, in discovery
    order, scored with its last score). Support first because a chunk that ties a question
    entity to its relation and to the neighbour is the local evidence the question asks for,
    whatever its wording. `chunks` are the first k, `passages` their passages (at most k).
    """
    q = query_vec[None, :]
    depth = pool_size(k)
    searches = search.start(
        [("entities", q, depth, None), ("chunks", q, depth, None), ("relations", q, depth, None)])
    named = [normalize_name(name) for name in question_entities(question)]
    entity_hits, chunk_hits, relation_hits = (hits[0] for hits in searches())
    seeds = list(dict.fromkeys([*(eid for eid in named if eid in view.entity_name),
                                *(eid for eid, _ in entity_hits[:k])]))
    entity_sim = dict(entity_hits)
    entity_floor = entity_hits[-1][1] if entity_hits else 0.0
    seed_set = set(seeds)
    relations = select_relations(relation_hits, seed_set.__contains__, seeds, k, view)
    neighbours: dict[str, float] = {}
    for rid, score in relations:
        head, _, tail, _ = view.relations[rid]
        for eid in (head, tail):
            if eid not in seed_set:
                neighbours.setdefault(eid, score)

    support: dict[str, int] = {}
    for eid in [*seeds, *neighbours]:
        for cid in view.entity_chunks.get(eid, ()):
            support[cid] = support.get(cid, 0) + 1
    for rid, _ in relations:
        for cid in view.relation_chunks.get(rid, ()):
            support[cid] = support.get(cid, 0) + 1
    chunk_sim = dict(chunk_hits)
    chunk_floor = chunk_hits[-1][1] if chunk_hits else 0.0
    ranked = sorted(support, key=lambda cid: (-support[cid], cid not in chunk_sim, -chunk_sim.get(cid, 0.0)))
    chunks = until_k_passages((chunk_item(cid, chunk_sim.get(cid, chunk_floor), view) for cid in ranked), k)
    return Context(
        chunks=chunks[:k],
        entities=[*(entity_item(eid, entity_sim.get(eid, entity_floor), view) for eid in seeds),
                  *(entity_item(eid, score, view) for eid, score in neighbours.items())],
        relations=[relation_item(rid, score, view) for rid, score in relations],
        passages=passages_from_chunks(chunks, view.titles, k),
    )


def global_(query_vec: np.ndarray, k: int, view: IndexView, search: Search) -> Context:
    """Seed 004 §III-B global search: the k best community summaries of every layer, and the nodes under them.

    The communities' layer-0 members (context nodes included) are the candidates:
    - entities: members among the `pool_size(k)`-deep entity search, by similarity, the first k;
    - chunks: members among the `pool_size(k)`-deep chunk search, by similarity; when they
      cover fewer than k passages, the other member chunks follow in community order and
      member order, scored with the search's last score (an upper bound on their similarity).
    Passage ranking: the passages of those chunks in that order, at most k. Ranking by
    similarity across the chosen communities (rather than community by community) lets a
    question spanning two communities draw its passages from both.
    """
    q = query_vec[None, :]
    depth = pool_size(k)
    summary_hits, chunk_hits, entity_hits = (hits[0] for hits in search.many(
        [("summaries", q, k, None), ("chunks", q, depth, None), ("entities", q, depth, None)]))
    communities = [sid for sid, _ in summary_hits]
    members = searched_members(communities, {cid for cid, _ in chunk_hits} | {eid for eid, _ in entity_hits}, view)
    chunks = until_k_passages(chunks_under(communities, chunk_hits, members, view), k)
    return Context(
        summaries=[summary_item(sid, score, view) for sid, score in summary_hits],
        chunks=chunks[:k],
        entities=[entity_item(eid, score, view) for eid, score in entity_hits if eid in members][:k],
        passages=passages_from_chunks(chunks, view.titles, k),
    )
