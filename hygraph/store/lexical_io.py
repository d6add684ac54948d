"""The BM25 postings in a snapshot: document ids and terms as Parquet tables, the count matrix as CSR npy arrays."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from hygraph.core.lexical import LexicalIndex
from hygraph.store.snapshot import Snapshot, VersionWriter

# One index per kind of document: "chunks" (title + text) and "entities" (entity ids, i.e. normalized names).
KINDS = ("chunks", "entities")


def write_lexical(writer: VersionWriter, kind: str, index: LexicalIndex) -> None:
    counts = index.counts.tocsr()
    writer.write_table(f"lexical_{kind}_ids", {"id": list(index.ids)})
    writer.write_table(f"lexical_{kind}_terms", {"term": list(index.terms)})
    writer.write_array(f"lexical_{kind}_indptr", counts.indptr.astype(np.int64))
    writer.write_array(f"lexical_{kind}_indices", counts.indices.astype(np.int32))
    writer.write_array(f"lexical_{kind}_counts", counts.data.astype(np.float32))


def has_lexical(snap: Snapshot, kind: str) -> bool:
    return snap.has(f"lexical_{kind}_ids")


def read_lexical(snap: Snapshot, kind: str) -> LexicalIndex:
    ids = tuple(snap.table(f"lexical_{kind}_ids").column("id").to_pylist())
    terms = tuple(snap.table(f"lexical_{kind}_terms").column("term").to_pylist())
    counts = sp.csr_matrix((np.asarray(snap.array(f"lexical_{kind}_counts"), dtype=np.float32),
                            np.asarray(snap.array(f"lexical_{kind}_indices")),
                            np.asarray(snap.array(f"lexical_{kind}_indptr"))), shape=(len(ids), len(terms)))
    return LexicalIndex(ids, terms, counts)
