"""Every LLM role through an OpenAI-compatible chat endpoint: vLLM, SGLang or a hosted API.

Each role sends one JSON-mode prompt per item and parses the reply strictly into hygraph's
records; a malformed reply or a transient failure is retried with exponential backoff.
Parsed replies are cached on disk by sha256(model, role, prompt), so re-indexing the same
text costs nothing. `usage.calls` counts requests the endpoint answered; replies served
from the cache are counted as `cache_hits` only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar, Union

import openai

from hygraph.backends.llm.base import ROUTES, Answer, ContextItem, Route, SummaryRequest, Usage
from hygraph.config import LLMConfig
from hygraph.core.prompt import SYSTEM_PROMPT, render_user
from hygraph.errors import BackendError, ConfigError
from hygraph.model import Chunk, Entity, Extraction, Hyperedge, Relation, normalize_name

T = TypeVar("T")
MAX_DIRECTIVES = 3
# vLLM and SGLang started without --api-key accept any bearer token; the client insists on one.
_UNAUTHENTICATED = "EMPTY"
_RETRY_STATUS = frozenset((408, 409, 429))

_EXTRACT_SYSTEM = """You build a knowledge graph from one passage. Reply with one JSON object:
{"entities": [{"name": str, "type": str, "description": str, "score": number}],
 "relations": [{"head": str, "relation": str, "tail": str, "score": number}],
 "hyperedges": [{"text": str, "entities": [str], "score": number}]}
