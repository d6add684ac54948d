"""Stage updates apply the build's rules to the change: growing an index by a chunk, or deleting one, gives
the rows and the graph a build of the resulting chunks gives (knowledge, graph, edge counts)."""

import numpy as np
import pytest

from hygraph.config import HygraphConfig
from hygraph.indexing.stages import graph as graph_stage
from hygraph.indexing.stages import knowledge
from hygraph.indexing.state import IndexState
from hygraph.model import Entity, Extraction, Hyperedge, Relation
from hygraph.store.artifacts import CHUNKS, ENTITIES, GRAPH, HYPEREDGES, RELATIONS, ChunkRow
from hygraph.store.manifest import Manifest
from hygraph.store.versions import IndexStore

CFG = HygraphConfig.model_validate({"graph": {"shared_entity_threshold": 1}, "cleora": {"dim": 8}})
# Bob, Cy and Dan are mentioned by three of the four chunks: hubs with c1..c4 in, not with two of them.
HUBS = HygraphConfig.model_validate({"graph": {"shared_entity_threshold": 1, "hub_chunks": 2}, "cleora": {"dim": 8}})
DIMS = {"text": 2, "cleora": 8}


def _ex(cid: str, names: list[str], rels: list[tuple[str, str, str]], facts: list[tuple[str, list[str]]]) -> Extraction:
    return Extraction(cid, entities=[Entity(n.lower(), n, "NAME", f"{n} in {cid}", 0.5 + 0.1 * len(n) % 3)
                                     for n in names],
                      relations=[Relation.make(h, r, t) for h, r, t in rels],
                      hyperedges=[Hyperedge.make(text, ents) for text, ents in facts])


# Relation ends are listed as entities, as the extractors do: an end first seen through a relation counts as
# a mention only while it is no entity yet, which would make a rebuild depend on the chunks' order.
EXTRACTIONS = {
    "c1": _ex("c1", ["Ada", "Bob", "Cy"], [("Ada", "knows", "Bob")], [("Ada met Bob and Cy.", ["Ada", "Bob", "Cy"])]),
    "c2": _ex("c2", ["Bob", "Cy", "Dan", "Ada"], [("Bob", "likes", "Dan"), ("Ada", "knows", "Bob")],
              [("Bob and Dan sail.", ["Bob", "Dan"])]),
    "c3": _ex("c3", ["Eve", "Dan"], [("Eve", "is", "Eve")], []),
    "c4": _ex("c4", ["Cy", "Bob", "Eve", "Fay", "Dan"], [("Cy", "hires", "Fay"), ("Bob", "likes", "Dan")],
              [("Ada met Bob and Cy.", ["Ada", "Bob", "Cy"]), ("Fay and Eve run.", ["Fay", "Eve"])]),
}


def _store(tmp_path, chunk_ids: list[str], cfg: HygraphConfig = CFG) -> IndexStore:
    """What a build of these chunks writes for the knowledge and graph stages."""
    kb = knowledge.merge_extractions([EXTRACTIONS[c] for c in chunk_ids])
    hg = graph_stage.build(cfg, chunk_ids, kb)
    contributions = knowledge.per_chunk(kb)
    entities, relations, hyperedges = knowledge.build_rows(kb, hg.entity_ids, hg.hyperedge_ids,
                                                           np.zeros((len(hg.entity_ids), 2), np.float32))
    chunks = [ChunkRow(c, c, 0, c, 1, "", tuple(contributions[c].entities), tuple(contributions[c].relations),
                       tuple(contributions[c].hyperedges), np.zeros(2, np.float32)) for c in chunk_ids]
    store = IndexStore(tmp_path, create=True)
    with store.begin() as w:
        for artifact, rows in ((CHUNKS, chunks), (ENTITIES, entities), (RELATIONS, relations),
                               (HYPEREDGES, hyperedges),
                               (GRAPH, graph_stage.build_rows(hg, np.zeros((hg.n_nodes, 8), np.float32)))):
            w.replace(artifact, rows, DIMS)
        w.commit(Manifest(dims=DIMS, graph=True, stats={"edges": graph_stage.edge_counts(hg)}))
    return store


def _apply(state: IndexState, removed: list[str], added: list[str], cfg: HygraphConfig = CFG) -> None:
    removed_rows = [state.require(CHUNKS, c) for c in removed]
    kc = knowledge.update(state, removed_rows, [EXTRACTIONS[c] for c in added])
    state.delete_all(CHUNKS, removed)
    for c in added:
        ck = kc.chunks[c]
        state.put(CHUNKS, ChunkRow(c, c, 0, c, 1, "", tuple(ck.entities), tuple(ck.relations), tuple(ck.hyperedges),
                                   np.zeros(2, np.float32)))
    graph_stage.update(state, cfg, added, removed, kc)


