"""The query engine: the version a reader serves (store/reading.py) + embedder + LLM, no Ray.

The CLI and the evaluator use it directly; the Serve Retriever wraps the same object, so
every mode behaves the same from the command line and over HTTP.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from hygraph.backends.embedder import Embedder, make_embedder
from hygraph.backends.llm import make_llm
from hygraph.backends.llm.base import LLM
from hygraph.config import HygraphConfig
from hygraph.core.hyperbolic import from_storage
from hygraph.core.prompt import assemble_prompt
from hygraph.core.retrieval.context import Context, ContextItem, Search
from hygraph.core.retrieval.filtered import run_filtered
from hygraph.core.retrieval.modes import ModeUnavailable, Request, retrieve
from hygraph.core.retrieval.view import IndexView, Points
from hygraph.errors import InputError
from hygraph.model import Chunk
from hygraph.store.catalog import Catalog
from hygraph.store.index import Index
from hygraph.store.points import PointMoves
from hygraph.store.reading import Loaded, VersionReader, VersionSearch

log = logging.getLogger(__name__)

# Threads for the searches requests make side by side: four per request (hybrid) for a few requests.
SEARCH_THREADS = 8


class QueryEngine:
    def __init__(self, cfg: HygraphConfig, index_dir: str | Path, embedder: Embedder | None = None,
                 llm: LLM | None = None) -> None:
        self.cfg = cfg
        self.index = Index.open(cfg, index_dir)
        # The independent searches of one request (Search.many, Search.start) run side by side here.
        self.search_pool = ThreadPoolExecutor(max_workers=SEARCH_THREADS, thread_name_prefix="hygraph-search")
        try:
            self.reader = VersionReader(self.index)
        except BaseException:
            self.search_pool.shutdown(wait=False)
            self.index.close()
            raise
        self.embedder = embedder or make_embedder(cfg.embedder, workload="questions")
        self.llm = llm or make_llm(cfg.llm, cache_dir=str(self.index.local_dir / "llm_cache"))
        self._settings = cfg.retrieval.model_dump()  # what the modes read of the config, by name

    @property
    def loaded(self) -> Loaded:
        """The version requests are answered from; each request reads it once (VersionReader)."""
        return self.reader.loaded

    @property
    def version(self) -> int:
        return self.reader.version

    def refresh(self) -> bool:
        """Swap to a newer published version (VersionReader.refresh)."""
        return self.reader.refresh()

    def points_position(self) -> tuple[str, str | None, int] | None:
        """Where the hyperbolic points this process holds stand in the online learner's feed (VersionReader)."""
        return self.reader.points_position()

    def follow_moves(self, moves: PointMoves) -> int:
        """Apply the online learner's moves to the hyperbolic points this process holds (VersionReader)."""
        return self.reader.follow_moves(moves)

    def at_least(self, version: int) -> Loaded:
        return self.reader.at_least(version)

    def close(self) -> None:
        self.search_pool.shutdown(wait=False, cancel_futures=True)
        self.reader.close()
        self.index.close()

    def catalog(self, min_version: int = 0) -> Catalog:
        """The documents and counts of the version a query would be answered from."""
        return self.at_least(min_version).catalog

    def _searcher(self, loaded: Loaded) -> Search:
        return VersionSearch(self.index.vectors, loaded, self.search_pool)

    def _points(self, loaded: Loaded) -> Points:
        """Poincaré points: those this process holds (store/points.py), else read from the hyperbolic collection,
        which the online learner updates in place."""
        if loaded.points is not None:
            return loaded.points.points

        def points(chunk_ids: Sequence[str]) -> np.ndarray:
            return from_storage(self.index.vectors.fetch(loaded.collections["hyperbolic"], chunk_ids))

        return points

    def _question_entities(self, question: str) -> list[str]:
        """The `extract` role on the question: its entity surface forms."""
        [ex] = self.llm.extract([Chunk(id="query", doc_id="query", ordinal=0, text=question, n_tokens=0)])
        return [e.name for e in ex.entities]

    def retrieve(self, question: str, query_vec: np.ndarray | None, mode: str, k: int, loaded: Loaded | None = None,
                 flt: Mapping[str, Any] | None = None) -> Context:
        """The mode's context and passages, each passage with its document's metadata. With a non-empty
        metadata filter (`flt`, checked by input_rules.check_filter), only the passages of the documents it
        allows, and the context derived from them (core/retrieval/filtered.py)."""
        loaded = loaded or self.loaded
        if not flt:
            ctx = self._retrieve(question, query_vec, mode, k, loaded, loaded.view, self._searcher(loaded))
        else:
            allowed = loaded.passage_filter(flt)
            if not allowed.docs:
                return Context(notes={"filter": {"documents": 0, "filled": 0}})
            ctx = run_filtered(lambda view, search: self._retrieve(question, query_vec, mode, k, loaded, view, search),
                               loaded.view, self._searcher(loaded), allowed, query_vec, k)
        metadata = loaded.view.doc_metadata
        for p in ctx.passages:
            p.metadata = json.loads(metadata.get(p.id) or "{}")
        return ctx

    def _retrieve(self, question: str, query_vec: np.ndarray, mode: str, k: int, loaded: Loaded, v: IndexView,
                  search: Search) -> Context:
        request = Request(question, query_vec, k, v, search, self.embedder.encode, self._question_entities,
                          self.llm.decompose, self.llm.route, self._points(loaded), self._settings)
        try:
            return retrieve(mode, request, loaded.collections)
        except ModeUnavailable as exc:
            raise InputError(f"mode: {exc}") from None

    def prompt_items(self, question: str, ctx: Context) -> list[ContextItem]:
        """HyGRAG eq. 23: the numbered context, lowest-scored items trimmed to the token budget."""
        return list(assemble_prompt(question, ctx.items(), max_tokens=self.cfg.retrieval.max_context_tokens).items)
