"""HTTP edges of the ingress: the JSON error shape, the request middleware (ids, limits, error
mapping) and the API-key dependency.

Every failure leaves as `{"error": {"code", "message", "request_id"}}` with the status CONTRACT.md
lists; bad input is a 4xx naming the field, never a 500; no message echoes more than a bounded,
printable preview of what the client sent.
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import json
import logging
import os
import re
import sys
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hygraph.config import ServeConfig
from hygraph.errors import BackendError, ConfigError, IndexNotReady, InputError, StoreError, StoreUnavailable
from hygraph.input_rules import depth, preview

log = logging.getLogger("hygraph.serve")

RETRY_AFTER_S = 5
# A request body nested deeper than this is refused before validation (json's C parser recurses).
MAX_BODY_DEPTH = 32
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("hygraph_request_id", default="")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, dict(headers or {})


def error_body(code: str, message: str, request_id: str = "") -> dict[str, Any]:
    err = {"code": code, "message": message}
    if request_id:
        err["request_id"] = request_id
    return {"error": err}


def as_api_error(exc: BaseException) -> ApiError:
    """Map an exception from this process or a replica (Ray wraps it; `cause` is the original)."""
    exc = getattr(exc, "cause", None) or exc
    if isinstance(exc, ApiError):
        return exc
    first = preview(str(exc).splitlines()[0], 300) if str(exc) else type(exc).__name__
    if isinstance(exc, InputError):
        return ApiError(422, "invalid_field", first)
    if isinstance(exc, IndexNotReady):
        return ApiError(503, "index_not_ready", first, {"Retry-After": str(RETRY_AFTER_S)})
    if isinstance(exc, StoreUnavailable):
        return ApiError(503, "store_unavailable", first, {"Retry-After": str(RETRY_AFTER_S)})
    if isinstance(exc, StoreError):
        return ApiError(503, "store_error", first, {"Retry-After": str(RETRY_AFTER_S)})
    if isinstance(exc, BackendError):
        return ApiError(502, "backend_error", first)
    name = type(exc).__name__
    if name == "BackPressureError":  # Serve's queue for a deployment is full
        return ApiError(429, "overloaded", "the service is at capacity; retry shortly", {"Retry-After": "1"})
    if name in ("TaskCancelledError", "RequestCancelledError", "CancelledError"):
        # The client went away (Serve cancels its request): nobody reads this answer, nothing failed.
        return ApiError(499, "cancelled", "the client closed the request")
    if name in ("DeploymentUnavailableError", "ActorDiedError", "ActorUnavailableError"):
        return ApiError(503, "unavailable", "a serving replica is restarting; retry shortly",
                        {"Retry-After": str(RETRY_AFTER_S)})
    log.error("internal error (request %s): %s: %s", request_id_var.get(), name, first, exc_info=exc)
    return ApiError(500, "internal", "internal error (logged with the request id)")


# What other RAG and search APIs call our fields (LightRAG's `query`, top-k spellings): named in the 422.
_OTHER_NAMES = {"query": "question", "q": "question", "prompt": "question", "input": "question",
                "k": "top_k", "topk": "top_k", "top_n": "top_k", "limit": "top_k", "search_mode": "mode"}


def suggestion(name: str, allowed: Sequence[str]) -> str | None:
    """The allowed field an unknown field name most likely meant, if any."""
    if _OTHER_NAMES.get(name) in allowed:
        return _OTHER_NAMES[name]
    close = difflib.get_close_matches(name.lower(), list(allowed), n=1, cutoff=0.6)
    return close[0] if close else None


def validation_message(errors: list[dict[str, Any]],
                       allowed: Callable[[list[Any]], Sequence[str]] | None = None) -> str:
    """`field.path: what is wrong` for the first error, an unknown field first (a misspelt field is also
    a missing one: the unknown name is the cause), with the field it likely meant when `allowed` (loc
    path -> the field names allowed there) suggests one; union branch tags are left out of the path."""
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    first = unknown[0] if unknown else errors[0]
    # The first element says where the value came from (body, path, query, header).
    loc = [str(p) for p in first["loc"][1:] if "[" not in str(p) and "function-" not in str(p)]
    where = ".".join(preview(p, 40) for p in loc) or "body"
    explained: set[tuple[Any, ...]] = set()
    if unknown:
        name = str(first["loc"][-1])
        what = f"unknown field '{preview(name, 40)}'"
        meant = suggestion(name, allowed(list(first["loc"][1:-1]))) if allowed is not None else None
        if meant is not None:
            what += f"; did you mean '{meant}'?"
            explained.add((*first["loc"][:-1], meant))  # its "field required" is the same mistake
    else:
        what = str(first["msg"]).removeprefix("Value error, ")
    more = sum(1 for e in errors if e is not first and not (e["type"] == "missing" and tuple(e["loc"]) in explained))
    return f"{where}: {preview(what, 200)}" + (f" (and {more} more)" if more else "")


def json_error(err: ApiError) -> JSONResponse:
    """The error response; RequestMiddleware adds the X-Request-Id header to every response."""
    return JSONResponse(error_body(err.code, err.message, request_id_var.get()), status_code=err.status,
                        headers=err.headers)


def from_validation(exc: RequestValidationError,
                    allowed: Callable[[list[Any]], Sequence[str]] | None = None) -> ApiError:
    errors = list(exc.errors())
    if errors and errors[0]["type"] == "json_invalid":
        return ApiError(400, "malformed", "body: not valid JSON")
    return ApiError(422, "invalid_field", validation_message(errors, allowed))


def from_http(exc: StarletteHTTPException, method: str = "", allowed_methods: Sequence[str] = ()) -> ApiError:
    """Starlette's 404 and 405; a 405 names the methods the path takes, in its message and `Allow` header."""
    if exc.status_code == 405 and allowed_methods:
        return ApiError(405, "method_not_allowed",
                        f"method: {preview(method, 20)} is not allowed here; use {' or '.join(allowed_methods)}",
                        {**(exc.headers or {}), "Allow": ", ".join(allowed_methods)})
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return ApiError(exc.status_code, code, preview(str(exc.detail), 200), exc.headers)


