"""The HTTP ingress: the FastAPI app (routers, middleware, error handlers) and its Serve deployment.

Routes live in `routes/` (one router per endpoint group); what they need at run time (handles,
journal, limits, metrics) is the `Gateway` the deployment puts on `app.state`. Swagger UI and
ReDoc are served from packaged files (`/docs`, `/redoc`), so they work offline.
"""

from __future__ import annotations

import typing
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel
from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from hygraph import __version__
from hygraph.config import HygraphConfig
from hygraph.serve.gateway import Gateway
from hygraph.serve.http import (ApiError, HttpLimits, RequestMiddleware, endpoint_name, from_http,
                                from_validation, json_error)
from hygraph.serve.replica_log import log_to_replica_file
from hygraph.serve.routes import console, documents, indexes, ops, query

ROUTERS = (query.router, documents.router, indexes.router, ops.router, console.router)

def _answered(to_api_error: Callable[[Request, Any], ApiError]) -> Any:
    """FastAPI's own errors (validation, unknown route) in the JSON error shape, counted like the rest."""
    async def handle(request: Request, exc: Exception) -> JSONResponse:
        err = to_api_error(request, exc)
        request.app.state.http.on_error(endpoint_name(request.url.path), err)
        return json_error(err)
    return handle


def _body_fields(request: Request) -> Callable[[list[Any]], list[str]]:
    """loc path -> the field names the route's body model allows there (for "did you mean" in a 422)."""
    endpoint = request.scope.get("endpoint")
    hints = typing.get_type_hints(endpoint) if endpoint is not None else {}
    body = next((t for t in hints.values() if _model_in(t) is not None), None)

    def allowed(path: list[Any]) -> list[str]:
        model = _model_in(body)
        for part in path:
            if model is None:
                break
            if not isinstance(part, int):  # a list index keeps the element's model
                field = model.model_fields.get(str(part))
                model = _model_in(field.annotation) if field is not None else None
        return list(model.model_fields) if model is not None else []
    return allowed


def _model_in(tp: Any) -> type[BaseModel] | None:
    """The pydantic model a type annotation holds (through Optional, list, Annotated), if any."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    return next((m for m in map(_model_in, typing.get_args(tp)) if m is not None), None)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route takes at this path: Starlette's `Allow` names only the first route's."""
    methods: set[str] = set()
    for router in ROUTERS:  # included without a prefix: their routes match the request's path as is
        for route in router.routes:
            if route.matches(request.scope)[0] is not Match.NONE:
                methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


def _http_error(request: Request, exc: StarletteHTTPException) -> ApiError:
    if exc.status_code != 405:
        return from_http(exc)
    return from_http(exc, request.method, _allowed_methods(request))


def build_api(gateway: Any, limits: HttpLimits) -> FastAPI:
    """The FastAPI app: routers, middleware, error handlers, and what they read from `app.state`."""
    # No trailing-slash redirects: Starlette builds their Location from the request's Host header
    # (an open redirect behind a proxy that passes Host through); such a path is a 404 or 405 instead.
    api = FastAPIOffline(title="hygraph", version=__version__, redirect_slashes=False,
                         description="Graph-RAG question answering over a live index (CONTRACT.md).")
    api.add_middleware(RequestMiddleware)
    for router in ROUTERS:
        api.include_router(router)
    api.add_exception_handler(RequestValidationError,
                              _answered(lambda request, exc: from_validation(exc, _body_fields(request))))
    api.add_exception_handler(StarletteHTTPException, _answered(_http_error))
    api.state.gateway, api.state.http = gateway, limits
    return api


def http_limits(cfg: HygraphConfig, metrics: Any) -> HttpLimits:
    def on_error(endpoint: str, err: ApiError) -> None:
        metrics.errors.inc(tags={"status": str(err.status), "code": err.code, "endpoint": endpoint})

    return HttpLimits(max_body_bytes=cfg.serve.max_body_bytes, body_timeout_s=cfg.serve.body_timeout_s,
                      max_header_bytes=cfg.serve.max_header_bytes,
                      on_request=lambda endpoint: metrics.requests.inc(tags={"endpoint": endpoint}),
                      on_error=on_error)


@serve.deployment
@serve.ingress()
class Ingress:
    """Serve builds the app after the constructor (`__serve_build_asgi_app__`), so the app holds this
    replica's gateway rather than a module-level singleton."""

    def __init__(self, retriever: DeploymentHandle, embedder: DeploymentHandle | None,
                 generator: DeploymentHandle | None, config: dict[str, Any], index_dir: str) -> None:
        log_to_replica_file()
        cfg = HygraphConfig.model_validate(config)
        self.gateway = Gateway(retriever, embedder, generator, cfg, index_dir)
        self.limits = http_limits(cfg, self.gateway.metrics)

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_api(self.gateway, self.limits)
