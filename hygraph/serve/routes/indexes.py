"""Indexes and keys (CONTRACT.md, "Indexes and keys"): `POST/GET /v1/indexes`, `GET/DELETE
/v1/indexes/{name}`, `POST /v1/keys`, `DELETE /v1/keys/{key_id}`, and an index's own quota
(`PUT/DELETE /v1/indexes/{name}/quota`). Making and deleting indexes and keys and setting quotas needs
an admin key; listing shows only the indexes the caller may read."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Annotated, Any, Literal, Optional

from fastapi import APIRouter, Depends, Path
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from hygraph.updater import indexes
from hygraph.config import QuotaConfig
from hygraph.errors import InputError, StoreError
from hygraph.serve.access import Principal, denied, not_found
from hygraph.serve.gateway import Gateway
from hygraph.serve.http import ApiError
from hygraph.serve.routes import IndexName, caller, gateway
from hygraph.store.registry import DEFAULT_INDEX, NAME_PATTERN, IndexExists, NoSuchIndex
from hygraph.store.versions import IndexStore

router = APIRouter(tags=["indexes and keys"])
log = logging.getLogger("hygraph.serve")
# How long POST /v1/indexes waits for the new index's empty first version before answering, as a share of
# the proxy's request timeout (it answers 201 either way: until the version lands, queries to the index
# get 503 index_not_ready with Retry-After, and inserts are journaled as usual).
READY_WAIT_SHARE = 0.5
MAX_KEY_INDEXES = 1000


class CreateIndex(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN,
                      description="1-64 of a-z, 0-9 and '-', starting with a letter")
    quota: Optional[QuotaConfig] = Field(None, description="its own limits; absent: the service's `serve.index_quota`")


class CreateKey(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rights: dict[Annotated[str, Field(min_length=1, max_length=64, pattern=NAME_PATTERN)],
                 Annotated[list[Literal["read", "write", "admin"]], Field(min_length=1, max_length=3)]] = Field(
        max_length=MAX_KEY_INDEXES, description="index name -> its rights (read, write, admin)")
    name: str = Field("", max_length=200, description="what the key is for (kept in nothing but its stored record)")


@router.post("/v1/indexes", status_code=201)
async def create_index(body: CreateIndex, who: Principal = Depends(caller), gw: Gateway = Depends(gateway)) -> Any:
    gw.access.require_admin(who)
    try:
        path = await asyncio.to_thread(gw.registry.reserve, body.name)
    except IndexExists as exc:
        raise ApiError(409, "exists", str(exc)) from None
    gw.forget(body.name)
    if body.quota is not None:
        await asyncio.to_thread(gw.registry.set_quota, body.name, body.quota.model_dump())
    await asyncio.to_thread(indexes.create, gw.tenant(body.name, who, "admin").cfg, path)
    deadline = time.monotonic() + READY_WAIT_SHARE * gw.cfg.serve.request_timeout_s
    store = IndexStore(path, cache_dir=gw.cfg.store.cache_dir)
    while time.monotonic() < deadline and await asyncio.to_thread(store.current_version) is None:
        await asyncio.sleep(0.25)
    return JSONResponse({"name": body.name, "created": int(time.time())}, status_code=201)


@router.get("/v1/indexes")
async def list_indexes(who: Principal = Depends(caller), gw: Gateway = Depends(gateway)) -> Any:
    """The indexes this key may read: `{"indexes": [{"name", "documents", "index_version"}]}`; one whose info
    cannot be read now is listed with nulls and an `error`."""
    if who.kind == "anonymous" and not who.may(DEFAULT_INDEX, "read"):
        raise denied(who, DEFAULT_INDEX, "read")
    names = [n for n in await asyncio.to_thread(gw.registry.names) if who.may(n, "read")]
    out: list[dict[str, Any]] = []
    for name in names:
        try:
            info = await asyncio.to_thread(gw.registry.info, name, False)
        except NoSuchIndex:
            continue  # deleted between the listing and now
        except (InputError, StoreError, OSError) as exc:
            # Listed all the same: an index that vanished from the listing would look free to create (409) and
            # would hide a store fault from its admin. The reason is the error's kind, never its text (paths).
            log.warning("GET /v1/indexes: the info of index %r could not be read: %r", name, exc)
            out.append({"name": name, "documents": None, "index_version": None,
                        "error": f"its info could not be read ({type(exc).__name__})"})
            continue
        out.append({"name": info.name, "documents": info.documents, "index_version": info.index_version})
    return JSONResponse({"indexes": out})


@router.get("/v1/indexes/{name}")
async def get_index(name: IndexName, who: Principal = Depends(caller), gw: Gateway = Depends(gateway)) -> Any:
    """`{"name", "documents", "index_version", "bytes"}`; bytes: the index's files, not its vectors."""
    gw.tenant(name, who, "read")
    try:
        info = await asyncio.to_thread(gw.registry.info, name)
    except (NoSuchIndex, InputError, OSError):  # deleted since the check above
        raise not_found(name) from None
    quota = None if name == DEFAULT_INDEX else gw.quotas.limits(name).model_dump()
    return JSONResponse({"name": info.name, "documents": info.documents, "index_version": info.index_version,
                         "bytes": info.bytes, "quota": quota})


