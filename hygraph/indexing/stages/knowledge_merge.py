"""The knowledge merge as a shuffle: extractions -> keyed records -> one fold per key partition -> ordered tables.

`Knowledge.add` merges extractions in corpus order, and every order it depends on is an order among the records of
one key: an entity keeps the first of its highest-scored records, falls back to an older record's type and
description, counts its surface forms in the order first met; a relation's end adds its entity only if that
entity id was not met before; a relation or hyperedge keeps the first of its highest-scored records. So the merge
can be split by key: `records` turns a block of extractions into records that carry their key and their position
in the whole sequence (extraction ordinal, then place within the extraction) and go to the partition of their key;
`fold` runs the same `Knowledge` methods over one partition's records in position order; `ordered` puts the
partitions' keys back in the order of their first position. Read as a Knowledge (stages/knowledge_tables.py), the
result equals `merge_extractions` over the whole sequence, table for table and in order
(tests/unit/test_knowledge_merge.py).

Records are plain tuples, which Ray pickles between the map and fold tasks (indexing/knowledge_shuffle.py):
converting them to Arrow and back cost more than the merge itself. A fold's result, a few fields per key, is Arrow
(docs/bench/knowledge_shuffle.md).
"""

from __future__ import annotations

import zlib
from itertools import chain
from operator import itemgetter
from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from hygraph.indexing.stages.knowledge import Knowledge
from hygraph.model import Entity, Extraction, Hyperedge, Relation

# A record's position: its extraction's ordinal above, its place among that extraction's records below.
_PLACE_BITS = 24
# Record kinds, applied by the Knowledge method of the same name.
ENTITY, END, RELATION, HYPEREDGE = range(4)

# A record: (kind, key, position, chunk id or None, *what its kind carries):
#   ENTITY (score, name, type, description); END (); RELATION (score, head, relation, tail);
#   HYPEREDGE (score, text, member ids).
Record = tuple
# What a fold hands back per kind, as Arrow tables (compact in the object store and in the assembler, which makes
# one table's Python values at a time): each key's merged fields, its first position and the first position at
# which a chunk supported it (null when none did: a `--kg` fact), which order the Knowledge's tables and support
# maps.
_FIRSTS = [("key", pa.string()), ("first", pa.int64()), ("first_chunked", pa.int64()),
           ("chunks", pa.list_(pa.string()))]
FOLDED_ENTITIES = pa.schema([*_FIRSTS, ("name", pa.string()), ("type", pa.string()), ("description", pa.string()),
                             ("score", pa.float64()), ("forms", pa.list_(pa.string())),
                             ("form_counts", pa.list_(pa.int64()))])
FOLDED_RELATIONS = pa.schema([*_FIRSTS, ("head", pa.string()), ("relation", pa.string()), ("tail", pa.string()),
                              ("score", pa.float64())])
FOLDED_HYPEREDGES = pa.schema([*_FIRSTS, ("text", pa.string()), ("members", pa.list_(pa.string())),
                               ("score", pa.float64())])
Folded = tuple[pa.Table, pa.Table, pa.Table]


def records(extractions: Iterable[tuple[int, Extraction, str | None]], parts: int) -> list[list[Record]]:
    """The records of `(ordinal, extraction, chunk id)` triples, a list per partition. A key's partition is its
    CRC-32 modulo `parts`: the same in every process (Python's `hash` of a str is not)."""
    out: list[list[Record]] = [[] for _ in range(parts)]
    crc32 = zlib.crc32
    for ordinal, ex, chunk in extractions:
        base = ordinal << _PLACE_BITS
        place = 0
        for ent in ex.entities:
            out[crc32(ent.id.encode()) % parts].append(
                (ENTITY, ent.id, base + place, chunk, ent.score, ent.name, ent.type, ent.description))
            place += 1
        for rel in ex.relations:
            if rel.head and rel.tail:  # as Knowledge.add: an end with no letters or digits names no entity
                out[crc32(rel.head.encode()) % parts].append((END, rel.head, base + place, chunk))
                out[crc32(rel.tail.encode()) % parts].append((END, rel.tail, base + place + 1, chunk))
                out[crc32(rel.id.encode()) % parts].append(
                    (RELATION, rel.id, base + place + 2, chunk, rel.score, rel.head, rel.relation, rel.tail))
            place += 3
        for he in ex.hyperedges:
            out[crc32(he.id.encode()) % parts].append(
                (HYPEREDGE, he.id, base + place, chunk, he.score, he.text, he.entities))
            place += 1
        if place >= 1 << _PLACE_BITS:
            raise ValueError(f"extraction {ordinal} has {place:,} records (at most {(1 << _PLACE_BITS) - 1:,})")
    return out


