"""The build after ingest, in one Ray actor: every stage that needs the whole corpus at once.

The `hygraph index` process (the driver, indexing/build.py) validates the corpus in one streaming pass and
runs the ingest, whose batches land as shards in the build's checkpoint; it then hands the rest to an
`Assembler` actor, which Ray places on a worker node with the memory it needs declared, and only relays
the actor's progress lines and returns its result. The actor reads the corpus and the shards, runs
knowledge, hybrid graph, Cleora, the knowledge-text embedding and hierarchy, while hyperbolic and lexical
run beside them as Ray tasks of their own (indexing/beside.py), writes the vectors and the snapshot, and
commits the version. So the driver holds counts and file spans, never the corpus, a vector or a stage's
output.

Everything is validated before anything is written; vectors go into collections named after the new
version, and a failure drops them and the version's segments, so a failed build leaves the previous
version serving untouched. Each finished stage is kept in the checkpoint (indexing/checkpoint.py): a
lost actor (its node died) is replaced once and resumes from there, and so does a rerun of the command.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from hygraph.backends.llm import make_llm
from hygraph.backends.llm.base import Usage
from hygraph.config import HygraphConfig
from hygraph.errors import HygraphError
from hygraph.indexing import checkpoint, knowledge_shuffle
from hygraph.indexing.beside import Beside, hyperbolic_task, lexical_task
from hygraph.indexing.checkpoint import Checkpoint, SnapshotTables, resumable
from hygraph.indexing.progress import Stages
from hygraph.indexing.stages import graph as graph_stage
from hygraph.indexing.stages import hierarchy, hyperbolic, ingest, knowledge, structure, vectors
from hygraph.indexing.stages.knowledge_tables import KnowledgeTables
from hygraph.model import Document, TripleRecord, load_corpus, load_triples
from hygraph.store.artifacts import (CHUNKS, DOCUMENTS, ENTITIES, GRAPH, HYPEREDGES, HYPERPLANES, PARENTS,
                                     RELATIONS, SUMMARIES, TERMS, Artifact, ChunkRow, DocumentRow, PostingsRow,
                                     metadata_text)
from hygraph.store.index import Index
from hygraph.store.manifest import HierarchyInfo, HyperbolicInfo, Manifest
from hygraph.store.objects import is_remote
from hygraph.store.versions import IndexStore

# Measured driver growth of the single-process build (docs/bench/build_small.md): about 146 KiB per passage.
BYTES_PER_PASSAGE = 150 * 1024
# A dead node's actors stop answering (ActorUnavailableError) before Ray declares the node dead: a replacement
# started in between can be placed on that node and be lost as well (loadtests/bench_node_kill.py).
ASSEMBLER_ATTEMPTS = 3


@dataclass
class Assembly:
    """What the assembling actor needs: the build's inputs (absolute paths: the actor's working directory is
    not the command's), its checkpoint and what the driver measured."""

    cfg: HygraphConfig
    corpus: str
    triples: str | None
    kg: str | None
    index_dir: str
    local: str  # this index's directory on the node that holds the checkpoint (local_dir_of)
    graph: bool
    extract: bool
    cache_dir: str  # the LLM cache
    ckpt: Checkpoint
    driver_peak_rss: int