@dataclass(frozen=True)
class HttpLimits:
    """What the request middleware needs from the deployment, set on `app.state.http` at start."""

    max_body_bytes: int
    body_timeout_s: float
    max_header_bytes: int
    on_request: Callable[[str], None]  # endpoint label
    on_error: Callable[[str, ApiError], None]


class RequestMiddleware:
    """Pure ASGI middleware around every HTTP request (limits from `app.state.http`).

    - a request id (the client's `X-Request-Id` when it is a short token, else a new one) in a
      context variable for logs and in every response;
    - the body read up front under `max_body_bytes` (413) and `body_timeout_s` (408: a client that
      declares more than it sends cannot hold a worker); a JSON body that is not UTF-8, not JSON,
      nested deeper than MAX_BODY_DEPTH or holding an integer past Python's digit limit is 400
      `malformed`, and so is a second `Authorization` header;
    - any exception that escapes a route mapped to the JSON error shape (`as_api_error`).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_headers = scope.get("headers", [])
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw_headers}
        given = headers.get("x-request-id", "")
        rid = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        token = request_id_var.set(rid)
        endpoint = endpoint_name(scope.get("path", ""))
        limits: HttpLimits = scope["app"].state.http
        limits.on_request(endpoint)
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if not given:  # Serve's proxy sets the header itself on every request it forwards
                    message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            size = sum(len(k) + len(v) for k, v in raw_headers)
            if size > limits.max_header_bytes:
                raise ApiError(431, "headers_too_large",
                               f"headers: {size} bytes exceeds the limit of {limits.max_header_bytes}")
            auths = sum(k.lower() == b"authorization" for k, _ in raw_headers)
            if auths > 1:  # which one counts would depend on the server: neither does
                raise ApiError(400, "malformed", f"authorization: the header is sent {auths} times; send it once")
            body_receive = await _read_body(scope, receive, headers, limits)
            await self.app(scope, body_receive, send_with_id)
        except Exception as exc:  # noqa: BLE001 - every escaped error becomes the JSON error shape
            err = as_api_error(exc)
            limits.on_error(endpoint, err)
            if started:
                raise
            await json_error(err)(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)


async def _read_body(scope: Scope, receive: Receive, headers: dict[str, str], limits: HttpLimits) -> Receive:
    if scope["method"] in ("GET", "HEAD", "OPTIONS"):
        return receive
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise ApiError(413, "too_large", f"body: {int(declared)} bytes exceeds the limit of {limits.max_body_bytes}")
    body = bytearray()
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ApiError(400, "malformed", "body: the client disconnected before sending it")
                body += message.get("body", b"")
                if len(body) > limits.max_body_bytes:
                    raise ApiError(413, "too_large", f"body: exceeds the limit of {limits.max_body_bytes} bytes")
                if not message.get("more_body"):
                    break
    except TimeoutError:
        raise ApiError(408, "timeout", f"body: not received within {limits.body_timeout_s:g} s") from None
    if body and "json" in headers.get("content-type", "application/json"):
        _check_json(bytes(body))
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}
        return await receive()

    return replay


def _check_json(body: bytes) -> None:
    """A JSON body the routes can parse: every way it cannot is one 400 `malformed` naming the reason."""
    try:
        parsed = json.loads(body, parse_constant=_not_json)
    except _NotJson as exc:
        raise ApiError(400, "malformed", f"body: {exc} is not JSON (numbers must be finite)") from None
    except RecursionError:
        raise ApiError(400, "malformed", f"body: nested deeper than {MAX_BODY_DEPTH} levels") from None
    except UnicodeDecodeError:
        raise ApiError(400, "malformed", "body: not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, "malformed", f"body: not valid JSON ({exc.msg} at position {exc.pos})") from None
    except ValueError:  # an integer past Python's digit limit (sys.get_int_max_str_digits)
        raise ApiError(400, "malformed", f"body: an integer has more than {sys.get_int_max_str_digits()} "
                       "digits") from None
    if depth(parsed) > MAX_BODY_DEPTH:
        raise ApiError(400, "malformed", f"body: nested deeper than {MAX_BODY_DEPTH} levels")


class _NotJson(Exception):
    """NaN, Infinity or -Infinity: Python's parser takes them, JSON has no such numbers."""


