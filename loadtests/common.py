"""Pieces the load-test scripts share: percentiles, timed HTTP requests, test data, and a
`hygraph serve` child process that is always taken down with everything it started."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Iterable, TypeVar

import httpx
import numpy as np
import psutil

from hygraph.client import Client

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[1]
DEMO_DIR = REPO / "hygraph" / "data" / "demo"
DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "dev" / "2wiki_dev.corpus.jsonl"
MODES = ("dense", "hybrid", "collapsed", "hypergraph", "hyperbolic", "local", "global", "auto")
POLL_S = 0.5  # job and retrievability polls
# Summaries take tens of seconds under load; polling for them as often as for the job cost the server
# ~16 requests/s of ingress and proxy CPU in `make loadtest`, taken from the queries being measured.
SUMMARY_POLL_S = 2.0
NO_ANSWER_PAUSE_S = 0.25
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# A Ray session directory name carries its start time and the driver's pid, so it names
# exactly one run's Ray processes and nobody else's.
_RAY_SESSION = re.compile(r"session_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_\d+")


# A capitalised word: what the renamed corpora (bench_edges, bench_build) give a suffix per copy.
CAPITALISED = re.compile(r"\b[A-Z][\w'’-]*")


def copy_suffix(copy: int) -> str:
    """'', then a letters-only tag per copy (digits would change what the term rules see)."""
    out = ""
    while copy:
        copy, r = divmod(copy, 26)
        out += chr(ord("a") + r)
    return out and "q" + out


def rename_capitalised(text: str, copy: int) -> str:
    """`text` with copy `copy`'s suffix on every capitalised word (copy 0: unchanged)."""
    tag = copy_suffix(copy)
    return CAPITALISED.sub(lambda m: m.group(0) + tag, text) if tag else text


def say(tag: str, message: str) -> None:
    print(f"[{tag}] {message}", file=sys.stderr, flush=True)


def pcts(values: Iterable[float], unit: str = "ms", digits: int = 2) -> dict[str, float | None]:
    """p50/p95/p99 (numpy's linear interpolation); None for no values rather than a made-up number."""
    a = np.asarray(list(values), dtype=float)
    return {f"p{q}_{unit}": (round(float(np.percentile(a, q)), digits) if a.size else None) for q in (50, 95, 99)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def demo_questions() -> list[str]:
    return [json.loads(line)["question"] for line in (DEMO_DIR / "questions.jsonl").open()]


def fresh_documents(corpus: Path, n: int, skip_titles: set[str], tag: str,
                    min_chars: int = 200) -> list[dict[str, str]]:
    """`n` documents of `corpus` whose titles the index does not hold, under run-unique ids.

    Unique ids keep a re-run on the same index from hitting the insert no-op (same id, same
    text), and long-enough texts make "retrievable by its own text" a fair test.
    """
    out = []
    for line in corpus.open():
        row = json.loads(line)
        if row["title"] in skip_titles or len(row["text"]) < min_chars:
            continue
        out.append({"id": f"lt-{tag}-{row['id']}", "title": row["title"], "text": row["text"]})
        if len(out) == n:
            return out
    raise ValueError(f"{corpus}: only {len(out)} usable documents, {n} needed")


def index_titles(index_dir: Path | None) -> set[str]:
    """Titles of the demo corpus and, when the index is local and built, of its current version."""
    titles = {json.loads(line)["title"] for line in (DEMO_DIR / "corpus.jsonl").open()}
    if index_dir is not None and (index_dir / "CURRENT").is_file():
        from hygraph.store.artifacts import DOCUMENTS
        from hygraph.store.versions import IndexStore

        titles |= set(IndexStore(index_dir).open().table(DOCUMENTS).values("title"))
    return titles


def log_excerpt(text: str, limit: int = 40) -> list[str]:
    """Error lines of the server's log, for a report that shows failures next to their cause."""
    pat = re.compile(r"Traceback|Error|ERROR|Exception|WARNING .*(fail|deferred)")
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)  # Ray colours the worker prefixes
    return [line[:400] for line in plain.splitlines() if pat.search(line)][:limit]


def probe_question(doc: dict[str, str]) -> str:
    return f"{doc['title']}. {doc['text'][:300]}"


# -- timed requests ------------------------------------------------------------------------


@dataclass
class Sample:
    """One HTTP request: start (s since the recorder's start), latency, outcome. status 0 = no response."""

    t: float
    scenario: str
    endpoint: str
    mode: str | None
    ms: float
    status: int
    error: str | None = None
    ttft_ms: float | None = None
    index_version: int | None = None
    retry_after: str | None = None
    cached: bool = False  # answered from the Retriever's answer cache (`timings_ms` has `cache`)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and self.error is None