def assemble(job: Assembly, stages: Stages, before_commit: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Read the ingest's shards, run every later stage, write vectors and snapshot, commit the version
    (once `before_commit` returns)."""
    cfg = job.cfg
    with Beside(stages, job.ckpt, pinned=is_remote(job.index_dir)) as beside:
        # Hyperbolic needs the ingest's output only: started first, it runs beside every stage below. Lexical
        # needs the entity ids of the hybrid graph too (`_graph_stages` starts it); without a graph, nothing.
        if job.graph and cfg.hyperbolic.enabled:
            beside.start("hyperbolic", hyperbolic_task, cfg.hyperbolic, job.ckpt, job.corpus,
                         num_gpus=cfg.indexing.hyperbolic_num_gpus)
        if not job.graph:
            beside.start("lexical", lexical_task, job.ckpt, job.corpus, None)
        return _assemble(job, stages, beside, before_commit)


def _assemble(job: Assembly, stages: Stages, beside: Beside, before_commit: Callable[[], None]) -> dict[str, Any]:
    cfg, ckpt = job.cfg, job.ckpt
    docs = load_corpus(job.corpus)
    records = load_triples(job.triples) if job.triples else None
    with stages.stage("read ingest shards"):
        ing = ingest.read_shards(ckpt.shard_dir("ingest"), docs, job.extract)
    usage = Usage()
    if ing.extract_calls:
        usage.count("extract", calls=ing.extract_calls)
    built = Built(docs, ing)
    store = IndexStore(job.index_dir, **cfg.store.model_dump())
    index = Index(cfg, store)
    try:
        previous = store.current_version()
        # Journal jobs already applied to the replaced version stay applied: the rebuild takes
        # over its offset, and jobs after it are applied on top of the new version.
        offset = store.manifest(previous).journal_offset if previous is not None else 0
        # The version is numbered now, not after the last stage: its collections are named after it, and each
        # is written as soon as its vectors exist, while the later stages run. Once it is published, the
        # versions before it go when their grace ends, with their segments and collections, and so do the
        # collections of builds that died before committing.
        with index.publishing(prefer=ckpt.record.generation, warn=stages.note, waiting=stages.note,
                              keep=ckpt.table_segments()) as w, \
                vectors.CollectionWriter(index.vectors, store, w.version, kept=ckpt.kept_collections(w.version),
                                         on_written=ckpt.collection_written,
                                         partial=ckpt.partial_collections(w.version),
                                         on_created=ckpt.collection_created) as writer:
            tables = SnapshotTables(w, ckpt)
            if tables.kept:
                stages.note(f"write snapshot: tables {', '.join(tables.kept)} kept from the checkpoint")
            writer.add("chunks", built.chunk_ids, ing.embeddings)
            if job.graph:
                _graph_stages(cfg, job, built, records, stages, beside, usage, writer, tables)
            built.lexical = beside.result("lexical", lambda: checkpoint.load_lexical(ckpt, job.graph))
            with stages.stage("write snapshot"):
                manifest = built.write_tables(tables, cfg, job.graph)
            with stages.stage("write vectors"):  # what is left of them once every stage is done
                writer.finish()
            stages.note(f"write vectors: {writer.vectors_written:,} vectors in {writer.seconds:.1f} s since the "
                        "first collection started, beside the stages after it")
            if writer.kept:
                stages.note(f"write vectors: collections {', '.join(writer.kept)} kept from the checkpoint")
            if writer.continued:
                stages.note("write vectors: collections continued from the checkpoint with the rows they lacked: "
                            + ", ".join(f"{k} ({n:,} rows kept)" for k, n in writer.continued.items()))
            manifest.generation, manifest.collections = w.version, writer.collections
            manifest.config_hash, manifest.journal_offset = cfg.index_hash(), offset
            manifest.llm_calls = usage.calls()
            manifest.stats.update(_accounting(stages, ckpt, writer, tables, w.bytes_written, job.driver_peak_rss))
            before_commit()
            w.commit(manifest)
        ckpt.remove()
    finally:
        index.close()
    manifest.stats["seconds_per_stage"] = stages.seconds
    counts = manifest.counts
    return {"version": w.version, **{k: counts[k] for k in
                                   ("documents", "chunks", "entities", "relations", "hyperedges", "summaries")},
            "layers": manifest.stats.get("layers", 0), "llm_calls": usage.calls(),
            "resumed_stages": ckpt.resumed, "stats": manifest.stats}


class _Relay:
    """The actor's progress lines, kept until the driver fetches them (and in the actor's own Ray log)."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        with self._lock:
            self._lines.append(line)

    def drain(self) -> list[str]:
        with self._lock:
            lines, self._lines = self._lines, []
        return lines