def _not_json(constant: str) -> None:
    raise _NotJson(constant)


_ENDPOINTS = (("/v1/query", "query"), ("/v1/chat/", "chat"), ("/v1/documents", "documents"), ("/v1/jobs/", "jobs"),
              ("/v1/updater", "updater"), ("/v1/indexes", "indexes"), ("/v1/keys", "keys"),
              ("/v1/stats", "stats"), ("/v1/models", "models"), ("/readyz", "readyz"), ("/healthz", "healthz"))


def endpoint_name(path: str) -> str:
    """A bounded metrics label for a request path (never the path itself: ids live in paths); a named
    index's data route counts as its route (`/v1/indexes/{name}/query` as `query`)."""
    if path.startswith("/v1/indexes/"):
        _, sep, tail = path.removeprefix("/v1/indexes/").partition("/")
        if sep:
            path = "/v1/" + tail
    return next((name for prefix, name in _ENDPOINTS if path.startswith(prefix)), "other")


def api_keys(cfg: ServeConfig, profile: str, environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """Keys from the config plus `cfg.api_keys_env` (comma-separated). Outside the local profile
    writes must be authenticated, so starting there without a key is a configuration error."""
    env = os.environ if environ is None else environ
    keys = {k for k in cfg.api_keys if k} | {k.strip() for k in env.get(cfg.api_keys_env, "").split(",") if k.strip()}
    if profile != "local" and not keys:
        raise ConfigError(f"serve.api_keys: the {profile} profile needs at least one API key "
                          f"(set serve.api_keys or {cfg.api_keys_env})")
    return frozenset(keys)
