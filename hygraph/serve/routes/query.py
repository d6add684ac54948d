"""Questions: `POST /v1/query`, the OpenAI-compatible `POST /v1/chat/completions` and `GET /v1/models`."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any, AsyncIterator, Callable

import orjson
from fastapi import APIRouter, Depends, Header
from fastapi.responses import JSONResponse, Response, StreamingResponse

from hygraph.input_rules import check_nonblank_text
from hygraph.serve.access import Principal
from hygraph.serve.gateway import Gateway
from hygraph.serve.openai_format import DONE, Completion, stream_error
from hygraph.serve.http import ApiError, as_api_error, error_body
from hygraph.serve.routes import caller, gateway, index_path, reader
from hygraph.serve.schemas import ChatRequest, QueryRequest
from hygraph.serve.tenants import Tenant
from hygraph.store.registry import DEFAULT_INDEX, NoSuchIndex

router = APIRouter(tags=["questions"])


def _sse(event: str, data: Any) -> bytes:
    return _sse_json(event, json.dumps(data, ensure_ascii=False).encode())


def _sse_json(event: str, data: bytes) -> bytes:
    return f"event: {event}\ndata: ".encode() + data + b"\n\n"


def _guarded(gw: Gateway, events: AsyncIterator[bytes], endpoint: str,
             render: Callable[[ApiError], bytes]) -> AsyncIterator[bytes]:
    """After the 200 is sent a failure can only be reported in the stream itself."""
    async def guarded() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                yield event
        except Exception as exc:  # noqa: BLE001 - reported in-band, see above
            err = as_api_error(exc)
            gw.metrics.errors.inc(tags={"status": str(err.status), "code": err.code, "endpoint": endpoint})
            yield render(err)
    return guarded()


@router.post("/v1/query")
@router.post("/v1/indexes/{name}/query", dependencies=[Depends(index_path)])
async def query(body: QueryRequest, ix: Tenant = Depends(reader), gw: Gateway = Depends(gateway),
                cache_control: str | None = Header(None)) -> Any:
    req = gw.request(ix, body.question, body.mode, body.top_k, body.min_index_version, body.filter, cache_control)
    if not body.stream:
        return Response(await gw.query(req), media_type="application/json")

    async def events() -> AsyncIterator[bytes]:
        async for piece in gw.query_stream(req):
            yield _sse_json("done", piece) if isinstance(piece, bytes) else _sse("token", {"text": piece})

    return StreamingResponse(_guarded(gw, events(), "query", lambda e: _sse("error", error_body(e.code, e.message))),
                             media_type="text/event-stream")


def _default_models(gw: Gateway) -> set[str]:
    """The default index's model names: `hygraph` and its directory's name (unless a named index has it)."""
    return {"hygraph"} | ({gw.index_name} if not gw.registry.exists(gw.index_name) else set())


@router.get("/v1/models")
async def models(who: Principal = Depends(caller), gw: Gateway = Depends(gateway)) -> Any:
    """The OpenAI model list: the indexes this key may read; the default index as `hygraph` and under its
    directory's name, each named index under its name."""
    names = await asyncio.to_thread(gw.registry.names)
    ids: dict[str, str] = {}
    for name in names:
        if who.may(name, "read"):
            for model in (_default_models(gw) if name == DEFAULT_INDEX else {name}):
                ids[model] = name
    if not ids and who.kind == "anonymous":
        raise ApiError(401, "unauthorized", "authorization: missing `Bearer <key>` header",
                       {"WWW-Authenticate": "Bearer"})
    created: dict[str, int] = {}
    for name in set(ids.values()):
        try:
            created[name] = int(await asyncio.to_thread(gw.registry.created, name))
        except NoSuchIndex:  # deleted since it was listed
            created[name] = 0
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created[ids[model]],
                                        "owned_by": "hygraph"} for model in sorted(ids)]}


@router.post("/v1/chat/completions")
async def chat(body: ChatRequest, who: Principal = Depends(caller), gw: Gateway = Depends(gateway),
               cache_control: str | None = Header(None)) -> Any:
    """`model` names the index: `hygraph` (or the default index's directory name) or a named index."""
    index = DEFAULT_INDEX if body.model in _default_models(gw) else body.model
    try:
        ix = gw.tenant(index, who, "read")
    except ApiError as err:
        # A named index this caller cannot read is a model not served here, with or without a key (no oracle).
        if err.status != 404 and (index == DEFAULT_INDEX or err.status != 401):
            raise
        raise ApiError(404, "model_not_found", "model: not served here (GET /v1/models lists the models)") from None
    users = [i for i, m in enumerate(body.messages) if m.role == "user"]
    if not users:
        raise ApiError(422, "invalid_field", "messages: no message with role 'user'")
    # The question is the last user message: its rules are checked here, where its index is known.
    question = check_nonblank_text(body.messages[users[-1]].text(), f"messages.{users[-1]}.content",
                                   gw.cfg.serve.max_question_chars)
    opts = body.options()
    req = gw.request(ix, question, opts.mode, opts.top_k, opts.min_index_version, opts.filter, cache_control)
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    completion = Completion(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), body.model, include_usage)
    if not body.stream:
        return JSONResponse(completion.whole(orjson.loads(await gw.query(req))))

    async def events() -> AsyncIterator[bytes]:
        yield completion.first()
        async for piece in gw.query_stream(req):
            if isinstance(piece, bytes):
                for chunk in completion.last(orjson.loads(piece)):
                    yield chunk
            else:
                yield completion.piece(piece)
        yield DONE

    return StreamingResponse(_guarded(gw, events(), "chat", lambda e: stream_error(error_body(e.code, e.message))),
                             media_type="text/event-stream")
