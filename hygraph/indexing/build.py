"""`hygraph index`: validate the corpus, run the Ray Data ingest, hand the rest to the assembling actor.

Stages, in order (each module in indexing/stages/ holds its build and its update): ingest
(chunk, embed, extract), knowledge, graph, structure (Cleora), vectors (knowledge texts),
hierarchy, hyperbolic, lexical (BM25 postings), then vectors and snapshot written and a version
committed. This process (the driver) holds counts and file spans only: the ingest streams through
Ray Data into shards, and everything after it runs in one Ray actor on a worker (indexing/assemble.py),
but hyperbolic and lexical, Ray tasks it starts beside its own stages (indexing/beside.py).

The build is resumable (indexing/checkpoint.py): each finished stage's outputs are kept under
`<index>/builds/<fingerprint>/` until the commit, and a rerun of the same command loads them.
"""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import numpy as np

from hygraph.backends import vectorstore
from hygraph.backends.llm import make_llm
from hygraph.config import HygraphConfig
from hygraph.errors import InputError
from hygraph.indexing import checkpoint
from hygraph.indexing.assemble import Assembly, Built, run_assembler
from hygraph.indexing.checkpoint import Checkpoint, SnapshotTables, resumable
from hygraph.indexing.progress import Stages
from hygraph.indexing.stages import graph as graph_stage
from hygraph.indexing.stages import hierarchy, hyperbolic, ingest, knowledge, lexical, structure, vectors
from hygraph.model import iter_triples, scan_corpus
from hygraph.runtime import init_ray
from hygraph.store.index import Index
from hygraph.store.objects import is_remote, local_dir_of
from hygraph.store.versions import IndexStore


def build_index(cfg: HygraphConfig, corpus: str | Path, index_dir: str | Path,
                triples: str | Path | None = None, kg: str | Path | None = None,
                graph: bool = True, restart: bool = False) -> dict[str, Any]:
    """Build a new index version; resumes the unfinished build of the same inputs unless `restart`."""
    stages = Stages("index")
    with stages.stage("load corpus"):
        ids: set[str] = set()  # kept only while a triples file is checked against them
        scan = scan_corpus(Path(corpus).resolve(), ids=ids if triples else None)
        if triples:
            _check_triples(triples, ids)
        ids.clear()
    # Check the store first: an unreachable one must fail before anything is created on disk.
    # The connection is not held through the long compute (idle gRPC channels get GOAWAY).
    # An index on S3 keeps its checkpoint, LLM cache and managed vector store in this node's directory for it.
    index = str(index_dir) if is_remote(index_dir) else str(Path(index_dir).resolve())
    local = local_dir_of(index, cfg.store.cache_dir).resolve()
    vectorstore.connect(cfg.vector_store, local).close()
    IndexStore(index, create=True, **cfg.store.model_dump())
    ckpt = Checkpoint(local, checkpoint.fingerprint(corpus, triples, kg, cfg.index_hash(), graph), restart)
    if ckpt.record.done:
        stages.note(f"resuming the unfinished build {ckpt.dir.name}: {', '.join(ckpt.record.done)} kept")
    cache_dir = str(Path(cfg.llm.cache_dir).resolve()) if cfg.llm.cache_dir else str(local / "llm_cache")
    init_ray(cfg.ray)
    extract = graph and not triples
    shard_dir = ckpt.shard_dir("ingest")
    resumable(stages, ckpt, "chunk+embed+extract" if extract else "chunk+embed",
              lambda: ingest.build(cfg, scan, stages, extract=extract, cache_dir=cache_dir, shard_dir=shard_dir),
              lambda _: None, lambda: None, timed=False)
    job = Assembly(cfg, scan.path, _absolute(triples), _absolute(kg), index, str(local), graph, extract, cache_dir,
                   ckpt, _peak_rss())
    result = run_assembler(job, stages, scan.documents)
    result["seconds"] = stages.total
    result["stats"]["driver_peak_rss_bytes"] = _peak_rss()
    return result


