"""A small Python client for the HTTP API (CONTRACT.md), used by the tests and the load tests."""

from __future__ import annotations

import json
from typing import Any, Iterator, Sequence

import httpx


class ApiError(Exception):
    """A non-2xx answer: `status`, and `code`/`message` from the JSON error body."""

    def __init__(self, status: int, code: str, message: str, retry_after: str | None = None) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


class Client:
    def __init__(self, url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 timeout_s: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, question: str, mode: str | None = None, top_k: int | None = None) -> dict[str, Any]:
        return self._json("POST", "/v1/query", _query_body(question, mode, top_k))

    def query_stream(self, question: str, mode: str | None = None,
                     top_k: int | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event, data) pairs of the SSE stream: `token` events, then `done` (or `error`)."""
        body = {**_query_body(question, mode, top_k), "stream": True}
        with self._http.stream("POST", "/v1/query", json=body) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise _error(resp)
            event = "message"
            for line in resp.iter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    yield event, json.loads(line[5:])

    def add_documents(self, documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """{"job_id", "accepted", "ids"} once the batch is durably journaled (202)."""
        return self._json("POST", "/v1/documents", {"documents": list(documents)})

    def delete_document(self, doc_id: str) -> dict[str, Any]:
        return self._json("DELETE", f"/v1/documents/{doc_id}")

    def job(self, job_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/jobs/{job_id}")

    def ready(self) -> bool:
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        resp = self._http.request(method, path, json=body)
        if resp.status_code >= 400:
            raise _error(resp)
        return resp.json()


def _query_body(question: str, mode: str | None, top_k: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"question": question}
    if mode is not None:
        body["mode"] = mode
    if top_k is not None:
        body["top_k"] = top_k
    return body


def _error(resp: httpx.Response) -> ApiError:
    try:
        err = resp.json()["error"]
        code, message = err["code"], err["message"]
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", resp.text[:200]
    return ApiError(resp.status_code, code, message, resp.headers.get("retry-after"))
