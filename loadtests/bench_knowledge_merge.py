"""The knowledge merge in one process: the sequential merge against the shuffle's three steps (records, fold,
the ordered tables and their reader) and the pickling Ray does between them, CPU seconds each, on extractions of
a corpus's passages made by the extractive backend (as `hygraph index` makes them), and whether the two merges
are equal, table for table. Then what the build's later stages pay to read each (every key read as the hybrid
graph, the knowledge texts, the hierarchy and the snapshot's rows read it), and the memory each result holds
(its Python objects, traced, and its Arrow buffers).

    python loadtests/bench_knowledge_merge.py --corpus /tmp/bb/corpus_20000.jsonl --docs 8000
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import time
import tracemalloc
from itertools import islice
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from hygraph.backends.llm.extractive import ExtractiveLLM
from hygraph.indexing.knowledge_shuffle import BLOCK_SIZE
from hygraph.indexing.stages import knowledge_merge as km
from hygraph.indexing.stages.knowledge import (KnowledgeView, build_rows, entity_relations, merge_extractions,
                                               per_chunk)
from hygraph.indexing.stages.knowledge_tables import KnowledgeTables
from hygraph.indexing.stages.vectors import knowledge_texts
from hygraph.model import Chunk, Extraction


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def tables(kb: KnowledgeView) -> list[Any]:
    return [list(kb.entities.items()), [(k, sorted(v)) for k, v in kb.entity_chunks.items()],
            [(k, list(v.items())) for k, v in kb.surface_forms.items()], list(kb.relations.items()),
            [(k, sorted(v)) for k, v in kb.relation_chunks.items()], list(kb.hyperedges.items()),
            [(k, sorted(v)) for k, v in kb.hyperedge_chunks.items()]]


def read_all(kb: KnowledgeView) -> None:
    """Every key, read as the build's later stages read them."""
    per_chunk(kb)
    entity_relations(kb, kb.relations)
    entities, hyperedges = list(kb.entities), list(kb.hyperedges)
    knowledge_texts(kb, entities, list(kb.relations), hyperedges)
    for _ in build_rows(kb, entities, hyperedges, np.zeros((len(entities), 1), np.float32)):
        pass


def held(make: Callable[[], Any]) -> int:
    """The bytes that what `make` returns holds: Python objects (traced) and Arrow buffers."""
    gc.collect()
    arrow = pa.total_allocated_bytes()
    tracemalloc.start()
    out = make()
    gc.collect()
    python = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    held_bytes = python + pa.total_allocated_bytes() - arrow
    del out
    return held_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--docs", type=int, default=8000)
    ap.add_argument("--parts", type=int, default=4)
    args = ap.parse_args()
    with args.corpus.open() as fh:
        docs = [json.loads(line) for line in islice(fh, args.docs)]
    chunks = [Chunk(f"{d['id']}:0", d["id"], 0, d["text"], 0, d.get("title", "")) for d in docs]
    texts = [json.dumps(ex.to_dict()) for ex in ExtractiveLLM().extract(chunks)]  # as the ingest's shards hold them

    exs, parse = timed(lambda: [Extraction.from_dict(json.loads(t)) for t in texts])
    sequential, merge = timed(lambda: merge_extractions(exs))
    blocks = [[(i, ex, ex.chunk_id) for i, ex in enumerate(exs[at:at + BLOCK_SIZE], at)]
              for at in range(0, len(exs), BLOCK_SIZE)]
    mapped, records = timed(lambda: [km.records(b, args.parts) for b in blocks])
    blob, pickled = timed(lambda: pickle.dumps(mapped, protocol=5))
    _, unpickled = timed(lambda: pickle.loads(blob))
    folds, fold = timed(lambda: [km.fold([m[p] for m in mapped]) for p in range(args.parts)])
    folds_blob, folds_pickled = timed(lambda: pickle.dumps(folds, protocol=5))
    _, folds_unpickled = timed(lambda: pickle.loads(folds_blob))
    kb, reader = timed(lambda: KnowledgeTables(km.ordered(folds), [c.id for c in chunks]))
    n_records = sum(len(part) for m in mapped for part in m)
    print(f"{len(docs):,} passages, {n_records:,} records, {len(blocks)} blocks, {args.parts} partitions; "
          f"{len(kb.entities):,} entities, {len(kb.relations):,} relations, {len(kb.hyperedges):,} hyperedges")
    print("| step | CPU s |\n|---|---|")
    for name, s in (("parse the extractions' JSON (both)", parse), ("sequential merge", merge),
                    ("records (map tasks)", records),
                    (f"pickle + unpickle the records ({len(blob) / 2**20:.1f} MiB)", pickled + unpickled),
                    ("fold (fold tasks)", fold),
                    (f"pickle + unpickle the folds ({len(folds_blob) / 2**20:.1f} MiB)",
                     folds_pickled + folds_unpickled),
                    ("ordered tables and their reader (the assembler)", reader)):
        print(f"| {name} | {s:.2f} |")
    print(f"equal to the sequential merge, table for table and in order: {tables(kb) == tables(sequential)}")
    _, read_sequential = timed(lambda: read_all(sequential))
    _, read_tables = timed(lambda: read_all(kb))
    chunk_ids = [c.id for c in chunks]
    # Each made from what the assembler receives (extractions' JSON, the folds' pickled tables), the input dropped.
    mem_sequential = held(lambda: merge_extractions([Extraction.from_dict(json.loads(t)) for t in texts]))
    mem_tables = held(lambda: KnowledgeTables(km.ordered(pickle.loads(folds_blob)), chunk_ids))
    print("| the merged knowledge | read every key as the build does, CPU s | memory held, MiB |\n|---|---|---|")
    print(f"| Knowledge (sequential merge) | {read_sequential:.2f} | {mem_sequential / 2**20:.1f} |")
    print(f"| the ordered tables (shuffle) | {read_tables:.2f} | {mem_tables / 2**20:.1f} |")


if __name__ == "__main__":
    main()
