"""A local Ray start that times out is tried again; any other failure is reported at once."""

from __future__ import annotations

import pytest

from hygraph import runtime
from hygraph.config import RayConfig
from hygraph.errors import HygraphError


class FakeRay:
    def __init__(self, errors: list[str]) -> None:
        self.errors, self.inits, self.shutdowns = list(errors), 0, 0

    def init(self, **kwargs: object) -> None:
        self.inits += 1
        if self.errors:
            raise Exception(self.errors.pop(0))  # noqa: TRY002 - what Ray raises

    def shutdown(self) -> None:
        self.shutdowns += 1


TIMED_OUT = "The current node timed out during startup. This could happen because some of the raylet failed"


@pytest.mark.parametrize("errors,inits,fails", [
    ([TIMED_OUT, TIMED_OUT], 3, False),  # started on the third try
    ([TIMED_OUT] * 3, 3, True),          # three time-outs: reported
    (["raylet binary not found"], 1, True),  # not a time-out: reported at once
])
def test_a_timed_out_start_is_tried_again(monkeypatch, errors, inits, fails):
    monkeypatch.setattr(runtime, "START_PAUSE_S", 0.0)
    ray = FakeRay(errors)
    if fails:
        with pytest.raises(HygraphError, match="could not start a local Ray"):
            runtime._start_local(ray, RayConfig(), {})
    else:
        runtime._start_local(ray, RayConfig(), {})
    assert ray.inits == inits and ray.shutdowns == len(errors)
