"""Pair overlaps of a binary incidence matrix (rows: passages, columns: their entities or key terms) whose cost
follows the corpus linearly.

The product X X^T over all columns costs the sum over columns of (rows holding it)^2. A hub column (a common
word, a country most passages name) is held by a share of the rows that stays about constant as the corpus
grows, so hubs alone make the product quadratic. Here a column held by more than `hub_df` rows proposes no
pair; the others propose every pair of their rows, which costs at most `hub_df` per nonzero. A hub still
counts toward the overlap of a pair a rarer column proposed, so every pair found has its exact overlap and
the thresholds applied to it (shared entities, overlap ratio) keep their meaning; what is lost are the pairs
whose whole overlap is hubs, the least specific links. The rule depends only on the pair's two rows and on
each column's row count, so an update that keeps the counts applies it exactly.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
from scipy import sparse

# Rows per product block: bounds the intermediate to a block's worth of candidate pairs.
BLOCK = 1024
# Candidate pairs per hub-overlap step: bounds the rows gathered for the elementwise product.
_PAIR_STEP = 1 << 18


def hub_columns(x: sparse.csr_matrix, hub_df: int | None) -> np.ndarray:
    """Boolean mask of the columns held by more than `hub_df` rows (none when hub_df is None)."""
    df = x.getnnz(axis=0)
    return df > hub_df if hub_df is not None else np.zeros(df.shape, dtype=bool)


def pair_overlaps(x: sparse.csr_matrix, hub_df: int | None,
                  block: int = BLOCK) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For each block of rows, (i, j, shared): every ordered pair i != j that shares a column held by at most
    `hub_df` rows, with shared = the number of columns the two rows share, hubs included.

    x must be binary (one nonzero per row and column held). hub_df None: no column is a hub, which gives
    every pair sharing any column, as the full product does. i, j are int64 row numbers, shared int64.
    """
    n = x.shape[0]
    hub = hub_columns(x, hub_df)
    proposes = ~hub & (x.getnnz(axis=0) > 1)  # a column held by one row pairs nothing
    xp = x[:, np.flatnonzero(proposes)].tocsr()
    xpt = xp.T.tocsr()
    xh = x[:, np.flatnonzero(hub)].tocsr()
    for start in range(0, n, block):
        prod = (xp[start:start + block] @ xpt).tocoo()
        i = prod.row.astype(np.int64) + start
        j = prod.col.astype(np.int64)
        shared = prod.data.astype(np.int64)
        keep = i != j
        i, j, shared = i[keep], j[keep], shared[keep]
        if xh.nnz:
            for s in range(0, len(i), _PAIR_STEP):
                a, b = i[s:s + _PAIR_STEP], j[s:s + _PAIR_STEP]
                shared[s:s + _PAIR_STEP] += np.asarray(xh[a].multiply(xh[b]).sum(axis=1)).ravel()
        yield i, j, shared
