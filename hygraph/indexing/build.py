"""`hygraph index`: the Ray Data ingest, then every stage's build, then vectors and a new index version.

Stages, in order (each module in indexing/stages/ holds its build and its update): ingest
(chunk, embed, extract), knowledge, graph, structure (Cleora), vectors (knowledge texts),
hierarchy, hyperbolic, lexical (BM25 postings). Everything is validated before anything is
written; vectors go into collections named after the new version, and a failure drops them and
the version's segments, so a failed build leaves the previous version serving untouched.

The build is resumable (indexing/checkpoint.py): each finished stage's outputs are kept under
`<index>/builds/<fingerprint>/` until the commit, and a rerun of the same command loads them.
"""

from __future__ import annotations

import resource
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np

from hygraph.backends import vectorstore
from hygraph.backends.llm import make_llm
from hygraph.backends.llm.base import Usage
from hygraph.config import HygraphConfig
from hygraph.errors import InputError
from hygraph.indexing import checkpoint
from hygraph.indexing.checkpoint import Checkpoint
from hygraph.indexing.progress import Stages
from hygraph.runtime import init_ray
from hygraph.indexing.stages import graph as graph_stage
from hygraph.indexing.stages import hierarchy, hyperbolic, ingest, knowledge, lexical, structure, vectors
from hygraph.model import Document, TripleRecord, load_corpus, load_triples
from hygraph.store.artifacts import (CHUNKS, DOCUMENTS, ENTITIES, GRAPH, HYPEREDGES, HYPERPLANES, PARENTS,
                                     RELATIONS, SUMMARIES, TERMS, Artifact, ChunkRow, DocumentRow, PostingsRow,
                                     metadata_text)
from hygraph.store.manifest import HierarchyInfo, HyperbolicInfo, Manifest
from hygraph.store.objects import local_dir_of
from hygraph.store.versions import GcResult, IndexStore

T = TypeVar("T")


def build_knowledge(ing: ingest.Ingested, triples: list[TripleRecord] | None, kg: str | Path | None
                    ) -> knowledge.Knowledge:
    extractions = (knowledge.extractions_from_triples(ing.chunks, triples) if triples is not None
                   else ing.extractions)
    kb = knowledge.merge_extractions(extractions)
    if kg:
        kb.add(knowledge.load_kg(kg), chunk_id=None)
        kb.finish()
    return kb