class Assembler:
    """The Ray actor that runs `assemble` (two threads: `run`, and `drain`, which the driver calls every
    second for the progress lines and which is the actor's proof that the driver still waits).

    Ray ends an actor whose driver died, but not at once (about 2 s after a SIGKILL here): the commit
    waits for the driver's next call, so a killed command's actor never publishes a version that the
    rerun of the command would not know about.
    """

    DRIVER_GONE_S = 60.0  # a driver that stopped calling: not committing (Ray will have ended the actor)

    def __init__(self) -> None:
        self.relay = _Relay()
        self._called = threading.Event()

    def run(self, job: Assembly, stages: Stages) -> dict[str, Any] | HygraphError:
        """`assemble`'s result, or the error it raised on purpose (handed back whole, not as a Ray error)."""
        stages.emit, stages.own_report, stages.own_rss = self.relay, ingest.worker_report, ingest.current_rss
        job.ckpt.reload()
        try:
            return assemble(job, stages, self._driver_waits)
        except HygraphError as exc:
            return exc

    def drain(self) -> list[str]:
        self._called.set()
        return self.relay.drain()

    def _driver_waits(self) -> None:
        self._called.clear()
        if not self._called.wait(self.DRIVER_GONE_S):
            raise HygraphError(f"the build's driver stopped polling for {self.DRIVER_GONE_S:.0f} s: not committing")


def run_assembler(job: Assembly, stages: Stages, passages: int) -> dict[str, Any]:
    """Run `assemble` in an `Assembler` actor and relay its progress to stderr; a lost actor (node death) is
    replaced and resumes from the checkpoint, up to `ASSEMBLER_ATTEMPTS` actors in all."""
    import ray
    from ray.exceptions import RayActorError

    def attempt() -> dict[str, Any] | HygraphError:
        actor = _start_assembler(job, stages, passages)
        try:
            return _relayed(ray, actor, actor.run.remote(job, stages))
        finally:
            ray.kill(actor)

    for nth in range(1, ASSEMBLER_ATTEMPTS + 1):
        try:
            result = attempt()
            break
        except RayActorError as exc:
            if nth == ASSEMBLER_ATTEMPTS:
                raise
            stages.note(f"the assembling actor was lost ({type(exc).__name__}): a new one resumes from the "
                        "checkpoint")
    if isinstance(result, HygraphError):
        raise result
    return result


def _relayed(ray: Any, actor: Any, ref: Any) -> Any:
    """The result of `ref`, printing the actor's progress lines each second until it is ready."""
    while True:
        ready, _ = ray.wait([ref], timeout=1.0)
        for line in ray.get(actor.drain.remote()):
            print(line, file=sys.stderr, flush=True)
        if ready:
            return ray.get(ref)


