"""The read-only view of one index version that retrieval strategies work on.

Read-only mappings looked up by key (`view.x[key]`, `.get`, `in`), never iterated whole: the
served view is backed by memory-mapped columns of the version (store/view_loader.py), shared
by every process that maps them, and a hand-made view of plain dicts works the same. Vector
search and model calls come in as callables (`Search`, `Embed`, ...), so every strategy is
testable on a hand-made view with a brute-force search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Container, Iterable, Mapping, Sequence, TypeVar

import numpy as np

from hygraph.core.graph import HybridGraph
from hygraph.core.lexical import LexicalIndex
from hygraph.core.retrieval.filter import PassageFilter
from hygraph.core.ppr import Walk

Embed = Callable[[Sequence[str]], np.ndarray]  # texts -> L2-normalized rows
QuestionEntities = Callable[[str], list[str]]  # the `extract` role on a question: entity surface forms
Decompose = Callable[[str, Sequence[str]], list[str]]  # (question, round-1 passages) -> directives
# chunk ids -> their live Poincaré points (n, dim) float64: the online learner moves them between versions
Points = Callable[[Sequence[str]], np.ndarray]
V = TypeVar("V")
REQUIRED: Any = object()  # `read_many`'s default: every key must be present


def read_many(mapping: Mapping[str, V], keys: Sequence[str], default: Any = REQUIRED) -> list[V]:
    """`mapping[key]` of each key (KeyError for an absent one), or `mapping.get(key, default)` when a default is
    given. A served view's mappings read several keys in one call (their `get_many`: one search of the mapped
    key index and one column read for all of them); a plain dict is read key by key."""
    many = getattr(mapping, "get_many", None)
    got = many(keys, default) if many is not None else [mapping.get(key, default) for key in keys]
    if default is REQUIRED:
        for key, value in zip(keys, got):
            if value is REQUIRED:
                raise KeyError(key)
    return got


@dataclass
class IndexView:
    version: int
    # chunks (layer-0 text units) and their corpus passages
    chunk_text: Mapping[str, str]
    chunk_doc: Mapping[str, str]
    titles: Mapping[str, str]  # corpus passage id -> title
    doc_chunks: Mapping[str, Sequence[str]]  # corpus passage id -> its chunk ids
    doc_metadata: Mapping[str, str] = field(default_factory=dict)  # corpus passage id -> its metadata (JSON text)
    chunk_embedding: Mapping[str, np.ndarray] = field(default_factory=dict)  # the text vectors the index holds
    # A filtered query's view: the passages it may return (core/retrieval/filter.py); None for every passage.
    # The lexical ranking (`fusion.bm25_hits`) and the graph walk's passages (`propagation.by_mass`) honour it.
    passage_filter: PassageFilter | None = None
    # entities: id (normalized name) -> fields; mentions are chunk ids
    entity_name: Mapping[str, str] = field(default_factory=dict)
    entity_desc: Mapping[str, str] = field(default_factory=dict)
    entity_score: Mapping[str, float] = field(default_factory=dict)
    entity_embedding: Mapping[str, np.ndarray] = field(default_factory=dict)  # the text vector of its name
    entity_chunks: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # relations: id -> (head entity id, phrase, tail entity id, score); adjacency by entity
    relations: Mapping[str, tuple[str, str, str, float]] = field(default_factory=dict)
    relation_chunks: Mapping[str, Sequence[str]] = field(default_factory=dict)
    entity_relations: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # hyperedges (n-ary facts): id -> text, entity ids, score; bipartite adjacency
    hyperedge_text: Mapping[str, str] = field(default_factory=dict)
    hyperedge_entities: Mapping[str, Sequence[str]] = field(default_factory=dict)
    hyperedge_score: Mapping[str, float] = field(default_factory=dict)
    hyperedge_chunks: Mapping[str, Sequence[str]] = field(default_factory=dict)
    entity_hyperedges: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # summary hierarchy: id "L{layer}:{ordinal}" -> text, layer, direct children, and the
    # layer-0 members (chunk and entity ids) it covers, context nodes included (Leiden), sorted:
    # iterated in that order and tested with `in`
    summary_text: Mapping[str, str] = field(default_factory=dict)
    summary_layer: Mapping[str, int] = field(default_factory=dict)
    summary_children: Mapping[str, Sequence[str]] = field(default_factory=dict)
    summary_leaves: Mapping[str, Iterable[str]] = field(default_factory=dict)
    # the inverse: a layer-0 member's summaries, of every layer above it (the served view keeps the answers);
    # "which of these searched ids lie under those summaries" asks it once per searched id
    node_summaries: Mapping[str, Container[str]] = field(default_factory=dict)
    # hyperbolic (HyperRAG): the chunks with a Poincaré point (their points are read live through
    # `Points`) and their explicit keyword-edge neighbours, and the text->ball projection's dim and seed
    hyper_neighbours: Mapping[str, Sequence[str]] = field(default_factory=dict)
    hyper_dim: int = 0
    hyper_seed: int = 0
    # lexical channel: BM25 postings over chunk texts (title + text) and over entity ids (normalized names)
    chunk_lexical: LexicalIndex | None = None
    entity_lexical: LexicalIndex | None = None
    # the hybrid graph (node ids, adjacency) and its weighted walk for personalized PageRank
    graph: HybridGraph | None = None
    walk: Walk | None = None
    # each graph node's extraction score by node number: an entity's and a hyperedge's `*_score`, 0 for a chunk
    graph_score: np.ndarray | None = None

    def known(self, kind: str) -> Container[str]:
        """The ids of a vector collection's kind that this version holds: collections are shared by
        the versions of one build, so a search may meet rows of a newer or retired version."""
        return {"chunks": self.chunk_text, "entities": self.entity_name, "relations": self.relations,
                "hyperedges": self.hyperedge_text, "summaries": self.summary_text,
                "hyperbolic": self.hyper_neighbours}[kind]
