"""Operations: liveness, readiness, the index's counts, and the OnlineUpdater's status and recalibration."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from hygraph.serve.gateway import Gateway
from hygraph.serve.routes import gateway, index_path, reader, status_reader, writer
from hygraph.serve.tenants import Tenant
from hygraph.store.registry import DEFAULT_INDEX

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(gw: Gateway = Depends(gateway)) -> Any:
    version = await gw.retriever.version.remote(DEFAULT_INDEX)
    return JSONResponse({"status": "ready", "index_version": version})


@router.get("/v1/stats")
@router.get("/v1/indexes/{name}/stats", dependencies=[Depends(index_path)])
async def stats(ix: Tenant = Depends(reader), gw: Gateway = Depends(gateway)) -> Any:
    """The serving version's counts (documents, chunks, entities, relations, hyperedges, summaries, layers),
    its `index_version`, `updated_at` (when it was published, ISO 8601 UTC) and `pending_jobs` (journaled
    inserts and deletes it does not hold yet)."""
    return JSONResponse(await gw.stats(ix))


@router.get("/v1/updater")
@router.get("/v1/indexes/{name}/updater", dependencies=[Depends(index_path)])
async def updater_status(ix: Tenant = Depends(status_reader), gw: Gateway = Depends(gateway)) -> Any:
    return JSONResponse(await gw.updater_status(ix))


@router.post("/v1/updater/recalibrate", status_code=202)
@router.post("/v1/indexes/{name}/updater/recalibrate", status_code=202, dependencies=[Depends(index_path)])
async def recalibrate(ix: Tenant = Depends(writer), gw: Gateway = Depends(gateway)) -> Any:
    """HyperRAG §3.3 on demand: retrain the hyperbolic embeddings in the background, then swap versions."""
    await gw.ensure_updater(ix)
    await gw.updater(ix).recalibrate.remote()
    return JSONResponse({"requested": True}, status_code=202)