def _start_assembler(job: Assembly, stages: Stages, passages: int) -> Any:
    """The actor, with the memory the build needs declared to Ray (`indexing.assembler_memory_gb`, else an
    estimate from the corpus size, capped at what the largest node that can run it offers). An index on object
    storage keeps its checkpoint in this node's cache directory, so its actor is pinned to this node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    icfg = job.cfg.indexing
    pinned = is_remote(job.index_dir)
    here = ray.get_runtime_context().get_node_id()
    # Only a node the actor fits on by its other resources: a head with no CPUs may offer more memory than
    # any worker, and an actor asking for that would wait forever.
    hosts = [n for n in ray.nodes() if n["Alive"] and (
        n["NodeID"] == here if pinned else n["Resources"].get("CPU", 0) >= icfg.assembler_num_cpus
        and n["Resources"].get("GPU", 0) >= icfg.assembler_num_gpus)]
    largest = max((n["Resources"].get("memory", 0) for n in hosts), default=0)
    want = (int(icfg.assembler_memory_gb * 2**30) if icfg.assembler_memory_gb
            else (1 << 30) + BYTES_PER_PASSAGE * passages)
    memory = int(min(want, largest)) if largest else want
    if memory < want:
        stages.note(f"assemble: the build wants about {want / 2**30:.1f} GiB; the largest node that can run it "
                    f"offers {largest / 2**30:.1f} GiB")
    options: dict[str, Any] = {"num_cpus": icfg.assembler_num_cpus, "num_gpus": icfg.assembler_num_gpus,
                               "memory": memory, "max_concurrency": 2}
    if pinned:
        # No CPU share: the node running this command may be a head that offers none.
        options.update(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
    return ray.remote(Assembler).options(**options).remote()


def _accounting(stages: Stages, ckpt: Checkpoint, writer: vectors.CollectionWriter, tables: SnapshotTables,
                segment_bytes: int, driver_peak_rss: int) -> dict[str, Any]:
    """The manifest's statistics of how this run of the build went."""
    return {"seconds_per_stage": stages.seconds, "resumed_stages": ckpt.resumed,
            "seconds_of_resumed_stages": {s: ckpt.record.seconds[s] for s in ckpt.resumed},
            "collections_kept": writer.kept, "collections_continued": dict(writer.continued),
            "tables_kept": tables.kept,
            "driver_peak_rss_bytes": driver_peak_rss,
            "worker_peak_rss_bytes": max(stages.worker_rss.values(), default=0),
            "worker_peak_rss_bytes_per_stage": dict(stages.worker_rss),
            "worker_rss_bytes_after_stage": dict(stages.rss_after),
            "nodes_per_stage": {s: sorted(n) for s, n in stages.worker_nodes.items()},
            "worker_peak_rss_bytes_per_node": dict(sorted(stages.node_rss.items())),
            "bytes_written": segment_bytes, "checkpoint_bytes_written": stages.bytes_written + ckpt.bytes_written,
            "vectors_written": writer.vectors_written,
            "vectors_per_s": round(writer.vectors_written / writer.seconds, 1) if writer.seconds > 0 else 0.0}



def build_knowledge(ing: ingest.Ingested, triples: list[TripleRecord] | None, kg: str | Path | None,
                    stages: Stages, pinned: bool) -> KnowledgeTables:
    """The merged knowledge of the chunks' extractions (or of the triples mapped onto them), then of the imported
    knowledge graph's facts, merged by Ray tasks (indexing/knowledge_shuffle.py)."""
    extractions = (knowledge.extractions_from_triples(ing.chunks, triples) if triples is not None
                   else ing.extractions)
    blocks = knowledge_shuffle.blocks_of(extractions, knowledge.load_kg(kg) if kg else None)
    return KnowledgeTables(knowledge_shuffle.merge(blocks, stages, pinned), [c.id for c in ing.chunks])


