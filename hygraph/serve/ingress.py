"""The HTTP ingress: routes of CONTRACT.md over the Embedder -> Retriever -> Generator handles."""

import asyncio
import json
import time
import uuid
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.exceptions import HTTPException as StarletteHTTPException

from hygraph import __version__
from hygraph.cluster.updater import summaries_pending, updater_name
from hygraph.config import HygraphConfig
from hygraph.core.retrieval.context import Context
from hygraph.engine import check_request, result
from hygraph.model import Document
from hygraph.serve.http import (ApiError, api_keys, as_api_error, check_key, error_body, error_response,
                                read_json)
from hygraph.serve.metrics import IngressMetrics
from hygraph.serve.schemas import ChatRequest, DocumentsRequest, QueryRequest
from hygraph.store.journal import Journal
from hygraph.store.snapshot import SnapshotStore

api = FastAPI(title="hygraph", version=__version__,
              description="Graph-RAG question answering over a live index (CONTRACT.md).")


def _body_schema(model: type) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


@api.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)


@api.exception_handler(RequestValidationError)
async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return JSONResponse(error_body("invalid_field", f"{where}: {first['msg']}"), status_code=422)


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _extension(out: dict[str, Any]) -> dict[str, Any]:
    """The `hygraph` field of a chat completion: what the answer was retrieved from."""
    return {"mode": out["mode"], "passages": out["passages"], "index_version": out["index_version"],
            "citations": out["context"]["citations"], "timings_ms": out["timings_ms"]}


