"""The project's metrics, exported with Serve's own on Ray's Prometheus endpoint.

Ray prefixes every name with `ray_` (e.g. `ray_hygraph_query_latency_ms_bucket`). Each
deployment creates only the metrics it records.
"""

from __future__ import annotations

import threading
from typing import Any

from hygraph.backends.llm.base import Usage

LATENCY_MS = [1, 2, 5, 10, 20, 35, 50, 75, 100, 150, 250, 500, 1000, 2500, 5000, 10000, 30000]


def _serve_metrics() -> Any:
    from ray.serve import metrics

    return metrics


class IngressMetrics:
    def __init__(self) -> None:
        m = _serve_metrics()
        self.latency = m.Histogram("hygraph_query_latency_ms", "Query latency by mode and stage "
                                   "(embed, retrieve, generate, total).", boundaries=LATENCY_MS,
                                   tag_keys=("mode", "stage"))
        self.retrieved = m.Counter("hygraph_retrieved_items_total", "Context items returned, by mode and kind.",
                                   tag_keys=("mode", "kind"))
        self.errors = m.Counter("hygraph_errors_total", "Error responses by HTTP status and code.",
                                tag_keys=("status", "code", "endpoint"))
        self.requests = m.Counter("hygraph_requests_total", "Requests by endpoint.", tag_keys=("endpoint",))
        self.ingest = m.Counter("hygraph_ingest_jobs_total", "Journaled write jobs by operation.",
                                tag_keys=("op",))

    def observe_query(self, mode: str, seconds: dict[str, float], counts: dict[str, int]) -> None:
        for stage, s in seconds.items():
            self.latency.observe(s * 1e3, tags={"mode": mode, "stage": stage})
        for kind, n in counts.items():
            if n:
                self.retrieved.inc(n, tags={"mode": mode, "kind": kind})


class EmbedderMetrics:
    def __init__(self) -> None:
        m = _serve_metrics()
        self.batch = m.Histogram("hygraph_embed_batch_size", "Questions per embedding model call.",
                                 boundaries=[1, 2, 4, 8, 16, 32, 64, 128])


class IndexMetrics:
    def __init__(self) -> None:
        m = _serve_metrics()
        self.version = m.Gauge("hygraph_index_version", "Index version a Retriever replica serves.")
        self.loaded = m.Gauge("hygraph_loaded_indexes", "Named indexes a Retriever replica holds loaded "
                              "(at most serve.max_loaded_indexes).")
        self.unloads = m.Counter("hygraph_index_unloads_total", "Named indexes a Retriever replica unloaded to stay "
                                 "within serve.max_loaded_indexes (the least recently asked first).")
        self.points_moved = m.Counter("hygraph_points_moved_total", "Hyperbolic points a Retriever replica holds "
                                      "that it moved as the online learner's feed told it (store/points.py).")


class LLMMetrics:
    """LLM calls and tokens by role, as increments of a backend's running `Usage`."""

    def __init__(self) -> None:
        m = _serve_metrics()
        self.calls = m.Counter("hygraph_llm_calls_total", "LLM calls by role.", tag_keys=("role",))
        self.tokens = m.Counter("hygraph_llm_tokens_total", "LLM tokens by role and direction.",
                                tag_keys=("role", "direction"))
        self._seen = Usage()
        self._lock = threading.Lock()  # replicas run sync methods on a thread pool

    def record(self, usage: Usage) -> None:
        with self._lock:
            for role, now in usage.roles.items():
                seen = self._seen.roles[role]
                if now.calls > seen.calls:
                    self.calls.inc(now.calls - seen.calls, tags={"role": role})
                for direction, value, before in (("prompt", now.prompt_tokens, seen.prompt_tokens),
                                                 ("completion", now.completion_tokens, seen.completion_tokens)):
                    if value > before:
                        self.tokens.inc(value - before, tags={"role": role, "direction": direction})
            self._seen = Usage()
            self._seen.merge(usage)


class AnswerCacheMetrics:
    def __init__(self) -> None:
        m = _serve_metrics()
        self.lookups = m.Counter("hygraph_answer_cache_lookups_total", "Answer cache lookups by result (hit, miss).",
                                 tag_keys=("result",))

    def record(self, hit: bool) -> None:
        self.lookups.inc(tags={"result": "hit" if hit else "miss"})
