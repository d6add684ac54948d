"""A deployment that starts before its first index exists (a fresh Kubernetes install): the
application deploys through the Serve config's builder, answers 503 index_not_ready, keeps
acknowledged writes, and serves the first version `hygraph index` publishes with no restart."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from hygraph.config import RayConfig
from hygraph.runtime import init_ray
from hygraph.runtime.loopback import LOOPBACK_ENV
from hygraph.serve.app import APP_NAME, app_builder
from tests.integration.conftest import cli_env, last_json, run_cli

pytestmark = pytest.mark.integration
KEY = "first-deploy-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serving_waits_for_the_first_build_then_serves_it(hotpot_subset, tmp_path, monkeypatch):
    import ray
    from ray import serve

    corpus, _ = hotpot_subset
    small = tmp_path / "corpus.jsonl"
    rows = [json.loads(line) for line in corpus.open()][:20]
    small.write_text("".join(json.dumps(r) + "\n" for r in rows))
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    for key, value in cli_env(HYGRAPH_API_KEYS=KEY).items():
        monkeypatch.setenv(key, value)
    port = _free_port()
    # The project's start: loopback only, and a start that times out on a loaded machine is tried again.
    # It sets Ray's loopback variable for this process, which the later tests' multi-node clusters must not
    # inherit: monkeypatch takes it away again.
    for name, value in LOOPBACK_ENV.items():
        monkeypatch.setenv(name, value)
    init_ray(RayConfig(num_cpus=2))
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(app_builder({"config": None, "index_dir": str(index_dir)}), name=APP_NAME, route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        ready = httpx.get(url + "/readyz", timeout=30)
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "index_not_ready", ready.text
        query = httpx.post(url + "/v1/query", json={"question": rows[0]["title"], "mode": "dense"}, timeout=30)
        assert query.status_code == 503 and query.headers["retry-after"]
        assert "no index version yet" in query.json()["error"]["message"]
        doc = {"id": "first-deploy-doc", "title": "Quillimant Observatory",
               "text": "The Quillimant Observatory was journaled before the first index existed."}
        auth = {"Authorization": f"Bearer {KEY}"}
        accepted = httpx.post(url + "/v1/documents", json={"documents": [doc]}, headers=auth, timeout=30)
        assert accepted.status_code == 202
        job_id = accepted.json()["job_id"]
        assert httpx.get(url + f"/v1/jobs/{job_id}", headers=auth, timeout=30).json()["status"] == "queued"

        # Dense-only: what is tested is the first version's arrival, not its graph (a Retriever moving to a new
        # graph version while serving is test_serve_http's test_a_new_version_is_served_without_failed_queries);
        # a graph build beside a running Serve took minutes of `make test`.
        built = last_json(run_cli("index", "--corpus", str(small), "--index-dir", str(index_dir), "--dense-only"))
        deadline = time.monotonic() + 180
        while httpx.get(url + "/readyz", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, "the Retriever never loaded the first version"
            time.sleep(1)
        out = httpx.post(url + "/v1/query", json={"question": rows[0]["title"], "mode": "dense"}, timeout=60).json()
        assert out["index_version"] >= built["version"] and out["passages"][0]["id"] == rows[0]["id"]
        # The write acknowledged before the build is applied on top of it, by the updater that waited.
        while (job := httpx.get(url + f"/v1/jobs/{job_id}", headers=auth, timeout=30).json())["status"] != "done":
            assert job["status"] in ("queued", "running") and time.monotonic() < deadline, job
            time.sleep(1)
        assert job["index_version"] > built["version"]
        while (out := httpx.post(url + "/v1/query", json={"question": doc["title"], "mode": "dense"},
                                 timeout=60).json())["index_version"] < job["index_version"]:
            assert time.monotonic() < deadline
            time.sleep(1)
        assert out["passages"][0]["id"] == doc["id"]
    finally:
        from hygraph.updater.actor import stop_updater

        stop_updater(index_dir)
        serve.shutdown()
        ray.shutdown()
