"""The Serve deployments behind the ingress: question embedding, retrieval, answer generation.

Each takes the config as a plain dict (what a Serve config YAML can carry) and the index
directory. The Retriever is the only one that reads the index; it follows `CURRENT` so a
new version is picked up without a restart and without failing requests in flight.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from ray import serve

from hygraph.backends.embedder import make_embedder
from hygraph.backends.llm import make_llm
from hygraph.backends.llm.base import Answer, ContextItem
from hygraph.cluster.actor import updater_name
from hygraph.config import HygraphConfig
from hygraph.engine import QueryEngine
from hygraph.errors import IndexNotReady, InputError
from hygraph.store.versions import IndexStore
from hygraph.serve.metrics import EmbedderMetrics, IndexMetrics, LLMMetrics

log = logging.getLogger("hygraph.serve")


def encode_isolated(encode: Callable[[list[str]], np.ndarray], texts: list[str]) -> list[np.ndarray | Exception]:
    """One model call for the batch; if it fails, one call per text, so a text the model cannot take
    fails only its own request (an InputError naming the question) and never its batch-mates'."""
    try:
        return list(encode(texts))
    except Exception:  # noqa: BLE001 - isolated below, item by item
        out: list[np.ndarray | Exception] = []
        for text in texts:
            try:
                out.append(encode([text])[0])
            except Exception as exc:  # noqa: BLE001 - this request's own failure
                log.warning("question could not be embedded: %s", type(exc).__name__)
                out.append(InputError(f"question: could not be embedded ({type(exc).__name__})"))
        return out
UPDATER_LOOKUP_S = 30.0  # how often a Retriever looks again for an updater that was not running


@serve.deployment
class Embedder:
    """Questions to vectors; concurrent questions share one model call (@serve.batch)."""

    def __init__(self, config: dict[str, Any]) -> None:
        cfg = HygraphConfig.model_validate(config)
        self.model = make_embedder(cfg.embedder, threads=max(1.0, cfg.serve.embedder.num_cpus))
        self.metrics = EmbedderMetrics()
        self._embed_batch.set_max_batch_size(cfg.serve.embed_max_batch)
        self._embed_batch.set_batch_wait_timeout_s(cfg.serve.embed_batch_wait_s)

    async def embed(self, question: str) -> np.ndarray:
        got = await self._embed_batch(question)
        if isinstance(got, Exception):
            raise got
        return got

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.003)
    async def _embed_batch(self, questions: list[str]) -> list[np.ndarray | Exception]:
        self.metrics.batch.observe(len(questions))
        return await asyncio.to_thread(encode_isolated, self.model.encode, questions)


