"""Answer and retrieval metrics for `hygraph eval` and the per-mode summary of CONTRACT.md.

EM and F1 follow the SQuAD evaluation script (scored against every gold answer and
alias, best one counts); recall@k follows shared/data/README.md.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

# Recall is always reported at these depths, whatever `--k` retrieved: with k < 5,
# recall@5 is computed on the k passages there are, so it equals recall@k.
RECALL_DEPTHS = (2, 5)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT_TABLE = str.maketrans("", "", string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD normalization: lowercase, drop punctuation, drop articles a/an/the, collapse whitespace."""
    text = s.lower().translate(_PUNCT_TABLE)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _check_golds(golds: Sequence[str]) -> None:
    # A bare string would be iterated character by character and score silently wrong.
    if isinstance(golds, str):
        raise TypeError("golds must be a sequence of answers, not a single string")
    if not golds:
        raise ValueError("no gold answers to score against")


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalized prediction equals any normalized gold answer or alias, else 0.0."""
    _check_golds(golds)
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    # An answer that normalizes to nothing (e.g. "The") only matches another empty one (SQuAD v2).
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """SQuAD token F1 of the prediction against each gold answer or alias; the best one."""
    _check_golds(golds)
    pred = normalize_answer(prediction).split()
    return max(_f1(pred, normalize_answer(g).split()) for g in golds)


def recall_at_k(ranked_ids: Sequence[str], supporting_ids: Iterable[str], k: int) -> float:
    """Share of the distinct supporting ids found among the first k ranked ids."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    support = set(supporting_ids)
    if not support:
        raise ValueError("recall is undefined without supporting ids")
    return len(support.intersection(ranked_ids[:k])) / len(support)


@dataclass(frozen=True)
class EvalRow:
    """One question answered in one mode: what was retrieved, answered, expected, and how long it took."""

    question_id: str
    mode: str
    ranked_ids: tuple[str, ...]  # corpus ids in rank order (the `passages` of a query)
    answer: str
    golds: tuple[str, ...]  # gold answer first, then aliases
    supporting_ids: tuple[str, ...]
    latency_ms: float


@dataclass(frozen=True)
class RowScore:
    """The metrics of one EvalRow; recall is None when the question has no supporting ids."""

    em: float
    f1: float
    recall: dict[int, float | None]  # depth -> recall at that depth


def score_row(row: EvalRow) -> RowScore:
    """EM, F1 and recall at every RECALL_DEPTHS for one answered question."""
    recall: dict[int, float | None] = {
        depth: recall_at_k(row.ranked_ids, row.supporting_ids, depth) if row.supporting_ids else None
        for depth in RECALL_DEPTHS
    }
    return RowScore(em=exact_match(row.answer, row.golds), f1=token_f1(row.answer, row.golds),
                    recall=recall)


@dataclass
class ModeStats:
    """Running totals for one mode, fed one row at a time so a CLI never holds every answer."""

    mode: str
    em_sum: float = field(default=0.0, init=False)
    f1_sum: float = field(default=0.0, init=False)
    recall_sums: dict[int, float] = field(default_factory=lambda: dict.fromkeys(RECALL_DEPTHS, 0.0),
                                          init=False)
    recall_rows: int = field(default=0, init=False)
    latencies_ms: list[float] = field(default_factory=list, init=False)

    def add(self, row: EvalRow) -> RowScore:
        """Scores the row into the totals and returns its own scores (for per-question output)."""
        if row.mode != self.mode:
            raise ValueError(f"row for mode '{row.mode}' added to the stats of mode '{self.mode}'")
        score = score_row(row)
        self.em_sum += score.em
        self.f1_sum += score.f1
        if row.supporting_ids:
            self.recall_rows += 1
        for depth, value in score.recall.items():
            if value is not None:
                self.recall_sums[depth] += value
        self.latencies_ms.append(row.latency_ms)
        return score

    @property
    def count(self) -> int:
        return len(self.latencies_ms)

    def summary(self) -> dict[str, float | None]:
        """The per-mode object of CONTRACT.md: recall@2, recall@5, em, f1, p50_ms, p95_ms.

        Rates are means rounded to 4 decimals, latencies percentiles rounded to 0.1 ms.
        Recall averages only questions that have supporting ids and is None (JSON null)
        when none do.
        """
        if not self.count:
            raise ValueError(f"mode '{self.mode}' has no rows to summarize")
        out: dict[str, float | None] = {
            f"recall@{d}": round(self.recall_sums[d] / self.recall_rows, 4) if self.recall_rows else None
            for d in RECALL_DEPTHS
        }
        out["em"] = round(self.em_sum / self.count, 4)
        out["f1"] = round(self.f1_sum / self.count, 4)
        p50, p95 = np.percentile(self.latencies_ms, [50, 95])
        out["p50_ms"] = round(float(p50), 1)
        out["p95_ms"] = round(float(p95), 1)
        return out


def summarize_mode(rows: Iterable[EvalRow]) -> dict[str, float | None]:
    """The CONTRACT.md per-mode object for rows that all belong to one mode."""
    stats: ModeStats | None = None
    for row in rows:
        if stats is None:
            stats = ModeStats(row.mode)
        stats.add(row)
    if stats is None:
        raise ValueError("no rows to summarize")
    return stats.summary()


def summarize(rows: Iterable[EvalRow], k: int) -> dict[str, Any]:
    """The `hygraph eval` result {"questions", "k", "modes": {mode: summary}}; modes in first-seen order."""
    by_mode: dict[str, ModeStats] = {}
    questions: set[str] = set()
    for row in rows:
        by_mode.setdefault(row.mode, ModeStats(row.mode)).add(row)
        questions.add(row.question_id)
    return {"questions": len(questions), "k": k,
            "modes": {mode: stats.summary() for mode, stats in by_mode.items()}}
