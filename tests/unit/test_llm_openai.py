"""OpenAICompatLLM against a scripted OpenAI-compatible server on 127.0.0.1."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest

from hygraph.backends.llm import make_llm
from hygraph.backends.llm.base import ContextItem, SummaryRequest
from hygraph.backends.llm.openai_compat import OpenAICompatLLM
from hygraph.config import LLMConfig
from hygraph.errors import BackendError, ConfigError
from hygraph.model import Chunk

KEY_ENV = "HYGRAPH_TEST_LLM_KEY"
SECRET = "sk-test-secret-0123456789"
TEUTBERGA = "Teutberga( died 11 November 875) was a queen of Lotharingia by marriage to Lothair II."

Reply = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class Endpoint:
    """Answers each POST with the next scripted reply: {"content"} or {"status"} or {"delay", ...}."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with endpoint.lock:
                    endpoint.requests.append(body)
                    endpoint.auth.append(self.headers.get("Authorization"))
                    reply = endpoint.replies.pop(0) if endpoint.replies else {"status": 500}
                if callable(reply):
                    reply = reply(body)
                time.sleep(reply.get("delay", 0))
                status = reply.get("status", 200)
                if status == 200:
                    payload = {"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": reply["content"]}}],
                               "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}
                else:
                    payload = {"error": {"message": f"scripted failure {status}", "type": "server_error"}}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint():
    ep = Endpoint()
    yield ep
    ep.close()


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)


def make(endpoint: Endpoint, tmp_path, **cfg: Any) -> OpenAICompatLLM:
    settings = {"backend": "openai", "model": "test-model", "base_url": endpoint.base_url,
                "api_key_env": KEY_ENV, "max_retries": 2, "timeout_s": 5.0, **cfg}
    return OpenAICompatLLM(LLMConfig(**settings), cache_dir=str(tmp_path / "cache"), backoff_s=0.01)


def content(obj: dict[str, Any]) -> dict[str, Any]:
    return {"content": json.dumps(obj)}


EXTRACTION = {
    "entities": [{"name": "Teutberga", "type": "PERSON", "description": "Queen of Lotharingia.", "score": 0.9},
                 {"name": "Lothair II", "type": "PERSON", "description": "King.", "score": 3},
                 {"name": "  ", "type": "OTHER"}],
    "relations": [{"head": "Teutberga", "relation": "married to", "tail": "Lothair II", "score": 0.8},
                  {"head": "Teutberga", "relation": "queen of", "tail": "Lotharingia"}],
    "hyperedges": [{"text": TEUTBERGA, "entities": ["Teutberga", "Lothair II", "Lotharingia"], "score": 0.7}],
}


def chunk() -> Chunk:
    return Chunk(id="d1:0", doc_id="d1", ordinal=0, text=TEUTBERGA, n_tokens=20, title="Teutberga")


def test_extract_parses_json_into_records(endpoint, tmp_path, key):
    endpoint.replies = [content(EXTRACTION)]
    llm = make(endpoint, tmp_path)
    (ex,) = llm.extract([chunk()])
    ents = {e.id: e for e in ex.entities}
    assert set(ents) == {"teutberga", "lothair ii", "lotharingia"}  # blank name dropped, relation tail added
    assert ents["teutberga"].type == "PERSON" and ents["teutberga"].score == 0.9
    assert ents["lothair ii"].score == 1.0  # clamped into (0, 1]
    assert {(r.head, r.relation, r.tail) for r in ex.relations} == {
        ("teutberga", "married to", "lothair ii"), ("teutberga", "queen of", "lotharingia")}
    (edge,) = ex.hyperedges
    assert edge.text == TEUTBERGA and edge.entities == ("lothair ii", "lotharingia", "teutberga")
    body = endpoint.requests[0]
    assert body["model"] == "test-model" and body["response_format"] == {"type": "json_object"}
    assert body["temperature"] == 0.0
    assert TEUTBERGA in body["messages"][1]["content"]
    assert endpoint.auth[0] == f"Bearer {SECRET}"
    usage = llm.usage.roles["extract"]
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens, usage.cache_hits) == (1, 11, 7, 0)


def test_retry_after_malformed_reply(endpoint, tmp_path, key):
    endpoint.replies = [{"content": "{not json"}, content({"route": "sideways"}), content({"route": "corpus"})]
    llm = make(endpoint, tmp_path)
    assert llm.route("What are the main themes?") == "corpus"
    assert len(endpoint.requests) == 3
    usage = llm.usage.roles["route"]
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (3, 33, 21)


def test_retry_after_transient_http_error(endpoint, tmp_path, key):
    endpoint.replies = [{"status": 503}, {"status": 429}, content({"directives": ["a", "b", "c", "d"]})]
    assert make(endpoint, tmp_path).decompose("q?", ["p"]) == ["a", "b", "c"]
    assert len(endpoint.requests) == 3


