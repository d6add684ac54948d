"""The query engine: one loaded index version + vector store + embedder + LLM, no Ray.

The CLI and the evaluator use it directly; the Serve Retriever wraps the same object, so
every mode behaves the same from the command line and over HTTP.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hygraph.backends import vectorstore
from hygraph.backends.embedder import Embedder, make_embedder
from hygraph.backends.llm import make_llm
from hygraph.backends.llm.base import LLM
from hygraph.backends.vectorstore import VectorStore
from hygraph.config import HygraphConfig
from hygraph.core.hyperbolic import from_storage
from hygraph.core.prompt import assemble_prompt
from hygraph.core.retrieval.context import Context, ContextItem, Hits, Search, SearchRequest
from hygraph.core.retrieval.filter import MetadataIndex, PassageFilter
from hygraph.core.retrieval.filtered import run_filtered
from hygraph.core.retrieval.modes import ModeUnavailable, Request, retrieve
from hygraph.core.retrieval.view import IndexView, Points
from hygraph.errors import InputError, StoreError, VersionNotReady
from hygraph.model import Chunk
from hygraph.store.artifacts import DOCUMENTS
from hygraph.store.catalog import Catalog
from hygraph.store.exact import ExactVectors, exact_searches, store_held
from hygraph.store.versions import IndexStore, Version
from hygraph.store.view_loader import load_view, release_freed_memory

log = logging.getLogger(__name__)

# Threads for the searches requests make side by side: four per request (hybrid) for a few requests.
SEARCH_THREADS = 8


@dataclass(frozen=True)
class Loaded:
    """One index version as a request sees it: the graph view (over the version's mapped segments,
    which it keeps open) and its vector collections."""

    view: IndexView
    collections: dict[str, str]
    version: Version
    catalog: Catalog  # its documents and counts, read back (GET /v1/documents, /v1/stats)
    # The collections searched in this process, over the version's mapped vectors (vector_store.exact_max_rows).
    exact: Mapping[str, ExactVectors] = field(default_factory=dict)

    @cached_property
    def metadata_index(self) -> MetadataIndex:
        """Its documents' metadata postings, made by the first filtered query (one pass over the column)."""
        return MetadataIndex.build((doc_id, text) for batch in self.version.table(DOCUMENTS).batches(["id", "metadata"])
                                   for doc_id, text in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()))

    def passage_filter(self, flt: Mapping[str, Any]) -> PassageFilter:
        v = self.view
        return PassageFilter.of(self.metadata_index.documents(flt), v.chunk_doc, v.doc_chunks)


class VersionSearch:
    """`Search` over one loaded version's collections: the small ones exactly in this process (`Loaded.exact`),
    the others by the vector store, whose hits the version does not know (rows a newer or an older version
    wrote) are dropped."""

    def __init__(self, vectors: VectorStore, loaded: Loaded, pool: ThreadPoolExecutor) -> None:
        self.vectors, self.loaded, self.pool = vectors, loaded, pool

    def __call__(self, kind: str, queries: np.ndarray, k: int, layer: int | None) -> Hits:
        exact = self.loaded.exact.get(kind)
        if exact is not None:
            return exact.search(queries, k, layer)
        rows = self.vectors.search(self.loaded.collections[kind], queries, k, layer)
        known = self.loaded.view.known(kind)
        return [[(h.id, h.score) for h in row if h.id in known] for row in rows]

    def many(self, requests: Sequence[SearchRequest]) -> list[Hits]:
        if len(requests) < 2:
            return [self(*r) for r in requests]
        return self.start(requests)()

    def start(self, requests: Sequence[SearchRequest]) -> Callable[[], list[Hits]]:
        # Only the store's searches go to the pool: an exact one costs less than the hand-over, and runs
        # when the hits are collected.
        running = [None if r[0] in self.loaded.exact else self.pool.submit(self, *r) for r in requests]
        return lambda: [self(*r) if done is None else done.result() for r, done in zip(requests, running)]


