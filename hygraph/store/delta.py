"""A version's derived read structures patched from an earlier version's, at the cost of the change between them.

A version an insert or delete publishes names its base's segments and adds one segment per artifact
it changed (the changed rows, and tombstones for the keys it dropped). Its live rows are then the
base's, less the keys a new segment holds, followed by the new segments' rows (`Table.batches`), so
every structure `view_loader._derive` makes from a whole version can be made from the base's files
(store/derived.py) and the new segments instead, with vectorised numpy over the mapped arrays and
a Python loop over the new rows only:

- BM25 (per index): the dropped rows' entries leave the postings, the new rows' are appended, and
  terms no row uses any more leave the vocabulary while new ones are appended to it. The vocabulary is
  then the one a full derive finds, in another order: a term's column number enters no score (a
  query adds its terms' contributions in the query's order, documents keep their rows), so every
  score and tie-break is the full derive's.
- The hybrid graph: nodes renumbered (kept chunks in their order, then the new segments' chunks; entities
  and hyperedges merged by id), each kept node's adjacency row taken from the base and each new row's from
  its stored neighbour list. That needs the stored lists to be symmetric, as the graph stage writes them:
  the base's were checked when it was derived (`mirrored`), a new version's new lists are checked here.
- The walk: the transition columns of the nodes whose neighbourhood or subject edges may have changed (new
  rows, chunks whose document row changed, and their neighbours) are computed again as `core.ppr.transition`
  computes them; the others are the base's, renumbered.

Anything else (no base on this node, a compacted or rebuilt artifact, a format change, a delta above
`MAX_SHARE` of the base, lists that are not symmetric) answers None: the caller derives in full.
"""

from __future__ import annotations

import bisect
import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from hygraph.core.ppr import kind_weights
from hygraph.core.retrieval.propagation import EDGE_WEIGHTS, SUBJECT_WEIGHT, title_names
from hygraph.errors import StoreError
from hygraph.store import derived
from hygraph.store.artifacts import (CHUNKS, DOCUMENTS, ENTITIES, GRAPH, HYPEREDGES, LEXICAL_CHUNKS,
                                     LEXICAL_ENTITIES, NODE_CHUNK, NODE_ENTITY, NODE_HYPEREDGE, RELATIONS, Artifact)
from hygraph.store.derived import RawStrings
from hygraph.store.segment import Segment, key_hash
from hygraph.store.table import Table

log = logging.getLogger(__name__)

MAX_SHARE = 0.1  # a delta with more rows than this share of the base's (and than MIN_ROWS) is derived in full
MIN_ROWS = 256
_TABLES = "tables.json"  # the segments of each artifact that a derived directory was made from
_USED = (LEXICAL_CHUNKS, LEXICAL_ENTITIES, GRAPH, RELATIONS, CHUNKS, DOCUMENTS, ENTITIES, HYPEREDGES)


class _Refuse(Exception):
    """The patch would not be known to equal a full derive."""


def provenance(at: int, start: int, n: int) -> np.ndarray:
    """Where rows come from, one int64 each: the segment's position in its table (high 32 bits) and the row's."""
    return (np.int64(at) << np.int64(32)) + np.arange(start, start + n, dtype=np.int64)


