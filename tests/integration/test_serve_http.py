"""End to end: `hygraph serve` as a user runs it (Ray num_cpus=2, the embedded Milvus server, bundled model),
driven over HTTP, by the project's client and by the official `openai` client; then Ctrl-C."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import httpx
import psutil
import pytest
from openai import OpenAI

from hygraph.client import ApiError, Client
from hygraph.core.retrieval.modes import MODE_NAMES
from hygraph.store.versions import IndexStore
from tests.index_tables import chunk_ids, doc_ids
from tests.readme_examples import RUN, examples, how, run
from tests.integration.conftest import copy_index, last_json, run_cli, serving

pytestmark = pytest.mark.integration
KEY = "test-key-5f2c"
ADMIN = "admin-key-91d0"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(built_index, tmp_path_factory):
    """The service on a copy of the session's index: this module writes to it and publishes a small version of
    its own (test_a_new_version_is_served_without_failed_queries), which the modules after it must not see."""
    work = tmp_path_factory.mktemp("serve")
    index_dir = work / "index"
    copy_index(built_index[0], index_dir)
    log = work / "serve.log"
    with serving(index_dir, log, HYGRAPH_API_KEYS=KEY, HYGRAPH_ADMIN_KEYS=ADMIN,
                 HYGRAPH__SERVE__MAX_BODY_BYTES="65536", HYGRAPH__UPDATES__NAMED_IDLE_STOP_S="15") as srv:
        yield srv


QUESTION = "Which magazine was started first, Arthur's Magazine or First for Women?"


@pytest.mark.parametrize("mode", MODE_NAMES)
def test_every_mode_answers_over_http(server, mode):
    out = server["client"].query(QUESTION, mode=mode, top_k=5)
    assert out["mode"] == mode
    assert 0 < len(out["passages"]) <= 5
    assert all({"id", "title", "score"} <= p.keys() for p in out["passages"])
    assert out["index_version"] == 1
    assert out["answer"]
    assert set(out["timings_ms"]) == {"embed", "retrieve", "generate", "total"}


def test_repeated_questions_hit_the_answer_cache_unless_cache_control_says_no(server):
    """A repeat is answered from the cache (`timings_ms` says so); `Cache-Control: no-cache` computes it afresh
    and keeps the result, `no-store` computes it and keeps nothing."""
    def ask(question: str, cache_control: str | None = None) -> dict:
        headers = {**AUTH, **({"Cache-Control": cache_control} if cache_control else {})}
        r = httpx.post(f"{server['url']}/v1/query", json={"question": question, "mode": "dense"}, headers=headers,
                       timeout=60)
        assert r.status_code == 200, r.text
        return r.json()

    def cached(out: dict) -> bool:
        return "cache" in out["timings_ms"]

    question = "Which periodical did the answer cache test ask about first?"  # asked by no other test
    first = ask(question)
    again = ask(question)
    assert not cached(first) and cached(again) and again["passages"] == first["passages"]
    assert not cached(ask(question, "no-cache")) and cached(ask(question))
    other = "Which periodical did the answer cache test ask about second?"
    assert not cached(ask(other, "max-age=0, No-Store")) and not cached(ask(other)) and cached(ask(other))


def test_http_and_cli_agree(server):
    """The CLI attaches to the server's Milvus process and ranks exactly as the Retriever does."""
    out = server["client"].query(QUESTION, mode="hybrid", top_k=5)
    cli = last_json(run_cli("query", "--index-dir", str(server["index_dir"]), "--mode", "hybrid", QUESTION))
    assert [p["id"] for p in out["passages"]] == [p["id"] for p in cli["passages"]]
    assert out["answer"] == cli["answer"]


def test_query_stream_sends_tokens_then_the_result(server):
    events = list(server["client"].query_stream(QUESTION, mode="dense"))
    kinds = [e for e, _ in events]
    assert kinds[-1] == "done" and kinds.count("done") == 1 and "token" in kinds
    final = events[-1][1]
    assert "".join(d["text"] for e, d in events if e == "token").strip() == final["answer"]
    assert final["passages"] and final["mode"] == "dense"


def test_openai_client_chat_completions(server):
    oai = OpenAI(base_url=server["url"] + "/v1", api_key="unused-for-reads")
    reply = oai.chat.completions.create(model="hygraph", messages=[{"role": "user", "content": QUESTION}])
    text = reply.choices[0].message.content
    assert text and reply.choices[0].finish_reason == "stop"
    ext = reply.model_extra["hygraph"]
    assert ext["passages"] and ext["mode"] == "hybrid"

    stream = oai.chat.completions.create(model="hygraph", messages=[{"role": "user", "content": QUESTION}],
                                         stream=True, extra_body={"hygraph": {"mode": "dense"}})
    chunks = list(stream)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed.strip()
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].model_extra["hygraph"]["mode"] == "dense"


@contextmanager
def queries_running(url: str, pause_s: float) -> Iterator[tuple[list[int], list[str]]]:
    """A thread asking QUESTION in hybrid mode every `pause_s` until the block ends: (versions seen, failures)."""
    versions: list[int] = []
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:
        with Client(url) as c:
            while not stop.is_set():
                try:
                    versions.append(c.query(QUESTION, mode="hybrid")["index_version"])
                except Exception as exc:  # noqa: BLE001 - every failure is the test's finding
                    failures.append(repr(exc))
                time.sleep(pause_s)

    worker = threading.Thread(target=load)
    worker.start()
    try:
        yield versions, failures
    finally:
        stop.set()
        worker.join(60)


