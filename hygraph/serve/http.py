"""HTTP edges of the ingress: the JSON error shape, body limits and parsing, API keys.

Every failure leaves as `{"error": {"code", "message"}}` with the status CONTRACT.md lists;
bad input is a 4xx naming the field, never a 500.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from hygraph.config import ServeConfig
from hygraph.errors import BackendError, ConfigError, IndexNotReady, InputError, StoreError, StoreUnavailable

log = logging.getLogger("hygraph.serve")
M = TypeVar("M", bound=BaseModel)

RETRY_AFTER_S = 5


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def error_body(code: str, message: str, request_id: str = "") -> dict[str, Any]:
    err = {"code": code, "message": message}
    if request_id:
        err["request_id"] = request_id
    return {"error": err}


def error_response(err: ApiError, request_id: str) -> JSONResponse:
    return JSONResponse(error_body(err.code, err.message, request_id), status_code=err.status,
                        headers={**err.headers, "X-Request-Id": request_id})


def as_api_error(exc: BaseException) -> ApiError:
    """Map an exception from this process or a replica (Ray wraps it; `cause` is the original)."""
    exc = getattr(exc, "cause", None) or exc
    if isinstance(exc, ApiError):
        return exc
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
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
    if name in ("DeploymentUnavailableError", "ActorDiedError", "ActorUnavailableError"):
        return ApiError(503, "unavailable", "a serving replica is restarting; retry shortly",
                        {"Retry-After": str(RETRY_AFTER_S)})
    log.exception("internal error", exc_info=exc)
    return ApiError(500, "internal", "internal error (logged with the request id)")


async def read_json(request: Request, model: type[M], max_bytes: int) -> M:
    """The body as `model`: 413 over `max_bytes` (checked while reading), 400 not JSON, 422 invalid."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise ApiError(413, "too_large", f"body: {declared} bytes exceeds the limit of {max_bytes}")
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > max_bytes:
            raise ApiError(413, "too_large", f"body: exceeds the limit of {max_bytes} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "malformed", f"body: not valid JSON ({exc})".splitlines()[0]) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(422, "invalid_field", validation_message(exc)) from None


def validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    what = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
    more = len(exc.errors()) - 1
    return f"{where}: {what}" + (f" (and {more} more)" if more else "")


def api_keys(cfg: ServeConfig, profile: str, environ: dict[str, str] | None = None) -> frozenset[str]:
    """Keys from the config plus `cfg.api_keys_env` (comma-separated). Outside the local profile
    writes must be authenticated, so starting there without a key is a configuration error."""
    env = os.environ if environ is None else environ
    keys = {k for k in cfg.api_keys if k} | {k.strip() for k in env.get(cfg.api_keys_env, "").split(",") if k.strip()}
    if profile != "local" and not keys:
        raise ConfigError(f"serve.api_keys: the {profile} profile needs at least one API key "
                          f"(set serve.api_keys or {cfg.api_keys_env})")
    return frozenset(keys)


def check_key(request: Request, keys: frozenset[str], required: bool) -> None:
    """401 unless `Authorization: Bearer <key>` names a configured key (constant-time compare)."""
    if not keys or not required:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "authorization: missing `Bearer <key>` header",
                       {"WWW-Authenticate": "Bearer"})
    if not any(hmac.compare_digest(token.strip().encode(), k.encode()) for k in keys):
        raise ApiError(401, "unauthorized", "authorization: invalid API key", {"WWW-Authenticate": "Bearer"})
