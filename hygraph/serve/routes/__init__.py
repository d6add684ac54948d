"""The HTTP routes, one router per endpoint group, and the dependencies they share.

Every data route exists twice: for the default index (`/v1/query`) and per named index
(`/v1/indexes/{name}/query`); one handler serves both, its index resolved from the path by the
access dependencies below (`reader`, `writer`, `status_reader`), which also check the caller's key.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable

from fastapi import Header, Path, Request

from hygraph.serve.access import Need, Principal
from hygraph.serve.gateway import Gateway
from hygraph.serve.tenants import Tenant
from hygraph.store.registry import DEFAULT_INDEX, NAME_PATTERN

IndexName = Annotated[str, Path(min_length=1, max_length=64, pattern=NAME_PATTERN,
                                description="an index's name (1-64 of a-z, 0-9, '-', starting with a letter)")]
Authorization = Annotated[str, Header(include_in_schema=False)]


def gateway(request: Request) -> Gateway:
    return request.app.state.gateway


async def index_path(name: IndexName) -> None:
    """Declares (and documents) the `{name}` of a per-index route; the access dependency reads it."""


async def caller(request: Request, authorization: Authorization = "") -> Principal:
    return gateway(request).access.principal(authorization)


def _index_for(need: Need) -> Callable[..., Any]:
    async def resolve(request: Request, authorization: Authorization = "") -> Tenant:
        gw = gateway(request)
        return gw.tenant(request.path_params.get("name", DEFAULT_INDEX), gw.access.principal(authorization), need)
    return resolve


# Reads: queries, documents, stats. Writes: inserts, deletes, recalibration. Status (a job's outcome, the
# updater's recent jobs and errors) names jobs and what failed: it needs a key whenever keys exist.
reader = _index_for("read")
writer = _index_for("write")
status_reader = _index_for("status")