@router.put("/v1/indexes/{name}/quota")
async def set_quota(name: IndexName, body: QuotaConfig, who: Principal = Depends(caller),
                    gw: Gateway = Depends(gateway)) -> Any:
    """Index `name`'s own limits, replacing the service's default for it (a limit left out or null: none).
    Every ingress replica applies them within a second."""
    gw.access.require_admin(who)
    await _set_quota(gw, name, body.model_dump())
    return JSONResponse({"name": name, "quota": body.model_dump()})


@router.delete("/v1/indexes/{name}/quota", status_code=204, response_class=Response, response_model=None)
async def reset_quota(name: IndexName, who: Principal = Depends(caller), gw: Gateway = Depends(gateway)) -> Any:
    """Index `name` back on the service's default limits (`serve.index_quota`)."""
    gw.access.require_admin(who)
    await _set_quota(gw, name, None)
    return Response(status_code=204)


async def _set_quota(gw: Gateway, name: str, limits: dict[str, Any] | None) -> None:
    if name == DEFAULT_INDEX:
        raise ApiError(422, "invalid_field", "name: the default index is the service's own and has no quota")
    try:
        await asyncio.to_thread(gw.registry.set_quota, name, limits)
    except NoSuchIndex:
        raise not_found(name) from None
    gw.quotas.forget(name)


@router.delete("/v1/indexes/{name}", status_code=202)
async def delete_index(name: IndexName, who: Principal = Depends(caller), gw: Gateway = Depends(gateway)) -> Any:
    """Removes the index's versions, journal, collections and caches, and every key's rights on it; nothing
    of any other index. The name is free at once; the removal itself runs in the background."""
    tenant = gw.tenant(name, who, "admin")
    if name == DEFAULT_INDEX:
        raise ApiError(422, "invalid_field", "name: the default index is the service's own and cannot be deleted")
    try:
        detached = await asyncio.to_thread(gw.registry.detach, name)
    except NoSuchIndex:
        raise not_found(name) from None
    gw.forget(name)
    await asyncio.to_thread(gw.access.store.drop_index, name)
    await asyncio.to_thread(indexes.remove, tenant.cfg, tenant.path, detached)
    return JSONResponse({"job_id": uuid.uuid4().hex}, status_code=202)


@router.post("/v1/keys", status_code=201)
async def create_key(body: CreateKey, who: Principal = Depends(caller), gw: Gateway = Depends(gateway)) -> Any:
    """`{"key", "key_id"}`: the key is shown here once; the service keeps only its hash."""
    gw.access.require_admin(who)
    rights = {index: tuple(dict.fromkeys(r)) for index, r in body.rights.items()}
    key, stored = await asyncio.to_thread(gw.access.store.create, rights, body.name)
    return JSONResponse({"key": key, "key_id": stored.key_id}, status_code=201)


@router.delete("/v1/keys/{key_id}", status_code=204, response_class=Response, response_model=None)
async def delete_key(key_id: Annotated[str, Path(min_length=1, max_length=64)], who: Principal = Depends(caller),
                     gw: Gateway = Depends(gateway)) -> Any:
    gw.access.require_admin(who)
    if not await asyncio.to_thread(gw.access.store.delete, key_id):
        raise ApiError(404, "not_found", "key_id: no such key")
    return Response(status_code=204)