def _check_triples(path: str | Path, ids: set[str]) -> None:
    """Every passage a triples file names is in the corpus (read in one pass, before anything is built)."""
    unknown = [r.passage_id for r in iter_triples(path) if r.passage_id not in ids]
    if unknown:
        raise InputError(f"{path}: passage_id '{unknown[0]}' is not in the corpus "
                         f"({len(unknown)} unknown passage ids)")


def _absolute(path: str | Path | None) -> str | None:
    return str(Path(path).resolve()) if path is not None else None


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def create_empty_index(cfg: HygraphConfig, index_dir: str | Path) -> dict[str, Any]:
    """Version 1 of an index with no documents (`POST /v1/indexes`): every table empty and every vector
    collection created empty, made by the build's own stages over nothing, so inserts grow it through
    the updater exactly as they grow a built index. No-op when the index holds a version already."""
    from hygraph.backends.embedder import make_embedder

    store = IndexStore(index_dir, create=True, **cfg.store.model_dump())
    if store.current_version() is not None:
        return {"version": store.current_version(), "created": False}
    dim = make_embedder(cfg.embedder).dim
    none = np.zeros((0, dim), np.float32)
    built = Built([], ingest.Ingested([], none, []))
    kb = built.kb = knowledge.merge_extractions([])
    hg = built.graph = graph_stage.build(cfg, [], kb)
    built.cleora = structure.build(cfg.cleora, hg)
    built.vecs = {"entities": none, "relations": none, "hyperedges": none}
    llm = make_llm(cfg.llm, cache_dir=cfg.llm.cache_dir or str(store.local_dir / "llm_cache"))
    built.hier = hierarchy.build(cfg, [], [], none, kb, hg, {"entities": none, "cleora": built.cleora}, llm,
                                 lambda texts: np.zeros((len(texts), dim), np.float32))
    if cfg.hyperbolic.enabled:
        built.hyp = hyperbolic.build(cfg.hyperbolic, [], none)
    built.lexical = lexical.build([], [], hg.entity_ids)
    index = Index(cfg, store)
    try:
        with index.publishing() as w, \
                vectors.CollectionWriter(index.vectors, store, w.version, keep_empty=True) as writer:
            # Every kind the build makes, empty (an empty hierarchy has no embedding width of its own).
            for kind in ("chunks", "entities", "relations", "hyperedges", "summaries"):
                writer.add(kind, [], none)
            if built.hyp is not None:
                writer.add("hyperbolic", [], built.hyp.storage(), metric="L2")
            writer.finish()
            manifest = built.write_tables(SnapshotTables(w, None), cfg, graph=True)
            manifest.generation, manifest.collections = w.version, writer.collections
            manifest.config_hash, manifest.journal_offset = cfg.index_hash(), 0
            w.commit(manifest)
    finally:
        index.close()
    return {"version": w.version, "created": True}


def gc_index(cfg: HygraphConfig, index_dir: str | Path) -> dict[str, Any]:
    """`hygraph gc`: what `Index.collect_garbage` removed from `index_dir` and its vector store. The store is
    connected first: a collection gc hands back while the store is unreachable would be forgotten."""
    store = IndexStore(index_dir, **cfg.store.model_dump())
    if store.uid is None:
        raise InputError(f"--index-dir {index_dir}: not an index directory (no index.json)")
    index = Index(cfg, store)
    try:
        result = index.collect_garbage()
    finally:
        index.close()
    return {"versions_removed": result.versions, "segment_files_removed": result.segment_files,
            "bytes_removed": result.bytes, "collections_dropped": sorted(result.collections),
            "unfinished_builds": result.orphaned}


def remove_index(cfg: HygraphConfig, path: str | Path) -> dict[str, Any]:
    """`Index.remove` of the index at `path`, a named index the registry took out of sight."""
    return {"collections_dropped": Index(cfg, IndexStore(path, cache_dir=cfg.store.cache_dir)).remove()}
