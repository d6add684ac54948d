"""The vectors stage: text vectors of entities, relations and hyperedges, and the vector collections.

The build embeds every knowledge text (Ray Data) and fills one collection per kind. An update
embeds only the new entities, relations and hyperedges; the batch's vector rows (new chunks,
knowledge, summaries, hyperbolic points) are collected in a `VectorDelta` that the publisher
upserts, and the ids the new version no longer has are retired after it is published.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from hygraph.backends.vectorstore import KINDS, VectorStore
from hygraph.indexing.progress import Stages
from hygraph.indexing.stages.ingest import EmbedPool
from hygraph.indexing.stages.knowledge import KnowledgeChange, KnowledgeView, entity_text, relation_text
from hygraph.indexing.state import IndexState
from hygraph.store.artifacts import ENTITIES, HYPEREDGES, RELATIONS
from hygraph.store.versions import IndexStore

if TYPE_CHECKING:
    from hygraph.backends.embedder import Embedder


@dataclass
class VectorDelta:
    """Vector rows per collection kind to upsert (ids, vectors, layers), and ids to retire after publishing."""

    upserts: dict[str, tuple[list[str], np.ndarray, list[int] | None]] = field(default_factory=dict)
    retired: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, ids: list[str], vectors: np.ndarray, layers: list[int] | None = None) -> None:
        if not ids:
            return
        if kind in self.upserts:
            old_ids, old_vecs, old_layers = self.upserts[kind]
            keep = [i for i, x in enumerate(old_ids) if x not in set(ids)]
            ids = [old_ids[i] for i in keep] + ids
            vectors = np.vstack([old_vecs[keep], vectors])
            layers = None if layers is None else [old_layers[i] for i in keep] + layers  # type: ignore[index]
        self.upserts[kind] = (ids, np.asarray(vectors, np.float32), layers)

    def retire(self, kind: str, ids: Sequence[str]) -> None:
        if ids:
            self.retired.setdefault(kind, []).extend(ids)

    @property
    def rows(self) -> int:
        return sum(len(ids) for ids, _, _ in self.upserts.values()) + sum(len(v) for v in self.retired.values())


def knowledge_texts(kb: KnowledgeView, entity_ids: Sequence[str], relation_ids: Sequence[str],
                    hyperedge_ids: Sequence[str]) -> list[str]:
    name = kb.entities.__getitem__
    return ([entity_text(kb, e) for e in entity_ids]
            + [relation_text(lambda e: name(e).name, kb.relations[r]) for r in relation_ids]
            + [kb.hyperedges[h].text for h in hyperedge_ids])


def build(pool: EmbedPool, kb: KnowledgeView, entity_ids: Sequence[str], relation_ids: Sequence[str],
          hyperedge_ids: Sequence[str], stages: Stages, batch_size: int) -> dict[str, np.ndarray]:
    """Text vectors of every entity, relation and hyperedge, per kind, rows in the given id order.

    Each kind's vectors are an array of their own (not slices of one): the build drops the relations' and
    hyperedges' once their collections are written, and a slice would keep the whole block alive."""
    parts = pool.embed_parts(knowledge_texts(kb, entity_ids, relation_ids, hyperedge_ids),
                             [len(entity_ids), len(relation_ids), len(hyperedge_ids)], stages,
                             "knowledge texts embedded", batch_size)
    return dict(zip(("entities", "relations", "hyperedges"), parts))


def update(state: IndexState, embedder: "Embedder", kc: KnowledgeChange, delta: VectorDelta) -> None:
    """Embed the new entities, relations and hyperedges, and what embeds the name of an entity named anew: its
    own vector and its relations' (a relation's text names both ends); entity rows keep their vector for the
    hierarchy."""
    renamed = [state.require(ENTITIES, e) for e in kc.renamed_entities]
    entities = [*(state.require(ENTITIES, e) for e in kc.new_entities), *renamed]
    # An entity row lists its live relations only.
    relation_ids = dict.fromkeys([*kc.new_relations, *(r for e in renamed for r in e.relations)])
    relations = [state.require(RELATIONS, r) for r in relation_ids]
    hyperedges = [state.require(HYPEREDGES, h) for h in kc.new_hyperedges]

    def name(eid: str) -> str:
        row = state.get(ENTITIES, eid)
        return row.name if row is not None else eid

    texts = ([e.name for e in entities]
             + [f"{name(r.head)} {r.relation} {name(r.tail)}" for r in relations]
             + [h.text for h in hyperedges])
    vecs = embedder.encode(texts) if texts else np.zeros((0, state.dims["text"]), np.float32)
    n_e, n_r = len(entities), len(relations)
    for row, vec in zip(entities, vecs[:n_e]):
        state.put(ENTITIES, replace(row, embedding=vec))
    delta.add("entities", [e.id for e in entities], vecs[:n_e])
    delta.add("relations", [r.id for r in relations], vecs[n_e:n_e + n_r])
    delta.add("hyperedges", [h.id for h in hyperedges], vecs[n_e + n_r:])
    delta.retire("entities", sorted(kc.removed_entities))
    delta.retire("relations", sorted(kc.removed_relations))
    delta.retire("hyperedges", sorted(kc.removed_hyperedges))