@dataclass
class Recorder:
    """Every request and every write event of a run, on one clock."""

    scenario: str = ""
    t0: float = field(default_factory=time.perf_counter)
    samples: list[Sample] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def event(self, kind: str, **info: Any) -> None:
        self.events.append({"t": round(self.now(), 3), "scenario": self.scenario, "kind": kind, **info})

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        return {"samples": [asdict(s) for s in self.samples], "events": self.events}


async def timed(http: httpx.AsyncClient, rec: Recorder, endpoint: str, method: str, path: str,
                body: dict[str, Any] | None = None, mode: str | None = None,
                headers: dict[str, str] | None = None) -> tuple[Sample, Any]:
    """Send one request and record it; returns the sample and the parsed JSON body (None on failure)."""
    t = rec.now()
    start = time.perf_counter()
    try:
        resp = await http.request(method, path, json=body, headers=headers)
    except httpx.HTTPError as exc:
        s = Sample(t, rec.scenario, endpoint, mode, _ms(start), 0, f"{type(exc).__name__}: {exc}"[:300])
        rec.samples.append(s)
        return s, None
    data, error = parse_body(resp)
    s = Sample(t, rec.scenario, endpoint, mode, _ms(start), resp.status_code, error,
               index_version=data.get("index_version") if isinstance(data, dict) else None,
               retry_after=resp.headers.get("retry-after"),
               cached=isinstance(data, dict) and "cache" in (data.get("timings_ms") or {}))
    rec.samples.append(s)
    return s, data


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1e3, 2)


def parse_body(resp: httpx.Response) -> tuple[Any, str | None]:
    """(JSON body or None, None or a one-line error naming status, code and message)."""
    try:
        data = resp.json()
    except ValueError:
        return None, None if resp.is_success else f"HTTP {resp.status_code}: {resp.text[:200]}"
    if resp.is_success:
        return data, None
    err = data.get("error", {}) if isinstance(data, dict) else {}
    return data, f"HTTP {resp.status_code} {err.get('code', '?')}: {str(err.get('message', resp.text))[:200]}"


async def query_worker(http: httpx.AsyncClient, rec: Recorder, questions: list[str], modes: list[str],
                       offset: int, stride: int, stop: asyncio.Event, top_k: int = 5,
                       cache_control: str | None = None) -> None:
    """Round-robin over questions and modes; workers interleave by `offset`/`stride` so each mode
    keeps an even share at any concurrency. `cache_control` is sent as the `Cache-Control` header."""
    headers = {"Cache-Control": cache_control} if cache_control else None
    i = offset
    while not stop.is_set():
        mode = modes[i % len(modes)]
        s, _ = await timed(http, rec, "query", "POST", "/v1/query",
                           {"question": questions[i % len(questions)], "mode": mode, "top_k": top_k}, mode, headers)
        await backoff(s)
        i += stride


async def backoff(s: Sample) -> None:
    """Pause after a request that got no answer: a refused connection fails in microseconds, and
    a tight retry loop would only burn the CPU the server needs to come back. Every try is recorded."""
    if s.status == 0:
        await asyncio.sleep(NO_ANSWER_PAUSE_S)


def http_client(url: str, concurrency: int, api_key: str | None, timeout_s: float = 60.0) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency + 16, max_keepalive_connections=concurrency + 16)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits, headers=headers)


# -- writes and their lag --------------------------------------------------------------------


@dataclass
class Write:
    """One insert or delete: from the request to the index reflecting it. Times in seconds."""

    doc_id: str
    op: str  # insert | delete
    sent_t: float
    acked_t: float | None = None
    job_id: str | None = None
    outcome: str = "pending"  # ok | rejected | failed | timeout_job | timeout_visible | timeout_summaries
    last_job_status: str | None = None
    version: int | None = None
    done_s: float | None = None  # 202 -> job done
    visible_s: float | None = None  # 202 -> retrievable (insert) / no longer retrieved (delete)
    summarized_s: float | None = None  # insert: 202 -> its summaries published (updates.defer_summaries_s)
    error: str | None = None


async def wait_job(http: httpx.AsyncClient, rec: Recorder, w: Write, deadline: float) -> dict[str, Any] | None:
    """The job's final status body (done or failed), or None at the deadline."""
    while time.perf_counter() < deadline:
        s, body = await timed(http, rec, "job", "GET", f"/v1/jobs/{w.job_id}")
        if s.ok:
            w.last_job_status = body["status"]
            if body["status"] in ("done", "failed"):
                return body
        await asyncio.sleep(POLL_S)
    return None