def _mix(x: np.ndarray) -> np.ndarray:
    """A 64-bit mixing function (MurmurHash3's finalizer), elementwise, wrapping."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(33)
        x *= np.uint64(0xFF51AFD7ED558CCD)
        x ^= x >> np.uint64(33)
        x *= np.uint64(0xC4CEB9FE1A85EC53)
        x ^= x >> np.uint64(33)
    return x


def mirrored(src: np.ndarray, dst: np.ndarray, n: int) -> bool:
    """Whether the directed pairs (src, dst) equal their mirror (dst, src) as a multiset: compared through a
    sum of mixed 64-bit codes, so an unequal pair of multisets passes with probability about 2**-64."""
    if not len(src):
        return True
    n = np.int64(max(n, 1))
    with np.errstate(over="ignore"):
        return bool(_mix(src * n + dst).sum(dtype=np.uint64) == _mix(dst * n + src).sum(dtype=np.uint64))


def write_tables(directory: Path, tables: Mapping[str, Sequence[str]]) -> None:
    (directory / _TABLES).write_text(json.dumps({k: list(v) for k, v in tables.items()}))


# --- string tables and their hash indexes, patched -------------------------------------------------------------

def gather_strings(offsets: np.ndarray, data: np.ndarray, order: np.ndarray, new: Sequence[str]) -> RawStrings:
    """A string table whose row i is old row `order[i]` (>= 0, increasing among the old rows) or new string
    `-1 - order[i]`: runs of consecutive old rows are copied as one slice of bytes."""
    enc = [s.encode("utf-8") for s in new]
    is_new = order < 0
    old_len = np.diff(offsets)
    lens = np.zeros(len(order), np.int64)
    old_at = order[~is_new]
    lens[~is_new] = old_len[old_at]
    if enc:
        lens[is_new] = np.array([len(e) for e in enc], np.int64)[-1 - order[is_new]]
    out_off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    out = np.empty(int(out_off[-1]), np.uint8)
    if len(order):
        brk = np.ones(len(order), bool)
        brk[1:] = is_new[1:] | is_new[:-1] | (order[1:] != order[:-1] + 1)
        starts = np.flatnonzero(brk)
        stops = np.append(starts[1:], len(order))
        for a, z in zip(starts.tolist(), stops.tolist()):
            if is_new[a]:
                out[out_off[a]:out_off[z]] = np.frombuffer(enc[-1 - int(order[a])], np.uint8)
            else:
                o = int(order[a])
                out[out_off[a]:out_off[z]] = data[offsets[o]:offsets[o + z - a]]
    return RawStrings(out_off, out)


def patch_keys(keys: np.ndarray, row_map: np.ndarray, new: Sequence[str], new_rows: np.ndarray) -> np.ndarray:
    """A sorted hash index (2, n) with rows renumbered by `row_map` (-1: gone) and `new` added at `new_rows`."""
    h, r = keys[0], row_map[keys[1]]
    ok = r >= 0
    h, r = h[ok], r[ok]
    nh = np.fromiter((key_hash(k) for k in new), np.int64, len(new))
    order = np.argsort(nh, kind="stable")
    nh, nr = nh[order], np.asarray(new_rows, np.int64)[order]
    at = np.searchsorted(h, nh, side="right")
    return np.stack([np.insert(h, at, nh), np.insert(r, at, nr)])


def _strings_of(d: derived.Derived, name: str) -> tuple[np.ndarray, np.ndarray]:
    return d.array(f"{name}.offsets"), d.array(f"{name}.bytes")


# --- compressed sparse matrices, rebuilt by major rows -----------------------------------------------------------

def assemble(n: int, old: sp.csr_matrix | sp.csc_matrix, source: np.ndarray, minor_map: np.ndarray,
             fresh: Mapping[int, tuple[np.ndarray, np.ndarray]], n_minor: int, dtype: Any,
             unsorted: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, data) of a compressed matrix of `n` major rows: row i is old row `source[i]` with its
    minor indices renumbered by `minor_map` (the old rows taken must be increasing; the caller has checked that
    it maps none to -1), or `fresh[i]` (indices already renumbered, sorted). Each row's indices come out
    sorted, as scipy's canonical form has them: `unsorted` names the taken rows the renumbering may have put out
    of order (those naming a node whose rank among the others moved), None: any row."""
    old_indptr, old_indices, old_data = old.indptr, old.indices, old.data
    taken = source >= 0
    lens = np.zeros(n, np.int64)
    lens[taken] = np.diff(old_indptr)[source[taken]]
    for i, (idx, _) in fresh.items():
        lens[i] = len(idx)
    # int32 where it holds every value, as scipy would make them (it would copy int64 arrays to int32).
    index_dtype = np.int32 if max(n, n_minor, int(lens.sum())) < np.iinfo(np.int32).max else np.int64
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(index_dtype)
    indices = np.empty(int(indptr[-1]), index_dtype)
    data = np.empty(int(indptr[-1]), dtype)
    # Runs of consecutive old rows in consecutive new rows: one slice each.
    rows = np.flatnonzero(taken)
    if rows.size:
        src = source[rows]
        brk = np.ones(rows.size, bool)
        brk[1:] = (np.diff(rows) != 1) | (np.diff(src) != 1)
        starts = np.flatnonzero(brk)
        stops = np.append(starts[1:], rows.size)
        for a, z in zip(starts.tolist(), stops.tolist()):
            o0, o1 = int(old_indptr[src[a]]), int(old_indptr[src[z - 1] + 1])
            n0 = int(indptr[rows[a]])
            np.take(minor_map, old_indices[o0:o1], out=indices[n0:n0 + o1 - o0])
            data[n0:n0 + o1 - o0] = old_data[o0:o1]
    for i, (idx, val) in fresh.items():
        indices[indptr[i]:indptr[i + 1]] = idx
        data[indptr[i]:indptr[i + 1]] = val
    if unsorted is None:
        down = np.flatnonzero(np.diff(indices) <= 0) + 1 if len(indices) > 1 else np.zeros(0, np.int64)
        row_of = np.searchsorted(indptr, down, side="right") - 1
        unsorted = np.unique(row_of[down != indptr[row_of]])
    # Rows whose renumbered indices are out of order (a kept node next to a chunk that moved to the end).
    for r in np.asarray(unsorted, np.int64).tolist():
        a, z = int(indptr[r]), int(indptr[r + 1])
        if z - a > 1 and (np.diff(indices[a:z]) <= 0).any():
            o = np.argsort(indices[a:z], kind="stable")
            indices[a:z], data[a:z] = indices[a:z][o], data[a:z][o]
            if (np.diff(indices[a:z]) == 0).any():
                raise _Refuse("a repeated neighbour")
    return indptr, indices, data


