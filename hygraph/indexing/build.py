"""`hygraph index`: corpus -> Ray Data (chunk, embed) -> vectors + a new snapshot version.

Everything is validated before anything is written; vectors go into collections named
after the new version, and a failure drops them and removes the temporary version
directory, so a failed build leaves the previous version serving untouched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hygraph.backends import vectorstore
from hygraph.cluster.runtime import init_ray
from hygraph.config import HygraphConfig
from hygraph.indexing.progress import Stages
from hygraph.indexing.stages import EmbedStage, chunk_batch
from hygraph.model import Document, load_corpus
from hygraph.store.snapshot import SnapshotStore


def run_pipeline(cfg: HygraphConfig, docs: list[Document], stages: Stages) -> dict[str, Any]:
    """Ray Data: read -> chunk (tasks) -> embed (actor pool); returns chunk columns + embeddings."""
    import ray.data

    init_ray(cfg.ray)
    emb = cfg.embedder
    ds = ray.data.from_items([{"id": d.id, "title": d.title, "text": d.text} for d in docs],
                             override_num_blocks=max(1, min(64, len(docs) // 200)))
    ds = ds.map_batches(chunk_batch, batch_size=256, num_cpus=0.5,
                        fn_kwargs={"model": emb.model, "size": cfg.chunking.size_tokens,
                                   "overlap": cfg.chunking.overlap_tokens})
    ds = ds.map_batches(EmbedStage, batch_size=cfg.indexing.batch_size,
                        compute=ray.data.ActorPoolStrategy(size=emb.pool_size),
                        num_cpus=emb.num_cpus, num_gpus=emb.num_gpus or None,
                        fn_constructor_kwargs={"embedder": emb.model_dump(), "threads": emb.num_cpus})
    cols: dict[str, list[Any]] = {k: [] for k in ("id", "doc_id", "ordinal", "text", "n_tokens", "title")}
    vecs: list[np.ndarray] = []
    with stages.stage("chunk+embed"), stages.bar(len(docs), "documents embedded") as bar:
        seen_docs: set[str] = set()
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for k in cols:
                cols[k].extend(batch[k].tolist())
            vecs.append(np.asarray(batch["embedding"], dtype=np.float32))
            new = set(batch["doc_id"].tolist()) - seen_docs
            seen_docs |= new
            bar.update(len(new))
    cols["embedding"] = np.vstack(vecs) if vecs else np.zeros((0, 1), np.float32)
    return cols


def build_index(cfg: HygraphConfig, corpus: str | Path, index_dir: str | Path) -> dict[str, Any]:
    stages = Stages("index")
    with stages.stage("load corpus"):
        docs = load_corpus(corpus)
    # Connect first: an unreachable store must fail before anything is created on disk.
    vs = vectorstore.connect(cfg.vector_store, index_dir)
    store = SnapshotStore(index_dir, create=True)
    created: list[str] = []
    try:
        chunks = run_pipeline(cfg, docs, stages)
        with store.begin() as writer:
            gen = writer.version
            with stages.stage("write vectors"):
                name = store.collection(gen, "chunks")
                vs.create(name, chunks["embedding"].shape[1], "IP")
                created.append(name)
                vs.upsert(name, chunks["id"], chunks["embedding"], gen)
                vs.seal(name)
            with stages.stage("write snapshot"):
                writer.write_table("documents", {
                    "id": [d.id for d in docs], "title": [d.title for d in docs],
                    "text": [d.text for d in docs]})
                writer.write_table("chunks", {k: chunks[k] for k in
                                              ("id", "doc_id", "ordinal", "text", "n_tokens", "title")})
                writer.write_array("chunk_embeddings", chunks["embedding"])
                counts = {"documents": len(docs), "chunks": len(chunks["id"])}
                snap = writer.commit({
                    "generation": gen, "config_hash": cfg.index_hash(),
                    "embedder": {"model": cfg.embedder.model, "dim": int(chunks["embedding"].shape[1])},
                    "collections": {"chunks": name}, "counts": counts,
                    "stats": {"seconds": stages.seconds}, "llm_calls": {}})
        created.clear()
    finally:
        for name in created:
            vs.drop(name)
        vs.close()
    return {"version": snap.version, **counts, "entities": 0, "relations": 0, "hyperedges": 0,
            "summaries": 0, "layers": 0, "seconds": stages.total, "llm_calls": {},
            "stages": stages.seconds}
