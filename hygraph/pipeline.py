"""The one query pipeline: embed -> retrieve -> generate, with a typed request and result.

`hygraph query`, `hygraph eval` and the Serve Retriever all run `QueryPipeline` over a
`QueryEngine`; Serve only decides where each step runs (the question is embedded inside the
Retriever replica, concurrent questions batched into one model call; an extractive answer is
produced there too, and an LLM answer goes to the Generator deployment). The JSON shape of a result is CONTRACT.md's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence

import numpy as np
import orjson

from hygraph.backends.llm.base import LLM, Answer
from hygraph.config import RetrievalConfig
from hygraph.core.retrieval.context import Context, ContextItem
from hygraph.core.retrieval.modes import MODE_NAMES, MODES
from hygraph.engine import QueryEngine
from hygraph.store.reading import Loaded
from hygraph.errors import InputError
from hygraph.input_rules import check_filter, check_nonblank_text

Encode = Callable[[Sequence[str]], np.ndarray]
# A served answer cache's use by one request (HTTP `Cache-Control`): "use" reads and fills it, "refresh"
# (`no-cache`) computes the result and stores it, "off" (`no-store`) computes it and stores nothing.
CacheUse = Literal["use", "refresh", "off"]


@dataclass(frozen=True)
class QueryRequest:
    question: str
    mode: str
    k: int
    min_version: int = 0  # read-your-writes: answer from this index version or a newer one
    # Passages only from documents whose metadata matches (core/retrieval/filter.py); None or {}: all documents.
    filter: Mapping[str, Any] | None = None
    index: str = "default"  # the service's index it asks (store/registry.py); "default": `--index-dir`
    cache: CacheUse = "use"

    @classmethod
    def make(cls, cfg: RetrievalConfig, question: str, mode: str | None = None, k: int | None = None,
             min_version: int | None = None,
             filter: Mapping[str, Any] | None = None,  # noqa: A002 - the API's field name
             index: str = "default", cache: CacheUse = "use") -> "QueryRequest":
        """The request with the configured defaults; InputError naming the bad field."""
        check_nonblank_text(question, "question")
        mode = mode or cfg.mode
        if mode not in MODE_NAMES:
            raise InputError(f"mode: unknown mode '{mode[:40]}' (one of {', '.join(MODE_NAMES)})")
        if filter is not None:
            check_filter(filter)
        return cls(question, mode, k or cfg.top_k, min_version or 0, filter or None, index, cache)


def needs_question_vector(req: QueryRequest) -> bool:
    """Whether the mode searches by the question's vector (core/retrieval/modes.py); a filtered query fills
    up with the nearest allowed passages by dense similarity (core/retrieval/filtered.py), so it needs one too."""
    return MODES[req.mode].question_vector or bool(req.filter)


@dataclass
class Retrieval:
    """What retrieval hands to generation: the context, its numbered prompt items, the version read.

    The context holds the prompt's items only (`Context.numbered`): what the answer is generated from
    and cites, bounded by `retrieval.max_context_tokens`, so a mode that retrieves hundreds of items
    (hypergraph's expansion) neither ships nor returns them all.
    """

    request: QueryRequest
    context: Context
    items: list[ContextItem]
    version: int
    seconds: dict[str, float] = field(default_factory=dict)  # embed, retrieve


@dataclass
class QueryResult:
    request: QueryRequest
    answer: str
    citations: list[int]
    context: Context
    version: int
    seconds: dict[str, float]
    usage: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        """CONTRACT.md's query result (plus `usage`), shared by `hygraph query` and `POST /v1/query`."""
        return {**self._timeless(), "timings_ms": timings_ms(self.seconds)}

    def render(self) -> "Rendered":
        """The result as the JSON the service sends, made here: a Serve replica hands the Ingress these bytes,
        not the context's objects to pickle, unpickle and encode again (hypergraph's context is ~190 items)."""
        body = orjson.dumps(self._timeless(), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
        return Rendered(self.request.mode, self.answer, self.version, dict(self.context.notes["retrieved"]),
                        self.seconds, body[:-1])

    def _timeless(self) -> dict[str, Any]:
        return {
            "answer": self.answer, "mode": self.request.mode,
            "passages": [{"id": p.id, "title": p.title, "score": round(p.score, 6), "metadata": p.metadata}
                         for p in self.context.passages],
            "context": {**self.context.to_dict(), "citations": self.citations},
            "index_version": self.version,
            "usage": self.usage,
        }


@dataclass
class Rendered:
    """A served query's result, rendered where it was computed: its JSON without `timings_ms` (the body
    minus its closing brace), and what the Ingress needs to time it and count it. `seconds` stays open
    until `json`: the replica adds its embedding time, the Ingress the total."""

    mode: str
    answer: str
    version: int  # the index version that answered
    retrieved: dict[str, int]  # notes["retrieved"]: items retrieved per kind, for the metrics
    seconds: dict[str, float]
    body: bytes

    def json(self) -> bytes:
        return self.body + b',"timings_ms":' + orjson.dumps(timings_ms(self.seconds)) + b"}"


def timings_ms(seconds: Mapping[str, float]) -> dict[str, float]:
    return {stage: round(s * 1e3, 2) for stage, s in seconds.items()}


def finish(retrieval: Retrieval, answer: Answer, usage: dict[str, int], generate_s: float) -> QueryResult:
    seconds = {**retrieval.seconds, "generate": generate_s}
    seconds["total"] = sum(seconds.values())
    return QueryResult(retrieval.request, answer.text, list(answer.citations), retrieval.context,
                       retrieval.version, seconds, usage)


def _tokens(llm: LLM) -> tuple[int, int]:
    role = llm.usage.roles["answer"]
    return role.prompt_tokens, role.completion_tokens


def _used(llm: LLM, before: tuple[int, int]) -> dict[str, int]:
    """This call's tokens, from the backend's running counters (concurrent calls on one LLM object can
    blur them; the totals stay exact)."""
    prompt, completion = _tokens(llm)
    return {"prompt_tokens": prompt - before[0], "completion_tokens": completion - before[1]}


def answer(llm: LLM, retrieval: Retrieval) -> QueryResult:
    """The `answer` role over the numbered context; it cites item numbers."""
    t0, before = time.perf_counter(), _tokens(llm)
    ans = llm.answer(retrieval.request.question, retrieval.items)
    return finish(retrieval, ans, _used(llm, before), time.perf_counter() - t0)


def answer_stream(llm: LLM, retrieval: Retrieval) -> Iterator[str | QueryResult]:
    """`answer` as the backend produces it: text pieces, then the QueryResult last."""
    t0, before = time.perf_counter(), _tokens(llm)
    for piece in llm.answer_stream(retrieval.request.question, retrieval.items):
        if isinstance(piece, Answer):
            yield finish(retrieval, piece, _used(llm, before), time.perf_counter() - t0)
        else:
            yield piece


class QueryPipeline:
    """embed -> retrieve -> generate over one QueryEngine, in this process."""

    def __init__(self, engine: QueryEngine, encode: Encode | None = None) -> None:
        self.engine = engine
        self.encode = encode or engine.embedder.encode

    def retrieve(self, req: QueryRequest, query_vec: np.ndarray | None = None) -> Retrieval:
        """Steps 1-2. `query_vec` when the caller embedded the question already (a batch)."""
        loaded: Loaded = self.engine.at_least(req.min_version)
        t0 = time.perf_counter()
        qv = self.encode([req.question])[0] if query_vec is None and needs_question_vector(req) else query_vec
        t1 = time.perf_counter()
        ctx = self.engine.retrieve(req.question, qv, req.mode, req.k, loaded, req.filter)
        items = self.engine.prompt_items(req.question, ctx)
        return Retrieval(req, ctx.numbered(items), items, loaded.view.version,
                         {"embed": t1 - t0, "retrieve": time.perf_counter() - t1})

    def run(self, req: QueryRequest) -> QueryResult:
        return answer(self.engine.llm, self.retrieve(req))
