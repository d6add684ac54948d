"""A small Python client for the HTTP API (CONTRACT.md), used by the tests and the load tests."""

from __future__ import annotations

import json
import time
from typing import Any, Iterator, Sequence
from urllib.parse import quote

import httpx

from hygraph.input_rules import check_filter, check_id


class ApiError(Exception):
    """A non-2xx answer: `status`, and `code`/`message` from the JSON error body."""

    def __init__(self, status: int, code: str, message: str, retry_after: str | None = None) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


class Client:
    """One index of a hygraph service: the default one, or `index` (a named index, `/v1/indexes/{index}/...`).

    Read-your-writes: once `job()` has reported a job `done` at index version V, every later
    `query()` of this client asks for at least V (`min_index_version`), so it sees that write."""

    def __init__(self, url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 timeout_s: float = 60.0, index: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.index = index
        self.seen_version = 0

    def _at(self, path: str) -> str:
        """A data route (`/v1/query`) of this client's index."""
        return path if self.index is None else f"/v1/indexes/{quote(self.index, safe='')}/{path.removeprefix('/v1/')}"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, question: str, mode: str | None = None, top_k: int | None = None,
              filter: dict[str, Any] | None = None) -> dict[str, Any]:  # noqa: A002 - the API's field name
        """The answer and its passages (each with its document's `metadata`); `filter` keeps the passages of
        documents whose metadata matches (`{"key": value, "key2": [v1, v2]}`, README: Documents and metadata)."""
        return self._json("POST", self._at("/v1/query"), self._query_body(question, mode, top_k, filter))

    def query_stream(self, question: str, mode: str | None = None, top_k: int | None = None,
                     filter: dict[str, Any] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:  # noqa: A002
        """(event, data) pairs of the SSE stream: `token` events, then `done` (or `error`)."""
        body = {**self._query_body(question, mode, top_k, filter), "stream": True}
        with self._http.stream("POST", self._at("/v1/query"), json=body) as resp:
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
        for i, doc in enumerate(documents):
            if doc.get("id") is not None:
                check_id(doc["id"], f"documents.{i}.id")
        return self._json("POST", self._at("/v1/documents"), {"documents": list(documents)})

    def delete_document(self, doc_id: str) -> dict[str, Any]:
        """The id is checked by the same rule as on insert and percent-encoded whole (`/`, `?`, `#`)."""
        check_id(doc_id, "doc_id")
        return self._json("DELETE", self._at(f"/v1/documents/{quote(doc_id, safe='')}"))

    def job(self, job_id: str) -> dict[str, Any]:
        out = self._json("GET", self._at(f"/v1/jobs/{quote(job_id, safe='')}"))
        if out.get("status") == "done" and out.get("index_version") is not None:
            self.seen_version = max(self.seen_version, int(out["index_version"]))
        return out

    def wait(self, job_id: str, timeout_s: float = 300.0, poll_s: float = 0.5) -> dict[str, Any]:
        """Poll a job until it is `done` (returned) or `failed` (ApiError 422 job_failed). A 503 (the store out
        of reach, or still coming back) is waited out as its Retry-After says, up to `timeout_s`: a poll
        changes nothing, so asking again is safe."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                out = self.job(job_id)
            except ApiError as exc:
                if exc.status != 503 or time.monotonic() > deadline:
                    raise
                time.sleep(min(_seconds(exc.retry_after, poll_s), max(0.0, deadline - time.monotonic())))
                continue
            if out["status"] == "done":
                return out
            if out["status"] == "failed":
                raise ApiError(422, "job_failed", str(out.get("error", "")))
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {out['status']} after {timeout_s:g} s")
            time.sleep(poll_s)

    def documents(self, limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
        """One page of the documents in id order; pass its `next_cursor` for the next (None: the last page)."""
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor is not None else {})}
        return self._json("GET", self._at(f"/v1/documents?{httpx.QueryParams(params)}"))

    def document(self, doc_id: str) -> dict[str, Any]:
        check_id(doc_id, "doc_id")
        return self._json("GET", self._at(f"/v1/documents/{quote(doc_id, safe='')}"))

    def stats(self) -> dict[str, Any]:
        return self._json("GET", self._at("/v1/stats"))

    def updater(self) -> dict[str, Any]:
        """The index's updater status (`stopped` for a named index's updater that ended after an idle spell)."""
        return self._json("GET", self._at("/v1/updater"))

    def models(self) -> list[str]:
        return [m["id"] for m in self._json("GET", "/v1/models")["data"]]

    # -- indexes and keys (admin routes need an admin key) ----------------------------------------

    def create_index(self, name: str, quota: dict[str, Any] | None = None) -> dict[str, Any]:
        """An empty index; `quota` (`{"max_documents", "max_bytes", "max_qps"}`): its own limits."""
        return self._json("POST", "/v1/indexes", {"name": name, **({"quota": quota} if quota is not None else {})})

    def indexes(self) -> list[dict[str, Any]]:
        """The indexes this key may read: [{"name", "documents", "index_version"}]."""
        return self._json("GET", "/v1/indexes")["indexes"]

    def index_info(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/indexes/{quote(name, safe='')}")

    def delete_index(self, name: str) -> dict[str, Any]:
        return self._json("DELETE", f"/v1/indexes/{quote(name, safe='')}")

    def set_quota(self, name: str, max_documents: int | None = None, max_bytes: int | None = None,
                  max_qps: float | None = None) -> dict[str, Any]:
        """Index `name`'s own limits (None: no limit), replacing the service's default for it (admin key)."""
        body = {"max_documents": max_documents, "max_bytes": max_bytes, "max_qps": max_qps}
        return self._json("PUT", f"/v1/indexes/{quote(name, safe='')}/quota", body)

    def reset_quota(self, name: str) -> None:
        """Index `name` back on the service's default limits (admin key)."""
        resp = self._http.request("DELETE", f"/v1/indexes/{quote(name, safe='')}/quota")
        if resp.status_code >= 400:
            raise _error(resp)

    def create_key(self, rights: dict[str, list[str]], name: str = "") -> dict[str, Any]:
        """A key with these rights per index (`{"team-a": ["read", "write"]}`): {"key", "key_id"}, shown once."""
        return self._json("POST", "/v1/keys", {"rights": rights, "name": name})

    def delete_key(self, key_id: str) -> None:
        resp = self._http.request("DELETE", f"/v1/keys/{quote(key_id, safe='')}")
        if resp.status_code >= 400:
            raise _error(resp)

    def ready(self) -> bool:
        """Whether a hygraph service answers ready here; another service on the port is not ready."""
        try:
            resp = self._http.get("/readyz")
            return resp.status_code == 200 and resp.json().get("status") == "ready"
        except (httpx.TransportError, ValueError, AttributeError):
            return False

    def _query_body(self, question: str, mode: str | None, top_k: int | None,
                    flt: dict[str, Any] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"question": question}
        if flt is not None:
            body["filter"] = check_filter(flt, "filter")
        if mode is not None:
            body["mode"] = mode
        if top_k is not None:
            body["top_k"] = top_k
        if self.seen_version:
            body["min_index_version"] = self.seen_version
        return body

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        resp = self._http.request(method, path, json=body)
        if resp.status_code >= 400:
            raise _error(resp)
        return resp.json()


def _seconds(retry_after: str | None, default: float) -> float:
    """A Retry-After given in seconds (the service sends no HTTP dates); `default` if absent or unreadable."""
    try:
        return max(0.0, float(retry_after)) if retry_after else default
    except ValueError:
        return default


def _error(resp: httpx.Response) -> ApiError:
    try:
        err = resp.json()["error"]
        code, message = err["code"], err["message"]
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", resp.text[:200]
    return ApiError(resp.status_code, code, message, resp.headers.get("retry-after"))
