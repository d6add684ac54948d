"""The sharded knowledge merge (records -> fold per partition -> ordered tables), read as the build reads it,
equals the sequential merge, in order."""

import random

import pytest

from hygraph.indexing.stages import knowledge_merge as km
from hygraph.indexing.stages.knowledge import KnowledgeView, merge_extractions
from hygraph.indexing.stages.knowledge_tables import KnowledgeTables
from hygraph.model import Entity, Extraction, Hyperedge, Relation

NAMES = ["Ada", "ADA", "Bob", "bob", "Cy", "Dan", "Eve", "Fay", "?"]


def _extractions(rng: random.Random, n: int) -> list[Extraction]:
    """Few names, few scores: every rule's ties and fallbacks are met (a relation's end before its entity's own
    record, self-loops, ends with no letters, one-member hyperedges, empty types and descriptions)."""
    out = []
    for i in range(n):
        ents = [Entity(name.lower().strip("?"), name, rng.choice(["", "PERSON", "PLACE"]),
                       rng.choice(["", f"said in {i}"]), rng.choice([0.5, 0.7, 0.9]))
                for name in rng.sample(NAMES, rng.randint(0, 4))]
        rels = [Relation.make(rng.choice(NAMES), rng.choice(["knows", "likes"]), rng.choice(NAMES),
                              rng.choice([0.5, 0.9])) for _ in range(rng.randint(0, 4))]
        hes = [Hyperedge.make(f"fact {rng.randint(0, 5)}.", rng.sample(NAMES, rng.randint(1, 3)),
                              rng.choice([0.5, 0.9])) for _ in range(rng.randint(0, 2))]
        out.append(Extraction(f"c{i}", ents, rels, hes))
    return out


def _tables(kb: KnowledgeView) -> list[list]:
    return [list(kb.entities.items()), [(k, sorted(v)) for k, v in kb.entity_chunks.items()],
            [(k, list(v.items())) for k, v in kb.surface_forms.items()],
            list(kb.relations.items()), [(k, sorted(v)) for k, v in kb.relation_chunks.items()],
            list(kb.hyperedges.items()), [(k, sorted(v)) for k, v in kb.hyperedge_chunks.items()]]


def _sharded(extractions: list[Extraction], parts: int, rng: random.Random,
             kg: Extraction | None = None) -> KnowledgeTables:
    triples = [(i, ex, ex.chunk_id) for i, ex in enumerate(extractions)]
    if kg is not None:
        triples.append((len(extractions), kg, None))
    cuts = sorted(rng.sample(range(1, len(triples)), min(3, len(triples) - 1))) if len(triples) > 1 else []
    blocks = [triples[a:b] for a, b in zip([0, *cuts], [*cuts, len(triples)])]
    mapped = [km.records(block, parts) for block in blocks]
    folds = []
    for p in range(parts):
        inputs = [m[p] for m in mapped]
        rng.shuffle(inputs)  # blocks reach a fold in any order
        folds.append(km.fold(inputs))
    rng.shuffle(folds)
    return KnowledgeTables(km.ordered(folds), [ex.chunk_id for ex in extractions])


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("parts", [1, 3, 7])
def test_sharded_merge_equals_the_sequential_merge(seed, parts):
    rng = random.Random(seed)
    extractions = _extractions(rng, 40)
    assert _tables(_sharded(extractions, parts, rng)) == _tables(merge_extractions(extractions))


def test_a_kg_after_the_chunks_is_merged_as_the_build_merges_it():
    rng = random.Random(11)
    extractions = _extractions(rng, 30)
    kg = Extraction("", [Entity("ada", "Ada Lovelace", "NAME", "", 1.0), Entity("zed", "Zed", "NAME")],
                    [Relation.make("Ada", "wrote", "Zed"), Relation.make("Bob", "knows", "Cy")])
    sequential = merge_extractions(extractions)
    sequential.add(kg, chunk_id=None)
    sequential.finish()
    got = _sharded(extractions, 3, rng, kg)
    assert _tables(got) == _tables(sequential)
    assert "zed" in got.entities and "zed" not in got.entity_chunks  # a kg fact is tied to no chunk


def test_an_end_met_before_its_entity_record_adds_it_with_that_chunk_only():
    first = Extraction("c1", relations=[Relation.make("Ada", "knows", "Bob")])
    second = Extraction("c2", entities=[Entity("bob", "Bob", "PERSON", "a friend", 0.9)],
                        relations=[Relation.make("Bob", "likes", "Ada")])
    kb = _sharded([first, second], 2, random.Random(0))
    # The end came first, as an entity of score 1.0 named by its id: the 0.9 record does not replace it, and the
    # surface forms "bob" and "Bob" tie, so the first met names it.
    assert kb.entities["bob"] == Entity("bob", "bob", "", "", 1.0)
    assert kb.entity_chunks["bob"] == ("c1", "c2")
    assert kb.entity_chunks["ada"] == ("c1",)  # met as c2's end again: already known, no support added
    assert list(kb.entities) == ["ada", "bob"]



def test_the_tables_hand_out_the_entity_tables_and_the_builds_own_strings():
    chunk_ids = ["".join(["c", "1"]), "".join(["c", "2"])]  # strings made here, not the extractions' own
    exs = [Extraction("c1", [Entity("ada", "Ada")], [Relation.make("Ada", "knows", "Bob")],
                      [Hyperedge.make("Ada met Bob.", ["Ada", "Bob"])]),
           Extraction("c2", [Entity("bob", "Bob")])]
    mapped = [km.records([(i, ex, ex.chunk_id) for i, ex in enumerate(exs)], 2)]
    kb = KnowledgeTables(km.ordered(km.fold([m[p] for m in mapped]) for p in range(2)), chunk_ids)
    ids = {e: e for e in kb.entities}
    rel = next(iter(kb.relations.values()))
    assert rel.head is ids["ada"] and rel.tail is ids["bob"]
    assert all(m is ids[m] for m in next(iter(kb.hyperedges.values())).entities)
    assert kb.entity_chunks["bob"][0] is chunk_ids[0] and kb.entity_chunks["bob"][1] is chunk_ids[1]
    assert "nobody" not in kb.entities and kb.entities.get("nobody") is None and len(kb.entity_chunks) == 2
    with pytest.raises(KeyError):
        kb.relations["nobody"]


def test_a_chunk_the_build_does_not_have_is_refused():
    mapped = km.records([(0, Extraction("c9", [Entity("ada", "Ada")]), "c9")], 1)
    with pytest.raises(ValueError, match="not one of the build's"):
        KnowledgeTables(km.ordered([km.fold([mapped[0]])]), ["c1"])


def test_no_extractions_read_as_empty_knowledge():
    for folds in ([], [km.fold([[]])]):
        kb = KnowledgeTables(km.ordered(folds), ["c1"])
        assert not kb.entities and not kb.relations and not kb.hyperedges and not kb.entity_chunks