@serve.deployment
@serve.ingress(api)
class Ingress:
    def __init__(self, embedder: DeploymentHandle, retriever: DeploymentHandle, generator: DeploymentHandle,
                 config: dict[str, Any], index_dir: str) -> None:
        self.cfg = HygraphConfig.model_validate(config)
        # Results come back over Serve's direct gRPC path instead of the object store: on 2 cores
        # hybrid's p50 at concurrency 1 went from about 67 to 52 ms (README, Serving).
        self.embedder, self.retriever, self.generator = (
            h.options(_by_reference=False) for h in (embedder, retriever, generator))
        self.keys = api_keys(self.cfg.serve, self.cfg.profile)
        self.journal = Journal(index_dir)
        self.store = SnapshotStore(index_dir)
        self.metrics = IngressMetrics()
        self.model_names = {"hygraph", self.store.root.resolve().name}
        self.updater_name = updater_name(index_dir)

    # -- the pipeline shared by /v1/query and /v1/chat/completions ---------------------------

    async def _retrieve(self, question: str, mode: str | None, k: int | None) -> dict[str, Any]:
        limit = self.cfg.serve.max_question_chars
        if len(question) > limit:
            raise ApiError(422, "invalid_field", f"question: {len(question)} characters exceeds the limit of {limit}")
        mode, k = check_request(self.cfg.retrieval, question, mode, k)
        t0 = time.perf_counter()
        qv = await self.embedder.embed.remote(question)
        t1 = time.perf_counter()
        got = await self.retriever.retrieve.remote(question, qv, mode, k)
        got.update(question=question, mode=mode, started=t0, embed_s=t1 - t0, retrieve_s=time.perf_counter() - t1)
        return got

    def _finish(self, got: dict[str, Any], gen: dict[str, Any], generate_s: float) -> dict[str, Any]:
        ctx: Context = got["context"]
        seconds = {"embed": got["embed_s"], "retrieve": got["retrieve_s"], "generate": generate_s,
                   "total": time.perf_counter() - got["started"]}
        out = result(gen["answer"], gen["citations"], got["mode"], ctx, got["version"], seconds)
        self.metrics.observe_query(got["mode"], seconds, {k: len(v) for k, v in out["context"].items()
                                                           if isinstance(v, list) and k != "citations"})
        return out

    async def _answer(self, got: dict[str, Any]) -> dict[str, Any]:
        t = time.perf_counter()
        gen = await self.generator.answer.remote(got["question"], got["items"])
        return self._finish(got, gen, time.perf_counter() - t)

    async def _answer_stream(self, got: dict[str, Any]) -> AsyncIterator[str | dict[str, Any]]:
        """Answer pieces, then the full CONTRACT result as the last item."""
        t = time.perf_counter()
        async for piece in self.generator.options(stream=True).stream.remote(got["question"], got["items"]):
            if isinstance(piece, dict):
                yield self._finish(got, piece, time.perf_counter() - t)
            else:
                yield piece

    async def _guard(self, request: Request, endpoint: str, work: Any) -> Any:
        """Run one endpoint; every exception becomes the JSON error of CONTRACT.md."""
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        self.metrics.requests.inc(tags={"endpoint": endpoint})
        try:
            response = await work()
        except Exception as exc:  # noqa: BLE001 - mapped to a status, 500s are logged in as_api_error
            err = as_api_error(exc)
            self.metrics.errors.inc(tags={"status": str(err.status), "code": err.code, "endpoint": endpoint})
            return error_response(err, request_id)
        response.headers["X-Request-Id"] = request_id
        return response

    def _stream_errors(self, events: AsyncIterator[bytes], endpoint: str,
                       render: Any) -> AsyncIterator[bytes]:
        """After the 200 is sent a failure can only be reported in the stream itself."""
        async def guarded() -> AsyncIterator[bytes]:
            try:
                async for event in events:
                    yield event
            except Exception as exc:  # noqa: BLE001 - reported in-band, see above
                err = as_api_error(exc)
                self.metrics.errors.inc(tags={"status": str(err.status), "code": err.code, "endpoint": endpoint})
                yield render(err)
        return guarded()

    # -- routes ------------------------------------------------------------------------------

    @api.post("/v1/query", openapi_extra=_body_schema(QueryRequest))
    async def query(self, request: Request) -> Any:
        async def work() -> Any:
            check_key(request, self.keys, self.cfg.serve.require_key_for_reads)
            body = await read_json(request, QueryRequest, self.cfg.serve.max_body_bytes)
            got = await self._retrieve(body.question, body.mode, body.top_k)
            if not body.stream:
                return JSONResponse(await self._answer(got))

            async def events() -> AsyncIterator[bytes]:
                async for piece in self._answer_stream(got):
                    yield _sse("done", piece) if isinstance(piece, dict) else _sse("token", {"text": piece})

            return StreamingResponse(
                self._stream_errors(events(), "query",
                                    lambda e: _sse("error", error_body(e.code, e.message))),
                media_type="text/event-stream")
        return await self._guard(request, "query", work)

    @api.post("/v1/chat/completions", openapi_extra=_body_schema(ChatRequest))
    async def chat(self, request: Request) -> Any:
        async def work() -> Any:
            check_key(request, self.keys, self.cfg.serve.require_key_for_reads)
            body = await read_json(request, ChatRequest, self.cfg.serve.max_body_bytes)
            if body.model not in self.model_names:
                raise ApiError(404, "model_not_found",
                               f"model: '{body.model}' is not served here (one of {', '.join(sorted(self.model_names))})")
            users = [m for m in body.messages if m.role == "user"]
            if not users:
                raise ApiError(422, "invalid_field", "messages: no message with role 'user'")
            opts = body.hygraph or {}
            mode, k = opts.get("mode"), opts.get("top_k")
            if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 200):
                raise ApiError(422, "invalid_field", "hygraph.top_k: must be an integer from 1 to 200")
            if mode is not None and not isinstance(mode, str):
                raise ApiError(422, "invalid_field", "hygraph.mode: must be a string")
            got = await self._retrieve(users[-1].text(), mode, k)
            cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
            if not body.stream:
                out = await self._answer(got)
                return JSONResponse({
                    "id": cid, "object": "chat.completion", "created": created, "model": body.model,
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": out["answer"]}}],
                    "hygraph": _extension(out)})

            def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
                obj = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": body.model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
                return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()

            async def events() -> AsyncIterator[bytes]:
                yield chunk({"role": "assistant", "content": ""})
                async for piece in self._answer_stream(got):
                    if isinstance(piece, dict):
                        yield chunk({}, "stop", hygraph=_extension(piece))
                    else:
                        yield chunk({"content": piece})
                yield b"data: [DONE]\n\n"

            def render(err: ApiError) -> bytes:
                return f"data: {json.dumps(error_body(err.code, err.message))}\n\ndata: [DONE]\n\n".encode()

            return StreamingResponse(self._stream_errors(events(), "chat", render), media_type="text/event-stream")
        return await self._guard(request, "chat", work)

    @api.post("/v1/documents", status_code=202, openapi_extra=_body_schema(DocumentsRequest))
    async def add_documents(self, request: Request) -> Any:
        async def work() -> Any:
            check_key(request, self.keys, True)
            body = await read_json(request, DocumentsRequest, self.cfg.serve.max_body_bytes)
            limit = self.cfg.serve.max_documents_per_request
            if len(body.documents) > limit:
                raise ApiError(413, "too_large", f"documents: {len(body.documents)} exceeds the limit of {limit} per request")
            docs = [Document.make(d.text, id=d.id, title=d.title, metadata=d.metadata) for d in body.documents]
            payload = {"documents": [{"id": d.id, "title": d.title, "text": d.text, "metadata": d.metadata}
                                     for d in docs]}
            job = await asyncio.to_thread(self.journal.append, "insert", payload)
            self.metrics.ingest.inc(tags={"op": "insert"})
            return JSONResponse({"job_id": job.job_id, "accepted": len(docs), "ids": [d.id for d in docs]},
                                status_code=202)
        return await self._guard(request, "documents", work)

    @api.delete("/v1/documents/{doc_id}", status_code=202)
    async def delete_document(self, doc_id: str, request: Request) -> Any:
        async def work() -> Any:
            check_key(request, self.keys, True)
            job = await asyncio.to_thread(self.journal.append, "delete", {"ids": [doc_id]})
            self.metrics.ingest.inc(tags={"op": "delete"})
            return JSONResponse({"job_id": job.job_id}, status_code=202)
        return await self._guard(request, "documents", work)

    @api.get("/v1/jobs/{job_id}")
    async def job(self, job_id: str, request: Request) -> Any:
        async def work() -> Any:
            check_key(request, self.keys, self.cfg.serve.require_key_for_reads)
            job = await asyncio.to_thread(self.journal.find, job_id)
            if job is None:
                raise ApiError(404, "not_found", f"job_id: no job {job_id}")
            # Before the first build lands there is no version: every job is still queued.
            manifest = (await asyncio.to_thread(self.store.open)).manifest \
                if self.store.current_version() is not None else {"journal_offset": 0, "version": None}
            status, error = await asyncio.to_thread(self.journal.status, job, int(manifest["journal_offset"]))
            body = {"job_id": job_id, "op": job.op, "status": status,
                    "index_version": manifest["version"] if status == "done" else None}
            if status == "done" and job.op == "insert":
                body["summaries"] = "pending" if summaries_pending(manifest, job) else "done"
            if error:
                body["error"] = error
            return JSONResponse(body)
        return await self._guard(request, "jobs", work)

    def _updater(self) -> Any:
        import ray

        try:
            return ray.get_actor(self.updater_name, namespace="hygraph")
        except ValueError:
            raise ApiError(503, "updater_unavailable", "the index's OnlineUpdater is not running",
                           {"Retry-After": "5"}) from None

    @api.get("/v1/updater")
    async def updater_status(self, request: Request) -> Any:
        async def work() -> Any:
            check_key(request, self.keys, self.cfg.serve.require_key_for_reads)
            return JSONResponse(await self._updater().status.remote())
        return await self._guard(request, "updater", work)

    @api.post("/v1/updater/recalibrate", status_code=202)
    async def recalibrate(self, request: Request) -> Any:
        """HyperRAG §3.3 on demand: retrain the hyperbolic embeddings in the background, then swap versions."""
        async def work() -> Any:
            check_key(request, self.keys, True)
            await self._updater().recalibrate.remote()
            return JSONResponse({"requested": True}, status_code=202)
        return await self._guard(request, "updater", work)

    @api.get("/healthz")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/readyz")
    async def readyz(self, request: Request) -> Any:
        async def work() -> Any:
            version = await self.retriever.version.remote()
            return JSONResponse({"status": "ready", "index_version": version})
        return await self._guard(request, "readyz", work)

