"""Metadata filters: which documents a query may draw its passages from.

A filter is data (`input_rules.check_filter` bounds it): `{"key": value, "key2": [v1, v2]}` holds for a
document whose metadata has `key` equal to `value` and `key2` equal to one of `v1, v2`; every key must hold
(AND), a list means any of its values (IN). Only top-level metadata keys are compared. Values compare as JSON
scalars (`canonical`):

- strings by code point: case, whitespace and Unicode normalization count ("é" precomposed is not "é"
  decomposed);
- numbers by value: 1 and 1.0 are equal (JSON does not tell them apart), "1" the string is not 1;
- booleans are not numbers: true is not 1;
- null matches a key present with the value null, never a missing key;
- a metadata value that is a list matches when any of its scalar elements does (`{"tags": "x"}` finds
  `"tags": ["x", "y"]`); objects, and lists inside lists, never match.

An empty filter (`{}`) restricts nothing; a key listed with `[]` matches no document.

`MetadataIndex` answers a filter from postings (key, canonical value) -> documents, built once per index
version from its documents' metadata. `PassageFilter` is one query's answer: the allowed documents, and
their chunks when they are few enough to score one by one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

# A filter allowing at most this many chunks is scored over exactly those chunks (their stored vectors, their
# BM25 rows); a broader one walks the whole ranking and keeps the allowed chunks, which come early.
EXACT_CHUNKS = 2048


def canonical(value: Any) -> str:
    """A JSON scalar as the filter compares it (see the module docstring): integral floats as integers."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value)


class MetadataIndex:
    """(top-level key, canonical scalar) -> the ids of the documents whose metadata holds it."""

    def __init__(self, postings: Mapping[tuple[str, str], frozenset[str]]) -> None:
        self.postings = postings

    @classmethod
    def build(cls, documents: Iterable[tuple[str, str]]) -> "MetadataIndex":
        """From (document id, metadata as JSON text) pairs."""
        postings: dict[tuple[str, str], set[str]] = {}
        for doc_id, text in documents:
            for key, value in json.loads(text).items():
                for item in value if isinstance(value, list) else (value,):
                    if not isinstance(item, (dict, list)):
                        postings.setdefault((key, canonical(item)), set()).add(doc_id)
        return cls({key: frozenset(docs) for key, docs in postings.items()})

    def documents(self, flt: Mapping[str, Any]) -> frozenset[str]:
        """The documents a non-empty filter holds for."""
        allowed: frozenset[str] | None = None
        for key, wanted in flt.items():
            docs = frozenset().union(*(self.postings.get((key, canonical(v)), frozenset())
                                       for v in (wanted if isinstance(wanted, list) else (wanted,))))
            allowed = docs if allowed is None else allowed & docs
            if not allowed:
                return frozenset()
        return allowed if allowed is not None else frozenset()


@dataclass(frozen=True)
class PassageFilter:
    """One query's filter over an index version: the documents it allows and how to test a chunk."""

    docs: frozenset[str]
    chunk_doc: Mapping[str, str]
    chunks: tuple[str, ...] | None  # every allowed chunk when at most EXACT_CHUNKS, else None

    @classmethod
    def of(cls, docs: frozenset[str], chunk_doc: Mapping[str, str],
           doc_chunks: Mapping[str, Sequence[str]]) -> "PassageFilter":
        chunks: list[str] | None = []
        if len(docs) > EXACT_CHUNKS:
            chunks = None
        else:
            for doc in sorted(docs):
                chunks.extend(doc_chunks.get(doc, ()))
                if len(chunks) > EXACT_CHUNKS:
                    chunks = None
                    break
        return cls(docs, chunk_doc, tuple(chunks) if chunks is not None else None)

    def allows(self, chunk_id: str) -> bool:
        return self.chunk_doc.get(chunk_id) in self.docs

    def best(self, scores: np.ndarray, ids: Sequence[str], row_of: Mapping[str, int], k: int) -> np.ndarray:
        """The rows (of `scores`, whose row i is chunk `ids[i]`, row of a chunk `row_of[id]`) of at most k
        allowed chunks with a positive score, best first, ties in row order."""
        if self.chunks is not None:
            rows = np.fromiter((row_of.get(c, -1) for c in self.chunks), dtype=np.int64, count=len(self.chunks))
            rows = rows[(rows >= 0) & (rows < len(scores))]
            rows = rows[scores[rows] > 0]
            return rows[np.lexsort((rows, -scores[rows]))][:k]
        hit = np.flatnonzero(scores > 0)
        out: list[int] = []
        for i in hit[np.lexsort((hit, -scores[hit]))]:
            if self.allows(ids[int(i)]):
                out.append(int(i))
                if len(out) == k:
                    break
        return np.asarray(out, dtype=np.int64)
