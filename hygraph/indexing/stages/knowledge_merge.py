"""The knowledge merge as a shuffle: extractions -> keyed records -> one fold per key partition -> one Knowledge.

`Knowledge.add` merges extractions in corpus order, and every order it depends on is an order among the records of
one key: an entity keeps the first of its highest-scored records, falls back to an older record's type and
description, counts its surface forms in the order first met; a relation's end adds its entity only if that
entity id was not met before; a relation or hyperedge keeps the first of its highest-scored records. So the merge
can be split by key: `records` turns a block of extractions into records that carry their key and their position
in the whole sequence (extraction ordinal, then place within the extraction) and go to the partition of their key;
`fold` runs the same `Knowledge` methods over one partition's records in position order; `combine` puts the
partitions' keys back in the order of their first position. The result equals `merge_extractions` over the whole
sequence, table for table and in order (tests/unit/test_knowledge_merge.py).

Records and folds are plain tuples, which Ray pickles between the map and fold tasks (indexing/knowledge_shuffle.py):
converting them to Arrow and back cost more than the merge itself (docs/bench/knowledge_shuffle.md).
"""

from __future__ import annotations

import zlib
from collections import Counter
from itertools import chain
from operator import itemgetter
from typing import Iterable


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
# A fold's row of each table: (key, first position, first position a chunk supported it or None (a `--kg` fact),
# sorted chunk ids, *fields):
#   entities (name, type, description, score, surface forms, their counts); relations (head, relation, tail,
#   score); hyperedges (text, member ids, score).
Folded = tuple[list[tuple], list[tuple], list[tuple]]


def records(extractions: Iterable[tuple[int, Extraction, str | None]], parts: int) -> list[list[Record]]:
    """The records of `(ordinal, extraction, chunk id)` triples, a list per partition. A key's partition is its
    CRC-32 modulo `parts`: the same in every process (Python's `hash` of a str is not)."""
    out: list[list[Record]] = [[] for _ in range(parts)]
    crc32 = zlib.crc32
    for ordinal, ex, chunk in extractions:
        base = ordinal << _PLACE_BITS
        place = 0
        for ent in ex.entities:
            if ent.id:
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
            if len(he.entities) >= 2:
                out[crc32(he.id.encode()) % parts].append(
                    (HYPEREDGE, he.id, base + place, chunk, he.score, he.text, he.entities))
            place += 1
        if place >= 1 << _PLACE_BITS:
            raise ValueError(f"extraction {ordinal} has {place:,} records (at most {(1 << _PLACE_BITS) - 1:,})")
    return out


def fold(parts: Iterable[list[Record]]) -> Folded:
    """One partition's records (from every map block) merged by `Knowledge`'s rules: its entities, relations and
    hyperedges (`Folded`)."""
    kb = Knowledge()
    first: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})
    chunked: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})
    for r in sorted(chain.from_iterable(parts), key=itemgetter(2)):  # every record has a position of its own
        kind, key, pos, chunk = r[0], r[1], r[2], r[3]
        if kind == ENTITY:
            kb.add_entity(Entity(key, r[5], r[6], r[7], r[4]), chunk)
        elif kind == END:
            if key in kb.entities:
                continue  # no effect: the entity was met before (Knowledge.add_end)
            kb.add_end(key, chunk)
        elif kind == RELATION:
            kb.add_relation(Relation(key, r[5], r[6], r[7], r[4]), chunk)
        else:
            kb.add_hyperedge(Hyperedge(key, r[5], r[6], r[4]), chunk)
        table = 0 if kind <= END else kind - 1
        first[table].setdefault(key, pos)
        if chunk is not None:
            chunked[table].setdefault(key, pos)
    kb.finish()

    def firsts(table: int, key: str, support: dict[str, set[str]]) -> tuple:
        return key, first[table][key], chunked[table].get(key), tuple(sorted(support.get(key, ())))

    return ([(*firsts(0, e.id, kb.entity_chunks), e.name, e.type, e.description, e.score,
              tuple(kb.surface_forms[e.id]), tuple(kb.surface_forms[e.id].values())) for e in kb.entities.values()],
            [(*firsts(1, r.id, kb.relation_chunks), r.head, r.relation, r.tail, r.score)
             for r in kb.relations.values()],
            [(*firsts(2, h.id, kb.hyperedge_chunks), h.text, h.entities, h.score) for h in kb.hyperedges.values()])


def combine(folds: Iterable[Folded]) -> Knowledge:
    """The partitions' folds as one Knowledge, each table in the order of its keys' first positions (and each
    support map in the order of the first chunk that supported a key), as the sequential merge makes them.

    A chunk id, or an entity id that relations and hyperedges name, is one string object however many times it
    is named (as in the sequential merge, whose records of one extraction share its strings): unpickled, each
    would be a copy of its own, hundreds of MB at 50k passages."""
    folded = list(folds)
    kb = Knowledge()
    same: dict[str, str] = {}
    one = same.setdefault
    for table in range(3):
        rows = sorted(chain.from_iterable(f[table] for f in folded), key=itemgetter(1))
        keys = [r[0] for r in rows]
        for at, r in enumerate(rows):
            key = r[0]
            if table == 0:
                key = keys[at] = one(key, key)
                kb.entities[key] = Entity(key, r[4], r[5], r[6], r[7])
                forms = kb.surface_forms[key] = Counter()
                dict.update(forms, zip(r[8], r[9]))  # as Counter(...), without its per-call type checks
            elif table == 1:
                kb.relations[key] = Relation(key, one(r[4], r[4]), r[5], one(r[6], r[6]), r[7])
            else:
                kb.hyperedges[key] = Hyperedge(key, r[4], tuple(one(m, m) for m in r[5]), r[6])
        support = (kb.entity_chunks, kb.relation_chunks, kb.hyperedge_chunks)[table]
        for at in sorted((at for at, r in enumerate(rows) if r[2] is not None), key=lambda at: rows[at][2]):
            support[keys[at]] = {one(cid, cid) for cid in rows[at][3]}
    return kb
