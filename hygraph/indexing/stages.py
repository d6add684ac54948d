"""Ray Data stage functions and actors: chunk (tasks), embed and extract (actor pools)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from hygraph.config import EmbedderConfig, LLMConfig
from hygraph.model import Chunk, Document

if TYPE_CHECKING:
    from hygraph.backends.embedder import Tokenizer


@lru_cache(maxsize=4)
def _tokenizer(model: str) -> "Tokenizer":
    from hygraph.backends.embedder import Tokenizer

    return Tokenizer(EmbedderConfig(model=model))


def chunk_batch(batch: dict[str, np.ndarray], model: str, size: int, overlap: int) -> dict[str, list[Any]]:
    """Documents -> chunk rows (Ray Data tasks; the tokenizer is cached per worker process)."""
    from hygraph.indexing.chunker import chunk_documents

    docs = [Document(id=str(i), title=str(t), text=str(x))
            for i, t, x in zip(batch["id"], batch["title"], batch["text"])]
    chunks = chunk_documents(docs, _tokenizer(model), size, overlap)
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