def _sparse_files(name: str, m: sp.csr_matrix | sp.csc_matrix) -> dict[str, np.ndarray]:
    return {f"{name}.data": m.data, f"{name}.indices": m.indices, f"{name}.indptr": m.indptr,
            f"{name}.shape": np.array(m.shape, dtype=np.int64)}


def _mapped(d: derived.Derived, name: str, kind: Any) -> Any:
    shape = tuple(int(n) for n in d.array(f"{name}.shape"))
    return kind((d.array(f"{name}.data"), d.array(f"{name}.indices"), d.array(f"{name}.indptr")), shape=shape)


# --- what changed between the base and the version ---------------------------------------------------------------

class _Change:
    """The version's tables next to the base's segments: the new segments, the keys they speak for, the base
    rows those keys held."""

    def __init__(self, version: Any, base_tables: Mapping[str, list[str]]) -> None:
        self.version, self.store = version, version.store
        self.base_tables = base_tables
        self.new: dict[str, list[str]] = {}
        for artifact in _USED:
            here = version.has(artifact)
            if here != (artifact.name in base_tables):
                raise _Refuse(f"{artifact.name} appeared or went")
            if not here:
                continue
            names = list(version.table(artifact).segments_names)
            base = base_tables[artifact.name]
            if names[:len(base)] != base:
                raise _Refuse(f"{artifact.name} was compacted or rebuilt")
            self.new[artifact.name] = names[len(base):]

    def segments(self, artifact: Artifact[Any]) -> list[Segment]:
        table = self.version.table(artifact)
        return table.segments[len(self.base_tables[artifact.name]):]

    def touched(self, artifact: Artifact[Any]) -> list[str]:
        """Every key the new segments hold as a row or a tombstone (each leaves the base's rows)."""
        keys: dict[str, None] = {}
        for seg in self.segments(artifact):
            keys.update(dict.fromkeys(seg.ids))
            keys.update(dict.fromkeys(seg.dead_keys()))
        return list(keys)

    def base_table(self, artifact: Artifact[Any]) -> Table[Any]:
        return self.version.table(artifact).prefix(len(self.base_tables[artifact.name]))

    def base_rows(self, artifact: Artifact[Any], keys: Sequence[str], prov: np.ndarray) -> np.ndarray:
        """The base's row numbers (in its derived order, `prov` its provenance) of those of `keys` it held."""
        table = self.base_table(artifact)
        at = {name: i for i, name in enumerate(table.segments_names)}
        codes = []
        for k in keys:
            found = table.locate(k)
            if found is not None:
                codes.append((at[found[0].name] << 32) + found[1])
        code = np.asarray(codes, np.int64)
        pos = np.searchsorted(prov, code)
        if (pos >= len(prov)).any() or (prov[np.minimum(pos, len(prov) - 1)] != code).any():
            raise _Refuse(f"{artifact.name}: a live row of the base is not in its derived structures")
        return pos

    def rows(self, artifact: Artifact[Any], columns: Sequence[str]) -> tuple[list[pa.Array], np.ndarray]:
        """The live rows of the new segments (after the base's rows in the version's order), with provenance."""
        first = len(self.base_tables[artifact.name])
        whole = self.version.table(artifact)
        table = whole.prefix(len(whole.segments))
        table.segments_names, table.segments = whole.segments_names[first:], whole.segments[first:]
        schema = artifact.schema(self.version.manifest.dims)
        batches = list(table.batches_at(columns))
        prov = np.concatenate([provenance(first + at, start, b.num_rows) for at, start, b in batches]
                              or [np.zeros(0, np.int64)])
        return [pa.chunked_array([b.column(i) for _, _, b in batches], schema.field(name).type).combine_chunks()
                for i, name in enumerate(columns)], prov