# An entity's record (surface name, type, description, score) follows the extractions that came in; a
# delete keeps it (only a description quoting deleted text is cleared), a rebuild takes it from what is left.
RECORD = ("name", "type", "description", "score", "names", "name_counts")


def _snapshot(read, keys, records: bool) -> dict:
    out = {}
    skip = ("embedding", "cleora") + (() if records else RECORD)
    for key in keys:
        row = read(key)
        out[key] = {f: getattr(row, f) for f in row.__dataclass_fields__ if f not in skip}
        for f in ("relations", "neighbours"):  # list order follows history, the sets must match
            if f in out[key]:
                out[key][f] = sorted(out[key][f])
        out[key].pop("name_counts", None)
    return out


def _same(state: IndexState, built: IndexStore, records: bool = True) -> None:
    v = built.open()
    for artifact in (ENTITIES, RELATIONS, HYPEREDGES, GRAPH):
        keys = sorted(v.table(artifact).ids())
        assert state.count(artifact) == len(keys), artifact.name
        assert _snapshot(lambda k: state.get(artifact, k), keys, records) == \
            _snapshot(v.table(artifact).get, keys, records)
    assert state.manifest.stats["edges"] == v.manifest.stats["edges"]


@pytest.mark.parametrize("cfg", [CFG, HUBS], ids=["no-hubs", "hubs"])
@pytest.mark.parametrize("start, added, removed", [(["c1"], ["c2"], []), (["c1", "c2"], ["c3", "c4"], ["c2"]),
                                                   (["c1", "c2", "c3"], ["c4"], ["c1", "c4"])])
def test_an_update_gives_what_a_build_of_the_same_chunks_gives(tmp_path, start, added, removed, cfg):
    grown = start + added
    state = IndexState(_store(tmp_path / "start", start, cfg).open())
    _apply(state, [], added, cfg)
    _same(state, _store(tmp_path / "grown", grown, cfg))
    if removed:
        state = IndexState(_store(tmp_path / "full", grown, cfg).open())
        _apply(state, removed, [], cfg)
        _same(state, _store(tmp_path / "shrunk", [c for c in grown if c not in removed], cfg), records=False)


def test_chunks_lose_the_edge_a_new_hub_gave_them_and_regain_it_when_it_is_no_hub(tmp_path):
    # c1 and c2 share Ada, Bob, Cy; with c4 in, Bob and Cy are hubs and Ada alone is not > 1.
    state = IndexState(_store(tmp_path / "start", ["c1", "c2", "c3"], HUBS).open())
    assert "c2" in state.require(GRAPH, "c1").neighbours
    _apply(state, [], ["c4"], HUBS)
    assert "c2" not in state.require(GRAPH, "c1").neighbours
    state = IndexState(_store(tmp_path / "full", ["c1", "c2", "c3", "c4"], HUBS).open())
    assert "c2" not in state.require(GRAPH, "c1").neighbours
    _apply(state, ["c4"], [], HUBS)
    assert "c2" in state.require(GRAPH, "c1").neighbours


def test_a_chunk_links_to_chunks_sharing_more_than_the_threshold_and_a_self_loop_adds_no_edge(tmp_path):
    state = IndexState(_store(tmp_path, ["c1", "c2", "c3"]).open())
    assert set(state.require(GRAPH, "c1").neighbours) >= {"c2"}  # Bob and Cy: 2 shared > 1
    assert "c3" not in state.require(GRAPH, "c1").neighbours  # nothing shared
    assert "eve" not in state.require(GRAPH, "eve").neighbours
    assert state.require(ENTITIES, "eve").relations.count(Relation.make("Eve", "is", "Eve").id) == 2


