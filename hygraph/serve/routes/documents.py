"""Documents: `POST /v1/documents`, `DELETE /v1/documents/{id}` (journaled before the 202), job status,
and reading back what the index holds (`GET /v1/documents`, `GET /v1/documents/{id}`)."""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse
from starlette.convertors import Convertor, register_url_convertor

from hygraph.errors import InputError
from hygraph.input_rules import MAX_ID_CHARS, check_id
from hygraph.model import Document
from hygraph.store.journal import DeleteDocuments, InsertDocuments
from hygraph.serve.gateway import Gateway
from hygraph.serve.http import ApiError
from hygraph.serve.routes import gateway, index_path, reader, status_reader, writer
from hygraph.serve.schemas import DocumentsRequest, id_rule
from hygraph.serve.tenants import Tenant



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
# `doc_id` is percent-encoded in the path (`/` as %2F); ids follow the same rule as on insert.
DocIdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS), id_rule]
# A cursor is the base64url of the last id of a page (at most 4 UTF-8 bytes a character).
MAX_CURSOR_CHARS = 4 * (4 * MAX_ID_CHARS + 2) // 3
MAX_PAGE = 1000


def _exact_path(request: Request) -> None:
    raw = request.scope.get("raw_path", b"")
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        # The path decoder would have replaced the bad bytes with U+FFFD: a different id than was sent.
        raise ApiError(422, "invalid_field", "doc_id: the percent-encoded id is not valid UTF-8") from None


def cursor_of(doc_id: str) -> str:
    return base64.urlsafe_b64encode(doc_id.encode()).decode().rstrip("=")


def after_cursor(cursor: str) -> str:
    """The id a cursor continues after; 422 for a string no page gave out."""
    try:
        doc_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
        return check_id(doc_id, "cursor")
    except (binascii.Error, ValueError, InputError):
        raise ApiError(422, "invalid_field", "cursor: not a cursor a page of GET /v1/documents gave out") from None


NAMED = [Depends(index_path)]


@router.post("/v1/documents", status_code=202)
@router.post("/v1/indexes/{name}/documents", status_code=202, dependencies=NAMED)
async def add_documents(body: DocumentsRequest, ix: Tenant = Depends(writer), gw: Gateway = Depends(gateway)) -> Any:
    limit = gw.cfg.serve.max_documents_per_request
    if len(body.documents) > limit:
        raise ApiError(413, "too_large", f"documents: {len(body.documents)} exceeds the limit of {limit} per request")
    docs = [Document.make(d.text, id=d.id, title=d.title, metadata=d.metadata) for d in body.documents]
    await gw.admit_insert(ix, len(docs))
    job = await asyncio.to_thread(ix.journal.append, InsertDocuments(tuple(docs)))
    gw.metrics.ingest.inc(tags={"op": "insert"})
    await gw.ensure_updater(ix)
    return JSONResponse({"job_id": job.job_id, "accepted": len(docs), "ids": [d.id for d in docs]}, status_code=202)


@router.get("/v1/documents")
@router.get("/v1/indexes/{name}/documents", dependencies=NAMED)
async def list_documents(limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
                         cursor: Annotated[str | None, Query(min_length=1, max_length=MAX_CURSOR_CHARS)] = None,
                         offset: Annotated[int | None, Query(ge=0)] = None,
                         ix: Tenant = Depends(reader), gw: Gateway = Depends(gateway)) -> Any:
    """The documents the serving version holds, in id order: `{"documents": [{"id", "title", "chars", "chunks",
    "metadata"}], "total", "next_cursor", "index_version"}`. Continue with `?cursor=<next_cursor>` (stable across
    updates) or page by `offset`."""
    if cursor is not None and offset is not None:
        raise ApiError(422, "invalid_field", "offset: give either cursor or offset, not both")
    page = await gw.documents(ix, limit, after_cursor(cursor) if cursor is not None else None, offset or 0)
    after = page.pop("next_after")
    return JSONResponse({**page, "next_cursor": cursor_of(after) if after is not None else None})


@router.get("/v1/documents/{doc_id:any_id}")
@router.get("/v1/indexes/{name}/documents/{doc_id:any_id}", dependencies=NAMED)
async def get_document(request: Request, doc_id: DocIdPath, ix: Tenant = Depends(reader),
                       gw: Gateway = Depends(gateway)) -> Any:
    """`{"id", "title", "text", "chars", "chunks", "metadata", "index_version"}` of a document the serving version
    holds."""
    _exact_path(request)
    doc = await gw.document(ix, doc_id)
    if doc is None:
        raise ApiError(404, "not_found", "doc_id: no document with this id in the index")
    return JSONResponse(doc)


@router.delete("/v1/documents/{doc_id:any_id}", status_code=202)
@router.delete("/v1/indexes/{name}/documents/{doc_id:any_id}", status_code=202, dependencies=NAMED)
async def delete_document(request: Request, doc_id: DocIdPath, ix: Tenant = Depends(writer),
                          gw: Gateway = Depends(gateway)) -> Any:
    """404 unless the index holds the document or a queued insert adds it: a delete is never a silent no-op."""
    _exact_path(request)
    if not await gw.holds(ix, doc_id):
        raise ApiError(404, "not_found", "doc_id: no document with this id in the index or queued for insertion")
    job = await asyncio.to_thread(ix.journal.append, DeleteDocuments((doc_id,)))
    gw.metrics.ingest.inc(tags={"op": "delete"})
    await gw.ensure_updater(ix)
    return JSONResponse({"job_id": job.job_id}, status_code=202)


@router.get("/v1/jobs/{job_id}")
@router.get("/v1/indexes/{name}/jobs/{job_id}", dependencies=NAMED)
async def job(job_id: JobId, ix: Tenant = Depends(status_reader), gw: Gateway = Depends(gateway)) -> Any:
    """`done` once the version holding the job is published, with that `index_version`: a query with
    `min_index_version` set to it (the client does this) is answered from it or a newer one."""
    body = await gw.job_status(ix, job_id)
    if body is None:
        raise ApiError(404, "not_found", "job_id: no such job")
    return JSONResponse(body)