# --- the structures ----------------------------------------------------------------------------------------------

def _lexical(b: derived.Derived, name: str, artifact: Artifact[Any], ch: _Change,
             arrays: dict[str, np.ndarray], strings: dict[str, Any]) -> None:
    old = _mapped(b, name, sp.csc_matrix)
    prov = b.array(f"{name}.rows")
    removed = ch.base_rows(artifact, ch.touched(artifact), prov)
    (ids, terms, counts), new_prov = ch.rows(artifact, ("id", "terms", "counts"))
    n_docs, n_terms = old.shape
    keep = np.ones(n_docs, bool)
    keep[removed] = False
    indptr, indices, data = old.indptr, old.indices, old.data
    if removed.size:
        entry = keep[indices]
        indptr = np.concatenate([[0], np.cumsum(entry)])[indptr]
        indices = (np.cumsum(keep) - 1)[indices[entry]]
        data = data[entry]
    n_kept = int(keep.sum())
    lookup = b.index(f"{name}.terms")
    new_terms: list[str] = []
    new_at: dict[str, int] = {}
    cols: list[int] = []
    rows: list[int] = []
    vals: list[int] = []
    for i, (ts, cs) in enumerate(zip(terms.to_pylist(), counts.to_pylist())):
        if len(set(ts)) != len(ts):
            raise _Refuse("a postings row repeats a term")
        for t, c in zip(ts, cs):
            j = lookup.get(t)
            if j is None:
                j = new_at.get(t)
                if j is None:
                    j = new_at[t] = n_terms + len(new_terms)
                    new_terms.append(t)
            cols.append(j)
            rows.append(n_kept + i)
            vals.append(c)
    n_all = n_terms + len(new_terms)
    col, row, val = np.asarray(cols, np.int64), np.asarray(rows, np.int64), np.asarray(vals, np.float32)
    o = np.lexsort((row, col))
    col, row, val = col[o], row[o], val[o]
    indptr = np.concatenate([indptr, np.full(len(new_terms), indptr[-1], indptr.dtype)]).astype(np.int64)
    at = indptr[col + 1]
    indices = np.insert(np.asarray(indices, np.int64), at, row)
    data = np.insert(np.asarray(data, np.float32), at, val)
    indptr = indptr + np.concatenate([[0], np.cumsum(np.bincount(col, minlength=n_all))])
    lengths = np.diff(indptr)
    used = lengths > 0
    if not used.all():
        indptr = np.concatenate([[0], np.cumsum(lengths[used])])
    term_map = np.where(used, np.cumsum(used) - 1, -1)
    n_ids = n_kept + len(ids)
    m = sp.csc_matrix((data, indices, indptr), shape=(n_ids, int(used.sum())))
    arrays.update(_sparse_files(name, m))
    arrays[f"{name}.params"] = np.asarray(b.array(f"{name}.params"))
    arrays[f"{name}.rows"] = np.concatenate([prov[keep], new_prov])
    order = np.concatenate([np.flatnonzero(keep), -1 - np.arange(len(ids))])
    strings[f"{name}.ids"] = gather_strings(*_strings_of(b, f"{name}.ids"), order, ids.to_pylist())
    t_order = np.concatenate([np.arange(n_terms), -1 - np.arange(len(new_terms))])[used]
    t = gather_strings(*_strings_of(b, f"{name}.terms"), t_order, new_terms)
    new_used = used[n_terms:]
    keys = patch_keys(b.array(f"{name}.terms.keys"), term_map[:n_terms],
                      [x for x, u in zip(new_terms, new_used) if u], term_map[n_terms:][new_used])
    strings[f"{name}.terms"] = RawStrings(t.offsets, t.data, keys)


