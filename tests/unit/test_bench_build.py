"""bench_build's pure parts on hand-checked cases: the per-copy renaming, the power-law fit and its
extrapolation; and the build's per-node worker accounting. No Ray, no cluster."""

from __future__ import annotations

import math

import pytest

from hygraph.indexing.progress import Stages
from loadtests.bench_build import extrapolate, fit, running_stages
from loadtests.common import copy_suffix, rename_capitalised


def test_each_copy_renames_every_capitalised_word_and_nothing_else():
    assert copy_suffix(0) == "" and copy_suffix(1) == "qb" and copy_suffix(26) == "qab"
    text = "Paris is in France; O'Neil-Smith visited it in May."
    assert rename_capitalised(text, 0) == text
    assert rename_capitalised(text, 1) == "Parisqb is in Franceqb; O'Neil-Smithqb visited it in Mayqb."
    assert rename_capitalised(text, 2) != rename_capitalised(text, 1)


def test_fit_recovers_a_power_law_and_extrapolates_it():
    ns = [1000, 4000, 16000]
    a, b = fit(ns, [2.0 * n**1.5 for n in ns])
    assert b == pytest.approx(1.5) and math.exp(a) == pytest.approx(2.0)
    assert fit([1000], [3.0]) is None and fit([1000, 2000], [0.0, 1.0]) is None
    rows = [{"passages": n, "seconds": n / 10, "entities": 3 * n, "snapshot_bytes": n * 2**20,
             "stats": {"seconds_per_stage": {"hierarchy": n / 100, "lexical": 0.0},
                       "driver_peak_rss_bytes": 2**30, "worker_peak_rss_bytes": n * 2**20}} for n in (1000, 10000)]
    ext = extrapolate(rows)
    assert ext["s: hierarchy"]["exponent"] == 1.0 and ext["s: hierarchy"]["1000000"] == pytest.approx(10**4)
    assert ext["entities"]["10000000"] == pytest.approx(3 * 10**7)
    assert ext["driver peak RSS GiB"]["exponent"] == 0.0
    assert ext["s: lexical"] == {"exponent": None, "1000000": None, "10000000": None}  # nothing to fit


def test_stages_keep_the_largest_worker_per_node_and_the_nodes_per_stage():
    stages = Stages("test")
    with stages.stage("embed"):
        stages.worker(100, {"127.0.0.1/aaaa"})
        stages.worker(300, {"127.0.0.1/bbbb"})
    with stages.stage("hierarchy"):
        stages.worker(200, {"127.0.0.1/aaaa"})
    assert stages.node_rss == {"127.0.0.1/aaaa": 200, "127.0.0.1/bbbb": 300}
    assert stages.worker_nodes == {"embed": {"127.0.0.1/aaaa", "127.0.0.1/bbbb"}, "hierarchy": {"127.0.0.1/aaaa"}}
    assert stages.worker_rss == {"embed": 300, "hierarchy": 200}


def test_the_stages_running_at_a_kill_are_those_started_and_not_done():
    log = "\n".join([
        "[index] chunk+embed+extract ...", "[index] documents: 5,000/5,000 (162/s)",
        "[index] chunk+embed+extract done in 30.9s",
        "[index] hyperbolic ... (a Ray task beside the assembler)", "[index] knowledge ...",
        "[index] knowledge done in 7.4s (RSS 628 MiB, peak 628 MiB)", "[index] hierarchy ...",
        "[index] hierarchy layer 1: 1,683 segments summarized in 2.1s"])
    assert running_stages(log) == ["hyperbolic", "hierarchy"]
    done = log + "\n[index] hyperbolic done in 6.3s on 127.0.0.1/076dab98 (a Ray task; peak RSS 569 MiB)"
    assert running_stages(done) == ["hierarchy"]
    assert running_stages("[index] cleora: resumed from the checkpoint (it took 5.4s)") == []