class QueryEngine:
    def __init__(self, cfg: HygraphConfig, index_dir: str | Path, embedder: Embedder | None = None,
                 llm: LLM | None = None) -> None:
        self.cfg = cfg
        self.store = IndexStore(index_dir, **cfg.store.model_dump())
        self.vectors = vectorstore.connect(cfg.vector_store, self.store.local_dir)
        self._swap = threading.Lock()
        # The independent searches of one request (Search.many, Search.start) run side by side here.
        self.search_pool = ThreadPoolExecutor(max_workers=SEARCH_THREADS, thread_name_prefix="hygraph-search")
        # Names the version served, so that garbage collection on any node spares it (store/lease.py).
        self.reader = self.store.reader_lease()
        self.loaded = self._load(self.store.current_version())
        self.embedder = embedder or make_embedder(cfg.embedder, workload="questions")
        self.llm = llm or make_llm(cfg.llm, cache_dir=str(self.store.local_dir / "llm_cache"))
        self._settings = cfg.retrieval.model_dump()  # what the modes read of the config, by name

    def _load(self, number: int | None) -> Loaded:
        """Version `number` (None: the index has none yet, an InputError saying so), held by this reader's
        lease before anything of it is read."""
        if number is not None:
            self.reader.hold(number)
        version = self.store.open(number)
        collections = version.manifest.collections
        for name in collections.values():
            self.vectors.open(name)
        return Loaded(load_view(version), collections, version, Catalog(version), self._exact(version, collections))

    def _exact(self, version: Version, collections: Mapping[str, str]) -> dict[str, ExactVectors]:
        """The collections of `version` to search in this process (vector_store.exact_max_rows): those its
        segments hold the vectors of, and those whose vectors are read from the store here, once."""
        max_rows = self.cfg.vector_store.exact_max_rows
        exact = exact_searches(version, collections, max_rows)
        for kind, ids in store_held(version, collections, max_rows).items():
            try:
                exact[kind] = ExactVectors.of(ids, self.vectors.fetch(collections[kind], ids))
            except StoreError as exc:  # the store searches it then, as it does a larger collection
                log.warning("version %d: the %s vectors could not be read from the vector store (%s); it "
                            "searches them", version.version, kind, exc)
        return exact

    def refresh(self) -> bool:
        """Swap to the version `CURRENT` names when it is newer, or when this reader's lease lapsed (it stalled:
        its version may be gone); requests already running keep theirs.

        Each request reads `self.loaded` once, so a swap between two of its searches cannot
        mix versions.
        """
        with self._swap:
            current = self.store.current_version()
            lapsed = self.reader.lapsed
            if current is None or (current <= self.loaded.view.version and not lapsed):
                return False
            if lapsed:
                log.warning("%s: this reader's lease on version %d lapsed (it stalled past store.lease_s, so garbage "
                            "collection may have removed that version): loading version %d", self.store.uri,
                            self.loaded.view.version, current)
            self.loaded = self._load(current)
        # The old version's structures go when the last request holding them ends; what is freed by now goes back.
        release_freed_memory()
        return True

    def at_least(self, version: int) -> Loaded:
        """The loaded version, moved forward first when a request needs a newer one (read-your-writes:
        a client that saw a job `done` at version V asks for V)."""
        loaded = self.loaded
        if loaded.view.version >= version:
            return loaded
        self.refresh()
        loaded = self.loaded
        if loaded.view.version < version:
            raise VersionNotReady(f"min_index_version: index version {version} is not published yet "
                                  f"(the newest is {loaded.view.version})")
        return loaded

    def close(self) -> None:
        self.search_pool.shutdown(wait=False, cancel_futures=True)
        self.reader.release()
        self.vectors.close()

    @property
    def version(self) -> int:
        return self.loaded.view.version

    def catalog(self, min_version: int = 0) -> Catalog:
        """The documents and counts of the version a query would be answered from."""
        return self.at_least(min_version).catalog

    def _searcher(self, loaded: Loaded) -> Search:
        return VersionSearch(self.vectors, loaded, self.search_pool)

    def _points(self, loaded: Loaded) -> Points:
        """Poincaré points from the hyperbolic collection, which the online learner updates in place."""
        def points(chunk_ids: Sequence[str]) -> np.ndarray:
            return from_storage(self.vectors.fetch(loaded.collections["hyperbolic"], chunk_ids))

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