class _Nodes:
    """The version's graph nodes next to the base's: new positions of the base's nodes and of the new rows."""

    def __init__(self, b: derived.Derived, ch: _Change) -> None:
        self.index = b.index("graph.nodes")
        nc, ne, nh = (int(n) for n in b.array("graph.sizes"))
        n_old = nc + ne + nh
        self.n_old = n_old
        touched = ch.touched(GRAPH)
        touched_rows = find_rows(self.index, touched)
        gone = touched_rows[touched_rows >= 0]
        (ids, kinds, neighbours), _ = ch.rows(GRAPH, ("id", "kind", "neighbours"))
        self.ids = ids.to_pylist()
        self.kinds = kinds.to_pylist()
        self.lists = neighbours.to_pylist()
        keep = np.ones(n_old, bool)
        keep[gone] = False
        self.keep = keep
        new_pos = np.full(n_old, -1, np.int64)
        self.delta_pos: dict[str, int] = {}
        order_parts: list[np.ndarray] = []
        new_strings: list[str] = []
        start = 0
        sizes = []
        for kind, lo, hi in ((NODE_CHUNK, 0, nc), (NODE_ENTITY, nc, nc + ne), (NODE_HYPEREDGE, nc + ne, n_old)):
            kept = lo + np.flatnonzero(keep[lo:hi])
            mine = [i for i, k in enumerate(self.kinds) if k == kind]
            if kind == NODE_CHUNK:
                new_pos[kept] = start + np.arange(kept.size)
                ins = np.full(len(mine), kept.size, np.int64)
            else:
                mine.sort(key=lambda i: self.ids[i])
                names = self.index.strings.part(lo, hi)
                before = np.concatenate([[0], np.cumsum(keep[lo:hi])])
                ins = np.asarray([before[bisect.bisect_left(names, self.ids[i])] for i in mine], np.int64)
                r = np.arange(kept.size)
                new_pos[kept] = start + r + np.searchsorted(ins, r, side="right")
            at = start + ins + np.arange(len(mine))
            order = np.full(kept.size + len(mine), 0, np.int64)
            order[new_pos[kept] - start] = kept
            for i, p in zip(mine, at.tolist()):
                self.delta_pos[self.ids[i]] = p
                order[p - start] = -1 - len(new_strings)
                new_strings.append(self.ids[i])
            order_parts.append(order)
            sizes.append(kept.size + len(mine))
            start += kept.size + len(mine)
        if len(self.delta_pos) != len(self.ids):
            raise _Refuse("a graph row of an unknown kind or a repeated id")
        self.sizes = sizes
        self.n = start
        self.new_pos = new_pos  # base position -> version position, -1 where the base row went
        ref = new_pos.copy()  # ... and where a new row replaced it, the new row's position
        for k, p in zip(touched, touched_rows.tolist()):
            if p >= 0 and k in self.delta_pos:
                ref[p] = self.delta_pos[k]
        self.ref = ref
        self.order = np.concatenate(order_parts) if order_parts else np.zeros(0, np.int64)
        self.new_strings = new_strings

    def positions(self, names: Sequence[str]) -> np.ndarray:
        """`position` of many ids at once (-1: none): one search of the base's hashes for all of them."""
        out = np.full(len(names), -1, np.int64)
        rest = []
        for i, x in enumerate(names):
            p = self.delta_pos.get(x)
            if p is not None:
                out[i] = p
            else:
                rest.append(i)
        if rest:
            rows = find_rows(self.index, [names[i] for i in rest])
            out[rest] = np.where(rows >= 0, self.ref[rows], -1)
        return out

    def position(self, node: str) -> int | None:
        p = self.delta_pos.get(node)
        if p is not None:
            return p
        q = self.index.get(node)
        if q is None or self.ref[q] < 0:
            return None
        return int(self.ref[q])

    def kind_codes(self) -> np.ndarray:
        return np.repeat(np.arange(3, dtype=np.int8), self.sizes)


def find_rows(index: derived.StringIndex, names: Sequence[str]) -> np.ndarray:
    """The row of each name in a mapped string index (-1: absent), with one search for all of them."""
    out = np.full(len(names), -1, np.int64)
    if not names:
        return out
    h = np.fromiter((key_hash(x) for x in names), np.int64, len(names))
    hs, rows, strings = index.hashes, index.rows, index.strings
    at = np.searchsorted(hs, h).tolist()
    for i, (k, a) in enumerate(zip(h.tolist(), at)):
        raw = None
        while a < len(hs) and hs[a] == k:
            raw = raw if raw is not None else names[i].encode("utf-8")
            if strings.equals(int(rows[a]), raw):
                out[i] = rows[a]
                break
            a += 1
    return out


