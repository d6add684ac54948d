"""The Serve deployments behind the ingress. Each runs part of the one query pipeline (`pipeline.py`).

- `Retriever` holds the loaded index version (it follows `CURRENT`, so a new version is
  picked up without a restart and without failing requests in flight) and runs a request's
  steps: the question is embedded here (`serve.embedding: retriever`, concurrent questions
  batched into one model call) unless an `Embedder` deployment does it; retrieval; and an extractive
  answer (`serve.answer: retriever`), so a query costs the ingress one handle call.
- `Embedder` embeds questions for Retrievers that do not (`serve.embedding: deployment`, e.g.
  on GPU replicas that scale apart from the CPU-bound Retrievers).
- `Generator` runs the `answer` role when it is a model behind a network call (`serve.answer:
  deployment`), streaming its tokens, so LLM waits never hold a Retriever.

Each takes the config as a plain dict (what a Serve config YAML can carry) and the index directory.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import replace
from typing import Any, Iterator

import numpy as np
from ray import serve

from hygraph.backends.llm import make_llm
from hygraph.updater.names import updater_name
from hygraph.config import HygraphConfig
from hygraph.engine import QueryEngine
from hygraph.errors import IndexNotReady, InputError
from hygraph.pipeline import (QueryPipeline, QueryRequest, QueryResult, Rendered, Retrieval, answer,
                              answer_stream, needs_question_vector)
from hygraph.serve.answer_cache import AnswerCache, CacheKey
from hygraph.serve.metrics import AnswerCacheMetrics, IndexMetrics, LLMMetrics
from hygraph.serve.question_encoder import QuestionEncoder
from hygraph.serve.replica_log import log_to_replica_file
from hygraph.store.objects import is_remote, local_dir_of
from hygraph.store.registry import DEFAULT_INDEX, IndexRegistry, NoSuchIndex
from hygraph.store.versions import IndexStore

log = logging.getLogger("hygraph.serve")
UPDATER_LOOKUP_S = 30.0  # how often a Retriever looks again for an updater that was not running
MOVES_TIMEOUT_S = 10.0  # the longest a version poll waits for the learner's moves (the next poll asks again)


def answers_here(cfg: HygraphConfig) -> bool:
    """Whether the Retriever runs the `answer` role itself: always for the extractive backend (in-process
    and cheap) unless `serve.answer` says otherwise; a model behind the network goes to the Generator."""
    if cfg.serve.answer == "auto":
        return cfg.llm.backend == "extractive"
    return cfg.serve.answer == "retriever"


@serve.deployment
class Embedder:
    """Questions to vectors for Retrievers that do not embed (`serve.embedding: deployment`)."""

    def __init__(self, config: dict[str, Any]) -> None:
        log_to_replica_file()
        cfg = HygraphConfig.model_validate(config)
        self.encoder = QuestionEncoder(cfg, cfg.serve.embedder.num_cpus)

    async def embed(self, question: str) -> np.ndarray:
        return await self.encoder.encode(question)


@serve.deployment
class Retriever:
    """Loaded index versions (each swapped when its `CURRENT` moves) and the pipeline's steps for a request.

    The default index is always loaded; named indexes are loaded when first asked and kept up to
    `serve.max_loaded_indexes`, the least recently asked unloaded first. A replica started before the
    default index's first build has landed (a fresh Kubernetes deploy) is healthy but not ready: it
    answers 503 index_not_ready and loads the first version that appears.
    """

    def __init__(self, config: dict[str, Any], index_dir: str) -> None:
        log_to_replica_file()
        self.cfg = cfg = HygraphConfig.model_validate(config)
        self.index_dir = index_dir
        self.registry = IndexRegistry(index_dir, cfg.store.cache_dir)
        self._named_cfg = cfg.for_named_index(self.registry.root)
        self._pipeline: QueryPipeline | None = None
        self._named: OrderedDict[str, QueryPipeline] = OrderedDict()
        self._named_lock = threading.Lock()
        self.llm_metrics = LLMMetrics()
        self.index_metrics = IndexMetrics()
        self.answers = AnswerCache(cfg.serve.answer_cache_entries)
        self.cache_metrics = AnswerCacheMetrics()
        self.encoder = (QuestionEncoder(cfg, cfg.serve.retriever.num_cpus) if cfg.serve.embedding == "retriever"
                        else None)
        self._open_when_built()
        self._poll_s = cfg.serve.version_poll_s
        self._learn = cfg.updates.online_learning and cfg.hyperbolic.enabled
        self._updater: dict[str, Any] = {}
        self._updater_looked_up: dict[str, float] = {}
        self._updater_missing: set[str] = set()
        # A daemon thread: it ends with the replica's process, whose exit also releases the
        # process's lease on the managed vector store.
        threading.Thread(target=self._follow_current, name="hygraph-version-poll", daemon=True).start()

    def _open_when_built(self) -> None:
        if self._pipeline is None and IndexStore(self.index_dir,
                                                 **self.cfg.store.model_dump()).current_version() is not None:
            engine = QueryEngine(self.cfg, self.index_dir, embedder=self.encoder.shared if self.encoder else None)
            self._pipeline = QueryPipeline(engine)
            log.info("serving index version %d", engine.version)
            self.index_metrics.version.set(engine.version)

    @property
    def pipeline(self) -> QueryPipeline:
        if self._pipeline is None:
            raise IndexNotReady(f"index directory {self.index_dir} holds no index version yet "
                                "(run `hygraph index`; this replica loads it as soon as it lands)")
        return self._pipeline

    def pipeline_of(self, index: str) -> QueryPipeline:
        """The loaded pipeline of `index` (the ingress has checked that it exists and may be read)."""
        if index == DEFAULT_INDEX:
            return self.pipeline
        with self._named_lock:
            found = self._named.get(index)
            if found is not None:
                self._named.move_to_end(index)
                return found
        path = self.registry.location(index)
        if IndexStore(path, cache_dir=self.cfg.store.cache_dir).current_version() is None:
            raise IndexNotReady(f"index '{index}' is being created; retry shortly")
        # Loaded outside the lock: a cold index does not hold up queries to the others.
        engine = QueryEngine(self._named_cfg, path, embedder=self.encoder.shared if self.encoder else None)
        with self._named_lock:
            found = self._named.setdefault(index, QueryPipeline(engine))
            self._named.move_to_end(index)
            evicted = []
            while len(self._named) > self.cfg.serve.max_loaded_indexes:
                evicted.append(self._named.popitem(last=False))
            self.index_metrics.loaded.set(len(self._named))
        if evicted:
            self.index_metrics.unloads.inc(len(evicted))
        if found.engine is not engine:
            engine.close()
        for name, pipeline in evicted:
            log.info("index '%s' unloaded (serve.max_loaded_indexes=%d)", name, self.cfg.serve.max_loaded_indexes)
            pipeline.engine.close()
        return found

    def _follow_current(self) -> None:
        while True:
            time.sleep(self._poll_s)
            try:
                if self._pipeline is None:
                    self._open_when_built()
                elif self.pipeline.engine.refresh():
                    log.info("now serving index version %d", self.pipeline.engine.version)
                if self._pipeline is not None:
                    # Recorded at every poll, not only on a change: a gauge recorded once at load was gone
                    # from Ray's /metrics export minutes later (test_serve_http's metrics test).
                    self.index_metrics.version.set(self._pipeline.engine.version)
                    self._follow_moves(DEFAULT_INDEX, self._pipeline.engine)
            except Exception:  # noqa: BLE001 - a half-visible version, or the store out of reach: the next poll retries
                # Nothing here touches the store: while it is out of reach this loop must live on.
                log.warning("could not load the index's newest version; still serving %s",
                            self._pipeline.engine.version if self._pipeline else "none", exc_info=True)
            self._follow_named()

    def _still(self, name: str, loaded: IndexStore) -> bool:
        """Whether `loaded` is still index `name` (not deleted, nor deleted and made again)."""
        try:
            location = self.registry.location(name)
        except NoSuchIndex:
            return False  # a store out of reach raises instead: the loaded version keeps serving
        if is_remote(location):  # a new index on object storage has a prefix of its own
            return local_dir_of(location, self.cfg.store.cache_dir) == loaded.local_dir
        return _uid(location) == loaded.uid

    def _follow_named(self) -> None:
        with self._named_lock:
            loaded = list(self._named.items())
        for name, pipeline in loaded:
            try:
                # Deleted, or deleted and made again under its name (a new uid): this one is gone.
                if not self._still(name, pipeline.engine.index.files):
                    with self._named_lock:
                        if self._named.get(name) is pipeline:
                            del self._named[name]
                    pipeline.engine.close()
                    log.info("index '%s' was deleted: unloaded", name)
                else:
                    if pipeline.engine.refresh():
                        log.info("index '%s': now serving version %d", name, pipeline.engine.version)
                    self._follow_moves(name, pipeline.engine)
            except Exception:  # noqa: BLE001 - retried on the next poll; the loaded version keeps serving
                log.warning("index '%s': could not load its new version", name, exc_info=True)

    async def query(self, req: QueryRequest, query_vec: np.ndarray | None = None) -> Rendered | Retrieval:
        """Embed (unless `query_vec` came with the request), retrieve, and answer here when the answer
        role runs in process, rendered (pipeline.Rendered); otherwise the Retrieval, for the Generator."""
        pipeline = await self._pipeline_async(req.index)
        t0 = time.perf_counter()
        key = self._cache_key(pipeline, req)
        if key is not None and req.cache == "use":
            cached = self.answers.get(key)
            self.cache_metrics.record(cached is not None)
            if cached is not None:
                return replace(cached, seconds={"cache": time.perf_counter() - t0})
        if query_vec is None and needs_question_vector(req):
            if self.encoder is None:
                raise IndexNotReady("this Retriever does not embed questions (serve.embedding: deployment)")
            query_vec = await self.encoder.encode(req.question)
        embed_s = time.perf_counter() - t0
        # Retrieval and an in-process answer are CPU work: one worker thread, off the event loop that
        # batches questions.
        got = await asyncio.to_thread(self._steps, pipeline, req, query_vec)
        got.seconds["embed"] = embed_s
        self.llm_metrics.record(pipeline.engine.llm.usage)
        if key is not None and req.cache != "off" and got.version == key.version:
            self.answers.put(key, got)
        return got

    def _cache_key(self, pipeline: QueryPipeline, req: QueryRequest) -> CacheKey | None:
        """The request's cache key at the version now loaded; None when the cache is off or the request
        asks for a newer version than this replica holds (read-your-writes: it must wait for that one)."""
        engine = pipeline.engine
        if self.answers.entries == 0 or req.min_version > engine.version:
            return None
        return CacheKey.of(req.index, engine.index.files.uid, engine.version, req.mode, req.k, req.filter,
                           req.question)

    async def _pipeline_async(self, index: str) -> QueryPipeline:
        if index == DEFAULT_INDEX:
            return self.pipeline
        with self._named_lock:
            found = self._named.get(index)
        return found if found is not None else await asyncio.to_thread(self.pipeline_of, index)

    def _steps(self, pipeline: QueryPipeline, req: QueryRequest,
               query_vec: np.ndarray | None) -> Rendered | Retrieval:
        retrieval = pipeline.retrieve(req, query_vec)
        if req.mode == "hyperbolic" and self._learn:
            self._send_to_learner(req.index, retrieval.context.notes["implicit_subgraph"], query_vec)
        return answer(pipeline.engine.llm, retrieval).render() if answers_here(self.cfg) else retrieval

    def _send_to_learner(self, index: str, subgraph: dict[str, Any], query_vec: np.ndarray) -> None:
        """Fire and forget to the index's OnlineUpdater (HyperRAG §3.3): the query never waits on learning."""
        updater = self._updater_of(index)
        if updater is not None:
            updater.observe.remote(subgraph, query_vec)

    def _updater_of(self, index: str) -> Any:
        """The index's OnlineUpdater actor; None when it is not running (looked for again after a while)."""
        import ray

        updater = self._updater.get(index)
        if updater is None:
            if time.monotonic() - self._updater_looked_up.get(index, -float("inf")) < UPDATER_LOOKUP_S:
                return None
            self._updater_looked_up[index] = time.monotonic()
            try:
                updater = self._updater[index] = ray.get_actor(updater_name(self.registry.location(index)),
                                                               namespace="hygraph")
            except ValueError:
                if index not in self._updater_missing:  # once while it is missing, not at every look
                    self._updater_missing.add(index)
                    log.info("no OnlineUpdater for index '%s': hyperbolic queries are not learned from", index)
                return None
            self._updater_missing.discard(index)
        return updater

    def _follow_moves(self, index: str, engine: QueryEngine) -> None:
        """Bring the hyperbolic points this replica holds up to the learner's moves (store/points.py)."""
        position = engine.points_position() if self._learn else None
        updater = self._updater_of(index) if position is not None else None
        if updater is None:
            return
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            moves = ray.get(updater.moves_since.remote(*position), timeout=MOVES_TIMEOUT_S)
        except RayActorError:
            self._updater.pop(index, None)  # gone (a named index's idle updater ends itself): looked up again
            return
        except GetTimeoutError:
            log.warning("index '%s': the online learner's moves did not come within %.0f s; asked again at the "
                        "next poll", index, MOVES_TIMEOUT_S)
            return
        except Exception:  # noqa: BLE001 - the learner failed to answer: the held points stay, asked again
            log.warning("index '%s': could not get the online learner's moves; asked again at the next poll", index,
                        exc_info=True)
            return
        if moves is None:
            return  # the updater is still loading the index
        try:
            moved = engine.follow_moves(moves)
        except Exception:  # noqa: BLE001 - a reset's read of the store failed: the held points stay, asked again
            log.warning("index '%s': could not apply the online learner's moves; the hyperbolic points held stay as "
                        "they were until the next poll", index, exc_info=True)
            return
        if moves.reset:
            log.info("index '%s': %d hyperbolic points read from the store (the online learner's feed is at %d)",
                     index, moved, moves.seq)
        elif moved:
            self.index_metrics.points_moved.inc(moved)

    def version(self, index: str = DEFAULT_INDEX) -> int:
        return self.pipeline_of(index).engine.version

    # -- the loaded version's contents, read back (store/catalog.py) ---------------------------

    def documents(self, index: str, limit: int, after: str | None, offset: int, min_version: int) -> dict[str, Any]:
        catalog = self.pipeline_of(index).engine.catalog(min_version)
        page = catalog.page(limit, after, offset)
        return {"documents": page.documents, "total": page.total, "next_after": page.next_after,
                "index_version": catalog.version.version}

    def document(self, index: str, doc_id: str, min_version: int) -> dict[str, Any] | None:
        catalog = self.pipeline_of(index).engine.catalog(min_version)
        doc = catalog.document(doc_id)
        return None if doc is None else {**doc, "index_version": catalog.version.version}

    def stats(self, index: str, min_version: int) -> dict[str, Any]:
        return self.pipeline_of(index).engine.catalog(min_version).stats()

    def holding(self, index: str, doc_id: str) -> tuple[bool, int]:
        """(whether the loaded version holds the document, the journal offset it has applied); (False, 0)
        before the first version is built: then only the journal knows of documents."""
        try:
            pipeline = self.pipeline_of(index)
        except IndexNotReady:
            return False, 0
        catalog = pipeline.engine.catalog()
        return catalog.holds(doc_id), catalog.version.manifest.journal_offset

    def check_health(self) -> None:
        """Serve restarts a replica whose store is unreachable (StoreUnavailable)."""
        if self._pipeline is not None:
            self._pipeline.engine.index.vectors.ping()


def _uid(path: str) -> str | None:
    try:
        return IndexStore(path).uid
    except InputError:
        return None


@serve.deployment
class Generator:
    """The `answer` role behind a network call: an OpenAI-compatible server, or vLLM behind ray.serve.llm."""

    def __init__(self, config: dict[str, Any], index_dir: str) -> None:
        log_to_replica_file()
        cfg = HygraphConfig.model_validate(config)
        self.llm = make_llm(cfg.llm, cache_dir=str(local_dir_of(index_dir, cfg.store.cache_dir) / "llm_cache"))
        self.metrics = LLMMetrics()

    def answer(self, retrieval: Retrieval) -> Rendered:
        result = answer(self.llm, retrieval)
        self.metrics.record(self.llm.usage)
        return result.render()

    def stream(self, retrieval: Retrieval) -> Iterator[str | Rendered]:
        """Answer text pieces as the backend yields them, then the result, rendered."""
        for piece in answer_stream(self.llm, retrieval):
            if isinstance(piece, QueryResult):
                self.metrics.record(self.llm.usage)
                yield piece.render()
            else:
                yield piece
