"""Hostile input against `hygraph serve` as a user runs it (Ray num_cpus=2, the managed vector store,
the bundled model, a small graph index): ids that were code, poison journal lines, a request that
would fail its batch-mates, bodies that never end, and schema-driven fuzzing of every route.
Every acknowledged document must be present exactly once afterwards and nothing else deleted;
no answer may be a 5xx; every socket the service opened must be on loopback."""

from __future__ import annotations

import collections
import json
import socket
import threading
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from hygraph.client import Client
from hygraph.core.retrieval.modes import MODE_NAMES
from hygraph.store.journal import DeleteDocuments, InsertDocuments
from hygraph.store.object_journal import open_journal
from tests.index_tables import doc_ids
from tests.integration.conftest import WRITER_KEY
from tests.sockets import exposed, listening

pytestmark = pytest.mark.integration
KEY = WRITER_KEY
AUTH = {"Authorization": f"Bearer {KEY}"}
INJECTION = "zz'] or id not in ['"
HOSTILE_IDS = [INJECTION, "D'Arcy-notes", 'quote"double', "back\\slash", "a/b/../c", "x?y=1#frag", "50%25",
               "‘curly’ “quotes”", "or 1=1 --", "[brackets]", "naïve ☃ 東京", "id not in ['a']", "a" * 256]
REFUSED_IDS = ["line\nbreak", "nul\x00", "lone\ud800", "a" * 257, "a" * 511, "a" * 512, "a" * 513, " lead", ".",
               "\u200b", "\ufeffbom", "invoice-\u202egnp.exe"]


@pytest.fixture(scope="module")
def hostile_server(writable_server_handle):
    """The session's writable server (a copy of its index, with the limits these tests need, shared with the
    console's module, which runs before and leaves the documents as it found them): these tests write and
    delete a lot. The last module to use it: stopped when this one ends."""
    srv = dict(writable_server_handle.get())
    srv["initial"] = set(doc_ids(srv["index_dir"]))
    yield srv
    writable_server_handle.stop()


def _documents(index_dir: Path) -> list[str]:
    return doc_ids(index_dir)


def _expected(index_dir: Path, initial: set[str]) -> set[str]:
    """The documents the journal says must be present: replayed in order, failed jobs skipped."""
    journal = open_journal(index_dir)
    failed = journal.failed()
    present = set(initial)
    for job in journal.jobs():
        if job.job_id in failed:
            continue
        if isinstance(job.request, InsertDocuments):
            present |= {d.id for d in job.request.documents}
        elif isinstance(job.request, DeleteDocuments):
            present -= set(job.request.ids)
    return present


def _settle(client: Client, job_ids: list[str], timeout: float = 300) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    out = {}
    for job_id in job_ids:
        while (job := client.job(job_id))["status"] not in ("done", "failed"):
            assert time.monotonic() < deadline, f"job {job_id} never settled: {job}"
            time.sleep(0.5)
        out[job_id] = job
    return out


def test_every_listening_socket_is_on_loopback(hostile_server):
    """`hygraph serve`, everything it started, and the index's managed vector store."""
    store = json.loads((hostile_server["index_dir"] / "milvus" / "server.json").read_text())["pid"]
    sockets = listening(hostile_server["proc"].pid, store)
    print("\nlistening sockets of `hygraph serve`:\n" + "\n".join(f"  {s}" for s in sockets))
    assert sockets and not exposed(sockets), [str(s) for s in exposed(sockets)]


def test_the_injection_id_is_stored_harmlessly_and_deletes_only_itself(hostile_server):
    with Client(hostile_server["url"], api_key=KEY) as c:
        question = "Which magazine was started first, Arthur's Magazine or First for Women?"
        before = {m: [p["id"] for p in c.query(question, mode=m)["passages"]] for m in ("dense", "hybrid")}
        text = "Quillfeather Zanzibart is the injection canary of the hostile-input test."
        job = c.add_documents([{"id": INJECTION, "title": "Canary", "text": text}])
        assert c.wait(job["job_id"])["status"] == "done"
        assert c.query("Who is Quillfeather Zanzibart?", mode="dense")["passages"][0]["id"] == INJECTION
        assert c.wait(c.delete_document(INJECTION)["job_id"])["status"] == "done"
        for mode, ids in before.items():
            assert [p["id"] for p in c.query(question, mode=mode)["passages"]] == ids, mode
        assert INJECTION not in _documents(hostile_server["index_dir"])
        assert hostile_server["initial"] <= set(_documents(hostile_server["index_dir"]))


