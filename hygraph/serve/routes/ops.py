"""Operations: liveness, readiness and the OnlineUpdater's status and recalibration."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from hygraph.serve.gateway import Gateway
from hygraph.serve.routes import gateway, status_access, write_access

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(gw: Gateway = Depends(gateway)) -> Any:
    version = await gw.retriever.version.remote()
    return JSONResponse({"status": "ready", "index_version": version})


@router.get("/v1/updater", dependencies=[Depends(status_access)])
async def updater_status(gw: Gateway = Depends(gateway)) -> Any:
    return JSONResponse(await gw.updater().status.remote())


@router.post("/v1/updater/recalibrate", status_code=202, dependencies=[Depends(write_access)])
async def recalibrate(gw: Gateway = Depends(gateway)) -> Any:
    """HyperRAG §3.3 on demand: retrain the hyperbolic embeddings in the background, then swap versions."""
    await gw.updater().recalibrate.remote()
    return JSONResponse({"requested": True}, status_code=202)
