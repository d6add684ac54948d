"""Operations: liveness, readiness, the index's counts, and the OnlineUpdater's status and recalibration."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from hygraph.serve.gateway import Gateway
from hygraph.serve.routes import gateway, read_access, status_access, write_access

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(gw: Gateway = Depends(gateway)) -> Any:
    version = await gw.retriever.version.remote()
    return JSONResponse({"status": "ready", "index_version": version})


@router.get("/v1/stats", dependencies=[Depends(read_access)])
async def stats(gw: Gateway = Depends(gateway)) -> Any:
    """The serving version's counts (documents, chunks, entities, relations, hyperedges, summaries, layers),
    its `index_version`, `updated_at` (when it was published, ISO 8601 UTC) and `pending_jobs` (journaled
    inserts and deletes it does not hold yet)."""
    return JSONResponse(await gw.stats())


@router.get("/v1/updater", dependencies=[Depends(status_access)])
async def updater_status(gw: Gateway = Depends(gateway)) -> Any:
    return JSONResponse(await gw.updater().status.remote())


@router.post("/v1/updater/recalibrate", status_code=202, dependencies=[Depends(write_access)])
async def recalibrate(gw: Gateway = Depends(gateway)) -> Any:
    """HyperRAG §3.3 on demand: retrain the hyperbolic embeddings in the background, then swap versions."""
    await gw.updater().recalibrate.remote()
    return JSONResponse({"requested": True}, status_code=202)
