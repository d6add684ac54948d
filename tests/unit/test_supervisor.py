"""`hygraph serve`'s supervisor: which exits of the service it restarts, how often, and when it stops."""

from __future__ import annotations

import pytest

from hygraph.config import HygraphConfig
from hygraph.serve import supervisor


@pytest.fixture
def runs(monkeypatch):
    """The statuses the service's runs exit with, in order; records each run's argv."""
    statuses: list[int] = []
    seen: list[list[str]] = []

    def run_watched(argv, signalled=None):
        seen.append(list(argv))
        return statuses.pop(0)

    cfg = HygraphConfig.model_validate({"serve": {"max_restarts": 3, "restart_backoff_s": 0}})
    monkeypatch.setattr(supervisor, "run_watched", run_watched)
    monkeypatch.setattr(supervisor, "load_config", lambda path: cfg)
    return statuses, seen


def test_a_lost_ray_or_a_crash_is_restarted_until_a_clean_stop(runs, capsys):
    statuses, seen = runs
    statuses += [1, -9, 0]
    assert supervisor.supervise(["serve", "--port", "8001"], None) == 0
    assert seen == [["serve", "--port", "8001"]] * 3
    err = capsys.readouterr().err
    assert "exited with status 1; restarting it" in err and "restart 2 of at most 3" in err


def test_bad_input_is_never_restarted(runs):
    statuses, seen = runs
    statuses += [2, 0]
    assert supervisor.supervise(["serve"], None) == 2
    assert len(seen) == 1


def test_it_gives_up_after_max_restarts_in_a_row(runs, capsys):
    statuses, seen = runs
    statuses += [1] * 10
    assert supervisor.supervise(["serve"], None) == 1
    assert len(seen) == 4  # the first run and 3 restarts
    assert "hygraph: failed: the service exited 4 times in a row" in capsys.readouterr().err
