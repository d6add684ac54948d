"""An index on object storage end to end: `hygraph index --dense-only` into s3:// on a real S3 server (SeaweedFS on
loopback, tests/s3server.py) answers `hygraph query` with the same ranked passages as the same build into a
local directory; `hygraph serve` refuses an s3:// index (this release) with status 2 and one line; a graph mode on
the dense-only index is status 2 naming --dense-only."""

from __future__ import annotations

import uuid

import pytest

from hygraph.config import load_config
from hygraph.engine import QueryEngine
from hygraph.pipeline import QueryPipeline, QueryRequest
from tests.integration.conftest import DATA, cli_env, last_json, run_cli

pytestmark = pytest.mark.integration

QUESTIONS = ("If Gallu is a demon Lilu is what?", "What kind of game is Demon Dice?")


def test_an_index_built_into_s3_answers_like_a_local_one(s3_server, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    with (DATA / "hotpotqa_train100.corpus.jsonl").open() as fh:
        corpus.write_text("".join(line for _, line in zip(range(30), fh)))
    # One managed vector store server for both indexes (their collections are named after each index's uid),
    # and this node's directory for the S3 index under tmp_path.
    env = cli_env(**s3_server.env(), HYGRAPH__VECTOR_STORE__SERVER_DIR=str(tmp_path / "milvus"),
                  HYGRAPH__STORE__CACHE_DIR=str(tmp_path / "cache"))
    local, remote = str(tmp_path / "local"), f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:8]}/index"
    # Dense-only (vectors and the BM25 postings, no graph stages): the store path is the same, and two graph
    # builds take minutes on a loaded 2-core machine.
    built = {where: last_json(run_cli("index", "--corpus", str(corpus), "--index-dir", where, "--dense-only",
                                      env=env)) for where in (local, remote)}
    assert built[local]["documents"] == built[remote]["documents"] == 30
    assert built[local]["chunks"] == built[remote]["chunks"] >= 30
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(
        Bucket=s3_server.bucket, Prefix=remote.split("/", 3)[3])["Contents"]]
    assert any(k.endswith("/CURRENT") for k in keys) and any("/segments/chunks/" in k for k in keys)
    # `hygraph query` answers on the S3 index; its answers on both indexes are compared in this process (the
    # same QueryEngine and pipeline the command runs; a process each cost 10 to 30 s in `make test`).
    cli = last_json(run_cli("query", "--index-dir", remote, "--mode", "dense+bm25", "--k", "5", QUESTIONS[0],
                            env=env))
    for name, value in s3_server.env().items():  # what boto3 reads, as the command's environment has it
        monkeypatch.setenv(name, value)
    cfg = load_config(None, env=env)
    engines: dict[str, QueryEngine] = {}
    try:
        for where in (local, remote):
            engines[where] = QueryEngine(cfg, where)
        answers = [{where: QueryPipeline(engine).run(QueryRequest.make(cfg.retrieval, q, "dense+bm25", 5)).to_json()
                    for where, engine in engines.items()} for q in QUESTIONS]
    finally:
        for engine in engines.values():
            engine.close()
    answers[0]["cli"] = cli
    for answer in answers:
        ranked = {where: [p["id"] for p in a["passages"]] for where, a in answer.items()}
        assert all(r == ranked[local] for r in ranked.values()) and len(ranked[local]) == 5
        assert all(a["answer"] == answer[local]["answer"] for a in answer.values())
    # A graph mode on a dense-only index is refused with status 2 (the local build serves: the refusal does not
    # depend on the corpus or the store; a build of its own for it cost 90 s in `make test`).
    proc = run_cli("query", "--index-dir", local, "--mode", "hybrid", "Who?", env=env)
    assert proc.returncode == 2 and "--dense-only" in proc.stderr and "Traceback" not in proc.stderr
    bad = run_cli("query", "--index-dir", f"s3://{s3_server.bucket}/../x", "q", env=env, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "not a relative key" in bad.stderr
