"""The graph index end to end: extraction, hybrid graph, hierarchy, hyperbolic vectors, every mode."""

from __future__ import annotations

import json
from typing import Callable, Iterator

import numpy as np
import pytest

from hygraph.config import load_config
from hygraph.core.retrieval.modes import MODE_NAMES
from hygraph.core import lexical
from hygraph.engine import QueryEngine
from hygraph.pipeline import QueryPipeline, QueryRequest
from hygraph.store.artifacts import CHUNKS, ENTITIES, GRAPH, HYPERPLANES, LEXICAL_CHUNKS, LEXICAL_ENTITIES, RELATIONS
from hygraph.store import derived, view_loader
from hygraph.store.versions import IndexStore
from tests.index_tables import chunks_of, leaves
from tests.integration.conftest import DATA, cli_env, last_json, run_cli

pytestmark = pytest.mark.integration


def test_graph_index_has_every_part(built_index):
    index_dir, out = built_index
    assert out["entities"] > 100 and out["relations"] > 100 and out["hyperedges"] > 50
    assert out["summaries"] > 0 and out["layers"] >= 2
    assert out["llm_calls"]["extract"] == out["chunks"]
    assert out["llm_calls"]["summarize"] == out["summaries"]
    stats = out["stats"]
    assert set(stats["edges"]) == {"chunk_chunk", "entity_entity", "entity_chunk", "hyperedge_entity",
                                   "hyperedge_chunk"}
    assert sum(stats["segments_per_layer"].values()) == out["summaries"]
    for stage in ("chunk+embed+extract", "hybrid graph", "cleora", "hierarchy", "hyperbolic", "lexical",
                  "write vectors"):
        assert stage in stats["seconds_per_stage"]
    version = IndexStore(index_dir).open()
    assert set(version.manifest.collections) == {"chunks", "entities", "relations", "hyperedges", "summaries",
                                                 "hyperbolic"}
    assert version.manifest.hyperbolic.M > 1.0
    assert "L1" in version.table(HYPERPLANES)
    # The stored graph is the built one: every edge listed at both ends, as many as the build counted.
    graph = version.table(GRAPH)
    neighbours = dict(zip(graph.values("id"), graph.values("neighbours")))
    assert all(node in neighbours[other] for node, nbs in neighbours.items() for other in nbs)
    assert sum(len(nbs) for nbs in neighbours.values()) == 2 * sum(stats["edges"].values())
    # The BM25 postings: a row per chunk and per entity.
    assert sorted(version.table(LEXICAL_CHUNKS).values("id")) == sorted(version.table(CHUNKS).values("id"))
    assert sorted(version.table(LEXICAL_ENTITIES).values("id")) == sorted(version.table(ENTITIES).values("id"))


def test_shared_read_structures_equal_those_derived_in_the_process(built_index, tmp_path):
    """The BM25 indexes, graph and walk a reader maps from the node's shared files (store/derived.py) are the ones
    it derives itself where the index directory cannot be written; a second reader maps them, computing nothing;
    a reader removes what readers of older versions derived."""
    index_dir, _ = built_index
    version = IndexStore(index_dir).open()
    older = version.store.derived_dir / derived.directory_name(version.store.uid, version.version - 1)
    older.mkdir(parents=True, exist_ok=True)  # what a reader of the version before left
    shared = view_loader.structures(version)
    assert not older.exists()
    name = derived.directory_name(version.store.uid, version.version)
    assert (version.store.derived_dir / name / "DONE").is_file()
    mtime = (version.store.derived_dir / name / "DONE").stat().st_mtime_ns
    again = view_loader.structures(IndexStore(index_dir).open())
    assert (version.store.derived_dir / name / "DONE").stat().st_mtime_ns == mtime
    (tmp_path / "file").write_text("")
    version.store.derived_dir = tmp_path / "file" / "derived"  # not a directory: the structures stay in memory
    own = view_loader.structures(version)
    assert isinstance(own.graph.node_index, dict) and not isinstance(shared.graph.node_index, dict)
    for got in (shared, again):
        for mine, theirs in ((got.chunk_lexical, own.chunk_lexical), (got.entity_lexical, own.entity_lexical)):
            assert list(mine.ids) == list(theirs.ids) and list(mine.terms) == list(theirs.terms)
            assert (mine.postings != theirs.postings).nnz == 0
            assert all(mine.term_index[t] == j for j, t in enumerate(theirs.terms))
            for question in ("Who directed the film?", "Which magazine was started first", "zzz qqq"):
                terms = lexical.analyze(question)
                assert mine.top_k(terms, 10) == theirs.top_k(terms, 10)
        g, h = got.graph, own.graph
        assert [list(x) for x in (g.chunk_ids, g.entity_ids, g.hyperedge_ids, g.relation_ids)] == \
            [list(x) for x in (h.chunk_ids, h.entity_ids, h.hyperedge_ids, h.relation_ids)]
        assert all(g.node_index[n] == i for n, i in h.node_index.items()) and "no such node" not in g.node_index
        assert (g.adjacency != h.adjacency).nnz == 0
        assert np.array_equal(g.relation_heads, h.relation_heads) and np.array_equal(g.relation_tails, h.relation_tails)
        assert (got.walk.matrix != own.walk.matrix).nnz == 0 and np.array_equal(got.walk.dangling, own.walk.dangling)


