"""What the HTTP routes work with: the deployment handles, the journal and the index's versions.

One `Gateway` per ingress replica, reached from a route through `request.app.state.gateway`.
It runs the query pipeline's steps over the handles (`pipeline.py`; where each step runs is the
`serve.embedding` and `serve.answer` config) and answers job status. Read-your-writes: a job
reads `done` once the version holding it is published, and reports that version; a query asks
the Retriever for at least the highest version any job status here has reported (and at least
the request's own `min_index_version`), so a client that saw `done` is never answered from an
older version.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator

from ray.serve.handle import DeploymentHandle

from hygraph.cluster.jobs import job_status
from hygraph.cluster.names import updater_name
from hygraph.config import HygraphConfig
from hygraph.pipeline import QueryRequest, QueryResult, Retrieval
from hygraph.serve.http import ApiError, api_keys
from hygraph.serve.metrics import IngressMetrics
from hygraph.store.journal import Journal
from hygraph.store.versions import IndexStore


class Gateway:
    def __init__(self, retriever: DeploymentHandle, embedder: DeploymentHandle | None,
                 generator: DeploymentHandle | None, cfg: HygraphConfig, index_dir: str) -> None:
        self.cfg = cfg
        # Results come back over Serve's direct gRPC path instead of the object store: on 2 cores
        # hybrid's p50 at concurrency 1 went from about 67 to 52 ms (README, Serving).
        self.retriever, self.embedder, self.generator = (
            h.options(_by_reference=False) if h is not None else None for h in (retriever, embedder, generator))
        self.keys = api_keys(cfg.serve, cfg.profile)
        self.journal = Journal(index_dir)
        self.store = IndexStore(index_dir)
        self.metrics = IngressMetrics()
        self.index_name = Path(index_dir).resolve().name
        self.updater_name = updater_name(index_dir)
        self._floor = 0  # the highest version a job status from this replica has called done
        self._floor_lock = threading.Lock()

    # -- the query pipeline shared by /v1/query and /v1/chat/completions -----------------------

    def request(self, question: str, mode: str | None, k: int | None, min_version: int | None,
                flt: dict[str, Any] | None = None) -> QueryRequest:
        limit = self.cfg.serve.max_question_chars
        if len(question) > limit:
            raise ApiError(422, "invalid_field", f"question: {len(question)} characters exceeds the limit of {limit}")
        return QueryRequest.make(self.cfg.retrieval, question, mode, k, max(min_version or 0, self._floor),
                                 filter=flt)

    async def _retrieve(self, req: QueryRequest) -> QueryResult | Retrieval:
        """One handle call when the Retriever embeds and answers; an Embedder call first otherwise."""
        query_vec = await self.embedder.embed.remote(req.question) if self.embedder is not None else None
        return await self.retriever.query.remote(req, query_vec)

    def _observe(self, result: QueryResult, started: float) -> dict[str, Any]:
        result.seconds["total"] = time.perf_counter() - started
        out = result.to_json()
        self.metrics.observe_query(result.request.mode, result.seconds, result.context.notes["retrieved"])
        return out

    async def query(self, req: QueryRequest) -> dict[str, Any]:
        started = time.perf_counter()
        got = await self._retrieve(req)
        if isinstance(got, Retrieval):
            got = await self.generator.answer.remote(got)
        return self._observe(got, started)

    async def query_stream(self, req: QueryRequest) -> AsyncIterator[str | dict[str, Any]]:
        """Answer pieces, then the full CONTRACT result as the last item. An answer made in the Retriever
        exists whole already; its words are sent as pieces all the same, so clients see one protocol."""
        started = time.perf_counter()
        got = await self._retrieve(req)
        if isinstance(got, QueryResult):
            for piece in re.findall(r"\S+\s*", got.answer):
                yield piece
            yield self._observe(got, started)
            return
        async for piece in self.generator.options(stream=True).stream.remote(got):
            yield self._observe(piece, started) if isinstance(piece, QueryResult) else piece

    # -- the index's contents, read from the Retriever's loaded version (as queries are) ---------

    async def documents(self, limit: int, after: str | None, offset: int) -> dict[str, Any]:
        return await self.retriever.documents.remote(limit, after, offset, self._floor)

    async def document(self, doc_id: str) -> dict[str, Any] | None:
        return await self.retriever.document.remote(doc_id, self._floor)

    async def stats(self) -> dict[str, Any]:
        """The version's counts, plus the journaled jobs it does not hold yet."""
        stats = await self.retriever.stats.remote(self._floor)
        pending = await asyncio.to_thread(self.journal.pending, stats.pop("journal_offset"))
        return {**stats, "pending_jobs": pending}

    async def holds(self, doc_id: str) -> bool:
        """Whether the index holds the document, or will once the queued jobs are applied."""
        held, offset = await self.retriever.holding.remote(doc_id)
        return await asyncio.to_thread(self.journal.holds_after, doc_id, offset, held)

    # -- writes and their status ---------------------------------------------------------------

    async def job_status(self, job_id: str) -> dict[str, Any] | None:
        job = await asyncio.to_thread(self.journal.find, job_id)
        if job is None:
            return None
        body = await asyncio.to_thread(job_status, self.store, self.journal, job)
        if body["status"] == "done":
            with self._floor_lock:
                self._floor = max(self._floor, int(body["index_version"]))
        return body

    def updater(self) -> Any:
        import ray

        try:
            return ray.get_actor(self.updater_name, namespace="hygraph")
        except ValueError:
            raise ApiError(503, "updater_unavailable", "the index's OnlineUpdater is not running",
                           {"Retry-After": "5"}) from None