async def wait_summarized(http: httpx.AsyncClient, rec: Recorder, w: Write, deadline: float) -> bool:
    """Poll a done insert until the job says its summaries are published (at once from a server that
    does not report them)."""
    while time.perf_counter() < deadline:
        s, body = await timed(http, rec, "job", "GET", f"/v1/jobs/{w.job_id}")
        if s.ok and body.get("summaries", "done") == "done":
            return True
        await asyncio.sleep(SUMMARY_POLL_S)
    return False


async def wait_retrieved(http: httpx.AsyncClient, rec: Recorder, doc: dict[str, str], want: bool,
                         deadline: float) -> bool:
    """Ask for the document by its own title and text (dense) until it is (or is no longer) among the passages."""
    body = {"question": probe_question(doc), "mode": "dense", "top_k": 10}
    while time.perf_counter() < deadline:
        s, out = await timed(http, rec, "probe", "POST", "/v1/query", body, "dense")
        if s.ok and (doc["id"] in [p["id"] for p in out["passages"]]) == want:
            return True
        await asyncio.sleep(POLL_S)
    return False


async def track_write(http: httpx.AsyncClient, rec: Recorder, w: Write, doc: dict[str, str], timeout_s: float) -> None:
    """Send one write and follow it to its outcome, filling `w` (lags count from the 202)."""
    if w.op == "insert":
        s, body = await timed(http, rec, "insert", "POST", "/v1/documents", {"documents": [doc]})
    else:
        s, body = await timed(http, rec, "delete", "DELETE", f"/v1/documents/{doc['id']}")
    if s.status != 202:
        w.outcome, w.error = "rejected", s.error or f"HTTP {s.status}"
        return
    acked = time.perf_counter()
    w.acked_t, w.job_id = round(rec.now(), 3), body["job_id"]
    rec.event(w.op, doc_id=w.doc_id)
    deadline = acked + timeout_s
    job = await wait_job(http, rec, w, deadline)
    if job is None or job["status"] == "failed":
        w.outcome = "timeout_job" if job is None else "failed"
        w.error = None if job is None else job.get("error")
        return
    w.done_s, w.version = round(time.perf_counter() - acked, 3), job["index_version"]
    rec.event(f"{w.op}_done", doc_id=w.doc_id, version=w.version)
    if not await wait_retrieved(http, rec, doc, w.op == "insert", deadline):
        w.outcome = "timeout_visible"
        return
    w.visible_s = round(time.perf_counter() - acked, 3)
    rec.event("retrievable" if w.op == "insert" else "gone", doc_id=w.doc_id)
    if w.op == "insert":
        if not await wait_summarized(http, rec, w, deadline):
            w.outcome = "timeout_summaries"
            return
        w.summarized_s = round(time.perf_counter() - acked, 3)
    w.outcome = "ok"


# -- the server under test -------------------------------------------------------------------


