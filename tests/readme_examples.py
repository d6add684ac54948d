"""The README's shell and Python examples, as the doc test runs them against a running `hygraph serve`.

Every fenced `bash` and `python` block of README.md is either run (`RUN`: with the service's address, index
directory and admin key put in for the README's `localhost:8000`, `runs/demo` and `admin-secret`, and its
checks on what the block printed, taken from the output the README shows) or listed in `NOT_RUN` with the
reason. A block in neither fails the test, so a new example is checked from the day it is written.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

README = Path(__file__).resolve().parents[1] / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.M | re.S)


@dataclass(frozen=True)
class Example:
    lang: str
    code: str
    line: int

    @property
    def first(self) -> str:
        return self.code.splitlines()[0]


def examples(readme: Path = README) -> list[Example]:
    text = readme.read_text()
    return [Example(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1)
            for m in _FENCE.finditer(text) if m.group(1) in ("bash", "python")]


# Blocks not run, by the start of their first line, and why.
NOT_RUN = {
    "make serve          # first run": "starts the service under test (`hygraph serve`, what `make serve` runs)",
    "export HYGRAPH__LLM__BACKEND=openai": "needs a model endpoint and its key, which the test machine has none of; "
                                           "tests/unit/test_llm_openai.py drives the same backend against a scripted "
                                           "OpenAI-compatible server",
    "make test     # creates .venv": "`make test` is what runs this test; `make serve` starts the service under test",
    "make setup": "builds the 6,119-passage 2wiki_dev index (about 20 minutes on 2 cores); `hygraph index`, `query` "
                  "and `eval` run on the test index in tests/integration/test_cli_dense.py",
    "make test        # ruff": "`make test` is what runs this test",
    "weed server -dir=/tmp/weed": "starts a second SeaweedFS on fixed ports and builds the 994-passage demo index into "
                                  "it (minutes); tests/integration/test_object_store_index.py runs the same "
                                  "`hygraph index` / `hygraph query` on s3:// against the session's SeaweedFS",
}

# Lines of a run block that would start a second service or change the test's environment.
_SKIPPED_LINES = re.compile(r"^\s*(hygraph serve|make |source )")


def _json_lines(out: str) -> list[dict]:
    """Every top-level JSON object in `out`, in order: curl prints a body without a newline, so one line may
    hold two (an SSE `data:` payload counts as one too)."""
    decoder, found, at = json.JSONDecoder(), [], out.find("{")
    while at != -1:
        try:
            value, end = decoder.raw_decode(out, at)
        except ValueError:
            at = out.find("{", at + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        at = out.find("{", end)
    return found


def _no_errors(out: str) -> None:
    errors = [d for d in _json_lines(out) if "error" in d]
    assert not errors, errors


def _check_getting_started(out: str) -> None:
    (result,) = _json_lines(out)
    assert result["mode"] == "hybrid" and result["passages"], result


# The passage that holds Jack Owens, the answer of the README's luau question (in the test index too).
JACK_OWENS_PASSAGE = "The Hukilau Song"


def _check_serving(out: str) -> None:
    first = _json_lines(out)[0]
    # "passages hold Jack Owens": his passage is retrieved, and its text is in the context.
    assert any(p["title"] == JACK_OWENS_PASSAGE for p in first["passages"]), first["passages"]
    assert "Jack Owens" in json.dumps(first["context"]), first["context"]
    assert "event: token" in out and "event: done" in out, out[-500:]  # SSE: tokens, then the result


def _check_openai(out: str) -> None:
    assert f"'title': '{JACK_OWENS_PASSAGE}'" in out, out[-800:]  # the reply's `hygraph` passages


def _check_metadata(out: str) -> None:
    _no_errors(out)
    accepted, *queries = _json_lines(out)
    assert accepted["ids"] == ["memo-7"], accepted
    assert all("passages" in q for q in queries), queries


def _check_indexes(out: str) -> None:
    results = _json_lines(out)
    assert results[0]["name"] == "team-a", results[0]  # "201 {"name": "team-a", "created": ...}"
    assert [i["name"] for i in results[-2]["indexes"]] == ["team-a"], results[-2]  # "only team-a"
    assert results[-1]["error"]["code"] == "not_found", results[-1]  # "404, as if absent"


def _check_client(out: str) -> None:
    assert "'id': 'a-1'" in out, out[-500:]


def _check_live_updates(out: str) -> None:
    inserted, deleted = _json_lines(out)[-2:]
    # The versions that applied each job (a batch may carry other journaled writes with it).
    assert inserted["documents"] >= 2 and inserted["version"] >= 1, inserted
    assert deleted["documents_removed"] >= 2 and deleted["version"] > inserted["version"], deleted


Check = Callable[[str], None]
RUN: dict[str, Check] = {
    "curl -s localhost:8000/v1/query -H 'Content-Type: application/json' \\": _check_getting_started,
    "hygraph serve --index-dir runs/demo            # http://127.0.0.1:8000": _check_serving,
    "from openai import OpenAI": _check_openai,
    "curl -s localhost:8000/v1/documents -H \"Authorization: Bearer $KEY\"": _check_metadata,
    "export HYGRAPH_ADMIN_KEYS=admin-secret": _check_indexes,
    "from hygraph.client import Client": _check_client,
    "hygraph insert --index-dir runs/demo --corpus new_docs.jsonl": _check_live_updates,
}


def how(example: Example) -> tuple[str, Check | str]:
    """("run", check) or ("skip", reason); AssertionError for a block neither table knows."""
    for start, check in RUN.items():
        if example.first.startswith(start):
            return "run", check
    for start, reason in NOT_RUN.items():
        if example.first.startswith(start):
            return "skip", reason
    raise AssertionError(f"README.md line {example.line}: a {example.lang} example the doc test does not know "
                         f"({example.first[:60]!r}); add it to RUN (with a check) or NOT_RUN (with the reason) "
                         f"in tests/readme_examples.py")


def run(example: Example, url: str, index_dir: Path, admin_key: str, env: dict[str, str], cwd: Path,
        timeout_s: float = 600) -> str:
    """Run one block as written but for the service's address, index directory and admin key; its stdout."""
    host = url.removeprefix("http://")
    code = "\n".join(line for line in example.code.splitlines() if not _SKIPPED_LINES.match(line))
    code = (code.replace("localhost:8000", host).replace("127.0.0.1:8000", host)
            .replace("runs/demo", str(index_dir)).replace("admin-secret", admin_key))
    argv = ["bash", "-euo", "pipefail", "-c", code] if example.lang == "bash" else [sys.executable, "-c", code]
    bin_dir = str(Path(sys.executable).parent)
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **env, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"})
    assert proc.returncode == 0, (f"README.md line {example.line} exited {proc.returncode}:\n"
                                  f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout
