"""What the CLI shows a person (stderr) and a program (the last stdout line), on success and on failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from hygraph import cli

RESULT = {
    "answer": "Lilu is a masculine Akkadian word for a spirit.", "mode": "dense",
    "passages": [{"id": "p5", "title": "Lilu (mythology)", "score": 0.72}, {"id": "p9", "title": "", "score": 0.5}],
    "context": {"summaries": [], "entities": [], "relations": [], "hyperedges": [],
                "chunks": [{"id": "p5:0", "kind": "chunk", "text": "A lilu  is a\nmasculine Akkadian word " + "x" * 400,
                            "score": 0.72, "sources": ["p5"], "layer": 0, "number": 1},
                           {"id": "p9:0", "kind": "chunk", "text": "uncited", "score": 0.5, "sources": ["p9"],
                            "layer": 0, "number": 2}],
                "notes": {}, "citations": [1]},
    "index_version": 4, "timings_ms": {"total": 12.4},
}


def test_the_answer_its_cited_passage_and_the_ranking_read_plainly():
    text = cli.readable_answer(RESULT, width=80)
    lines = text.splitlines()
    assert lines[0] == "Answer: Lilu is a masculine Akkadian word for a spirit."
    assert "  [1] chunk from Lilu (mythology) (p5)" in lines
    assert "      A lilu is a masculine Akkadian word " in text and "uncited" not in text  # whitespace folded
    assert max(len(line) for line in lines) <= 80 and "..." in text  # long text cut, lines wrapped
    assert lines[-3:] == ["Passages (dense, index version 4, 12 ms):", "  1. Lilu (mythology)  [p5]  score 0.720",
                          "  2. p9  [p9]  score 0.500"]
    assert "Cited: nothing" in cli.readable_answer({**RESULT, "context": {**RESULT["context"], "citations": []}})


def test_query_keeps_the_json_on_the_last_stdout_line_and_the_reading_on_stderr(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli, "cmd_query", lambda cfg, args: (print(cli.readable_answer(RESULT), file=sys.stderr),
                                                           RESULT)[1])
    assert cli.main(["query", "--index-dir", str(tmp_path), "who?"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out.splitlines()[-1]) == RESULT and len(out.splitlines()) == 1
    assert err.startswith("Answer: Lilu")


def test_a_ray_error_ends_with_one_failed_line_and_no_traceback(monkeypatch, tmp_path, capsys):
    import ray.exceptions

    def dies(cfg, args):
        raise ray.exceptions.RaySystemError("(raylet) The node with node id abc has been marked dead\nmore detail")
    monkeypatch.setattr(cli, "cmd_query", dies)
    assert cli.main(["query", "--index-dir", str(tmp_path), "who?"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("hygraph: failed: RaySystemError: System error: (raylet) The node")


def test_an_unexpected_error_shows_its_traceback_then_the_failed_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cli, "cmd_query", lambda cfg, args: {}["missing"])
    assert cli.main(["query", "--index-dir", str(tmp_path), "who?"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1] == "hygraph: failed: KeyError: 'missing'"


@pytest.mark.parametrize("fails", [False, True])
def test_nothing_reaches_stdout_or_stderr_after_the_last_line(tmp_path, fails):
    """Run as a program: output a dying Ray thread or process would print late (here: at exit) goes nowhere."""
    script = textwrap.dedent(f"""
        import atexit, os, sys
        from hygraph import cli
        def late(cfg, args):
            atexit.register(lambda: (print("late stdout"), print("late stderr", file=sys.stderr),
                                     os.write(1, b"late fd 1")))
            if {fails}:
                raise RuntimeError("the raylet died")
            return {{"answer": "ok"}}
        cli.cmd_query = late
        sys.argv = ["hygraph", "query", "--index-dir", {str(tmp_path)!r}, "q"]
        sys.exit(cli.main())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "late std" not in proc.stdout + proc.stderr and "late fd" not in proc.stdout
    if fails:
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr.strip().splitlines()[-1] == "hygraph: failed: RuntimeError: the raylet died"
    else:
        assert proc.returncode == 0 and proc.stdout == '{"answer": "ok"}\n'


