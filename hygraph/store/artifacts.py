"""Every stored artifact of an index version, declared once: its row type and its columns.

An artifact is a table keyed by the string `id`. A version holds each artifact as an ordered
list of immutable segments (`store/segment.py`), so a new version writes only the rows that
changed. Row types are what the rest of the code reads and writes; `Artifact` maps them to
Arrow columns. Vector columns take their width from the version's manifest (`dims`).

Ordering conventions the retrieval modes rely on (the build and an update keep them):
sorted supporting-chunk lists, entity `relations` in relation creation order (a self-loop
relation listed twice, once per end), entity `hyperedges` sorted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Generic, Mapping, TypeVar

import numpy as np
import pyarrow as pa

from hygraph.errors import StoreError


class Kind(Enum):
    STR = "str"
    INT = "int"
    FLOAT = "float"
    STRS = "strs"  # list of strings, read as a tuple
    INTS = "ints"  # list of int64, read as a numpy view
    FLOATS = "floats"  # list of float32, read as a numpy view
    VECTOR = "vector"  # fixed-width float32 vector; the width is a manifest dim


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind
    dim: str = ""  # VECTOR only: the manifest `dims` entry giving its width
    # A column added after versions were written without it: what their rows read as (segment.py fills it in).
    default: Any = None


def arrow_type(column: Column, dims: Mapping[str, int]) -> pa.DataType:
    if column.kind is Kind.VECTOR:
        if column.dim not in dims:
            raise StoreError(f"column {column.name}: no width for vector dim '{column.dim}'")
        return pa.list_(pa.float32(), int(dims[column.dim]))
    return {Kind.STR: pa.large_string(), Kind.INT: pa.int64(), Kind.FLOAT: pa.float64(),
            Kind.STRS: pa.large_list(pa.large_string()), Kind.INTS: pa.large_list(pa.int64()),
            Kind.FLOATS: pa.large_list(pa.float32())}[column.kind]


RowT = TypeVar("RowT")


@dataclass(frozen=True)
class Artifact(Generic[RowT]):
    """A keyed table: `name` on disk, rows of type `row` whose fields are the columns, in order."""

    name: str
    row: type[RowT]
    columns: tuple[Column, ...]

    def schema(self, dims: Mapping[str, int]) -> pa.Schema:
        return pa.schema([pa.field(c.name, arrow_type(c, dims), nullable=False) for c in self.columns])

    def to_arrow(self, rows: list[RowT], dims: Mapping[str, int]) -> pa.Table:
        """Rows -> one Arrow table in this artifact's schema."""
        schema = self.schema(dims)
        arrays = []
        for col, field in zip(self.columns, schema):
            values = [getattr(r, col.name) for r in rows]
            if col.kind is Kind.VECTOR:
                width = field.type.list_size
                flat = np.asarray(values, dtype=np.float32).reshape(len(rows), width) if rows else \
                    np.zeros((0, width), np.float32)
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel(), pa.float32()), width))
            elif col.kind in (Kind.INTS, Kind.FLOATS):
                arrays.append(pa.array([np.asarray(v).tolist() for v in values], field.type))
            else:
                arrays.append(pa.array(values, field.type))
        return pa.Table.from_arrays(arrays, schema=schema)

    def make(self, values: dict[str, Any]) -> RowT:
        return self.row(**values)


def _columns(row: type, kinds: dict[str, Kind | tuple[Kind, str] | Column]) -> tuple[Column, ...]:
    """The artifact's columns in the row type's field order (`id` first)."""
    names = [f.name for f in fields(row)]
    if names[0] != "id" or set(names) != set(kinds):
        raise TypeError(f"{row.__name__}: fields {names} do not match columns {sorted(kinds)}")
    out = []
    for name in names:
        kind = kinds[name]
        if isinstance(kind, Column):
            out.append(kind)
        else:
            out.append(Column(name, kind[0], kind[1]) if isinstance(kind, tuple) else Column(name, kind))
    return tuple(out)


S, I, F, SS, IS, FS = Kind.STR, Kind.INT, Kind.FLOAT, Kind.STRS, Kind.INTS, Kind.FLOATS
TEXT_VECTOR = (Kind.VECTOR, "text")  # the embedder's width
CLEORA_VECTOR = (Kind.VECTOR, "cleora")


@dataclass(frozen=True)
class DocumentRow:
    id: str
    title: str
    text: str
    chunks: tuple[str, ...]  # its chunk ids, in order
    metadata: str = "{}"  # the document's metadata object as JSON text (`metadata_text`)


