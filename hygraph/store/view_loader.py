"""A version -> the IndexView that retrieval strategies read: read-only mappings over its mapped segments.

Lookups copy nothing into the process: each decodes one value from the memory-mapped columns,
so Retriever replicas on one node share the version's pages. A summary's leaves are derived from
its children on demand (iterated in sorted order, tested with `in` by walking up its parents),
so no version stores the large leaf lists of the upper layers.

Two structures are whole-collection by nature and are derived from a version rather than stored
with it: the BM25 indexes (corpus statistics span every document; the stored rows are per document
so that an update writes only its own) and the hybrid graph with its PageRank walk (a power
iteration touches every node). The first reader on a node derives them, in Arrow and numpy over the
mapped columns, and writes them as arrays that every reader then maps (store/derived.py), so a
node's replicas share them too. Where the node holds an earlier version's files and the version only added
segments to that version's (an insert, an update, a delete), they are patched from those files at the cost
of the change (store/delta.py) rather than derived from every row. The load's temporaries are handed back
to the operating system once a view is built (`release_freed_memory`): Arrow's allocator and glibc's
otherwise keep the freed pages, and a replica would stay at its load peak (tens of MiB per version swap).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import heapq
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, Mapping, Sequence, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from hygraph.core.graph import HybridGraph
from hygraph.core.lexical import LexicalIndex
from hygraph.core.ppr import Walk, transition
from hygraph.core.retrieval.propagation import EDGE_WEIGHTS, SUBJECT_WEIGHT, subject_pairs
from hygraph.core.retrieval.view import IndexView
from hygraph.errors import StoreError
from hygraph.model import SummaryNode
from hygraph.store.artifacts import (CHUNKS, DOCUMENTS, ENTITIES, GRAPH, HYPEREDGES, LEXICAL_CHUNKS, LEXICAL_ENTITIES,
                                     NODE_CHUNK, NODE_ENTITY, NODE_HYPEREDGE, PARENTS, RELATIONS, SUMMARIES, TERMS,
                                     Artifact, PostingsRow)
from hygraph.store import delta, derived
from hygraph.store.table import Table
from hygraph.store.versions import Version

V = TypeVar("V")
log = logging.getLogger(__name__)


class _Keyed(Mapping[str, V], Generic[V]):
    """A read-only mapping over an artifact's keys; subclasses say what a key's value is."""

    table: Table[Any]

    def __contains__(self, key: object) -> bool:
        return key in self.table

    def __len__(self) -> int:
        return len(self.table)

    def __iter__(self) -> Iterator[str]:
        return self.table.ids()


class ColumnMap(_Keyed[V]):
    """One column of an artifact, by key."""

    def __init__(self, table: Table[Any], column: str) -> None:
        self.table, self.column = table, column

    def __getitem__(self, key: str) -> V:
        return self.table.value(key, self.column)

    def get(self, key: str, default: Any = None) -> Any:
        return self.table.value_or(key, self.column, default) if isinstance(key, str) else default

    def get_many(self, keys: Sequence[str], default: Any = None) -> list[Any]:
        """`get` of each key, read together (core/retrieval/view.py's `read_many`)."""
        return self.table.values_or(keys, self.column, default)


class RowMap(_Keyed[V]):
    """Several columns of an artifact, by key, made into one value."""

    def __init__(self, table: Table[Any], columns: tuple[str, ...], make: Callable[..., V]) -> None:
        self.table, self.columns, self.make = table, columns, make

    def __getitem__(self, key: str) -> V:
        found = self.table.locate(key)
        if found is None:
            raise KeyError(key)
        seg, row = found
        return self.make(*(seg.column(c)[row] for c in self.columns))


class Parents:
    """Which summaries list a node, read through the parents artifact; the answers are kept (they never change
    within a version), up to a bound."""

    LIMIT = 200_000

    def __init__(self, table: Table[Any]) -> None:
        self.table = table
        self.known: dict[str, tuple[str, ...]] = {}
        self.above: dict[tuple[str, int], frozenset[str]] = {}

    def __call__(self, node: str) -> tuple[str, ...]:
        got = self.known.get(node)
        if got is None:
            found = self.table.locate(node)
            got = found[0].column("summaries")[found[1]] if found is not None else ()
            if len(self.known) >= self.LIMIT:
                self.known.clear()
            self.known[node] = got
        return got

    def ancestors(self, node: str, layer: int = 0) -> frozenset[str]:
        """Every summary above `node` of `layer`, kept like the parents: a node's ancestors are asked for by
        every summary a query retrieved, and a summary's by every node below it. Only parents of a higher
        layer are followed, so the walk ends even where a chunk id has the form of a summary id."""
        got = self.above.get((node, layer))
        if got is None:
            up = [(p, SummaryNode.layer_of(p)) for p in self(node)]
            got = frozenset(a for p, at in up if at > layer for a in (p, *self.ancestors(p, at)))
            if len(self.above) >= self.LIMIT:
                self.above.clear()
            self.above[(node, layer)] = got
        return got


class Leaves:
    """The layer-0 leaves of one summary: sorted(children's leaves ∪ its extra leaves)."""

    def __init__(self, summaries: Table[Any], parents: Parents, sid: str, layer: int) -> None:
        self.summaries, self.parents, self.sid, self.layer = summaries, parents, sid, layer

    def __iter__(self) -> Iterator[str]:
        last = None
        for leaf in self._merged(self.sid, self.layer):
            if leaf != last:
                yield leaf
                last = leaf

    def _merged(self, sid: str, layer: int) -> Iterator[str]:
        children = self.summaries.value(sid, "children")
        extra = self.summaries.value(sid, "extra_leaves")
        if layer == 1:
            return iter(sorted({*children, *extra}))
        # Children are summaries, usually one layer down; Leiden attachment (HyGRAG §3.4) may hang a new
        # layer-1 summary under a higher one, so each child's layer is read from its id.
        return heapq.merge(*(Leaves(self.summaries, self.parents, c, SummaryNode.layer_of(c)) for c in children),
                           iter(sorted(extra)))

    def __contains__(self, node: object) -> bool:
        """Whether `node` (a layer-0 id) is under this summary: whether this summary is among its ancestors."""
        return isinstance(node, str) and self.sid in self.parents.ancestors(node)


class LeavesMap(_Keyed[Leaves]):
    """Each summary's layer-0 leaves, by summary id."""

    def __init__(self, summaries: Table[Any], parents: Parents) -> None:
        self.table, self.parents = summaries, parents

    def __getitem__(self, sid: str) -> Leaves:
        return Leaves(self.table, self.parents, sid, self.table.value(sid, "layer"))


class AncestorsMap(_Keyed[frozenset]):
    """Each layer-0 node's summaries of every layer above it, by node id (the inverse of `LeavesMap`)."""

    def __init__(self, parents: Parents) -> None:
        self.table, self.parents = parents.table, parents

    def __getitem__(self, node: str) -> frozenset:
        got = self.get(node)
        if got is None:
            raise KeyError(node)
        return got

    def get(self, node: str, default: Any = None) -> Any:
        got = self.parents.ancestors(node) if isinstance(node, str) else None
        return got or default  # a node no summary lists has no entry


def _col(version: Version, artifact: Artifact[Any], column: str) -> ColumnMap[Any]:
    return ColumnMap(version.table(artifact), column)


def _arrays(version: Version, artifact: Artifact[Any], columns: Sequence[str],
            rows: list[np.ndarray] | None = None) -> list[pa.Array]:
    """Whole columns of the live rows, one array each (a whole-collection read). With `rows`, where each row
    comes from is appended to it: `delta.provenance` of its segment's position and its row there."""
    return table_arrays(version.table(artifact), artifact.schema(version.manifest.dims), columns, rows)


def table_arrays(table: Table[Any], schema: pa.Schema, columns: Sequence[str],
                 rows: list[np.ndarray] | None = None) -> list[pa.Array]:
    batches = list(table.batches_at(columns))
    if rows is not None:
        rows.append(np.concatenate([delta.provenance(at, start, b.num_rows) for at, start, b in batches]
                                   or [np.zeros(0, np.int64)]))
    return [pa.chunked_array([b.column(i) for _, _, b in batches], schema.field(name).type).combine_chunks()
            for i, name in enumerate(columns)]


def _lengths(lists: pa.Array) -> np.ndarray:
    """Each row's list length, from the offsets buffer (large lists: int64), with no copy."""
    offsets = np.frombuffer(lists.buffers()[1], dtype=np.int64)[lists.offset:lists.offset + len(lists) + 1]
    return np.diff(offsets)


def _numbers(array: pa.Array, dtype: type) -> np.ndarray:
    """A primitive array without nulls: a view of its data buffer."""
    return np.frombuffer(array.buffers()[1], dtype=dtype)[array.offset:array.offset + len(array)]


def lexical_index(version: Version, artifact: Artifact[PostingsRow], rows: list[np.ndarray] | None = None
                  ) -> LexicalIndex:
    """The BM25 index of the stored postings: terms numbered in first-seen order over the rows, as
    core.lexical.build numbers them, so scores equal those of a build over the same documents."""
    ids, terms, counts = _arrays(version, artifact, ("id", "terms", "counts"), rows)
    encoded = pc.dictionary_encode(terms.flatten())
    indptr = np.concatenate([[0], np.cumsum(_lengths(terms), dtype=np.int64)])
    # By document as stored, then by term (CSC, with each term's documents in order) as scoring reads it.
    codes = _numbers(encoded.indices, encoded.indices.type.to_pandas_dtype())
    by_document = sp.csr_matrix((_numbers(counts.flatten(), np.int64).astype(np.float32), codes, indptr),
                                shape=(len(ids), len(encoded.dictionary)))
    return LexicalIndex(tuple(ids.to_pylist()), tuple(encoded.dictionary.to_pylist()), by_document.tocsc())


def _positions(values: pa.Array, nodes: pa.Array, what: str) -> np.ndarray:
    found = pc.index_in(values, value_set=nodes)
    if found.null_count:  # the graph stage writes both ends of every edge; a miss is a damaged version
        raise StoreError(f"{what} names a node the graph artifact does not hold")
    return _numbers(found, found.type.to_pandas_dtype()).astype(np.int64)


def _graph(version: Version, rows: list[np.ndarray] | None = None) -> tuple[HybridGraph, pa.Array]:
    """The hybrid graph of the stored neighbour lists, nodes ordered as a build orders them (chunks, then
    entities and hyperedges sorted by id), with its relations; and its node ids as one Arrow array."""
    ids, kinds, neighbours = _arrays(version, GRAPH, ("id", "kind", "neighbours"))
    node_ids = np.asarray(ids.to_pylist(), dtype=object)
    kind = _numbers(kinds, np.int64)
    chunk_ids = list(node_ids[kind == NODE_CHUNK])
    entity_ids = sorted(node_ids[kind == NODE_ENTITY])
    hyperedge_ids = sorted(node_ids[kind == NODE_HYPEREDGE])
    nodes = pa.array(chunk_ids + entity_ids + hyperedge_ids, pa.large_string())
    src = np.repeat(_positions(ids, nodes, "a graph row"), _lengths(neighbours))
    dst = _positions(neighbours.flatten(), nodes, "a neighbour list")
    if rows is not None:  # each node's list length, and whether the lists are symmetric as a multiset
        rows.append(np.bincount(src, minlength=len(nodes)) if len(nodes) else np.zeros(0, np.int64))
        rows.append(np.array([delta.mirrored(src, dst, len(nodes))], np.int64))
    rel_ids, heads, tails = _arrays(version, RELATIONS, ("id", "head", "tail"), rows)
    return HybridGraph.from_arrays({
        "chunk_ids": chunk_ids, "entity_ids": entity_ids, "hyperedge_ids": hyperedge_ids, "edge_src": src,
        "edge_dst": dst, "relation_ids": rel_ids.to_pylist(),
        "relation_heads": _positions(heads, nodes, "a relation head"),
        "relation_tails": _positions(tails, nodes, "a relation tail")}), nodes


def _graph_score(version: Version, nodes: pa.Array) -> np.ndarray:
    """Each node's extraction score (IndexView.graph_score): a node with no entity or hyperedge row (a chunk, a fact's
    member that is no entity of the index) scores 0, and a row that is no node (which the graph's edges cannot
    reach) is left out, as store/delta.py's `_scores` leaves it."""
    score = np.zeros(len(nodes), np.float64)
    for artifact in (ENTITIES, HYPEREDGES):
        if not version.has(artifact):
            continue
        ids, scores = _arrays(version, artifact, ("id", "score"))
        at = pc.index_in(ids, value_set=nodes)
        found = at.is_valid()
        score[_numbers(at.filter(found), at.type.to_pandas_dtype())] = _numbers(scores.filter(found), np.float64)
    return score


def _libc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None  # glibc only
    except (OSError, AttributeError):
        return None


_TRIM = _libc_trim()


def release_freed_memory() -> None:
    """Return memory freed since the last call to the operating system: Arrow's pool keeps freed blocks
    for reuse and glibc keeps freed heap pages. Called after a version's view is built and after the
    previous view is dropped, so neither the load's temporaries nor an old version stay resident.

    No `gc.collect()`: views hold no reference cycles, so reference counting frees them, and a full
    collection of a replica's heap holds the GIL for 0.15-0.4 s (measured at 6k passages on a busy node),
    which requests in flight would wait out. Both calls here take well under a millisecond."""
    pa.default_memory_pool().release_unused()
    if _TRIM is not None:
        _TRIM(0)


@dataclass
class Structures:
    """What a version's view derives from all of its rows."""

    chunk_lexical: LexicalIndex | None = None
    entity_lexical: LexicalIndex | None = None
    graph: HybridGraph | None = None
    walk: Walk | None = None
    graph_score: np.ndarray | None = None  # IndexView.graph_score
    # What store/delta.py patches a later version's structures from: where each lexical row and relation
    # comes from (`delta.provenance`), whether the stored neighbour lists are symmetric (then the adjacency
    # equals them), and the (chunk, entity) edges the walk weighs as subject edges.
    rows: dict[str, np.ndarray] = field(default_factory=dict)
    symmetric: bool = False
    subject: np.ndarray | None = None


def _derive(version: Version) -> Structures:
    out = Structures()
    for name, artifact in (("chunk_lexical", LEXICAL_CHUNKS), ("entity_lexical", LEXICAL_ENTITIES)):
        if version.has(artifact) and (artifact is LEXICAL_CHUNKS or version.has(ENTITIES)):
            rows: list[np.ndarray] = []
            setattr(out, name, lexical_index(version, artifact, rows))
            out.rows[name] = rows[0]
    if version.has(ENTITIES):
        rows = []
        g, nodes = _graph(version, rows)
        out.graph, out.graph_score = g, _graph_score(version, nodes)
        lengths, mirrored = rows[0], bool(rows[1][0])
        out.rows["relations"] = rows[2]
        # Lists that are a multiset equal to their mirror and as long as each node's adjacency row hold no repeat,
        # no self-loop and no one-way edge: then each list is the node's adjacency row, which `delta` relies on.
        out.symmetric = mirrored and np.array_equal(lengths, np.diff(g.adjacency.indptr))
        pairs = subject_pairs(g, _col(version, CHUNKS, "doc_id"), _col(version, DOCUMENTS, "title"))
        out.walk = transition(g, EDGE_WEIGHTS, pairs, SUBJECT_WEIGHT)
        # Only pairs joined by an edge weigh anything.
        on_edge = np.asarray(g.adjacency[pairs[:, 0], pairs[:, 1]]).ravel() != 0 if len(pairs) else np.zeros(0, bool)
        out.subject = pairs[on_edge]
    return out


def _write_structures(directory: Path, got: Structures, tables: Mapping[str, Sequence[str]]) -> None:
    """The structures' files, with what `delta.patch` needs to patch a later version's from them; `tables`:
    the segments of each artifact the structures were derived from."""
    arrays: dict[str, np.ndarray] = {}
    strings: dict[str, Sequence[str]] = {}
    for name, rows in got.rows.items():
        arrays[f"{name}.rows"] = rows
    for name, lex in (("chunk_lexical", got.chunk_lexical), ("entity_lexical", got.entity_lexical)):
        if lex is not None:
            arrays.update(_sparse(name, lex.postings))
            arrays[f"{name}.params"] = np.array([lex.k1, lex.b], dtype=np.float64)
            strings[f"{name}.ids"], strings[f"{name}.terms"] = lex.ids, lex.terms
    if got.graph is not None and got.walk is not None:
        g = got.graph
        arrays.update(_sparse("graph.adjacency", g.adjacency))
        arrays["graph.sizes"] = np.array([len(g.chunk_ids), len(g.entity_ids), len(g.hyperedge_ids)], np.int64)
        arrays["graph.relation_heads"], arrays["graph.relation_tails"] = g.relation_heads, g.relation_tails
        arrays.update(_sparse("walk", got.walk.matrix))
        arrays["walk.dangling"] = got.walk.dangling
        arrays["graph.symmetric"] = np.array([got.symmetric], np.int64)
        arrays["graph.score"] = got.graph_score
        if got.subject is not None:
            arrays["walk.subject"] = got.subject
        strings["graph.nodes"], strings["graph.relations"] = g.node_ids, g.relation_ids
    derived.write(directory, arrays, strings, indexed=("chunk_lexical.terms", "entity_lexical.terms", "graph.nodes"))
    delta.write_tables(directory, tables)


def _sparse(name: str, matrix: sp.csr_matrix | sp.csc_matrix) -> dict[str, np.ndarray]:
    return {f"{name}.data": matrix.data, f"{name}.indices": matrix.indices, f"{name}.indptr": matrix.indptr,
            f"{name}.shape": np.array(matrix.shape, dtype=np.int64)}


def _mapped_sparse(d: derived.Derived, name: str, kind: type[sp.csr_matrix] | type[sp.csc_matrix]) -> Any:
    # The index arrays were written with the dtype scipy chose for them, so it keeps the mapped arrays (no copy).
    shape = tuple(int(n) for n in d.array(f"{name}.shape"))
    return kind((d.array(f"{name}.data"), d.array(f"{name}.indices"), d.array(f"{name}.indptr")), shape=shape)


def _mapped_lexical(d: derived.Derived, name: str) -> LexicalIndex:
    k1, b = (float(x) for x in d.array(f"{name}.params"))
    terms = d.index(f"{name}.terms")
    return LexicalIndex(d.strings(f"{name}.ids"), terms.strings, _mapped_sparse(d, name, sp.csc_matrix), k1, b,
                        lookup=terms)


def _read_structures(d: derived.Derived) -> Structures:
    """What `_write_structures` wrote."""
    out = Structures()
    if d.has("chunk_lexical.shape"):
        out.chunk_lexical = _mapped_lexical(d, "chunk_lexical")
    if d.has("entity_lexical.shape"):
        out.entity_lexical = _mapped_lexical(d, "entity_lexical")
    if d.has("graph.nodes"):
        nodes = d.index("graph.nodes")
        n_chunks, n_entities, n_hyperedges = (int(n) for n in d.array("graph.sizes"))
        first_hyperedge = n_chunks + n_entities
        out.graph = HybridGraph(
            chunk_ids=nodes.strings.part(0, n_chunks), entity_ids=nodes.strings.part(n_chunks, first_hyperedge),
            hyperedge_ids=nodes.strings.part(first_hyperedge, first_hyperedge + n_hyperedges),
            adjacency=_mapped_sparse(d, "graph.adjacency", sp.csr_matrix),
            relation_ids=d.strings("graph.relations"), relation_heads=d.array("graph.relation_heads"),
            relation_tails=d.array("graph.relation_tails"), lookup=nodes)
        out.walk = Walk(_mapped_sparse(d, "walk", sp.csc_matrix), d.array("walk.dangling"))
        out.graph_score = d.array("graph.score")
    return out


def _compute(version: Version, directory: Path) -> None:
    """The version's structure files: patched from those of an earlier version of the index on this node
    where that is known to give the same structures (store/delta.py), else derived from every row."""
    tables = {name: list(ref.segments) for name, ref in version.manifest.tables.items()}
    got = delta.patched(version, version.store.derived_dir)
    if got is not None:
        arrays, strings = got
        derived.write(directory, arrays, strings)
        delta.write_tables(directory, tables)
        log.debug("version %d: structures patched from an earlier version's", version.version)
        return
    log.debug("version %d: structures derived from every row", version.version)
    _write_structures(directory, _derive(version), tables)


_unshared_warned: set[str] = set()


def structures(version: Version) -> Structures:
    """The version's derived structures, mapped from the node's shared copy (made here if no reader has made it
    yet), or kept in this process where the index directory cannot be written."""
    store = version.store
    try:
        d = derived.shared(store.derived_dir, derived.directory_name(store.uid, version.version),
                           lambda directory: _compute(version, directory))
        got = _read_structures(d)
    except (OSError, StoreError) as exc:  # unwritable, or removed by a reader of a newer version meanwhile
        if store.uri not in _unshared_warned:
            _unshared_warned.add(store.uri)
            log.warning("cannot share the read structures of version %d under %s (%s): this process keeps "
                        "its own copy", version.version, store.derived_dir, exc)
        return _derive(version)
    derived.remove(store.derived_dir, lambda uid, v, fmt: uid != store.uid or v >= version.version)
    return got


def load_view(version: Version) -> IndexView:
    view = _load_view(version)
    release_freed_memory()
    return view


def _load_view(version: Version) -> IndexView:
    view = IndexView(version=version.version, chunk_text=_col(version, CHUNKS, "text"),
                     chunk_doc=_col(version, CHUNKS, "doc_id"), titles=_col(version, DOCUMENTS, "title"),
                     doc_chunks=_col(version, DOCUMENTS, "chunks"),
                     doc_metadata=_col(version, DOCUMENTS, "metadata"),
                     chunk_embedding=_col(version, CHUNKS, "embedding"))
    got = structures(version)
    view.chunk_lexical, view.entity_lexical, view.graph, view.walk, view.graph_score = (
        got.chunk_lexical, got.entity_lexical, got.graph, got.walk, got.graph_score)
    if not version.has(ENTITIES):
        return view
    view.entity_name = _col(version, ENTITIES, "name")
    view.entity_desc = _col(version, ENTITIES, "description")
    view.entity_score = _col(version, ENTITIES, "score")
    view.entity_embedding = _col(version, ENTITIES, "embedding")
    view.entity_chunks = _col(version, ENTITIES, "chunks")
    view.entity_relations = _col(version, ENTITIES, "relations")
    view.entity_hyperedges = _col(version, ENTITIES, "hyperedges")
    view.relations = RowMap(version.table(RELATIONS), ("head", "relation", "tail", "score"),
                            lambda h, r, t, s: (h, r, t, s))
    view.relation_chunks = _col(version, RELATIONS, "chunks")
    view.hyperedge_text = _col(version, HYPEREDGES, "text")
    view.hyperedge_entities = _col(version, HYPEREDGES, "entities")
    view.hyperedge_score = _col(version, HYPEREDGES, "score")
    view.hyperedge_chunks = _col(version, HYPEREDGES, "chunks")
    if version.has(SUMMARIES):
        view.summary_text = _col(version, SUMMARIES, "text")
        view.summary_layer = _col(version, SUMMARIES, "layer")
        view.summary_children = _col(version, SUMMARIES, "children")
        parents = Parents(version.table(PARENTS))
        view.summary_leaves = LeavesMap(version.table(SUMMARIES), parents)
        view.node_summaries = AncestorsMap(parents)
    hyp = version.manifest.hyperbolic
    if hyp is not None and version.has(TERMS):
        view.hyper_neighbours = _col(version, TERMS, "neighbours")
        view.hyper_dim, view.hyper_seed = hyp.dim, hyp.seed
    return view
