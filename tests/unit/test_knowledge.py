import json

import pytest

from hygraph.errors import InputError
from hygraph.indexing.stages.knowledge import extractions_from_triples, load_kg, merge_extractions
from hygraph.model import Chunk, Entity, Extraction, Hyperedge, Relation, TripleRecord


def test_merge_dedupes_and_keeps_provenance():
    a = Extraction("d1:0", entities=[Entity("lothair ii", "Lothair II", score=0.9)],
                   relations=[Relation.make("Teutberga", "married", "Lothair II")],
                   hyperedges=[Hyperedge.make("Teutberga married Lothair II.", ["Teutberga", "Lothair II"])])
    b = Extraction("d2:0", entities=[Entity("lothair ii", "LOTHAIR II", score=0.5),
                                     Entity("lothair ii", "Lothair II", score=0.4)],
                   relations=[Relation.make("teutberga", "married", "lothair ii")])
    kb = merge_extractions([a, b])
    assert kb.entities["lothair ii"].name == "Lothair II"  # most frequent surface form
    assert kb.entities["lothair ii"].score == 0.9
    assert kb.entity_chunks["lothair ii"] == {"d1:0", "d2:0"}
    [rid] = kb.relations
    assert kb.relation_chunks[rid] == {"d1:0", "d2:0"}
    assert "teutberga" in kb.entities  # a relation end becomes an entity


def test_relations_with_an_empty_end_are_dropped():
    kb = merge_extractions([Extraction("d:0", relations=[Relation.make("?", "is", "Paris"),
                                                         Relation.make("Paris", "in", "France")])])
    assert [r.head for r in kb.relations.values()] == ["paris"]
    assert "" not in kb.entities


def test_triples_map_onto_chunks_and_make_hyperedges():
    chunks = [Chunk("p:0", "p", 0, "Journal of Mathematical Physics is published by American Institute of Physics. "
                                   "It began in January 1960.", 10)]
    rec = TripleRecord("p", (("Journal of Mathematical Physics", "published by", "American Institute of Physics"),),
                       ("January 1960",))
    [ex] = extractions_from_triples(chunks, [rec])
    assert {e.id for e in ex.entities} == {"journal of mathematical physics", "american institute of physics",
                                           "january 1960"}
    assert ex.relations[0].tail == "american institute of physics"
    assert len(ex.hyperedges) == 1 and len(ex.hyperedges[0].entities) == 2


def test_kg_import_validates_lines(tmp_path):
    good = tmp_path / "kg.jsonl"
    good.write_text(json.dumps(["Paris", "capital of", "France"]) + "\n"
                    + json.dumps({"head": "France", "relation": "in", "tail": "Europe"}) + "\n")
    ex = load_kg(good)
    assert len(ex.relations) == 2 and {e.id for e in ex.entities} == {"paris", "france", "europe"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(["Paris", "capital of"]) + "\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:1"):
        load_kg(bad)
    empty_end = tmp_path / "e.jsonl"
    empty_end.write_text(json.dumps(["?", "is", "France"]) + "\n")
    with pytest.raises(InputError, match="letters or digits"):
        load_kg(empty_end)


def test_remove_chunks_drops_only_what_lost_all_support():
    from hygraph.model import Entity, Extraction, Hyperedge, Relation
    from hygraph.indexing.stages.knowledge import merge_extractions

    a = Extraction("c1", entities=[Entity("ada", "Ada"), Entity("bob", "Bob")],
                   relations=[Relation.make("Ada", "knows", "Bob")],
                   hyperedges=[Hyperedge.make("Ada met Bob and Cy.", ["Ada", "Bob", "Cy"])])
    b = Extraction("c2", entities=[Entity("bob", "Bob"), Entity("dan", "Dan")],
                   relations=[Relation.make("Bob", "likes", "Dan")])
    kb = merge_extractions([a, b])
    ents, rels, hes = kb.remove_chunks(["c1"])
    # Bob is still mentioned by c2; Cy only by c1's hyperedge; Ada only by c1.
    assert ents == {"ada"} and len(rels) == 1 and len(hes) == 1
    assert set(kb.entities) == {"bob", "dan"} and kb.entity_chunks["bob"] == {"c2"}
    assert [r.text for r in kb.relations.values()] == ["bob likes dan"]
    assert kb.remove_chunks(["c1"]) == (set(), set(), set())
