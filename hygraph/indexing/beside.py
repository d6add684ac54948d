"""The build stages that run as Ray tasks beside the assembling actor's chain: hyperbolic and lexical.

Neither needs the knowledge -> hybrid graph -> Cleora -> hierarchy chain that the assembler (indexing/assemble.py)
runs in its own process: hyperbolic training needs the chunks' texts and embeddings, the BM25 postings their
texts and the entity ids. So the assembler starts each as a task as soon as its inputs exist (hyperbolic at
once, lexical once the hybrid graph names the entities), preferably on another node, and they run while the
chain does: the build's wall time loses theirs and the assembler's peak memory their working sets. A task reads
its inputs from the checkpoint's ingest shards itself (stages/ingest.read_texts: only the columns it needs),
not from the assembler's memory, and writes its output to the checkpoint, where the assembler loads it when it
writes the snapshot; a rerun after a kill keeps a finished task's output like any finished stage's.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from hygraph.config import HyperbolicConfig
from hygraph.indexing import checkpoint
from hygraph.indexing.checkpoint import Checkpoint
from hygraph.indexing.placement import placement
from hygraph.indexing.progress import Stages
from hygraph.indexing.stages import hyperbolic, ingest, lexical

T = TypeVar("T")

@dataclass
class Ran:
    """What a task reports: its seconds, its process's peak RSS and node (`ingest.worker_report`), and the bytes
    it wrote to the checkpoint."""

    seconds: float
    peak_rss: int
    node: str
    bytes_written: int


def _ran(t0: float, ckpt: Checkpoint, written_before: int) -> Ran:
    rss, node = ingest.worker_report()
    return Ran(round(time.perf_counter() - t0, 3), rss, node, ckpt.bytes_written - written_before)


def hyperbolic_task(cfg: HyperbolicConfig, ckpt: Checkpoint, corpus: str) -> Ran:
    t0, written = time.perf_counter(), ckpt.bytes_written  # the count the assembler had when it sent `ckpt`
    _, texts, embeddings = ingest.read_texts(ckpt.shard_dir("ingest"), corpus, vectors=True)
    checkpoint.save_hyperbolic(ckpt, hyperbolic.build(cfg, texts, embeddings))
    return _ran(t0, ckpt, written)


def lexical_task(ckpt: Checkpoint, corpus: str, entity_ids: list[str] | None) -> Ran:
    t0, written = time.perf_counter(), ckpt.bytes_written
    ids, texts, _ = ingest.read_texts(ckpt.shard_dir("ingest"), corpus, vectors=False)
    checkpoint.save_lexical(ckpt, lexical.build(ids, texts, entity_ids))
    return _ran(t0, ckpt, written)


class Beside:
    """The tasks of one assembler run. `start` submits a stage's task (unless the checkpoint has the stage) and a
    thread that records it in the checkpoint the moment it finishes; `result` waits for it and loads its output.
    Leaving the block cancels a task still running (the assembler failed)."""

    def __init__(self, stages: Stages, ckpt: Checkpoint, pinned: bool) -> None:
        """`pinned`: the checkpoint is on this node's disk only (an index on object storage), so are the tasks."""
        self._stages, self._ckpt, self._pinned = stages, ckpt, pinned
        self._refs: dict[str, Any] = {}
        self._waits: dict[str, threading.Thread] = {}
        self._ran: dict[str, Ran | BaseException] = {}

    def __enter__(self) -> "Beside":
        return self

    def __exit__(self, *exc: Any) -> None:
        import ray

        for name, ref in self._refs.items():
            if self._waits[name].is_alive():
                ray.cancel(ref, force=True)

    def start(self, name: str, task: Callable[..., Ran], *args: Any, num_gpus: float = 0.0) -> None:
        if self._ckpt.done(name):
            return  # `result` loads it
        import ray

        options = placement(len(self._refs), self._pinned)
        # One task per worker process: its peak RSS is its own, and the process's memory goes back when it ends.
        ref = ray.remote(max_calls=1)(task).options(num_gpus=num_gpus, **options).remote(*args)
        self._refs[name] = ref
        self._waits[name] = threading.Thread(target=self._record, args=(name, ref), name=f"wait {name}", daemon=True)
        self._waits[name].start()
        self._stages.note(f"{name} ... (a Ray task beside the assembler)")

    def _record(self, name: str, ref: Any) -> None:
        """(Its own thread.) The task's report, and the stage recorded as finished in the checkpoint: a build
        killed from now on keeps it."""
        import ray

        try:
            ran: Ran = ray.get(ref)
        except BaseException as exc:  # handed to `result`, which raises it in the assembler's own thread
            self._ran[name] = exc
            return
        self._ckpt.finish(name, ran.seconds)
        self._ran[name] = ran
        self._stages.note(f"{name} done in {ran.seconds:.1f}s on {ran.node} (a Ray task; peak RSS "
                          f"{ran.peak_rss / 2**20:,.0f} MiB)")

    def result(self, name: str, load: Callable[[], T]) -> T:
        """Stage `name`'s output: its task's, once finished, or a previous run's, from the checkpoint."""
        if name not in self._waits:  # `start` found it in the checkpoint
            with self._stages.stage(name):
                self._stages.note(f"{name}: resumed from the checkpoint (it took "
                                  f"{self._ckpt.record.seconds[name]:.1f}s)")
                value = load()
            self._ckpt.resumed.append(name)
            return value
        t0 = time.perf_counter()
        self._waits[name].join()
        ran = self._ran[name]
        if isinstance(ran, BaseException):
            raise ran
        # The stage's seconds and node are the task's; the assembler's wait and load are its own time.
        self._stages.seconds[name] = ran.seconds
        self._stages.worker(ran.peak_rss, {ran.node}, name)
        self._stages.bytes_written += ran.bytes_written
        value = load()
        self._stages.note(f"{name}: waited for and loaded in {time.perf_counter() - t0:.1f}s")
        return value
