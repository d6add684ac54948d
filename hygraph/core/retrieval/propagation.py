"""Graph propagation (HippoRAG 2 §3.3): personalized PageRank from the question's entities and passages over the
hybrid graph, passages ranked by the mass they receive. Used by `ppr` and `hybrid`.

The walk (`walk_for`, built once per index version) runs over chunks, entities and hyperedges
with one weight per edge kind and a larger weight on the edge between a chunk and the entity
its passage is about (the entity named by its title): a walk that reaches an entity should
mostly land on that entity's own passage, the second hop of a multi-hop question, rather
than spread over every passage that mentions it.

The constants were chosen on the dev sets (2wiki_dev, musique_train100, hotpotqa_train100)
with the bundled MiniLM embedder and the extractive extraction; docs/bench/retrieval_tuning.md
lists what was tried.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from hygraph.core.graph import HybridGraph
from hygraph.core.ppr import Walk, forward_push, transition
from hygraph.core.retrieval.view import IndexView
from hygraph.model import normalize_name

EDGE_WEIGHTS = {"entity_chunk": 1.0, "entity_entity": 1.0, "chunk_chunk": 0.5, "hyperedge_entity": 1.0,
                "hyperedge_chunk": 1.0}
SUBJECT_WEIGHT = 20.0  # chunk <-> the entity its title names, relative to a plain mention
DAMPING = 0.7  # share of the mass that walks on at each step (HippoRAG uses 0.5; 0.7 reaches the second hop)
# Residual mass per node under which forward push stops pushing: ~3x faster than the power iteration it replaced
# at 2wiki_dev's 78k nodes, at equal recall@5 on the dev sets, and its cost does not grow with the graph.
PUSH_EPSILON = 1e-4
RELATION_SEEDS = 5  # triplets most similar to the question whose ends seed the walk
PASSAGE_SHARE = 0.3  # share of the reset mass on the dense + BM25 passages; the rest is on linked entities


_DISAMBIGUATOR = re.compile(r"\s*\([^()]*\)$")


def title_names(title: str) -> tuple[str, ...]:
    """The entity ids a passage title names: the whole title normalized and the title without its
    disambiguator."""
    return tuple(dict.fromkeys((normalize_name(title), normalize_name(_DISAMBIGUATOR.sub("", title)))))


def subject_pairs(graph: HybridGraph, chunk_doc: dict[str, str], titles: dict[str, str]) -> np.ndarray:
    """(chunk node, entity node) for every chunk and each entity id its passage title names: the whole title
    normalized and, for "Mark King (musician)", the title without its disambiguator, "mark king"."""
    index = graph.node_index
    first_entity = len(graph.chunk_ids)
    pairs = []
    for i, cid in enumerate(graph.chunk_ids):
        for name in title_names(titles.get(chunk_doc.get(cid, ""), "")):
            j = index.get(name, -1)
            if j >= first_entity:
                pairs.append((i, j))
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def walk_for(graph: HybridGraph, chunk_doc: dict[str, str], titles: dict[str, str]) -> Walk:
    """The weighted walk of one index version (EDGE_WEIGHTS, SUBJECT_WEIGHT)."""
    return transition(graph, EDGE_WEIGHTS, subject_pairs(graph, chunk_doc, titles), SUBJECT_WEIGHT)


def reset_vector(view: IndexView, entity_seeds: dict[str, float],
                 chunk_seeds: Sequence[tuple[str, float]]) -> np.ndarray | None:
    """HippoRAG 2 §3.3's personalization over the graph's nodes; None when no seed is in the graph.

    1 - PASSAGE_SHARE of the mass goes to the entities, in proportion to their seed weights,
    and PASSAGE_SHARE to the seed chunks, in proportion to their scores; when one side is empty
    the other takes all of it.
    """
    if view.graph is None or view.walk is None:
        raise ValueError("graph propagation needs the hybrid graph, and this index version has none")
    index = view.graph.node_index
    # One lookup per seed (`get`, not `in` then `[]`): the index is a mapped hash table, a hash and a search each.
    ent = [(i, w) for e, w in entity_seeds.items() if w > 0 and (i := index.get(e)) is not None]
    chk = [(i, s) for c, s in chunk_seeds if s > 0 and (i := index.get(c)) is not None]
    if not ent and not chk:
        return None
    reset = np.zeros(view.graph.n_nodes, dtype=np.float32)
    for nodes, share in ((ent, 1.0 - PASSAGE_SHARE if chk else 1.0), (chk, PASSAGE_SHARE if ent else 1.0)):
        if nodes:
            rows, weights = zip(*nodes)
            w = np.asarray(weights, dtype=np.float32)
            np.add.at(reset, np.asarray(rows), share * w / w.sum())
    return reset


def propagate(view: IndexView, entity_seeds: dict[str, float], chunk_seeds: Sequence[tuple[str, float]]) -> np.ndarray:
    """HippoRAG 2 §3.3: PPR mass per chunk (rows follow view.graph.chunk_ids); all 0 without seeds."""
    reset = reset_vector(view, entity_seeds, chunk_seeds)
    assert view.graph is not None and view.walk is not None
    if reset is None:
        return np.zeros(len(view.graph.chunk_ids), dtype=np.float32)
    return forward_push(view.walk, reset, damping=DAMPING, epsilon=PUSH_EPSILON)[0][:len(view.graph.chunk_ids)]


def by_mass(mass: np.ndarray, view: IndexView, k: int) -> list[tuple[str, float]]:
    """Chunks with positive mass, most first, until they cover k passages (a passage may have several chunks);
    of a filtered view, the chunks its filter allows."""
    assert view.graph is not None
    if view.passage_filter is not None:
        ranked = view.passage_filter.best(mass, view.graph.chunk_ids, view.graph.node_index, 8 * k)
    else:
        positive = np.flatnonzero(mass > 0)
        # Only the heaviest few can make the top k passages; a partial sort keeps this cheap on large graphs.
        if positive.size > 8 * k:
            positive = positive[np.argpartition(-mass[positive], 8 * k - 1)[:8 * k]]
        ranked = positive[np.argsort(-mass[positive], kind="stable")]
    out: list[tuple[str, float]] = []
    docs: set[str] = set()
    for j in ranked:
        cid = view.graph.chunk_ids[j]
        out.append((cid, float(mass[j])))
        docs.add(view.chunk_doc[cid])
        if len(docs) >= k:
            break
    return out