def _graph(b: derived.Derived, ch: _Change, arrays: dict[str, np.ndarray], strings: dict[str, Any]) -> None:
    if not int(b.array("graph.symmetric")[0]):
        raise _Refuse("the base's neighbour lists are not symmetric")
    nodes = _Nodes(b, ch)
    adj = _mapped(b, "graph.adjacency", sp.csr_matrix)
    n = nodes.n
    # The new rows' lists, as positions (one lookup for all of them); each must be mirrored by the other end's row.
    fresh: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    flat = [x for nbrs in nodes.lists for x in nbrs]
    found = nodes.positions(flat)
    lens = np.asarray([len(x) for x in nodes.lists], np.int64)
    ends = np.concatenate([[0], np.cumsum(lens)]).tolist()
    us = np.asarray([nodes.delta_pos[x] for x in nodes.ids], np.int64)
    for i, (node, nbrs) in enumerate(zip(nodes.ids, nodes.lists)):
        idx = np.sort(found[ends[i]:ends[i + 1]])
        if (idx < 0).any() or len(set(nbrs)) != len(nbrs) or node in nbrs:
            raise _Refuse(f"graph row {node!r}: an unknown, repeated or own neighbour")
        fresh[int(us[i])] = (idx, np.ones(len(idx), np.float32))
    nn = np.int64(max(n, 1))
    U, W = np.repeat(us, lens), found
    is_fresh = np.zeros(n, bool)
    is_fresh[us] = True
    to_fresh = is_fresh[W] if len(W) else np.zeros(0, bool)
    mirrored_ok = bool(np.isin(W[to_fresh] * nn + U[to_fresh], U * nn + W).all())
    # Kept rows that name a base node that went: (kept node, that node's new position or -1), as codes.
    gone = np.flatnonzero(~nodes.keep)
    starts, stops = adj.indptr[gone].astype(np.int64), adj.indptr[gone + 1].astype(np.int64)
    glen = stops - starts
    at = np.repeat(starts - np.cumsum(glen) + glen, glen) + np.arange(int(glen.sum()))
    Q = adj.indices[at].astype(np.int64)
    P = np.repeat(gone, glen)
    on = nodes.keep[Q]
    Q, P = Q[on], P[on]
    kept_side = np.unique(nodes.new_pos[Q] * nn + nodes.ref[P])
    new_side = np.unique(W[~to_fresh] * nn + U[~to_fresh])
    if not mirrored_ok or (nodes.ref[P] < 0).any() or not np.array_equal(kept_side, new_side):
        raise _Refuse("the new neighbour lists are not symmetric with the kept ones")
    source = np.full(n, -1, np.int64)
    kept = np.flatnonzero(nodes.keep)
    source[nodes.new_pos[kept]] = kept
    # Kept rows that name a rewritten chunk may come out of order: it moved to the end of the chunks (rewritten
    # entities and hyperedges keep their rank among the kept ones, and under symmetry no kept row names a new node).
    moved_to = nodes.ref[P]
    unsorted = np.unique(nodes.new_pos[Q][(moved_to >= 0) & (moved_to < nodes.sizes[0])])
    indptr, indices, data = assemble(n, adj, source, nodes.ref, fresh, n, np.float32, unsorted)
    g = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    arrays.update(_sparse_files("graph.adjacency", g))
    arrays["graph.sizes"] = np.asarray(nodes.sizes, np.int64)
    arrays["graph.symmetric"] = np.array([1], np.int64)
    s = gather_strings(*_strings_of(b, "graph.nodes"), nodes.order, nodes.new_strings)
    keys = patch_keys(b.array("graph.nodes.keys"), nodes.new_pos, nodes.new_strings,
                      np.asarray([nodes.delta_pos[x] for x in nodes.new_strings], np.int64))
    strings["graph.nodes"] = RawStrings(s.offsets, s.data, keys)
    arrays["graph.score"] = _scores(b, ch, nodes, source)
    _relations(b, ch, nodes, arrays, strings)
    _walk(b, ch, nodes, g, source, arrays, unsorted)


def _scores(b: derived.Derived, ch: _Change, nodes: _Nodes, source: np.ndarray) -> np.ndarray:
    """The nodes' extraction scores: the base's, at the nodes' new positions, and read again for every entity and
    hyperedge whose row the version's new segments wrote or deleted or whose graph row they rewrote."""
    score = np.zeros(nodes.n, np.float64)
    carried = source >= 0
    score[carried] = b.array("graph.score")[source[carried]]
    for artifact, kind in ((ENTITIES, NODE_ENTITY), (HYPEREDGES, NODE_HYPEREDGE)):
        if not ch.version.has(artifact):
            continue
        keys = list(dict.fromkeys([*ch.touched(artifact), *(x for x, k in zip(nodes.ids, nodes.kinds) if k == kind)]))
        at = nodes.positions(keys)
        values = np.asarray(ch.version.table(artifact).values_or(keys, "score", 0.0), np.float64)
        score[at[at >= 0]] = values[at >= 0]
    return score


