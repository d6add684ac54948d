"""Hyperplane LSH segmentation (EraRAG Alg. 1 and Alg. 3, HyGRAG eqs. 8-9).

Codes are int64 with bit j set when a vector lies on the positive side of hyperplane j,
so k is at most 63. Segments are arrays of row indices, each sorted ascending.

Size adjustment (EraRAG Alg. 1 lines 7-11, HyGRAG eq. 9), the rules `partition` and
`repartition_affected` share:
- Merge: every group smaller than s_min joins its Hamming-nearest other group (popcount
  of the XOR of the groups' codes); among equally near groups the largest wins, then the
  lowest code. All such joins of one round are applied together (a chain A->B->C becomes
  one group) and rounds repeat until no group is small, or a single group is left. A
  merged group keeps the code of its largest member group (ties: lowest code).
- Split: a group larger than s_max is cut, in the order (Hamming distance of the member's
  code to the group's code, code, row index), into consecutive pieces of s_max; a remainder
  below s_min is balanced with the piece before it. Cutting in row-index order within a code
  means rows appended later only change the last pieces of a bucket.
Both rules hold sizes within [s_min, s_max] whenever n >= s_min and s_max >= 2*s_min - 1.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components

MAX_BITS = 63
# Rows per float32 matmul in `hash_codes`.
HASH_ROWS = 65536
# Elements per temporary (queries x candidates) block in the nearest-code search.
_BLOCK_ELEMENTS = 1 << 21


def make_hyperplanes(dim: int, k: int, seed: int) -> np.ndarray:
    """EraRAG Alg. 1 line 3: k random hyperplane normals in R^dim (standard Gaussian), float32 (k, dim).

    Stored with the index: hashing new vectors with the same hyperplanes reproduces the buckets.
    """
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if not 1 <= k <= MAX_BITS:
        raise ValueError(f"k must be in [1, {MAX_BITS}] so a code fits in int64, got {k}")
    return np.random.default_rng(seed).standard_normal((k, dim), dtype=np.float32)


def hash_codes(vectors: np.ndarray, hyperplanes: np.ndarray, device: str = "cpu",
               batch_size: int = HASH_ROWS) -> np.ndarray:
    """HyGRAG eq. 8 / EraRAG Alg. 1 lines 4-5: bit j of row i's code is 1 iff vectors[i] . hyperplanes[j] > 0.

    Projections run as float32 torch matmuls on `device` in batches of `batch_size` rows.
    A vector within float rounding of a hyperplane may get a different bit on another device.
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    hyperplanes = np.asarray(hyperplanes, dtype=np.float32)
    if vectors.ndim != 2 or hyperplanes.ndim != 2:
        raise ValueError("vectors and hyperplanes must be 2-D")
    k, dim = hyperplanes.shape
    if vectors.shape[1] != dim:
        raise ValueError(f"vectors have dimension {vectors.shape[1]}, hyperplanes {dim}")
    if not 1 <= k <= MAX_BITS:
        raise ValueError(f"need 1 to {MAX_BITS} hyperplanes, got {k}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    dev = torch.device(device)
    planes = torch.from_numpy(np.ascontiguousarray(hyperplanes.T)).to(dev)
    weights = torch.ones(k, dtype=torch.int64, device=dev) << torch.arange(k, dtype=torch.int64, device=dev)
    codes = np.empty(vectors.shape[0], dtype=np.int64)
    for start in range(0, vectors.shape[0], batch_size):
        # Arrays read zero-copy from Arrow/Parquet are read-only, which torch.from_numpy refuses to share.
        block = torch.from_numpy(np.require(vectors[start:start + batch_size], requirements=["C", "W"])).to(dev)
        bits = (block @ planes > 0).to(torch.int64)
        codes[start:start + block.shape[0]] = (bits * weights).sum(dim=1).cpu().numpy()
    return codes


def _check_bounds(s_min: int, s_max: int) -> None:
    if s_min < 1:
        raise ValueError(f"s_min must be >= 1, got {s_min}")
    if s_max < 2 * s_min - 1:
        raise ValueError(
            f"s_max must be >= 2*s_min - 1 = {2 * s_min - 1} (got s_min={s_min}, s_max={s_max}): "
            "otherwise a bucket of s_max + 1 items cannot be split into two pieces of at least s_min")


def _check_codes(codes: np.ndarray, name: str) -> np.ndarray:
    codes = np.asarray(codes)
    if codes.ndim != 1 or (codes.size and not np.issubdtype(codes.dtype, np.integer)):
        raise ValueError(f"{name} must be a 1-D integer array")
    codes = codes.astype(np.int64, copy=False)
    if codes.size and codes.min() < 0:
        raise ValueError(f"{name} must be non-negative (at most {MAX_BITS} bits)")
    return codes


def _n_bits(*code_arrays: np.ndarray) -> int:
    top = max((int(c.max()) for c in code_arrays if c.size), default=0)
    return max(top.bit_length(), 1)


@lru_cache(maxsize=256)
def _masks(n_bits: int, radius: int) -> np.ndarray:
    """All n_bits-wide masks with exactly `radius` bits set."""
    return np.fromiter((sum(1 << b for b in bits) for bits in itertools.combinations(range(n_bits), radius)),
                       dtype=np.int64, count=math.comb(n_bits, radius))


def _nearest(queries: np.ndarray, targets: np.ndarray, priority: np.ndarray, n_bits: int) -> np.ndarray:
    """Per query code, the index into `targets` of the Hamming-nearest target with a different code.

    `targets` are distinct codes; ties go to the lowest `priority` (distinct values). Small
    radii are probed as Hamming balls looked up in the sorted targets; once probing a ball
    would cost more than a scan, the remaining queries are compared with every target.
    """
    result = np.full(queries.size, -1, dtype=np.int64)
    by_code = np.argsort(targets, kind="stable")
    sorted_codes = targets[by_code]
    sorted_priority = priority[by_code]
    pending = np.arange(queries.size)
    n_targets = targets.size
    for radius in range(1, n_bits + 1):
        if pending.size == 0:
            return result
        n_cand = math.comb(n_bits, radius)
        if n_cand * max(1, n_targets.bit_length()) > n_targets:
            break
        masks = _masks(n_bits, radius)
        step = max(1, _BLOCK_ELEMENTS // n_cand)
        found_any = np.zeros(pending.size, dtype=bool)
        for lo in range(0, pending.size, step):
            rows = pending[lo:lo + step]
            cand = queries[rows, None] ^ masks[None, :]
            pos = np.minimum(np.searchsorted(sorted_codes, cand), n_targets - 1)
            rank = np.where(sorted_codes[pos] == cand, sorted_priority[pos], np.iinfo(np.int64).max)
            pick = rank.argmin(axis=1)
            hit = rank[np.arange(rows.size), pick] != np.iinfo(np.int64).max
            result[rows[hit]] = by_code[pos[np.flatnonzero(hit), pick[hit]]]
            found_any[lo:lo + step] = hit
        pending = pending[~found_any]
    if pending.size:
        by_priority = np.argsort(priority, kind="stable")
        ranked_codes = targets[by_priority]
        step = max(1, _BLOCK_ELEMENTS // n_targets)
        for lo in range(0, pending.size, step):
            rows = pending[lo:lo + step]
            dist = np.bitwise_count(queries[rows, None] ^ ranked_codes[None, :])
            # A target with the query's own code is the query's own group, never a merge partner.
            dist[dist == 0] = MAX_BITS + 1
            result[rows] = by_priority[dist.argmin(axis=1)]
    return result


def _merge_small(bucket_codes: np.ndarray, bucket_sizes: np.ndarray, s_min: int,
                 n_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge rounds (module docstring): group label per bucket and each group's code, groups in code order."""
    group_of_bucket = np.arange(bucket_codes.size)
    group_codes = bucket_codes.copy()
    group_sizes = bucket_sizes.copy()
    while group_codes.size > 1:
        small = np.flatnonzero(group_sizes < s_min)
        if small.size == 0:
            break
        priority = np.empty(group_codes.size, dtype=np.int64)
        priority[np.lexsort((group_codes, -group_sizes))] = np.arange(group_codes.size)
        target = _nearest(group_codes[small], group_codes, priority, n_bits)
        n_groups = group_codes.size
        links = sp.coo_matrix((np.ones(small.size), (small, target)), shape=(n_groups, n_groups))
        n_comp, comp = connected_components(links, directed=False)
        order = np.lexsort((group_codes, -group_sizes, comp))
        leaders = order[np.r_[True, comp[order][1:] != comp[order][:-1]]]
        merged_codes = group_codes[leaders]
        merged_sizes = np.bincount(comp, weights=group_sizes, minlength=n_comp).astype(np.int64)
        by_code = np.argsort(merged_codes)
        relabel = np.empty(n_comp, dtype=np.int64)
        relabel[by_code] = np.arange(n_comp)
        group_of_bucket = relabel[comp[group_of_bucket]]
        group_codes = merged_codes[by_code]
        group_sizes = merged_sizes[by_code]
    return group_of_bucket, group_codes


def _adjust(codes: np.ndarray, s_min: int, s_max: int) -> list[np.ndarray]:
    """Bucket by code, merge small groups, split large ones (module docstring); segments in group order."""
    n = codes.size
    if n == 0:
        return []
    bucket_codes, bucket_of_item, bucket_sizes = np.unique(codes, return_inverse=True, return_counts=True)
    n_bits = _n_bits(codes)
    group_of_bucket, group_codes = _merge_small(bucket_codes, bucket_sizes, s_min, n_bits)
    group = group_of_bucket[bucket_of_item]
    items = np.arange(n)
    distance = np.bitwise_count(codes ^ group_codes[group])
    order = np.lexsort((items, codes, distance, group))
    group_sorted = group[order]
    group_sizes = np.bincount(group, minlength=group_codes.size)
    group_start = np.concatenate([[0], np.cumsum(group_sizes)[:-1]])
    position = items - group_start[group_sorted]

    # Piece layout per group: n_full pieces of s_max, then up to two tail pieces.
    full, rest = np.divmod(group_sizes, s_max)
    fits = group_sizes <= s_max
    balance = ~fits & (rest > 0) & (rest < s_min)
    n_full = np.where(fits, 0, np.where(balance, full - 1, full))
    tail = group_sizes - n_full * s_max
    first_tail = np.where(balance, (tail + 1) // 2, tail)
    n_pieces = n_full + (first_tail > 0) + (tail > first_tail)
    piece_offset = np.concatenate([[0], np.cumsum(n_pieces)[:-1]])

    in_full = position < n_full[group_sorted] * s_max
    tail_pos = position - n_full[group_sorted] * s_max
    piece = np.where(in_full, position // s_max,
                     n_full[group_sorted] + (tail_pos >= first_tail[group_sorted]))
    segment = piece_offset[group_sorted] + piece
    members = order[np.lexsort((order, segment))]
    bounds = np.flatnonzero(np.diff(np.sort(segment))) + 1
    return np.split(members, bounds)


def partition(codes: np.ndarray, s_min: int, s_max: int) -> list[np.ndarray]:
    """HyGRAG eq. 9 / EraRAG Alg. 1 lines 6-11: bucket rows by code, then merge and split to [s_min, s_max].

    Returns segments of row indices covering every row exactly once, ordered by group code.
    For n >= s_min every size lies in [s_min, s_max]; for 0 < n < s_min there is one segment.
    Raises ValueError unless 1 <= s_min and s_max >= 2*s_min - 1. Rules: module docstring.
    """
    _check_bounds(s_min, s_max)
    return _adjust(_check_codes(codes, "codes"), s_min, s_max)


def affected_codes(old_codes: np.ndarray, old_counts: np.ndarray, new_codes: np.ndarray, small_codes: np.ndarray,
                   s_min: int) -> np.ndarray:
    """EraRAG Alg. 3 lines 1-4: the existing codes whose buckets a change reaches (sorted, distinct).

    `old_codes` are a layer's distinct codes with `old_counts` rows each (after removals),
    `new_codes` the new rows' codes, `small_codes` the codes of rows in segments that lost rows
    and fell below s_min. Reached are: every old code a new row shares; for a new code absent
    from the layer that too few new rows carry to stand alone (< s_min), the Hamming-nearest old
    code (ties: larger bucket, then lower code); for each code of a small segment, the nearest
    other old code. `repartition_affected` and an incremental update of one layer share this rule.
    """
    old_codes = _check_codes(old_codes, "old_codes")
    new_codes = _check_codes(new_codes, "new_codes")
    if old_codes.size == 0:
        return old_codes
    priority = np.empty(old_codes.size, dtype=np.int64)
    priority[np.lexsort((old_codes, -np.asarray(old_counts)))] = np.arange(old_codes.size)
    n_bits = _n_bits(old_codes, new_codes)
    new_unique, new_counts = np.unique(new_codes, return_counts=True)
    known = np.isin(new_unique, old_codes)
    stray = new_unique[~known & (new_counts < s_min)]
    hit = [new_unique[known]]
    if stray.size:
        hit.append(old_codes[_nearest(stray, old_codes, priority, n_bits)])
    small_codes = np.asarray(small_codes, dtype=np.int64)
    if small_codes.size and old_codes.size > 1:
        hit.append(old_codes[_nearest(np.unique(small_codes), old_codes, priority, n_bits)])
    return np.unique(np.concatenate(hit))


@dataclass(frozen=True)
class Repartition:
    """Result of `repartition_affected`.

    segments: the full new partition; untouched old segments first, in their old order.
    changed: indices into `segments` of segments that are new or whose members changed.
    removed: indices into the old segment list of segments that no longer exist.
    """

    segments: list[np.ndarray]
    changed: np.ndarray
    removed: np.ndarray


def repartition_affected(segments: list[np.ndarray], codes: np.ndarray, new_codes: np.ndarray,
                         s_min: int, s_max: int, removed: np.ndarray | None = None) -> Repartition:
    """EraRAG Alg. 3 lines 1-8 (plus deletes): place new rows and re-partition only the affected segments.

    `codes` are the existing rows' codes (rows 0..n-1), `segments` their current partition;
    `removed` rows leave, the kept rows are renumbered 0..n'-1 in their old order and the
    new rows become rows n'..n'+m-1 with `new_codes`; the result indexes that numbering.
    Affected are the segments holding a row whose code a new row shares, and, for a new code
    absent from the old rows that too few new rows carry to stand alone (< s_min), the
    segments holding the Hamming-nearest old code (ties: larger bucket, then lower code).
    A segment that lost rows is affected, and so, when it fell below s_min, is the segment
    holding the code nearest to its codes. Segments outside [s_min, s_max] count as affected
    as well. The affected rows plus the new rows are partitioned with `partition`'s rules;
    a resulting segment equal to an affected old one is kept as unchanged.
    """
    _check_bounds(s_min, s_max)
    codes = _check_codes(codes, "codes")
    new_codes = _check_codes(new_codes, "new_codes")
    n_old, n_new = codes.size, new_codes.size
    old_segments = [np.sort(np.asarray(s, dtype=np.int64)) for s in segments]
    covered = np.sort(np.concatenate(old_segments)) if old_segments else np.empty(0, dtype=np.int64)
    if not np.array_equal(covered, np.arange(n_old)):
        raise ValueError(f"segments must cover rows 0..{n_old - 1} exactly once")
    keep = np.ones(n_old, dtype=bool)
    if removed is not None:
        removed = np.asarray(removed, dtype=np.int64)
        if removed.size and (removed.min() < 0 or removed.max() >= n_old):
            raise ValueError(f"removed rows must lie in 0..{n_old - 1}")
        keep[removed] = False
    if n_new == 0 and keep.all():
        return Repartition(old_segments, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))

    renumber = np.cumsum(keep) - 1
    shrunk = np.array([not keep[s].all() for s in old_segments], dtype=bool)
    old_segments = [renumber[s[keep[s]]] for s in old_segments]
    codes = codes[keep]
    n_old = codes.size
    segment_of_row = np.empty(n_old, dtype=np.int64)
    for i, seg in enumerate(old_segments):
        segment_of_row[seg] = i
    sizes = np.array([s.size for s in old_segments], dtype=np.int64)
    affected = shrunk | (sizes < s_min) | (sizes > s_max)
    if n_old:
        old_unique, old_counts = np.unique(codes, return_counts=True)
        small = [s for s, shr, size in zip(old_segments, shrunk, sizes) if shr and 0 < size < s_min]
        small_codes = codes[np.concatenate(small)] if small else np.zeros(0, np.int64)
        hit = affected_codes(old_unique, old_counts, new_codes, small_codes, s_min)
        affected[segment_of_row[np.isin(codes, hit)]] = True

    affected_idx = np.flatnonzero(affected)
    pool = np.sort(np.concatenate([*(old_segments[i] for i in affected_idx),
                                   np.arange(n_old, n_old + n_new)]))
    all_codes = np.concatenate([codes, new_codes])
    parts = [pool[p] for p in _adjust(all_codes[pool], s_min, s_max)]

    part_keys = {p.tobytes() for p in parts}
    reproduced = {i for i in affected_idx if not shrunk[i] and old_segments[i].tobytes() in part_keys}
    kept_keys = {old_segments[i].tobytes() for i in reproduced}
    kept = [seg for i, seg in enumerate(old_segments) if not affected[i] or i in reproduced]
    fresh = [p for p in parts if p.tobytes() not in kept_keys]
    removed_segments = np.array([i for i in affected_idx if i not in reproduced], dtype=np.int64)
    return Repartition(kept + fresh, np.arange(len(kept), len(kept) + len(fresh), dtype=np.int64),
                       removed_segments)
