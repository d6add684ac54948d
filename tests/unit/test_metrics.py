import pytest

from hygraph.eval.metrics import (
    EvalRow,
    ModeStats,
    exact_match,
    normalize_answer,
    recall_at_k,
    summarize,
    summarize_mode,
    token_f1,
)

CONTRACT_KEYS = {"recall@2", "recall@5", "em", "f1", "p50_ms", "p95_ms"}


def row(qid: str = "q1", mode: str = "dense", ranked: tuple[str, ...] = (), answer: str = "",
        golds: tuple[str, ...] = ("x",), support: tuple[str, ...] = (), ms: float = 10.0) -> EvalRow:
    return EvalRow(question_id=qid, mode=mode, ranked_ids=ranked, answer=answer, golds=golds,
                   supporting_ids=support, latency_ms=ms)


@pytest.mark.parametrize("raw, expected", [
    ("The  Eiffel Tower!", "eiffel tower"),
    ("an apple, a pear", "apple pear"),
    ("U.S.A.", "usa"),
    ("Theatre", "theatre"),  # "the" only as a whole word
    ("  \tNew\nYork ", "new york"),
])
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_exact_match_ignores_case_articles_and_punctuation():
    assert exact_match("the Eiffel tower.", ["Eiffel Tower"]) == 1.0
    assert exact_match("Eiffel", ["Eiffel Tower"]) == 0.0


def test_exact_match_takes_the_best_alias():
    assert exact_match("NYC", ["New York City", "NYC"]) == 1.0
    assert exact_match("Boston", ["New York City", "NYC"]) == 0.0


def test_token_f1_hand_checked():
    # pred {new, york}, gold {new, york, city}: P = 2/2, R = 2/3, F1 = 0.8
    assert token_f1("New York", ["New York City"]) == pytest.approx(0.8)
    # articles do not count: pred {cat}, gold {cat, sat}: P = 1, R = 1/2, F1 = 2/3
    assert token_f1("the cat", ["a cat sat"]) == pytest.approx(2 / 3)
    assert token_f1("Paris", ["London"]) == 0.0


def test_token_f1_counts_repeated_tokens_once_each():
    # pred [a1 a1 b] vs gold [a1 b]: common 2, P = 2/3, R = 1, F1 = 0.8
    assert token_f1("x x y", ["x y"]) == pytest.approx(0.8)


def test_token_f1_takes_the_best_alias():
    assert token_f1("New York", ["Big Apple", "New York City"]) == pytest.approx(0.8)


def test_answer_that_normalizes_to_nothing_matches_only_nothing():
    assert token_f1("The", ["a"]) == 1.0
    assert token_f1("The", ["Paris"]) == 0.0


def test_golds_must_be_a_nonempty_sequence():
    with pytest.raises(TypeError):
        exact_match("Paris", "Paris")
    with pytest.raises(ValueError):
        token_f1("Paris", [])


def test_recall_at_k():
    ranked = ["d1", "s1", "d2", "s2", "d3"]
    assert recall_at_k(ranked, ["s1", "s2"], 2) == 0.5
    assert recall_at_k(ranked, ["s1", "s2"], 5) == 1.0
    assert recall_at_k(ranked, ["s1", "s9"], 5) == 0.5
    assert recall_at_k(ranked, ["s9"], 5) == 0.0
    # fewer passages retrieved than k: recall uses what is there
    assert recall_at_k(["s1"], ["s1", "s2"], 5) == 0.5
    # a supporting id listed twice is one supporting passage
    assert recall_at_k(ranked, ["s1", "s1"], 2) == 1.0


def test_recall_at_k_rejects_undefined_cases():
    with pytest.raises(ValueError):
        recall_at_k(["a"], [], 2)
    with pytest.raises(ValueError):
        recall_at_k(["a"], ["a"], 0)


def test_summary_has_exactly_the_contract_keys_and_values():
    rows = [
        row("q1", ranked=("s1", "d1", "s2"), answer="Paris", golds=("Paris",), support=("s1", "s2"), ms=10),
        row("q2", ranked=("d1", "d2", "d3", "d4", "s3"), answer="New York", golds=("New York City",),
            support=("s3",), ms=30),
    ]
    summary = summarize_mode(rows)
    assert set(summary) == CONTRACT_KEYS
    assert summary["recall@2"] == 0.25  # (1/2 + 0) / 2
    assert summary["recall@5"] == 1.0
    assert summary["em"] == 0.5
    assert summary["f1"] == 0.9  # (1 + 0.8) / 2
    assert summary["p50_ms"] == 20.0
    assert summary["p95_ms"] == 29.0  # linear interpolation between 10 and 30


def test_summary_rounds_rates_and_latencies():
    rows = [row(f"q{i}", answer="x" if i == 0 else "y", ms=1.0 / 3) for i in range(3)]
    summary = summarize_mode(rows)
    assert summary["em"] == 0.3333
    assert summary["p50_ms"] == 0.3


def test_recall_is_null_without_supporting_ids_and_skips_such_questions():
    assert summarize_mode([row(support=())])["recall@2"] is None
    mixed = [row("q1", ranked=("s1",), support=("s1",)), row("q2", support=())]
    assert summarize_mode(mixed)["recall@2"] == 1.0


def test_mode_stats_streams_rows_and_returns_per_row_scores():
    stats = ModeStats("hybrid")
    score = stats.add(row(mode="hybrid", ranked=("s1",), answer="x", support=("s1", "s2")))
    assert (score.em, score.f1, score.recall) == (1.0, 1.0, {2: 0.5, 5: 0.5})
    assert stats.count == 1
    with pytest.raises(ValueError):
        stats.add(row(mode="dense"))


def test_summarize_groups_modes_and_counts_questions():
    rows = [row("q1", "dense"), row("q1", "hybrid"), row("q2", "dense"), row("q2", "hybrid")]
    result = summarize(rows, k=5)
    assert result["questions"] == 2
    assert result["k"] == 5
    assert list(result["modes"]) == ["dense", "hybrid"]
    assert all(set(s) == CONTRACT_KEYS for s in result["modes"].values())


def test_empty_input_is_an_error_not_a_zero():
    with pytest.raises(ValueError):
        summarize_mode([])
    with pytest.raises(ValueError):
        ModeStats("dense").summary()
