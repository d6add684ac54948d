"""`hygraph index`: corpus -> Ray Data (chunk, embed, extract) -> hybrid graph -> Cleora ->
summary hierarchy -> hyperbolic embeddings -> vectors + a new snapshot version.

Everything is validated before anything is written; vectors go into collections named
after the new version, and a failure drops them and removes the temporary version
directory, so a failed build leaves the previous version serving untouched.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hygraph.backends import resolve_device, vectorstore
from hygraph.backends.llm import make_llm
from hygraph.backends.llm.base import Usage
from hygraph.cluster.runtime import init_ray
from hygraph.config import HygraphConfig
from hygraph.core import cleora, hyperbolic
from hygraph.core.graph import HybridGraph, build_hybrid_graph
from hygraph.indexing import tables
from hygraph.indexing.encode import Encoder, embed_bulk
from hygraph.indexing.hierarchy_build import HierarchyResult, build_summary_hierarchy
from hygraph.indexing.knowledge import Knowledge, extractions_from_triples, load_kg, merge_extractions
from hygraph.indexing.lexical import build_lexical
from hygraph.indexing.progress import Stages
from hygraph.indexing.stages import EmbedStage, ExtractStage, chunk_batch
from hygraph.errors import InputError
from hygraph.model import Chunk, Document, Extraction, TripleRecord, load_corpus, load_triples
from hygraph.store.graph_io import write_graph
from hygraph.store.lexical_io import write_lexical
from hygraph.store.snapshot import SnapshotStore, VersionWriter

CHUNK_COLS = ("id", "doc_id", "ordinal", "text", "n_tokens", "title")


def run_pipeline(cfg: HygraphConfig, docs: list[Document], stages: Stages, extract: bool,
                 cache_dir: str) -> dict[str, Any]:
    """Ray Data: read -> chunk (tasks) -> embed (actor pool) [-> extract (actor pool)]."""
    import ray.data

    init_ray(cfg.ray)
    emb = cfg.embedder
    # Length order keeps each embedding batch evenly padded; corpus order is restored below.
    by_length = sorted(docs, key=lambda d: len(d.text))
    ds = ray.data.from_items([{"id": d.id, "title": d.title, "text": d.text} for d in by_length],
                             override_num_blocks=max(1, min(64, len(docs) // 200)))
    # Chunking is light; a small CPU share keeps it schedulable beside the actor pools.
    ds = ds.map_batches(chunk_batch, batch_size=256, num_cpus=0.1,
                        fn_kwargs={"model": emb.model, "size": cfg.chunking.size_tokens,
                                   "overlap": cfg.chunking.overlap_tokens})
    ds = ds.map_batches(EmbedStage, batch_size=cfg.indexing.batch_size,
                        compute=ray.data.ActorPoolStrategy(size=emb.pool_size),
                        num_cpus=emb.num_cpus, num_gpus=emb.num_gpus or None,
                        fn_constructor_kwargs={"embedder": emb.model_dump(), "threads": emb.num_cpus})
    if extract:
        ds = ds.map_batches(ExtractStage, batch_size=cfg.indexing.batch_size,
                            compute=ray.data.ActorPoolStrategy(size=cfg.indexing.extract_pool_size),
                            num_cpus=cfg.indexing.extract_num_cpus,
                            fn_constructor_kwargs={"llm": cfg.llm.model_dump(), "cache_dir": cache_dir})
    cols: dict[str, list[Any]] = {k: [] for k in CHUNK_COLS}
    vecs: list[np.ndarray] = []
    extractions: list[Extraction] = []
    calls = 0
    with stages.stage("chunk+embed+extract" if extract else "chunk+embed"), \
            stages.bar(len(docs), "documents") as bar:
        seen: set[str] = set()
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for k in CHUNK_COLS:
                cols[k].extend(batch[k].tolist())
            vecs.append(np.asarray(batch["embedding"], dtype=np.float32))
            if extract:
                extractions.extend(Extraction.from_dict(json.loads(x)) for x in batch["extraction"])
                calls += int(batch["llm_calls"].sum())
            new = set(batch["doc_id"].tolist()) - seen
            seen |= new
            bar.update(len(new))
    position = {d.id: i for i, d in enumerate(docs)}
    order = sorted(range(len(cols["id"])), key=lambda i: (position[cols["doc_id"][i]], cols["ordinal"][i]))
    out: dict[str, Any] = {k: [cols[k][i] for i in order] for k in CHUNK_COLS}
    out["embedding"] = np.vstack(vecs)[order]
    out["extractions"] = [extractions[i] for i in order] if extract else []
    out["extract_calls"] = calls
    return out


def _chunks(cols: dict[str, Any]) -> list[Chunk]:
    return [Chunk(*row) for row in zip(*(cols[k] for k in CHUNK_COLS))]


def build_knowledge(cols: dict[str, Any], triples: list[TripleRecord] | None, kg: str | Path | None) -> Knowledge:
    extractions = (extractions_from_triples(_chunks(cols), triples) if triples is not None
                   else cols["extractions"])
    kb = merge_extractions(extractions)
    if kg:
        kb.add(load_kg(kg), chunk_id=None)
        kb.finish()
    return kb


def build_graph(cfg: HygraphConfig, cols: dict[str, Any], kb: Knowledge) -> HybridGraph:
    chunk_entities: dict[str, set[str]] = {cid: set() for cid in cols["id"]}
    for eid, cids in kb.entity_chunks.items():
        for cid in cids:
            chunk_entities[cid].add(eid)
    return build_hybrid_graph(
        cols["id"], [chunk_entities[c] for c in cols["id"]],
        [(r.head, r.tail, rid) for rid, r in kb.relations.items()],
        [(hid, kb.hyperedges[hid].entities, cid) for hid, cids in kb.hyperedge_chunks.items() for cid in cids],
        shared_entity_threshold=cfg.graph.shared_entity_threshold)


def train_hyperbolic(cfg: HygraphConfig, texts: list[str], embeddings: np.ndarray) -> dict[str, Any]:
    """HyperRAG §3.1-3.2: explicit keyword edges, Poincare training, Lorentz/L2 storage vectors."""
    h = cfg.hyperbolic
    edges = hyperbolic.explicit_edges(hyperbolic.key_terms(texts), theta=h.theta, max_neighbors=h.max_neighbors)
    init = hyperbolic.init_from_text(embeddings, h.dim, h.seed)
    points = hyperbolic.train_poincare(init, edges, epochs=h.epochs, lr=h.lr, negatives=h.negatives,
                                       batch_size=h.batch_size, seed=h.seed, device=resolve_device(h.device))
    bound = hyperbolic.norm_bound(hyperbolic.lorentz_lift(points))
    return {"points": points.astype(np.float32), "edges": edges.astype(np.int64), "M": float(bound),
            "storage": hyperbolic.storage_vectors(points, bound).astype(np.float32)}


class _VectorWriter:
    """Creates, fills and seals one collection per kind; remembers them so a failure can drop them."""

    def __init__(self, vs: vectorstore.VectorStore, store: SnapshotStore, generation: int) -> None:
        self.vs, self.store, self.generation = vs, store, generation
        self.collections: dict[str, str] = {}

    def write(self, kind: str, ids: list[str], vectors: np.ndarray, metric: str = "IP",
              layers: list[int] | None = None) -> None:
        if not ids:
            return
        name = self.store.collection(self.generation, kind)
        self.vs.create(name, int(vectors.shape[1]), metric)  # type: ignore[arg-type]
        self.collections[kind] = name
        self.vs.upsert(name, ids, vectors, self.generation, layers)
        self.vs.seal(name)

    def drop_all(self) -> None:
        for name in self.collections.values():
            self.vs.drop(name)


def _write_tables(w: VersionWriter, docs: list[Document], cols: dict[str, Any], kb: Knowledge | None,
                  graph: HybridGraph | None, hier: HierarchyResult | None, hyp: dict[str, Any] | None,
                  node_vecs: dict[str, np.ndarray]) -> None:
    w.write_table("documents", {"id": [d.id for d in docs], "title": [d.title for d in docs],
                                "text": [d.text for d in docs]})
    w.write_table("chunks", {k: cols[k] for k in CHUNK_COLS})
    w.write_array("chunk_embeddings", cols["embedding"])
    for kind, postings in cols.get("lexical", {}).items():
        write_lexical(w, kind, postings)
    if kb is None or graph is None:
        return
    w.write_table("entities", tables.entity_table(kb, graph.entity_ids))
    w.write_table("relations", tables.relation_table(kb, list(kb.relations)))
    w.write_table("hyperedges", tables.hyperedge_table(kb, graph.hyperedge_ids))
    w.write_array("entity_embeddings", node_vecs["entities"])
    write_graph(w, graph)
    w.write_array("cleora", node_vecs["cleora"])
    if hier is not None:
        w.write_table("summaries", hier.table())
        w.write_array("summary_embeddings", hier.embeddings)
        for layer, planes in enumerate(hier.hyperplanes, 1):
            w.write_array(f"hyperplanes_L{layer}", planes)
    if hyp is not None:
        w.write_array("hyperbolic_points", hyp["points"])
        w.write_array("hyperbolic_edges", hyp["edges"])


def build_index(cfg: HygraphConfig, corpus: str | Path, index_dir: str | Path,
                triples: str | Path | None = None, kg: str | Path | None = None,
                graph: bool = True) -> dict[str, Any]:
    stages = Stages("index")
    with stages.stage("load corpus"):
        docs = load_corpus(corpus)
        records = load_triples(triples) if triples else None
        if records is not None:
            ids = {d.id for d in docs}
            unknown = [r.passage_id for r in records if r.passage_id not in ids]
            if unknown:
                raise InputError(f"{triples}: passage_id '{unknown[0]}' is not in the corpus "
                                 f"({len(unknown)} unknown passage ids)")
    # Check the store first: an unreachable one must fail before anything is created on disk.
    # The connection is not held through the long compute (idle gRPC channels get GOAWAY).
    vectorstore.connect(cfg.vector_store, index_dir).close()
    store = SnapshotStore(index_dir, create=True)
    cache_dir = cfg.llm.cache_dir or str(Path(index_dir) / "llm_cache")
    usage = Usage()
    writer: _VectorWriter | None = None
    vs: vectorstore.VectorStore | None = None
    try:
        cols = run_pipeline(cfg, docs, stages, extract=graph and not triples, cache_dir=cache_dir)
        if cols["extract_calls"]:
            usage.count("extract", calls=cols["extract_calls"])
        kb = hg = hier = hyp = None
        node_vecs: dict[str, np.ndarray] = {}
        if graph:
            with stages.stage("knowledge"):
                kb = build_knowledge(cols, records, kg)
            with stages.stage("hybrid graph"):
                hg = build_graph(cfg, cols, kb)
            with stages.stage("cleora"):
                node_vecs["cleora"] = cleora.cleora_embed(
                    hg.adjacency, hg.node_ids, dim=cfg.cleora.dim, iterations=cfg.cleora.iterations,
                    seed=cfg.cleora.seed, device=resolve_device(cfg.cleora.device))
            with stages.stage("embed entities, relations, hyperedges"):
                rel_ids = list(kb.relations)
                texts = ([tables.entity_text(kb, e) for e in hg.entity_ids]
                         + [tables.relation_text(kb, r) for r in rel_ids]
                         + [kb.hyperedges[h].text for h in hg.hyperedge_ids])
                vecs = embed_bulk(cfg.embedder, texts, stages, "knowledge texts embedded",
                                  cfg.indexing.batch_size)
                n_e, n_r = len(hg.entity_ids), len(rel_ids)
                node_vecs["entities"], node_vecs["relations"], node_vecs["hyperedges"] = (
                    vecs[:n_e], vecs[n_e:n_e + n_r], vecs[n_e + n_r:])
            with stages.stage("hierarchy"):
                llm = make_llm(cfg.llm, cache_dir=cache_dir)
                encoder = Encoder(cfg.embedder)
                try:
                    hier = build_summary_hierarchy(cfg, cols, kb, hg, node_vecs, llm, encoder, stages.note)
                finally:
                    encoder.close()
                usage.merge(llm.usage)
            if cfg.hyperbolic.enabled:
                with stages.stage("hyperbolic"):
                    hyp = train_hyperbolic(cfg, cols["text"], cols["embedding"])
        with stages.stage("lexical"):
            # Kept with the chunk columns, which the updater carries from version to version.
            cols["lexical"] = build_lexical(cols["id"], cols["text"], hg.entity_ids if hg is not None else None)
        vs = vectorstore.connect(cfg.vector_store, index_dir)
        previous = store.current_version()
        # Journal jobs already applied to the replaced version stay applied: the rebuild takes
        # over its offset, and jobs after it are applied on top of the new version.
        offset = int(store.open(previous).manifest.get("journal_offset", 0)) if previous is not None else 0
        with store.begin() as w:
            writer = _VectorWriter(vs, store, w.version)
            with stages.stage("write vectors"):
                writer.write("chunks", cols["id"], cols["embedding"])
                if kb is not None and hg is not None:
                    writer.write("entities", hg.entity_ids, node_vecs["entities"])
                    writer.write("relations", list(kb.relations), node_vecs["relations"])
                    writer.write("hyperedges", hg.hyperedge_ids, node_vecs["hyperedges"])
                if hier is not None:
                    writer.write("summaries", hier.ids, hier.embeddings, layers=hier.layers)
                if hyp is not None:
                    writer.write("hyperbolic", cols["id"], hyp["storage"], metric="L2")
            with stages.stage("write snapshot"):
                _write_tables(w, docs, cols, kb, hg, hier, hyp, node_vecs)
                stats = _stats(docs, cols, kb, hg, hier)
                w.commit({
                    "generation": w.version, "config_hash": cfg.index_hash(),
                    "embedder": {"model": cfg.embedder.model, "dim": int(cols["embedding"].shape[1])},
                    "collections": writer.collections, "counts": stats["counts"], "stats": stats,
                    "hierarchy": hier.manifest() if hier is not None else None,
                    "hyperbolic": ({"M": hyp["M"], "dim": cfg.hyperbolic.dim, "seed": cfg.hyperbolic.seed}
                                   if hyp is not None else None),
                    "llm_calls": usage.calls(), "journal_offset": offset})
                version = w.version
        writer = None
    finally:
        if writer is not None:
            writer.drop_all()
        if vs is not None:
            vs.close()
    stats["seconds_per_stage"] = stages.seconds
    return {"version": version, **{k: stats["counts"][k] for k in
                                   ("documents", "chunks", "entities", "relations", "hyperedges", "summaries")},
            "layers": stats["layers"], "seconds": stages.total, "llm_calls": usage.calls(), "stats": stats}


def _stats(docs: list[Document], cols: dict[str, Any], kb: Knowledge | None, hg: HybridGraph | None,
           hier: HierarchyResult | None) -> dict[str, Any]:
    counts = {"documents": len(docs), "chunks": len(cols["id"]), "entities": 0, "relations": 0,
              "hyperedges": 0, "summaries": 0}
    out: dict[str, Any] = {"counts": counts, "layers": 0}
    if kb is not None and hg is not None:
        counts.update(entities=len(hg.entity_ids), relations=len(kb.relations), hyperedges=len(hg.hyperedge_ids))
        out["edges"] = hg.edge_counts()
    if hier is not None:
        counts["summaries"] = len(hier.ids)
        out["layers"] = hier.n_layers
        out["segments_per_layer"] = hier.segments_per_layer()
        out["segment_size_histogram"] = hier.size_histogram()
    return out


def ensure_demo_index(cfg: HygraphConfig, index_dir: Path) -> None:
    """Build the bundled demo corpus into `index_dir` when it holds no version yet."""
    from hygraph.data import DEMO_DIR

    if not index_dir.is_dir() or SnapshotStore(index_dir).current_version() is None:
        print(f"[hygraph] {index_dir} holds no index: building the bundled demo index "
              f"(about 4 minutes on 2 CPU cores)", file=sys.stderr)
        build_index(cfg, DEMO_DIR / "corpus.jsonl", index_dir)
