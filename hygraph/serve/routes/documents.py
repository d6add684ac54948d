"""Writes: `POST /v1/documents`, `DELETE /v1/documents/{id}` (journaled before the 202) and job status."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse
from starlette.convertors import Convertor, register_url_convertor

from hygraph.input_rules import MAX_ID_CHARS
from hygraph.model import Document
from hygraph.serve.gateway import Gateway
from hygraph.serve.http import ApiError
from hygraph.serve.routes import gateway, status_access, write_access
from hygraph.serve.schemas import DocumentsRequest, id_rule



class _AnyId(Convertor[str]):
    """A path segment run that may hold any character, `/` and newlines included, so a bad id reaches
    the id rule (422 naming doc_id) instead of missing the route (404)."""

    regex = "(?s:.+)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("any_id", _AnyId())
router = APIRouter(tags=["documents"])
# Job ids are the journal's uuid4 hex; longer strings cannot name a job and are not looked up.
JobId = Annotated[str, Path(min_length=1, max_length=64)]


@router.post("/v1/documents", status_code=202, dependencies=[Depends(write_access)])
async def add_documents(body: DocumentsRequest, gw: Gateway = Depends(gateway)) -> Any:
    limit = gw.cfg.serve.max_documents_per_request
    if len(body.documents) > limit:
        raise ApiError(413, "too_large", f"documents: {len(body.documents)} exceeds the limit of {limit} per request")
    docs = [Document.make(d.text, id=d.id, title=d.title, metadata=d.metadata) for d in body.documents]
    payload = {"documents": [{"id": d.id, "title": d.title, "text": d.text, "metadata": d.metadata} for d in docs]}
    job = await asyncio.to_thread(gw.journal.append, "insert", payload)
    gw.metrics.ingest.inc(tags={"op": "insert"})
    return JSONResponse({"job_id": job.job_id, "accepted": len(docs), "ids": [d.id for d in docs]}, status_code=202)


@router.delete("/v1/documents/{doc_id:any_id}", status_code=202, dependencies=[Depends(write_access)])
async def delete_document(request: Request,
                          doc_id: Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS), id_rule],
                          gw: Gateway = Depends(gateway)) -> Any:
    """`doc_id` is percent-encoded in the path (`/` as %2F); ids follow the same rule as on insert."""
    raw = request.scope.get("raw_path", b"")
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        # The path decoder would have replaced the bad bytes with U+FFFD: a different id than was sent.
        raise ApiError(422, "invalid_field", "doc_id: the percent-encoded id is not valid UTF-8") from None
    job = await asyncio.to_thread(gw.journal.append, "delete", {"ids": [doc_id]})
    gw.metrics.ingest.inc(tags={"op": "delete"})
    return JSONResponse({"job_id": job.job_id}, status_code=202)


@router.get("/v1/jobs/{job_id}", dependencies=[Depends(status_access)])
async def job(job_id: JobId, gw: Gateway = Depends(gateway)) -> Any:
    """`done` once the version holding the job is published, with that `index_version`: a query with
    `min_index_version` set to it (the client does this) is answered from it or a newer one."""
    body = await gw.job_status(job_id)
    if body is None:
        raise ApiError(404, "not_found", "job_id: no such job")
    return JSONResponse(body)
