"""Continuous batching (serve/batching.py): no wait when idle, batches that grow with the load, failures kept apart."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hygraph.serve.batching import ContinuousBatcher


class Model:
    """Doubles numbers; a negative number fails, alone; each call takes `seconds`."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds, self.calls = seconds, []

    async def __call__(self, xs: list[int]) -> list[int | Exception]:
        self.calls.append(list(xs))
        await asyncio.sleep(self.seconds)
        return [ValueError(f"negative: {x}") if x < 0 else 2 * x for x in xs]


def test_a_call_on_an_idle_batcher_runs_at_once_even_with_a_large_batch_size():
    async def main():
        batcher = ContinuousBatcher(Model(), max_batch=64)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await batcher(3) == 6
        return loop.time() - t0

    assert asyncio.run(main()) < 0.05


def test_calls_arriving_while_the_model_runs_share_its_next_call():
    async def main():
        model = Model(seconds=0.05)
        sizes: list[int] = []
        batcher = ContinuousBatcher(model, max_batch=4, on_batch=sizes.append)
        first = asyncio.ensure_future(batcher(0))
        await asyncio.sleep(0.01)  # the model is busy with [0]
        rest = [asyncio.ensure_future(batcher(i)) for i in range(1, 7)]
        out = await asyncio.gather(first, *rest)
        return model.calls, sizes, out

    calls, sizes, out = asyncio.run(main())
    assert out == [0, 2, 4, 6, 8, 10, 12]
    assert calls == [[0], [1, 2, 3, 4], [5, 6]]  # capped at max_batch, arrival order kept
    assert sizes == [1, 4, 2]


def test_a_failing_input_fails_only_its_own_call():
    async def main():
        batcher = ContinuousBatcher(Model(seconds=0.01), max_batch=8)
        return await asyncio.gather(*(batcher(x) for x in (1, -1, 2)), return_exceptions=True)

    got = asyncio.run(main())
    assert got[0] == 2 and got[2] == 4
    assert isinstance(got[1], ValueError)


def test_a_batch_function_that_raises_fails_its_batch_and_the_next_batch_still_runs():
    calls = []

    async def flaky(xs):
        calls.append(xs)
        if len(calls) == 1:
            raise RuntimeError("model down")
        return xs

    async def main():
        batcher = ContinuousBatcher(flaky, max_batch=8)
        with pytest.raises(RuntimeError, match="model down"):
            await batcher(1)
        return await batcher(2)

    assert asyncio.run(main()) == 2


def test_a_wrong_number_of_results_is_an_error_not_a_hang():
    async def short(xs):
        return xs[:-1]

    async def main():
        batcher = ContinuousBatcher(short, max_batch=8)
        return await asyncio.wait_for(asyncio.gather(batcher(1), batcher(2), return_exceptions=True), 1.0)

    assert all(isinstance(r, RuntimeError) for r in asyncio.run(main()))


def test_a_cancelled_call_is_left_out_of_its_batch():
    async def main():
        model = Model(seconds=0.05)
        batcher = ContinuousBatcher(model, max_batch=8)
        first = asyncio.ensure_future(batcher(0))
        await asyncio.sleep(0.01)
        gone = asyncio.ensure_future(batcher(1))
        kept = asyncio.ensure_future(batcher(2))
        await asyncio.sleep(0)
        gone.cancel()
        return model, await first, await kept

    model, first, kept = asyncio.run(main())
    assert (first, kept) == (0, 4)
    assert model.calls == [[0], [2]]


def test_max_wait_fills_a_short_batch():
    async def main():
        model = Model()
        batcher = ContinuousBatcher(model, max_batch=3, max_wait_s=0.2)
        a = asyncio.ensure_future(batcher(1))
        await asyncio.sleep(0.02)
        b = asyncio.ensure_future(batcher(2))
        await asyncio.gather(a, b)
        return model.calls

    assert asyncio.run(main()) == [[1, 2]]


def test_max_batch_must_be_positive():
    with pytest.raises(ValueError, match="max_batch"):
        ContinuousBatcher(Model(), max_batch=0)


@settings(max_examples=40, deadline=None)
@given(xs=st.lists(st.integers(-5, 50), max_size=40), max_batch=st.integers(1, 9),
       gaps=st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.003]), min_size=40, max_size=40))
def test_every_call_gets_its_own_result_whatever_the_arrivals(xs, max_batch, gaps):
    async def main():
        model = Model(seconds=0.002)
        batcher = ContinuousBatcher(model, max_batch=max_batch)
        futures = []
        for x, gap in zip(xs, gaps):
            futures.append(asyncio.ensure_future(batcher(x)))
            await asyncio.sleep(gap)
        return model.calls, await asyncio.gather(*futures, return_exceptions=True)

    calls, got = asyncio.run(main())
    for x, r in zip(xs, got):
        assert isinstance(r, ValueError) if x < 0 else r == 2 * x
    assert [x for call in calls for x in call] == xs  # each input in exactly one call, in arrival order
    assert all(1 <= len(call) <= max_batch for call in calls)


def test_a_failing_batch_observer_neither_fails_nor_strands_the_batch():
    def observer(n):
        raise RuntimeError("metrics backend down")

    async def main():
        batcher = ContinuousBatcher(Model(), max_batch=4, on_batch=observer)
        return await asyncio.wait_for(asyncio.gather(batcher(1), batcher(2)), 1.0)

    assert asyncio.run(main()) == [2, 4]
