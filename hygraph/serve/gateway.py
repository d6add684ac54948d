"""What the HTTP routes work with: the deployment handles, the journal and the index's versions.

One `Gateway` per ingress replica, reached from a route through `request.app.state.gateway`.
It runs the query pipeline over the handles (embed -> retrieve -> generate) and answers job
status. Read-your-writes: a job reads `done` once the version holding it is published, and
reports that version; a query asks the Retriever for at least the highest version any job
status here has reported (and at least the request's own `min_index_version`), so a client
that saw `done` is never answered from an older version.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator

from ray.serve.handle import DeploymentHandle

from hygraph.cluster.actor import updater_name
from hygraph.cluster.jobs import job_status
from hygraph.config import HygraphConfig
from hygraph.core.retrieval.context import Context
from hygraph.engine import check_request, result
from hygraph.serve.http import ApiError, api_keys
from hygraph.serve.metrics import IngressMetrics
from hygraph.store.journal import Journal
from hygraph.store.versions import IndexStore


class Gateway:
    def __init__(self, embedder: DeploymentHandle, retriever: DeploymentHandle, generator: DeploymentHandle,
                 cfg: HygraphConfig, index_dir: str) -> None:
        self.cfg = cfg
        # Results come back over Serve's direct gRPC path instead of the object store: on 2 cores
        # hybrid's p50 at concurrency 1 went from about 67 to 52 ms (README, Serving).
        self.embedder, self.retriever, self.generator = (
            h.options(_by_reference=False) for h in (embedder, retriever, generator))
        self.keys = api_keys(cfg.serve, cfg.profile)
        self.journal = Journal(index_dir)
        self.store = IndexStore(index_dir)
        self.metrics = IngressMetrics()
        self.index_name = Path(index_dir).resolve().name
        self.updater_name = updater_name(index_dir)
        self._floor = 0  # the highest version a job status from this replica has called done
        self._floor_lock = threading.Lock()

    # -- the query pipeline shared by /v1/query and /v1/chat/completions -----------------------

    async def retrieve(self, question: str, mode: str | None, k: int | None,
                       min_version: int | None = None) -> dict[str, Any]:
        limit = self.cfg.serve.max_question_chars
        if len(question) > limit:
            raise ApiError(422, "invalid_field", f"question: {len(question)} characters exceeds the limit of {limit}")
        mode, k = check_request(self.cfg.retrieval, question, mode, k)
        t0 = time.perf_counter()
        qv = await self.embedder.embed.remote(question)
        t1 = time.perf_counter()
        got = await self.retriever.retrieve.remote(question, qv, mode, k, max(min_version or 0, self._floor))
        got.update(question=question, mode=mode, started=t0, embed_s=t1 - t0, retrieve_s=time.perf_counter() - t1)
        return got

    def _finish(self, got: dict[str, Any], gen: dict[str, Any], generate_s: float) -> dict[str, Any]:
        ctx: Context = got["context"]
        seconds = {"embed": got["embed_s"], "retrieve": got["retrieve_s"], "generate": generate_s,
                   "total": time.perf_counter() - got["started"]}
        out = result(gen["answer"], gen["citations"], got["mode"], ctx, got["version"], seconds)
        out["usage"] = gen["usage"]
        self.metrics.observe_query(got["mode"], seconds, {k: len(v) for k, v in out["context"].items()
                                                           if isinstance(v, list) and k != "citations"})
        return out

    async def answer(self, got: dict[str, Any]) -> dict[str, Any]:
        t = time.perf_counter()
        gen = await self.generator.answer.remote(got["question"], got["items"])
        return self._finish(got, gen, time.perf_counter() - t)

    async def answer_stream(self, got: dict[str, Any]) -> AsyncIterator[str | dict[str, Any]]:
        """Answer pieces, then the full CONTRACT result as the last item."""
        t = time.perf_counter()
        async for piece in self.generator.options(stream=True).stream.remote(got["question"], got["items"]):
            if isinstance(piece, dict):
                yield self._finish(got, piece, time.perf_counter() - t)
            else:
                yield piece

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