def test_a_delete_clears_a_description_only_when_no_remaining_chunk_holds_its_sentence(tmp_path):
    """The sentence an entity's description quotes is in two documents: deleting one keeps the description
    (no summary above the entity is redone); deleting the other as well clears it."""
    said = "Ada sails to Oslo."
    texts = {"c1": f"{said} Bob stays.", "c2": f"Later. {said}", "c3": "Ada rows."}
    exs = {c: Extraction(c, entities=[Entity("ada", "Ada", "NAME", said if c != "c3" else "Ada rows.", 0.5)])
           for c in texts}
    kb = knowledge.merge_extractions(exs.values())
    hg = graph_stage.build(CFG, list(texts), kb)
    contributions = knowledge.per_chunk(kb)
    entities, relations, hyperedges = knowledge.build_rows(kb, hg.entity_ids, hg.hyperedge_ids,
                                                           np.zeros((len(hg.entity_ids), 2), np.float32))
    assert entities[0].description == said
    store = IndexStore(tmp_path, create=True)
    with store.begin() as w:
        w.replace(CHUNKS, [ChunkRow(c, c, 0, t, 1, "", tuple(contributions[c].entities), (), (),
                                    np.zeros(2, np.float32)) for c, t in texts.items()], DIMS)
        w.replace(ENTITIES, entities, DIMS)
        w.commit(Manifest(dims=DIMS, graph=True))
    state = IndexState(store.open())

    def delete(cid: str) -> knowledge.KnowledgeChange:
        kc = knowledge.update(state, [state.require(CHUNKS, cid)], [])
        state.delete(CHUNKS, cid)
        return kc

    kc = delete("c1")
    assert kc.stale_entities == [] and state.require(ENTITIES, "ada").description == said
    kc = delete("c2")
    assert kc.stale_entities == ["ada"] and state.require(ENTITIES, "ada").description == ""


def test_an_entity_named_anew_by_an_update_has_its_vector_embedded_again(tmp_path):
    """An entity's text vector embeds its name (the most frequent surface form): when inserts make another form
    the most frequent, the update embeds the new name, as a build of the same chunks would; an insert that
    leaves the name as it was embeds nothing of the entity."""
    from hygraph.backends.embedder import make_embedder
    from hygraph.indexing.stages import vectors

    embedder = make_embedder(CFG.embedder)
    dims = {"text": embedder.dim, "cleora": 8}

    def ex(cid: str, name: str) -> Extraction:
        return Extraction(cid, entities=[Entity("ada lovelace", name, "NAME", f"{name} in {cid}", 0.5)])

    babbage = Entity("charles babbage", "Charles Babbage", "NAME", "Charles Babbage in c1", 0.5)
    worked = Relation.make("Ada Lovelace", "worked with", "Charles Babbage")
    first = Extraction("c1", entities=[*ex("c1", "Ada Lovelace").entities, babbage], relations=[worked])
    kb = knowledge.merge_extractions([first])
    entities, relations, _ = knowledge.build_rows(kb, ["ada lovelace", "charles babbage"], [],
                                                  embedder.encode(["Ada Lovelace", "Charles Babbage"]))
    store = IndexStore(tmp_path, create=True)
    with store.begin() as w:
        w.replace(CHUNKS, [ChunkRow("c1", "c1", 0, "Ada Lovelace wrote.", 1, "", ("ada lovelace",), (), (),
                                    np.zeros(dims["text"], np.float32))], dims)
        w.replace(ENTITIES, entities, dims)
        w.replace(RELATIONS, relations, dims)
        w.commit(Manifest(dims=dims, graph=True))
    state = IndexState(store.open())

    def insert(*exs: Extraction) -> tuple[knowledge.KnowledgeChange, vectors.VectorDelta]:
        kc, delta = knowledge.update(state, [], list(exs)), vectors.VectorDelta()
        vectors.update(state, embedder, kc, delta)
        return kc, delta

    kc, delta = insert(ex("c2", "Ada Lovelace"))
    assert kc.renamed_entities == [] and "entities" not in delta.upserts and "relations" not in delta.upserts
    # The same id ("ada lovelace"), and a text the model embeds differently (its tokens keep punctuation).
    renamed = "Ada Lovelace!!"
    old_vec, new_vec = embedder.encode(["Ada Lovelace", renamed])
    assert float(old_vec @ new_vec) < 0.999
    kc, delta = insert(ex("c3", renamed), ex("c4", renamed), ex("c5", renamed))
    row = state.require(ENTITIES, "ada lovelace")
    assert kc.renamed_entities == ["ada lovelace"] and row.name == renamed
    ids, vecs, _ = delta.upserts["entities"]
    assert ids == ["ada lovelace"]
    np.testing.assert_allclose(vecs[0], new_vec, atol=1e-5)
    np.testing.assert_allclose(row.embedding, vecs[0])
    # The relation's text names its ends: it is embedded again under the new name, as a build would embed it.
    ids, vecs, _ = delta.upserts["relations"]
    assert ids == [worked.id]
    np.testing.assert_allclose(vecs[0], embedder.encode([f"{renamed} worked with Charles Babbage"])[0], atol=1e-5)
