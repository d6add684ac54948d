"""Writes to an index on object storage with no server (issue 30 item 6): `hygraph insert` journals the job as
an object in the bucket (store/object_journal.py) and applies it in process under the store's updater lease;
`hygraph query` finds the document, `hygraph delete` removes it, and the jobs read done. On a real S3 server
(SeaweedFS on loopback, tests/s3server.py); the index is made empty in this process (`create_empty_index`, what
`POST /v1/indexes` runs), so no Ray is started."""

from __future__ import annotations

import json
import time
import uuid
from typing import Iterator

import pytest

from hygraph.client import ApiError, Client
from hygraph.config import load_config
from hygraph.data import DEMO_DIR
from hygraph.indexing.build import create_empty_index
from hygraph.store.object_journal import ObjectJournal, job_key, open_journal
from hygraph.store.versions import IndexStore
from tests.integration.conftest import cli_env, last_json, run_cli, serving
from tests.s3server import S3Server, seaweedfs

pytestmark = pytest.mark.integration

DEMO_CORPUS = DEMO_DIR / "corpus.jsonl"
OUTAGE_S = 20  # past every 5 s cache of a replica, so the answers come from stale-on-error reads
LATE = {"id": "s3-late-doc", "title": "Walrus choirs of Svalbard",
        "text": "The walrus choirs of Svalbard sing to the midnight sun every July, in four parts."}
MARKER = {"id": "s3-marker-doc", "title": "Quokka lanterns of Zanzibar",
          "text": "The quokka lantern festival of Zanzibar floats paper quokkas down the harbour each spring."}


