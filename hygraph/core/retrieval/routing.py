"""`auto` (seed 004 §III-B, extended): the `route` role names the question's type, and each type is retrieved
with the mode that serves it best.

The table was chosen on the dev sets (2wiki_dev, musique_train100, hotpotqa_train100, the
router's own types, recall@5; docs/bench/eval_*.md): the router's types, not the sets' gold
labels, are what `auto` sees at query time. Corpus-level questions go to `global`, the mode
built for them (community summaries and their members, seed 004 §III-B).
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
