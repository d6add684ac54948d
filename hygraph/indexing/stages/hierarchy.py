"""The hierarchy stage: the summary layers, built whole (HyGRAG Alg. 1 / EraRAG Alg. 1 or context-aware
Leiden) and updated selectively (EraRAG Alg. 3 or HyGRAG §3.4 attachment).

`lsh` hashes the layer-0 chunk and entity nodes on [text embedding ; Cleora embedding] and
recurses on summary embeddings. `leiden` (Adaptive Context GraphRAG §III-A) makes layer 1 from
Leiden communities of the entity graph with context nodes attached; the layers above are LSH
over those summaries, as HyGRAG recurses.

Both the build and an update ask the `summarize` role with the same request (`summary_request`):
the members' texts plus the key entities of the segment's layer-0 leaves and the strongest
relations among them. The update engine is `hierarchy_layers.py`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from hygraph.backends import resolve_device
from hygraph.backends.graph import make_graph_kernels
from hygraph.backends.llm.base import LLM, SummaryRequest
from hygraph.config import HygraphConfig
from hygraph.core.graph import HybridGraph
from hygraph.core.hierarchy import (Hierarchy, Layer0Blocks, build_hierarchy, layer0_features, most_mentioned,
                                    summary_key)
from hygraph.core.leiden_context import context_aware_partition
from hygraph.indexing.stages.hierarchy_layers import EntityNumbers, HierarchyEdit, LayerIndex
from hygraph.indexing.stages.knowledge import KnowledgeView, entity_relations, per_chunk
from hygraph.indexing.stages.vectors import VectorDelta
from hygraph.indexing.state import IndexState
from hygraph.model import SummaryNode
from hygraph.store.artifacts import (CHUNKS, ENTITIES, GRAPH, RELATIONS, SUMMARIES, HyperplanesRow, ParentsRow,
                                     SummaryRow)
from hygraph.store.manifest import HierarchyInfo

KEY_ENTITIES = 10
KEY_RELATIONS = 10
# Betweenness is estimated from this many sampled sources: exact betweenness is O(nm).
BETWEENNESS_SAMPLE = 256


class Source(Protocol):
    """What a summary request reads about layer-0 nodes (the build's knowledge, or an update's state)."""

    def node_text(self, node_id: str) -> str: ...

    def mentions(self, node_id: str) -> np.ndarray:
        """The numbers (`entity_at`) of the entities a leaf counts for, in order: an entity itself twice, then
        each entity a chunk mentions once."""
        ...

    def entity_at(self, number: int) -> str: ...

    def entity_relations(self, entity_id: str) -> Sequence[str]: ...

    def relation(self, relation_id: str) -> tuple[str, str, str, float]: ...

    def entity_name(self, entity_id: str) -> str: ...


def summary_request(members: Sequence[str], leaves: Sequence[str], summaries: Mapping[str, str],
                    src: Source) -> SummaryRequest:
    """HyGRAG's four-part summary input: member texts, the KEY_ENTITIES entities mentioned most under the
    segment (a member entity counts 2, each mention 1; ties in leaf order) and up to KEY_RELATIONS
    relations among them, strongest first."""
    top = [src.entity_at(int(n)) for n in most_mentioned([src.mentions(leaf) for leaf in leaves], KEY_ENTITIES)]
    inside = set(top)
    # A relation between two top entities is listed under both (a self-loop twice under its one), so only
    # ids seen twice are read: a hub entity's thousands of relations are counted, not fetched.
    seen: Counter = Counter()
    for eid in top:
        seen.update(src.entity_relations(eid))
    rows = {rid: r for rid, n in seen.items() if n >= 2
            if (r := src.relation(rid))[0] in inside and r[2] in inside}
    best = sorted(rows, key=lambda rid: (-rows[rid][3], rid))[:KEY_RELATIONS]
    relations = []
    for rid in best:
        head, phrase, tail, _ = rows[rid]
        relations.append(f"{src.entity_name(head)} {phrase} {src.entity_name(tail)}")
    return SummaryRequest(member_texts=tuple(summaries[m] if m in summaries else src.node_text(m) for m in members),
                          entities=tuple(src.entity_name(e) for e in top), relations=tuple(relations))


class KnowledgeSource:
    """A build's Source: the whole knowledge at hand."""

    def __init__(self, chunk_ids: Sequence[str], chunk_texts: Sequence[str], kb: KnowledgeView) -> None:
        self.kb = kb
        self.chunk_text = dict(zip(chunk_ids, chunk_texts))
        self._chunk_entities = {cid: ck.entities for cid, ck in per_chunk(kb).items()}
        self._entity_relations = entity_relations(kb, kb.relations)
        self._numbers = EntityNumbers()
        self._mentions: dict[str, np.ndarray] = {}

    def node_text(self, node_id: str) -> str:
        if node_id in self.chunk_text:
            return self.chunk_text[node_id]
        ent = self.kb.entities[node_id]
        return f"{ent.name}: {ent.description}" if ent.description else ent.name

    def mentions(self, node_id: str) -> np.ndarray:
        got = self._mentions.get(node_id)
        if got is None:
            own = (node_id, node_id) if node_id in self.kb.entities else ()
            got = self._mentions[node_id] = self._numbers.of((*own, *self._chunk_entities.get(node_id, ())))
        return got

    def entity_at(self, number: int) -> str:
        return self._numbers.ids[number]

    def chunk_entities(self, node_id: str) -> Sequence[str]:
        return self._chunk_entities.get(node_id, ())

    def entity_relations(self, entity_id: str) -> Sequence[str]:
        return self._entity_relations.get(entity_id, ())

    def relation(self, relation_id: str) -> tuple[str, str, str, float]:
        r = self.kb.relations[relation_id]
        return r.head, r.relation, r.tail, r.score

    def entity_name(self, entity_id: str) -> str:
        return self.kb.entities[entity_id].name