def fold(parts: Iterable[list[Record]]) -> Folded:
    """One partition's records (from every map block) merged by `Knowledge`'s rules: its entities, relations and
    hyperedges (`FOLDED_ENTITIES`, `FOLDED_RELATIONS`, `FOLDED_HYPEREDGES`)."""
    kb = Knowledge()
    first: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})
    chunked: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})
    for r in sorted(chain.from_iterable(parts), key=itemgetter(2)):  # every record has a position of its own
        kind, key, pos, chunk = r[0], r[1], r[2], r[3]
        if kind == ENTITY:
            applied = kb.add_entity(Entity(key, r[5], r[6], r[7], r[4]), chunk)
        elif kind == END:
            applied = kb.add_end(key, chunk)
        elif kind == RELATION:
            applied = kb.add_relation(Relation(key, r[5], r[6], r[7], r[4]), chunk)
        else:
            applied = kb.add_hyperedge(Hyperedge(key, r[5], r[6], r[4]), chunk)
        if not applied:
            continue  # the rules left it out (an end met before, an entity with no id, a one-member hyperedge)
        table = 0 if kind <= END else kind - 1
        first[table].setdefault(key, pos)
        if chunk is not None:
            chunked[table].setdefault(key, pos)
    kb.finish()

    def firsts(table: int, keys: list[str], support: dict[str, set[str]]) -> dict[str, list]:
        return {"key": keys, "first": [first[table][k] for k in keys],
                "first_chunked": [chunked[table].get(k) for k in keys],
                "chunks": [sorted(support.get(k, ())) for k in keys]}

    ents, rels, hes = list(kb.entities.values()), list(kb.relations.values()), list(kb.hyperedges.values())
    forms = [kb.surface_forms[e.id] for e in ents]
    return (pa.table({**firsts(0, [e.id for e in ents], kb.entity_chunks), "name": [e.name for e in ents],
                      "type": [e.type for e in ents], "description": [e.description for e in ents],
                      "score": [float(e.score) for e in ents], "forms": [list(f) for f in forms],
                      "form_counts": [list(f.values()) for f in forms]}, schema=FOLDED_ENTITIES),
            pa.table({**firsts(1, [r.id for r in rels], kb.relation_chunks), "head": [r.head for r in rels],
                      "relation": [r.relation for r in rels], "tail": [r.tail for r in rels],
                      "score": [float(r.score) for r in rels]}, schema=FOLDED_RELATIONS),
            pa.table({**firsts(2, [h.id for h in hes], kb.hyperedge_chunks), "text": [h.text for h in hes],
                      "members": [list(h.entities) for h in hes], "score": [float(h.score) for h in hes]},
                     schema=FOLDED_HYPEREDGES))


def ordered(folds: Iterable[Folded]) -> Folded:
    """The partitions' folds as one table per kind, its rows in the order of their keys' first positions: the order
    of the sequential merge's tables (stages/knowledge_tables.py reads them as the build's knowledge)."""
    folded = list(folds)
    out = []
    for table, schema in enumerate((FOLDED_ENTITIES, FOLDED_RELATIONS, FOLDED_HYPEREDGES)):
        t = pa.concat_tables([f[table] for f in folded]) if folded else schema.empty_table()
        # A position is one record's: no ties. One chunk per column: the readers use its buffers as they are.
        out.append(t.take(pc.sort_indices(t.column("first"))).combine_chunks())
    return out[0], out[1], out[2]
