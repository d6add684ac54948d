"""A replica's question encoder: texts a retrieval mode embeds from a worker thread join the question batches."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from hygraph.config import HygraphConfig
from hygraph.serve.question_encoder import QuestionEncoder


@pytest.fixture(scope="module")
def encoder() -> QuestionEncoder:
    return QuestionEncoder(HygraphConfig(), threads=1)


def test_a_worker_threads_texts_are_embedded_in_the_batches_even_with_every_default_thread_waiting(encoder):
    texts = ["Who directed Alien?", "Ridley Scott", "the Nostromo, a commercial towing vessel"]
    alone = np.stack([encoder.model.encode([t])[0] for t in texts])
    sizes: list[int] = []

    async def main() -> list[np.ndarray]:
        loop = asyncio.get_running_loop()
        # One default thread, as busy as a replica's under load: every one of them waits on a batch.
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        observe = encoder.metrics.batch.observe
        encoder._batcher.on_batch = sizes.append  # noqa: SLF001 - counting the model calls
        try:
            question = await encoder.encode("What ship is in Alien?")  # the replica's first question
            modes = [asyncio.to_thread(encoder.shared.encode, texts) for _ in range(3)]
            return [question, *await asyncio.wait_for(asyncio.gather(*modes), 60)]
        finally:
            encoder._batcher.on_batch = observe  # noqa: SLF001

    question, *per_mode = asyncio.run(main())
    assert question.shape == (encoder.model.dim,)
    for vectors in per_mode:
        assert np.abs(vectors - alone).max() < 1e-5
    # 1 question + 3 x 3 texts in fewer model calls than texts: they were batched.
    assert sum(sizes) == 10 and len(sizes) < 10


def test_without_a_running_loop_the_model_is_called_directly(encoder):
    fresh = QuestionEncoder(HygraphConfig(), threads=1)
    got = fresh.shared.encode(["Ridley Scott"])
    assert np.abs(got - encoder.model.encode(["Ridley Scott"])).max() < 1e-5
    assert fresh.shared.dim == encoder.model.dim