@pytest.mark.parametrize("flags, baselines", [([], False), (["--baselines"], True)])
def test_eval_runs_the_modes_asked_and_prints_no_rankings(monkeypatch, tmp_path, capsys, flags, baselines):
    import hygraph.eval.runner as runner

    asked = []

    def run_eval(cfg, index_dir, questions, modes, k, **kw):
        asked.append((modes, kw["baselines"]))
        return {"questions": 1, "k": k, "modes": {m: {} for m in modes}, "ranked": {m: {"q1": ["p"]} for m in modes}}
    monkeypatch.setattr(runner, "run_eval", run_eval)
    argv = ["eval", "--index-dir", str(tmp_path), "--questions", "q.jsonl", "--modes", "dense,hybrid", *flags]
    assert cli.main(argv) == 0
    assert asked == [(["dense", "hybrid"], baselines)]
    assert json.loads(capsys.readouterr().out) == {"questions": 1, "k": 5, "modes": {"dense": {}, "hybrid": {}}}


def _watched(script: str, capsys) -> tuple[int, str, str]:
    from hygraph.runtime.watch import run_watched

    status = run_watched([], program=[sys.executable, "-c", textwrap.dedent(script)])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_child_ray_ends_outright_still_gets_one_failed_line_and_nothing_on_stdout(capsys):
    status, out, err = _watched("""
        import os, sys
        print("[ray] Ray's logs: /tmp/ray/session_x/logs", file=sys.stderr, flush=True)
        print("[index] chunk+embed ...", file=sys.stderr, flush=True)
        print("(raylet) Raylet is terminated. Termination is unexpected.", flush=True)
        os._exit(1)
    """, capsys)
    assert status == 1 and out == ""
    lines = err.strip().splitlines()
    assert "(raylet) Raylet is terminated. Termination is unexpected." in lines  # moved to stderr
    assert lines[-1] == ("hygraph: failed: the command's process ended with status 1 without saying why (Ray ends "
                         "a driver so when its node dies); Ray's logs: /tmp/ray/session_x/logs")


def test_a_watched_child_keeps_its_result_last_on_stdout_and_its_own_failure_line(capsys):
    status, out, err = _watched("""
        print('{"version": 3}'); print("(raylet) late words", flush=True)
    """, capsys)
    assert status == 0 and out == '{"version": 3}\n' and "(raylet) late words" in err
    status, out, err = _watched("""
        import sys
        print("hygraph: error: corpus.jsonl:2: text: must not be empty", file=sys.stderr); sys.exit(2)
    """, capsys)
    assert status == 2 and out == "" and err == "hygraph: error: corpus.jsonl:2: text: must not be empty\n"
    status, out, err = _watched("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", capsys)
    assert status == 137 and err == "hygraph: failed: the command's process was killed by SIGKILL\n"


def test_the_watched_child_dies_with_its_watcher(tmp_path):
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    watcher = subprocess.Popen([sys.executable, "-c", "import sys; from hygraph.runtime.watch import run_watched; "
                                f"run_watched([], program=[sys.executable, '-c', {child!r}])"])
    for _ in range(600):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    watcher.kill()
    watcher.wait(30)
    for _ in range(200):
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(child_pid, signal.SIGKILL)
    pytest.fail("the child outlived its watcher")


def test_ray_runtime_lines_go_to_a_file_in_rays_logs_not_to_the_terminal(tmp_path, capsys):
    from hygraph.runtime.watch import DRIVER_LOG

    noise = ("[2026-11-26 18:37:00,985 E 23626 23626] core_worker.cc:2465: Actor with class name: "
             "'MapWorker(MapBatches(EmbedStage))' has constructor arguments in the object store")
    status, out, err = _watched(f"""
        import sys
        print({noise!r}, file=sys.stderr, flush=True)  # before Ray's directory is known: shown
        print("[ray] Ray's logs: {tmp_path}", file=sys.stderr, flush=True)
        print({noise!r}, file=sys.stderr, flush=True)
        print("[index] chunk+embed ...", file=sys.stderr, flush=True)
        print('{{"version": 1}}')
    """, capsys)
    assert status == 0 and out == '{"version": 1}\n'
    assert err.count(noise) == 1 and err.strip().endswith("[index] chunk+embed ...")
    assert (tmp_path / DRIVER_LOG).read_text() == noise + "\n"