def build_index(cfg: HygraphConfig, corpus: str | Path, index_dir: str | Path,
                triples: str | Path | None = None, kg: str | Path | None = None,
                graph: bool = True, restart: bool = False) -> dict[str, Any]:
    """Build a new index version; resumes the unfinished build of the same inputs unless `restart`."""
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
    # An index on S3 keeps its checkpoint, LLM cache and managed vector store in this node's directory for it.
    local = local_dir_of(index_dir, cfg.store.cache_dir)
    vectorstore.connect(cfg.vector_store, local).close()
    store = IndexStore(index_dir, create=True, **cfg.store.model_dump())
    ckpt = Checkpoint(local, checkpoint.fingerprint(corpus, triples, kg, cfg.index_hash(), graph), restart)
    if ckpt.record.done:
        stages.note(f"resuming the unfinished build {ckpt.dir.name}: {', '.join(ckpt.record.done)} kept")
    cache_dir = cfg.llm.cache_dir or str(local / "llm_cache")
    usage = Usage()
    init_ray(cfg.ray)
    extract = graph and not triples
    shard_dir = ckpt.shard_dir("ingest")
    ing = _resumable(stages, ckpt, "chunk+embed+extract" if extract else "chunk+embed",
                     lambda: ingest.build(cfg, docs, stages, extract=extract, cache_dir=cache_dir, shard_dir=shard_dir),
                     lambda _: None, lambda: ingest.read_shards(shard_dir, docs, extract), timed=False)
    if ing.extract_calls:
        usage.count("extract", calls=ing.extract_calls)
    built = _Built(docs, ing)
    if graph:
        _build_graph_stages(cfg, built, records, kg, stages, ckpt, cache_dir, usage)
    with stages.stage("lexical"):
        built.lexical = lexical.build(built.chunk_ids, [c.text for c in ing.chunks],
                                      built.graph.entity_ids if built.graph is not None else None)
    vs = vectorstore.connect(cfg.vector_store, local)
    writer: vectors.CollectionWriter | None = None
    try:
        previous = store.current_version()
        # Journal jobs already applied to the replaced version stay applied: the rebuild takes
        # over its offset, and jobs after it are applied on top of the new version.
        offset = store.manifest(previous).journal_offset if previous is not None else 0
        with store.begin(prefer=ckpt.record.generation) as w:
            writer = vectors.CollectionWriter(vs, store, w.version, kept=ckpt.kept_collections(w.version),
                                              on_written=ckpt.collection_written)
            with stages.stage("write vectors"):
                built.write_vectors(writer)
            if writer.kept:
                stages.note(f"write vectors: collections {', '.join(writer.kept)} kept from the checkpoint")
            with stages.stage("write snapshot"):
                manifest = built.write_tables(w, cfg)
                manifest.generation, manifest.collections = w.version, writer.collections
                manifest.config_hash, manifest.journal_offset = cfg.index_hash(), offset
                manifest.llm_calls = usage.calls()
                manifest.stats.update(_accounting(stages, ckpt, writer, w.bytes_written))
                w.commit(manifest)
                version = w.version
        writer = None
        ckpt.remove()
        # The versions before a rebuild go once their grace ends, with their segments and collections,
        # and so do the collections of builds that died before committing.
        try:
            store.forget_collections([version])  # the manifest names them now
            collect_garbage(cfg, store, vs)
        except Exception as exc:  # noqa: BLE001 - published already; the next build or update collects
            stages.note(f"garbage collection of old versions failed ({type(exc).__name__}); retried later")
    finally:
        if writer is not None:
            writer.drop_all()
        vs.close()
    manifest.stats["seconds_per_stage"] = stages.seconds
    counts = manifest.counts
    return {"version": version, **{k: counts[k] for k in
                                   ("documents", "chunks", "entities", "relations", "hyperedges", "summaries")},
            "layers": manifest.stats.get("layers", 0), "seconds": stages.total, "llm_calls": usage.calls(),
            "resumed_stages": ckpt.resumed, "stats": manifest.stats}


def _accounting(stages: Stages, ckpt: Checkpoint, writer: vectors.CollectionWriter,
                segment_bytes: int) -> dict[str, Any]:
    """The manifest's statistics of how this run of the build went."""
    return {"seconds_per_stage": stages.seconds, "resumed_stages": ckpt.resumed,
            "seconds_of_resumed_stages": {s: ckpt.record.seconds[s] for s in ckpt.resumed},
            "collections_kept": writer.kept,
            "driver_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "worker_peak_rss_bytes": max(stages.worker_rss.values(), default=0),
            "worker_peak_rss_bytes_per_stage": stages.worker_rss,
            "nodes_per_stage": {s: sorted(n) for s, n in stages.worker_nodes.items()},
            "worker_peak_rss_bytes_per_node": dict(sorted(stages.node_rss.items())),
            "bytes_written": segment_bytes, "checkpoint_bytes_written": stages.bytes_written + ckpt.bytes_written,
            "vectors_written": writer.vectors_written,
            "vectors_per_s": round(writer.vectors_written / writer.seconds, 1) if writer.seconds > 0 else 0.0}


def _resumable(stages: Stages, ckpt: Checkpoint, name: str, compute: Callable[[], T], save: Callable[[T], None],
               load: Callable[[], T], llm_calls: Callable[[], dict[str, int]] = dict, timed: bool = True) -> T:
    """Stage `name`: loaded from the checkpoint when an earlier run finished it, else computed and saved.
    `timed=False`: `compute` times the stage itself (under `name`)."""
    if ckpt.done(name):
        with stages.stage(name):
            stages.note(f"{name}: resumed from the checkpoint (it took {ckpt.record.seconds[name]:.1f}s)")
            value = load()
        ckpt.resumed.append(name)
        return value
    if timed:
        with stages.stage(name):
            value = compute()
    else:
        value = compute()
    save(value)
    ckpt.finish(name, stages.seconds.get(name, 0.0), llm_calls())
    return value


