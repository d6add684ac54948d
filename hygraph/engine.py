"""The query engine: one loaded index version + vector store + embedder + LLM, no Ray.

The CLI and the evaluator use it directly; the Serve Retriever wraps the same object, so
every mode behaves the same from the command line and over HTTP.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from hygraph.backends import vectorstore
from hygraph.backends.embedder import Embedder, make_embedder
from hygraph.backends.llm import make_llm
from hygraph.backends.llm.base import LLM, ContextItem
from hygraph.config import HygraphConfig
from hygraph.core.prompt import PromptItem, assemble_prompt
from hygraph.core.retrieval.context import Context
from hygraph.core.retrieval.dense import dense
from hygraph.errors import InputError
from hygraph.store.snapshot import Snapshot, SnapshotStore

MODES = ("dense", "hybrid", "collapsed", "hypergraph", "hyperbolic", "local", "global", "auto")


class LoadedIndex:
    """The in-memory view of one snapshot version that strategies read."""

    def __init__(self, snap: Snapshot) -> None:
        self.snapshot = snap
        self.version = snap.version
        chunks = snap.table("chunks").to_pydict()
        self.chunk_text = dict(zip(chunks["id"], chunks["text"]))
        self.chunk_doc = dict(zip(chunks["id"], chunks["doc_id"]))
        docs = snap.table("documents").select(["id", "title"]).to_pydict()
        self.titles = dict(zip(docs["id"], docs["title"]))
        self.collections: dict[str, str] = snap.manifest["collections"]


class QueryEngine:
    def __init__(self, cfg: HygraphConfig, index_dir: str | Path, embedder: Embedder | None = None,
                 llm: LLM | None = None) -> None:
        self.cfg = cfg
        self.store = SnapshotStore(index_dir)
        self.index = LoadedIndex(self.store.open())
        self.vectors = vectorstore.connect(cfg.vector_store, index_dir)
        for name in self.index.collections.values():
            self.vectors.open(name)
        self.embedder = embedder or make_embedder(cfg.embedder)
        self.llm = llm or make_llm(cfg.llm, cache_dir=str(Path(index_dir) / "llm_cache"))

    def close(self) -> None:
        self.vectors.close()

    def _search(self, kind: str, queries: np.ndarray, k: int, layer: int | None) -> list[list[tuple[str, float]]]:
        name = self.index.collections[kind]
        return [[(h.id, h.score) for h in row] for row in self.vectors.search(name, queries, k, layer)]

    def retrieve(self, question: str, query_vec: np.ndarray, mode: str, k: int) -> Context:
        idx = self.index
        if mode == "dense":
            return dense(query_vec, k, self._search, idx.chunk_text, idx.chunk_doc, idx.titles)
        if mode not in MODES:
            raise InputError(f"mode: unknown mode '{mode}' (one of {', '.join(MODES)})")
        raise InputError(f"mode: '{mode}' needs the graph index, which this version does not have")

    def generate(self, question: str, ctx: Context) -> dict[str, Any]:
        """Numbered, budgeted context (HyGRAG eq. 23) -> the `answer` role, which cites item numbers."""
        prompt = assemble_prompt(
            question, [PromptItem(it.kind, it.text, it.score, it.sources[0] if it.sources else it.id)
                       for it in ctx.items()], max_tokens=self.cfg.retrieval.max_context_tokens)
        ans = self.llm.answer(question, [ContextItem(**asdict(n)) for n in prompt.items])
        return {"answer": ans.text, "citations": list(ans.citations)}

    def query(self, question: str, mode: str | None = None, k: int | None = None) -> dict[str, Any]:
        if not question or not question.strip():
            raise InputError("question: must not be empty")
        mode = mode or self.cfg.retrieval.mode
        k = k or self.cfg.retrieval.top_k
        if mode not in MODES:
            raise InputError(f"mode: unknown mode '{mode}' (one of {', '.join(MODES)})")
        t0 = time.perf_counter()
        qv = self.embedder.encode([question])[0]
        t1 = time.perf_counter()
        ctx = self.retrieve(question, qv, mode, k)
        t2 = time.perf_counter()
        gen = self.generate(question, ctx)
        t3 = time.perf_counter()
        return {
            "answer": gen["answer"], "mode": mode,
            "passages": [{"id": p.id, "title": p.title, "score": round(p.score, 6)} for p in ctx.passages],
            "context": {**ctx.to_dict(), "citations": gen["citations"]},
            "index_version": self.index.version,
            "timings_ms": {"embed": round((t1 - t0) * 1e3, 2), "retrieve": round((t2 - t1) * 1e3, 2),
                           "generate": round((t3 - t2) * 1e3, 2), "total": round((t3 - t0) * 1e3, 2)},
        }