def test_documents_and_stats_read_back_what_the_index_holds(hostile_server):
    """GET /v1/documents pages (by cursor) through exactly the stored documents, GET /v1/documents/{id} reads
    one, /v1/stats counts them; a delete of an id neither held nor queued is a 404 that journals nothing."""
    url, index_dir = hostile_server["url"], hostile_server["index_dir"]
    with Client(url, api_key=KEY) as c:
        doc = {"id": "reads/one?", "title": "Read back", "text": "Pellworth Quarrendine reads back whole."}
        assert c.wait(c.add_documents([doc])["job_id"])["status"] == "done"
        listed, cursor = [], None
        while True:
            page = c.documents(limit=7, cursor=cursor)
            listed += [d["id"] for d in page["documents"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert listed == sorted(_documents(index_dir)) and page["total"] == len(listed)
        got = c.document(doc["id"])
        assert (got["title"], got["text"], got["chunks"]) == (doc["title"], doc["text"], 1)
        stats = c.stats()
        assert stats["documents"] == len(listed) and stats["index_version"] >= c.seen_version
        assert stats["chunks"] >= len(listed) and stats["entities"] > 0 and stats["pending_jobs"] == 0
        journal = index_dir / "journal" / "journal.jsonl"
        size = journal.stat().st_size
        resp = httpx.delete(url + "/v1/documents/no-such-document", headers=AUTH)
        assert resp.status_code == 404 and journal.stat().st_size == size
        assert httpx.get(url + "/v1/documents/no-such-document").status_code == 404
        assert c.wait(c.delete_document(doc["id"])["job_id"])["status"] == "done"
    resp = httpx.get(url + "/v1/query")
    assert resp.status_code == 405 and resp.headers["allow"] == "POST"
    resp = httpx.post(url + "/v1/query", json={"query": "who?"})
    assert resp.json()["error"]["message"] == "query: unknown field 'query'; did you mean 'question'?"


def test_apostrophe_and_slash_ids_are_insertable_queryable_and_deletable(hostile_server):
    with Client(hostile_server["url"], api_key=KEY) as c:
        docs = [{"id": "D'Arcy-notes", "text": "Darcy Fenwhistle keeps the apostrophe notes in Ottawa."},
                {"id": "notes/2026/a.txt", "text": "Orblen Stavroguine files notes under a slashed path."}]
        assert c.wait(c.add_documents(docs)["job_id"])["status"] == "done"
        for mode in MODE_NAMES:
            out = c.query("Where does Darcy Fenwhistle keep the apostrophe notes?", mode=mode)
            assert out["index_version"] >= c.seen_version, mode
        assert c.query("Darcy Fenwhistle apostrophe notes", mode="dense")["passages"][0]["id"] == "D'Arcy-notes"
        assert c.query("Orblen Stavroguine slashed path", mode="dense")["passages"][0]["id"] == "notes/2026/a.txt"
        jobs = [c.delete_document(d["id"])["job_id"] for d in docs]
        assert all(j["status"] == "done" for j in _settle(c, jobs).values())
        # Read-your-writes: every mode answers from the version without them, none returns them.
        for mode in MODE_NAMES:
            ids = [p["id"] for p in c.query("Darcy Fenwhistle apostrophe notes Ottawa", mode=mode)["passages"]]
            assert not {"D'Arcy-notes", "notes/2026/a.txt"} & set(ids), mode


@pytest.mark.parametrize("doc_id", REFUSED_IDS)
def test_ids_outside_the_rule_are_422_before_anything_is_journaled(hostile_server, doc_id):
    journal = hostile_server["index_dir"] / "journal" / "journal.jsonl"
    size = journal.stat().st_size if journal.exists() else 0
    resp = httpx.post(hostile_server["url"] + "/v1/documents", headers={**AUTH, "Content-Type": "application/json"},
                      content=json.dumps({"documents": [{"id": doc_id, "text": "x"}]}).encode())
    assert resp.status_code == 422 and resp.json()["error"]["message"].startswith("documents.0.id"), resp.text
    assert len(resp.text) < 600  # no echo of a huge id
    # In a path: a lone surrogate travels as its (invalid) UTF-8 bytes, and "." is folded away by URL
    # normalization before the route is matched (405): refused either way, nothing journaled.
    path = quote(doc_id.encode("utf-8", "surrogatepass"), safe="")
    resp = httpx.delete(hostile_server["url"] + "/v1/documents/" + path, headers=AUTH)
    assert 400 <= resp.status_code < 500, resp.text
    if resp.status_code == 422:
        assert resp.json()["error"]["message"].startswith("doc_id"), resp.text
    assert (journal.stat().st_size if journal.exists() else 0) == size


def test_a_poison_journal_line_never_blocks_the_jobs_after_it(hostile_server):
    """A line an older version journaled (an id with a newline) or a torn hand edit: marked failed, skipped."""
    journal = hostile_server["index_dir"] / "journal" / "journal.jsonl"
    journal.parent.mkdir(exist_ok=True)
    with journal.open("ab") as fh:
        fh.write(json.dumps({"job_id": "e" * 32, "op": "insert", "accepted_at": time.time(),
                             "documents": [{"id": "bad\nid", "text": "old poison"}]}).encode() + b"\n")
        fh.write(b"{not json}\n")
    with Client(hostile_server["url"], api_key=KEY) as c:
        job = c.add_documents([{"id": "after-poison", "text": "Bexley Marrowpine arrived after the poison."}])
        assert c.wait(job["job_id"], timeout_s=120)["status"] == "done"
        poison = c.job("e" * 32)
        assert poison["status"] == "failed" and "documents.0.id" in poison["error"] and len(poison["error"]) < 400
        assert c.query("Bexley Marrowpine", mode="dense")["passages"][0]["id"] == "after-poison"
    status = httpx.get(hostile_server["url"] + "/v1/updater", headers=AUTH).json()
    assert status["pending"] == 0 and not status["last_error"]


def test_a_surrogate_question_is_422_and_its_batch_mates_are_answered(hostile_server):
    url = hostile_server["url"]
    results: list[int] = []
    good = {"model": "hygraph", "messages": [{"role": "user", "content": "Who founded Arthur's Magazine?"}],
            "hygraph": {"mode": "dense"}}
    bad = {"model": "hygraph", "messages": [{"role": "user", "content": "Oahu \ud800 luau"}]}

    def ask(body: dict) -> None:
        raw = json.dumps(body).encode()  # ensure_ascii: the lone surrogate travels as \ud800
        results.append(httpx.post(url + "/v1/chat/completions", content=raw, timeout=60,
                                  headers={"Content-Type": "application/json"}).status_code)

    threads = [threading.Thread(target=ask, args=(bad if i % 4 == 0 else good,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert collections.Counter(results) == {200: 12, 422: 4}, results


def test_bodies_that_are_too_deep_truncated_or_oversized_never_hang_or_500(hostile_server):
    url = hostile_server["url"]
    deep = ("[" * 5000 + "]" * 5000).encode()
    resp = httpx.post(url + "/v1/query", content=deep, headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and "nested" in resp.json()["error"]["message"]
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"question\": \"tru")
        t0 = time.monotonic()
        reply = s.recv(4096).decode("latin-1")
        assert reply.startswith("HTTP/1.1 408") and time.monotonic() - t0 < 20, reply[:200]
    resp = httpx.get(url + "/healthz", headers={"X-Big": "x" * 200_000})
    assert 400 <= resp.status_code < 500
    # Ray Serve's proxy echoes a client's X-Request-Id as given; hygraph's own ids (error bodies, logs) are
    # tokens it generated when the client's is not one.
    resp = httpx.get(url + "/v1/jobs/nope", headers={**AUTH, "X-Request-Id": "<script>" * 50})
    assert resp.status_code == 404 and "<" not in resp.json()["error"]["request_id"]


def test_http_edges_through_the_real_proxy(hostile_server):
    """Serve's proxy in front: no redirect from Host, one `malformed` per unparseable body, a second
    Authorization header refused, status behind the key, and no header-read timeout of its own."""
    url = hostile_server["url"]
    resp = httpx.delete(url + "/v1/documents/", headers={**AUTH, "Host": "evil.example"})
    assert resp.status_code in (404, 405) and "location" not in resp.headers, resp.headers
    json_type = {"Content-Type": "application/json"}
    for raw in (b'{"question": "caf\xe9"}', b'{"question": "q", "top_k": ' + b"9" * 5000 + b"}"):
        resp = httpx.post(url + "/v1/query", content=raw, headers=json_type)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "malformed", resp.text
    two = [("Authorization", f"Bearer {KEY}"), ("Authorization", "Bearer wrong"), *json_type.items()]
    resp = httpx.post(url + "/v1/documents", content=b'{"documents": [{"text": "x"}]}', headers=two)
    assert resp.status_code == 400 and resp.json()["error"]["message"].startswith("authorization"), resp.text
    for path in ("/v1/updater", "/v1/jobs/" + "0" * 32):
        assert httpx.get(url + path).status_code == 401, path
    # Serve's proxy (uvicorn) never times out a request's headers: docs/operations.md puts that timeout
    # in the ingress. When this starts failing, Serve has one: update the docs and k8s/ingress-nginx.
    host, port = url.removeprefix("http://").split(":")
    held = [socket.create_connection((host, int(port)), timeout=5) for _ in range(3)]
    try:
        for s in held:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Half: ")
        time.sleep(15)
        for s in held:
            s.settimeout(0.5)
            with pytest.raises(socket.timeout):  # neither an answer nor a close: still held
                s.recv(1)
        assert httpx.get(url + "/healthz").status_code == 200
    finally:
        for s in held:
            s.close()


def test_schema_driven_fuzzing_of_every_route(hostile_server):
    """Schemathesis draws valid and invalid requests for every operation of /openapi.json (every
    reference must resolve); no 5xx, no hang; afterwards the documents are exactly what the journal's
    acknowledged jobs say."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode

    url = hostile_server["url"]
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    statuses: collections.Counter = collections.Counter()
    acknowledged: list[str] = []
    started = time.monotonic()
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        @settings(max_examples=150, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(case=schema.as_strategy(generation_mode=mode))
        def fuzz(case) -> None:
            resp = case.call(base_url=url, headers=AUTH, timeout=30)
            statuses[resp.status_code] += 1
            assert resp.status_code < 500, (case.method, case.path, resp.status_code, resp.text[:300])
            if resp.status_code == 202 and case.path in ("/v1/documents", "/v1/documents/{doc_id}"):
                acknowledged.append(resp.json()["job_id"])
        fuzz()
    sent = sum(statuses.values())
    print(f"\nschemathesis: {sent} requests in {time.monotonic() - started:.0f} s, statuses {dict(statuses)}")
    assert sent >= 200 and statuses[422] and any(200 <= s < 300 for s in statuses)
    with Client(url, api_key=KEY) as c:
        _settle(c, acknowledged)
    index_dir = hostile_server["index_dir"]
    docs = _documents(index_dir)
    assert len(docs) == len(set(docs)), "a document is present twice"
    assert set(docs) == _expected(index_dir, hostile_server["initial"])


def test_hostile_corpus_round_trip_loses_and_adds_nothing(hostile_server):
    index_dir = hostile_server["index_dir"]
    before = set(_documents(index_dir))
    docs = [{"id": d, "title": f"hostile {i}", "text": f"Hostile canary number {i} is Vexwillow{i} Crannock."}
            for i, d in enumerate(HOSTILE_IDS)]
    with Client(hostile_server["url"], api_key=KEY) as c:
        assert c.wait(c.add_documents(docs)["job_id"])["status"] == "done"
        present = _documents(index_dir)
        assert {d["id"] for d in docs} | before == set(present) and len(present) == len(set(present))
        for i, d in enumerate(docs):
            assert c.query(f"Vexwillow{i} Crannock", mode="dense")["passages"][0]["id"] == d["id"]
            assert c.query(f"Vexwillow{i} Crannock", mode="hybrid")["passages"]
        jobs = [c.delete_document(d["id"])["job_id"] for d in docs]
        assert all(j["status"] == "done" for j in _settle(c, jobs).values())
    assert set(_documents(index_dir)) == before
    assert set(_documents(index_dir)) == _expected(index_dir, hostile_server["initial"])