@dataclass
class HierarchyResult:
    """A built hierarchy, bottom-up: per summary its layer, text, children (segment order), the leaves that
    are not children (a Leiden community's chunks), key, children's LSH codes and embedding."""

    ids: list[str] = field(default_factory=list)
    layers: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    children: list[list[str]] = field(default_factory=list)
    extra: list[list[str]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    codes: list[np.ndarray] = field(default_factory=list)
    embedding_parts: list[np.ndarray] = field(default_factory=list)
    hyperplanes: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> planes (LSH layers)
    partitioner: str = "lsh"

    def add(self, node_id: str, layer: int, text: str, children: Sequence[str], extra: Sequence[str], key: str,
            codes: np.ndarray) -> None:
        self.ids.append(node_id)
        self.layers.append(layer)
        self.texts.append(text)
        self.children.append(list(children))
        self.extra.append(list(extra))
        self.keys.append(key)
        self.codes.append(np.asarray(codes, dtype=np.int64))

    def add_layers(self, hier: Hierarchy) -> None:
        """The LSH layers `core.hierarchy.build_hierarchy` built, with each segment's member codes."""
        for layer in hier.layers:
            for node_id, seg, text, key in zip(layer.node_ids, layer.segments, layer.texts, layer.keys):
                self.add(node_id, layer.number, text, [layer.input_ids[i] for i in seg], [], key, layer.codes[seg])
            self.hyperplanes[layer.number] = layer.hyperplanes
            self.embedding_parts.append(layer.embeddings)

    @property
    def embeddings(self) -> np.ndarray:
        return np.vstack(self.embedding_parts).astype(np.float32) if self.embedding_parts else \
            np.zeros((0, 0), np.float32)

    @property
    def n_layers(self) -> int:
        return max(self.layers, default=0)

    def rows(self) -> tuple[list[SummaryRow], list[ParentsRow], list[HyperplanesRow]]:
        emb = self.embeddings
        summaries = [SummaryRow(sid, layer, text, tuple(ch), tuple(ex), key, codes, emb[i])
                     for i, (sid, layer, text, ch, ex, key, codes) in enumerate(
                         zip(self.ids, self.layers, self.texts, self.children, self.extra, self.keys, self.codes))]
        parents: dict[str, list[str]] = {}
        for sid, ch, ex in zip(self.ids, self.children, self.extra):
            for node in (*ch, *ex):
                parents.setdefault(node, []).append(sid)
        planes = [HyperplanesRow(f"L{layer}", p.astype(np.float32).ravel(), p.shape[0], p.shape[1])
                  for layer, p in sorted(self.hyperplanes.items())]
        return summaries, [ParentsRow(n, tuple(s)) for n, s in parents.items()], planes


def stats(layers: Sequence[int], sizes: Sequence[int]) -> dict[str, Any]:
    """Segments per layer and a histogram of segment sizes (children per summary), for the manifest."""
    edges = [5, 10, 20, 50, 100]
    labels = [f"<{e}" for e in edges] + [f">={edges[-1]}"]
    counts = Counter(labels[int(np.searchsorted(edges, size, side="right"))] for size in sizes)
    return {"layers": max(layers, default=0),
            "segments_per_layer": {f"L{k}": v for k, v in sorted(Counter(layers).items())},
            "segment_size_histogram": {label: counts[label] for label in labels if counts[label]}}


class _Segments:
    """Tracks every summary's layer and layer-0 leaves as layers are built, for `summarize` requests.

    build_hierarchy names the summary of segment i of layer L "L{L}:{i}", and layer L is
    summarized before layer L+1, so a segment's layer is one above its highest member.
    """

    def __init__(self, src: KnowledgeSource, llm: LLM, note: Callable[[str], None] = lambda _: None) -> None:
        self.src, self.llm, self.note = src, llm, note
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
            requests.append(summary_request(seg, leaves, {**self.own_texts, **summaries}, self.src))
        t0 = time.perf_counter()
        out = self.llm.summarize(requests)
        self.note(f"hierarchy layer {layer}: {len(segments):,} segments summarized in {time.perf_counter() - t0:.1f}s")
        return out


def build(cfg: HygraphConfig, chunk_ids: Sequence[str], chunk_texts: Sequence[str], chunk_vecs: np.ndarray,
          kb: KnowledgeView, hg: HybridGraph, node_vecs: dict[str, np.ndarray], llm: LLM,
          embed: Callable[[Sequence[str]], np.ndarray], note: Callable[[str], None] = lambda _: None
          ) -> HierarchyResult:
    h = cfg.hierarchy
    seg = _Segments(KnowledgeSource(chunk_ids, chunk_texts, kb), llm, note)
    result = HierarchyResult(partitioner=h.partitioner)
    lsh = dict(summarize=seg.summarize, embed=embed, k=h.num_hyperplanes, seed=h.seed, s_min=h.s_min,
               s_max=h.s_max, min_layer_size=h.min_layer_size, device=resolve_device(h.device))
    if h.partitioner == "lsh":
        n_layer0 = len(hg.chunk_ids) + len(hg.entity_ids)
        # The blocks, not their features: build_hierarchy hashes layer 0 from them a slab at a time, so no array
        # of the corpus's features lives through the summarizing. The text block stays in its two parts.
        blocks = {"text": [chunk_vecs, node_vecs["entities"]], "cleora": node_vecs["cleora"][:n_layer0]}
        layer0 = Layer0Blocks(tuple(blocks[f] for f in h.layer0_features))
        result.add_layers(build_hierarchy(layer0, [*hg.chunk_ids, *hg.entity_ids], max_layers=h.max_layers, **lsh))
    else:
        ids, vecs = _leiden_layer(cfg, chunk_ids, hg, node_vecs, seg, embed, result)
        if len(ids) >= max(2, h.min_layer_size) and h.max_layers > 1:
            result.add_layers(build_hierarchy(vecs, ids, max_layers=h.max_layers - 1, first_layer=2, **lsh))
    return result


def _leiden_layer(cfg: HygraphConfig, chunk_ids: Sequence[str], hg: HybridGraph, node_vecs: dict[str, np.ndarray],
                  seg: _Segments, embed: Callable[[Sequence[str]], np.ndarray],
                  result: HierarchyResult) -> tuple[list[str], np.ndarray]:
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
    for cid in chunk_ids:
        ents = [ent_index[e] for e in seg.src.chunk_entities(cid) if e in ent_index]
        if ents:
            chunk_members.setdefault(int(np.bincount(labels[ents]).argmax()), []).append(cid)
    segments = [[hg.entity_ids[i] for i in (*part.core(c), *part.context(c))] for c in range(part.n_communities)]
    # Community members are entities; their chunks are leaves (retrieval expands into them), not children.
    requests, ids = [], []
    for c, members in enumerate(segments):
        node_id, leaves = seg.register(1, c, [*members, *chunk_members.get(c, ())])
        ids.append(node_id)
        requests.append(summary_request(members, leaves, {}, seg.src))
    texts = seg.llm.summarize(requests)
    vecs = embed(texts)
    seg.own_texts.update(zip(ids, texts))
    for c, (node_id, members, text) in enumerate(zip(ids, segments, texts)):
        result.add(node_id, 1, text, members, chunk_members.get(c, []), summary_key(seg.leaves[node_id]),
                   np.zeros(0, np.int64))
    result.embedding_parts.append(vecs)
    return ids, vecs


# ------------------------------------------------------------------ update


class StateSource:
    """An update's Source: rows read through the index state. What a leaf counts for (an entity, or a chunk's
    entities) is kept in the updater's LayerIndex across batches: the top summaries cover most leaves, and
    those facts change only when the node itself is replaced."""

    def __init__(self, state: IndexState, index: LayerIndex) -> None:
        self.state, self.index = state, index

    def mentions(self, node_id: str) -> np.ndarray:
        got = self.index.mentions.get(node_id)
        if got is None:
            chunk = self.state.get(CHUNKS, node_id)
            own = (node_id, node_id) if chunk is None and self.state.contains(ENTITIES, node_id) else ()
            got = self.index.mentions[node_id] = self.index.numbers.of(
                (*own, *(chunk.entities if chunk is not None else ())))
        return got

    def entity_at(self, number: int) -> str:
        return self.index.numbers.ids[number]

    def node_text(self, node_id: str) -> str:
        chunk = self.state.get(CHUNKS, node_id)
        if chunk is not None:
            return chunk.text
        ent = self.state.require(ENTITIES, node_id)
        return f"{ent.name}: {ent.description}" if ent.description else ent.name

    def entity_relations(self, entity_id: str) -> Sequence[str]:
        row = self.state.get(ENTITIES, entity_id)
        return row.relations if row is not None else ()

    def relation(self, relation_id: str) -> tuple[str, str, str, float]:
        r = self.state.require(RELATIONS, relation_id)
        return r.head, r.relation, r.tail, r.score

    def entity_name(self, entity_id: str) -> str:
        return self.state.require(ENTITIES, entity_id).name


def update(state: IndexState, cfg: HygraphConfig, index: LayerIndex, llm: LLM,
           embed: Callable[[Sequence[str]], np.ndarray], new_chunks: list[str], new_entities: list[str],
           removed: set[str], delta: VectorDelta, device: str = "cpu") -> int:
    """EraRAG Alg. 3 (lsh) or HyGRAG §3.4 (leiden) for the batch's layer-0 changes; returns the number of
    summaries written. `removed` are layer-0 nodes that left (or come back changed, listed again as new)."""
    for node in (*new_chunks, *new_entities, *removed):
        index.mentions.pop(node, None)
    h = cfg.hierarchy
    partitioner = state.manifest.hierarchy.partitioner if state.manifest.hierarchy else h.partitioner
    src = StateSource(state, index)

    def summarize(members: list[list[str]], leaves: list[list[str]], known: Mapping[str, str]) -> list[str]:
        return llm.summarize([summary_request(m, lv, known, src) for m, lv in zip(members, leaves)])

    def features0(ids: list[str]) -> np.ndarray:
        text = np.vstack([(state.get(CHUNKS, i) or state.require(ENTITIES, i)).embedding for i in ids])
        struct = np.vstack([state.require(GRAPH, i).cleora for i in ids])
        blocks = {"text": text, "cleora": struct}
        return layer0_features(*(blocks[f] for f in h.layer0_features))

    hier = HierarchyEdit(state, index, h, partitioner, summarize, embed, device)
    if partitioner == "lsh":
        hier.update_lsh(features0, [*new_chunks, *new_entities], removed)
    else:
        hier.update_leiden(cfg.updates.tau_attach, new_entities, new_chunks, removed)
    fresh = [s for s in dict.fromkeys(hier.fresh) if state.contains(SUMMARIES, s)]
    rows = [state.require(SUMMARIES, s) for s in fresh]
    delta.add("summaries", fresh, np.vstack([r.embedding for r in rows]) if rows else
              np.zeros((0, state.dims["text"]), np.float32), [r.layer for r in rows])
    base = state.table(SUMMARIES)
    delta.retire("summaries", sorted(s for s in set(hier.retired) if base is not None and s in base))
    layers = sorted(layer for layer, ids in index.ids.items() if ids)
    state.manifest.hierarchy = HierarchyInfo(partitioner, max(layers, default=0),
                                             {f"L{layer}": len(index.ids[layer]) for layer in layers})
    state.manifest.stats.update(stats([layer for layer in layers for _ in index.ids[layer]],
                                      [n for layer in layers for n in index.sizes_of(layer)]))
    return len(fresh)
