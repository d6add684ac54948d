"""`collapsed`: EraRAG's collapsed graph search (§III-D, Alg. 2) with the detailed/summarized bias."""

from __future__ import annotations

import math
from itertools import chain
from typing import Literal

import numpy as np

from hygraph.core.retrieval.context import Context, Search, passages_from_chunks, pool_size
from hygraph.core.retrieval.items import chunk_item, chunks_under, searched_members, summary_item, until_k_passages
from hygraph.core.retrieval.view import IndexView

Bias = Literal["detailed", "summarized"]


def collapsed(query_vec: np.ndarray, k: int, view: IndexView, search: Search, *,
              bias: Bias | None = None, p: float = 0.5, max_tokens: int | None = None) -> Context:
    """EraRAG §III-D / Alg. 2: one flat top-k over leaf chunks and summaries of every layer, under a token budget.

    Leaves and summaries live in two collections, so each is searched once and the hits are
    merged by similarity into the collapsed graph's single ranking.
    - no bias: the k best nodes of the merged ranking;
    - `bias="detailed"`: round(p*k) (half up) leaves and k - round(p*k) summaries, each side
      by similarity; `"summarized"` swaps the sides. A side that cannot fill its share (too
      few hits, or none that fits the budget) leaves the rest to the other side, so k nodes
      come back whenever k fit.
    - `max_tokens`: nodes are taken in merged order and one whose text (whitespace tokens)
      would overflow the budget is skipped; a shorter node further down may still fit.
    The selected nodes keep the merged order in `summaries` and `chunks`.

    Passage ranking: the passages of the selected leaves, in order; then the passages of the
    chunks under the selected summaries (`summary_leaves`), ranked by the chunks' similarity
    where the chunk search reached them (it goes `pool_size(k)` deep), then the rest in
    summary order and leaf order, scored with the search's last score (an upper bound on
    their similarity). At most k passages.
    """
    if bias not in (None, "detailed", "summarized"):
        raise ValueError(f"bias: expected 'detailed', 'summarized' or None, got {bias!r}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p: expected a proportion in [0, 1], got {p}")
    q = query_vec[None, :]
    depth = pool_size(k)
    leaf_hits, summary_hits = (hits[0] for hits in search.many([("chunks", q, depth, None),
                                                                 ("summaries", q, depth, None)]))
    merged = sorted([(s, "chunk", cid) for cid, s in leaf_hits] + [(s, "summary", sid) for sid, s in summary_hits],
                    key=lambda node: -node[0])

    favoured = math.floor(p * k + 0.5)
    if bias is None:
        quota = {"chunk": k, "summary": k}
    elif bias == "detailed":
        quota = {"chunk": favoured, "summary": k - favoured}
    else:
        quota = {"summary": favoured, "chunk": k - favoured}
    budget = math.inf if max_tokens is None else max_tokens
    picked: set[tuple[str, str]] = set()
    # Pass 1 honours the proportion; pass 2 hands a short side's share to the other.
    for relaxed in (False, True):
        for _, kind, nid in merged:
            if len(picked) == k:
                break
            if (kind, nid) in picked or (not relaxed and quota[kind] == 0):
                continue
            cost = _tokens(view.chunk_text[nid] if kind == "chunk" else view.summary_text[nid])
            if cost > budget:
                continue
            picked.add((kind, nid))
            quota[kind] -= 1
            budget -= cost
    summaries = [summary_item(nid, s, view) for s, kind, nid in merged if (kind, nid) in picked and kind == "summary"]
    chunks = [chunk_item(nid, s, view) for s, kind, nid in merged if (kind, nid) in picked and kind == "chunk"]
    summary_ids = [s.id for s in summaries]
    under = searched_members(summary_ids, {cid for cid, _ in leaf_hits}, view)
    ranked = until_k_passages(chain(chunks, chunks_under(summary_ids, leaf_hits, under, view)), k)
    return Context(summaries=summaries, chunks=chunks, passages=passages_from_chunks(ranked, view.titles, k))


def _tokens(text: str) -> int:
    return len(text.split())