def test_every_mode_answers_through_eval(built_index, hotpot_subset):
    index_dir, _ = built_index
    _, questions = hotpot_subset
    res = last_json(run_cli("eval", "--index-dir", str(index_dir), "--questions", str(questions),
                            "--modes", ",".join(MODE_NAMES), "--k", "5", "--limit", "4"))
    assert list(res["modes"]) == list(MODE_NAMES)
    for mode, stats in res["modes"].items():
        assert stats["recall@5"] is not None, mode
    # Gold passages are in this small corpus; the graph modes must find them as dense does.
    assert res["modes"]["hybrid"]["recall@5"] >= 0.5


@pytest.fixture(scope="module")
def ask(built_index) -> Iterator[Callable[[str, str], dict]]:
    """Questions answered in this process, as `hygraph query` answers them (the same pipeline and JSON; the
    CLI's own path is test_cli_dense's): a CLI process per question paid the model's and store's start."""
    index_dir, _ = built_index
    cfg = load_config(None)
    engine = QueryEngine(cfg, index_dir)
    try:
        pipeline = QueryPipeline(engine)
        yield lambda question, mode: pipeline.run(QueryRequest.make(cfg.retrieval, question, mode)).to_json()
    finally:
        engine.close()


def test_hyperbolic_query_returns_its_implicit_subgraph(ask):
    res = ask("Are Christopher Nolan and Sathish Kalathil both film directors?", "hyperbolic")
    tree = res["context"]["notes"]["implicit_subgraph"]
    assert tree["root"] == "query" and tree["nodes"] and tree["edges"]
    assert len(res["passages"]) == 5


def test_auto_records_the_route(ask):
    res = ask("What are the main themes across these documents?", "auto")
    # a question about the whole collection is typed `corpus` and answered by global search
    assert res["context"]["notes"]["route"] == "corpus"
    assert res["context"]["notes"]["routed_mode"] == "global"


def test_triples_import_and_the_leiden_partitioner_build_and_serve_global(tmp_path):
    """The graph built from imported triples (no extraction), with HyGRAG's context-aware Leiden as layer 1,
    LSH above it; `global` reads its communities. (One build for both: the triples import was a build of its
    own on the same corpus, with the default partitioner that `built_index` already covers.)"""
    rows = [json.loads(l) for l in (DATA / "musique_train100.corpus.jsonl").open()][:60]
    triples = [json.loads(l) for l in (DATA / "musique_train100.triples.jsonl").open()]
    keep = {r["id"] for r in rows}
    corpus, tfile, idx = tmp_path / "c.jsonl", tmp_path / "t.jsonl", tmp_path / "idx"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tfile.write_text("".join(json.dumps(t) + "\n" for t in triples if t["passage_id"] in keep))
    env = cli_env(HYGRAPH__HIERARCHY__PARTITIONER="leiden")
    out = last_json(run_cli("index", "--corpus", str(corpus), "--triples", str(tfile), "--index-dir", str(idx),
                            env=env))
    assert "extract" not in out["llm_calls"]
    version = IndexStore(idx).open()
    # "Journal of Mathematical Physics" is an entity of the first passage's OpenIE output.
    assert "journal of mathematical physics" in version.table(ENTITIES)
    rels = version.table(RELATIONS)
    assert any(h == "journal of mathematical physics" and t == "american institute of physics"
               for h, t in zip(rels.values("head"), rels.values("tail")))
    assert out["stats"]["segments_per_layer"]["L1"] > 1
    assert version.manifest.hierarchy.partitioner == "leiden"
    res = last_json(run_cli("query", "--index-dir", str(idx), "--mode", "global",
                            "What is the Journal of Mathematical Physics?", env=env))
    assert res["passages"] and res["context"]["summaries"]

    # HyGRAG §3.4 attachment: inserts and deletes edit the Leiden communities in place.
    new = [json.loads(l) for l in (DATA / "musique_train100.corpus.jsonl").open()][60:63]
    extra = tmp_path / "new.jsonl"
    extra.write_text("".join(json.dumps(r) + "\n" for r in new))
    ins = last_json(run_cli("insert", "--index-dir", str(idx), "--corpus", str(extra), env=env))
    assert ins["documents"] == 3 and ins["summaries_rebuilt"] >= 1

    mine = chunks_of(idx, new[0]["id"])
    assert mine and mine <= leaves(idx)  # the new chunks are leaves of the hierarchy
    gone = last_json(run_cli("delete", "--index-dir", str(idx), "--ids", new[0]["id"], env=env))
    assert gone["documents_removed"] == 1 and gone["summaries_rebuilt"] >= 1
    assert not mine & leaves(idx)


def test_unknown_triples_passage_is_exit_2(tmp_path, hotpot_subset):
    corpus, _ = hotpot_subset
    tfile = tmp_path / "t.jsonl"
    tfile.write_text(json.dumps({"passage_id": "nope", "triples": [["a", "b", "c"]], "entities": []}) + "\n")
    proc = run_cli("index", "--corpus", str(corpus), "--triples", str(tfile), "--index-dir", str(tmp_path / "i"))
    assert proc.returncode == 2 and "nope" in proc.stderr
    assert not (tmp_path / "i" / "CURRENT").exists()