def test_second_identical_call_is_a_cache_hit(endpoint, tmp_path, key):
    endpoint.replies = [content(EXTRACTION)]
    llm = make(endpoint, tmp_path)
    first = llm.extract([chunk()])
    again = make(endpoint, tmp_path)  # a new process re-indexing the same text
    assert again.extract([chunk()]) == first
    assert len(endpoint.requests) == 1
    assert again.usage.roles["extract"].cache_hits == 1 and again.usage.roles["extract"].calls == 0
    files = list((tmp_path / "cache").rglob("*"))
    entries = [f for f in files if f.is_file()]
    assert len(entries) == 1 and entries[0].suffix == ".json" and not entries[0].name.startswith(".tmp")
    assert json.loads(entries[0].read_text())["role"] == "extract"
    # A different model is a different key.
    endpoint.replies = [content(EXTRACTION)]
    make(endpoint, tmp_path, model="other-model").extract([chunk()])
    assert len(endpoint.requests) == 2


def test_malformed_replies_are_never_cached(endpoint, tmp_path, key):
    endpoint.replies = [content({"answer": 42})] * 3
    with pytest.raises(BackendError):
        make(endpoint, tmp_path).answer("q?", [])
    assert not (tmp_path / "cache").exists() or not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


def test_backend_error_after_retries_are_exhausted(endpoint, tmp_path, key):
    endpoint.replies = [{"status": 500}] * 3
    llm = make(endpoint, tmp_path)
    with pytest.raises(BackendError, match=r"'route'.*after 3 attempt\(s\): HTTP 500"):
        llm.route("q?")
    assert len(endpoint.requests) == 3


def test_client_errors_are_not_retried_and_the_key_never_shows(endpoint, tmp_path, key):
    endpoint.replies = [{"status": 401}]
    with pytest.raises(BackendError, match="HTTP 401") as err:
        make(endpoint, tmp_path).route("q?")
    assert len(endpoint.requests) == 1
    assert SECRET not in str(err.value)
    endpoint.replies = [{"status": 400}]
    with pytest.raises(BackendError, match="HTTP 400: .*scripted failure 400"):
        make(endpoint, tmp_path).route("q2?")


def test_timeout(endpoint, tmp_path, key):
    endpoint.replies = [{"delay": 1.5, **content({"route": "entity"})}]
    llm = make(endpoint, tmp_path, timeout_s=0.2, max_retries=0)
    start = time.perf_counter()
    with pytest.raises(BackendError, match="timed out after 0.2 s"):
        llm.route("q?")
    assert time.perf_counter() - start < 1.2


def test_answer_summary_and_concurrent_batches(endpoint, tmp_path, key):
    endpoint.replies = [content({"answer": "Lothair II", "citations": [2, 9]})]
    llm = make(endpoint, tmp_path, concurrency=4, summary_max_tokens=16)
    ctx = [ContextItem("L1:0", "summary", "Lotharingia.", 0.5, number=1),
           ContextItem("d1:0", "chunk", TEUTBERGA, 0.9, ("d1",), number=2)]
    ans = llm.answer("Whom did Teutberga marry?", ctx)
    assert ans.text == "Lothair II" and ans.citations == (2,)  # item 9 does not exist
    system, user = (m["content"] for m in endpoint.requests[0]["messages"])
    # The endpoint gets HyGRAG's sectioned prompt (core.prompt), summaries before passages.
    assert user.index("## Community summaries") < user.index("## Source passages") < user.index(TEUTBERGA)
    assert "[2] (score 0.900) " + TEUTBERGA in user and "Insufficient information" in system
    assert endpoint.requests[0]["max_tokens"] == llm.cfg.answer_max_tokens

    def echo(body: dict[str, Any]) -> dict[str, Any]:
        member = body["messages"][1]["content"].split("[1] ", 1)[1].split("\n", 1)[0]
        return content({"themes": member, "entities": "e " * 10, "relations": "r", "context": "c " * 20})

    requests = [SummaryRequest((f"text{i}",)) for i in range(8)]
    endpoint.replies = [echo] * 8
    summaries = llm.summarize(requests)
    assert [s.split("\n")[0] for s in summaries] == [f"Themes: text{i}" for i in range(8)]
    assert all(len(s.split()) <= 16 for s in summaries)
    assert llm.usage.roles["summarize"].calls == 8


def test_factory_configuration(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match=r"llm\.base_url"):
        make_llm(LLMConfig(backend="vllm"))
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ConfigError, match=KEY_ENV):
        make_llm(LLMConfig(backend="openai", api_key_env=KEY_ENV))
    llm = make_llm(LLMConfig(backend="vllm", base_url="http://127.0.0.1:9/v1"), cache_dir=str(tmp_path))
    assert isinstance(llm, OpenAICompatLLM)