def test_insert_and_delete_on_an_s3_index_without_a_server(s3_server, tmp_path, monkeypatch):
    env = cli_env(**s3_server.env(), HYGRAPH__VECTOR_STORE__SERVER_DIR=str(tmp_path / "milvus"),
                  HYGRAPH__STORE__CACHE_DIR=str(tmp_path / "cache"))
    for name, value in s3_server.env().items():  # what boto3 reads, as the commands' environment has it
        monkeypatch.setenv(name, value)
    remote = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:8]}/index"
    assert create_empty_index(load_config(None, env=env), remote)["created"]
    (tmp_path / "new.jsonl").write_text(json.dumps(MARKER) + "\n")
    ins = last_json(run_cli("insert", "--index-dir", remote, "--corpus", str(tmp_path / "new.jsonl"), env=env))
    assert ins["documents"] == 1 and ins["chunks"] >= 1 and ins["version"] >= 2
    found = last_json(run_cli("query", "--index-dir", remote, "--mode", "dense", "--k", "3", MARKER["title"],
                              env=env))
    assert found["index_version"] == ins["version"] and found["passages"][0]["id"] == MARKER["id"]
    gone = last_json(run_cli("delete", "--index-dir", remote, "--ids", MARKER["id"], env=env))
    assert gone["documents_removed"] == 1 and gone["version"] > ins["version"]
    missed = last_json(run_cli("query", "--index-dir", remote, "--mode", "dense", "--k", "3", MARKER["title"],
                               env=env))
    assert missed["index_version"] == gone["version"]
    assert MARKER["id"] not in [p["id"] for p in missed["passages"]]

    store = IndexStore(remote, cache_dir=str(tmp_path / "cache"))
    journal = open_journal(remote, store.objects)
    assert isinstance(journal, ObjectJournal)
    jobs = list(journal.jobs())
    assert [(j.op, j.end_offset) for j in jobs] == [("insert", 1), ("delete", 2)]
    manifest = store.manifest()
    assert manifest.journal_offset == 2 and journal.pending(manifest.journal_offset) == 0
    assert [journal.status(j, manifest) for j in jobs] == [("done", None), ("done", None)]
    assert store.objects.list("journal/jobs/") == [job_key(0), job_key(1)]
    assert journal.failed() == {} and journal.running() == set()
    # A named index (--index) of an s3:// service root that was never made: exit 2, naming --index.
    proc = run_cli("insert", "--index-dir", remote, "--index", "docs", "--corpus", str(tmp_path / "new.jsonl"),
                   env=env, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--index: no index named 'docs'" in proc.stderr.strip().splitlines()[-1]


KEY, ADMIN = "s3-key-4e1a", "s3-admin-7b20"


def _served(client: Client, job_id: str, question: str, timeout_s: float = 120) -> tuple[dict, dict]:
    """The job once done, and a dense query answered at (at least) the version it published."""
    job = client.wait(job_id, timeout_s=timeout_s)
    assert job["status"] == "done", job
    deadline = time.monotonic() + 60
    while (out := client.query(question, mode="dense"))["index_version"] < job["index_version"]:
        assert time.monotonic() < deadline, "the Retriever did not follow the updater"
        time.sleep(0.5)
    return job, out


@pytest.fixture
def own_s3(tmp_path) -> Iterator[S3Server]:
    """An S3 server of the test's own, which it may stop and start (the session's server stays up for the rest)."""
    (tmp_path / "weed").mkdir()
    with seaweedfs(tmp_path / "weed") as server:
        yield server


def test_serve_an_s3_index_queries_inserts_and_deletes(own_s3, tmp_path, monkeypatch):
    """`hygraph serve --index-dir s3://...` (issue 30): the Retriever reads versions from the bucket, the updater
    actor applies jobs journaled as objects under the prefix, and job status reads them there. A named index and
    a key scoped to it live in the same bucket; deleting the index removes its objects. Then the S3 server stops
    for OUTAGE_S under query load: queries answer from the loaded version, a write gets 503 with Retry-After, and
    a write acknowledged just before the outage is applied once it is back."""
    s3_server = own_s3
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    prefix = f"{uuid.uuid4().hex[:8]}/index"
    remote = f"s3://{s3_server.bucket}/{prefix}"
    env = {**s3_server.env(), "HYGRAPH__VECTOR_STORE__SERVER_DIR": str(tmp_path / "milvus"),
           "HYGRAPH__STORE__CACHE_DIR": str(tmp_path / "cache")}
    assert create_empty_index(load_config(None, env=cli_env(**env)), remote)["created"]
    with DEMO_CORPUS.open() as f:
        passages = [json.loads(next(f)) for _ in range(3)]
    with serving(remote, tmp_path / "serve.log", HYGRAPH_API_KEYS=KEY, HYGRAPH_ADMIN_KEYS=ADMIN, **env) as srv, \
            Client(srv["url"], api_key=KEY) as client:
        built, out = _served(client, client.add_documents(passages)["job_id"], passages[0]["title"])
        assert out["passages"] and out["passages"][0]["id"] == passages[0]["id"]
        inserted, out = _served(client, client.add_documents([MARKER])["job_id"], MARKER["title"])
        assert inserted["index_version"] > built["index_version"] and out["passages"][0]["id"] == MARKER["id"]
        deleted, out = _served(client, client.delete_document(MARKER["id"])["job_id"], MARKER["title"])
        assert deleted["index_version"] > inserted["index_version"]
        assert MARKER["id"] not in [p["id"] for p in out["passages"]]
        # A named index in the same bucket, and a key scoped to it: both objects under the service's prefix.
        with Client(srv["url"], api_key=ADMIN) as admin:
            admin.create_index("docs")
            scoped = admin.create_key({"docs": ["read", "write"]}, name="docs writer")
        with Client(srv["url"], api_key=scoped["key"], index="docs") as docs:
            job = docs.wait(docs.add_documents([MARKER])["job_id"])
            assert job["status"] == "done", job
            deadline = time.monotonic() + 60
            while not (found := docs.query(MARKER["title"], mode="dense"))["passages"]:
                assert time.monotonic() < deadline, "the named index's Retriever did not follow its updater"
                time.sleep(0.5)
            assert found["passages"][0]["id"] == MARKER["id"]
        with Client(srv["url"], api_key=scoped["key"]) as elsewhere, pytest.raises(ApiError) as err:
            elsewhere.add_documents([MARKER])  # the default index is not this key's
        assert err.value.status == 404
        catalog = _keys(s3_server, f"{prefix}/catalog/")
        assert catalog == [f"{prefix}/catalog/docs.json"]
        named = json.loads(s3_server.client().get_object(Bucket=s3_server.bucket, Key=catalog[0])["Body"].read())
        assert _keys(s3_server, f"{prefix}/indexes/{named['data']}/journal/jobs/")
        assert len(_keys(s3_server, f"{prefix}/keys/")) == 1
        # Deleting it frees the name at once and removes its objects; the key keeps no right on the name.
        with Client(srv["url"], api_key=ADMIN) as admin:
            admin.delete_index("docs")
            assert [i["name"] for i in admin.indexes()] == ["default"]
        deadline = time.monotonic() + 120
        while _keys(s3_server, f"{prefix}/indexes/{named['data']}/"):
            assert time.monotonic() < deadline, "the deleted index's objects stayed"
            time.sleep(1)
        assert _keys(s3_server, f"{prefix}/catalog/") == []

        acknowledged = client.add_documents([LATE])["job_id"]
        s3_server.stop()
        answered, failed, refused = 0, [], None
        until = time.monotonic() + OUTAGE_S
        while time.monotonic() < until:
            try:
                answered += bool(client.query(passages[1]["title"], mode="dense")["passages"])
            except ApiError as exc:
                failed.append(exc)
            if refused is None:
                with pytest.raises(ApiError) as err:
                    client.add_documents([{"id": "during-outage", "text": "not journaled: the bucket is away"}])
                refused = err.value
            time.sleep(0.5)
        s3_server.start()
        assert not failed and answered >= 10, (answered, failed[:3])
        assert refused.status == 503 and refused.retry_after, refused
        late, out = _served(client, acknowledged, LATE["title"], timeout_s=240)
        assert out["passages"][0]["id"] == LATE["id"]
    # The write refused during the outage was never journaled: the jobs are the four acknowledged ones.
    assert _keys(s3_server, f"{prefix}/journal/jobs/") == [f"{prefix}/{job_key(n)}" for n in range(4)]


def _keys(server, prefix: str) -> list[str]:
    return sorted(o["Key"] for o in server.client().list_objects_v2(
        Bucket=server.bucket, Prefix=prefix).get("Contents", []))