def create_empty_index(cfg: HygraphConfig, index_dir: str | Path) -> dict[str, Any]:
    """Version 1 of an index with no documents (`POST /v1/indexes`): every table empty and every vector
    collection created empty, made by the build's own stages over nothing, so inserts grow it through
    the updater exactly as they grow a built index. No-op when the index holds a version already."""
    from hygraph.backends.embedder import make_embedder

    store = IndexStore(index_dir, create=True)
    if store.current_version() is not None:
        return {"version": store.current_version(), "created": False}
    dim = make_embedder(cfg.embedder).dim
    none = np.zeros((0, dim), np.float32)
    built = _Built([], ingest.Ingested([], none, []))
    kb = built.kb = knowledge.merge_extractions([])
    hg = built.graph = graph_stage.build(cfg, [], kb)
    built.cleora = structure.build(cfg.cleora, hg)
    built.vecs = {"entities": none, "relations": none, "hyperedges": none}
    llm = make_llm(cfg.llm, cache_dir=cfg.llm.cache_dir or str(Path(index_dir) / "llm_cache"))
    built.hier = hierarchy.build(cfg, [], [], none, kb, hg, {"entities": none, "cleora": built.cleora}, llm,
                                 lambda texts: np.zeros((len(texts), dim), np.float32))
    if cfg.hyperbolic.enabled:
        built.hyp = hyperbolic.build(cfg.hyperbolic, [], none)
    built.lexical = lexical.build([], [], hg.entity_ids)
    vs = vectorstore.connect(cfg.vector_store, index_dir)
    writer: vectors.CollectionWriter | None = None
    try:
        with store.begin() as w:
            writer = vectors.CollectionWriter(vs, store, w.version, keep_empty=True)
            # Every kind the build makes, empty (an empty hierarchy has no embedding width of its own).
            for kind in ("chunks", "entities", "relations", "hyperedges", "summaries"):
                writer.add(kind, [], none)
            if built.hyp is not None:
                writer.add("hyperbolic", [], built.hyp.storage(), metric="L2")
            writer.write()
            manifest = built.write_tables(w, cfg)
            manifest.generation, manifest.collections = w.version, writer.collections
            manifest.config_hash, manifest.journal_offset = cfg.index_hash(), 0
            w.commit(manifest)
            version = w.version
        store.forget_collections([version])
        writer = None
    finally:
        if writer is not None:
            writer.drop_all()
        vs.close()
    return {"version": version, "created": True}


def collect_garbage(cfg: HygraphConfig, store: IndexStore, vs: vectorstore.VectorStore) -> GcResult:
    """`store.gc` with the configured retention, then drop the vector collections it hands back: those
    only removed versions named, and those of builds that never committed (then forgotten)."""
    result = store.gc(cfg.updates.keep_versions, cfg.updates.gc_grace_s)
    for name in sorted(result.collections):
        vs.drop(name)
    store.forget_collections(result.orphaned)
    return result


def gc_index(cfg: HygraphConfig, index_dir: str | Path) -> dict[str, Any]:
    """`hygraph gc`: what `collect_garbage` removed from `index_dir` and its vector store. The store is
    connected first: a collection gc hands back while the store is unreachable would be forgotten."""
    store = IndexStore(index_dir, **cfg.store.model_dump())
    if store.uid is None:
        raise InputError(f"--index-dir {index_dir}: not an index directory (no index.json)")
    vs = vectorstore.connect(cfg.vector_store, store.local_dir)
    try:
        result = collect_garbage(cfg, store, vs)
    finally:
        vs.close()
    return {"versions_removed": result.versions, "segment_files_removed": result.segment_files,
            "bytes_removed": result.bytes, "collections_dropped": sorted(result.collections),
            "unfinished_builds": result.orphaned}


def remove_index(cfg: HygraphConfig, path: str | Path) -> dict[str, Any]:
    """Drop every vector collection of the index at `path`, then its files (`DELETE /v1/indexes/{name}`, after
    the registry took it out of sight). The store is connected first: files go only once nothing of the
    index is left in it."""
    store = IndexStore(path)
    names = store.every_collection()
    vs = vectorstore.connect(cfg.vector_store, path)
    try:
        for name in sorted(names):
            vs.drop(name)
    finally:
        vs.close()
    shutil.rmtree(path)
    return {"collections_dropped": len(names)}


