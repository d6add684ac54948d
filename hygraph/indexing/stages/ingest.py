"""Ingest: documents -> chunks with their embeddings and extractions.

Build: one Ray Data stream (read the corpus file's spans and chunk as tasks, embed and extract on actor
pools) whose batches land as shards in the build's checkpoint, so the driver never holds the corpus; then
one embedding actor pool for the rest of the build (the knowledge texts in batches, the hierarchy's
sequential calls).
Update: the same chunking, embedding and extraction of the new documents only, in the
updater's process with its own models.
"""

from __future__ import annotations

import hashlib
import json
import resource
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hygraph.config import EmbedderConfig, HygraphConfig, LLMConfig
from hygraph.core.chunking import token_windows
from hygraph.indexing.chunker import chunk_documents
from hygraph.indexing.progress import Stages
from hygraph.model import Chunk, CorpusScan, CorpusSpan, Document, Extraction, corpus_ids, read_span
from hygraph.store import stage_files

if TYPE_CHECKING:
    from hygraph.backends.embedder import Embedder, Tokenizer
    from hygraph.backends.llm.base import LLM

CHUNK_COLS = ("id", "doc_id", "ordinal", "text", "n_tokens", "title")
# Each Ray Data step adds its worker's peak RSS and node to every row it returns (popped by the driver).
WORKER_RSS, WORKER_NODE = "worker_rss_", "worker_node_"


def worker_report() -> tuple[int, str]:
    """This process's peak RSS in bytes (ru_maxrss is in KiB on Linux) and its Ray node: "<IP>/<node id>"
    (the id's first 8 hex digits; nodes of one machine share an IP)."""
    import ray

    node = f"{ray.util.get_node_ip_address()}/{ray.get_runtime_context().get_node_id()[:8]}"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, node


