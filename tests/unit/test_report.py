import pytest
from matplotlib.figure import Figure

from hygraph.eval.report import write_chart, write_markdown, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

RESULT = {
    "questions": 100,
    "k": 5,
    "dataset": "musique_train100",
    "index_version": "v3",
    "modes": {
        "dense": {"recall@2": 0.4123, "recall@5": 0.5561, "em": 0.21, "f1": 0.3012,
                  "p50_ms": 12.3, "p95_ms": 40.0},
        "hybrid": {"recall@2": 0.5012, "recall@5": 0.6987, "em": 0.3, "f1": 0.4111,
                   "p50_ms": 35.5, "p95_ms": 88.1},
        "global": {"recall@2": None, "recall@5": None, "em": 0.1, "f1": 0.2,
                   "p50_ms": 50.0, "p95_ms": 99.9},
    },
}


def test_markdown_has_header_and_one_row_per_mode(tmp_path):
    path = write_markdown(RESULT, tmp_path / "eval.md", "MuSiQue eval")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# MuSiQue eval\n")
    assert "musique_train100" in text and "100 questions" in text and "k=5" in text and "v3" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| mode")]
    assert [r.split("|")[1].strip() for r in rows] == ["dense", "hybrid", "global"]
    cells = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]] for r in rows}
    assert cells["dense"] == ["0.4123", "0.5561", "0.2100", "0.3012", "12.3", "40.0"]
    assert cells["hybrid"] == ["0.5012", "0.6987", "0.3000", "0.4111", "35.5", "88.1"]
    assert cells["global"][:2] == ["–", "–"]


def test_markdown_header_without_optional_fields(tmp_path):
    result = {"questions": 3, "k": 2, "modes": RESULT["modes"]}
    text = write_markdown(result, tmp_path / "eval.md", "t").read_text(encoding="utf-8")
    assert "3 questions · k=2" in text


def test_chart_is_a_png(tmp_path):
    path = write_chart(RESULT, tmp_path / "eval.png", "MuSiQue eval")
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 1000


def test_write_report_into_a_directory(tmp_path):
    paths = write_report(RESULT, tmp_path, "t")
    assert paths == [tmp_path / "report.md", tmp_path / "report.png"]
    assert all(p.stat().st_size > 0 for p in paths)
    # the temporary files were all moved into place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "report.png"]


def test_report_files_are_readable_by_everyone(tmp_path):
    assert [p.stat().st_mode & 0o777 for p in write_report(RESULT, tmp_path, "t")] == [0o644, 0o644]


def test_write_report_with_a_prefix_creates_parents(tmp_path):
    paths = write_report(RESULT, tmp_path / "runs" / "musique", "t")
    assert paths == [tmp_path / "runs" / "musique.md", tmp_path / "runs" / "musique.png"]
    assert paths[1].read_bytes().startswith(PNG_MAGIC)


def test_crash_mid_write_keeps_the_previous_report(tmp_path, monkeypatch):
    path = write_chart(RESULT, tmp_path / "eval.png", "before")
    before = path.read_bytes()

    def crash(self, fh, **kwargs):
        fh.write(b"half a png")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", crash)
    with pytest.raises(OSError):
        write_chart(RESULT, path, "after")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["eval.png"]


def test_report_sections_for_types_curve_and_retrieval_latency(tmp_path):
    result = {**RESULT,
              "modes": {m: {**s, "retrieval_p50_ms": 10.0} for m, s in RESULT["modes"].items()},
              "by_type": {"dense": {"bridge": {"recall@5": 0.5, "f1": 0.2, "questions": 3},
                                    "comparison": {"recall@5": 0.75, "f1": 0.4, "questions": 1}},
                          "hybrid": {"bridge": {"recall@5": 0.6, "f1": 0.3, "questions": 3}}},
              "recall_curve": {"dense": [0.1, 0.2, 0.3], "hybrid": [0.2, 0.4, None]}}
    text = write_markdown(result, tmp_path / "eval.md", "t").read_text(encoding="utf-8")
    assert "| mode | recall@2 | recall@5 | EM | F1 | p50 ms | p95 ms | retrieval p50 ms |" in text
    assert "| dense | 0.4123 | 0.5561 | 0.2100 | 0.3012 | 12.3 | 40.0 | 10.0 |" in text
    assert "## recall@5 by question type" in text and "## F1 by question type" in text
    assert "| mode | bridge (3) | comparison (1) |" in text
    assert "| hybrid | 0.6000 | – |" in text  # no comparison question answered by hybrid
    assert "| mode | @1 | @2 | @3 |" in text and "| hybrid | 0.200 | 0.400 | – |" in text
    png = write_chart(result, tmp_path / "eval.png", "t").read_bytes()
    assert png.startswith(PNG_MAGIC)
