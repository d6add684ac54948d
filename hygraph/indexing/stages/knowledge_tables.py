"""The merged knowledge as the shuffle's Arrow tables, read through the mappings `Knowledge` offers.

The stages after the merge (hybrid graph, knowledge-text embedding, hierarchy, the snapshot's rows) read the
knowledge by key: an entity's fields, a relation's ends, the chunks that support a key. Made into `Knowledge`'s
Python objects by a serial combine, that was about 1.25 GiB of the assembling actor at 50k passages, and 12.6 s.
Here each table stays Arrow, in the order `Knowledge` gives its tables, and a row's Python values are made when
they are asked for. What is held per key as Python objects is its string and its row number in one dict; the
string is shared with the hybrid graph's id lists, and a relation's ends and a hyperedge's members are handed out
as the entity table's own strings. Supporting chunks are chunk ordinals, named by the build's own chunk ids.
"""

from __future__ import annotations

from array import array
from typing import Callable, Iterator, Mapping, Sequence, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hygraph.indexing.stages.knowledge_merge import Folded
from hygraph.model import Entity, Hyperedge, Relation

V = TypeVar("V")


class _Rows(Mapping[str, V]):
    """Keys, in `order`, whose values are made from their rows when asked; `member` (by row) leaves out the
    table's keys that this mapping does not hold (a support map holds only the keys some chunk supports)."""

    def __init__(self, order: Sequence[str], row_of: dict[str, int], make: Callable[[int], V],
                 member: np.ndarray | None = None) -> None:
        self._order, self._row_of, self._make, self._member = order, row_of, make, member

    def _row(self, key: str) -> int | None:
        row = self._row_of.get(key)
        if row is None or (self._member is not None and not self._member[row]):
            return None
        return row

    def __getitem__(self, key: str) -> V:
        row = self._row(key)
        if row is None:
            raise KeyError(key)
        return self._make(row)

    def __contains__(self, key: object) -> bool:  # without making the value, as Mapping's would
        return isinstance(key, str) and self._row(key) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


def _array(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _ints(values: np.ndarray | pa.Array, code: str = "i") -> array:
    """Numbers that a Python loop reads one at a time (a numpy scalar costs several times more; a list of ints is
    36 bytes an entry): 32-bit, or `code` "q" for byte offsets into a column's strings."""
    if isinstance(values, pa.Array):
        values = values.to_numpy()
    out = array(code)
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64 if code == "q" else np.int32).tobytes())
    return out


class _Strings:
    """A string array's values by row, decoded from its buffers when asked (an Arrow scalar costs three times more,
    and a list of Python strings is what this module avoids holding)."""

    def __init__(self, arr: pa.Array) -> None:
        if arr.null_count:
            raise ValueError("a knowledge table's string column holds nulls")
        arr = arr.cast(pa.large_string())
        self._at = _ints(np.frombuffer(arr.buffers()[1], np.int64)[arr.offset:arr.offset + len(arr) + 1], "q")
        data = arr.buffers()[2]
        self._data = memoryview(data) if data is not None else memoryview(b"")

    def __getitem__(self, row: int) -> str:
        at = self._at
        return str(self._data[at[row]:at[row + 1]], "utf-8")


class _Lists:
    """A list array's rows as index ranges into its values."""

    def __init__(self, arr: pa.Array) -> None:
        self.at = _ints(arr.offsets)
        self.values = arr.values

    def range(self, row: int) -> range:
        return range(self.at[row], self.at[row + 1])


class KnowledgeTables:
    """A `KnowledgeView` (stages/knowledge.py) over the folded tables of the knowledge shuffle, in first-position
    order (`knowledge_merge.ordered`). `chunk_ids` are the build's chunks: every chunk a table names is one."""

    def __init__(self, folded: Folded, chunk_ids: Sequence[str]) -> None:
        self.tables = folded
        ents, rels, hes = folded
        chunk_set = pa.array(chunk_ids, pa.string())
        keys = ents.column("key").to_pylist()
        row_of = {k: i for i, k in enumerate(keys)}
        key_set = _array(ents.column("key"))

        def entity_ids(values: pa.Array) -> Callable[[int], str]:
            """The i-th of `values` as the entity table's own string when it is an entity id (relations' ends
            are; a hyperedge's members may not be)."""
            strings, rows = _Strings(values), _ints(pc.index_in(values, value_set=key_set).fill_null(-1))
            return lambda i: keys[rows[i]] if rows[i] >= 0 else strings[i]

        name, typ, description = (_Strings(_array(ents.column(c))) for c in ("name", "type", "description"))
        score = _array(ents.column("score")).to_numpy()
        self.entities: Mapping[str, Entity] = _Rows(keys, row_of, lambda r: Entity(
            keys[r], name[r], typ[r], description[r], float(score[r])))
        forms, counts = _Lists(_array(ents.column("forms"))), _Lists(_array(ents.column("form_counts")))
        form, count = _Strings(forms.values), _ints(counts.values)
        self.surface_forms: Mapping[str, Mapping[str, int]] = _Rows(keys, row_of, lambda r: {
            form[i]: count[j] for i, j in zip(forms.range(r), counts.range(r))})
        self.entity_chunks = _support(ents, keys, row_of, chunk_ids, chunk_set)

        rkeys = rels.column("key").to_pylist()
        rrow = {k: i for i, k in enumerate(rkeys)}
        head, tail = (entity_ids(_array(rels.column(c))) for c in ("head", "tail"))
        relation = _Strings(_array(rels.column("relation")))
        rscore = _array(rels.column("score")).to_numpy()
        self.relations: Mapping[str, Relation] = _Rows(rkeys, rrow, lambda r: Relation(
            rkeys[r], head(r), relation[r], tail(r), float(rscore[r])))
        self.relation_chunks = _support(rels, rkeys, rrow, chunk_ids, chunk_set)

        hkeys = hes.column("key").to_pylist()
        hrow = {k: i for i, k in enumerate(hkeys)}
        text, members = _Strings(_array(hes.column("text"))), _Lists(_array(hes.column("members")))
        member = entity_ids(members.values)
        hscore = _array(hes.column("score")).to_numpy()
        self.hyperedges: Mapping[str, Hyperedge] = _Rows(hkeys, hrow, lambda r: Hyperedge(
            hkeys[r], text[r], tuple(map(member, members.range(r))), float(hscore[r])))
        self.hyperedge_chunks = _support(hes, hkeys, hrow, chunk_ids, chunk_set)


def _support(table: pa.Table, keys: list[str], row_of: dict[str, int], chunk_ids: Sequence[str],
             chunk_set: pa.Array) -> Mapping[str, tuple[str, ...]]:
    """A table's support map: the keys a chunk supports, in the order of the first chunk that supported each (as
    `Knowledge`'s support maps are ordered), each to its chunk ids (sorted, as the fold lists them)."""
    first = _array(table.column("first_chunked")).fill_null(-1).to_numpy()
    supported = np.flatnonzero(first >= 0)
    order = [keys[r] for r in supported[np.argsort(first[supported], kind="stable")].tolist()]
    lists = _Lists(_array(table.column("chunks")))
    ordinals = pc.index_in(lists.values, value_set=chunk_set)
    if ordinals.null_count:
        raise ValueError("the knowledge names a chunk that is not one of the build's")
    chunk = _ints(ordinals)
    at = lists.at
    return _Rows(order, row_of, lambda r: tuple(chunk_ids[chunk[i]] for i in range(at[r], at[r + 1])),
                 member=first >= 0)
