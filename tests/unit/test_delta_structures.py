"""A version's derived structures patched from the previous version's (store/delta.py) equal a full derive.

Versions are written through the store as the updater writes them: one segment per changed artifact with
the changed rows (a changed node's whole neighbour list, kept symmetric) and tombstones for dropped keys.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from hygraph.core.lexical import analyze
from hygraph.store import delta, derived, view_loader
from hygraph.store.artifacts import (CHUNKS, DOCUMENTS, ENTITIES, GRAPH, HYPEREDGES, LEXICAL_CHUNKS, LEXICAL_ENTITIES,
                                     NODE_CHUNK, NODE_ENTITY, NODE_HYPEREDGE, RELATIONS, ChunkRow, DocumentRow,
                                     EntityRow, GraphNodeRow, HyperedgeRow, PostingsRow, RelationRow)
from hygraph.store.manifest import Manifest
from hygraph.store.versions import IndexStore, Version

DIMS = {"text": 2, "cleora": 2}
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu",
         "river", "mountain", "castle", "music", "king", "queen", "film", "novel"]
ENTITY_NAMES = ["mark king", "ada", "bob", "cy", "dan", "eve", "fay", "gus", "hal", "ivy", "jo", "kim", "lee",
                "max", "ned", "oz", "pia", "quin", "ray", "sam"]


def _postings(key: str, text: str) -> PostingsRow:
    counts: dict[str, int] = {}
    for t in analyze(text):
        counts[t] = counts.get(t, 0) + 1
    return PostingsRow(key, tuple(counts), np.asarray(list(counts.values()), np.int64))


class Corpus:
    """A small index's logical content; `write` publishes what changed since the last write."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.scores = random.Random(7)  # the rows' extraction scores, drawn apart from the corpus's changes
        self.docs: dict[str, tuple[str, list[str]]] = {}  # doc -> (title, chunks)
        self.chunk_text: dict[str, str] = {}
        self.chunk_doc: dict[str, str] = {}
        self.entities: set[str] = set()
        self.hyperedges: set[str] = set()
        self.adj: dict[str, set[str]] = {}
        self.kind: dict[str, int] = {}
        self.relations: dict[str, tuple[str, str]] = {}
        self.dirty: dict[str, set[str]] = {}
        self.dead: dict[str, set[str]] = {}
        self.serial = 0

    def _touch(self, artifact: str, key: str) -> None:
        self.dirty.setdefault(artifact, set()).add(key)
        self.dead.get(artifact, set()).discard(key)

    def _drop(self, artifact: str, key: str) -> None:
        self.dead.setdefault(artifact, set()).add(key)
        self.dirty.get(artifact, set()).discard(key)

    def _node(self, node: str, kind: int) -> None:
        if node not in self.adj:
            self.adj[node], self.kind[node] = set(), kind
            (self.entities if kind == NODE_ENTITY else self.hyperedges if kind == NODE_HYPEREDGE else set()).add(node)
            self._touch("graph", node)
            if kind == NODE_ENTITY:
                self._touch("entities", node)
                self._touch("lexical_entities", node)
            if kind == NODE_HYPEREDGE:
                self._touch("hyperedges", node)

    def _link(self, a: str, b: str) -> None:
        if a != b and b not in self.adj[a]:
            self.adj[a].add(b)
            self.adj[b].add(a)
            self._touch("graph", a)
            self._touch("graph", b)

    def _unnode(self, node: str) -> None:
        for other in list(self.adj.pop(node)):
            self.adj[other].discard(node)
            self._touch("graph", other)
        self._drop("graph", node)
        self.entities.discard(node)
        self.hyperedges.discard(node)
        if self.kind[node] == NODE_HYPEREDGE:
            self._drop("hyperedges", node)
        if self.kind.pop(node) == NODE_ENTITY:
            self._drop("entities", node)
            self._drop("lexical_entities", node)
            for rid, (h, t) in list(self.relations.items()):
                if node in (h, t):
                    del self.relations[rid]
                    self._drop("relations", rid)

    def insert(self, doc: str | None = None) -> None:
        rng = self.rng
        if doc is None:
            self.serial += 1
            doc = f"d{self.serial}"
        else:
            self.delete(doc)
        title = rng.choice(["Mark King (musician)", "Ada", "Castle", rng.choice(ENTITY_NAMES).title(), "Zed"])
        chunks = [f"{doc}:{i}" for i in range(rng.randint(1, 3))]
        self.docs[doc] = (title, chunks)
        self._touch("documents", doc)
        for c in chunks:
            self.chunk_text[c], self.chunk_doc[c] = " ".join(rng.choices(WORDS, k=rng.randint(1, 8))), doc
            self._touch("chunks", c)
            self._touch("lexical_chunks", c)
            self._node(c, NODE_CHUNK)
            for e in rng.sample(ENTITY_NAMES, rng.randint(0, 4)):
                self._node(e, NODE_ENTITY)
                self._link(c, e)
                self._touch("entities", e)  # a new mention rewrites the row, and may change its score
            others = [x for x in self.chunk_doc if x != c]
            for other in rng.sample(others, min(len(others), rng.randint(0, 2))):
                self._link(c, other)
            if rng.random() < 0.3:
                h = f"h{rng.randint(0, 6)}"
                self._node(h, NODE_HYPEREDGE)
                self._link(h, c)
                self._touch("hyperedges", h)
                for e in rng.sample(sorted(self.entities), min(2, len(self.entities))):
                    self._link(h, e)
        ents = sorted(self.entities)
        for _ in range(rng.randint(0, 2)):
            if len(ents) >= 2:
                h, t = rng.sample(ents, 2)
                rid = f"r{h}-{t}-{rng.randint(0, 3)}"
                self.relations[rid] = (h, t)
                self._touch("relations", rid)
                self._link(h, t)

    def delete(self, doc: str) -> None:
        if doc not in self.docs:
            return
        _, chunks = self.docs.pop(doc)
        self._drop("documents", doc)
        for c in chunks:
            del self.chunk_text[c], self.chunk_doc[c]
            self._drop("chunks", c)
            self._drop("lexical_chunks", c)
            self._unnode(c)
        for e in [e for e in self.entities if not self.adj[e]]:
            self._unnode(e)
        for h in [h for h in self.hyperedges if not self.adj[h]]:
            self._unnode(h)

    def rows(self, artifact: str, key: str) -> object:
        if artifact == "documents":
            title, chunks = self.docs[key]
            return DocumentRow(key, title, f"text {key}", tuple(chunks))
        if artifact == "chunks":
            return ChunkRow(key, self.chunk_doc[key], 0, self.chunk_text[key], 1, "", (), (), (),
                            np.zeros(2, np.float32))
        if artifact == "lexical_chunks":
            return _postings(key, self.chunk_text[key])
        if artifact == "lexical_entities":
            return _postings(key, key)
        if artifact == "entities":  # each write scores it anew (graph.score follows the rows)
            return EntityRow(key, key, "NAME", "", self.scores.random(), (), (), (), (key,), np.ones(1, np.int64),
                             np.zeros(2, np.float32))
        if artifact == "hyperedges":
            return HyperedgeRow(key, f"fact {key}", tuple(sorted(self.entities & self.adj[key])), self.scores.random(),
                                ())
        if artifact == "relations":
            h, t = self.relations[key]
            return RelationRow(key, h, "rel", t, 1.0, ())
        assert artifact == "graph"
        nbrs = list(self.adj[key])
        self.rng.shuffle(nbrs)
        return GraphNodeRow(key, self.kind[key], tuple(nbrs), np.zeros(2, np.float32))

    ARTIFACTS = {a.name: a for a in (DOCUMENTS, CHUNKS, LEXICAL_CHUNKS, LEXICAL_ENTITIES, ENTITIES, RELATIONS,
                                     HYPEREDGES, GRAPH)}

    def write(self, store: IndexStore) -> int:
        base = store.open() if store.current_version() is not None else None
        with store.begin() as w:
            for name, artifact in self.ARTIFACTS.items():
                rows = [self.rows(name, k) for k in sorted(self.dirty.get(name, ()))]
                dead = sorted(self.dead.get(name, ()))
                if base is None:
                    w.replace(artifact, rows, DIMS)
                else:
                    w.change(base.table(artifact), artifact, rows, dead, DIMS)
            w.commit(Manifest(dims=DIMS, graph=True))
            self.dirty, self.dead = {}, {}
            return w.version