def metadata_text(metadata: Mapping[str, Any]) -> str:
    """How a document's metadata is stored: compact JSON, keys sorted, non-ASCII kept."""
    return json.dumps(metadata, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class ChunkRow:
    """A layer-0 text unit and what its extraction contributed (fixed for the chunk's life)."""

    id: str  # doc_id:ordinal
    doc_id: str
    ordinal: int
    text: str
    n_tokens: int
    title: str
    entities: tuple[str, ...]  # entity ids it mentions
    relations: tuple[str, ...]  # relation ids it supports
    hyperedges: tuple[str, ...]  # hyperedge ids extracted from it
    embedding: np.ndarray


@dataclass(frozen=True)
class EntityRow:
    id: str  # normalized name
    name: str  # the most frequent surface form
    type: str
    description: str
    score: float
    chunks: tuple[str, ...]  # mentions, sorted
    relations: tuple[str, ...]  # relations with this entity as head or tail
    hyperedges: tuple[str, ...]  # hyperedges naming it, sorted
    names: tuple[str, ...]  # surface forms in first-seen order...
    name_counts: np.ndarray  # ...and how often each was seen (int64)
    embedding: np.ndarray  # the text vector of `name`


@dataclass(frozen=True)
class RelationRow:
    id: str  # sha1(head|relation|tail)
    head: str
    relation: str
    tail: str
    score: float
    chunks: tuple[str, ...]  # supporting chunks, sorted


@dataclass(frozen=True)
class HyperedgeRow:
    id: str  # sha1(text)
    text: str
    entities: tuple[str, ...]
    score: float
    chunks: tuple[str, ...]  # source chunks, sorted


NODE_CHUNK, NODE_ENTITY, NODE_HYPEREDGE = 0, 1, 2  # GraphNodeRow.kind, in core.graph.NODE_KINDS order


@dataclass(frozen=True)
class GraphNodeRow:
    """A node of the hybrid graph (HyGRAG eq. 6): its binary, symmetric adjacency and Cleora vector."""

    id: str
    kind: int
    neighbours: tuple[str, ...]
    cleora: np.ndarray


@dataclass(frozen=True)
class SummaryRow:
    """A summary node. Its layer-0 leaves are derived: sorted(children's leaves ∪ extra_leaves)."""

    id: str  # "L{layer}:{ordinal}"
    layer: int
    text: str
    children: tuple[str, ...]  # members one layer down, in segment order
    extra_leaves: tuple[str, ...]  # leaves that are not children (a Leiden community's chunks)
    key: str
    child_codes: np.ndarray  # LSH codes of `children` under this layer's hyperplanes (empty for Leiden layer 1)
    embedding: np.ndarray


@dataclass(frozen=True)
class ParentsRow:
    """Which summaries list a node (layer-0 or summary) as a child or extra leaf."""

    id: str
    summaries: tuple[str, ...]


@dataclass(frozen=True)
class HyperplanesRow:
    id: str  # "L{layer}"
    planes: np.ndarray  # float32, k x dim flattened
    k: int
    dim: int


@dataclass(frozen=True)
class TermsRow:
    """HyperRAG §3.1 per chunk: its key terms and its explicit keyword-edge neighbours."""

    id: str  # chunk id
    terms: tuple[str, ...]
    neighbours: tuple[str, ...]


@dataclass(frozen=True)
class PostingsRow:
    """One document's BM25 postings (core/lexical.py): its distinct analyzed terms in first-seen order, and how
    often each occurs. Corpus statistics are not stored: they follow from the rows when a version is read, so
    adding or removing a document writes its row alone."""

    id: str  # chunk id, or entity id (the normalized name, which is what is analyzed)
    terms: tuple[str, ...]
    counts: np.ndarray  # int64, one per term


DOCUMENTS = Artifact("documents", DocumentRow, _columns(DocumentRow, dict(
    id=S, title=S, text=S, chunks=SS, metadata=Column("metadata", S, default="{}"))))
CHUNKS = Artifact("chunks", ChunkRow, _columns(ChunkRow, dict(
    id=S, doc_id=S, ordinal=I, text=S, n_tokens=I, title=S, entities=SS, relations=SS, hyperedges=SS,
    embedding=TEXT_VECTOR)))
ENTITIES = Artifact("entities", EntityRow, _columns(EntityRow, dict(
    id=S, name=S, type=S, description=S, score=F, chunks=SS, relations=SS, hyperedges=SS, names=SS,
    name_counts=IS, embedding=TEXT_VECTOR)))
RELATIONS = Artifact("relations", RelationRow, _columns(RelationRow, dict(
    id=S, head=S, relation=S, tail=S, score=F, chunks=SS)))
HYPEREDGES = Artifact("hyperedges", HyperedgeRow, _columns(HyperedgeRow, dict(
    id=S, text=S, entities=SS, score=F, chunks=SS)))
GRAPH = Artifact("graph", GraphNodeRow, _columns(GraphNodeRow, dict(
    id=S, kind=I, neighbours=SS, cleora=CLEORA_VECTOR)))
SUMMARIES = Artifact("summaries", SummaryRow, _columns(SummaryRow, dict(
    id=S, layer=I, text=S, children=SS, extra_leaves=SS, key=S, child_codes=IS, embedding=TEXT_VECTOR)))
PARENTS = Artifact("parents", ParentsRow, _columns(ParentsRow, dict(id=S, summaries=SS)))
HYPERPLANES = Artifact("hyperplanes", HyperplanesRow, _columns(HyperplanesRow, dict(id=S, planes=FS, k=I, dim=I)))
TERMS = Artifact("terms", TermsRow, _columns(TermsRow, dict(id=S, terms=SS, neighbours=SS)))
LEXICAL_CHUNKS = Artifact("lexical_chunks", PostingsRow, _columns(PostingsRow, dict(id=S, terms=SS, counts=IS)))
LEXICAL_ENTITIES = Artifact("lexical_entities", PostingsRow, _columns(PostingsRow, dict(id=S, terms=SS, counts=IS)))

ARTIFACTS: dict[str, Artifact[Any]] = {a.name: a for a in (
    DOCUMENTS, CHUNKS, ENTITIES, RELATIONS, HYPEREDGES, GRAPH, SUMMARIES, PARENTS, HYPERPLANES, TERMS,
    LEXICAL_CHUNKS, LEXICAL_ENTITIES)}
