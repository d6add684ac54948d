"""The knowledge stage as Ray tasks: a map over blocks of extractions, a fold per key partition.

Each map task reads its block of extractions from the ingest's shards (or is handed it: triples mapped onto chunks,
an imported knowledge graph) and splits its records by key into as many lists as there are partitions
(stages/knowledge_merge.py). Each fold task receives one partition's list from every map task through Ray's object
store, whichever node made it, and merges that partition's keys; the assembler puts the folds' Arrow tables in
order, and the later stages read them as the build's knowledge (stages/knowledge_tables.py). The tasks spread over
every node with CPUs; no task holds more than its block or its partition, and the assembler never parses an
extraction. The result equals the merge of every extraction in corpus order.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Sequence

import pyarrow as pa

from hygraph.indexing.placement import placement
from hygraph.indexing.progress import Stages
from hygraph.indexing.stages import ingest
from hygraph.indexing.stages import knowledge_merge as km
from hygraph.model import Extraction

# Extractions per map task (40-70 MiB of pickled records with the extractive backend's extractions), and the most
# map or fold tasks that run at once per node with CPUs (`_windowed`).
BLOCK_SIZE = 8192
IN_FLIGHT_PER_NODE = 2
MAX_PARTITIONS = 64

Block = Iterable[tuple[int, Extraction, "str | None"]]
Report = tuple[int, str]  # a task's peak RSS and node (ingest.worker_report)


def _map(block: Block, parts: int) -> list[list[km.Record] | Report]:
    return [*km.records(block, parts), ingest.worker_report()]


def _fold(*parts: list[km.Record]) -> tuple[pa.Table, pa.Table, pa.Table, Report]:
    return (*km.fold(parts), ingest.worker_report())


def merge(blocks: Sequence[Block], stages: Stages, pinned: bool) -> km.Folded:
    """The knowledge of every extraction of `blocks` (consecutive ordinals, in order), merged by Ray tasks: its
    ordered tables (`knowledge_merge.ordered`)."""
    import ray

    if not blocks:
        return km.ordered([])
    t0 = time.perf_counter()
    parts = max(2, min(len(blocks), MAX_PARTITIONS))
    nodes = sum(1 for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0)
    window = max(1, IN_FLIGHT_PER_NODE * nodes)
    map_task, fold_task = ray.remote(_map), ray.remote(_fold)
    mapped = _windowed(ray, window, [
        lambda nth=nth, block=block: map_task.options(num_returns=parts + 1, **placement(
            nth, pinned, elsewhere=False)).remote(block, parts) for nth, block in enumerate(blocks)])

    def fold(p: int) -> Any:
        ref = fold_task.options(**placement(p, pinned, elsewhere=False)).remote(*(refs[p] for refs in mapped))
        for refs in mapped:
            refs[p] = None  # the task holds its inputs now: each leaves the object store once its fold is done
        return [ref]

    folds = _windowed(ray, window, [lambda p=p: fold(p) for p in range(parts)])
    reports: list[Report] = ray.get([refs[-1] for refs in mapped])
    folded = ray.get([f[0] for f in folds])
    reports += [f[3] for f in folded]
    for rss, node in reports:
        stages.worker(rss, {node}, "knowledge")
    stages.note(f"knowledge: {len(blocks)} map tasks, {parts} partitions folded, on "
                f"{', '.join(sorted({node for _, node in reports}))} in {time.perf_counter() - t0:.1f}s")
    return km.ordered(f[:3] for f in folded)


def _windowed(ray: Any, window: int, submits: Sequence[Callable[[], list[Any]]]) -> list[list[Any]]:
    """Each submit's refs (its task's last return says it is done), at most `window` tasks running at once: each
    task asks for a small CPU share, so Ray would start them all, and a fold holds a partition's records as Python
    objects (at 200k passages 25 folds at once, 850 MiB each, left 1.6 GiB of this machine's 24 free)."""
    out: list[list[Any]] = []
    running: list[Any] = []
    for submit in submits:
        if len(running) >= window:
            _, running = ray.wait(running, num_returns=len(running) - window + 1)
        out.append(submit())
        running.append(out[-1][-1])
    return out


def blocks_of(extractions: Sequence[Extraction], kg: Extraction | None) -> list[Block]:
    """The blocks of a build's extractions (the shards' when they are ingest.ShardExtractions, else the given
    ones), then an imported knowledge graph's facts, tied to no chunk, last."""
    if isinstance(extractions, ingest.ShardExtractions):
        out: list[Block] = list(extractions.blocks(BLOCK_SIZE))
    else:
        out = [[(i, ex, ex.chunk_id) for i, ex in enumerate(extractions[at:at + BLOCK_SIZE], at)]
               for at in range(0, len(extractions), BLOCK_SIZE)]
    if kg is not None:
        out.append([(len(extractions), kg, None)])
    return out