entities: every person, organization, place, date, number, work or event named in the passage;
type is one of PERSON, ORGANIZATION, LOCATION, DATE, NUMBER, WORK, EVENT, OTHER; description is
one sentence from what the passage says about it; score in (0, 1] is how central it is.
relations: binary facts between two entities named exactly as in "entities"; relation is a short
verb phrase. hyperedges: each a self-contained sentence stating one fact of the passage that
involves two or more entities, listed by name in "entities". score in (0, 1] is your confidence.
Use only what the passage states."""

_SUMMARIZE_SYSTEM = """You summarize one community of a knowledge graph. Reply with one JSON object:
{"themes": str, "entities": str, "relations": str, "context": str}
themes: the topics the texts share; entities: the key entities and the role of each; relations:
how they relate; context: the facts a reader needs. Use only the given texts, and keep the four
parts together under {max_tokens} words."""

_DECOMPOSE_SYSTEM = """You plan the next retrieval round for a multi-hop question. From the passages
found so far, name up to 3 entities that the question does not mention but that the answer depends
on (for example the director of a film the question names), each as a search directive that pairs
the entity with what is still unknown. Reply with one JSON object: {"directives": [str]}."""

# The rules are HyGRAG's prompt (core.prompt); this backend only adds the JSON reply format.
_ANSWER_SYSTEM = SYSTEM_PROMPT + """
Reply with one JSON object: {"answer": str, "citations": [int]}; citations are the numbers of the
items the answer rests on."""

# Streamed answers are plain text (JSON cannot be shown while it is half written): citations
# are the [n] markers in the text.
_ANSWER_STREAM_SYSTEM = SYSTEM_PROMPT + """
Reply in plain text and cite the items the answer rests on by their numbers in brackets, e.g. [2]."""
_CITATION = re.compile(r"\[(\d+)\]")

_ROUTE_SYSTEM = """You classify a question for retrieval. "entity": it asks about something it names
("When did Teutberga die?"). "bridge": it describes an entity instead of naming it, so the answer is
one or more hops away ("Where was the director of film A Rare Bird born?", "the city where X was
born"). "comparison": it compares two things it names or asks yes/no about both ("Which film came
out first, X or Y?", "Are X and Y both directors?"). "corpus": it asks about the whole collection
(main themes, overall trends, summaries) rather than specific entities. Reply with one JSON object:
{"route": "entity" | "bridge" | "comparison" | "corpus"}."""


class _Malformed(ValueError):
    """A reply that does not fit the role's schema; worth asking again."""


def _load_object(content: str | None) -> dict[str, Any]:
    if not content:
        raise _Malformed("empty reply")
    text = content.strip()
    if text.startswith("```"):  # some models fence JSON even in JSON mode
        text = text.strip("`").removeprefix("json").strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Malformed(f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise _Malformed("not a JSON object")
    return obj


def _items(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = obj.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise _Malformed(f"'{key}' must be a list of objects")
    return value


def _text(item: dict[str, Any], key: str, required: bool = True) -> str:
    value = item.get(key, "")
    if not isinstance(value, str):
        raise _Malformed(f"'{key}' must be a string")
    if required and not value.strip():
        raise _Malformed(f"'{key}' is empty")
    return value.strip()


def _score(item: dict[str, Any]) -> float:
    value = item.get("score", 1.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Malformed("'score' must be a number")
    return min(1.0, max(0.01, float(value)))


def _strings(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Malformed(f"'{key}' must be a list of strings")
    return [v.strip() for v in value if v.strip()]


def parse_extraction(obj: dict[str, Any], chunk_id: str) -> Extraction:
    """The extract reply as records; names used by relations or hyperedges but not listed become entities."""
    entities: dict[str, Entity] = {}
    for item in _items(obj, "entities"):
        name = _text(item, "name", required=False)
        eid = normalize_name(name)
        if eid and eid not in entities:
            entities[eid] = Entity(eid, name, _text(item, "type", required=False),
                                   _text(item, "description", required=False), _score(item))
    relations: dict[str, Relation] = {}
    mentioned: list[str] = []
    for item in _items(obj, "relations"):
        rel = Relation.make(_text(item, "head"), _text(item, "relation"), _text(item, "tail"), _score(item))
        if rel.head and rel.tail:
            relations.setdefault(rel.id, rel)
            mentioned += [_text(item, "head"), _text(item, "tail")]
    hyperedges: dict[str, Hyperedge] = {}
    for item in _items(obj, "hyperedges"):
        names = _strings(item.get("entities"), "entities")
        edge = Hyperedge.make(_text(item, "text"), names, _score(item))
        if edge.entities:
            hyperedges.setdefault(edge.id, edge)
            mentioned += names
    for name in mentioned:
        eid = normalize_name(name)
        if eid and eid not in entities:
            entities[eid] = Entity(eid, name, score=0.5)
    return Extraction(chunk_id, list(entities.values()), list(relations.values()), list(hyperedges.values()))


def parse_summary(obj: dict[str, Any], max_tokens: int) -> str:
    parts = [("Themes", "themes"), ("Entities and roles", "entities"), ("Relations", "relations"),
             ("Context", "context")]
    lines, room = [], max_tokens
    for label, key in parts:
        value = obj.get(key, "")
        body = "; ".join(_strings(value, key)) if isinstance(value, list) else _text(obj, key, required=False)
        tokens = f"{label}: {body}".split()[:room] if body else []
        if tokens:
            lines.append(" ".join(tokens))
            room -= len(tokens)
    if not lines:
        raise _Malformed("empty summary")
    return "\n".join(lines)


def parse_directives(obj: dict[str, Any]) -> list[str]:
    return _strings(obj.get("directives"), "directives")[:MAX_DIRECTIVES]


def parse_answer(obj: dict[str, Any], numbers: set[int]) -> Answer:
    text = _text(obj, "answer")
    cited = obj.get("citations", [])
    if not isinstance(cited, list) or any(isinstance(c, bool) or not isinstance(c, int) for c in cited):
        raise _Malformed("'citations' must be a list of integers")
    # A model may cite an item that does not exist; such a citation is dropped, not trusted.
    return Answer(text, tuple(sorted({c for c in cited if c in numbers})))


def parse_route(obj: dict[str, Any]) -> Route:
    route = obj.get("route")
    if route not in ROUTES:
        raise _Malformed(f"'route' must be one of {', '.join(ROUTES)}")
    return route


class OpenAICompatLLM:
    """The five roles over `cfg.base_url` (None: the OpenAI API); the key is read from `cfg.api_key_env`."""

    def __init__(self, cfg: LLMConfig, cache_dir: str | None = None, backoff_s: float = 0.5) -> None:
        key = os.environ.get(cfg.api_key_env)
        if not key and cfg.base_url is None:
            raise ConfigError(f"llm.api_key_env: environment variable {cfg.api_key_env} is not set")
        self.cfg = cfg
        self.usage = Usage()
        self._key = key or _UNAUTHENTICATED
        self._backoff_s = backoff_s
        self._cache = Path(cache_dir) if cache_dir else None
        self._lock = threading.Lock()
        self._client = openai.OpenAI(api_key=self._key, base_url=cfg.base_url, timeout=cfg.timeout_s,
                                     max_retries=0)

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        def one(chunk: Chunk) -> Extraction:
            user = f"Title: {chunk.title}\n\n{chunk.text}" if chunk.title else chunk.text
            return self._call("extract", _EXTRACT_SYSTEM, user, lambda o: parse_extraction(o, chunk.id))

        return self._map(one, chunks)

    def summarize(self, requests: Sequence[SummaryRequest]) -> list[str]:
        budget = self.cfg.summary_max_tokens
        system = _SUMMARIZE_SYSTEM.replace("{max_tokens}", str(budget))

        def one(request: SummaryRequest) -> str:
            texts = "\n\n".join(f"[{i}] {t}" for i, t in enumerate(request.member_texts, 1))
            user = (f"Texts:\n{texts}\n\nKey entities: {'; '.join(request.entities) or '-'}\n"
                    f"Relations: {'; '.join(request.relations) or '-'}")
            # JSON keys and sub-word tokens take more model tokens than the words we keep.
            return self._call("summarize", system, user, lambda o: parse_summary(o, budget), 2 * budget)

        return self._map(one, requests)

    def decompose(self, question: str, passages: Sequence[str]) -> list[str]:
        found = "\n\n".join(f"[{i}] {p}" for i, p in enumerate(passages, 1))
        user = f"Question: {question}\n\nPassages:\n{found}"
        return self._call("decompose", _DECOMPOSE_SYSTEM, user, parse_directives)

    def answer(self, question: str, context: Sequence[ContextItem]) -> Answer:
        user = render_user(question, context)
        numbers = {c.number for c in context}
        return self._call("answer", _ANSWER_SYSTEM, user, lambda o: parse_answer(o, numbers),
                          self.cfg.answer_max_tokens)

    def answer_stream(self, question: str, context: Sequence[ContextItem]) -> Iterator[Union[str, Answer]]:
        """Tokens as the server streams them; no retry once tokens have been shown to the caller."""
        messages = [{"role": "system", "content": _ANSWER_STREAM_SYSTEM},
                    {"role": "user", "content": render_user(question, context)}]
        parts: list[str] = []
        try:
            stream = self._client.chat.completions.create(
                model=self.cfg.model, messages=messages, temperature=self.cfg.temperature,
                max_tokens=self.cfg.answer_max_tokens, stream=True, stream_options={"include_usage": True})
            for chunk in stream:
                if chunk.usage:
                    self._count("answer", calls=0, prompt_tokens=chunk.usage.prompt_tokens,
                                completion_tokens=chunk.usage.completion_tokens)
                delta = chunk.choices[0].delta.content if chunk.choices else None
                if delta:
                    parts.append(delta)
                    yield delta
        except openai.APIStatusError as exc:
            detail = "" if exc.status_code in (401, 403) else f": {exc.message}"[:300]
            raise BackendError(self._failure("answer", 1, f"HTTP {exc.status_code}{detail}")) from None
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise BackendError(self._failure("answer", 1, type(exc).__name__)) from None
        self._count("answer")
        text = "".join(parts).strip()
        numbers = {c.number for c in context}
        yield Answer(text, tuple(sorted({int(n) for n in _CITATION.findall(text)} & numbers)))

    def route(self, question: str) -> Route:
        return self._call("route", _ROUTE_SYSTEM, f"Question: {question}", parse_route)

    def _map(self, fn: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
        if len(items) <= 1:
            return [fn(item) for item in items]
        pool = ThreadPoolExecutor(max_workers=min(self.cfg.concurrency, len(items)))
        try:
            return list(pool.map(fn, items))
        finally:
            pool.shutdown(cancel_futures=True)  # after a failure, items not yet started are dropped

    def _count(self, role: str, **counts: int) -> None:
        with self._lock:
            self.usage.count(role, **counts)

    def _call(self, role: str, system: str, user: str, parse: Callable[[dict[str, Any]], T],
              max_tokens: int | None = None) -> T:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        key = hashlib.sha256(json.dumps([self.cfg.model, role, messages]).encode()).hexdigest()
        cached = self._cache_get(key)
        if cached is not None:
            try:
                result = parse(cached)
            except _Malformed:
                pass  # written under an older schema: ask again
            else:
                self._count(role, calls=0, cache_hits=1)
                return result
        error = ""
        for attempt in range(self.cfg.max_retries + 1):
            if attempt:
                time.sleep(self._backoff_s * 2 ** (attempt - 1))
            try:
                reply = self._client.chat.completions.create(
                    model=self.cfg.model, messages=messages, temperature=self.cfg.temperature,
                    response_format={"type": "json_object"},
                    **({"max_tokens": max_tokens} if max_tokens else {}))
            except openai.APIStatusError as exc:
                # Auth failures are reported by status alone: their text may echo part of the key.
                detail = "" if exc.status_code in (401, 403) else f": {exc.message}"[:300]
                error = f"HTTP {exc.status_code}{detail}"
                if exc.status_code in _RETRY_STATUS or exc.status_code >= 500:
                    continue
                raise BackendError(self._failure(role, attempt + 1, error)) from None
            except openai.APITimeoutError:
                error = f"timed out after {self.cfg.timeout_s:g} s"
                continue
            except openai.APIConnectionError as exc:
                error = f"connection failed ({type(exc.__cause__ or exc).__name__})"
                continue
            used = reply.usage
            self._count(role, prompt_tokens=used.prompt_tokens if used else 0,
                        completion_tokens=used.completion_tokens if used else 0)
            try:
                obj = _load_object(reply.choices[0].message.content if reply.choices else None)
                result = parse(obj)
            except _Malformed as exc:
                error = f"malformed reply: {exc}"
                continue
            self._cache_put(key, role, obj)
            return result
        raise BackendError(self._failure(role, self.cfg.max_retries + 1, error))

    def _failure(self, role: str, attempts: int, error: str) -> str:
        where = self.cfg.base_url or "the OpenAI API"
        message = f"LLM role '{role}' (model {self.cfg.model} at {where}) failed after {attempts} attempt(s)"
        return f"{message}: {error}".replace(self._key, "***")

    def _cache_path(self, key: str) -> Path | None:
        return self._cache / key[:2] / f"{key}.json" if self._cache else None

    def _cache_get(self, key: str) -> dict[str, Any] | None:
        path = self._cache_path(key)
        if path is None or not path.is_file():
            return None
        try:
            reply = json.loads(path.read_text(encoding="utf-8")).get("reply")
        except (OSError, json.JSONDecodeError, AttributeError):
            return None  # a damaged entry is a miss; the next good reply overwrites it
        return reply if isinstance(reply, dict) else None

    def _cache_put(self, key: str, role: str, reply: dict[str, Any]) -> None:
        path = self._cache_path(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"model": self.cfg.model, "role": role, "reply": reply}, fh)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