class Built:
    """What the build stages produced, until it is written."""

    def __init__(self, docs: list[Document], ing: ingest.Ingested) -> None:
        self.docs, self.ing = docs, ing
        self.chunk_ids = [c.id for c in ing.chunks]
        self.kb: knowledge.KnowledgeView | None = None
        self.graph: graph_stage.HybridGraph | None = None
        self.cleora: np.ndarray | None = None
        self.vecs: dict[str, np.ndarray] = {}
        self.hier: hierarchy.HierarchyResult | None = None
        self.hyp: hyperbolic.Trained | None = None
        self.lexical: dict[Artifact[PostingsRow], pa.Table] = {}

    def write_tables(self, tables: SnapshotTables, cfg: HygraphConfig, graph: bool) -> Manifest:
        """Write every table of the snapshot that `tables` does not hold already (kept from a killed run of this
        build). Each table's rows are made just before it is written and dropped just after (and the lexical
        postings with them): at most one table's Python rows and Arrow copy are held at a time, not every
        table's at once."""
        dims = {"text": int(self.ing.embeddings.shape[1]), "cleora": cfg.cleora.dim}
        if not tables.has(DOCUMENTS):
            by_doc: dict[str, list[str]] = {}
            for c in self.ing.chunks:
                by_doc.setdefault(c.doc_id, []).append(c.id)
            tables.replace(DOCUMENTS, [DocumentRow(d.id, d.title, d.text, tuple(by_doc.get(d.id, ())),
                                                   metadata_text(d.metadata)) for d in self.docs], dims)
            del by_doc
        if not tables.has(CHUNKS):
            tables.replace(CHUNKS, self._chunk_rows(), dims)
        while self.lexical:
            artifact = next(iter(self.lexical))
            table = self.lexical.pop(artifact)
            if not tables.has(artifact):
                tables.replace_table(artifact, table)
            del table
        counts = {"documents": len(self.docs), "chunks": len(self.ing.chunks), "entities": 0, "relations": 0,
                  "hyperedges": 0, "summaries": 0}
        manifest = Manifest(embedder_model=cfg.embedder.model, dims=dims, graph=graph, counts=counts)
        if not graph:
            return manifest
        if not all(tables.has(a) for a in (ENTITIES, RELATIONS, HYPEREDGES)):
            assert self.kb is not None and self.graph is not None
            made = knowledge.build_rows(self.kb, self.graph.entity_ids, self.graph.hyperedge_ids,
                                        self.vecs["entities"])
            for artifact, rows in zip((ENTITIES, RELATIONS, HYPEREDGES), made):
                if not tables.has(artifact):
                    tables.replace(artifact, rows, dims)
                del rows
        counts.update(entities=tables.rows(ENTITIES), relations=tables.rows(RELATIONS),
                      hyperedges=tables.rows(HYPEREDGES))
        if not tables.has(GRAPH):
            assert self.graph is not None and self.cleora is not None
            tables.replace(GRAPH, graph_stage.build_rows(self.graph, self.cleora), dims,
                           stats={"edges": graph_stage.edge_counts(self.graph)})
        manifest.stats["edges"] = tables.stats(GRAPH)["edges"]
        if self.hier is not None:
            if not all(tables.has(a) for a in (SUMMARIES, PARENTS, HYPERPLANES)):
                for artifact, made in zip((SUMMARIES, PARENTS, HYPERPLANES), self.hier.rows()):
                    if not tables.has(artifact):
                        tables.replace(artifact, made, dims)
            counts["summaries"] = tables.rows(SUMMARIES)
            manifest.stats.update(hierarchy.stats(self.hier.layers, [len(ch) for ch in self.hier.children]))
            manifest.hierarchy = HierarchyInfo(self.hier.partitioner, self.hier.n_layers,
                                               manifest.stats["segments_per_layer"])
        if self.hyp is not None:
            if not tables.has(TERMS):
                tables.replace(TERMS, self.hyp.rows(self.chunk_ids), dims)
            manifest.hyperbolic = HyperbolicInfo(self.hyp.M, cfg.hyperbolic.dim, cfg.hyperbolic.seed)
        return manifest

    def _chunk_rows(self) -> list[ChunkRow]:
        contributions = knowledge.per_chunk(self.kb) if self.kb is not None else {}
        none = knowledge.ChunkKnowledge()
        rows = []
        for c, vec in zip(self.ing.chunks, self.ing.embeddings):
            ck = contributions.get(c.id, none)
            rows.append(ChunkRow(c.id, c.doc_id, c.ordinal, c.text, c.n_tokens, c.title, tuple(ck.entities),
                                 tuple(ck.relations), tuple(ck.hyperedges), vec))
        return rows


# What needs the knowledge and the hybrid graph: these stages, and these tables of the snapshot.
_FROM_KNOWLEDGE = ("lexical", "cleora", "embed entities, relations, hyperedges", "hierarchy")
_TABLES_FROM_KNOWLEDGE = (CHUNKS, ENTITIES, RELATIONS, HYPEREDGES, GRAPH)


