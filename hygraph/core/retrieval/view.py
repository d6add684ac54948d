"""The read-only view of one index version that retrieval strategies work on.

Plain dicts and arrays, filled by the engine from a snapshot; strategies never touch
storage. Vector search and model calls come in as callables (`Search`, `Embed`, ...), so
every strategy is testable on a hand-made view with a brute-force search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Container, Sequence

import numpy as np

from hygraph.core.graph import HybridGraph
from hygraph.core.lexical import LexicalIndex
from hygraph.core.ppr import Walk

Embed = Callable[[Sequence[str]], np.ndarray]  # texts -> L2-normalized rows
QuestionEntities = Callable[[str], list[str]]  # the `extract` role on a question: entity surface forms
Decompose = Callable[[str, Sequence[str]], list[str]]  # (question, round-1 passages) -> directives
# chunk ids -> their live Poincaré points (n, dim) float64: the online learner moves them between versions
Points = Callable[[Sequence[str]], np.ndarray]


@dataclass
class IndexView:
    version: int
    # chunks (layer-0 text units) and their corpus passages
    chunk_text: dict[str, str]
    chunk_doc: dict[str, str]
    titles: dict[str, str]  # corpus passage id -> title
    # entities: id (normalized name) -> fields; mentions are chunk ids
    entity_name: dict[str, str] = field(default_factory=dict)
    entity_desc: dict[str, str] = field(default_factory=dict)
    entity_score: dict[str, float] = field(default_factory=dict)
    entity_chunks: dict[str, list[str]] = field(default_factory=dict)
    # relations: id -> (head entity id, phrase, tail entity id, score); adjacency by entity
    relations: dict[str, tuple[str, str, str, float]] = field(default_factory=dict)
    relation_chunks: dict[str, list[str]] = field(default_factory=dict)
    entity_relations: dict[str, list[str]] = field(default_factory=dict)
    # hyperedges (n-ary facts): id -> text, entity ids, score; bipartite adjacency
    hyperedge_text: dict[str, str] = field(default_factory=dict)
    hyperedge_entities: dict[str, tuple[str, ...]] = field(default_factory=dict)
    hyperedge_score: dict[str, float] = field(default_factory=dict)
    hyperedge_chunks: dict[str, list[str]] = field(default_factory=dict)
    entity_hyperedges: dict[str, list[str]] = field(default_factory=dict)
    # summary hierarchy: id "L{layer}:{ordinal}" -> text, layer, direct children, and the
    # layer-0 members (chunk and entity ids) it covers, context nodes included (Leiden)
    summary_text: dict[str, str] = field(default_factory=dict)
    summary_layer: dict[str, int] = field(default_factory=dict)
    summary_children: dict[str, tuple[str, ...]] = field(default_factory=dict)
    summary_leaves: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # hyperbolic (HyperRAG): the chunks with a Poincaré point (row i <-> hyper_chunk_ids[i]; the
    # points themselves are read live through `Points`), the explicit keyword edges between those
    # rows as CSR adjacency (both directions), and the text->ball projection's dim and seed
    hyper_chunk_ids: list[str] = field(default_factory=list)
    hyper_row: dict[str, int] = field(default_factory=dict)
    hyper_adj_indptr: np.ndarray | None = None
    hyper_adj_indices: np.ndarray | None = None
    hyper_dim: int = 0
    hyper_seed: int = 0
    # lexical channel: BM25 postings over chunk texts (title + text) and over entity ids (normalized names)
    chunk_lexical: LexicalIndex | None = None
    entity_lexical: LexicalIndex | None = None
    # the hybrid graph (node ids, adjacency) and its weighted walk for personalized PageRank
    graph: HybridGraph | None = None
    walk: Walk | None = None

    def known(self, kind: str) -> Container[str]:
        """The ids of a vector collection's kind that this version holds: collections are shared by
        the versions of one build, so a search may meet rows of a newer or retired version."""
        return {"chunks": self.chunk_text, "entities": self.entity_name, "relations": self.relations,
                "hyperedges": self.hyperedge_text, "summaries": self.summary_text,
                "hyperbolic": self.hyper_row}[kind]
