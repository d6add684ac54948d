"""The load-test and fault reports' pure parts on hand-made samples: no server, no Ray."""

from __future__ import annotations

import pytest

from loadtests.common import Recorder, Sample, Write, log_excerpt, pcts
from loadtests.faults import recovery, unavailable_answers, write_summary
from loadtests.loadtest import build_report, ingest_stats, level_stats, markdown, request_stats


def _s(t: float, ms: float, status: int = 200, endpoint: str = "query", mode: str | None = "dense", **kw) -> Sample:
    return Sample(t, "x", endpoint, mode, ms, status, **kw)


def test_percentiles_interpolate_and_say_none_for_nothing():
    assert pcts([10, 20, 30, 40]) == {"p50_ms": 25.0, "p95_ms": 38.5, "p99_ms": 39.7}
    assert pcts([]) == {"p50_ms": None, "p95_ms": None, "p99_ms": None}
    assert pcts([1.23456], unit="s", digits=3) == {"p50_s": 1.235, "p95_s": 1.235, "p99_s": 1.235}


def test_request_stats_counts_every_failure_and_times_only_successes():
    samples = [_s(0, 10), _s(1, 20), _s(2, 5000, status=503), _s(3, 1, status=0, error="ConnectError"),
               _s(4, 30, error="in-band store_unavailable")]
    st = request_stats(samples, wall_s=5.0)
    assert st["requests"] == 5 and st["qps"] == 1.0
    assert st["errors"] == 3 and st["error_rate"] == 0.6
    assert st["status_codes"] == {"0": 1, "200": 3, "503": 1}
    assert st["p50_ms"] == 15.0  # the 503, the refused connection and the in-band error are not timed


def test_cache_hits_are_counted_apart_and_the_zipf_scenario_reports_hit_and_miss_latency():
    z = Recorder("z")
    z.samples += [_s(0.1, 2, cached=True), _s(0.2, 3, cached=True), _s(0.3, 40), _s(0.4, 60, status=503)]
    st = request_stats(z.samples, wall_s=2.0)
    assert (st["hits"], st["qps"], st["qps_uncached"], st["hit_rate"]) == (2, 2.0, 1.0, 0.5)
    info = {"target": "http://x", "started_at": "now", "machine": "2 CPUs", "server": {"summary": "test"},
            "config": {"modes": ["dense"], "concurrency": 4, "levels": [1], "insert_every": 5, "delete_every": 3}}
    rep = build_report({"z": z}, {"z": {"wall_s": 2.0, "zipf_s": 1.1, "questions": 100}}, info)
    cache = rep["scenarios"]["z"]["cache"]
    assert cache["hit"]["p50_ms"] == 2.5 and cache["miss"]["p50_ms"] == 40.0  # the 503 is timed in neither
    assert "hit rate 50.0%, 2.0 QPS in all, 1.0 QPS of misses" in markdown(rep)


def test_level_stats_split_by_window_and_ignore_measuring_requests():
    samples = [_s(0.5, 10), _s(1.5, 20), _s(2.5, 30), _s(3.5, 40), _s(3.6, 99, endpoint="probe")]
    rows = level_stats(samples, [{"concurrency": 1, "start": 0, "end": 2}, {"concurrency": 2, "start": 2, "end": 4}])
    assert [(r["concurrency"], r["requests"], r["qps"], r["p50_ms"]) for r in rows] == [(1, 2, 1.0, 15.0),
                                                                                       (2, 2, 1.0, 35.0)]


def _write(op: str, outcome: str = "ok", done: float | None = 1.0, visible: float | None = 2.0, **kw) -> dict:
    return {"doc_id": "d", "op": op, "sent_t": 0.0, "acked_t": 0.1, "job_id": "j", "outcome": outcome,
            "last_job_status": "done", "version": 2, "done_s": done, "visible_s": visible, "error": None, **kw}


def test_ingest_stats_separates_job_done_from_retrievable_and_lists_problems():
    writes = [_write("insert", done=1.0, visible=2.0, summarized_s=6.0), _write("insert", done=3.0, visible=5.0,
                                                                           summarized_s=8.0),
              _write("insert", "timeout_job", done=None, visible=None),
              _write("insert", "rejected", done=None, visible=None, acked_t=None),
              _write("delete", done=2.0, visible=4.0)]
    ing = ingest_stats(writes)
    ins = ing["insert"]
    assert ins["sent"] == 4 and ins["acked"] == 3
    assert ins["outcomes"] == {"ok": 2, "timeout_job": 1, "rejected": 1}
    assert ins["lag_job_done_s"] == {"n": 2, "p50_s": 2.0, "p95_s": 2.9, "p99_s": 2.98, "max_s": 3.0}
    assert ins["lag_retrievable_s"]["p50_s"] == 3.5 and ins["lag_retrievable_s"]["max_s"] == 5.0
    assert ins["lag_summarized_s"]["p50_s"] == 7.0 and ins["lag_summarized_s"]["n"] == 2
    assert ing["delete"]["lag_gone_s"]["n"] == 1 and "lag_summarized_s" not in ing["delete"]
    assert [w["outcome"] for w in ing["problems"]] == ["timeout_job", "rejected"]


