"""The hub caps on the dev sets: on each set's chunks as the build makes them (load_corpus, the chunker, the
extractive extractor, merged as the build merges), the most chunks any entity and any key term has, and whether
the chunk-chunk and explicit edges of this checkout equal those of `--baseline` (main before the caps).

    python loadtests/edges_dev.py --baseline /work/main hotpotqa_train100 musique_train100 2wiki_dev
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from hygraph.backends.llm.extractive import ExtractiveLLM  # noqa: E402
from hygraph.config import load_config  # noqa: E402
from hygraph.core import graph, hyperbolic  # noqa: E402
from hygraph.indexing.chunker import chunk_documents  # noqa: E402
from hygraph.indexing.stages.ingest import tokenizer  # noqa: E402
from hygraph.indexing.stages.knowledge import merge_extractions  # noqa: E402
from hygraph.model import load_corpus  # noqa: E402
from loadtests.bench_edges import baseline  # noqa: E402
from loadtests.bench_scale import DEV  # noqa: E402

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--baseline", required=True, help="a checkout whose hygraph/core/{graph,hyperbolic}.py are compared")
p.add_argument("sets", nargs="+", help="dev set names under ../shared/data/dev/")
args = p.parse_args()
cfg = load_config(None)
base = {m: baseline(Path(args.baseline), m) for m in ("graph", "hyperbolic")}
tok = tokenizer(cfg.embedder.model)
for name in args.sets:
    docs = load_corpus(DEV / f"{name}.corpus.jsonl")
    chunks = chunk_documents(docs, tok, cfg.chunking.size_tokens, cfg.chunking.overlap_tokens)
    kb = merge_extractions(ExtractiveLLM().extract(chunks))
    ids = [c.id for c in chunks]
    ents = {c: set() for c in ids}
    for e, cs in kb.entity_chunks.items():
        for c in cs:
            ents[c].add(e)
    terms = hyperbolic.key_terms([c.text for c in chunks])
    de = max(len(v) for v in kb.entity_chunks.values())
    dt = max(Counter(t for s in terms for t in s).values())
    args = (ids, [ents[c] for c in ids], [], [])
    g1 = graph.build_hybrid_graph(*args, shared_entity_threshold=cfg.graph.shared_entity_threshold,
                                  hub_chunks=cfg.graph.hub_chunks)
    g0 = base["graph"].build_hybrid_graph(*args, shared_entity_threshold=cfg.graph.shared_entity_threshold)
    h = cfg.hyperbolic
    e1 = hyperbolic.explicit_edges(terms, theta=h.theta, max_neighbors=h.max_neighbors, hub_df=h.hub_df)
    e0 = base["hyperbolic"].explicit_edges(terms, theta=h.theta, max_neighbors=h.max_neighbors)
    same_graph, same_explicit = (g1.adjacency != g0.adjacency).nnz == 0, np.array_equal(e1, e0)
    print(f"{name}: {len(docs)} documents, {len(ids)} chunks; most chunks per entity {de} "
          f"(cap {cfg.graph.hub_chunks}), per key term {dt} (cap {h.hub_df}); chunk-chunk edges "
          f"{g1.edge_counts()['chunk_chunk']} vs baseline {g0.edge_counts()['chunk_chunk']}, adjacency identical: "
          f"{same_graph}; explicit edges {len(e1)} vs baseline {len(e0)}, identical: {same_explicit}", flush=True)
