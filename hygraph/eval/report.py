"""Markdown table and PNG chart of an eval result `{"questions", "k", "modes": {...}}` (CONTRACT.md).

Besides the contract keys the header shows `dataset` and `index_version` when the result
carries them, the table a retrieval p50 column when modes carry `retrieval_p50_ms`, and the
report a per-question-type section (`by_type`) and recall@1..10 (`recall_curve`, also the
chart's third panel) when the runner computed them. Every file is written to a temporary sibling and moved into
place with os.replace, so a crash leaves the previous report or none, never half of one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

# (result key, column and legend label)
RATE_COLUMNS = (("recall@2", "recall@2"), ("recall@5", "recall@5"), ("em", "EM"), ("f1", "F1"))
LATENCY_COLUMNS = (("p50_ms", "p50 ms"), ("p95_ms", "p95 ms"))
RETRIEVAL_COLUMNS = (("retrieval_p50_ms", "retrieval p50 ms"),  # question embedding + retrieval, no answer step
                     ("retrieve_only_p50_ms", "retrieve-only p50 ms"))  # the retrieval alone
TYPE_METRICS = (("recall@5", "recall@5"), ("f1", "F1"))


REPORT_MODE = 0o644


def _atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, REPORT_MODE)  # mkstemp makes it 0600: a report is for every reader of the directory
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _header(result: dict[str, Any]) -> str:
    parts = []
    if result.get("dataset"):
        parts.append(f"dataset {result['dataset']}")
    parts.append(f"{result['questions']} questions")
    parts.append(f"k={result['k']}")
    if result.get("index_version"):
        parts.append(f"index version {result['index_version']}")
    return " · ".join(parts)


def _cell(value: float | None, decimals: int) -> str:
    # Recall is null when no question had supporting ids.
    return "–" if value is None else f"{value:.{decimals}f}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1),
            *("| " + " | ".join(r) + " |" for r in rows)]


def render_markdown(result: dict[str, Any], title: str) -> str:
    """The report text: title, header line, one table row per mode, then the optional sections."""
    latency = list(LATENCY_COLUMNS)
    latency += [col for col in RETRIEVAL_COLUMNS if any(col[0] in stats for stats in result["modes"].values())]
    rows = [[mode, *(_cell(stats.get(key), 4) for key, _ in RATE_COLUMNS),
             *(_cell(stats.get(key), 1) for key, _ in latency)] for mode, stats in result["modes"].items()]
    lines = [f"# {title}", "", _header(result), "",
             *_table(["mode", *(label for _, label in RATE_COLUMNS + tuple(latency))], rows)]
    by_type: dict[str, dict[str, dict[str, Any]]] = result.get("by_type") or {}
    if by_type:
        types = sorted({t for per_mode in by_type.values() for t in per_mode})
        counts = {t: next(per[t]["questions"] for per in by_type.values() if t in per) for t in types}
        for key, label in TYPE_METRICS:
            lines += ["", f"## {label} by question type", "",
                      *_table(["mode", *(f"{t} ({counts[t]})" for t in types)],
                              [[mode, *(_cell(per.get(t, {}).get(key), 4) for t in types)]
                               for mode, per in by_type.items()])]
    curve: dict[str, list[float | None]] = result.get("recall_curve") or {}
    if curve:
        depth = max(len(c) for c in curve.values())
        lines += ["", f"## recall@k, k = 1..{depth}", "",
                  *_table(["mode", *(f"@{k}" for k in range(1, depth + 1))],
                          [[mode, *(_cell(v, 3) for v in c)] for mode, c in curve.items()])]
    return "\n".join(lines) + "\n"


def write_markdown(result: dict[str, Any], path: str | Path, title: str) -> Path:
    """Writes the Markdown report to `path` atomically and returns the path."""
    text = render_markdown(result, title).encode("utf-8")
    return _atomic_write(Path(path), lambda fh: fh.write(text))


def _grouped_bars(ax: Any, groups: list[str], series: dict[str, list[float]]) -> None:
    x = np.arange(len(groups))
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=label)
    ax.set_xticks(x, groups)
    ax.legend(fontsize="small")


def render_chart(result: dict[str, Any], title: str) -> Figure:
    """Quality per mode (recall@2, recall@5, EM, F1 side by side) above latency per mode, and recall@k
    curves per mode below them when the result has `recall_curve`."""
    modes = list(result["modes"])
    # A missing recall draws as an empty bar rather than hiding the mode.
    rates = {mode: [result["modes"][mode].get(key) or 0.0 for key, _ in RATE_COLUMNS] for mode in modes}
    latencies = {label: [result["modes"][mode][key] for mode in modes] for key, label in LATENCY_COLUMNS}
    curve: dict[str, list[float | None]] = result.get("recall_curve") or {}

    # A bare Figure on the Agg canvas: no pyplot global state, safe off the main thread.
    fig = Figure(figsize=(max(6.0, 1.2 * len(modes) + 4.0), 12.0 if curve else 8.0), layout="constrained")
    FigureCanvasAgg(fig)
    panels = fig.subplots(3 if curve else 2, 1)
    quality, latency = panels[0], panels[1]
    if curve:
        ax = panels[2]
        for mode, values in curve.items():
            ks = [k for k, v in enumerate(values, 1) if v is not None]
            ax.plot(ks, [v for v in values if v is not None], marker="o", label=mode)
        ax.set_xticks(range(1, max(len(c) for c in curve.values()) + 1))
        ax.set_xlabel("k")
        ax.set_ylabel("recall@k")
        ax.set_ylim(0.0, 1.0)
        ax.set_title("Recall@k")
        ax.legend(fontsize="small", ncol=2)
    _grouped_bars(quality, [label for _, label in RATE_COLUMNS], rates)
    quality.set_ylim(0.0, 1.0)
    quality.set_ylabel("score")
    quality.set_title("Retrieval and answer quality")
    _grouped_bars(latency, modes, latencies)
    latency.set_ylabel("ms")
    latency.set_title("Query latency")
    fig.suptitle(f"{title}\n{_header(result)}")
    return fig


def write_chart(result: dict[str, Any], path: str | Path, title: str) -> Path:
    """Writes the PNG chart to `path` atomically and returns the path."""
    fig = render_chart(result, title)
    return _atomic_write(Path(path), lambda fh: fig.savefig(fh, format="png", dpi=100))


def write_report(result: dict[str, Any], out_dir_or_prefix: str | Path, title: str) -> list[Path]:
    """Writes the Markdown and PNG reports; returns their paths.

    An existing directory receives `report.md` and `report.png`; any other path is a
    prefix, so `runs/musique` gives `runs/musique.md` and `runs/musique.png`.
    """
    target = Path(out_dir_or_prefix)
    prefix = target / "report" if target.is_dir() else target
    return [write_markdown(result, prefix.with_name(prefix.name + ".md"), title),
            write_chart(result, prefix.with_name(prefix.name + ".png"), title)]
