"""The dense baseline end to end through the real CLI (CONTRACT.md), and its error handling."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.integration.conftest import HYGRAPH, cli_env, last_json, run_cli

pytestmark = pytest.mark.integration


def test_index_reports_contract_fields(built_index, hotpot_subset):
    index_dir, out = built_index
    corpus, _ = hotpot_subset
    n_docs = sum(1 for _ in corpus.open())
    for key in ("version", "documents", "chunks", "entities", "relations", "hyperedges", "summaries",
                "layers", "seconds", "llm_calls"):
        assert key in out
    assert out["documents"] == n_docs and out["chunks"] >= n_docs
    assert (index_dir / "CURRENT").read_text().strip() == str(out["version"])


def test_dense_query_answers_from_retrieved_passages(built_index):
    index_dir, _ = built_index
    proc = run_cli("query", "--index-dir", str(index_dir), "--mode", "dense", "--k", "3",
                   "If Gallu is a demon Lilu is what?")
    res = last_json(proc)
    # The JSON is stdout's one line; a person reads the answer, what it cites and the ranking on stderr.
    assert len(proc.stdout.splitlines()) == 1
    err = proc.stderr.splitlines()
    assert any(line.startswith("Answer: ") for line in err) and "Passages (dense, index version" in proc.stderr
    assert any(line.startswith("  [") for line in err) and "Lilu" in proc.stderr
    assert "Loading weights" not in proc.stderr
    assert res["mode"] == "dense" and len(res["passages"]) == 3
    # hotpotqa_train100-00005 is "Lilu (mythology)": "A lilu ... is a masculine Akkadian word for a spirit".
    assert "hotpotqa_train100-00005" in [p["id"] for p in res["passages"]]
    # The extractive answer is grounded: its text comes from the chunks it cites (dense: [1..k] = chunks).
    cited = [res["context"]["chunks"][n - 1]["text"] for n in res["context"]["citations"]]
    assert cited and any(res["answer"].rstrip(".") in text for text in cited)
    assert res["index_version"] >= 1
    assert set(res["timings_ms"]) >= {"embed", "retrieve", "generate", "total"}


def test_eval_dense_prints_contract_json(built_index, hotpot_subset, tmp_path):
    index_dir, _ = built_index
    _, questions = hotpot_subset
    proc = run_cli("eval", "--index-dir", str(index_dir), "--questions", str(questions), "--modes", "dense",
                   "--k", "5", "--report", str(tmp_path / "rep"), "--out", str(tmp_path / "full.json"))
    res = last_json(proc)
    assert res["questions"] == 12 and res["k"] == 5
    # Exactly the modes asked (baselines only with --baselines); rankings only in --out; reports 0644.
    assert list(res["modes"]) == ["dense"] and "ranked" not in res and len(proc.stdout.splitlines()) == 1
    assert len(json.loads((tmp_path / "full.json").read_text())["ranked"]["dense"]) == 12
    assert (tmp_path / "rep.md").stat().st_mode & 0o777 == 0o644
    dense = res["modes"]["dense"]
    assert set(dense) >= {"recall@2", "recall@5", "em", "f1", "p50_ms", "p95_ms"}
    assert dense["retrieval_p50_ms"] <= dense["p50_ms"]
    # Gold passages are in this small corpus: dense retrieval must find most of them.
    assert dense["recall@5"] >= 0.6
    assert (tmp_path / "rep.md").is_file() and (tmp_path / "rep.png").stat().st_size > 1000


def test_two_processes_read_the_same_index(built_index):
    index_dir, _ = built_index
    procs = [subprocess.Popen([*HYGRAPH, "query", "--index-dir", str(index_dir), "--mode", "dense", q],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
             for q in ("If Gallu is a demon Lilu is what?",
                       "Are Christopher Nolan and Sathish Kalathil both film directors?")]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr[-2000:]
        assert json.loads(stdout.strip().splitlines()[-1])["passages"]
    # The last process out stops the shared Milvus server: nothing is left running.
    state = index_dir / "milvus" / "server.json"
    deadline = time.time() + 10
    while state.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert not state.exists()


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [l for l in proc.stderr.strip().splitlines() if l.startswith("hygraph:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0]


def test_malformed_corpus_line_is_exit_2_and_writes_nothing(tmp_path):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"id": "a", "text": "fine"}\n{"id": "b", "title": "missing text"}\n')
    index_dir = tmp_path / "idx"
    _one_line_error(run_cli("index", "--corpus", str(corpus), "--index-dir", str(index_dir)),
                    "bad.jsonl:2", "text")
    assert not (index_dir / "CURRENT").exists()


def test_empty_question_is_exit_2(built_index):
    index_dir, _ = built_index
    _one_line_error(run_cli("query", "--index-dir", str(index_dir), "   "), "question")


def test_missing_index_dir_is_exit_2(tmp_path):
    _one_line_error(run_cli("query", "--index-dir", str(tmp_path / "nope"), "q?"), "nope")


def test_unknown_mode_is_exit_2(built_index):
    index_dir, _ = built_index
    _one_line_error(run_cli("query", "--index-dir", str(index_dir), "--mode", "nonsense", "q?"), "mode")


def test_unreachable_milvus_is_exit_2_and_leaves_no_version(hotpot_subset, tmp_path):
    corpus, _ = hotpot_subset
    index_dir = tmp_path / "idx"
    env = cli_env(HYGRAPH__VECTOR_STORE__URI="http://127.0.0.1:9", HYGRAPH__VECTOR_STORE__CONNECT_TIMEOUT_S="2")
    _one_line_error(run_cli("index", "--corpus", str(corpus), "--index-dir", str(index_dir), env=env),
                    "127.0.0.1:9")
    assert not index_dir.exists()