def current_rss() -> int:
    """This process's resident memory now, in bytes (/proc/self/statm; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * resource.getpagesize()
    except (OSError, IndexError, ValueError):
        return 0


def _report(batch: dict[str, Any], step: str, n: int) -> None:
    rss, node = worker_report()
    batch[WORKER_RSS + step] = np.full(n, rss, np.int64)
    batch[WORKER_NODE + step] = np.array([node] * n, dtype=object)


def pop_reports(batch: dict[str, Any], stages: Stages) -> None:
    """Move the worker columns of a batch into the stage accounting."""
    for key in [k for k in batch if k.startswith(WORKER_RSS)]:
        rss, nodes = batch.pop(key), batch.pop(WORKER_NODE + key[len(WORKER_RSS):])
        if len(rss):
            stages.worker(int(rss.max()), set(nodes.tolist()))


@lru_cache(maxsize=4)
def tokenizer(model: str) -> "Tokenizer":
    from hygraph.backends.embedder import Tokenizer

    return Tokenizer(EmbedderConfig(model=model))


def chunk_batch(batch: dict[str, np.ndarray], corpus: str, model: str, size: int, overlap: int,
                skip: np.ndarray) -> dict[str, list[Any]]:
    """Corpus spans -> chunk rows of their documents whose `id_keys` are not in `skip` (Ray Data tasks: each
    reads its spans from the corpus file; the tokenizer is cached per worker process)."""
    docs = [d for start, end, first in zip(batch["start"], batch["end"], batch["first_line"])
            for d in read_span(corpus, CorpusSpan(int(start), int(end), int(first)))]
    if len(skip):
        keys = id_keys([d.id for d in docs])
        at = np.minimum(np.searchsorted(skip, keys), len(skip) - 1)
        docs = [d for d, done in zip(docs, skip[at] == keys) if not done]
    # Length order keeps the embedding batches that follow evenly padded.
    chunks = sorted(chunk_documents(docs, tokenizer(model), size, overlap), key=lambda c: c.n_tokens)
    per_doc = Counter(c.doc_id for c in chunks)
    out: dict[str, Any] = {
        "id": [c.id for c in chunks], "doc_id": [c.doc_id for c in chunks],
        "ordinal": [c.ordinal for c in chunks], "text": [c.text for c in chunks],
        "n_tokens": [c.n_tokens for c in chunks], "title": [c.title for c in chunks],
        "doc_chunks": [per_doc[c.doc_id] for c in chunks]}  # a resumed ingest keeps only whole documents
    _report(out, "chunk", len(chunks))
    return out


class EmbedStage:
    """Adds an `embedding` column; one model per actor (GPU when the actor has one)."""

    def __init__(self, embedder: dict[str, Any], threads: float) -> None:
        from hygraph.backends.embedder import make_embedder

        self.embedder = make_embedder(EmbedderConfig(**embedder), threads=threads)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch["embedding"] = self.embedder.encode([str(t) for t in batch["text"]])
        _report(batch, "embed", len(batch["text"]))
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
        _report(batch, "extract", len(chunks))
        return batch


@dataclass
class Ingested:
    """Chunks in corpus order, their embeddings and (with extraction) their extractions."""

    chunks: list[Chunk]
    embeddings: np.ndarray
    extractions: Sequence[Extraction]
    extract_calls: int = 0


class ShardExtractions(Sequence[Extraction]):
    """The extractions of a build's chunks, parsed from the shards' JSON column when read: the build never holds
    an object per mention of every chunk at once (at 20k passages, more objects than the merged knowledge has).
    `blocks` hands them out in slices that a Ray task reads for itself (indexing/knowledge_shuffle.py)."""

    def __init__(self, shard_dir: Path, column: pa.ChunkedArray, rows: list[int]) -> None:
        self._shard_dir, self._column, self._rows = shard_dir, column, rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> Extraction:  # type: ignore[override]
        return Extraction.from_dict(json.loads(self._column[self._rows[i]].as_py()))

    def blocks(self, size: int) -> list["ExtractionBlock"]:
        """Consecutive slices of at most `size` extractions, each naming its shard rows and its first ordinal."""
        return [ExtractionBlock(self._shard_dir, self._rows[at:at + size], at) for at in range(0, len(self), size)]


@dataclass
class ExtractionBlock:
    """Extractions `start`, `start + 1`, ... of a build, as rows of its shards (in `read_shards`' numbering): the
    task that merges them reads them from the shards itself, so no extraction passes through the assembler."""

    shard_dir: Path
    rows: list[int]
    start: int

    def __iter__(self) -> Iterator[tuple[int, Extraction, str]]:
        """(ordinal, extraction, its chunk id)."""
        t = _shards(self.shard_dir, ("extraction",))
        texts = _rows_of(t.column("extraction"), self.rows) if t is not None else []
        for ordinal, text in enumerate(texts, self.start):
            ex = Extraction.from_dict(json.loads(text))
            yield ordinal, ex, ex.chunk_id


def _rows_of(column: pa.ChunkedArray, rows: list[int]) -> list[Any]:
    """`column`'s values at `rows`, taken shard by shard (a chunk per shard file): a take over the whole column
    joins every shard's values first, and indexing it row by row searches its chunks each time."""
    rows_at = np.asarray(rows, np.int64)
    starts = np.cumsum([0, *(len(c) for c in column.chunks)])
    which = np.searchsorted(starts, rows_at, side="right") - 1
    out: list[Any] = [None] * len(rows)
    for c in np.unique(which).tolist():
        at = np.flatnonzero(which == c)
        for i, value in zip(at.tolist(), column.chunks[c].take(pa.array(rows_at[at] - starts[c])).to_pylist()):
            out[i] = value
    return out


def build(cfg: HygraphConfig, corpus: CorpusScan, stages: Stages, extract: bool, cache_dir: str,
          shard_dir: Path) -> None:
    """Ray Data: read spans and chunk (tasks) -> embed (actor pool) [-> extract (actor pool)].

    Every batch the stream yields is written to `shard_dir` as it lands (one Arrow file each): a rerun
    after a kill streams only the documents whose chunks are not all in the shards already. The driver
    sees one batch at a time; `read_shards` reads the result back where it is needed.
    """
    import ray.data

    emb = cfg.embedder
    # The documents a killed run finished, as 16-byte keys (the ids themselves would be corpus-sized here
    # and in every chunk task).
    whole = np.sort(id_keys(complete_documents(shard_dir).to_pylist()))
    todo = corpus.documents - len(whole)
    if len(whole):
        stages.note(f"ingest: {len(whole):,} of {corpus.documents:,} documents kept from the checkpoint")
    with stages.stage("chunk+embed+extract" if extract else "chunk+embed"), \
            stages.bar(todo, "documents") as bar:
        if not todo:
            return
        spans = [{"start": s.start, "end": s.end, "first_line": s.first_line} for s in corpus.spans]
        # One span (about 256 documents) per block: every block downstream, and each batch the driver receives
        # here, stays that size whatever the corpus. A fixed number of blocks grew them with the corpus, and the
        # driver's memory with them (at 100k passages, blocks of 1,500+ chunks: 1.3x the driver's peak at 20k).
        ds = ray.data.from_items(spans, override_num_blocks=len(spans))
        # Reading and chunking are light; a small CPU share keeps them schedulable beside the actor pools.
        ds = ds.map_batches(chunk_batch, batch_size=1, num_cpus=0.1,
                            fn_kwargs={"corpus": corpus.path, "model": emb.model, "size": cfg.chunking.size_tokens,
                                       "overlap": cfg.chunking.overlap_tokens, "skip": whole})
        ds = ds.map_batches(EmbedStage, batch_size=cfg.indexing.batch_size,
                            compute=ray.data.ActorPoolStrategy(size=embed_actors(cfg, corpus.text_bytes, todo)),
                            num_cpus=emb.num_cpus, num_gpus=emb.num_gpus or None,
                            fn_constructor_kwargs={"embedder": emb.model_dump(), "threads": emb.num_cpus})
        if extract:
            ds = ds.map_batches(ExtractStage, batch_size=cfg.indexing.batch_size,
                                compute=ray.data.ActorPoolStrategy(size=cfg.indexing.extract_pool_size),
                                num_cpus=cfg.indexing.extract_num_cpus,
                                fn_constructor_kwargs={"llm": cfg.llm.model_dump(), "cache_dir": cache_dir})
        seq = 1 + max((int(p.stem.split("-")[1]) for p in shard_dir.glob("shard-*.arrow")), default=0)
        # Documents done, counted without keeping their ids: each chunk row is 1/doc_chunks of its document.
        done = 0.0
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            pop_reports(batch, stages)
            stages.bytes_written += stage_files.write_table(shard_dir / f"shard-{seq:06d}.arrow",
                                                            _shard(batch, extract))
            seq += 1
            done += float(np.sum(1.0 / batch["doc_chunks"]))
            bar.update(round(done) - bar.done)


def embed_actors(cfg: HygraphConfig, text_bytes: Sequence[int] | np.ndarray, todo: int) -> int:
    """`embedder.pool_size`, or fewer when the documents cannot fill that many batches: Ray Data starts
    every actor (a model load each) before the first batch, and a small build has one batch to embed.
    A text has at most one token per UTF-8 byte, which bounds its chunks (`todo` of the documents are
    streamed; the bound counts the largest ones, and stops once they fill every actor's batch)."""
    size, overlap = cfg.chunking.size_tokens, cfg.chunking.overlap_tokens
    enough = cfg.embedder.pool_size * cfg.indexing.batch_size
    most = 0
    for n in np.sort(np.asarray(text_bytes, dtype=np.int64))[::-1][:todo]:
        most += len(token_windows(int(n), size, overlap))
        if most >= enough:
            break
    return max(1, min(cfg.embedder.pool_size, -(-most // cfg.indexing.batch_size)))


def _shard(batch: dict[str, np.ndarray], extract: bool) -> pa.Table:
    vecs = np.ascontiguousarray(batch["embedding"], dtype=np.float32)
    cols: dict[str, Any] = {k: pa.array(batch[k].tolist()) for k in (*CHUNK_COLS, "doc_chunks")}
    cols["embedding"] = pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), vecs.shape[1])
    if extract:
        cols["extraction"] = pa.array(batch["extraction"].tolist(), pa.string())
        cols["llm_calls"] = pa.array(batch["llm_calls"], pa.int64())
    return pa.table(cols)


def _shards(shard_dir: Path, columns: Sequence[str] | None = None) -> pa.Table | None:
    tables = [stage_files.read_table(p, columns) for p in sorted(shard_dir.glob("shard-*.arrow"))]
    return pa.concat_tables(tables) if tables else None


def _latest_rows(ids: list[str]) -> dict[str, int]:
    """Chunk id -> its last row: a document streamed again after a kill wrote its chunks twice."""
    return {cid: i for i, cid in enumerate(ids)}


def complete_documents(shard_dir: Path) -> pa.Array:
    """The ids of the documents whose every chunk is in the shards, computed in Arrow (no Python object per
    row) from the shards' id columns alone. A document streamed twice (a kill mid-stream) wrote the same
    chunk ids, with the same chunk count, each time."""
    t = _shards(shard_dir, ("id", "doc_id", "doc_chunks"))
    if t is None:
        return pa.array([], pa.string())
    distinct = t.group_by(["id", "doc_id", "doc_chunks"]).aggregate([])
    per_doc = distinct.group_by(["doc_id", "doc_chunks"]).aggregate([("id", "count")])
    return per_doc.filter(pc.equal(per_doc["id_count"], per_doc["doc_chunks"]))["doc_id"].combine_chunks()


def id_keys(ids: Sequence[str]) -> np.ndarray:
    """16-byte keys of document ids (blake2b: a clash is as likely as a 128-bit hash collision), for
    sorted-array membership."""
    return np.array([hashlib.blake2b(i.encode(), digest_size=16).digest() for i in ids], dtype="S16")


def read_shards(shard_dir: Path, docs: list[Document], extract: bool) -> Ingested:
    """The chunks of `docs` in corpus order from the shards (documents cut off by a kill are left out: the
    caller streams them again), with the LLM calls every shard's extraction made."""
    t = _shards(shard_dir)
    if t is None:
        return Ingested([], np.zeros((0, 0), np.float32), [], 0)
    rows = _corpus_order(t, shard_dir, {d.id: i for i, d in enumerate(docs)})
    cols = {k: t.column(k).to_pylist() for k in CHUNK_COLS}
    vecs = _vectors(t, rows)
    chunks = [Chunk(*(cols[k][i] for k in CHUNK_COLS)) for i in rows]
    if not extract:
        return Ingested(chunks, vecs, [], 0)
    return Ingested(chunks, vecs, ShardExtractions(shard_dir, t.column("extraction"), rows),
                    sum(t.column("llm_calls").to_pylist()))


def read_texts(shard_dir: Path, corpus: str, vectors: bool) -> tuple[list[str], list[str], np.ndarray]:
    """The chunks' ids, texts and (with `vectors`, else an empty array) embeddings, in `read_shards`' order,
    reading only those columns of the shards and only the documents' ids from the corpus: what a stage run
    as a Ray task of its own needs (indexing/beside.py), without the corpus or the extractions."""
    cols = ("id", "doc_id", "ordinal", "text", *(("embedding",) if vectors else ()))
    t = _shards(shard_dir, cols)
    if t is None:
        return [], [], np.zeros((0, 0), np.float32)
    rows = _corpus_order(t, shard_dir, {doc_id: i for i, doc_id in enumerate(corpus_ids(corpus))})
    ids, texts = t.column("id").to_pylist(), t.column("text").to_pylist()
    return ([ids[i] for i in rows], [texts[i] for i in rows],
            _vectors(t, rows) if vectors else np.zeros((len(rows), 0), np.float32))


def _corpus_order(t: pa.Table, shard_dir: Path, position: dict[str, int]) -> list[int]:
    """The shard rows of whole documents' chunks, each chunk's last row, in corpus order (document position,
    then ordinal)."""
    whole = set(complete_documents(shard_dir).to_pylist())
    ids, doc_ids, ordinals = (t.column(k).to_pylist() for k in ("id", "doc_id", "ordinal"))
    rows = [i for i in _latest_rows(ids).values() if doc_ids[i] in whole]
    rows.sort(key=lambda i: (position[doc_ids[i]], ordinals[i]))
    return rows


def _vectors(t: pa.Table, rows: list[int]) -> np.ndarray:
    emb = t.column("embedding").combine_chunks()
    return emb.flatten().to_numpy().reshape(len(emb), emb.type.list_size)[rows]


def chunk(cfg: HygraphConfig, docs: Sequence[Document]) -> list[Chunk]:
    """The build's chunks of a batch's new documents (deterministic: a document applied in slices and
    chunked again after a restart yields the same chunks)."""
    return chunk_documents(list(docs), tokenizer(cfg.embedder.model), cfg.chunking.size_tokens,
                           cfg.chunking.overlap_tokens)


def update(chunks: Sequence[Chunk], embedder: "Embedder", llm: "LLM | None") -> Ingested:
    """The build's per-chunk steps for chunks an update applies, in this process (the updater's models)."""
    chunks = list(chunks)
    vectors = embedder.encode([c.text for c in chunks]) if chunks else np.zeros((0, embedder.dim), np.float32)
    extractions = llm.extract(chunks) if chunks and llm is not None else []
    return Ingested(chunks, vectors, extractions)


class _EncoderActor:
    def __init__(self, embedder: dict[str, Any], threads: float) -> None:
        from hygraph.backends.embedder import make_embedder

        # The knowledge texts are question-length (entity names, triplets: 44 characters on average), where
        # `runtime: auto` picks ONNX Runtime in float32: the same CPU per text as torch (0.86-0.99x; the few long
        # summaries 1.04-1.09x), and an actor that imports no torch starts on 1 s of CPU instead of 12. Where
        # `precision: auto` means bfloat16 (native on the processor) torch keeps them: 0.67x of ONNX's CPU.
        self.embedder = make_embedder(EmbedderConfig(**embedder), threads=threads, workload="short")

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.embedder.encode(texts)

    def report(self) -> tuple[int, str]:
        return worker_report()


class EmbedPool:
    """`embedder.pool_size` Ray actors holding the model, started once per build for every stage that embeds
    after ingest (the knowledge texts, the hierarchy's summaries): one model load per actor per build.

    The actors start, and load the model, as soon as the pool is made, while the driver computes the stages
    before the first embedding. `embed` spreads batches over every actor with a bounded number in flight;
    a call (`__call__`, the hierarchy's small sequential ones) splits its texts evenly over the actors.
    The ingest's Ray Data pool must be gone before: Ray 2.60 stalls pools whose CPUs fill a node.
    """

    IN_FLIGHT = 2  # batches queued per actor: the next one is there when a batch finishes

    def __init__(self, cfg: EmbedderConfig) -> None:
        import ray

        self._ray = ray
        remote = ray.remote(num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus)(_EncoderActor)
        self.actors = [remote.remote(cfg.model_dump(), cfg.num_cpus) for _ in range(cfg.pool_size)]

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        parts = np.array_split(np.arange(len(texts)), len(self.actors))
        refs = [a.encode.remote([texts[i] for i in idx]) for a, idx in zip(self.actors, parts) if len(idx)]
        return np.vstack(self._ray.get(refs))

    def embed(self, texts: Sequence[str], stages: Stages, desc: str, batch_size: int) -> np.ndarray:
        """Vectors of `texts` (order preserved) in batches of `batch_size`, each sent to the least loaded actor."""
        return self.embed_parts(texts, [len(texts)], stages, desc, batch_size)[0]

    def embed_parts(self, texts: Sequence[str], sizes: Sequence[int], stages: Stages, desc: str,
                    batch_size: int) -> list[np.ndarray]:
        """`embed`, its rows split into consecutive parts of `sizes` rows, each an array of its own (the knowledge
        texts: entities, relations, hyperedges), batched over all the texts at once as one call would be."""
        if not texts:
            return [np.zeros((0, 0), np.float32) for _ in sizes]
        bounds = np.cumsum([0, *sizes])
        # Length-sorted batches pad less: a batch of short entity names no longer waits on a long fact.
        order = np.argsort([len(t) for t in texts], kind="stable")
        batches = iter([order[i:i + batch_size] for i in range(0, len(texts), batch_size)])
        load = [0] * len(self.actors)
        pending: dict[Any, tuple[int, np.ndarray]] = {}
        # Each batch's vectors go into the parts as they arrive (made once the first tells the width): the
        # batches are never all held beside them.
        out: list[np.ndarray] = []
        with stages.bar(len(texts), desc) as bar:
            while True:
                while min(load) < self.IN_FLIGHT and (idx := next(batches, None)) is not None:
                    a = load.index(min(load))
                    pending[self.actors[a].encode.remote([texts[i] for i in idx])] = (a, idx)
                    load[a] += 1
                if not pending:
                    break
                [ref], _ = self._ray.wait(list(pending), num_returns=1)
                a, idx = pending.pop(ref)
                load[a] -= 1
                vecs = self._ray.get(ref)
                if not out:
                    out = [np.empty((n, vecs.shape[1]), np.float32) for n in sizes]
                part = np.searchsorted(bounds, idx, side="right") - 1
                for p in np.unique(part):
                    mine = part == p
                    out[p][idx[mine] - bounds[p]] = vecs[mine]
                bar.update(len(idx))
        return out

    def report(self, stages: Stages) -> None:
        """Each actor's peak RSS and node (`worker_report`), to the innermost open stage."""
        for rss, node in self._ray.get([a.report.remote() for a in self.actors]):
            stages.worker(rss, {node})

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
