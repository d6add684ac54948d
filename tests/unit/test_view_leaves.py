"""Membership of layer-0 nodes under a summary, read through the parents artifact (store/view_loader.py)."""

from __future__ import annotations

from typing import Any

from hygraph.store.view_loader import Parents


class Rows:
    """The part of a Table the parents map reads: `locate(key)` -> (segment, row), `segment.column(c)[row]`."""

    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        self.rows = rows
        self.reads = 0

    def locate(self, key: str) -> tuple["Rows.Segment", int] | None:
        self.reads += 1
        return (Rows.Segment(self.rows[key]), 0) if key in self.rows else None

    class Segment:
        def __init__(self, row: dict[str, Any]) -> None:
            self.row = row

        def column(self, name: str) -> list[Any]:
            return [self.row[name]]


def parents_of(**rows: tuple[str, ...]) -> Rows:
    return Rows({node.replace("_", ":"): {"summaries": tuple(ps)} for node, ps in rows.items()})


def test_ancestors_follow_every_parent_up_to_the_top() -> None:
    table = parents_of(c1=("L1:0",), e=("L1:0", "L1:1"), L1_0=("L2:0",), L1_1=("L2:0", "L2:1"), L2_0=("L3:0",),
                       L2_1=("L3:0",))
    parents = Parents(table)
    assert parents.ancestors("c1") == {"L1:0", "L2:0", "L3:0"}
    assert parents.ancestors("e") == {"L1:0", "L1:1", "L2:0", "L2:1", "L3:0"}
    assert parents.ancestors("orphan") == frozenset()
    reads = table.reads
    assert parents.ancestors("e") == {"L1:0", "L1:1", "L2:0", "L2:1", "L3:0"}
    assert table.reads == reads  # kept: a second question about the same node reads nothing


def test_a_chunk_id_shaped_like_a_summary_id_cannot_loop() -> None:
    # Document "L2" has chunk "L2:0" under summary L1:0, whose parent is the summary "L2:0": the parents
    # artifact holds one row for both, so following it blindly would go L1:0 -> L2:0 -> L1:0 -> ...
    table = parents_of(c1=("L1:0",), L1_0=("L2:0",), L2_0=("L1:0", "L3:0"))
    parents = Parents(table)
    assert parents.ancestors("c1") == {"L1:0", "L2:0", "L3:0"}
    assert parents.ancestors("L2:0") == {"L1:0", "L2:0", "L3:0"}  # as a layer-0 chunk
