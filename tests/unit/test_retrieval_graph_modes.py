"""Graph retrieval strategies (hybrid, ppr, the baselines, collapsed, local, global, auto's routes) on a hand-made
index.

The question is two-hop: "Who is the spouse of the director of Film X?". Film X's passage names
the director, Dan Smith; Dan Smith's passage names the spouse but shares few words with the
question, so dense similarity ranks it below three distractor passages (harbor, lighthouse,
orchard). Every vector is built with an exact cosine to the query, so each ranking below follows
from the similarities written in the tables.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from hygraph.config import RetrievalConfig
from hygraph.core.graph import build_hybrid_graph
from hygraph.core.lexical import analyze
from hygraph.core.lexical import build as bm25_index
from hygraph.core.retrieval.collapsed import collapsed
from hygraph.core.retrieval.context import Context
from hygraph.core.retrieval.dense import dense
from hygraph.core.retrieval.fusion import rrf
from hygraph.core.retrieval.hybrid import hybrid
from hygraph.core.retrieval.items import select_relations
from hygraph.core.retrieval.lexical import bm25, dense_bm25
from hygraph.core.retrieval.linking import FUZZY_WEIGHT, NAMED_WEIGHT, fuzzy_entity, link_entities, named_entities
from hygraph.core.retrieval.local_global import global_, local
from hygraph.core.retrieval.routing import ROUTES, routed_mode
from hygraph.core.retrieval.modes import MODE_NAMES, MODES, ModeUnavailable, Request, retrieve, unavailable
from hygraph.core.retrieval.ppr import ppr
from hygraph.core.retrieval.propagation import RELATION_SEEDS, propagate, walk_for
from hygraph.core.retrieval.view import IndexView
from tests.views import by_doc

QUESTION = "Who is the spouse of the director of Film X?"
QUERY = np.array([1.0, 0.0], dtype=np.float32)

# chunk id -> (text, cosine to the query)
CHUNKS = {
    "film:0": ("Film X is a 1999 drama directed by Dan Smith.", 0.90),
    "film:1": ("Film X was shot in Spain.", 0.35),
    "dan:0": ("Dan Smith is married to Yara Lee.", 0.50),
    "dan:1": ("Dan Smith was born in Ohio.", 0.15),
    "harbor:0": ("The harbor lies below the lighthouse.", 0.70),
    "harbor:1": ("The harbor freezes in winter.", 0.30),
    "lighthouse:0": ("The lighthouse keeper married late in life.", 0.65),
    "orchard:0": ("The orchard borders the quarry and was directed by the county.", 0.60),
    "orchard:1": ("Apples grow in the orchard.", 0.25),
    "quarry:0": ("The quarry closed in 1950.", 0.10),
    "quarry:1": ("Yara Lee visited the quarry.", 0.05),
}
TITLES = {"film": "Film X", "dan": "Dan Smith", "harbor": "Harbor", "lighthouse": "Lighthouse",
          "orchard": "Orchard", "quarry": "Quarry"}
# entity id -> (name, cosine, mention chunks)
ENTITIES = {
    "film x": ("Film X", 0.80, ["film:0", "film:1"]),
    "dan smith": ("Dan Smith", 0.30, ["film:0", "dan:0", "dan:1"]),
    "yara lee": ("Yara Lee", 0.20, ["dan:0", "quarry:1"]),
    "spain": ("Spain", 0.25, ["film:1"]),
    "harbor": ("Harbor", 0.60, ["harbor:0", "harbor:1"]),
    "lighthouse": ("Lighthouse", 0.55, ["harbor:0", "lighthouse:0"]),
    "orchard": ("Orchard", 0.40, ["orchard:0", "orchard:1"]),
    "quarry": ("Quarry", 0.15, ["orchard:0", "quarry:0", "quarry:1"]),
}
# relation id -> (head, phrase, tail, extraction score, cosine of the triplet text, source chunks)
RELATIONS = {
    "r_dir": ("film x", "directed by", "dan smith", 1.0, 0.75, ["film:0"]),
    "r_mar": ("dan smith", "married to", "yara lee", 0.9, 0.55, ["dan:0"]),
    "r_shot": ("film x", "shot in", "spain", 0.8, 0.40, ["film:1"]),
    "r_near": ("harbor", "near", "lighthouse", 1.0, 0.20, ["harbor:0"]),
    # the most similar triplet, but about nothing the question's context reaches
    "r_border": ("orchard", "borders", "quarry", 0.7, 0.85, ["orchard:0"]),
    "r_visit": ("yara lee", "visited", "quarry", 0.5, 0.10, ["quarry:1"]),
}
FILM = ("film:0", "film:1", "dan:0", "dan:1", "film x", "dan smith", "yara lee", "spain")
COAST = ("harbor:0", "harbor:1", "lighthouse:0", "harbor", "lighthouse")
FARM = ("orchard:0", "orchard:1", "quarry:0", "quarry:1", "orchard", "quarry")
LONG = " ".join(["word"] * 40)
# summary id -> (text, layer, children, leaves, cosine)
SUMMARIES = {
    "L1:0": (f"Film X and its director Dan Smith. {LONG}", 1, FILM[:4], FILM, 0.72),
    "L1:1": ("The harbor and the lighthouse.", 1, COAST[:3], COAST, 0.52),
    "L1:2": ("The orchard and the quarry.", 1, FARM[:4], FARM, 0.32),
    "L2:0": (f"Films and the people who make them. {LONG}", 2, ("L1:0",), FILM, 0.62),
    "L2:1": ("Places on the coast and in the country.", 2, ("L1:1", "L1:2"), COAST + FARM, 0.45),
}


def at(cos: float) -> np.ndarray:
    """A unit vector whose cosine to QUERY is exactly `cos`."""
    return np.array([cos, math.sqrt(1.0 - cos * cos)], dtype=np.float32)


def make_view() -> IndexView:
    entity_relations: dict[str, list[str]] = {}
    for rid, (head, _, tail, *_rest) in RELATIONS.items():
        for eid in (head, tail):
            entity_relations.setdefault(eid, []).append(rid)
    mentions = {cid: [eid for eid, (_, _, chunks) in ENTITIES.items() if cid in chunks] for cid in CHUNKS}
    graph = build_hybrid_graph(list(CHUNKS), [mentions[cid] for cid in CHUNKS],
                               [(h, t, rid) for rid, (h, _, t, *_rest) in RELATIONS.items()], [])
    chunk_doc = {cid: cid.split(":")[0] for cid in CHUNKS}
    return IndexView(
        version=1,
        chunk_text={cid: text for cid, (text, _) in CHUNKS.items()},
        chunk_doc=chunk_doc,
        doc_chunks=by_doc(chunk_doc),
        titles=TITLES,
        entity_name={eid: name for eid, (name, _, _) in ENTITIES.items()},
        entity_desc={"film x": "a 1999 drama"},
        entity_score={eid: 1.0 for eid in ENTITIES},
        entity_chunks={eid: chunks for eid, (_, _, chunks) in ENTITIES.items()},
        relations={rid: (h, p, t, s) for rid, (h, p, t, s, _, _) in RELATIONS.items()},
        relation_chunks={rid: row[5] for rid, row in RELATIONS.items()},
        entity_relations=entity_relations,
        summary_text={sid: row[0] for sid, row in SUMMARIES.items()},
        summary_layer={sid: row[1] for sid, row in SUMMARIES.items()},
        summary_children={sid: row[2] for sid, row in SUMMARIES.items()},
        summary_leaves={sid: row[3] for sid, row in SUMMARIES.items()},
        node_summaries={x: {sid for sid, row in SUMMARIES.items() if x in row[3]}
                        for row in SUMMARIES.values() for x in row[3]},
        chunk_lexical=bm25_index(list(CHUNKS), [analyze(text) for text, _ in CHUNKS.values()]),
        entity_lexical=bm25_index(graph.entity_ids, [analyze(e) for e in graph.entity_ids]),
        graph=graph,
        walk=walk_for(graph, chunk_doc, TITLES),
    )


class BruteForce:
    """Exact inner-product search over per-kind matrices; records its calls; `depth` caps every answer."""

    def __init__(self, view: IndexView, depth: int | None = None) -> None:
        cos = {
            "chunks": {cid: c for cid, (_, c) in CHUNKS.items()},
            "entities": {eid: c for eid, (_, c, _) in ENTITIES.items()},
            "relations": {rid: row[4] for rid, row in RELATIONS.items()},
            "summaries": {sid: row[4] for sid, row in SUMMARIES.items()},
        }
        self.ids = {kind: list(table) for kind, table in cos.items()}
        self.matrix = {kind: np.stack([at(c) for c in table.values()]) for kind, table in cos.items()}
        self.layer = view.summary_layer
        self.depth = depth
        self.calls: list[tuple[str, int]] = []

    def __call__(self, kind: str, rows: np.ndarray, k: int, layer: int | None) -> list[list[tuple[str, float]]]:
        self.calls.append((kind, k))
        ids = self.ids[kind]
        keep = [kind != "summaries" or layer is None or self.layer[i] == layer for i in ids]
        out = []
        for scores in rows @ self.matrix[kind].T:
            order = [i for i in np.argsort(-scores, kind="stable") if keep[i]]
            cut = min(k, self.depth or k)
            out.append([(ids[i], round(float(scores[i]), 6)) for i in order[:cut]])
        return out

    def many(self, requests) -> list[list[list[tuple[str, float]]]]:
        return [self(*r) for r in requests]

    def start(self, requests):
        hits = self.many(requests)
        return lambda: hits


@pytest.fixture
def view() -> IndexView:
    return make_view()


@pytest.fixture
def search(view: IndexView) -> BruteForce:
    return BruteForce(view)


def ids(items) -> list[str]:
    return [i.id for i in items]


def docs(ctx: Context) -> list[str]:
    return [p.id for p in ctx.passages]


def question_entities(question: str) -> list[str]:
    # what the `extract` role returns: surface forms, some unknown to the index
    return {QUESTION: ["Film X"], "Whom did Yara Lee marry?": ["Yara  Lee!", "Marry"]}[question]


# ---------------------------------------------------------------- hybrid


def test_hybrid_brings_in_the_bridge_passage_that_dense_misses(view, search):
    base = dense(QUERY, 3, search, view.chunk_text, view.chunk_doc, view.titles)
    ctx = hybrid(QUESTION, QUERY, 3, view, search, question_entities)
    assert docs(base) == ["film", "harbor", "lighthouse"]
    # Film X is named; the walk goes on from it to its director, whose passage is about Dan Smith
    assert docs(ctx)[:2] == ["film", "dan"]
    assert [p.title for p in ctx.passages][:2] == ["Film X", "Dan Smith"]
    assert ctx.passages[0].score > ctx.passages[1].score > ctx.passages[2].score > 0


def test_hybrid_items_follow_equations_14_to_19(view, search):
    ctx = hybrid(QUESTION, QUERY, 3, view, search, question_entities)
    assert ids(ctx.summaries) == ["L1:0", "L2:0", "L1:1"]  # every layer
    assert [s.layer for s in ctx.summaries] == [1, 2, 1]
    assert ids(ctx.entities) == ["film x", "harbor", "lighthouse"]
    assert ctx.entities[0].text == "Film X: a 1999 drama"
    assert ctx.entities[0].sources == ("film",)
    # r_border is the most similar triplet but no end of it is in the entity set
    assert ids(ctx.relations) == ["r_dir", "r_mar", "r_shot"]
    assert [r.score for r in ctx.relations] == pytest.approx([0.75, 0.55, 0.40])
    assert ctx.relations[1].text == "Dan Smith married to Yara Lee"
    assert ctx.relations[1].sources == ("dan",)
    assert ctx.relations[1].links == ("dan smith", "yara lee")  # head and tail entity ids, for a graph view
    # chunks by PPR mass until they cover the k passages, in passage order
    assert list(dict.fromkeys(c.sources[0] for c in ctx.chunks)) == docs(ctx)
    assert [c.score for c in ctx.chunks] == sorted((c.score for c in ctx.chunks), reverse=True)


def test_hybrid_reaches_relations_through_the_retrieved_chunks_mentions(view, search):
    """Without communities, Dan Smith is in the entity set only as a mention of a retrieved chunk (eq. 5 edges)."""
    view.summary_leaves = {}
    ctx = hybrid(QUESTION, QUERY, 3, view, search, question_entities)
    assert ids(ctx.relations) == ["r_dir", "r_mar", "r_shot"]
    assert docs(ctx)[:2] == ["film", "dan"]


def test_hybrid_relation_k_limits_the_context_not_the_walk(view, search):
    ctx = hybrid(QUESTION, QUERY, 3, view, search, question_entities, relation_k=1)
    assert ids(ctx.relations) == ["r_dir"]
    assert docs(ctx)[:2] == ["film", "dan"]


def test_hybrid_reaches_the_bridge_from_similar_triplets_alone(view, search):
    """No name in the question links: the ends of the most similar triplets still seed the walk."""
    ctx = hybrid(QUESTION, QUERY, 3, view, search, lambda q: [])
    assert "dan" in docs(ctx)
    assert "dan" not in docs(dense(QUERY, 3, search, view.chunk_text, view.chunk_doc, view.titles))


def test_hybrid_searches_each_collection_once(view, search):
    hybrid(QUESTION, QUERY, 3, view, search, question_entities, relation_k=2, relation_pool=4, chunk_pool=5)
    assert sorted(search.calls) == [("chunks", 5), ("entities", 3), ("relations", 4), ("summaries", 3)]


def test_select_relations_falls_back_outside_a_shallow_search(view):
    # the search only reached r_border, which touches none of the entities
    hits = [("r_border", 0.85)]
    picked = select_relations(hits, {"film x", "harbor"}.__contains__, ["film x", "harbor", "lighthouse"], 3, view)
    # film x gives r_dir and r_shot, harbor gives r_near; ordered by extraction score, floor x score
    assert picked == [("r_dir", pytest.approx(0.85)), ("r_near", pytest.approx(0.85)),
                      ("r_shot", pytest.approx(0.68))]


def test_select_relations_keeps_searched_candidates_first(view):
    hits = [("r_border", 0.85), ("r_mar", 0.55)]
    picked = select_relations(hits, {"yara lee"}.__contains__, ["yara lee"], 2, view)
    assert picked == [("r_mar", 0.55), ("r_visit", pytest.approx(0.55 * 0.5))]


def test_hybrid_with_a_shallow_relation_search_still_returns_relation_k(view, search):
    ctx = hybrid(QUESTION, QUERY, 3, view, search, question_entities, relation_pool=1)
    assert len(ctx.relations) == 3
    assert "r_border" not in ids(ctx.relations)


# ---------------------------------------------------------------- collapsed


def test_collapsed_is_one_flat_top_k(view, search):
    ctx = collapsed(QUERY, 4, view, search)
    assert ids(ctx.summaries) == ["L1:0"]
    assert ids(ctx.chunks) == ["film:0", "harbor:0", "lighthouse:0"]
    # the retrieved chunks' passages, then chunks under L1:0 by similarity
    assert docs(ctx) == ["film", "harbor", "lighthouse", "dan"]
    assert sorted(kind for kind, _ in search.calls) == ["chunks", "summaries"]


@pytest.mark.parametrize(("bias", "p", "k", "summaries", "chunks"), [
    ("detailed", 1.0, 4, [], ["film:0", "harbor:0", "lighthouse:0", "orchard:0"]),
    ("detailed", 0.25, 4, ["L1:0", "L2:0", "L1:1"], ["film:0"]),
    ("summarized", 0.75, 4, ["L1:0", "L2:0", "L1:1"], ["film:0"]),
    ("summarized", 0.0, 3, [], ["film:0", "harbor:0", "lighthouse:0"]),
    # round(0.5 * 5) rounds half up: 3 from the favoured side
    ("summarized", 0.5, 5, ["L1:0", "L2:0", "L1:1"], ["film:0", "harbor:0"]),
    ("detailed", 0.5, 5, ["L1:0", "L2:0"], ["film:0", "harbor:0", "lighthouse:0"]),
    # only five summaries exist: the sixth node comes from the leaves
    ("summarized", 1.0, 6, ["L1:0", "L2:0", "L1:1", "L2:1", "L1:2"], ["film:0"]),
])
def test_collapsed_bias_proportions(view, search, bias, p, k, summaries, chunks):
    ctx = collapsed(QUERY, k, view, search, bias=bias, p=p)
    assert ids(ctx.summaries) == summaries
    assert ids(ctx.chunks) == chunks


def test_collapsed_token_budget_skips_what_does_not_fit(view, search):
    def n(cid: str) -> int:
        return len(CHUNKS[cid][0].split())

    # L1:0 and L2:0 carry 40 extra words each: both are skipped, shorter nodes below them fit
    budget = n("film:0") + n("harbor:0") + n("lighthouse:0") + n("orchard:0")
    ctx = collapsed(QUERY, 4, view, search, max_tokens=budget)
    assert ids(ctx.summaries) == []
    assert ids(ctx.chunks) == ["film:0", "harbor:0", "lighthouse:0", "orchard:0"]
    tight = collapsed(QUERY, 4, view, search, max_tokens=n("film:0") + n("harbor:0"))
    assert ids(tight.chunks) == ["film:0", "harbor:0"]


@pytest.mark.parametrize(("kwargs", "message"), [({"bias": "broad"}, "bias"), ({"p": 1.5}, "p")])
def test_collapsed_rejects_bad_parameters(view, search, kwargs, message):
    with pytest.raises(ValueError, match=message):
        collapsed(QUERY, 3, view, search, **kwargs)


# ---------------------------------------------------------------- local


def test_local_collects_the_question_entitys_neighbourhood(view, search):
    ctx = local(QUESTION, QUERY, 3, view, search, question_entities)
    # seeds: the named entity, then the most similar ones; neighbours: other ends of the relations
    assert ids(ctx.entities) == ["film x", "harbor", "lighthouse", "dan smith", "spain"]
    assert [e.score for e in ctx.entities] == pytest.approx([0.80, 0.60, 0.55, 0.75, 0.40])
    assert ids(ctx.relations) == ["r_dir", "r_shot", "r_near"]
    # support 3 each (film:0: film x, dan smith, r_dir; harbor:0: harbor, lighthouse, r_near;
    # film:1: film x, spain, r_shot), then similarity
    assert ids(ctx.chunks) == ["film:0", "harbor:0", "film:1"]
    assert docs(ctx) == ["film", "harbor", "lighthouse"]


def test_local_matches_names_the_vector_search_misses(view, search):
    ctx = local("Whom did Yara Lee marry?", QUERY, 2, view, search, question_entities)
    # "Yara  Lee!" normalizes to the entity id; "Marry" names no entity
    assert ids(ctx.entities)[:3] == ["yara lee", "film x", "harbor"]
    assert ctx.entities[0].score == pytest.approx(0.20)
    assert ids(ctx.relations) == ["r_dir", "r_mar"]
    assert "dan smith" in ids(ctx.entities)
    # film:0 (film x, dan smith, r_dir) and dan:0 (yara lee, dan smith, r_mar) both carry three
    assert ids(ctx.chunks) == ["film:0", "dan:0"]
    assert docs(ctx) == ["film", "dan"]


# ---------------------------------------------------------------- global


def test_global_picks_the_best_communities_and_their_members(view, search):
    ctx = global_(QUERY, 2, view, search)
    assert ids(ctx.summaries) == ["L1:0", "L2:0"]
    assert ids(ctx.entities) == ["film x", "dan smith"]
    assert ids(ctx.chunks) == ["film:0", "dan:0"]
    # the harbor passage is more similar than dan's but lies outside the chosen communities
    assert docs(ctx) == ["film", "dan"]


def test_global_fills_from_members_the_chunk_search_did_not_reach(view):
    shallow = BruteForce(view, depth=2)
    ctx = global_(QUERY, 3, view, shallow)
    # the chunk search returned film:0 and harbor:0; L1:0's other chunks follow in member order
    assert ids(ctx.chunks) == ["film:0", "film:1", "dan:0"]
    assert [c.score for c in ctx.chunks] == pytest.approx([0.90, 0.70, 0.70])
    assert docs(ctx) == ["film", "dan"]


# ---------------------------------------------------------------- auto


def test_every_question_type_has_a_mode_and_corpus_questions_go_global():
    assert set(ROUTES) == {"entity", "bridge", "comparison", "corpus"}
    assert routed_mode("corpus") == "global"
    assert all(routed_mode(t) in MODE_NAMES and routed_mode(t) != "auto" for t in ROUTES)
    with pytest.raises(ValueError, match="router answered 'both'"):
        routed_mode("both")


def request(view: IndexView, search: BruteForce, question_type: str = "corpus") -> Request:
    def unused(*_args):
        raise AssertionError("not asked for by these modes")
    return Request(QUESTION, QUERY, 2, view, search, unused, question_entities, unused, lambda q: question_type,
                   unused, RetrievalConfig().model_dump())


ALL_KINDS = {"chunks", "entities", "relations", "hyperedges", "summaries", "hyperbolic"}


def test_the_mode_table_runs_a_mode_as_its_function_does(view, search):
    assert MODE_NAMES[0] == "dense" and set(MODE_NAMES) == set(MODES)
    by_table = retrieve("global", request(view, search), ALL_KINDS)
    assert ids(by_table.summaries) == ids(global_(QUERY, 2, view, search).summaries) == ["L1:0", "L2:0"]
    assert [m for m in MODE_NAMES if not MODES[m].question_vector] == ["bm25"]


def test_auto_runs_the_routed_mode_and_notes_the_route(view, search):
    ctx = retrieve("auto", request(view, search, "corpus"), ALL_KINDS)
    assert ctx.notes["route"] == "corpus" and ctx.notes["routed_mode"] == "global"
    assert ids(ctx.summaries) == ["L1:0", "L2:0"]


def test_a_mode_the_version_cannot_answer_says_what_it_lacks(view, search):
    dense_only = {"chunks"}
    with pytest.raises(ModeUnavailable, match="'hybrid' needs the relations of a graph index; index version 1"):
        retrieve("hybrid", request(view, search), dense_only)
    with pytest.raises(ModeUnavailable, match="'global' needs the summaries"):
        retrieve("auto", request(view, search, "corpus"), dense_only)  # the routed mode is checked too
    no_bm25 = replace(view, chunk_lexical=None)
    assert unavailable(MODES["hyperbolic"], no_bm25, ALL_KINDS).startswith("'hyperbolic' needs the lexical (BM25)")
    assert unavailable(MODES["dense"], no_bm25, dense_only) is None


# ---------------------------------------------------------------- baselines, linking, ppr


def test_bm25_ranks_chunks_by_their_words(view):
    ctx = bm25("Which quarry did Yara Lee visit?", 3, view)
    assert docs(ctx)[0] == "quarry"
    assert ids(ctx.chunks)[0] == "quarry:1"  # "Yara Lee visited the quarry." holds every content word
    assert [c.score for c in ctx.chunks] == sorted((c.score for c in ctx.chunks), reverse=True)


def test_dense_bm25_fuses_both_rankings_by_reciprocal_rank(view, search):
    question = "Which quarry did Yara Lee visit?"
    ctx = dense_bm25(question, QUERY, 3, view, search)
    dense_order = [c for c, _ in search("chunks", QUERY[None, :], 20, None)[0]]
    lexical_order = [c for c, _ in view.chunk_lexical.top_k(analyze(question), 20)]
    expected = sorted(CHUNKS, key=lambda c: -sum(1 / (60 + order.index(c) + 1) for order in (dense_order, lexical_order)
                                                 if c in order))
    assert ids(ctx.chunks) == expected[:len(ctx.chunks)]
    assert rrf([["a", "b"], ["b", "c"]]) == [("b", pytest.approx(1 / 62 + 1 / 61)), ("a", pytest.approx(1 / 61)),
                                             ("c", pytest.approx(1 / 62))]


def test_linking_exact_fuzzy_and_triplet_ends(view):
    # "Film X" is an entity id; "Dan Smith Jr" has no exact match and no name holds all its terms;
    # "Lee" is held by "yara lee" with one extra term
    assert named_entities(["Film X", "Dan Smith Jr", "Lee"], view) == (["film x"], ["Dan Smith Jr", "Lee"])
    assert fuzzy_entity("Dan Smith Jr", view) is None
    assert fuzzy_entity("Lee", view) == "yara lee"
    seeds = link_entities(["Film X", "Lee"], [("r_mar", 0.5)], view)
    assert seeds == {"film x": NAMED_WEIGHT, "yara lee": pytest.approx(FUZZY_WEIGHT + 0.5), "dan smith": 0.5}


def test_ppr_mode_ranks_the_bridge_passage_and_reports_its_seeds(view, search):
    ctx = ppr(QUESTION, QUERY, 3, view, search, question_entities)
    assert docs(ctx)[:2] == ["film", "dan"]
    assert ids(ctx.entities)[0] == "film x"  # the named entity is the heaviest seed
    assert len(ctx.relations) == RELATION_SEEDS
    assert ctx.notes["seeds"]["entities"] >= 1 and ctx.notes["seeds"]["passages"] >= 3


def test_propagate_without_any_seed_gives_no_mass(view):
    assert not propagate(view, {}, []).any()