def _graph_stages(cfg: HygraphConfig, job: Assembly, built: Built, records: list[TripleRecord] | None,
                  stages: Stages, beside: Beside, usage: Usage, writer: vectors.CollectionWriter,
                  tables: SnapshotTables) -> None:
    ing, ckpt, cache_dir = built.ing, job.ckpt, job.cache_dir
    # The hybrid graph is a pure, quick function of the knowledge: not checkpointed, derived again on resume unless
    # every stage and table that reads it and the knowledge is kept (a build killed late in its snapshot); then the
    # knowledge is not read either.
    if all(ckpt.done(s) for s in _FROM_KNOWLEDGE) and all(tables.has(a) for a in _TABLES_FROM_KNOWLEDGE):
        stages.note("knowledge, hybrid graph: not derived again (every stage and table that needs them is kept)")
        kb = hg = None
        nodes = checkpoint.named_ids(ckpt, "cleora")
        knowledge_ids = checkpoint.named_ids(ckpt, "knowledge_vectors")
    else:
        kb = built.kb = resumable(
            stages, ckpt, "knowledge",
            lambda: build_knowledge(ing, records, job.kg, stages, pinned=is_remote(job.index_dir)),
            lambda v: checkpoint.save_knowledge(ckpt, v.tables),
            lambda: KnowledgeTables(checkpoint.load_knowledge(ckpt), built.chunk_ids))
        with stages.stage("hybrid graph"):
            hg = built.graph = graph_stage.build(cfg, built.chunk_ids, kb)
        beside.start("lexical", lexical_task, ckpt, job.corpus, list(hg.entity_ids))
        nodes = {"nodes": list(hg.node_ids)}
        knowledge_ids = {"entities": list(hg.entity_ids), "relations": list(kb.relations),
                         "hyperedges": list(hg.hyperedge_ids)}
    llm = make_llm(cfg.llm, cache_dir=cache_dir)
    # One pool embeds for both stages; its actors load the model while the driver runs Cleora.
    pool = (ingest.EmbedPool(cfg.embedder)
            if not (ckpt.done("embed entities, relations, hyperedges") and ckpt.done("hierarchy")) else None)
    try:
        def cleora() -> np.ndarray:
            assert hg is not None
            return structure.build(cfg.cleora, hg)

        built.cleora = resumable(
            stages, ckpt, "cleora", cleora,
            lambda v: checkpoint.save_named(ckpt, "cleora", {"cleora": v}, nodes),
            lambda: checkpoint.load_named(ckpt, "cleora", nodes)["cleora"])

        def embed_knowledge() -> dict[str, np.ndarray]:
            assert pool is not None and kb is not None and hg is not None
            vecs = vectors.build(pool, kb, hg.entity_ids, list(kb.relations), hg.hyperedge_ids, stages,
                                 cfg.indexing.batch_size)
            pool.report(stages)
            return vecs

        built.vecs = resumable(
            stages, ckpt, "embed entities, relations, hyperedges", embed_knowledge,
            lambda v: checkpoint.save_named(ckpt, "knowledge_vectors", v, knowledge_ids),
            lambda: checkpoint.load_named(ckpt, "knowledge_vectors", knowledge_ids))
        for kind, ids in knowledge_ids.items():
            writer.add(kind, ids, built.vecs[kind])
        # The later stages read the entities' vectors only: the relations' and hyperedges' are the writer's
        # now, freed once their collections are filled.
        built.vecs = {"entities": built.vecs["entities"]}

        def build_hierarchy() -> hierarchy.HierarchyResult:
            assert pool is not None and kb is not None and hg is not None
            try:
                return hierarchy.build(cfg, built.chunk_ids, [c.text for c in ing.chunks], ing.embeddings, kb, hg,
                                       {"entities": built.vecs["entities"], "cleora": built.cleora}, llm, pool,
                                       stages.note)
            finally:
                pool.report(stages)

        built.hier = resumable(stages, ckpt, "hierarchy", build_hierarchy,
                                lambda v: checkpoint.save_hierarchy(ckpt, v), lambda: checkpoint.load_hierarchy(ckpt),
                                llm_calls=llm.usage.calls)
        writer.add("summaries", built.hier.ids, built.hier.embeddings, layers=built.hier.layers)
    finally:
        if pool is not None:
            pool.close()
    usage.merge(llm.usage)
    if "hierarchy" in ckpt.resumed:
        for role, n in ckpt.record.llm_calls.get("hierarchy", {}).items():
            usage.count(role, calls=n)
    if cfg.hyperbolic.enabled:
        built.hyp = beside.result("hyperbolic", lambda: checkpoint.load_hyperbolic(ckpt))
        writer.add("hyperbolic", built.chunk_ids, built.hyp.storage(), metric="L2")
