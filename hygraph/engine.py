"""The query engine: one loaded index version + vector store + embedder + LLM, no Ray.

The CLI and the evaluator use it directly; the Serve Retriever wraps the same object, so
every mode behaves the same from the command line and over HTTP.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from hygraph.backends import vectorstore
from hygraph.backends.embedder import Embedder, make_embedder
from hygraph.backends.llm import make_llm
from hygraph.backends.llm.base import LLM
from hygraph.config import HygraphConfig
from hygraph.core.prompt import PromptItem, assemble_prompt
from hygraph.core.retrieval.collapsed import collapsed
from hygraph.core.retrieval.context import Context
from hygraph.core.retrieval.dense import dense
from hygraph.core.retrieval.hybrid import hybrid
from hygraph.core.retrieval.hyperbolic import hyperbolic
from hygraph.core.retrieval.hypergraph import hypergraph
from hygraph.core.retrieval.local_global import auto, global_, local
from hygraph.errors import InputError
from hygraph.model import Chunk
from hygraph.store.snapshot import SnapshotStore
from hygraph.store.view_loader import load_view

MODES = ("dense", "hybrid", "collapsed", "hypergraph", "hyperbolic", "local", "global", "auto")


class QueryEngine:
    def __init__(self, cfg: HygraphConfig, index_dir: str | Path, embedder: Embedder | None = None,
                 llm: LLM | None = None) -> None:
        self.cfg = cfg
        self.store = SnapshotStore(index_dir)
        snap = self.store.open()
        self.view = load_view(snap)
        self.collections: dict[str, str] = snap.manifest["collections"]
        self.vectors = vectorstore.connect(cfg.vector_store, index_dir)
        for name in self.collections.values():
            self.vectors.open(name)
        self.embedder = embedder or make_embedder(cfg.embedder)
        self.llm = llm or make_llm(cfg.llm, cache_dir=str(Path(index_dir) / "llm_cache"))

    def close(self) -> None:
        self.vectors.close()

    @property
    def version(self) -> int:
        return self.view.version

    def _search(self, kind: str, queries: np.ndarray, k: int, layer: int | None) -> list[list[tuple[str, float]]]:
        name = self.collections[kind]
        return [[(h.id, h.score) for h in row] for row in self.vectors.search(name, queries, k, layer)]

    def _question_entities(self, question: str) -> list[str]:
        """The `extract` role on the question: its entity surface forms."""
        [ex] = self.llm.extract([Chunk(id="query", doc_id="query", ordinal=0, text=question, n_tokens=0)])
        return [e.name for e in ex.entities]

    def retrieve(self, question: str, query_vec: np.ndarray, mode: str, k: int) -> Context:
        v, search = self.view, self._search
        if mode == "dense":
            return dense(query_vec, k, search, v.chunk_text, v.chunk_doc, v.titles)
        needs = {"hyperbolic": "hyperbolic", "collapsed": "summaries", "global": "summaries",
                 "auto": "summaries", "hybrid": "entities", "hypergraph": "hyperedges", "local": "entities"}
        if needs[mode] not in self.collections:
            raise InputError(f"mode: '{mode}' needs the {needs[mode]} of a graph index; index version "
                             f"{v.version} was built without them (rebuild without --dense-only)")
        r = self.cfg.retrieval
        if mode == "hybrid":
            return hybrid(query_vec, k, v, search)
        if mode == "collapsed":
            return collapsed(query_vec, k, v, search, bias=r.collapsed_bias, p=r.collapsed_p,
                             max_tokens=r.max_context_tokens)
        if mode == "hypergraph":
            return hypergraph(question, query_vec, k, v, search, self.embedder.encode, self._question_entities,
                              k_v=r.k_v, tau_v=r.tau_v, k_h=r.k_h, tau_h=r.tau_h)
        if mode == "hyperbolic":
            return hyperbolic(question, query_vec, k, v, search, self.embedder.encode, self.llm.decompose)
        if mode == "local":
            return local(question, query_vec, k, v, search, self._question_entities)
        if mode == "global":
            return global_(query_vec, k, v, search)
        return auto(question, query_vec, k, v, search, self._question_entities, self.llm.route)

    def generate(self, question: str, ctx: Context) -> dict[str, Any]:
        """Numbered, budgeted context (HyGRAG eq. 23) -> the `answer` role, which cites item numbers."""
        prompt = assemble_prompt(
            question, [PromptItem(it.kind, it.text, it.score, it.sources[0] if it.sources else it.id)
                       for it in ctx.items()], max_tokens=self.cfg.retrieval.max_context_tokens)
        ans = self.llm.answer(question, prompt.items)
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
            "index_version": self.view.version,
            "timings_ms": {"embed": round((t1 - t0) * 1e3, 2), "retrieve": round((t2 - t1) * 1e3, 2),
                           "generate": round((t3 - t2) * 1e3, 2), "total": round((t3 - t0) * 1e3, 2)},
        }
