"""The HTTP ingress: the FastAPI app (routers, middleware, error handlers) and its Serve deployment.

Routes live in `routes/` (one router per endpoint group); what they need at run time (handles,
journal, limits, metrics) is the `Gateway` the deployment puts on `app.state`. Swagger UI and
ReDoc are served from packaged files (`/docs`, `/redoc`), so they work offline.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.exceptions import HTTPException as StarletteHTTPException

from hygraph import __version__
from hygraph.config import HygraphConfig
from hygraph.serve.gateway import Gateway
from hygraph.serve.http import (ApiError, HttpLimits, RequestMiddleware, endpoint_name, from_http,
                                from_validation, json_error)
from hygraph.serve.routes import documents, ops, query

def _answered(to_api_error: Any) -> Any:
    """FastAPI's own errors (validation, unknown route) in the JSON error shape, counted like the rest."""
    async def handle(request: Request, exc: Exception) -> JSONResponse:
        err = to_api_error(exc)
        request.app.state.http.on_error(endpoint_name(request.url.path), err)
        return json_error(err)
    return handle


def build_api(gateway: Any, limits: HttpLimits) -> FastAPI:
    """The FastAPI app: routers, middleware, error handlers, and what they read from `app.state`."""
    # No trailing-slash redirects: Starlette builds their Location from the request's Host header
    # (an open redirect behind a proxy that passes Host through); such a path is a 404 or 405 instead.
    api = FastAPIOffline(title="hygraph", version=__version__, redirect_slashes=False,
                         description="Graph-RAG question answering over a live index (CONTRACT.md).")
    api.add_middleware(RequestMiddleware)
    for router in (query.router, documents.router, ops.router):
        api.include_router(router)
    api.add_exception_handler(RequestValidationError, _answered(from_validation))
    api.add_exception_handler(StarletteHTTPException, _answered(from_http))
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
        cfg = HygraphConfig.model_validate(config)
        self.gateway = Gateway(retriever, embedder, generator, cfg, index_dir)
        self.limits = http_limits(cfg, self.gateway.metrics)

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_api(self.gateway, self.limits)