class _Built:
    """What the build stages produced, until it is written."""

    def __init__(self, docs: list[Document], ing: ingest.Ingested) -> None:
        self.docs, self.ing = docs, ing
        self.chunk_ids = [c.id for c in ing.chunks]
        self.kb: knowledge.Knowledge | None = None
        self.graph: graph_stage.HybridGraph | None = None
        self.cleora: np.ndarray | None = None
        self.vecs: dict[str, np.ndarray] = {}
        self.hier: hierarchy.HierarchyResult | None = None
        self.hyp: hyperbolic.Trained | None = None
        self.lexical: dict[Artifact[PostingsRow], list[PostingsRow]] = {}

    def write_vectors(self, writer: vectors.CollectionWriter) -> None:
        writer.add("chunks", self.chunk_ids, self.ing.embeddings)
        if self.kb is not None and self.graph is not None:
            writer.add("entities", self.graph.entity_ids, self.vecs["entities"])
            writer.add("relations", list(self.kb.relations), self.vecs["relations"])
            writer.add("hyperedges", self.graph.hyperedge_ids, self.vecs["hyperedges"])
        if self.hier is not None:
            writer.add("summaries", self.hier.ids, self.hier.embeddings, layers=self.hier.layers)
        if self.hyp is not None:
            writer.add("hyperbolic", self.chunk_ids, self.hyp.storage(), metric="L2")
        writer.write()

    def write_tables(self, w: Any, cfg: HygraphConfig) -> Manifest:
        dims = {"text": int(self.ing.embeddings.shape[1]), "cleora": cfg.cleora.dim}
        contributions = knowledge.per_chunk(self.kb) if self.kb is not None else {}
        none = knowledge.ChunkKnowledge()
        by_doc: dict[str, list[str]] = {}
        chunk_rows = []
        for c, vec in zip(self.ing.chunks, self.ing.embeddings):
            ck = contributions.get(c.id, none)
            by_doc.setdefault(c.doc_id, []).append(c.id)
            chunk_rows.append(ChunkRow(c.id, c.doc_id, c.ordinal, c.text, c.n_tokens, c.title, tuple(ck.entities),
                                       tuple(ck.relations), tuple(ck.hyperedges), vec))
        w.replace(DOCUMENTS, [DocumentRow(d.id, d.title, d.text, tuple(by_doc.get(d.id, ())), metadata_text(d.metadata))
                              for d in self.docs], dims)
        w.replace(CHUNKS, chunk_rows, dims)
        for artifact, rows in self.lexical.items():
            w.replace(artifact, rows, dims)
        counts = {"documents": len(self.docs), "chunks": len(chunk_rows), "entities": 0, "relations": 0,
                  "hyperedges": 0, "summaries": 0}
        manifest = Manifest(embedder_model=cfg.embedder.model, dims=dims, graph=self.kb is not None, counts=counts)
        if self.kb is None or self.graph is None or self.cleora is None:
            return manifest
        hg, kb = self.graph, self.kb
        entities, relations, hyperedges = knowledge.build_rows(kb, hg.entity_ids, hg.hyperedge_ids,
                                                               self.vecs["entities"])
        w.replace(ENTITIES, entities, dims)
        w.replace(RELATIONS, relations, dims)
        w.replace(HYPEREDGES, hyperedges, dims)
        w.replace(GRAPH, graph_stage.build_rows(hg, self.cleora), dims)
        counts.update(entities=len(entities), relations=len(relations), hyperedges=len(hyperedges))
        manifest.stats["edges"] = graph_stage.edge_counts(hg)
        if self.hier is not None:
            summaries, parents, planes = self.hier.rows()
            w.replace(SUMMARIES, summaries, dims)
            w.replace(PARENTS, parents, dims)
            w.replace(HYPERPLANES, planes, dims)
            counts["summaries"] = len(summaries)
            manifest.stats.update(hierarchy.stats(self.hier.layers, [len(ch) for ch in self.hier.children]))
            manifest.hierarchy = HierarchyInfo(self.hier.partitioner, self.hier.n_layers,
                                               manifest.stats["segments_per_layer"])
        if self.hyp is not None:
            w.replace(TERMS, self.hyp.rows(self.chunk_ids), dims)
            manifest.hyperbolic = HyperbolicInfo(self.hyp.M, cfg.hyperbolic.dim, cfg.hyperbolic.seed)
        return manifest