def _wait_done(client: Client, job_id: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while (job := client.job(job_id))["status"] != "done":
        assert job["status"] in ("queued", "running"), job
        assert time.monotonic() < deadline, f"job {job_id} not applied: {job}"
        time.sleep(0.5)
    return job


def test_writes_need_the_key_are_journaled_and_applied_under_query_load(server):
    """Insert, then delete, while a thread queries: the updater applies both as new versions, the
    Retriever follows, no query fails; the document is retrievable in between and gone after."""
    doc = {"id": "hygraph-test-doc", "title": "Zorblatt Quanterwick",
           "text": "Zorblatt Quanterwick is a Graph-RAG serving system built on Ray by the Hygraph team."}
    question = "What is Zorblatt Quanterwick built on?"
    with pytest.raises(ApiError) as err:
        server["client"].add_documents([doc])
    assert err.value.status == 401 and err.value.code == "unauthorized"
    with Client(server["url"], api_key="wrong") as bad, pytest.raises(ApiError) as err:
        bad.add_documents([doc])
    assert err.value.status == 401
    with queries_running(server["url"], 0.1) as (versions, failures):
        with Client(server["url"], api_key=KEY) as authed:
            accepted = authed.add_documents([doc])
            assert accepted["accepted"] == 1 and accepted["ids"] == [doc["id"]]
            inserted = _wait_done(authed, accepted["job_id"])
            assert inserted["index_version"] >= 2
            deadline = time.monotonic() + 60
            while (out := authed.query(question, mode="dense"))["index_version"] < inserted["index_version"]:
                assert time.monotonic() < deadline, "the Retriever did not follow the updater"
                time.sleep(0.5)
            assert out["passages"][0]["id"] == doc["id"]
            # Served before its summaries (updates.defer_summaries_s); they follow once the journal is idle.
            assert inserted["summaries"] in ("pending", "done")
            deadline = time.monotonic() + 120
            while authed.job(accepted["job_id"])["summaries"] != "done":
                assert time.monotonic() < deadline, "the deferred summaries never landed"
                time.sleep(0.5)
            deleted = authed.delete_document(doc["id"])
            assert deleted["job_id"] != accepted["job_id"]
            removed = _wait_done(authed, deleted["job_id"])
            assert removed["index_version"] > inserted["index_version"]
            deadline = time.monotonic() + 60
            while authed.query(question, mode="dense")["index_version"] < removed["index_version"]:
                assert time.monotonic() < deadline
                time.sleep(0.5)
            for mode in MODE_NAMES:
                out = authed.query(question, mode=mode)
                assert doc["id"] not in [p["id"] for p in out["passages"]], mode
                # `notes` echo the question (hyperbolic's directives); everything else came from the index.
                assert "Zorblatt" not in json.dumps({k: v for k, v in out["context"].items() if k != "notes"}), mode
    assert not failures, failures[:3]
    assert versions and versions == sorted(versions)  # one Retriever replica: it only moves forward
    lines = [json.loads(l) for l in (server["index_dir"] / "journal" / "journal.jsonl").read_text().splitlines()]
    assert [(l["job_id"], l["op"]) for l in lines[-2:]] == \
        [(accepted["job_id"], "insert"), (deleted["job_id"], "delete")]
    with pytest.raises(ApiError) as err:
        server["client"].job(accepted["job_id"])
    assert err.value.status == 401  # job status needs a key whenever keys are configured
    with Client(server["url"], api_key=KEY) as authed, pytest.raises(ApiError) as err:
        authed.job("no-such-job")
    assert err.value.status == 404


def test_document_metadata_is_kept_returned_and_filters_every_mode(server):
    """Documents inserted with metadata: GET returns it, the listing too, every passage of a query carries its
    document's; a query's `filter` keeps only matching documents' passages in every mode (filled up to
    top_k from them by dense similarity when a mode's own ranking reaches too few), nothing matching is an
    empty 200, and the CLI's `--filter` agrees."""
    team = "hygraph-metadata-test"
    metas = [{"team": team, "lang": "en", "year": 2024, "tags": ["x"]},
             {"team": team, "lang": "fr", "year": 2023, "tags": ["x", "y"]},
             {"team": team, "lang": "en", "year": 2023.0, "note": "naïve ☃"}]
    docs = [{"id": f"meta-doc-{i}", "title": f"Vellichor Station {i}",
             "text": f"Vellichor Station {i} is an archive of tide tables kept on the northern coast.",
             "metadata": meta} for i, meta in enumerate(metas)]
    with Client(server["url"], api_key=KEY) as authed:
        version = _wait_done(authed, authed.add_documents(docs)["job_id"])["index_version"]
        authed.seen_version = version  # read-your-writes: the queries below see the documents
        for doc in docs:
            # this replica's job status called the version done, so its reads are answered from it or a newer one
            got = httpx.get(f"{server['url']}/v1/documents/{doc['id']}", headers=AUTH).json()
            assert got["metadata"] == doc["metadata"], got
        listed, cursor = {}, None
        while True:
            page = httpx.get(server["url"] + "/v1/documents", headers=AUTH,
                             params={"limit": 1000, **({"cursor": cursor} if cursor else {})}).json()
            listed.update({d["id"]: d["metadata"] for d in page["documents"]})
            if not (cursor := page["next_cursor"]):
                break
        assert all(listed[d["id"]] == d["metadata"] for d in docs)
        english = {"meta-doc-0", "meta-doc-2"}
        for mode in MODE_NAMES:
            out = authed.query(QUESTION, mode=mode, top_k=5, filter={"team": team, "lang": "en"})
            assert {p["id"] for p in out["passages"]} == english, (mode, out["passages"])
            assert all(p["metadata"]["lang"] == "en" for p in out["passages"]), mode
            for kind in ("chunks", "entities", "relations", "hyperedges"):
                assert all(set(i["sources"]) <= english for i in out["context"][kind]), (mode, kind)
            assert out["context"]["summaries"] == [], mode
        out = authed.query("Which station keeps tide tables?", mode="dense", top_k=5, filter={"year": [2023]})
        assert {p["id"] for p in out["passages"]} == {"meta-doc-1", "meta-doc-2"}  # 2023 == 2023.0
        unfiltered = authed.query("Which station keeps tide tables?", mode="bm25", top_k=5)
        assert unfiltered["passages"][0]["metadata"]["team"] == team  # metadata comes with unfiltered passages too
        for mode in ("dense", "bm25", "hybrid"):
            none = authed.query(QUESTION, mode=mode, filter={"team": "nobody"})
            assert none["passages"] == [] and none["context"]["chunks"] == [], mode
        resp = httpx.post(server["url"] + "/v1/query", json={"question": QUESTION, "filter": {"year": {"gt": 1}}})
        assert resp.status_code == 422 and resp.json()["error"]["message"].startswith("filter.year"), resp.text
    cli = last_json(run_cli("query", "--index-dir", str(server["index_dir"]), "--mode", "hybrid", "--filter",
                            json.dumps({"lang": "fr", "tags": "y"}), QUESTION))
    assert [p["id"] for p in cli["passages"]] == ["meta-doc-1"]
    bad = run_cli("query", "--index-dir", str(server["index_dir"]), "--filter", '{"lang": {}}', QUESTION)
    assert bad.returncode == 2 and "filter.lang" in bad.stderr


@pytest.mark.parametrize("body, status, field", [
    (b"{not json", 400, "body"),
    (b'{"question": ""}', 422, "question"),
    (b'{"question": "   "}', 422, "question"),
    (b'{"question": 42}', 422, "question"),
    (b'{"question": "q", "mode": "sideways"}', 422, "mode"),
    (b'{"question": "q", "top_k": "five"}', 422, "top_k"),
    (b'{"question": "q", "top_k": 0}', 422, "top_k"),
    (b'{"question": "q", "colour": "red"}', 422, "colour"),
    (b'{"question": "q", "filter": {"lang": ["en", {"x": 1}]}}', 422, "filter.lang.1"),
    (b'{"question": "q", "filter": "lang=en"}', 422, "filter"),
    (b'[1, 2]', 422, "body"),
    (json.dumps({"question": "x" * 5000}).encode(), 422, "question"),
    (json.dumps({"question": "x" * 70000}).encode(), 413, "body"),
])
def test_bad_queries_get_a_clear_4xx(server, body, status, field):
    resp = httpx.post(server["url"] + "/v1/query", content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["message"].startswith(field) or field in err["message"], err


def test_bad_chat_and_unknown_routes(server):
    url = server["url"]
    resp = httpx.post(url + "/v1/chat/completions",
                      json={"model": "hygraph", "messages": [{"role": "system", "content": "hi"}]})
    assert resp.status_code == 422 and "messages" in resp.json()["error"]["message"]
    resp = httpx.post(url + "/v1/chat/completions",
                      json={"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    resp = httpx.get(url + "/v1/nothing")
    assert resp.status_code == 404 and "error" in resp.json()
    resp = httpx.post(url + "/v1/documents", json={"documents": [{"text": ""}]},
                      headers={"Authorization": f"Bearer {KEY}"})
    assert resp.status_code == 422 and resp.json()["error"]["message"].startswith("documents.0.text")


def test_health_and_openapi(server):
    assert httpx.get(server["url"] + "/healthz").json() == {"status": "ok"}
    # The write test before this one has moved the index past version 1.
    assert httpx.get(server["url"] + "/readyz").json()["index_version"] >= 1
    spec = httpx.get(server["url"] + "/openapi.json").json()
    assert {"/v1/query", "/v1/chat/completions", "/v1/documents", "/v1/jobs/{job_id}"} <= spec["paths"].keys()


def test_metrics_endpoint_shows_project_metrics(server):
    server["client"].query(QUESTION, mode="hybrid")
    wanted = ["ray_hygraph_query_latency_ms_bucket", "ray_hygraph_embed_batch_size_bucket",
              "ray_hygraph_retrieved_items_total", "ray_hygraph_index_version", "ray_hygraph_llm_calls_total",
              "ray_hygraph_errors_total"]
    deadline = time.monotonic() + 60  # Ray exports metrics every few seconds
    while True:
        text = httpx.get(server["metrics"]).text
        missing = [m for m in wanted if m not in text]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert not missing, missing
    assert 'mode="hybrid"' in text and 'stage="retrieve"' in text


def _status(call) -> int:
    try:
        call()
    except ApiError as err:
        return err.status
    return 200


def _stats_when_ready(client: Client) -> dict | None:
    try:
        return client.stats()
    except ApiError as err:
        if err.status != 503:
            raise
        return None


def test_two_tenants_never_see_each_other_and_deleting_one_leaves_the_rest(server):
    """CONTRACT "Indexes and keys": two named indexes made empty by an admin key, grown by inserts with keys
    scoped to one each; every route of the other index answers such a key 404, exactly as an index that does
    not exist; deleting one leaves the default index's and the other's answers as they were."""
    url = server["url"]
    docs = {"team-a": {"id": "a-1", "title": "Quorvath Lindqvist",
                       "text": "Quorvath Lindqvist is a lighthouse keeper on the island of Ystermark."},
            "team-b": {"id": "b-1", "title": "Melisandre Okonkwo-Vale",
                       "text": "Melisandre Okonkwo-Vale designs suspension bridges in Tarrowby."}}
    with Client(url, api_key=ADMIN) as admin, Client(url, api_key=KEY) as service:
        assert _status(lambda: server["client"].create_index("team-a")) == 401
        assert _status(lambda: service.create_index("team-a")) == 403
        assert _status(lambda: admin.create_index("Bad/Name")) == 422
        for name in docs:
            assert admin.create_index(name)["name"] == name
        assert _status(lambda: admin.create_index("team-a")) == 409
        keys = {name: admin.create_key({name: ["read", "write"]}, name=f"{name} writer")["key"] for name in docs}
        assert {i["name"] for i in admin.indexes()} >= {"default", *docs}
        default_before = [p["id"] for p in server["client"].query(QUESTION, mode="hybrid")["passages"]]

    clients = {name: Client(url, api_key=keys[name], index=name) for name in docs}
    try:
        for name, client in clients.items():
            deadline = time.monotonic() + 180
            while (stats := _stats_when_ready(client)) is None:  # its empty first version is being written
                assert time.monotonic() < deadline, f"index {name} never got its first version"
                time.sleep(1)
            assert stats["documents"] == 0 and stats["index_version"] == 1  # made empty
            client.wait(client.add_documents([docs[name]])["job_id"], timeout_s=300)
        for name, client in clients.items():
            other = "team-b" if name == "team-a" else "team-a"
            out = client.query(docs[name]["title"], mode="hybrid", top_k=5)
            assert [p["id"] for p in out["passages"]] == [docs[name]["id"]], name
            assert [i["name"] for i in client.indexes()] == [name]
            assert client.models() == [name]
            # Every route of the other tenant's index: 404, as for an index that does not exist.
            with Client(url, api_key=keys[name], index=other) as peek, \
                    Client(url, api_key=keys[name], index="no-such-index") as missing:
                for probe in (peek, missing):
                    assert _status(lambda: probe.query("anything")) == 404
                    assert _status(lambda: probe.stats()) == 404
                    assert _status(lambda: probe.documents()) == 404
                    assert _status(lambda: probe.document(docs[other]["id"])) == 404
                    assert _status(lambda: probe.delete_document(docs[other]["id"])) == 404
                    assert _status(lambda: probe.add_documents([docs[name]])) == 404
                    assert _status(lambda: probe.job("0" * 32)) == 404
                assert _status(lambda: client.index_info(other)) == 404
            oai = OpenAI(base_url=url + "/v1", api_key=keys[name])
            reply = oai.chat.completions.create(model=name, messages=[{"role": "user", "content": docs[name]["title"]}])
            assert reply.model_extra["hygraph"]["passages"][0]["id"] == docs[name]["id"]
            with pytest.raises(Exception) as err:
                oai.chat.completions.create(model=other, messages=[{"role": "user", "content": "q"}])
            assert getattr(err.value, "status_code", None) == 404
        # The default index is the service's: a key scoped to a named index has no rights there.
        assert _status(lambda: Client(url, api_key=keys["team-a"]).query(QUESTION)) == 404

        # Quotas per index: an admin holds team-a to one document; its next insert is refused, team-b's is not.
        extra = {"id": "a-x", "title": "Quota Probe", "text": "Quota Probe is one document too many."}
        assert _status(lambda: clients["team-a"].set_quota("team-a", max_documents=1)) == 403
        with Client(url, api_key=ADMIN) as admin, Client(url, api_key=KEY) as service:
            assert _status(lambda: service.set_quota("team-a", max_documents=1)) == 403
            assert _status(lambda: admin.set_quota("no-such-index", max_documents=1)) == 404
            assert admin.set_quota("team-a", max_documents=1)["quota"]["max_documents"] == 1
            assert admin.index_info("team-a")["quota"] == {"max_documents": 1, "max_bytes": None, "max_qps": None}
            time.sleep(1.5)  # every ingress replica rereads an index's limits within a second
            assert _status(lambda: clients["team-a"].add_documents([extra])) == 429
            assert admin.index_info("team-b")["quota"]["max_documents"] is None
            admin.reset_quota("team-a")
            assert admin.index_info("team-a")["quota"]["max_documents"] is None

        with Client(url, api_key=ADMIN) as admin:
            assert admin.delete_index("team-b")["job_id"]
            assert _status(lambda: admin.index_info("team-b")) == 404
        assert _status(lambda: clients["team-b"].query("anything")) == 404
        out = clients["team-a"].query(docs["team-a"]["title"], mode="hybrid", top_k=5)
        assert [p["id"] for p in out["passages"]] == [docs["team-a"]["id"]]
        assert [p["id"] for p in server["client"].query(QUESTION, mode="hybrid")["passages"]] == default_before
        gone = server["index_dir"] / "indexes"
        deadline = time.monotonic() + 120
        while sorted(p.name for p in gone.iterdir()) != ["team-a"]:
            assert time.monotonic() < deadline, sorted(p.name for p in gone.iterdir())
            time.sleep(1)

        # An idle named index's updater ends (updates.named_idle_stop_s, 15 s here); the next write starts one.
        deadline = time.monotonic() + 120
        while not (status := clients["team-a"].updater()).get("stopped"):
            assert time.monotonic() < deadline, status
            time.sleep(2)
        assert status["pending"] == 0 and status["index_version"] >= 2
        later = {"id": "a-2", "title": "Brannoch Eddystrand",
                 "text": "Brannoch Eddystrand repairs fog horns in Ystermark."}
        clients["team-a"].wait(clients["team-a"].add_documents([later])["job_id"], timeout_s=300)
        out = clients["team-a"].query(later["title"], mode="dense", top_k=1)
        assert [p["id"] for p in out["passages"]] == ["a-2"]
    finally:
        for client in clients.values():
            client.close()


# Each tenant's documents carry its marker word (and its id prefix): neither may appear in any other tenant's answer.
MARKERS = {"iso-a": "Vorquellan", "iso-b": "Shandrikel", "iso-c": "Tumbrevine"}
LOAD_S = 60
JOB_BOUND_S = 240  # one job from its 202 to done, on a loaded 2-core machine


def _tenant_doc(name: str, n: int) -> dict:
    marker = MARKERS[name]
    return {"id": f"{name}-{n}", "title": f"{marker} Keeper {n}",
            "text": f"{marker} Keeper {n} tends the {marker} archive, shelf {n}, and speaks only of {marker} matters."}


def test_three_tenants_under_mixed_load_never_see_each_other(server):
    """Issue 31: three indexes, three keys scoped one each, 60 s of concurrent queries (every mode, and chat),
    inserts and deletes per tenant: no answer, context or citation of one tenant holds another's marker word or
    document id; every read, write, delete and job lookup with a key scoped elsewhere answers 404; a poison
    job in one tenant's journal delays none of the others' jobs (each done within JOB_BOUND_S)."""
    url, names = server["url"], list(MARKERS)
    with Client(url, api_key=ADMIN) as admin:
        for name in names:
            admin.create_index(name)
        keys = {name: admin.create_key({name: ["read", "write"]}, name=f"{name} isolation")["key"] for name in names}
    problems: list[str] = []  # every violation, with what and where
    lags: dict[str, list[float]] = {name: [] for name in names}
    jobs: dict[str, list[str]] = {name: [] for name in names}  # real job ids, for cross-tenant lookups
    seeded: dict[str, list[str]] = {name: [] for name in names}
    lock = threading.Lock()

    def foreign(name: str, payload: object) -> list[str]:
        text = json.dumps(payload)
        return [other for other in names if other != name and (MARKERS[other] in text or f'"{other}-' in text)]

    def seed(name: str) -> None:
        with Client(url, api_key=keys[name], index=name) as c:
            deadline = time.monotonic() + JOB_BOUND_S
            while _stats_when_ready(c) is None:  # its empty first version is being written
                assert time.monotonic() < deadline, f"index {name} never got its first version"
                time.sleep(1)
            docs = [_tenant_doc(name, n) for n in range(3)]
            job = c.add_documents(docs)["job_id"]
            c.wait(job, timeout_s=JOB_BOUND_S)
            jobs[name].append(job)
            seeded[name] = [d["id"] for d in docs]

    threads = [threading.Thread(target=seed, args=(name,)) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOB_BOUND_S + 60)
    assert all(seeded[name] for name in names), f"seeding failed: {seeded}"

    # A poison job in iso-a's journal (an id an older version accepted): marked failed, and nobody waits on it.
    poison_id = "f" * 32
    journal = server["index_dir"] / "indexes" / "iso-a" / "journal" / "journal.jsonl"
    with journal.open("ab") as fh:
        fh.write(json.dumps({"job_id": poison_id, "op": "insert", "accepted_at": time.time(),
                             "documents": [{"id": "bad\nid", "text": f"{MARKERS['iso-a']} poison"}]}).encode() + b"\n")
    stop = time.monotonic() + LOAD_S
    counts = collections.Counter()

    def reader(name: str) -> None:
        oai = OpenAI(base_url=url + "/v1", api_key=keys[name], timeout=120)
        with Client(url, api_key=keys[name], index=name, timeout_s=120) as c:
            i = 0
            while time.monotonic() < stop:
                question = f"What does {MARKERS[name]} Keeper {i % 5} tend?"
                try:
                    if i % 5 == 4:
                        messages = [{"role": "user", "content": question}]
                        out, what = oai.chat.completions.create(model=name, messages=messages).model_dump(), "chat"
                    else:
                        mode = MODE_NAMES[i % len(MODE_NAMES)]
                        out, what = c.query(question, mode=mode, top_k=5), mode
                except ApiError as exc:
                    if exc.status not in (429, 503):  # overloaded, with Retry-After: normal on a loaded machine
                        with lock:
                            problems.append(f"{name} {MODE_NAMES[i % len(MODE_NAMES)]} query {i}: {exc}"[:300])
                    i += 1
                    time.sleep(float(exc.retry_after or 1))
                    continue
                except Exception as exc:  # noqa: BLE001 - recorded as a problem, the load goes on
                    with lock:
                        problems.append(f"{name} query {i}: {exc!r}"[:300])
                    i += 1
                    continue
                if leaked := foreign(name, out):
                    with lock:
                        problems.append(f"{name} {what} answer holds {leaked}'s documents: {json.dumps(out)[:300]}")
                with lock:
                    counts[f"{name} queries"] += 1
                i += 1

    def writer(name: str) -> None:
        with Client(url, api_key=keys[name], index=name, timeout_s=120) as c:
            n, inserted = 100, None
            while time.monotonic() < stop:
                try:
                    t0 = time.monotonic()
                    job = c.add_documents([_tenant_doc(name, n)])["job_id"]
                    with lock:
                        jobs[name].append(job)
                    c.wait(job, timeout_s=JOB_BOUND_S)
                    lags[name].append(time.monotonic() - t0)
                    if inserted is not None:  # every other insert deletes the one before it
                        t0 = time.monotonic()
                        c.wait(c.delete_document(inserted)["job_id"], timeout_s=JOB_BOUND_S)
                        lags[name].append(time.monotonic() - t0)
                        inserted = None
                    else:
                        inserted = f"{name}-{n}"
                    with lock:
                        counts[f"{name} writes"] += 1
                except ApiError as exc:
                    if exc.status not in (429, 503):
                        with lock:
                            problems.append(f"{name} write {n}: {exc}"[:300])
                    time.sleep(float(exc.retry_after or 1))
                except Exception as exc:  # noqa: BLE001 - recorded as a problem, the load goes on
                    with lock:
                        problems.append(f"{name} write {n}: {exc!r}"[:300])
                n += 1

    def prober() -> None:
        """Every route of every other tenant's index, with each tenant's key: 404, as for no such index."""
        while time.monotonic() < stop:
            for name in names:
                for other in names:
                    if other == name:
                        continue
                    with lock:
                        other_job = jobs[other][-1]
                    with Client(url, api_key=keys[name], index=other, timeout_s=60) as peek, \
                            Client(url, api_key=keys[name], index=name, timeout_s=60) as own:
                        calls = {"query": lambda: peek.query("anything", mode="dense"),
                                 "stats": peek.stats, "documents": peek.documents,
                                 "document": lambda: peek.document(seeded[other][0]),
                                 "delete": lambda: peek.delete_document(seeded[other][0]),
                                 "insert": lambda: peek.add_documents([_tenant_doc(name, 999)]),
                                 "job": lambda: peek.job(other_job),
                                 "job via own index": lambda: own.job(other_job),
                                 "index info": lambda: peek.index_info(other)}
                        for what, call in calls.items():
                            status = _status(call)
                            with lock:
                                counts["cross-tenant probes"] += 1
                                if status != 404:
                                    problems.append(f"key of {name} on {other}: {what} answered {status}, not 404")
            time.sleep(1)

    threads = [threading.Thread(target=f, args=(name,)) for name in names for f in (reader, writer)]
    threads.append(threading.Thread(target=prober))
    for t in threads:
        t.start()
    for t in threads:
        t.join(LOAD_S + 2 * JOB_BOUND_S + 120)
    assert not any(t.is_alive() for t in threads), "a load thread is still running past every bound"
    try:
        assert not problems, f"{len(problems)} problems, the first ones: " + "\n".join(problems[:10])
        assert all(counts[f"{name} queries"] > 0 and counts[f"{name} writes"] > 0 for name in names), counts
        assert counts["cross-tenant probes"] > 0, counts
        assert all(max(lags[name]) < JOB_BOUND_S for name in ("iso-b", "iso-c")), lags
        with Client(url, api_key=keys["iso-a"], index="iso-a") as a:
            poison = a.job(poison_id)
            assert poison["status"] == "failed" and "documents.0.id" in poison["error"], poison
        # The deleted documents are gone from their own tenant; the others never had them.
        with Client(url, api_key=keys["iso-b"], index="iso-b") as b:
            ids = {d["id"] for d in b.documents(limit=1000)["documents"]}
            assert ids and all(i.startswith("iso-b-") for i in ids), ids
    finally:
        with Client(url, api_key=ADMIN) as admin:
            for name in names:
                admin.delete_index(name)


def test_every_readme_example_runs_as_written(server, tmp_path):
    """Issue 33: each shell and Python example of README.md runs against this service (its address, index
    directory and admin key put in for the README's) and prints what the README shows; the blocks not run
    say why (tests/readme_examples.py)."""
    (tmp_path / "new_docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in [
        {"id": "doc-1", "title": "Tamsin Orrery", "text": "Tamsin Orrery restores brass planetariums in Kettleby."},
        {"id": "doc-2", "title": "Odo Farrowgate", "text": "Odo Farrowgate breeds racing pigeons near Wendmoor."}]))
    ran = []
    for example in examples():
        kind, check = how(example)
        if kind == "skip":
            continue
        if "team-a" in example.code:  # the shell and the Python example both make team-a: each on a fresh name
            with Client(server["url"], api_key=ADMIN) as admin:
                # Deleted by name, not after a look at the list: an index whose first version is still being
                # written may not be listed yet, but its name is taken (a fresh-clone run got 409 'exists').
                try:
                    admin.delete_index("team-a")
                except ApiError as exc:
                    if exc.status != 404:
                        raise
        check(run(example, server["url"], server["index_dir"], ADMIN, {"KEY": KEY}, tmp_path))
        ran.append(example.line)
    assert len(ran) == len(RUN), ran


def test_hyperbolic_queries_feed_the_online_learner_and_recalibration_is_on_demand(server):
    """HyperRAG §3.3 over HTTP: a hyperbolic query reaches the updater as an L_inc step; a requested
    recalibration publishes a version the Retriever moves to, with no failed query meanwhile."""
    url = server["url"]
    deadline = time.monotonic() + 120
    # Run first (alone), the updater may still be loading its models: its status has no learner yet.
    while "online" not in (status := httpx.get(url + "/v1/updater", headers=AUTH).json()):
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    steps = status["online"]["steps"]
    server["client"].query(QUESTION, mode="hyperbolic")
    deadline = time.monotonic() + 30
    while (online := httpx.get(url + "/v1/updater", headers=AUTH).json()["online"])["steps"] == steps:
        assert time.monotonic() < deadline, online
        time.sleep(0.2)
    assert online["steps"] >= steps + 1 and online["since_recalibration"] >= 1
    # The Retriever holds the small index's points in process: the moves reach it by the learner's feed.
    deadline = time.monotonic() + 60  # Ray exports metrics every few seconds
    while not re.search(r"^ray_hygraph_points_moved_total\{.*\} [1-9]", httpx.get(server["metrics"]).text, re.M):
        assert time.monotonic() < deadline, "the Retriever's held points did not follow the online learner's moves"
        time.sleep(1)
    resp = httpx.post(url + "/v1/updater/recalibrate")
    assert resp.status_code == 401
    before = server["client"].query(QUESTION, mode="hyperbolic")["index_version"]
    with queries_running(url, 0.1) as (versions, failures):
        resp = httpx.post(url + "/v1/updater/recalibrate", headers={"Authorization": f"Bearer {KEY}"})
        assert resp.status_code == 202 and resp.json() == {"requested": True}
        deadline = time.monotonic() + 120
        while (status := httpx.get(url + "/v1/updater", headers=AUTH).json())["online"]["recalibrations"] < \
                online["recalibrations"] + 1:
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
        published = status["last_result"]["version"]
        assert published > before and status["last_result"]["recalibration"]["subgraphs"] >= 1
        while (out := server["client"].query(QUESTION, mode="hyperbolic"))["index_version"] < published:
            assert time.monotonic() < deadline, "the Retriever did not move to the recalibrated version"
            time.sleep(0.5)
        assert out["passages"]
    assert not failures, failures[:3]
    assert versions == sorted(versions)


def test_a_store_crash_leaves_a_small_index_answering_and_the_store_is_restarted(server):
    """kill -9 the managed Milvus server. The demo index's collections and hyperbolic points are held in the
    Retriever's process (store/exact.py, store/points.py), so a hyperbolic query is answered at once and never
    fails with a 500; Serve's health check restarts the Retriever, whose store connection starts a new server
    (while it restarts, a query may get a 503 with Retry-After)."""
    lite = _store_pid(server["index_dir"])
    os.kill(lite, signal.SIGKILL)
    statuses = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        # A question no other test asks: an earlier test's answer to QUESTION may still be in the answer cache.
        resp = httpx.post(server["url"] + "/v1/query", json={"question": f"{QUESTION} ({len(statuses)})",
                                                             "mode": "hyperbolic"}, timeout=60)
        statuses.append(resp.status_code)
        if resp.status_code != 200:
            assert resp.status_code == 503 and resp.headers["retry-after"], resp.text
        restarted = _store_pid(server["index_dir"]) not in (lite, None)
        if restarted and resp.status_code == 200:
            break
        time.sleep(2)
    assert statuses[0] == 200 and statuses[-1] == 200 and restarted, statuses


def _store_pid(index_dir) -> int | None:
    """The managed Milvus server's pid; None while a new one is writing its file."""
    try:
        return json.loads((index_dir / "milvus" / "server.json").read_text())["pid"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return None


def test_a_killed_raylet_is_restarted_and_every_acknowledged_document_is_applied_once(server):
    """Issue 34: SIGKILL the service's raylet. The service process finds its Ray gone and exits, the
    supervising `hygraph serve` starts it again, and the new updater applies the job acknowledged just
    before the kill, once."""
    doc = {"id": "raylet-survivor", "title": "Quillmarsh Tenebrae",
           "text": "Quillmarsh Tenebrae is a lighthouse that outlived the raylet of the service indexing it."}
    deadline = time.monotonic() + 120
    while "Ctrl-C stops the service" not in server["log"].read_text():  # the service watches its Ray from here
        assert time.monotonic() < deadline, server["log"].read_text()[-3000:]
        time.sleep(0.5)
    supervisor = psutil.Process(server["proc"].pid)
    [raylet] = [p for p in supervisor.children(recursive=True) if p.name() == "raylet"]
    with Client(server["url"], api_key=KEY) as authed:
        job = authed.add_documents([doc])["job_id"]
        raylet.kill()
        killed = time.monotonic()
        while authed.ready():
            assert time.monotonic() - killed < 60, "the service never noticed its raylet was gone"
            time.sleep(0.5)
        while not authed.ready():
            assert time.monotonic() - killed < 300, server["log"].read_text()[-3000:]
            assert server["proc"].poll() is None, server["log"].read_text()[-3000:]
            time.sleep(1)
        print(f"answering again {time.monotonic() - killed:.1f} s after the raylet was killed")
        assert _wait_done(authed, job)["status"] == "done"
        deadline = time.monotonic() + 60
        while not (out := authed.query("What is Quillmarsh Tenebrae?", mode="bm25"))["passages"] or \
                out["passages"][0]["id"] != doc["id"]:
            assert time.monotonic() < deadline, out["passages"]
            time.sleep(0.5)
        assert [p["id"] for p in out["passages"]].count(doc["id"]) == 1
    assert "restarting it in" in server["log"].read_text()
    assert doc_ids(server["index_dir"]).count(doc["id"]) == 1
    assert chunk_ids(server["index_dir"]).count(f"{doc['id']}:0") == 1


def _idle_version(server: dict, timeout_s: float = 180) -> int:
    """The index's current version once the service's updater has nothing left to publish (no journaled job,
    no document in slices, no deferred summary, no recalibration) and the Retriever answers that version. An
    updater that is not running yet (503 `updater_unavailable`: the raylet test's restart brings it back) is
    busy: once up it may still publish what it finds."""
    deadline = time.monotonic() + timeout_s
    with Client(server["url"], api_key=KEY) as authed:
        while True:
            try:
                status = authed.updater()
            except ApiError as exc:
                if exc.status != 503:
                    raise
                status = {"starting": True, "unavailable": exc.message}
            busy = (status.get("starting") or status["pending"] or status["documents_in_slices"]
                    or status["summaries_pending"] is not None or status["online"]["recalibrating"])
            current = IndexStore(server["index_dir"]).current_version()
            if not busy and authed.query(QUESTION)["index_version"] == current:
                time.sleep(2)  # a compaction comes due in the round after the last publication
                if IndexStore(server["index_dir"]).current_version() == current:
                    return current
            assert time.monotonic() < deadline, f"the updater is still busy after {timeout_s:g} s: {status}"
            time.sleep(1)


def test_a_new_version_is_served_without_failed_queries(server, hotpot_subset):
    """`hygraph index` writes a new version while queries run; Retrievers swap to it, nothing fails."""
    # A small corpus (20 of the session corpus's passages): a version swap does not depend on the version's size,
    # and a rebuild of the whole corpus beside the service took minutes of `make test`. Next to last in the
    # module, so that only the Ctrl-C test sees this version.
    rows = hotpot_subset[0].read_text().splitlines(keepends=True)[:20]
    corpus = server["index_dir"].parent / "corpus20.jsonl"
    corpus.write_text("".join(rows))
    # The earlier tests' writes leave work to the service's updater (their deferred summaries, a recalibration,
    # a compaction), each of which publishes a version of its own: the version answered before the build is
    # taken once the updater is idle, so that every answer below comes from it or from the build's.
    before = _idle_version(server)
    # Steady, not saturating: the build below starts its own Ray, whose start times out on
    # 2 cores kept fully busy by a tight query loop (seen once in `make test`).
    with queries_running(server["url"], 0.25) as (answered, failures):
        built = last_json(run_cli("index", "--corpus", str(corpus), "--index-dir", str(server["index_dir"])))
        assert built["version"] > before
        deadline = time.monotonic() + 60
        while server["client"].query(QUESTION)["index_version"] != built["version"]:
            assert time.monotonic() < deadline, f"the Retriever did not move to version {built['version']}"
            time.sleep(1)
    assert not failures, failures[:3]
    assert answered and set(answered) <= {before, built["version"]}
    assert httpx.get(server["url"] + "/readyz").json()["index_version"] == built["version"]


def test_ctrl_c_stops_everything(server):
    """Last in the module: SIGINT leaves no Ray, Serve or Milvus process behind."""
    proc = server["proc"]
    children = psutil.Process(proc.pid).children(recursive=True)
    lite = json.loads((server["index_dir"] / "milvus" / "server.json").read_text())["pid"]
    assert children and psutil.pid_exists(lite)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(90) == 0, server["log"].read_text()[-2000:]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        alive = [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive and not psutil.pid_exists(lite):
            break
        time.sleep(1)
    assert not alive, [(p.pid, p.name()) for p in alive]
    assert not psutil.pid_exists(lite)