class ServeProcess:
    """`hygraph serve` on `index_dir` in its own session, with a free port and an API key.

    Every process it starts is remembered (Ray's raylet, GCS and workers, Serve replicas, the
    managed Milvus server) so `stop` and `crash` can account for all of them even after the
    parent is gone; Ray processes are also found by this run's session name, which covers
    workers started after the last look.
    """

    def __init__(self, index_dir: Path, log: Path, api_key: str, tag: str = "serve",
                 env: dict[str, str] | None = None) -> None:
        self.index_dir, self.log, self.api_key, self.tag = index_dir.resolve(), log, api_key, tag
        self.env = env or {}  # beside the key: config overrides (`HYGRAPH__SECTION__KEY`), admin keys
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._seen: dict[int, psutil.Process] = {}
        self._sessions: set[str] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.port = free_port()
        env = {**os.environ, **OFFLINE_ENV, "HYGRAPH_API_KEYS": self.api_key,
               "HYGRAPH__SERVE__METRICS_PORT": str(free_port()), **self.env}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as err:
            # Own session: a Ctrl-C in the terminal reaches only the load test, which then
            # stops the server itself and accounts for what was left.
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hygraph.cli", "serve", "--index-dir", str(self.index_dir),
                 "--port", str(self.port)],
                stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True, cwd=REPO)
        say(self.tag, f"started hygraph serve (pid {self.proc.pid}) on {self.url}, index {self.index_dir}, "
                      f"log {self.log}")

    def wait_ready(self, timeout_s: float = 900.0) -> float:
        """Seconds until the service is up; raises with the log's tail if the server died or hung.

        /readyz answers as soon as the application is deployed, before `hygraph serve` has started
        the OnlineUpdater, so the runner's "serving at" line is awaited too.
        """
        assert self.proc is not None
        t0 = last_note = time.monotonic()
        with Client(self.url) as client:
            while not (client.ready() and f"serving at {self.url}" in self.log_tail(200_000)):
                if self.proc.poll() is not None or time.monotonic() - t0 > timeout_s:
                    raise RuntimeError(f"hygraph serve did not become ready (exit {self.proc.poll()}):\n"
                                       f"{self.log_tail()}")
                if time.monotonic() - last_note > 30:
                    say(self.tag, f"waiting for /readyz ({time.monotonic() - t0:.0f} s; the first start builds "
                                  "the demo index and loads models)")
                    last_note = time.monotonic()
                time.sleep(1)
        self.remember()
        return round(time.monotonic() - t0, 1)

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.is_file() else ""

    def remember(self) -> list[psutil.Process]:
        """The server's live process tree, added to what `stop`/`crash` account for."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        try:
            root = psutil.Process(self.proc.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        for p in tree:
            self._seen.setdefault(p.pid, p)
            self._sessions.update(_RAY_SESSION.findall(" ".join(_cmdline(p))))
        return tree

    def replicas(self, deployment: str, app: str = "hygraph") -> list[psutil.Process]:
        """Live Serve replica processes of one deployment (Ray titles them ServeReplica:<app>:<name>)."""
        needle = f"ServeReplica:{app}:{deployment}"
        return [p for p in self.remember() if any(needle in a for a in _cmdline(p))]

    def stop(self, timeout_s: float = 120.0) -> list[str]:
        """SIGINT as a user would; returns the processes that were still alive afterwards (then killed)."""
        if self.proc is None:
            return []
        self.remember()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                say(self.tag, f"hygraph serve ignored SIGINT for {timeout_s:.0f} s; killing it")
                self.proc.kill()
                self.proc.wait(30)
        time.sleep(3)  # the raylet takes its workers down right after the driver exits
        return self.sweep()

    def crash(self) -> list[str]:
        """SIGKILL the whole tree at once, as a machine losing power would; nothing gets to clean up.
        Returns this run's processes found outside the tree afterwards (then killed too)."""
        assert self.proc is not None
        tree = self.remember()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for p in tree:
            _kill(p)
        self.proc.wait(30)
        psutil.wait_procs(tree, timeout=10)
        return self.sweep()

    def sweep(self) -> list[str]:
        """Kill what this server started and is still running; returns their descriptions."""
        left = [p for p in self._seen.values() if _alive(p)]
        for p in psutil.process_iter():
            cmd = " ".join(_cmdline(p))
            if p.pid not in self._seen and _alive(p) and (
                    any(s in cmd for s in self._sessions) or _milvus_of(p, self.index_dir)):
                left.append(p)
        described = [f"{p.pid} {' '.join(_cmdline(p))[:120]}" for p in left]
        for p in left:
            _kill(p)
        self._seen.clear()
        return described


class ServerExited(RuntimeError):
    """`hygraph serve` exited while the measurement needed it."""


async def while_serving(server: ServeProcess | None, work: Awaitable[T]) -> T:
    """Await `work`, but stop it and raise ServerExited (with the log's tail) if the server exits."""
    task = asyncio.ensure_future(work)
    while server is not None and not task.done():
        await asyncio.wait([task], timeout=1.0)
        if not task.done() and server.exit_code() is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise ServerExited(f"hygraph serve exited with status {server.exit_code()}; its log ends:\n"
                               f"{server.log_tail(3000)}")
    return await task


def _milvus_of(p: psutil.Process, index_dir: Path) -> bool:
    """The index's managed Milvus server, either engine: Milvus Lite names its data directory on its
    command line, the embedded standalone server runs in `<index>/milvus/standalone`."""
    here = str((index_dir / "milvus").resolve())
    cmd = " ".join(_cmdline(p))
    if "milvus" not in cmd:
        return False
    try:
        cwd = p.cwd()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        cwd = ""
    return here in cmd or cwd.startswith(here)


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill(p: psutil.Process) -> None:
    try:
        p.kill()
    except psutil.NoSuchProcess:
        pass


def tree_cpu_s(roots: list[int] | None = None) -> float:
    """User + system CPU seconds of this process and everything it started (Ray, Serve, the vector store), or
    of the process trees of `roots` only."""
    procs: list[psutil.Process] = []
    for pid in roots or [os.getpid()]:
        try:
            root = psutil.Process(pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return total
