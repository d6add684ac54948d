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
import logging
import re
import threading
import time
from typing import Any, AsyncIterator

from ray.serve.handle import DeploymentHandle

from hygraph.updater.jobs import job_status
from hygraph.config import HygraphConfig
from hygraph.pipeline import CacheUse, QueryRequest, Rendered, Retrieval, needs_question_vector
from hygraph.serve.access import Access, Need, Principal, denied, not_found
from hygraph.serve.http import ApiError
from hygraph.serve.metrics import IngressMetrics
from hygraph.serve.quotas import Quotas
from hygraph.serve.tenants import Tenant
from hygraph.store.keys import REMOTE_CACHE_S, KeyStore
from hygraph.store.objects import index_uri
from hygraph.store.registry import DEFAULT_INDEX, IndexRegistry, NoSuchIndex


log = logging.getLogger("hygraph.serve")
UPDATER_START_S = 30.0  # how long a write waits for a stopping named updater to give way to a new one


def cache_use(cache_control: str | None) -> CacheUse:
    """The answer cache's use a request's `Cache-Control` asks for (RFC 9111's request directives): `no-store`
    leaves it out altogether, `no-cache` computes the answer afresh and keeps it; anything else reads it."""
    directives = {d.split("=", 1)[0].strip().lower() for d in (cache_control or "").split(",")}
    return "off" if "no-store" in directives else "refresh" if "no-cache" in directives else "use"


