"""BM25 over a collection that grows and shrinks (Robertson & Zaragoza 2009, Lucene's variant as bm25s scores it).

The postings are one sparse documents x terms matrix of term counts. Corpus statistics (N,
document frequencies, average length) follow from it at query time, so adding or removing
documents edits rows and never re-reads the other documents' text; scores equal those of an
index built from scratch over the same documents (tests/unit/test_lexical.py checks both
against bm25s).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp
import Stemmer

# bm25s's English analyzer: scikit-learn's token pattern, its 33 English stopwords, Snowball stems.
_TOKEN = re.compile(r"(?u)\b\w\w+\b")
STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
    "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
    "will", "with"))
K1 = 1.5
B = 0.75
_local = threading.local()  # a PyStemmer object keeps a cache and is not thread-safe: one per thread


def analyze(text: str) -> list[str]:
    """Lowercase, tokens of two or more word characters, stopwords dropped, Snowball English stems."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer.stemWords([t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS])


@dataclass(frozen=True, eq=False)
class LexicalIndex:
    """Row i of `postings` holds the term counts of document `ids[i]`; column j is term `terms[j]`.

    Stored by term (CSC), the layout scoring reads. Terms no document uses any more stay in the
    vocabulary with document frequency 0 (they never score), so removing documents never renumbers
    columns. `ids`, `terms` and `lookup` may be any sequences and mapping, e.g. memory-mapped ones
    shared by the processes of a node; without `lookup` a dict over `terms` is made.
    """

    ids: Sequence[str]
    terms: Sequence[str]
    postings: sp.csc_matrix  # (len(ids), len(terms)) float32 term frequencies
    k1: float = K1
    b: float = B
    lookup: Mapping[str, int] | None = None  # term -> column

    @cached_property
    def term_index(self) -> Mapping[str, int]:
        return self.lookup if self.lookup is not None else {t: j for j, t in enumerate(self.terms)}

    @cached_property
    def row_index(self) -> Mapping[str, int]:
        """Document id -> its row, made on first use (a filtered query's exact scoring)."""
        return {d: i for i, d in enumerate(self.ids)}

    @cached_property
    def idf(self) -> np.ndarray:
        """Lucene's idf per term: log(1 + (N - df + 0.5) / (df + 0.5))."""
        df = np.diff(self.postings.indptr).astype(np.float64)
        n = len(self.ids)
        return np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)

    @cached_property
    def _length_norm(self) -> np.ndarray:
        """k1 (1 - b + b dl / avgdl) per document: the saturation term of every tf."""
        doc_len = np.bincount(self.postings.indices, weights=self.postings.data, minlength=len(self.ids))
        avg = float(doc_len.mean()) if len(self.ids) else 1.0
        return (self.k1 * (1.0 - self.b + self.b * doc_len / max(avg, 1e-9))).astype(np.float32)

    def scores(self, query_terms: Sequence[str]) -> np.ndarray:
        """BM25 of every document for the analyzed query (a repeated query term counts each time)."""
        out = np.zeros(len(self.ids), dtype=np.float32)
        post = self.postings
        for term in query_terms:
            j = self.term_index.get(term)
            if j is None:
                continue
            lo, hi = post.indptr[j], post.indptr[j + 1]
            docs, tf = post.indices[lo:hi], post.data[lo:hi]
            # Lucene (8+) and bm25s leave out BM25's constant (k1 + 1) numerator: ranking is the same.
            out[docs] += self.idf[j] * tf / (tf + self._length_norm[docs])
        return out

    def top_k(self, query_terms: Sequence[str], k: int) -> list[tuple[str, float]]:
        """The k best-scoring documents with a positive score, best first (ties in row order)."""
        s = self.scores(query_terms)
        hit = np.flatnonzero(s > 0)
        if hit.size > k:
            hit = hit[np.argpartition(-s[hit], k - 1)[:k]]
        order = hit[np.lexsort((hit, -s[hit]))]
        return [(self.ids[i], float(s[i])) for i in order]


def _count_rows(token_lists: Iterable[Sequence[str]], term_index: dict[str, int],
                terms: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (indptr, indices, data) of term counts; unseen terms are appended to `terms`/`term_index`."""
    indptr, indices, data = [0], [], []
    for tokens in token_lists:
        counts: dict[int, int] = {}
        for t in tokens:
            j = term_index.get(t)
            if j is None:
                j = term_index[t] = len(terms)
                terms.append(t)
            counts[j] = counts.get(j, 0) + 1
        cols = sorted(counts)
        indices.extend(cols)
        data.extend(counts[c] for c in cols)
        indptr.append(len(indices))
    return (np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64),
            np.asarray(data, dtype=np.float32))


def build(ids: Sequence[str], token_lists: Sequence[Sequence[str]], k1: float = K1, b: float = B) -> LexicalIndex:
    """BM25 indexing: the term-count postings of analyzed documents."""
    if len(ids) != len(token_lists):
        raise ValueError(f"{len(ids)} ids but {len(token_lists)} token lists")
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate document ids")
    terms: list[str] = []
    indptr, indices, data = _count_rows(token_lists, {}, terms)
    counts = sp.csr_matrix((data, indices, indptr), shape=(len(ids), len(terms)))
    return LexicalIndex(tuple(ids), tuple(terms), counts.tocsc(), k1, b)


def update(index: LexicalIndex, remove: Iterable[str], add_ids: Sequence[str],
           add_tokens: Sequence[Sequence[str]]) -> LexicalIndex:
    """Incremental BM25 indexing: drop the rows of `remove`, append analyzed new documents.

    An added id that is already present replaces it (its old row goes). Only the new
    documents are counted; N, df and the average length follow from the rows at query time.
    """
    if len(add_ids) != len(add_tokens):
        raise ValueError(f"{len(add_ids)} ids but {len(add_tokens)} token lists")
    if len(set(add_ids)) != len(add_ids):
        raise ValueError("duplicate document ids among the added documents")
    gone = set(remove) | set(add_ids)
    keep = np.array([d not in gone for d in index.ids], dtype=bool)
    terms = list(index.terms)
    term_index = dict(index.term_index)
    indptr, indices, data = _count_rows(add_tokens, term_index, terms)
    kept = index.postings.tocsr()[keep]
    kept.resize((kept.shape[0], len(terms)))
    new = sp.csr_matrix((data, indices, indptr), shape=(len(add_ids), len(terms)))
    counts = sp.vstack([kept, new], format="csr", dtype=np.float32)
    ids = tuple(d for d, k in zip(index.ids, keep) if k) + tuple(add_ids)
    return LexicalIndex(ids, tuple(terms), counts.tocsc(), index.k1, index.b)
