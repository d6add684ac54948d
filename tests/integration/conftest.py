"""Integration fixtures: the real CLI, Ray (num_cpus=2), the embedded Milvus server, the bundled model."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from hygraph.data import DEMO_DIR
from hygraph.processes import locked, pid_alive
from hygraph.runtime.watch import RAY_LOGS
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


def build_record(index_dir: Path) -> dict:
    """The checkpoint record (`builds/<fingerprint>/build.json`) of the unfinished build in `index_dir`; {} if none."""
    for path in (index_dir / "builds").glob("*/build.json"):
        try:
            return json.loads(path.read_text())
        except ValueError:
            continue  # never: the record is replaced atomically
    return {}


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


# The demo corpus's first passages: the build a killed and resumed one is compared with.
DEMO_PASSAGES = 16


@pytest.fixture(scope="session")
def demo_build(tmp_path_factory) -> tuple[Path, Path, dict]:
    """The first DEMO_PASSAGES demo passages built uninterrupted on this node: (corpus, index dir, the build's
    JSON). The reference of tests/integration/test_build_resume.py and test_multinode_build.py (one build for
    both); read only: a test that builds into it works on a copy (`copy_index`)."""
    out = tmp_path_factory.mktemp("demo_build")
    corpus = out / "corpus.jsonl"
    corpus.write_text("\n".join((DEMO_DIR / "corpus.jsonl").read_text().splitlines()[:DEMO_PASSAGES]) + "\n")
    index_dir = out / "index"
    return corpus, index_dir, last_json(run_cli("index", "--corpus", str(corpus), "--index-dir", str(index_dir)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A port found free can be taken before `hygraph serve` binds it (Ray starts processes on ports of its
# own choosing meanwhile); such a start is retried on fresh ports.
BIND_ATTEMPTS = 3


@contextmanager
def serving(index_dir: Path, log: Path, ready_s: float = 240, **env: str) -> Iterator[dict]:
    """`hygraph serve` on free ports as a user runs it; stopped with SIGINT (as Ctrl-C) at the end."""
    from hygraph.client import Client

    for attempt in range(1, BIND_ATTEMPTS + 1):
        port, metrics_port = free_port(), free_port()
        with log.open("w") as err:
            proc = subprocess.Popen([*HYGRAPH, "serve", "--index-dir", str(index_dir), "--port", str(port)],
                                    stdout=subprocess.DEVNULL, stderr=err,
                                    env=cli_env(HYGRAPH__SERVE__METRICS_PORT=str(metrics_port), **env))
        url = f"http://127.0.0.1:{port}"
        client = Client(url)
        deadline = time.monotonic() + ready_s
        try:
            while not client.ready() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.25)
        except BaseException:  # pytest-timeout or Ctrl-C while waiting: the service must not outlive the test
            _interrupt(proc)
            raise
        if proc.poll() is None and client.ready():
            break
        proc.kill()
        proc.wait(30)
        client.close()
        text = log.read_text()
        if not _bind_failed(text) or attempt == BIND_ATTEMPTS:
            raise AssertionError(f"hygraph serve did not become ready:\n{text[-3000:]}")
    try:
        yield {"url": url, "proc": proc, "index_dir": index_dir, "metrics": f"http://127.0.0.1:{metrics_port}/metrics",
               "log": log, "client": client}
    finally:
        client.close()
        _interrupt(proc)


def _bind_failed(log_text: str) -> bool:
    """Whether Serve's proxy could not bind its port: said in Serve's own log files (`serve/` in the Ray logs
    directory the server's log names), or in the server's log."""
    if "Failed to bind to address" in log_text:
        return True
    logs = [line.split(RAY_LOGS, 1)[1].strip() for line in log_text.splitlines() if RAY_LOGS in line]
    return any("Failed to bind to address" in path.read_text(errors="replace")
               for path in (Path(logs[-1]) / "serve").glob("*.log")) if logs else False


def _interrupt(proc: subprocess.Popen) -> None:
    """Stop `hygraph serve` as Ctrl-C does (it stops its Ray and Milvus); killed if it has not ended in 90 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def copy_index(src: Path, dst: Path, timeout_s: float = 120) -> None:
    """Copy an index (its embedded Milvus data included) while no Milvus server runs on it: under the lock
    its servers start and stop under, once its state file names no live server."""
    milvus = src / "milvus"
    deadline = time.monotonic() + timeout_s
    while True:
        with locked(milvus / "server.lock"):
            state = milvus / "server.json"
            if not state.exists() or not pid_alive(int(json.loads(state.read_text())["pid"])):
                shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("clients", "server.lock"))
                return
        assert time.monotonic() < deadline, f"a Milvus server still runs on {src} after {timeout_s:g} s"
        time.sleep(1)


# The one service key of the writable server, and its limits (the hostile-input module's: small bodies, a
# short body timeout, 20 documents a request, summaries not deferred).
WRITER_KEY = "writer-key-0b1c"
WRITER_ENV = {"HYGRAPH_API_KEYS": WRITER_KEY, "HYGRAPH__SERVE__BODY_TIMEOUT_S": "2",
              "HYGRAPH__SERVE__MAX_BODY_BYTES": "32768", "HYGRAPH__SERVE__MAX_DOCUMENTS_PER_REQUEST": "20",
              "HYGRAPH__UPDATES__DEFER_SUMMARIES_S": "0"}


class WritableServer:
    """`hygraph serve` on a copy of the session's index, started by the first module that asks and shared by
    the modules that write and delete documents (the web console's, the hostile-input one's): one index copy
    and one service start instead of one each. The other modules expect the index as built, hence the copy.
    `stop()` ends it early (the last module using it calls it: an idle service costs the modules after it
    CPU); a module asking after that gets a fresh one."""

    def __init__(self, built: Path, work: Path) -> None:
        self._built, self._work = built, work
        self._stack = ExitStack()
        self._srv: dict | None = None
        self._starts = 0

    def get(self) -> dict:
        if self._srv is None:
            self._starts += 1
            work = self._work / str(self._starts)
            copy_index(self._built, work / "index")
            self._srv = self._stack.enter_context(serving(work / "index", work / "serve.log", **WRITER_ENV))
        return self._srv

    def stop(self) -> None:
        self._srv = None
        self._stack.close()


@pytest.fixture(scope="session")
def writable_server_handle(built_index, tmp_path_factory) -> Iterator[WritableServer]:
    handle = WritableServer(built_index[0], tmp_path_factory.mktemp("writable"))
    try:
        yield handle
    finally:
        handle.stop()
