"""Pair overlaps of a binary incidence matrix (rows: passages, columns: their entities or key terms) at a cost
that follows the corpus linearly.

The product X X^T costs the sum over columns of (rows holding the column)^2. A hub column (a common word, a
country most passages name) is held by a share of the rows that stays about constant as the corpus grows, so
hubs alone make the product quadratic. A column held by more than a fixed number of rows is therefore left
out altogether, as a stopword is: it neither proposes a pair nor counts in one, and the product then costs at
most that number per nonzero. Leaving hubs out of the count too (rather than counting them for the pairs a
rarer column proposed) is what keeps the cost linear: counting them needs each candidate pair's hub
intersection, which on real passages costs more than the quadratic product it replaces. The rule depends
only on the two rows and on each column's row count, so an update that keeps the counts can apply it.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
from scipy import sparse

# Rows per product block: bounds the intermediate to a block's worth of pairs.
BLOCK = 1024


def without_hubs(x: sparse.csr_matrix, hub_df: int | None) -> sparse.csr_matrix:
    """x without the columns held by more than `hub_df` rows (all of x when hub_df is None)."""
    if hub_df is None:
        return x
    return x[:, np.flatnonzero(x.getnnz(axis=0) <= hub_df)].tocsr()


def pair_overlaps(x: sparse.csr_matrix, block: int = BLOCK) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For each block of rows, (i, j, shared): every ordered pair i != j of rows sharing a column, with the
    number of columns they share. x must be binary. i, j are int64 row numbers, shared int64."""
    x = x[:, np.flatnonzero(x.getnnz(axis=0) > 1)].tocsr()  # a column held by one row pairs nothing
    xt = x.T.tocsr()
    for start in range(0, x.shape[0], block):
        prod = (x[start:start + block] @ xt).tocoo()
        i = prod.row.astype(np.int64) + start
        j = prod.col.astype(np.int64)
        keep = i != j
        yield i[keep], j[keep], prod.data[keep].astype(np.int64)
