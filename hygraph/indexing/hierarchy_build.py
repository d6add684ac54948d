"""The summary hierarchy of a build: LSH over hybrid nodes, or context-aware Leiden communities.

`lsh` (HyGRAG Alg. 1 / EraRAG Alg. 1) hashes the layer-0 chunk and entity nodes on
[text embedding ; Cleora embedding] and recurses on summary embeddings. `leiden`
(Adaptive Context GraphRAG §III-A) makes layer 1 from Leiden communities of the entity
graph with context nodes attached; the layers above are LSH over those summaries, as
HyGRAG recurses.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hygraph.backends import resolve_device
from hygraph.backends.graph import make_graph_kernels
from hygraph.backends.llm.base import LLM, SummaryRequest
from hygraph.config import HygraphConfig
from hygraph.core.graph import HybridGraph
from hygraph.core.hierarchy import Hierarchy, build_hierarchy, layer0_features, summary_key
from hygraph.core.leiden_context import context_aware_partition
from hygraph.indexing.encode import Encoder
from hygraph.indexing.knowledge import Knowledge
from hygraph.model import SummaryNode

KEY_ENTITIES = 10
KEY_RELATIONS = 10
# Betweenness is estimated from this many sampled sources: exact betweenness is O(nm).
BETWEENNESS_SAMPLE = 256


@dataclass
class HierarchyResult:
    ids: list[str] = field(default_factory=list)
    layers: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    children: list[list[str]] = field(default_factory=list)
    leaves: list[list[str]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    embeddings: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    hyperplanes: list[np.ndarray] = field(default_factory=list)  # per LSH layer, for incremental re-hashing
    embedding_parts: list[np.ndarray] = field(default_factory=list)
    partitioner: str = "lsh"

    def add(self, node_id: str, layer: int, text: str, children: Sequence[str], leaves: Sequence[str],
            key: str) -> None:
        self.ids.append(node_id)
        self.layers.append(layer)
        self.texts.append(text)
        self.children.append(list(children))
        self.leaves.append(list(leaves))
        self.keys.append(key)

    def finish(self) -> "HierarchyResult":
        if self.embedding_parts:
            self.embeddings = np.vstack(self.embedding_parts).astype(np.float32)
        return self

    @property
    def n_layers(self) -> int:
        return max(self.layers, default=0)

    def segments_per_layer(self) -> dict[str, int]:
        return {f"L{k}": v for k, v in sorted(Counter(self.layers).items())}

    def size_histogram(self) -> dict[str, int]:
        """Segment sizes (children per summary) in ascending buckets, for the index statistics."""
        edges = [5, 10, 20, 50, 100]
        labels = [f"<{e}" for e in edges] + [f">={edges[-1]}"]
        counts = Counter(labels[int(np.searchsorted(edges, len(ch), side="right"))] for ch in self.children)
        return {label: counts[label] for label in labels if counts[label]}

    def table(self) -> dict[str, list[Any]]:
        return {"id": self.ids, "layer": self.layers, "text": self.texts, "children": self.children,
                "leaves": self.leaves, "key": self.keys}

    def manifest(self) -> dict[str, Any]:
        return {"partitioner": self.partitioner, "layers": self.n_layers,
                "segments_per_layer": self.segments_per_layer()}


class _Texts:
    """Member texts and key entities/relations of a segment, for the `summarize` role."""

    def __init__(self, cols: dict[str, Any], kb: Knowledge) -> None:
        self.kb = kb
        self.chunk_text = dict(zip(cols["id"], cols["text"]))
        self.chunk_entities: dict[str, list[str]] = {}
        for eid, cids in kb.entity_chunks.items():
            for cid in cids:
                self.chunk_entities.setdefault(cid, []).append(eid)
        self.entity_relations: dict[str, list[str]] = {}
        for rid, r in kb.relations.items():
            self.entity_relations.setdefault(r.head, []).append(rid)
            self.entity_relations.setdefault(r.tail, []).append(rid)

    def member_text(self, node_id: str, summaries: Mapping[str, str]) -> str:
        if node_id in summaries:
            return summaries[node_id]
        if node_id in self.chunk_text:
            return self.chunk_text[node_id]
        ent = self.kb.entities[node_id]
        return f"{ent.name}: {ent.description}" if ent.description else ent.name

    def request(self, members: Sequence[str], leaves: Sequence[str], summaries: Mapping[str, str]) -> SummaryRequest:
        mentions: Counter = Counter()
        for leaf in leaves:
            if leaf in self.kb.entities:
                mentions[leaf] += 2  # a member entity counts more than one mention of it
            for eid in self.chunk_entities.get(leaf, ()):
                mentions[eid] += 1
        top = [eid for eid, _ in mentions.most_common(KEY_ENTITIES)]
        inside = set(top)
        rels = {rid for eid in top for rid in self.entity_relations.get(eid, ())
                if self.kb.relations[rid].head in inside and self.kb.relations[rid].tail in inside}
        best = sorted(rels, key=lambda r: (-self.kb.relations[r].score, r))[:KEY_RELATIONS]
        kb = self.kb
        return SummaryRequest(
            member_texts=tuple(self.member_text(m, summaries) for m in members),
            entities=tuple(kb.entities[e].name for e in top),
            relations=tuple(f"{kb.entities[kb.relations[r].head].name} {kb.relations[r].relation} "
                            f"{kb.entities[kb.relations[r].tail].name}" for r in best))


class _Segments:
    """Tracks every summary's layer and layer-0 leaves as layers are built, for `summarize` requests.

    build_hierarchy names the summary of segment i of layer L "L{L}:{i}", and layer L is
    summarized before layer L+1, so a segment's layer is one above its highest member.
    """

    def __init__(self, texts: _Texts, llm: LLM, note: Callable[[str], None] = lambda _: None) -> None:
        self.texts, self.llm, self.note = texts, llm, note
        self.layer: dict[str, int] = {}
        self.leaves: dict[str, list[str]] = {}
        self.own_texts: dict[str, str] = {}  # summaries made outside build_hierarchy (Leiden layer 1)

    def register(self, layer: int, ordinal: int, members: Sequence[str]) -> tuple[str, list[str]]:
        node_id = SummaryNode.node_id(layer, ordinal)
        leaves: set[str] = set()
        for m in members:
            leaves.update(self.leaves.get(m, (m,)))
        self.layer[node_id], self.leaves[node_id] = layer, sorted(leaves)
        return node_id, self.leaves[node_id]

    def summarize(self, segments: list[list[str]], summaries: Mapping[str, str]) -> list[str]:
        layer = 1 + max(self.layer.get(m, 0) for seg in segments for m in seg)
        requests = []
        for i, seg in enumerate(segments):
            _, leaves = self.register(layer, i, seg)
            requests.append(self.texts.request(seg, leaves, {**self.own_texts, **summaries}))
        t0 = time.perf_counter()
        out = self.llm.summarize(requests)
        self.note(f"hierarchy layer {layer}: {len(segments):,} segments summarized in {time.perf_counter() - t0:.1f}s")
        return out


def _collect(result: HierarchyResult, seg: _Segments, hier: Hierarchy) -> None:
    for layer in hier.layers:
        for node_id, members, text, key in zip(layer.node_ids, layer.members, layer.texts, layer.keys):
            result.add(node_id, layer.number, text, members, seg.leaves[node_id], key)
        result.hyperplanes.append(layer.hyperplanes)
        result.embedding_parts.append(layer.embeddings)


def build_summary_hierarchy(cfg: HygraphConfig, cols: dict[str, Any], kb: Knowledge, hg: HybridGraph,
                            node_vecs: dict[str, np.ndarray], llm: LLM, encoder: Encoder,
                            note: Callable[[str], None] = lambda _: None) -> HierarchyResult:
    h = cfg.hierarchy
    seg = _Segments(_Texts(cols, kb), llm, note)
    result = HierarchyResult(partitioner=h.partitioner)
    lsh = dict(summarize=seg.summarize, embed=encoder, k=h.num_hyperplanes, seed=h.seed, s_min=h.s_min,
               s_max=h.s_max, min_layer_size=h.min_layer_size, device=resolve_device(h.device))
    if h.partitioner == "lsh":
        n_layer0 = len(hg.chunk_ids) + len(hg.entity_ids)
        blocks = {"text": np.vstack([cols["embedding"], node_vecs["entities"]]),
                  "cleora": node_vecs["cleora"][:n_layer0]}
        features = layer0_features(*(blocks[f] for f in h.layer0_features))
        _collect(result, seg, build_hierarchy(features, [*hg.chunk_ids, *hg.entity_ids],
                                              max_layers=h.max_layers, **lsh))
    else:
        ids, vecs = _leiden_layer(cfg, cols, hg, node_vecs, seg, encoder, result)
        if len(ids) >= max(2, h.min_layer_size) and h.max_layers > 1:
            _collect(result, seg, build_hierarchy(vecs, ids, max_layers=h.max_layers - 1, first_layer=2, **lsh))
    return result.finish()


def _leiden_layer(cfg: HygraphConfig, cols: dict[str, Any], hg: HybridGraph, node_vecs: dict[str, np.ndarray],
                  seg: _Segments, encoder: Encoder, result: HierarchyResult) -> tuple[list[str], np.ndarray]:
    """Layer 1: Leiden communities of the entity graph (relations + co-mentions) with context nodes."""
    lc = cfg.leiden
    kernels = make_graph_kernels(lc.backend)
    adj = (hg.entity_graph() + hg.co_mentions()).tocoo()
    upper = adj.row < adj.col
    edges = np.stack([adj.row[upper], adj.col[upper]], axis=1).astype(np.int64)
    n = len(hg.entity_ids)
    labels = kernels.leiden(n, edges, adj.data[upper].astype(np.float64), lc.resolution, lc.seed)
    between = kernels.betweenness(n, edges, sample=min(BETWEENNESS_SAMPLE, n) or None, seed=lc.seed)
    part = context_aware_partition(labels, node_vecs["entities"], edges, between, lc.lambda_max, lc.alpha)
    # Each chunk joins the community holding most of its entities, so every chunk sits under one summary.
    ent_index = {e: i for i, e in enumerate(hg.entity_ids)}
    chunk_members: dict[int, list[str]] = {}
    for cid in cols["id"]:
        ents = [ent_index[e] for e in seg.texts.chunk_entities.get(cid, ()) if e in ent_index]
        if ents:
            chunk_members.setdefault(int(np.bincount(labels[ents]).argmax()), []).append(cid)
    segments = [[hg.entity_ids[i] for i in (*part.core(c), *part.context(c))] for c in range(part.n_communities)]
    # Community members are entities; their chunks are leaves (retrieval expands into them), not children.
    requests, ids = [], []
    for c, members in enumerate(segments):
        node_id, leaves = seg.register(1, c, [*members, *chunk_members.get(c, ())])
        ids.append(node_id)
        requests.append(seg.texts.request(members, leaves, {}))
    texts = seg.llm.summarize(requests)
    vecs = encoder(texts)
    seg.own_texts.update(zip(ids, texts))
    for node_id, members, text in zip(ids, segments, texts):
        result.add(node_id, 1, text, members, seg.leaves[node_id], summary_key(seg.leaves[node_id]))
    result.embedding_parts.append(vecs)
    return ids, vecs
