"""`auto` (seed 004 §III-B, extended): the `route` role names the question's type, and each type is retrieved
with the mode that serves it best.

The table was chosen on the dev sets (2wiki_dev, musique_train100, hotpotqa_train100; the
router's own types, which are what `auto` sees at query time, not the sets' gold labels).
recall@5 over the three sets combined, per router type (docs/bench/retrieval_tuning.md):

| type (questions) | hybrid | ppr | hyperbolic | local | dense+bm25 | dense |
|---|---|---|---|---|---|---|
| bridge (187) | .795 | .793 | .784 | .691 | .640 | .643 |
| comparison (62) | .867 | .859 | .863 | .738 | .746 | .673 |
| entity (51) | .863 | .863 | .863 | .676 | .755 | .745 |

`hybrid` is the best or tied for every type the dev sets hold, so they all go to it; `local`,
the previous target, trails it everywhere. Corpus-level questions (none in the dev sets) go to
`global`, the mode built for them (community summaries and their members, seed 004 §III-B).
"""

from __future__ import annotations

ROUTES = {
    "entity": "hybrid",
    "bridge": "hybrid",
    "comparison": "hybrid",
    "corpus": "global",
}


def routed_mode(question_type: str) -> str:
    """The mode `auto` runs for a question of this type (a `route` answer)."""
    try:
        return ROUTES[question_type]
    except KeyError:
        raise ValueError(f"route: the router answered {question_type!r}, expected one of {', '.join(ROUTES)}") from None
