"""A replica's question encoder: every text the replica embeds goes through one continuously batched model.

Questions arrive on the replica's event loop and are batched there (serve/batching.py). A retrieval mode that
embeds more than its question (hypergraph's entity spans, hyperbolic's directives) runs in a worker thread;
its texts join the same batches (`SharedEmbedder`), so they pay a batch's per-token cost instead of a model
call of their own (a call's fixed cost is worth 9-18 tokens, more than a span's text: docs/bench/
question_batches.md). Model calls run on a thread of their own: the worker threads that wait for them are
the event loop's default executor, which the model calls must therefore not need.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import numpy as np

from hygraph.backends.embedder import make_embedder
from hygraph.config import HygraphConfig
from hygraph.errors import InputError
from hygraph.serve.batching import ContinuousBatcher
from hygraph.serve.metrics import EmbedderMetrics

log = logging.getLogger("hygraph.serve")
# How long a worker thread waits for its texts' batch: far beyond a batch's time, short of hanging a request
# for good should the replica's event loop be gone.
SHARED_WAIT_S = 60.0


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


class QuestionEncoder:
    """Concurrent questions share one model call: continuous batching (serve/batching.py), sized by
    `serve.embed_max_batch` and `serve.embed_batch_wait_s`; used inside a replica's event loop."""

    def __init__(self, cfg: HygraphConfig, threads: float) -> None:
        self.model = make_embedder(cfg.embedder, threads=max(1.0, threads), workload="questions")
        self.metrics = EmbedderMetrics()
        self._batcher: ContinuousBatcher[str, np.ndarray] = ContinuousBatcher(
            self._encode, cfg.serve.embed_max_batch, cfg.serve.embed_batch_wait_s, self.metrics.batch.observe)
        self._model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hygraph-embed")
        self.loop: asyncio.AbstractEventLoop | None = None  # the replica's, known from the first question
        self.shared = SharedEmbedder(self)

    async def encode(self, question: str) -> np.ndarray:
        self.loop = asyncio.get_running_loop()
        return await self._batcher(question)

    async def encode_many(self, texts: Sequence[str]) -> np.ndarray:
        vectors = await asyncio.gather(*(self._batcher(text) for text in texts))
        return np.stack(vectors) if vectors else np.zeros((0, self.model.dim), np.float32)

    async def _encode(self, questions: list[str]) -> list[np.ndarray | Exception]:
        return await asyncio.get_running_loop().run_in_executor(self._model_thread, encode_isolated,
                                                                self.model.encode, questions)


class SharedEmbedder:
    """The Embedder a replica's QueryEngine embeds with (core/retrieval's `Embed`): from a worker thread the
    texts join the encoder's batches on the event loop; elsewhere (no question seen yet, or on the loop's own
    thread, which must not wait on itself) the model is called directly."""

    def __init__(self, encoder: QuestionEncoder) -> None:
        self.encoder = encoder
        self.dim, self.max_seq_length = encoder.model.dim, encoder.model.max_seq_length
        self.precision = encoder.model.precision

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        loop = self.encoder.loop
        if loop is None or not loop.is_running() or _on_loop(loop):
            return self.encoder.model.encode(texts)
        return asyncio.run_coroutine_threadsafe(self.encoder.encode_many(list(texts)), loop).result(SHARED_WAIT_S)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