def test_report_and_markdown_carry_modes_levels_ingest_chat_and_versions():
    a, b, c = Recorder("a"), Recorder("b"), Recorder("c")
    a.samples += [_s(0.1, 10, mode="dense", index_version=1), _s(0.2, 50, mode="hybrid", index_version=1),
                  _s(1.1, 12, mode="dense"),
                  _s(1.2, 900, status=503, mode="hybrid", error="HTTP 503 store_unavailable")]
    b.samples += [_s(0.1, 11, index_version=2), _s(0.3, 4, endpoint="insert", mode=None, status=202)]
    b.event("insert", doc_id="d")
    c.samples += [_s(0.1, 80, endpoint="chat", ttft_ms=30.0), _s(0.5, 100, endpoint="chat", ttft_ms=50.0)]
    meta = {"a": {"wall_s": 2.0, "windows": [{"concurrency": 1, "start": 0, "end": 1},
                                             {"concurrency": 2, "start": 1, "end": 2}]},
            "b": {"wall_s": 1.0, "writes": [_write("insert", version=3)]}, "c": {"wall_s": 1.0}}
    info = {"target": "http://x", "started_at": "now", "machine": "2 CPUs", "server": {"summary": "test"},
            "config": {"modes": ["dense", "hybrid"], "concurrency": 4, "levels": [1, 2], "insert_every": 5,
                       "delete_every": 3}}
    rep = build_report({"a": a, "b": b, "c": c}, meta, info)
    sa = rep["scenarios"]["a"]
    assert set(sa["modes"]) == {"dense", "hybrid"}
    assert sa["modes"]["hybrid"]["errors"] == 1 and sa["modes"]["hybrid"]["status_codes"] == {"200": 1, "503": 1}
    assert [r["requests"] for r in sa["levels"]] == [2, 2]
    assert sa["error_examples"] == [{"endpoint": "query", "status": 503, "error": "HTTP 503 store_unavailable",
                                     "count": 1}]
    assert rep["scenarios"]["b"]["ingest"]["insert"]["lag_job_done_s"]["n"] == 1
    assert rep["scenarios"]["c"]["chat"]["ttft"]["p50_ms"] == 40.0
    assert rep["index_versions"] == [1, 2, 3]
    assert rep["raw"]["b"]["events"][0]["kind"] == "insert"
    md = markdown(rep)
    assert "## Scenario a: queries, rising concurrency (2.0 s)" in md
    assert "| hybrid | 2 | 1.0 | 0 | 1.0 | 50.0 | 50.0 | 50.0 | 1 |" in md
    assert "| query | 4 | 2.0 |" in md and "200×3, 503×1" in md
    assert "| time to first token | 40.0 |" in md
    assert "1× query status 503: HTTP 503 store_unavailable" in md
    assert "Index versions seen: [1, 2, 3]" in md


def test_recovery_needs_a_steady_run_of_fast_successes_after_the_last_failure():
    before = [_s(t / 10, 100) for t in range(50)]  # baseline p95 100 ms, slow limit 300 ms
    after = ([_s(10.0, 5, status=500, error="HTTP 500"), _s(10.5, 2000)]  # an error, then slow-but-200
             + [_s(11.0 + i / 10, 100) for i in range(25)])
    out = recovery(before + after, t_fault=9.9, steady=20)
    assert out["recovered_s"] == pytest.approx(1.1)
    assert out["after_fault"]["errors"] == 1 and out["after_fault"]["status_codes"] == {"500": 1}
    assert out["after_fault"]["first_error_s"] == pytest.approx(0.1)
    assert recovery(before + after[:10], t_fault=9.9, steady=20)["recovered_s"] is None


def test_unavailable_answers_flag_500s_and_503s_without_retry_after():
    samples = [_s(1, 5, status=503, retry_after="2"), _s(2, 5, status=503), _s(3, 5, status=500),
               _s(4, 5, status=0, error="ConnectError"), _s(0.5, 5, status=500)]  # the last is before the fault
    assert unavailable_answers(samples, t_fault=0.9) == {"503_with_retry_after": 1, "503_without_retry_after": 1,
                                                         "500": 1, "other": {"0": 1}}


def test_write_summary_and_log_excerpt():
    writes = [Write("a", "insert", 0.0, acked_t=0.1, outcome="ok", done_s=1.0, visible_s=2.0),
              Write("b", "insert", 1.0, outcome="rejected", error="HTTP 503")]
    out = write_summary(writes)
    assert out["sent"] == 2 and out["acked"] == 1 and out["outcomes"] == {"ok": 1, "rejected": 1}
    assert out["lag_retrievable_s"]["p50_s"] == 2.0 and [w["doc_id"] for w in out["not_ok"]] == ["b"]
    log = "\x1b[36m(Retriever pid=7)\x1b[0m ERROR boom\nINFO fine\nTraceback (most recent call last):"
    assert log_excerpt(log) == ["(Retriever pid=7) ERROR boom", "Traceback (most recent call last):"]