def _full(version: Version, directory: Path) -> derived.Derived:
    view_loader._write_structures(directory, view_loader._derive(version),
                                  {n: list(r.segments) for n, r in version.manifest.tables.items()})
    return derived.Derived(directory)


def _same(version: Version, patched: derived.Derived, full: derived.Derived) -> None:
    """The patched files read as structures equal to the full derive's, with equal scores for every term."""
    p, f = view_loader._read_structures(patched), view_loader._read_structures(full)
    for name in ("chunk_lexical", "entity_lexical"):
        a, b = getattr(p, name), getattr(f, name)
        assert list(a.ids) == list(b.ids), name
        assert len(a.terms) == len(b.terms) and len(set(a.terms)) == len(a.terms), name
        perm = np.asarray([a.term_index[t] for t in b.terms], np.int64)  # KeyError: a term is missing
        assert [a.terms[j] for j in perm[:50]] == list(b.terms[:50])
        # Each term's postings, idf and each document's length norm equal: so does every query's score.
        assert (a.postings[:, perm] != b.postings).nnz == 0, name
        assert np.array_equal(a.idf[perm], b.idf) and np.array_equal(a._length_norm, b._length_norm), name
        probe = list(b.terms[:: max(1, len(b.terms) // 20)])
        assert a.scores(probe).tolist() == b.scores(probe).tolist()
        assert a.top_k(probe, 5) == b.top_k(probe, 5)
        assert "nope" not in a.term_index
    ga, gb = p.graph, f.graph
    assert list(ga.chunk_ids) == list(gb.chunk_ids)
    assert list(ga.entity_ids) == list(gb.entity_ids)
    assert list(ga.hyperedge_ids) == list(gb.hyperedge_ids)
    for i, node in enumerate(gb.node_ids[:: max(1, gb.n_nodes // 2000)]):
        assert ga.node_index[node] == gb.node_index[node]
    assert (ga.adjacency != gb.adjacency).nnz == 0
    assert np.array_equal(ga.adjacency.indices, gb.adjacency.indices)
    assert np.array_equal(ga.adjacency.indptr, gb.adjacency.indptr)
    assert np.array_equal(p.graph_score, f.graph_score)
    # Each entity's and hyperedge's node carries its row's extraction score (hypergraph's expansion reads them).
    for ids, artifact, first in ((gb.entity_ids, ENTITIES, gb.entity_slice.start),
                                 (gb.hyperedge_ids, HYPEREDGES, gb.hyperedge_slice.start)):
        for i in range(0, len(ids), max(1, len(ids) // 200)):
            row = version.table(artifact).get(ids[i]) if version.has(artifact) else None
            assert f.graph_score[first + i] == (row.score if row is not None else 0.0), ids[i]
    assert not f.graph_score[gb.chunk_slice].any()
    assert list(ga.relation_ids) == list(gb.relation_ids)
    assert ga.relation_heads.tolist() == gb.relation_heads.tolist()
    assert ga.relation_tails.tolist() == gb.relation_tails.tolist()
    assert np.array_equal(p.walk.matrix.indptr, f.walk.matrix.indptr)
    assert np.array_equal(p.walk.matrix.indices, f.walk.matrix.indices)
    assert np.allclose(p.walk.matrix.data, f.walk.matrix.data, rtol=1e-6, atol=0)
    assert p.walk.dangling.tolist() == f.walk.dangling.tolist()
    sa = {tuple(x) for x in patched.array("walk.subject").tolist()}
    assert sa == {tuple(x) for x in full.array("walk.subject").tolist()}
    for name in ("chunk_lexical.rows", "entity_lexical.rows", "relations.rows"):
        assert patched.array(name).tolist() == full.array(name).tolist(), name


def _load(store: IndexStore) -> tuple[Version, derived.Derived | None]:
    """`structures` of the current version as a reader loads it; the patched directory or None (full)."""
    version = store.open()
    got = delta.patched(version, store.derived_dir)
    view_loader.structures(version)
    return version, (derived.Derived(store.derived_dir / derived.directory_name(store.uid, version.version))
                     if got is not None else None)


def test_an_insert_and_a_delete_are_patched_and_equal_a_full_derive(tmp_path: Path) -> None:
    corpus = Corpus(random.Random(1))
    store = IndexStore(tmp_path / "index", create=True)
    for _ in range(30):
        corpus.insert()
    corpus.write(store)
    view_loader.structures(store.open())  # the base, derived in full
    for step in ("insert", "delete", "update"):
        if step == "insert":
            corpus.insert()
        elif step == "delete":
            corpus.delete("d3")
        else:
            corpus.insert("d5")
        corpus.write(store)
        version, patched = _load(store)
        assert patched is not None, step
        _same(version, patched, _full(version, tmp_path / f"full{version.version}"))


@pytest.mark.parametrize("seed", range(6))
def test_random_inserts_updates_and_deletes_are_patched_exactly(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    corpus = Corpus(rng)
    store = IndexStore(tmp_path / "index", create=True)
    for _ in range(rng.randint(25, 40)):
        corpus.insert()
    corpus.write(store)
    view_loader.structures(store.open())
    patched_count = 0
    for _ in range(12):
        op = rng.random()
        if op < 0.4:
            corpus.insert()
        elif op < 0.7 and corpus.docs:
            corpus.insert(rng.choice(sorted(corpus.docs)))
        elif corpus.docs:
            corpus.delete(rng.choice(sorted(corpus.docs)))
        corpus.write(store)
        version, patched = _load(store)
        full = _full(version, tmp_path / f"full{version.version}")
        if patched is not None:
            patched_count += 1
            _same(version, patched, full)
        else:  # what the reader wrote was derived in full: it equals a full derive too
            _same(version, derived.Derived(store.derived_dir / derived.directory_name(store.uid, version.version)),
                  full)
    assert patched_count >= 6


def test_no_earlier_structures_a_compaction_or_one_way_lists_derive_in_full(tmp_path: Path) -> None:
    corpus = Corpus(random.Random(3))
    store = IndexStore(tmp_path / "index", create=True)
    for _ in range(30):
        corpus.insert()
    corpus.write(store)
    assert delta.patched(store.open(), store.derived_dir) is None  # nothing on this node yet
    view_loader.structures(store.open())
    corpus.insert()
    corpus.write(store)
    assert delta.patched(store.open(), store.derived_dir) is not None
    # A compaction rewrites the graph's segments: the base's no longer prefix the version's.
    version = store.open()
    with store.begin() as w:
        for name, ref in version.manifest.tables.items():
            table = version.table(Corpus.ARTIFACTS[name])
            if name == "graph":
                w.compact(table, Corpus.ARTIFACTS[name], full=True)
            else:
                w.keep(table, Corpus.ARTIFACTS[name])
        w.commit(Manifest(dims=DIMS, graph=True))
    assert delta.patched(store.open(), store.derived_dir) is None
    view_loader.structures(store.open())
    # A one-way edge in the new rows.
    version = store.open()
    node = next(iter(corpus.chunk_doc))
    other = next(n for n in corpus.adj if n not in corpus.adj[node] and n != node)
    with store.begin() as w:
        for name in version.manifest.tables:
            w.keep(version.table(Corpus.ARTIFACTS[name]), Corpus.ARTIFACTS[name])
        row = GraphNodeRow(node, NODE_CHUNK, tuple(corpus.adj[node] | {other}), np.zeros(2, np.float32))
        w.change(version.table(GRAPH), GRAPH, [row], [], DIMS)
        w.commit(Manifest(dims=DIMS, graph=True))
    assert delta.patched(store.open(), store.derived_dir) is None


def test_a_delta_above_the_share_is_derived_in_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = Corpus(random.Random(4))
    store = IndexStore(tmp_path / "index", create=True)
    for _ in range(30):
        corpus.insert()
    corpus.write(store)
    view_loader.structures(store.open())
    for _ in range(10):
        corpus.insert()
    corpus.write(store)
    monkeypatch.setattr(delta, "MAX_SHARE", 0.01)
    monkeypatch.setattr(delta, "MIN_ROWS", 1)
    assert delta.patched(store.open(), store.derived_dir) is None


def test_strings_and_keys_are_patched_by_runs() -> None:
    values = ["a", "bb", "", "ccc", "d"]
    enc = [v.encode() for v in values]
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in enc])]).astype(np.int64)
    data = np.frombuffer(b"".join(enc), np.uint8)
    got = delta.gather_strings(offsets, data, np.array([0, -1, 1, 3, -2, 4]), ["xy", "é"])
    out = [bytes(got.data[got.offsets[i]:got.offsets[i + 1]]).decode() for i in range(len(got.offsets) - 1)]
    assert out == ["a", "xy", "bb", "ccc", "é", "d"]
    from hygraph.store.segment import hashes
    keys = hashes(values)
    o = np.argsort(keys, kind="stable")
    patched = delta.patch_keys(np.stack([keys[o], o.astype(np.int64)]), np.array([0, 2, -1, 3, 5]), ["xy", "é"],
                               np.array([1, 4]))
    want = dict(zip(["a", "bb", "ccc", "d", "xy", "é"], [0, 2, 3, 5, 1, 4]))
    assert sorted(zip(patched[0].tolist(), patched[1].tolist())) == sorted(
        zip(hashes(want).tolist(), want.values()))


def test_mirrored_lists() -> None:
    assert delta.mirrored(np.array([0, 1, 1, 2]), np.array([1, 0, 2, 1]), 3)
    assert not delta.mirrored(np.array([0, 0, 2]), np.array([1, 1, 1]), 3)
    assert delta.mirrored(np.zeros(0, np.int64), np.zeros(0, np.int64), 0)


def test_copies_of_an_index_keep_patching(tmp_path: Path) -> None:
    corpus = Corpus(random.Random(5))
    store = IndexStore(tmp_path / "index", create=True)
    for _ in range(20):
        corpus.insert()
    corpus.write(store)
    view_loader.structures(store.open())
    shutil.rmtree(store.derived_dir)  # a node without the base's files derives in full, then patches
    corpus.insert()
    corpus.write(store)
    assert _load(store)[1] is None
    corpus.delete("d2")
    corpus.write(store)
    version, patched = _load(store)
    assert patched is not None
    _same(version, patched, _full(version, tmp_path / "full"))
