"""Ingest: documents -> chunks with their embeddings and extractions.

Build: one Ray Data stream (chunk as tasks, embed and extract on actor pools), plus Ray Data
batch embedding of bulk texts and a small actor pool for the hierarchy's sequential calls.
Update: the same chunking, embedding and extraction of the new documents only, in the
updater's process with its own models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from hygraph.config import EmbedderConfig, HygraphConfig, LLMConfig
from hygraph.indexing.chunker import chunk_documents
from hygraph.indexing.progress import Stages
from hygraph.model import Chunk, Document, Extraction

if TYPE_CHECKING:
    from hygraph.backends.embedder import Embedder, Tokenizer
    from hygraph.backends.llm.base import LLM

CHUNK_COLS = ("id", "doc_id", "ordinal", "text", "n_tokens", "title")


@lru_cache(maxsize=4)
def tokenizer(model: str) -> "Tokenizer":
    from hygraph.backends.embedder import Tokenizer

    return Tokenizer(EmbedderConfig(model=model))


def chunk_batch(batch: dict[str, np.ndarray], model: str, size: int, overlap: int) -> dict[str, list[Any]]:
    """Documents -> chunk rows (Ray Data tasks; the tokenizer is cached per worker process)."""
    docs = [Document(id=str(i), title=str(t), text=str(x))
            for i, t, x in zip(batch["id"], batch["title"], batch["text"])]
    chunks = chunk_documents(docs, tokenizer(model), size, overlap)
    return {"id": [c.id for c in chunks], "doc_id": [c.doc_id for c in chunks],
            "ordinal": [c.ordinal for c in chunks], "text": [c.text for c in chunks],
            "n_tokens": [c.n_tokens for c in chunks], "title": [c.title for c in chunks]}


class EmbedStage:
    """Adds an `embedding` column; one model per actor (GPU when the actor has one)."""

    def __init__(self, embedder: dict[str, Any], threads: float) -> None:
        from hygraph.backends.embedder import make_embedder

        self.embedder = make_embedder(EmbedderConfig(**embedder), threads=threads)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch["embedding"] = self.embedder.encode([str(t) for t in batch["text"]])
        return batch


class ExtractStage:
    """Adds `extraction` (JSON per chunk) through the LLM `extract` role.

    Ray Data gives no handle on pool actors, so each batch reports the LLM calls it made
    in an `llm_calls` column (the batch's count on its first row, 0 elsewhere) that the
    driver sums.
    """

    def __init__(self, llm: dict[str, Any], cache_dir: str | None) -> None:
        from hygraph.backends.llm import make_llm

        self.llm = make_llm(LLMConfig(**llm), cache_dir=cache_dir)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        chunks = [Chunk(id=str(i), doc_id=str(d), ordinal=int(o), text=str(t), n_tokens=int(n), title=str(ti))
                  for i, d, o, t, n, ti in zip(batch["id"], batch["doc_id"], batch["ordinal"], batch["text"],
                                               batch["n_tokens"], batch["title"])]
        before = self.llm.usage.roles["extract"].calls
        extractions = self.llm.extract(chunks)
        calls = np.zeros(len(chunks), dtype=np.int64)
        if len(chunks):
            calls[0] = self.llm.usage.roles["extract"].calls - before
        batch["extraction"] = np.array([json.dumps(e.to_dict()) for e in extractions], dtype=object)
        batch["llm_calls"] = calls
        return batch


@dataclass
class Ingested:
    """Chunks in corpus order, their embeddings and (with extraction) their extractions."""

    chunks: list[Chunk]
    embeddings: np.ndarray
    extractions: list[Extraction]
    extract_calls: int = 0


def build(cfg: HygraphConfig, docs: list[Document], stages: Stages, extract: bool, cache_dir: str) -> Ingested:
    """Ray Data: read -> chunk (tasks) -> embed (actor pool) [-> extract (actor pool)]."""
    import ray.data

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
    chunks = [Chunk(*(cols[k][i] for k in CHUNK_COLS)) for i in order]
    return Ingested(chunks, np.vstack(vecs)[order], [extractions[i] for i in order] if extract else [], calls)


def chunk(cfg: HygraphConfig, docs: Sequence[Document]) -> list[Chunk]:
    """The build's chunks of a batch's new documents (deterministic: a document applied in slices is
    chunked again for each slice and yields the same chunks)."""
    return chunk_documents(list(docs), tokenizer(cfg.embedder.model), cfg.chunking.size_tokens,
                           cfg.chunking.overlap_tokens)


def update(chunks: Sequence[Chunk], embedder: "Embedder", llm: "LLM | None") -> Ingested:
    """The build's per-chunk steps for chunks an update applies, in this process (the updater's models)."""
    chunks = list(chunks)
    vectors = embedder.encode([c.text for c in chunks]) if chunks else np.zeros((0, embedder.dim), np.float32)
    extractions = llm.extract(chunks) if chunks and llm is not None else []
    return Ingested(chunks, vectors, extractions)


def embed_bulk(cfg: EmbedderConfig, texts: Sequence[str], stages: Stages, desc: str,
               batch_size: int) -> np.ndarray:
    """Ray Data batch inference over `texts` (order preserved) on the configured actor pool."""
    import ray.data

    if not texts:
        return np.zeros((0, 0), np.float32)
    # Length-sorted blocks pad less: a batch of short entity names no longer waits on a long fact.
    order = np.argsort([len(t) for t in texts], kind="stable")
    # Blocks of about 500 texts: progress moves as each block lands, not once per several thousand.
    ds = ray.data.from_items([{"text": texts[i]} for i in order],
                             override_num_blocks=max(1, min(400, -(-len(texts) // 500))))
    ds = ds.map_batches(EmbedStage, batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=cfg.pool_size),
                        num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus or None,
                        fn_constructor_kwargs={"embedder": cfg.model_dump(), "threads": cfg.num_cpus})
    parts: list[np.ndarray] = []
    with stages.bar(len(texts), desc) as bar:
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            parts.append(np.asarray(batch["embedding"], dtype=np.float32))
            bar.update(len(parts[-1]))
    out = np.empty((len(texts), parts[0].shape[1]), np.float32)
    out[order] = np.vstack(parts)
    return out


class _EncoderActor:
    def __init__(self, embedder: dict[str, Any], threads: float) -> None:
        from hygraph.backends.embedder import make_embedder

        self.embedder = make_embedder(EmbedderConfig(**embedder), threads=threads)

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.embedder.encode(texts)


class Encoder:
    """`embedder.pool_size` Ray actors holding the model, for the hierarchy's per-layer summaries.

    Each call splits its texts evenly over the actors, so small sequential calls still use
    the whole pool; the actors live for one build and are killed by `close`.
    """

    def __init__(self, cfg: EmbedderConfig) -> None:
        import ray

        self._ray = ray
        remote = ray.remote(num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus)(_EncoderActor)
        self.actors = [remote.remote(cfg.model_dump(), cfg.num_cpus) for _ in range(cfg.pool_size)]

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        parts = np.array_split(np.arange(len(texts)), len(self.actors))
        refs = [a.encode.remote([texts[i] for i in idx]) for a, idx in zip(self.actors, parts) if len(idx)]
        return np.vstack(self._ray.get(refs))

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
