"""Integration fixtures: the real CLI, Ray (num_cpus=2), the embedded Milvus server, the bundled model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data import DEV_DATA

DATA = DEV_DATA
HYGRAPH = [sys.executable, "-m", "hygraph.cli"]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYGRAPH__")}
    env.update({"HYGRAPH__RAY__NUM_CPUS": "2", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*HYGRAPH, *args], capture_output=True, text=True, env=env or cli_env(),
                          timeout=timeout, cwd=Path(__file__).resolve().parents[2])


def last_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def hotpot_subset(tmp_path_factory) -> tuple[Path, Path]:
    """The first 12 hotpotqa questions, their gold passages and 150 others: small but real."""
    out = tmp_path_factory.mktemp("data")
    questions = [json.loads(l) for l in (DATA / "hotpotqa_train100.questions.jsonl").open()][:12]
    gold = {s for q in questions for s in q["supporting_ids"]}
    rows = [json.loads(l) for l in (DATA / "hotpotqa_train100.corpus.jsonl").open()]
    keep = [r for r in rows if r["id"] in gold] + [r for r in rows if r["id"] not in gold][:150]
    corpus = out / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in keep))
    qpath = out / "questions.jsonl"
    qpath.write_text("".join(json.dumps(q) + "\n" for q in questions))
    return corpus, qpath


@pytest.fixture(scope="session")
def built_index(hotpot_subset, tmp_path_factory) -> tuple[Path, dict]:
    corpus, _ = hotpot_subset
    index_dir = tmp_path_factory.mktemp("index")
    proc = run_cli("index", "--corpus", str(corpus), "--index-dir", str(index_dir))
    return index_dir, last_json(proc)
