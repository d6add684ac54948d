"""Query-to-entity linking: the seeds of personalized PageRank (HippoRAG §3.2 NER-to-node, HippoRAG 2 §3.2
query-to-triple).

Three kinds of evidence, each a weight on an entity:
- exact names: a name the question contains (the `extract` role on the question) whose
  normalized form is an entity id;
- fuzzy names: a name with no exact match links to the entity whose name holds all of its
  analyzed terms (stems, stopwords out) with the fewest others, found through BM25 over the
  entity names: "Eight Days A Week (Film)" to "eight days a week";
- dense: the relations (triplets "head relation tail") most similar to the question, each
  lending its similarity to both ends. HippoRAG 2 found query-to-triple matching far more
  reliable than matching the question to single entity names, and so did we (README,
  Retrieval modes): an entity name alone carries no context.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from hygraph.core.lexical import analyze
from hygraph.core.retrieval.view import Embed, IndexView, read_many
from hygraph.model import normalize_name

NAMED_WEIGHT = 2.0  # an exact name: twice a perfectly similar triplet (dev sets: +1 to +3 points of recall@5)
FUZZY_WEIGHT = 0.5  # a partial name match is weaker evidence than an exact one
FUZZY_CANDIDATES = 5  # entity names BM25 proposes per unmatched question name
FUZZY_MAX_EXTRA_TERMS = 1  # a linked name may hold at most this many terms the question's name lacks


def named_entities(names: Iterable[str], view: IndexView) -> tuple[list[str], list[str]]:
    """Exact matches (entity ids, question order) and the names with none."""
    linked: list[str] = []
    missed: list[str] = []
    for name in names:
        eid = normalize_name(name)
        if eid in view.entity_name:
            linked.append(eid)
        elif eid:
            missed.append(name)
    return list(dict.fromkeys(linked)), missed


def fuzzy_entity(name: str, view: IndexView) -> str | None:
    """The entity whose analyzed name holds every analyzed term of `name`, with the fewest extra terms."""
    if view.entity_lexical is None:
        return None
    terms = analyze(name)
    if not terms:
        return None
    wanted = set(terms)
    best: tuple[int, str] | None = None
    for eid, _ in view.entity_lexical.top_k(terms, FUZZY_CANDIDATES):
        have = set(analyze(eid))
        extra = len(have - wanted)
        if wanted <= have and extra <= FUZZY_MAX_EXTRA_TERMS and (best is None or extra < best[0]):
            best = (extra, eid)
    return best[1] if best else None


def link_entities(names: Sequence[str], relation_hits: Sequence[tuple[str, float]],
                  view: IndexView) -> dict[str, float]:
    """Seed weight per entity id: exact names, fuzzy names, and the ends of the given similar relations.

    Evidence adds up: an entity both named and at the end of a similar triplet weighs more.
    """
    weights: dict[str, float] = {}

    def add(eid: str, w: float) -> None:
        if w > 0:
            weights[eid] = weights.get(eid, 0.0) + w

    exact, missed = named_entities(names, view)
    for eid in exact:
        add(eid, NAMED_WEIGHT)
    for name in missed:
        eid = fuzzy_entity(name, view)
        if eid is not None:
            add(eid, FUZZY_WEIGHT)
    for rid, score in relation_hits:
        head, _, tail, _ = view.relations[rid]
        add(head, score)
        add(tail, score)
    return weights


def name_vectors(names: Sequence[str], view: IndexView, embed: Embed) -> np.ndarray:
    """The text vectors of these names, a row each: the index's own vector of the entity whose name is exactly
    the text (an entity's vector embeds its name, and the updater embeds it again when the name changes), the
    model's for the others, in one call. hyperbolic's directives are entity names read from the passages (299
    of 300 on musique's dev questions), so its second round embeds nothing; hypergraph's question entities are
    one such name in about a third of questions. `names` must not be empty (the callers search only when there
    are some)."""
    if not names:
        raise ValueError("name_vectors: no names")
    ids = [normalize_name(name) for name in names]
    stored = read_many(view.entity_embedding, ids, None)
    known = read_many(view.entity_name, ids, None)
    rows: list[np.ndarray | None] = [vec if vec is not None and own == name else None
                                     for name, own, vec in zip(names, known, stored)]
    missing = [i for i, row in enumerate(rows) if row is None]
    if missing:
        for i, vec in zip(missing, embed([names[i] for i in missing])):
            rows[i] = vec
    return np.stack(rows).astype(np.float32, copy=False)