class CollectionWriter:
    """A build's collections, one per kind. Each kind is written as soon as the build has its vectors
    (`add`), in a thread of its own, while the build goes on with its later stages: the server builds the
    chunk collection's index during the graph stages and the knowledge collections' during the hierarchy,
    instead of every index build waiting for the last stage. `finish` waits for them all.

    Their names are recorded in the index directory before any is created, so a build that never commits
    (a crash, a kill) leaves nothing `hygraph gc` or the next build does not drop. A failed build's are
    dropped with its version (`Index.publishing`), after `with` waited for the writes still running (a
    collection created after its drop would outlive it).

    A resumed build passes the collections an earlier run of it fully wrote (`kept`, kind -> name): those
    that still exist are kept; `on_written(kind, name)` is told of each collection once it is sealed, by the
    thread that wrote it. It also passes those the earlier run created but did not seal (`partial`; each is
    told to `on_created` once created): each is continued with the rows it lacks where the store can tell
    which it holds (`VectorStore.reopen`), and created again where not. A row is never inserted twice: the
    store does not replace a row of the same key on insert."""

    def __init__(self, vs: VectorStore, store: IndexStore, generation: int, kept: dict[str, str] | None = None,
                 on_written: Callable[[str, str], None] = lambda kind, name: None, keep_empty: bool = False,
                 partial: dict[str, str] | None = None,
                 on_created: Callable[[str, str], None] = lambda kind, name: None) -> None:
        self.vs, self.store, self.generation = vs, store, generation
        self.keep_empty = keep_empty  # an empty index still gets every collection, for inserts to fill
        self.collections: dict[str, str] = {}
        self.kept: list[str] = []  # kinds kept from an earlier run
        self.continued: dict[str, int] = {}  # kinds continued from an earlier run's partial write: rows it had
        self.seconds = 0.0  # from the first collection started to the last one sealed
        self._from_before = dict(kept or {})
        self._partial = dict(partial or {})
        self._written: dict[str, int] = {}  # rows each kind's write sends (set by its own thread once continued)
        self._on_written, self._on_created = on_written, on_created
        self._pool = ThreadPoolExecutor(max_workers=len(KINDS), thread_name_prefix="collection")
        self._running: list[Future[None]] = []
        self._started: float | None = None

    def add(self, kind: str, ids: list[str], vectors: np.ndarray, metric: str = "IP",
            layers: list[int] | None = None) -> None:
        """Start writing one kind's rows; a kind without rows gets no collection unless `keep_empty`."""
        if not (ids or self.keep_empty):
            return
        for done in [f for f in self._running if f.done()]:
            done.result()  # a collection that failed already fails the build now, not after its last stage
        if self._started is None:
            self._started = time.perf_counter()
        name = self.collections[kind] = self.store.collection(self.generation, kind)
        self.store.record_collections(self.generation, [name])
        if self._from_before.get(kind) == name and self.vs.exists(name):
            self.kept.append(kind)
            return
        self._written[kind] = len(ids)
        # Handed over in a list the write empties: a submitted call's arguments live until it returns, and
        # the rows are not needed through the seal (the server's index build, minutes at 10^5 vectors).
        self._running.append(self._pool.submit(self._write_one, kind, name, [(ids, vectors)], metric, layers,
                                               self._partial.get(kind) == name))

    @property
    def vectors_written(self) -> int:
        return sum(self._written.values())

    def finish(self) -> None:
        """Wait until every collection added is written and sealed; the first failure is raised."""
        try:
            for done in as_completed(self._running):
                done.result()
        finally:
            self._running = []
            self._pool.shutdown()  # after a failure: waits for the other writes, so their drop finds them done
            if self._started is not None:
                self.seconds = time.perf_counter() - self._started

    def _write_one(self, kind: str, name: str, rows: list[tuple[list[str], np.ndarray]], metric: str,
                   layers: list[int] | None, partial: bool) -> None:
        ids, vectors = rows.pop()
        held = self.vs.reopen(name, int(vectors.shape[1]), metric) if partial else None  # type: ignore[arg-type]
        if held is not None and held <= set(ids):
            # Continued: only the rows it lacks are sent (inserting one it holds would store it twice).
            lacking = [i for i, x in enumerate(ids) if x not in held]
            if len(lacking) < len(ids):  # else the rows as they are, not a copy of the whole kind
                ids, vectors = [ids[i] for i in lacking], vectors[lacking]
                layers = None if layers is None else [layers[i] for i in lacking]
            self.continued[kind], self._written[kind] = len(held), len(ids)
        else:
            self.vs.create(name, int(vectors.shape[1]), metric)  # type: ignore[arg-type]
            self._on_created(kind, name)
        if ids:
            self.vs.fill(name, ids, vectors, self.generation, layers)
        del ids, vectors  # this write's last reference to them, where the build dropped its own
        self.vs.seal(name)
        # Told now, not when `finish` collects it: the collections are written beside the later stages and
        # `finish` runs after the last of them, so a build killed in between would have to write again every
        # collection it had sealed (the relations' index build alone took 106 s at 20k passages).
        self._on_written(kind, name)
        # Searched by the readers of the version, which load it. What `reopen` loaded (Milvus) or `seal` keeps
        # (FAISS) is let go: held through the build, the collections were 2.5 GiB of the server's memory at 50k
        # passages beside the build's own (docs/bench/build_scale.md). A Milvus collection `seal` made is not
        # loaded, and its release is one request that changes nothing.
        self.vs.release(name)

    def __enter__(self) -> "CollectionWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown()  # waits for the writes still running