def _relations(b: derived.Derived, ch: _Change, nodes: _Nodes, arrays: dict[str, np.ndarray],
               strings: dict[str, Any]) -> None:
    prov = b.array("relations.rows")
    removed = ch.base_rows(RELATIONS, ch.touched(RELATIONS), prov)
    keep = np.ones(len(prov), bool)
    keep[removed] = False
    (ids, heads, tails), new_prov = ch.rows(RELATIONS, ("id", "head", "tail"))
    ends = []
    for col, old in ((heads, b.array("graph.relation_heads")), (tails, b.array("graph.relation_tails"))):
        kept = nodes.ref[old[keep]]
        new = nodes.positions(col.to_pylist())
        if (kept < 0).any() or (new < 0).any():
            raise _Refuse("a relation names a node the graph does not hold")
        ends.append(np.concatenate([kept, new]))
    arrays["graph.relation_heads"], arrays["graph.relation_tails"] = ends
    arrays["relations.rows"] = np.concatenate([prov[keep], new_prov])
    order = np.concatenate([np.flatnonzero(keep), -1 - np.arange(len(ids))])
    strings["graph.relations"] = gather_strings(*_strings_of(b, "graph.relations"), order, ids.to_pylist())


def _subject_chunks(ch: _Change, nodes: _Nodes) -> set[int]:
    """Chunks (version positions) whose document or title may differ from the base's."""
    chunk_keys = set(ch.touched(CHUNKS))
    docs = ch.touched(DOCUMENTS)
    base_docs = ch.base_table(DOCUMENTS)
    now_docs = ch.version.table(DOCUMENTS)
    for d in docs:
        for table in (base_docs, now_docs):
            found = table.locate(d)
            if found is not None:
                chunk_keys.update(found[0].column("chunks")[found[1]])
    keys = sorted(chunk_keys)
    out = {p for p in nodes.positions(keys).tolist() if 0 <= p < nodes.sizes[0]}
    out.update(p for x, p in nodes.delta_pos.items() if p < nodes.sizes[0])
    return out


def _walk(b: derived.Derived, ch: _Change, nodes: _Nodes, g: sp.csr_matrix, source: np.ndarray,
          arrays: dict[str, np.ndarray], unsorted: np.ndarray) -> None:
    n, n_chunks = nodes.n, nodes.sizes[0]
    redo_chunks = _subject_chunks(ch, nodes)
    # Subject edges: the base's whose chunk keeps its title, renumbered, and those of the chunks to redo.
    pairs = np.asarray(b.array("walk.subject"), np.int64).reshape(-1, 2)
    mapped = nodes.ref[pairs] if len(pairs) else pairs
    stay = (mapped >= 0).all(axis=1) if len(pairs) else np.zeros(0, bool)
    mapped = mapped[stay]
    redo_chunk = np.zeros(n, bool)
    redo_chunk[list(redo_chunks)] = True
    if len(mapped):
        mapped = mapped[~redo_chunk[mapped[:, 0]]]
    chunk_doc = ch.version.table(CHUNKS)
    titles = ch.version.table(DOCUMENTS)
    found_pairs = []
    for c in sorted(redo_chunks):
        cid = _node_id(nodes, b, c)
        doc = chunk_doc.value(cid, "doc_id") if cid in chunk_doc else ""
        title = titles.value(doc, "title") if doc in titles else ""
        row = g.indices[g.indptr[c]:g.indptr[c + 1]]
        for name in title_names(title):
            j = nodes.position(name)
            if j is not None and j >= n_chunks and np.isin(j, row):
                found_pairs.append((c, j))
    subject = np.concatenate([mapped, np.asarray(found_pairs, np.int64).reshape(-1, 2)])
    subject = subject[np.lexsort((subject[:, 1], subject[:, 0]))] if len(subject) else subject.reshape(-1, 2)
    # Columns to compute again: new rows, chunks to redo, and the neighbours of both.
    redo = set(nodes.delta_pos.values()) | redo_chunks
    for c in list(redo_chunks) + [p for p in nodes.delta_pos.values() if p < n_chunks]:
        redo.update(g.indices[g.indptr[c]:g.indptr[c + 1]].tolist())
    redo_cols = np.asarray(sorted(redo), np.int64)
    kinds = nodes.kind_codes()
    table = kind_weights(EDGE_WEIGHTS)
    lens = np.diff(g.indptr)[redo_cols]
    src = np.repeat(redo_cols, lens)
    starts = g.indptr[redo_cols]
    pos = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
    dst = g.indices[pos].astype(np.int64)
    w = table[kinds[src], kinds[dst]] * g.data[pos]
    redone = np.zeros(n, bool)
    redone[redo_cols] = True
    near = subject[redone[subject[:, 0]] | redone[subject[:, 1]]] if len(subject) else subject
    if len(near):
        nn = np.int64(n)
        keys = np.concatenate([near[:, 0] * nn + near[:, 1], near[:, 1] * nn + near[:, 0]])
        w = np.where(np.isin(src * nn + dst, keys), w * SUBJECT_WEIGHT, w)
    keep = w > 0
    src, dst, w = src[keep], dst[keep], w[keep]
    local = np.searchsorted(redo_cols, src)
    out_weight = np.bincount(local, weights=w, minlength=len(redo_cols))
    val = (w / out_weight[local]).astype(np.float32)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(local, minlength=len(redo_cols)))])
    fresh = {int(c): (dst[bounds[i]:bounds[i + 1]], val[bounds[i]:bounds[i + 1]])
             for i, c in enumerate(redo_cols.tolist())}
    walk = _mapped(b, "walk", sp.csc_matrix)
    col_source = source.copy()
    col_source[redo_cols] = -1
    indptr, indices, data = assemble(n, walk, col_source, nodes.ref, fresh, n, np.float32, unsorted)
    m = sp.csc_matrix((data, indices, indptr), shape=(n, n))
    arrays.update(_sparse_files("walk", m))
    old_dangling = np.asarray(b.array("walk.dangling"), np.int64)
    dangling = nodes.new_pos[old_dangling]
    dangling = dangling[(dangling >= 0) & (col_source[np.maximum(dangling, 0)] >= 0)]
    dangling = np.union1d(dangling, redo_cols[out_weight == 0])
    arrays["walk.dangling"] = dangling.astype(np.int64)
    arrays["walk.subject"] = subject