class Gateway:
    def __init__(self, retriever: DeploymentHandle, embedder: DeploymentHandle | None,
                 generator: DeploymentHandle | None, cfg: HygraphConfig, index_dir: str) -> None:
        self.cfg = cfg
        # Results come back over Serve's direct gRPC path instead of the object store: on 2 cores
        # hybrid's p50 at concurrency 1 went from about 67 to 52 ms (README, Serving).
        self.retriever, self.embedder, self.generator = (
            h.options(_by_reference=False) if h is not None else None for h in (retriever, embedder, generator))
        uri = index_uri(index_dir)
        self.registry = IndexRegistry(uri, cfg.store.cache_dir)
        root = self.registry.root  # this node's directory for the default index (the index itself when local)
        self.metrics = IngressMetrics()
        self.index_name = uri.rstrip("/").rsplit("/", 1)[-1]  # the default index's other name in chat's `model`
        self.default = Tenant.open(DEFAULT_INDEX, uri, cfg)
        # Keys live beside the service's own index (in its bucket when it is on object storage), so every
        # replica on every node knows the same keys.
        self.access = Access(cfg.serve, cfg.profile, KeyStore(
            self.default.store.objects, cache_s=REMOTE_CACHE_S if self.registry.remote else 0.0,
            legacy_file=root / "keys.json"))
        self._named_cfg = cfg.for_named_index(root)
        self._tenants: dict[str, Tenant] = {}
        self._tenants_lock = threading.Lock()
        # Named indexes only: the default index is the service's own.
        self.quotas = Quotas(cfg.serve.index_quota, self.registry.quota)

    # -- indexes, and who may do what with them ------------------------------------------------

    def tenant(self, name: str, who: Principal, need: Need) -> Tenant:
        """Index `name` for a caller that may do `need` on it; 404 (as for no such index) when it may not
        know of it, 401 without a key, 403 when it may see the index but not do this."""
        if not who.may(name, need):
            raise denied(who, name, need)
        if name == DEFAULT_INDEX:
            return self.default
        try:
            location = self.registry.location(name)
        except NoSuchIndex:
            with self._tenants_lock:
                self._tenants.pop(name, None)  # deleted: a later index of that name is a new one
            raise not_found(name) from None
        with self._tenants_lock:
            tenant = self._tenants.get(name)
            if tenant is None or str(tenant.path) != location:  # on object storage a new index has a new prefix
                tenant = self._tenants[name] = Tenant.open(name, location, self._named_cfg)
            return tenant

    def forget(self, name: str) -> None:
        with self._tenants_lock:
            self._tenants.pop(name, None)

    # -- the query pipeline shared by /v1/query and /v1/chat/completions -----------------------

    def request(self, tenant: Tenant, question: str, mode: str | None, k: int | None,
                min_version: int | None, flt: dict[str, Any] | None = None,
                cache_control: str | None = None) -> QueryRequest:
        limit = self.cfg.serve.max_question_chars
        if len(question) > limit:
            raise ApiError(422, "invalid_field", f"question: {len(question)} characters exceeds the limit of {limit}")
        if tenant.name != DEFAULT_INDEX:
            self.quotas.admit_query(tenant.name)
        return QueryRequest.make(self.cfg.retrieval, question, mode, k, max(min_version or 0, tenant.floor),
                                 filter=flt, index=tenant.name, cache=cache_use(cache_control))

    async def _retrieve(self, req: QueryRequest) -> Rendered | Retrieval:
        """One handle call when the Retriever embeds and answers; an Embedder call first otherwise."""
        query_vec = (await self.embedder.embed.remote(req.question)
                     if self.embedder is not None and needs_question_vector(req) else None)
        return await self.retriever.query.remote(req, query_vec)

    def _observe(self, result: Rendered, started: float) -> bytes:
        result.seconds["total"] = time.perf_counter() - started
        self.metrics.observe_query(result.mode, result.seconds, result.retrieved)
        return result.json()

    async def query(self, req: QueryRequest) -> bytes:
        """The CONTRACT result's JSON."""
        started = time.perf_counter()
        got = await self._retrieve(req)
        if isinstance(got, Retrieval):
            got = await self.generator.answer.remote(got)
        return self._observe(got, started)

    async def query_stream(self, req: QueryRequest) -> AsyncIterator[str | bytes]:
        """Answer pieces, then the full CONTRACT result's JSON as the last item. An answer made in the Retriever
        exists whole already; its words are sent as pieces all the same, so clients see one protocol."""
        started = time.perf_counter()
        got = await self._retrieve(req)
        if isinstance(got, Rendered):
            for piece in re.findall(r"\S+\s*", got.answer):
                yield piece
            yield self._observe(got, started)
            return
        async for piece in self.generator.options(stream=True).stream.remote(got):
            yield self._observe(piece, started) if isinstance(piece, Rendered) else piece

    # -- the index's contents, read from the Retriever's loaded version (as queries are) ---------

    async def documents(self, tenant: Tenant, limit: int, after: str | None, offset: int) -> dict[str, Any]:
        return await self.retriever.documents.remote(tenant.name, limit, after, offset, tenant.floor)

    async def document(self, tenant: Tenant, doc_id: str) -> dict[str, Any] | None:
        return await self.retriever.document.remote(tenant.name, doc_id, tenant.floor)

    async def stats(self, tenant: Tenant) -> dict[str, Any]:
        """The version's counts, plus the journaled jobs it does not hold yet."""
        stats = await self.retriever.stats.remote(tenant.name, tenant.floor)
        pending = await asyncio.to_thread(tenant.journal.pending, stats.pop("journal_offset"))
        return {**stats, "pending_jobs": pending}

    async def holds(self, tenant: Tenant, doc_id: str) -> bool:
        """Whether the index holds the document, or will once the queued jobs are applied."""
        held, offset = await self.retriever.holding.remote(tenant.name, doc_id)
        return await asyncio.to_thread(tenant.journal.holds_after, doc_id, offset, held)

    # -- writes and their status ---------------------------------------------------------------

    async def job_status(self, tenant: Tenant, job_id: str) -> dict[str, Any] | None:
        job = await asyncio.to_thread(tenant.journal.find, job_id)
        if job is None:
            return None
        body = await asyncio.to_thread(job_status, tenant.store, tenant.journal, job)
        if body["status"] == "done":
            tenant.raise_floor(int(body["index_version"]))
        return body

    def updater(self, tenant: Tenant) -> Any:
        import ray

        try:
            return ray.get_actor(tenant.updater_name, namespace="hygraph")
        except ValueError:
            raise ApiError(503, "updater_unavailable", "the index's OnlineUpdater is not running",
                           {"Retry-After": "5"}) from None

    async def updater_status(self, tenant: Tenant) -> dict[str, Any]:
        """The updater's own status; for a named index whose updater ended after an idle spell, what is known
        without it (`stopped`), so asking starts nothing."""
        from ray.exceptions import RayActorError

        try:
            return await self.updater(tenant).status.remote()
        except (ApiError, RayActorError):
            if tenant.name == DEFAULT_INDEX:
                raise ApiError(503, "updater_unavailable", "the index's OnlineUpdater is not running",
                               {"Retry-After": "5"}) from None
        manifest = await asyncio.to_thread(tenant.store.manifest)
        pending = await asyncio.to_thread(tenant.journal.pending, manifest.journal_offset)
        return {"stopped": True, "index_version": manifest.version, "pending": pending,
                "reason": "idle (updates.named_idle_stop_s); the next write starts it"}

    async def admit_insert(self, tenant: Tenant, documents: int) -> None:
        """429 when the insert would take a named index past its documents or bytes quota."""
        if tenant.name != DEFAULT_INDEX:
            await asyncio.to_thread(self.quotas.admit_insert, tenant.name, documents,
                                    lambda size: self.registry.info(tenant.name, size))

    async def ensure_updater(self, tenant: Tenant) -> None:
        """After a write is journaled: a named index's updater runs and looks at its journal (started when
        absent or stopping after an idle spell, updater/actor.py); whatever is pending when it starts, it applies."""
        if tenant.name == DEFAULT_INDEX:
            return
        from ray.exceptions import RayActorError

        from hygraph.updater.actor import start_updater

        deadline = time.monotonic() + UPDATER_START_S
        while True:
            updater = await asyncio.to_thread(start_updater, tenant.cfg, tenant.path, True)
            try:
                if await updater.wake.remote():
                    return
            except RayActorError:
                pass  # it ended between the lookup and the call: the next lookup starts a new one
            if time.monotonic() > deadline:
                # The write is journaled (durable): the next write, or the next service start, applies it.
                log.warning("index '%s': its updater did not start within %.0f s", tenant.name, UPDATER_START_S)
                return
            await asyncio.sleep(0.2)
