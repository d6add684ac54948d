"""The HTTP layer alone (routes, middleware, errors, schema) on Starlette's test client; the gateway
behind it is a recording stand-in, so these tests pin what the API accepts and refuses. The real
stack is exercised in tests/integration/test_serve_http.py and test_hostile_http.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from hygraph.config import HygraphConfig
from hygraph.errors import StoreUnavailable
from hygraph.pipeline import QueryRequest
from hygraph.serve.access import Access, denied, not_found
from hygraph.serve.http import HttpLimits
from hygraph.serve.ingress import build_api
from hygraph.store.keys import KeyStore
from hygraph.store.objects import LocalObjects

KEY = "k-123"


STORE_DOWN = "a question asked while the vector store is down"


class _ReplicaError(Exception):
    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Count:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def inc(self, n: int = 1, tags: dict | None = None) -> None:
        self.calls.append(tags or {})


class StubGateway:
    """The default index only (named indexes are exercised against the real stack)."""

    def __init__(self, root: Path) -> None:
        self.cfg = HygraphConfig.model_validate({"serve": {"api_keys": [KEY]}})
        self.access = Access(self.cfg.serve, "local", KeyStore(LocalObjects(root)))
        self.index_name = "demo"
        self.registry = SimpleNamespace(names=lambda: ["default"], exists=lambda name: name == "default",
                                        created=lambda name: 0.0)
        self.metrics = SimpleNamespace(errors=_Count(), requests=_Count(), ingest=_Count())
        self.default = SimpleNamespace(name="default", journal=SimpleNamespace(append=self._append))
        self.asked: list[tuple] = []
        self.cache_controls: list[str | None] = []
        self.appended: list[tuple] = []

    def tenant(self, name: str, who: Any, need: Any) -> Any:
        if not who.may(name, need):
            raise denied(who, name, need)
        if name != "default":
            raise not_found(name)
        return self.default

    async def ensure_updater(self, tenant: Any) -> None:
        return None

    async def admit_insert(self, tenant: Any, documents: int) -> None:
        return None

    def _append(self, request: Any) -> Any:  # the journal's: a typed request, recorded as its journal line
        self.appended.append((request.op, request.payload()))
        return SimpleNamespace(job_id="a" * 32)

    def request(self, tenant: Any, question: str, mode: Any, k: Any, min_version: Any = None, flt: Any = None,
                cache_control: Any = None) -> Any:
        self.cache_controls.append(cache_control)
        if flt is not None:  # the Gateway's own check of a filter (the schema leaves it to QueryRequest.make)
            QueryRequest.make(self.cfg.retrieval, question, mode, k, min_version, filter=flt)
            self.asked.append((question, mode, k, min_version, flt))
        else:
            self.asked.append((question, mode, k, min_version))
        return question

    async def query(self, req: Any) -> bytes:  # the result's JSON, as the Retriever renders it
        if req == STORE_DOWN:  # as Ray hands a replica's exception to the caller: the original is its `cause`
            raise _ReplicaError(StoreUnavailable("milvus at 127.0.0.1:19530 did not answer"))
        return json.dumps({"answer": "42", "mode": "dense", "passages": [], "context": {"citations": []},
                           "index_version": 1, "timings_ms": {},
                           "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()

    async def query_stream(self, req: Any) -> Any:
        for piece in ["4", "2"]:
            yield piece
        yield await self.query(req)

    async def job_status(self, tenant: Any, job_id: str) -> dict | None:
        return None

    async def updater_status(self, tenant: Any) -> dict:
        return {"pending": 0, "last_error": None}
    # The index holds DOCS (sorted ids, as the catalog lists them) and a queued insert of "queued".
    DOCS = ["a", "a/b?c#d", "b", "c"]

    async def holds(self, tenant: Any, doc_id: str) -> bool:
        return doc_id in self.DOCS or doc_id == "queued"

    async def documents(self, tenant: Any, limit: int, after: Any, offset: int) -> dict:
        self.asked.append(("documents", limit, after, offset))
        start = self.DOCS.index(after) + 1 if after is not None else offset
        page = self.DOCS[start:start + limit]
        more = start + len(page) < len(self.DOCS)
        return {"documents": [{"id": i, "title": i.upper(), "chars": 1, "chunks": 1} for i in page],
                "total": len(self.DOCS), "next_after": page[-1] if more and page else None, "index_version": 3}

    async def document(self, tenant: Any, doc_id: str) -> dict | None:
        return {"id": doc_id, "title": "T", "text": "body", "chars": 4, "chunks": 1, "index_version": 3} \
            if doc_id in self.DOCS else None

    async def stats(self, tenant: Any) -> dict:
        return {"documents": len(self.DOCS), "index_version": 3, "pending_jobs": 1}


@pytest.fixture()
def client(tmp_path):
    gw = StubGateway(tmp_path)
    api = build_api(gw, HttpLimits(max_body_bytes=8192, body_timeout_s=1.0, max_header_bytes=8192,
                                   on_request=lambda e: None,
                                   on_error=lambda e, err: gw.metrics.errors.inc(tags={"status": err.status})))
    with TestClient(api, raise_server_exceptions=False) as c:
        c.gw = gw
        yield c


def _post(client, path: str, body: Any, **kw) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(path, content=raw, headers={"Content-Type": "application/json", **kw.pop("headers", {})}, **kw)


@pytest.mark.parametrize("body, status, field", [
    (b"{not json", 400, "body"),
    ({"question": ""}, 422, "question"),
    ({"question": "\u200b\u200b\ufeff"}, 422, "question"),
    ({"question": "Oahu \ud800 luau"}, 422, "question"),
    ({"question": "nul\x00"}, 422, "question"),
    ({"question": "q", "mode": "sideways"}, 422, "mode"),
    ({"question": "q", "top_k": 0}, 422, "top_k"),
    ({"question": "q", "colour": "red"}, 422, "colour"),
    ([1, 2], 422, "body"),
    ({"question": "x" * 9000}, 413, "body"),
    (("[" * 1000 + "]" * 1000).encode(), 400, "body"),
    ({"question": "q", "filter": ["lang", "en"]}, 422, "filter"),
    ({"question": "q", "filter": {"lang": {"$ne": "en"}}}, 422, "filter.lang: an object"),
    ({"question": "q", "filter": {"tags": ["a", ["b"]]}}, 422, "filter.tags.1: a list inside a list"),
    ({"question": "q", "filter": {"k\u0000": 1}}, 422, "filter (a key)"),
    ({"question": "q", "filter": {f"k{i}": 1 for i in range(33)}}, 422, "filter: 33 keys"),
])
def test_bad_queries_get_a_4xx_naming_the_field(client, body, status, field):
    resp = _post(client, "/v1/query", body)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["message"].startswith(field) and err["request_id"] == resp.headers["x-request-id"]
    assert not client.gw.asked


def test_a_vector_store_outage_is_503_with_retry_after(client):
    """A replica's StoreUnavailable is the client's to retry, never a 500 (end to end, a small index's queries no
    longer reach the store: test_serve_http's store-crash test)."""
    resp = _post(client, "/v1/query", {"question": STORE_DOWN})
    assert resp.status_code == 503 and int(resp.headers["retry-after"]) > 0
    assert resp.json()["error"]["code"] == "store_unavailable"


def test_a_filter_reaches_the_query_request(client):
    body = {"question": "q", "filter": {"lang": ["en", "fr"], "year": 2024, "draft": False, "owner": None}}
    assert _post(client, "/v1/query", body).status_code == 200
    assert client.gw.asked == [("q", None, None, None, body["filter"])]


def test_surrogate_in_a_chat_part_is_422_and_nothing_is_asked(client):
    body = {"model": "hygraph", "messages": [{"role": "user", "content": [{"type": "text", "text": "Oahu \ud800"}]}]}
    resp = _post(client, "/v1/chat/completions", body)
    assert resp.status_code == 422 and resp.json()["error"]["message"].startswith("messages.0.content")
    assert not client.gw.asked


def test_the_cache_control_header_reaches_the_gateway_from_query_and_chat(client):
    _post(client, "/v1/query", {"question": "q"})
    _post(client, "/v1/query", {"question": "q"}, headers={"Cache-Control": "no-store"})
    _post(client, "/v1/chat/completions", {"model": "hygraph", "messages": [{"role": "user", "content": "hi"}]},
          headers={"Cache-Control": "no-cache"})
    assert client.gw.cache_controls == [None, "no-store", "no-cache"]


def test_chat_carries_usage_and_the_version_floor(client):
    body = {"model": "hygraph", "messages": [{"role": "user", "content": "hi"}],
            "hygraph": {"mode": "dense", "min_index_version": 7}, "temperature": 0}
    out = _post(client, "/v1/chat/completions", body).json()
    assert out["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    assert client.gw.asked == [("hi", "dense", None, 7)]


def test_models_lists_the_index(client):
    out = client.get("/v1/models").json()
    assert out["object"] == "list" and [m["id"] for m in out["data"]] == ["demo", "hygraph"]


def test_writes_need_the_key_and_ids_follow_the_rule(client):
    doc = {"id": "zz'] or id not in ['", "text": "harmless"}
    assert _post(client, "/v1/documents", {"documents": [doc]}).status_code == 401
    auth = {"Authorization": f"Bearer {KEY}"}
    resp = _post(client, "/v1/documents", {"documents": [doc]}, headers=auth)
    assert resp.status_code == 202 and client.gw.appended[-1][1]["documents"][0]["id"] == doc["id"]
    for bad, where in [({"id": "a\nb", "text": "x"}, "documents.0.id"),
                       ({"id": "x" * 257, "text": "x"}, "documents.0.id"),
                       ({"text": "x", "metadata": {"k": [[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]}}, "documents.0.metadata")]:
        resp = _post(client, "/v1/documents", {"documents": [bad]}, headers=auth)
        assert resp.status_code == 422 and resp.json()["error"]["message"].startswith(where), resp.text
    assert len(client.gw.appended) == 1


def test_a_misnamed_field_is_named_with_the_field_it_likely_meant(client):
    for path, body, message in [
        ("/v1/query", {"query": "who?"}, "query: unknown field 'query'; did you mean 'question'?"),
        ("/v1/query", {"question": "who?", "k": 3}, "k: unknown field 'k'; did you mean 'top_k'?"),
        ("/v1/query", {"question": "who?", "colour": "red"}, "colour: unknown field 'colour'"),
        ("/v1/documents", {"documents": [{"txt": "x"}]},
         "documents.0.txt: unknown field 'txt'; did you mean 'text'?"),
    ]:
        resp = _post(client, path, body, headers={"Authorization": f"Bearer {KEY}"})
        assert resp.status_code == 422 and resp.json()["error"]["message"] == message, resp.text
    assert not client.gw.asked and not client.gw.appended


def test_a_wrong_method_names_the_allowed_ones(client):
    resp = client.get("/v1/query")
    assert resp.status_code == 405 and resp.headers["allow"] == "POST"
    assert resp.json()["error"]["message"] == "method: GET is not allowed here; use POST"
    # Two routes share the path: both methods are named, not only the first route's.
    resp = client.put("/v1/documents", content=b"{}")
    assert resp.status_code == 405 and resp.headers["allow"] == "GET, POST", resp.headers


def test_documents_are_listed_by_cursor_or_offset_and_read_one_by_one(client):
    first = client.get("/v1/documents", params={"limit": 2}).json()
    assert [d["id"] for d in first["documents"]] == ["a", "a/b?c#d"] and first["total"] == 4
    rest = client.get("/v1/documents", params={"limit": 5, "cursor": first["next_cursor"]}).json()
    assert [d["id"] for d in rest["documents"]] == ["b", "c"] and rest["next_cursor"] is None
    assert client.gw.asked[-1] == ("documents", 5, "a/b?c#d", 0)
    assert [d["id"] for d in client.get("/v1/documents?offset=3").json()["documents"]] == ["c"]
    for query, field in [("limit=0", "limit"), ("limit=1001", "limit"), ("offset=-1", "offset"),
                         ("cursor=YQ&offset=1", "offset"), ("cursor=%21%21", "cursor"), ("cursor=_w", "cursor")]:
        resp = client.get(f"/v1/documents?{query}")
        assert resp.status_code == 422 and resp.json()["error"]["message"].startswith(field), (query, resp.text)
    doc = client.get("/v1/documents/a%2Fb%3Fc%23d").json()
    assert doc["id"] == "a/b?c#d" and doc["text"] == "body" and doc["chunks"] == 1
    resp = client.get("/v1/documents/nope")
    assert resp.status_code == 404 and resp.json()["error"]["message"].startswith("doc_id")
    assert client.get("/v1/documents/a%0Ab").status_code == 422
    assert client.get("/v1/stats").json() == {"documents": 4, "index_version": 3, "pending_jobs": 1}


def test_reads_of_documents_and_stats_need_the_key_when_reads_do(client):
    client.gw.cfg = HygraphConfig.model_validate({"serve": {"require_key_for_reads": True, "api_keys": [KEY]}})
    client.gw.access = Access(client.gw.cfg.serve, "local", client.gw.access.store)
    for path in ("/v1/documents", "/v1/documents/a", "/v1/stats", "/v1/query"):
        resp = client.get(path) if path != "/v1/query" else _post(client, path, {"question": "q"})
        assert resp.status_code == 401, path
    assert client.get("/v1/stats", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_deleting_an_id_the_index_does_not_hold_is_404_and_journals_nothing(client):
    auth = {"Authorization": f"Bearer {KEY}"}
    resp = client.delete("/v1/documents/does-not-exist", headers=auth)
    assert resp.status_code == 404 and resp.json()["error"]["message"].startswith("doc_id")
    assert client.delete("/v1/documents/queued", headers=auth).status_code == 202  # a queued insert is held
    assert client.gw.appended == [("delete", {"ids": ["queued"]})]


def test_chat_honours_a_top_level_mode_and_refuses_unknown_fields(client):
    base = {"model": "hygraph", "messages": [{"role": "user", "content": "hi"}]}
    resp = _post(client, "/v1/chat/completions", {**base, "mode": "ppr", "top_p": 1, "max_tokens": 9})
    assert resp.status_code == 200
    assert client.gw.asked[-1] == ("hi", "ppr", None, None)
    _post(client, "/v1/chat/completions", {**base, "mode": "ppr", "hygraph": {"mode": "ppr", "top_k": 4}})
    assert client.gw.asked[-1] == ("hi", "ppr", 4, None)
    for body, message in [({**base, "modes": "ppr"}, "modes: unknown field 'modes'; did you mean 'mode'?"),
                          ({**base, "mode": "ppr", "hygraph": {"mode": "dense"}}, "mode: given as 'ppr'"),
                          ({**base, "temperature": "\ud800"}, "temperature")]:
        resp = _post(client, "/v1/chat/completions", body)
        assert resp.status_code == 422 and resp.json()["error"]["message"].startswith(message), resp.text
    assert len(client.gw.asked) == 2


def test_chat_takes_a_metadata_filter_in_hygraph_or_at_the_top_level(client):
    base = {"model": "hygraph", "messages": [{"role": "user", "content": "hi"}]}
    assert _post(client, "/v1/chat/completions", {**base, "hygraph": {"filter": {"lang": "en"}}}).status_code == 200
    assert client.gw.asked[-1] == ("hi", None, None, None, {"lang": "en"})
    _post(client, "/v1/chat/completions", {**base, "filter": {"year": [2020, 2021]}})
    assert client.gw.asked[-1] == ("hi", None, None, None, {"year": [2020, 2021]})
    resp = _post(client, "/v1/chat/completions", {**base, "filter": {"a": 1}, "hygraph": {"filter": {"a": 2}}})
    assert resp.status_code == 422 and resp.json()["error"]["message"].startswith("filter: given as")
    resp = _post(client, "/v1/chat/completions", {**base, "filter": {"a": {"$gt": 1}}})
    assert resp.status_code == 422 and "filter" in resp.json()["error"]["message"]


def test_delete_takes_any_valid_id_percent_encoded_and_refuses_long_ones(client):
    auth = {"Authorization": f"Bearer {KEY}"}
    assert client.delete("/v1/documents/a%2Fb%3Fc%23d", headers=auth).status_code == 202
    assert client.gw.appended[-1] == ("delete", {"ids": ["a/b?c#d"]})
    resp = client.delete("/v1/documents/" + "x" * 60000, headers=auth)
    assert resp.status_code == 422 and len(resp.text) < 400
    assert client.delete("/v1/documents/a%0Ab", headers=auth).status_code == 422
    resp = client.delete("/v1/documents/lone%ED%A0%80", headers=auth)  # a surrogate's bytes: not UTF-8
    assert resp.status_code == 422 and "UTF-8" in resp.json()["error"]["message"]


def test_unknown_job_ids_are_404_or_422_without_echo(client):
    auth = {"Authorization": f"Bearer {KEY}"}
    assert client.get("/v1/jobs/" + "a" * 32, headers=auth).status_code == 404
    resp = client.get("/v1/jobs/" + "<script>" * 100, headers=auth)
    assert resp.status_code == 422 and "<script>" not in resp.text


def test_openapi_references_resolve_and_docs_are_offline(client):
    spec = client.get("/openapi.json").json()
    text = json.dumps(spec)
    for ref in {r for r in text.split('"$ref": "')[1:]}:
        name = ref.split('"')[0]
        assert name.startswith("#/components/schemas/") and name.rsplit("/", 1)[1] in spec["components"]["schemas"]
    body = spec["paths"]["/v1/documents"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/DocumentsRequest")
    docs = client.get("/docs").text
    assert "cdn" not in docs.lower() and "swagger-ui-bundle.js" in docs
    assert client.get("/static-offline-docs/swagger-ui-bundle.js").status_code == 200


def test_oversized_headers_are_431(client):
    resp = client.get("/healthz", headers={"X-Big": "x" * 10_000})
    assert resp.status_code == 431 and resp.json()["error"]["code"] == "headers_too_large"


@pytest.mark.parametrize("doc_id", ["\u200b", "\ufeffinvoice", "invoice-\u202egnp.exe"])
def test_ids_with_invisible_format_characters_are_422_naming_the_field(client, doc_id):
    auth = {"Authorization": f"Bearer {KEY}"}
    resp = _post(client, "/v1/documents", {"documents": [{"id": doc_id, "text": "x"}]}, headers=auth)
    assert resp.status_code == 422 and resp.json()["error"]["message"].startswith("documents.0.id"), resp.text
    resp = client.delete("/v1/documents/" + quote(doc_id, safe=""), headers=auth)
    assert resp.status_code == 422 and resp.json()["error"]["message"].startswith("doc_id"), resp.text
    assert not client.gw.appended


def test_no_redirect_is_built_from_the_host_header(client):
    auth = {"Authorization": f"Bearer {KEY}", "Host": "evil.example"}
    for method, path in [("DELETE", "/v1/documents/"), ("POST", "/v1/query/"), ("GET", "/v1/models/")]:
        resp = client.request(method, path, headers=auth, follow_redirects=False)
        assert resp.status_code in (404, 405) and "location" not in resp.headers, (method, path, resp.status_code)
        assert resp.json()["error"]["code"] in ("not_found", "method_not_allowed")


@pytest.mark.parametrize("raw, why", [
    (b'{"question": "caf\xe9"}', "not valid UTF-8"),
    (b'{"question": "q"', "not valid JSON"),
    (b'{"question": "q", "top_k": ' + b"9" * 5000 + b"}", "digits"),
    (b'{"documents": [{"text": "t", "metadata": {"score": NaN}}]}', "NaN is not JSON"),
    (b'{"question": "q", "top_k": -Infinity}', "-Infinity is not JSON"),
])
def test_every_unparseable_body_is_400_malformed(client, raw, why):
    resp = _post(client, "/v1/query", raw)
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["code"] == "malformed" and why in err["message"], resp.text
    assert not client.gw.asked


def test_two_authorization_headers_are_refused_naming_the_header(client):
    for pair in [(f"Bearer {KEY}", "Bearer wrong"), ("Bearer wrong", f"Bearer {KEY}")]:
        headers = [("Content-Type", "application/json")] + [("Authorization", v) for v in pair]
        resp = client.post("/v1/documents", content=json.dumps({"documents": [{"text": "x"}]}).encode(),
                           headers=headers)
        err = resp.json()["error"]
        assert resp.status_code == 400 and err["code"] == "malformed" and err["message"].startswith("authorization")
    assert not client.gw.appended


def _chat(client, extra: dict, messages: list | None = None) -> Any:
    body = {"model": "hygraph", "messages": messages or [{"role": "user", "content": "hi"}], **extra}
    return _post(client, "/v1/chat/completions", body)


@pytest.mark.parametrize("extra, field", [
    ({"n": 3}, "n"), ({"n": 0}, "n"), ({"temperature": 5}, "temperature"), ({"temperature": -0.1}, "temperature"),
    ({"top_p": 7}, "top_p"), ({"max_tokens": -5}, "max_tokens"), ({"max_tokens": 0}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"), ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"), ({"temperature": "hot"}, "temperature"),
    ({"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
])
def test_chat_parameters_outside_openais_ranges_are_422_naming_them(client, extra, field):
    resp = _chat(client, extra)
    assert resp.status_code == 422 and resp.json()["error"]["message"].startswith(field + ":"), resp.text
    assert not client.gw.asked


def test_chat_parameters_inside_openais_ranges_are_accepted(client):
    extra = {"n": 1, "temperature": 2, "top_p": 0, "max_tokens": 1, "presence_penalty": -2, "frequency_penalty": 2.0,
             "seed": 7, "user": "u1"}
    out = _chat(client, extra).json()
    assert len(out["choices"]) == 1 and out["choices"][0]["message"]["content"] == "42"


@pytest.mark.parametrize("messages, where", [
    ([{"role": "system", "content": "be brief"}, {"role": "user", "content": "\u200b\u200b"}], "messages.1.content"),
    ([{"role": "user", "content": "ok"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": " "}],
     "messages.2.content"),
    ([{"role": "user", "content": [{"type": "text", "text": "\ufeff"}]}], "messages.0.content"),
    ([{"role": "system", "content": "s"}, {"role": "user", "content": "x" * 2001}], "messages.1.content"),
])
def test_chat_errors_name_the_offending_message(client, messages, where):
    resp = _chat(client, {}, messages)
    assert resp.status_code == 422 and resp.json()["error"]["message"].startswith(where + ":"), resp.text
    assert "question" not in resp.json()["error"]["message"]
    assert not client.gw.asked


def _chunks(resp: Any) -> list[Any]:
    data = [line.removeprefix("data: ") for line in resp.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def test_streamed_usage_is_openais_separate_last_chunk(client):
    chunks = _chunks(_chat(client, {"stream": True, "stream_options": {"include_usage": True}}))
    *body, last = chunks
    assert last["choices"] == [] and last["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    assert all(c["usage"] is None and len(c["choices"]) == 1 for c in body)
    assert body[-1]["choices"][0]["finish_reason"] == "stop" and "hygraph" in body[-1]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in body) == "42"
    # Without it, as OpenAI does: no usage in any chunk.
    chunks = _chunks(_chat(client, {"stream": True}))
    assert all("usage" not in c and len(c["choices"]) == 1 for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_status_needs_a_key_whenever_keys_are_configured(client):
    """`require_key_for_reads` is off: questions are open, the updater's and jobs' status are not."""
    assert _post(client, "/v1/query", {"question": "q"}).status_code == 200
    for path in ["/v1/updater", "/v1/jobs/" + "a" * 32]:
        resp = client.get(path)
        assert resp.status_code == 401 and resp.json()["error"]["code"] == "unauthorized", path
    auth = {"Authorization": f"Bearer {KEY}"}
    assert client.get("/v1/updater", headers=auth).json() == {"pending": 0, "last_error": None}
    assert client.get("/v1/jobs/" + "a" * 32, headers=auth).status_code == 404


def test_an_index_whose_info_cannot_be_read_is_listed_with_nulls(client):
    """Not dropped from GET /v1/indexes (it would look free to create, then get 409); gone ones are."""
    from hygraph.store.registry import IndexInfo, NoSuchIndex

    def info(name: str, size: bool = True) -> IndexInfo:
        if name == "default":
            return IndexInfo("default", 4, 3, None)
        raise OSError(f"/secret/path/{name}: stale file handle") if name == "broken" else NoSuchIndex(name)

    client.gw.registry.names = lambda: ["broken", "default", "gone"]
    client.gw.registry.info = info
    out = client.get("/v1/indexes", headers={"Authorization": f"Bearer {KEY}"})
    assert out.status_code == 200
    rows = out.json()["indexes"]
    assert [r["name"] for r in rows] == ["broken", "default"]
    assert rows[0]["documents"] is None and rows[0]["index_version"] is None
    assert "OSError" in rows[0]["error"] and "/secret" not in out.text
    assert rows[1] == {"name": "default", "documents": 4, "index_version": 3}