def _node_id(nodes: _Nodes, b: derived.Derived, pos: int) -> str:
    o = int(nodes.order[pos])
    return nodes.new_strings[-1 - o] if o < 0 else nodes.index.strings[o]


# --- entry point ------------------------------------------------------------------------------------------------

def _base(root: Path, uid: str | None, version: int) -> tuple[derived.Derived, dict[str, list[str]]] | None:
    best = None
    for path in root.iterdir() if root.is_dir() else ():
        parsed = derived.parse_name(path.name)
        if parsed is None or parsed[0] != (uid or "index") or parsed[2] != derived.FORMAT:
            continue
        v = parsed[1]
        if v < version and (best is None or v > best[0]) and (path / "DONE").is_file() and (path / _TABLES).is_file():
            best = (v, path)
    if best is None:
        return None
    return derived.Derived(best[1]), json.loads((best[1] / _TABLES).read_text())


def patched(version: Any, root: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """The files of `version`'s structures patched from the newest earlier version's on this node, or None
    (the caller derives them from every row) where that cannot be shown to give the same structures."""
    try:
        found = _base(root, version.store.uid, version.version)
        if found is None:
            log.debug("version %d: no earlier structures on this node", version.version)
            return None
        b, tables = found
        ch = _Change(version, tables)
        for artifact in _USED:
            if artifact.name not in ch.new:
                continue
            added = sum(len(s) + s.n_dead for s in ch.segments(artifact))
            base = sum(len(s) for s in ch.base_table(artifact).segments)
            if added > max(MAX_SHARE * base, MIN_ROWS):
                raise _Refuse(f"{artifact.name}: {added} changed rows on {base}")
        arrays: dict[str, np.ndarray] = {}
        strings: dict[str, Any] = {}
        if b.has("chunk_lexical.shape") != version.has(LEXICAL_CHUNKS):
            raise _Refuse("chunk postings appeared or went")
        if version.has(LEXICAL_CHUNKS):
            _lexical(b, "chunk_lexical", LEXICAL_CHUNKS, ch, arrays, strings)
        entity_lex = version.has(ENTITIES) and version.has(LEXICAL_ENTITIES)
        if b.has("entity_lexical.shape") != entity_lex or b.has("graph.nodes") != version.has(ENTITIES):
            raise _Refuse("entity structures appeared or went")
        if entity_lex:
            _lexical(b, "entity_lexical", LEXICAL_ENTITIES, ch, arrays, strings)
        if version.has(ENTITIES):
            if not b.has("walk.subject"):
                raise _Refuse("the base has no subject edges")
            _graph(b, ch, arrays, strings)
        return arrays, strings
    except _Refuse as exc:
        log.debug("version %d: derived in full: %s", version.version, exc)
    except (OSError, StoreError, KeyError, ValueError) as exc:
        log.debug("version %d: derived in full: the earlier structures are unreadable (%s)", version.version, exc)
    except Exception:  # noqa: BLE001 - a defect here must not keep a reader off new versions: derived in full
        log.warning("version %d: patching its read structures failed; derived in full", version.version,
                    exc_info=True)
    return None
