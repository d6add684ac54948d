"""The hybrid graph in a snapshot: id lists as Parquet tables, edge and relation arrays as npy."""

from __future__ import annotations

import numpy as np

from hygraph.core.graph import HybridGraph
from hygraph.store.snapshot import Snapshot, VersionWriter

_ID_LISTS = ("chunk_ids", "entity_ids", "hyperedge_ids", "relation_ids")
_ARRAYS = ("edge_src", "edge_dst", "relation_heads", "relation_tails")


def write_graph(writer: VersionWriter, graph: HybridGraph) -> None:
    arrays = graph.to_arrays()
    for name in _ID_LISTS:
        writer.write_table(f"graph_{name}", {"id": arrays[name]})
    for name in _ARRAYS:
        writer.write_array(f"graph_{name}", np.asarray(arrays[name]))


def read_graph(snap: Snapshot) -> HybridGraph:
    arrays: dict[str, np.ndarray | list[str]] = {
        name: snap.table(f"graph_{name}").column("id").to_pylist() for name in _ID_LISTS}
    arrays.update({name: np.asarray(snap.array(f"graph_{name}")) for name in _ARRAYS})
    return HybridGraph.from_arrays(arrays)