def _build_graph_stages(cfg: HygraphConfig, built: _Built, records: list[TripleRecord] | None,
                        kg: str | Path | None, stages: Stages, ckpt: Checkpoint, cache_dir: str,
                        usage: Usage) -> None:
    ing = built.ing
    # Knowledge and the hybrid graph are pure, quick functions of the ingest output: derived again on resume.
    with stages.stage("knowledge"):
        kb = built.kb = build_knowledge(ing, records, kg)
    with stages.stage("hybrid graph"):
        hg = built.graph = graph_stage.build(cfg, built.chunk_ids, kb)
    nodes = {"nodes": list(hg.node_ids)}
    knowledge_ids = {"entities": list(hg.entity_ids), "relations": list(kb.relations),
                     "hyperedges": list(hg.hyperedge_ids)}
    llm = make_llm(cfg.llm, cache_dir=cache_dir)
    # One pool embeds for both stages; its actors load the model while the driver runs Cleora.
    pool = (ingest.EmbedPool(cfg.embedder)
            if not (ckpt.done("embed entities, relations, hyperedges") and ckpt.done("hierarchy")) else None)
    try:
        built.cleora = _resumable(
            stages, ckpt, "cleora", lambda: structure.build(cfg.cleora, hg),
            lambda v: checkpoint.save_named(ckpt, "cleora", {"cleora": v}, nodes),
            lambda: checkpoint.load_named(ckpt, "cleora", nodes)["cleora"])

        def embed_knowledge() -> dict[str, np.ndarray]:
            assert pool is not None
            vecs = vectors.build(pool, kb, hg.entity_ids, list(kb.relations), hg.hyperedge_ids, stages,
                                 cfg.indexing.batch_size)
            pool.report(stages)
            return vecs

        built.vecs = _resumable(
            stages, ckpt, "embed entities, relations, hyperedges", embed_knowledge,
            lambda v: checkpoint.save_named(ckpt, "knowledge_vectors", v, knowledge_ids),
            lambda: checkpoint.load_named(ckpt, "knowledge_vectors", knowledge_ids))

        def build_hierarchy() -> hierarchy.HierarchyResult:
            assert pool is not None
            try:
                return hierarchy.build(cfg, built.chunk_ids, [c.text for c in ing.chunks], ing.embeddings, kb, hg,
                                       {"entities": built.vecs["entities"], "cleora": built.cleora}, llm, pool,
                                       stages.note)
            finally:
                pool.report(stages)

        built.hier = _resumable(stages, ckpt, "hierarchy", build_hierarchy,
                                lambda v: checkpoint.save_hierarchy(ckpt, v), lambda: checkpoint.load_hierarchy(ckpt),
                                llm_calls=llm.usage.calls)
    finally:
        if pool is not None:
            pool.close()
    usage.merge(llm.usage)
    if "hierarchy" in ckpt.resumed:
        for role, n in ckpt.record.llm_calls.get("hierarchy", {}).items():
            usage.count(role, calls=n)
    if cfg.hyperbolic.enabled:
        built.hyp = _resumable(
            stages, ckpt, "hyperbolic",
            lambda: hyperbolic.build(cfg.hyperbolic, [c.text for c in ing.chunks], ing.embeddings),
            lambda v: checkpoint.save_hyperbolic(ckpt, v), lambda: checkpoint.load_hyperbolic(ckpt))


def ensure_demo_index(cfg: HygraphConfig, index_dir: Path) -> None:
    """Build the bundled demo corpus into `index_dir` when it holds no version yet."""
    from hygraph.data import DEMO_DIR

    if not index_dir.is_dir() or IndexStore(index_dir).current_version() is None:
        print(f"[hygraph] {index_dir} holds no index: building the bundled demo index "
              f"(about 4 minutes on 2 CPU cores)", file=sys.stderr)
        build_index(cfg, DEMO_DIR / "corpus.jsonl", index_dir)
