"""Continuous batching for one model inside a replica's event loop.

A call that finds the model idle runs at once, alone; calls that arrive while the model is busy
queue, and the next model call takes every queued one (up to `max_batch`). Batches so grow with
the load by themselves. Serve's `@serve.batch` waits up to a timeout for each batch to fill,
which every request pays at low load, and it forms its next batch before the running one ends,
so a timeout of 0 gives batches of one under load (measured in README, Serving).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Generic, Sequence, TypeVar

log = logging.getLogger("hygraph.serve")

In = TypeVar("In")
Out = TypeVar("Out")

# The batch function gets the inputs in arrival order and returns one result per input: a value, or an
# exception that fails only that input's call.
BatchFn = Callable[[list[In]], Awaitable[Sequence[Out | Exception]]]


class ContinuousBatcher(Generic[In, Out]):
    def __init__(self, fn: BatchFn[In, Out], max_batch: int, max_wait_s: float = 0.0,
                 on_batch: Callable[[int], None] | None = None) -> None:
        """`max_wait_s` > 0 waits that long for a batch to fill when it starts short (for devices where
        larger batches cost little more, such as a GPU); 0 takes what is queued."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.fn, self.max_batch, self.max_wait_s, self.on_batch = fn, max_batch, max_wait_s, on_batch
        self._queue: asyncio.Queue[tuple[In, asyncio.Future[Out]]] | None = None
        self._worker: asyncio.Task[None] | None = None

    async def __call__(self, item: In) -> Out:
        if self._queue is None or self._worker is None or self._worker.done():
            # Created on first use, inside the replica's running loop.
            self._queue = asyncio.Queue()
            self._worker = asyncio.get_running_loop().create_task(self._run(self._queue))
        future: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((item, future))
        return await future

    async def _run(self, queue: asyncio.Queue[tuple[In, asyncio.Future[Out]]]) -> None:
        while True:
            batch = [await queue.get()]
            deadline = time.monotonic() + self.max_wait_s
            while len(batch) < self.max_batch:
                if not queue.empty():
                    batch.append(queue.get_nowait())
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(queue.get(), left))
                except asyncio.TimeoutError:
                    break
            live = [(item, fut) for item, fut in batch if not fut.done()]  # callers that gave up are skipped
            if live:
                await self._serve(live)

    async def _serve(self, batch: list[tuple[In, asyncio.Future[Out]]]) -> None:
        if self.on_batch is not None:
            try:
                self.on_batch(len(batch))
            except Exception as exc:  # noqa: BLE001 - a metrics failure must neither fail nor strand the batch
                log.warning("batch size not recorded: %s", type(exc).__name__)
        try:
            results = list(await self.fn([item for item, _ in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"batch function returned {len(results)} results for {len(batch)} inputs")
        except Exception as exc:  # noqa: BLE001 - fails this batch's calls; the loop serves the next batch
            results = [exc] * len(batch)
        for (_, future), result in zip(batch, results):
            if future.done():
                continue
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)
