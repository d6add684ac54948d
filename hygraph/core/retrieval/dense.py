"""`dense`: plain top-k chunks by embedding similarity, the baseline every mode is compared with."""

from __future__ import annotations

import numpy as np

from hygraph.core.retrieval.context import Context, ContextItem, Search, passages_from_chunks


def dense(query_vec: np.ndarray, k: int, search: Search, chunk_text: dict[str, str],
          chunk_doc: dict[str, str], titles: dict[str, str]) -> Context:
    """Vanilla RAG retrieval (HyGRAG §2): top-k chunks by cosine similarity to the question."""
    hits = search("chunks", query_vec[None, :], k, None)[0]
    chunks = [ContextItem(cid, "chunk", chunk_text[cid], score, (chunk_doc[cid],)) for cid, score in hits]
    return Context(chunks=chunks, passages=passages_from_chunks(chunks, titles, k))
