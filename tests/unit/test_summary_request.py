"""The summary request of the hierarchy stage: key entities of the leaves and the relations among them."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from hygraph.indexing.stages.hierarchy import summary_request
from hygraph.indexing.stages.hierarchy_layers import EntityNumbers

# Relation id -> (head, phrase, tail, score). A and B are the leaves' key entities, H a hub that
# the leaves mention once; the hub's 500 relations to outside entities must not be read.
RELATIONS = {
    "r_ab": ("A", "founded", "B", 0.9),
    "r_ah": ("A", "is in", "H", 0.8),
    "r_bb": ("B", "merged with", "B", 0.5),  # a self-loop: listed twice under B
    "r_ax": ("A", "met", "X", 0.99),  # X is not a key entity
    **{f"r_h{i}": ("H", "borders", f"Y{i}", 0.7) for i in range(500)},
}


class Source:
    def __init__(self) -> None:
        self.read: list[str] = []
        self.numbers = EntityNumbers()
        self.lists: dict[str, list[str]] = {}
        for rid, (head, _, tail, _) in RELATIONS.items():
            self.lists.setdefault(head, []).append(rid)
            self.lists.setdefault(tail, []).append(rid)

    def node_text(self, node_id: str) -> str:
        return f"text of {node_id}"

    def mentions(self, node_id: str) -> np.ndarray:
        own = () if node_id.startswith("c") else (node_id, node_id)
        chunk = {"c1": ("A", "B"), "c2": ("A", "H"), "c3": ("B",)}.get(node_id, ())
        return self.numbers.of((*own, *chunk))

    def entity_at(self, number: int) -> str:
        return self.numbers.ids[number]

    def entity_relations(self, entity_id: str) -> Sequence[str]:
        return self.lists.get(entity_id, ())

    def relation(self, relation_id: str) -> tuple[str, str, str, float]:
        self.read.append(relation_id)
        return RELATIONS[relation_id]

    def entity_name(self, entity_id: str) -> str:
        return entity_id.lower()


def test_relations_among_key_entities_strongest_first_without_reading_the_hub() -> None:
    src = Source()
    req = summary_request(["c1", "c2", "c3"], ["c1", "c2", "c3"], {}, src)
    # mentions: A 2, B 2, H 1 -> all three are key entities (ties in leaf order)
    assert req.entities == ("a", "b", "h")
    assert req.relations == ("a founded b", "a is in h", "b merged with b")
    # Only relations listed under two key entities (or twice under one) were read.
    assert sorted(set(src.read)) == ["r_ab", "r_ah", "r_bb"]


def test_member_texts_prefer_known_summaries() -> None:
    req = summary_request(["c1", "S1"], ["c1"], {"S1": "summary one"}, Source())
    assert req.member_texts == ("text of c1", "summary one")