@serve.deployment
class Retriever:
    """One loaded index version (swapped when `CURRENT` moves) and every retrieval mode.

    A replica started before the first build has landed (a fresh Kubernetes deploy) is healthy
    but not ready: it answers 503 index_not_ready and loads the first version that appears.
    """

    def __init__(self, config: dict[str, Any], index_dir: str) -> None:
        self.cfg = HygraphConfig.model_validate(config)
        self.index_dir = index_dir
        self._engine: QueryEngine | None = None
        self.llm_metrics = LLMMetrics()
        self.index_metrics = IndexMetrics()
        self._open_when_built()
        cfg = self.cfg
        self._poll_s = cfg.serve.version_poll_s
        self._learn = cfg.updates.online_learning and cfg.hyperbolic.enabled
        self._updater_name = updater_name(index_dir)
        self._updater: Any = None
        self._updater_looked_up = -float("inf")
        # A daemon thread: it ends with the replica's process, whose exit also releases the
        # process's lease on the Milvus Lite server.
        threading.Thread(target=self._follow_current, name="hygraph-version-poll", daemon=True).start()

    def _open_when_built(self) -> None:
        if self._engine is None and IndexStore(self.index_dir).current_version() is not None:
            self._engine = QueryEngine(self.cfg, self.index_dir)
            log.info("serving index version %d", self._engine.version)
            self.index_metrics.version.set(self._engine.version)

    @property
    def engine(self) -> QueryEngine:
        if self._engine is None:
            raise IndexNotReady(f"index directory {self.index_dir} holds no index version yet "
                                "(run `hygraph index`; this replica loads it as soon as it lands)")
        return self._engine

    def _follow_current(self) -> None:
        while True:
            time.sleep(self._poll_s)
            try:
                if self._engine is None:
                    self._open_when_built()
                elif self.engine.refresh():
                    log.info("now serving index version %d", self.engine.version)
                    self.index_metrics.version.set(self.engine.version)
            except Exception:  # noqa: BLE001 - a half-visible version is retried on the next poll
                log.warning("could not load index version %s; still serving %s",
                            IndexStore(self.index_dir).current_version(),
                            self._engine.version if self._engine else "none", exc_info=True)

    def retrieve(self, question: str, query_vec: np.ndarray, mode: str, k: int, min_version: int = 0) -> dict[str, Any]:
        """The Context, its numbered prompt items and the version they came from (at least `min_version`)."""
        loaded = self.engine.at_least(min_version)
        t0 = time.perf_counter()
        ctx = self.engine.retrieve(question, query_vec, mode, k, loaded)
        items = self.engine.prompt_items(question, ctx)
        self.llm_metrics.record(self.engine.llm.usage)
        if mode == "hyperbolic" and self._learn:
            self._send_to_learner(ctx.notes["implicit_subgraph"], query_vec)
        return {"context": ctx, "items": items, "version": loaded.view.version,
                "seconds": time.perf_counter() - t0}

    def _send_to_learner(self, subgraph: dict[str, Any], query_vec: np.ndarray) -> None:
        """Fire and forget to the index's OnlineUpdater (HyperRAG §3.3): the query never waits on learning."""
        import ray

        if self._updater is None:
            if time.monotonic() - self._updater_looked_up < UPDATER_LOOKUP_S:
                return
            self._updater_looked_up = time.monotonic()
            try:
                self._updater = ray.get_actor(self._updater_name, namespace="hygraph")
            except ValueError:
                log.info("no OnlineUpdater for this index: hyperbolic queries are not learned from")
                return
        self._updater.observe.remote(subgraph, query_vec)

    def version(self) -> int:
        return self.engine.version

    def check_health(self) -> None:
        """Serve restarts a replica whose store is unreachable (StoreUnavailable)."""
        if self._engine is not None:
            self._engine.vectors.ping()


@serve.deployment
class Generator:
    """The `answer` role: extractive, an OpenAI-compatible server, or vLLM behind ray.serve.llm."""

    def __init__(self, config: dict[str, Any], index_dir: str) -> None:
        cfg = HygraphConfig.model_validate(config)
        self.llm = make_llm(cfg.llm, cache_dir=str(Path(index_dir) / "llm_cache"))
        self.metrics = LLMMetrics()

    def answer(self, question: str, items: list[ContextItem]) -> dict[str, Any]:
        before = self._tokens()
        ans = self.llm.answer(question, items)
        self.metrics.record(self.llm.usage)
        return {"answer": ans.text, "citations": list(ans.citations), "usage": self._used(before)}

    def stream(self, question: str, items: list[ContextItem]) -> Iterator[str | dict[str, Any]]:
        """Answer text pieces as the backend yields them, then {"answer", "citations", "usage"}."""
        before = self._tokens()
        for piece in self.llm.answer_stream(question, items):
            if isinstance(piece, Answer):
                self.metrics.record(self.llm.usage)
                yield {"answer": piece.text, "citations": list(piece.citations), "usage": self._used(before)}
            else:
                yield piece

    def _tokens(self) -> tuple[int, int]:
        role = self.llm.usage.roles["answer"]
        return role.prompt_tokens, role.completion_tokens

    def _used(self, before: tuple[int, int]) -> dict[str, int]:
        """This call's tokens (the backend's usage counters; concurrent calls on one replica can blur them)."""
        prompt, completion = self._tokens()
        return {"prompt_tokens": prompt - before[0], "completion_tokens": completion - before[1]}
