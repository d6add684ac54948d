"""How the build's two pair searches grow with the corpus: chunk-chunk edges and explicit hyperbolic edges, and
the Poincaré training over the explicit edges.

    python loadtests/bench_edges.py --corpus composed --sizes 25000,50000,100000,200000 --baseline /work/main

Times `build_hybrid_graph` over the chunk-entity incidence (no relations or hyperedges: the pair search is
the part that grows), `explicit_edges` over the key terms and `train_poincare` over those edges (the
configured epochs, batch and negatives, from random text vectors, on one thread as a 1-CPU Ray worker runs
it), with this checkout's code and configured hub caps, and with the same functions of `--baseline` (another
checkout, e.g. main before a change; with the same hub caps where its functions take them) up to
`--baseline-max` passages. Reports seconds, edges, the share of the baseline's edges kept, and the time
exponent between successive sizes (log t2/t1 / log n2/n1). Times are CPU seconds of the process.

Corpora (`--corpus`):
- `composed`: bench_scale's (`passage_pool`: the real dev passages, then passages composed of 3-6 of their
  sentences), where every name recurs as the corpus grows, as in docs/bench/scale.md. Key terms
  (core.hyperbolic.key_terms) and entities (the extractive extractor, merged as the build merges them) are
  computed once per distinct sentence; a passage gets the union of its sentences'.
- `renamed`: the real dev passages, then copies of them in which every capitalised word gets a suffix
  naming the copy: names are new in every copy (their counts stay those of the dev sets) while lowercase
  words are shared by every copy (their counts grow as a common word's does). Terms and entities are
  computed once on the real passages and renamed word by word per copy, which is what computing them on
  the renamed text gives except for a word a passage writes both capitalised and lowercase.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import math
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from hygraph.backends.llm.extractive import ExtractiveLLM  # noqa: E402
from hygraph.backends.llm.lexical import split_sentences  # noqa: E402
from hygraph.config import load_config  # noqa: E402
from hygraph.core import graph, hyperbolic  # noqa: E402
from hygraph.indexing.stages.knowledge import merge_extractions  # noqa: E402
from hygraph.model import Chunk  # noqa: E402
from loadtests.bench_scale import passage_pool, real_passages  # noqa: E402
from loadtests.common import CAPITALISED, copy_suffix, say  # noqa: E402

TAG = "bench_edges"


def baseline(root: Path, name: str) -> ModuleType:
    """`hygraph/core/<name>.py` of another checkout, loaded under its own module name."""
    spec = importlib.util.spec_from_file_location(f"baseline_{name}", root / "hygraph" / "core" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _terms_and_entities(texts: list[str], titles: list[str]) -> tuple[list[set[str]], list[set[str]]]:
    terms = hyperbolic.key_terms(texts)
    chunks = [Chunk(id=str(i), doc_id=str(i), ordinal=0, text=t, n_tokens=0, title=title)
              for i, (t, title) in enumerate(zip(texts, titles))]
    kb = merge_extractions(ExtractiveLLM().extract(chunks))
    entities: list[set[str]] = [set() for _ in texts]
    for eid, cids in kb.entity_chunks.items():
        for cid in cids:
            entities[int(cid)].add(eid)
    return terms, entities


class Composed:
    """bench_scale's corpus; terms and entities of each distinct sentence computed once."""

    def __init__(self, n: int) -> None:
        pool = passage_pool(n)
        self.sentences = [split_sentences(p["text"]) for p in pool]
        distinct = list(dict.fromkeys(s for ss in self.sentences for s in ss))
        terms, entities = _terms_and_entities(distinct, [""] * len(distinct))
        self.of = {s: (t, e) for s, t, e in zip(distinct, terms, entities)}

    def take(self, n: int) -> tuple[list[set[str]], list[set[str]]]:
        return ([set().union(*(self.of[s][0] for s in ss)) for ss in self.sentences[:n]],
                [set().union(*(self.of[s][1] for s in ss)) for ss in self.sentences[:n]])


class Renamed:
    """Key terms and entities of the real passages, renamed per copy on demand."""

    def __init__(self) -> None:
        passages = real_passages()
        self.caps = [{w.lower() for w in CAPITALISED.findall(f"{p['title']} {p['text']}")} for p in passages]
        self.terms, self.entities = _terms_and_entities([p["text"] for p in passages],
                                                        [p["title"] for p in passages])

    def __len__(self) -> int:
        return len(self.terms)

    def take(self, n: int) -> tuple[list[set[str]], list[set[str]]]:
        """Key terms and entity sets of n passages: the real ones, then renamed copies."""
        terms: list[set[str]] = []
        entities: list[set[str]] = []
        for k in range(n):
            copy, i = divmod(k, len(self))
            terms.append(self._rename(self.terms[i], self.caps[i], copy))
            entities.append(self._rename(self.entities[i], self.caps[i], copy))
        return terms, entities

    @staticmethod
    def _rename(ids: set[str], caps: set[str], copy: int) -> set[str]:
        if not copy:
            return ids
        tag = copy_suffix(copy)
        return {" ".join(w + tag if w in caps else w for w in t.split(" ")) for t in ids}


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """The result and the CPU seconds of this process it took: on a shared, loaded machine wall time
    follows the other processes' load, CPU time follows the work (both functions run on one thread)."""
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def _caps(fn: Callable[..., Any], **caps: int) -> dict[str, int]:
    """The hub caps that `fn` (a baseline's) takes: one from before the caps takes none."""
    return {name: value for name, value in caps.items() if name in inspect.signature(fn).parameters}


def _train(module: ModuleType, init: np.ndarray, edges: np.ndarray, cfg: Any) -> np.ndarray:
    h = cfg.hyperbolic
    return module.train_poincare(init, edges, epochs=h.epochs, lr=h.lr, negatives=h.negatives,
                                 batch_size=h.batch_size, seed=h.seed)


def _cc_edges(g: graph.HybridGraph) -> set[tuple[int, int]]:
    adj = g.adjacency.tocoo()
    n = len(g.chunk_ids)
    keep = (adj.row < adj.col) & (adj.col < n)
    return set(zip(adj.row[keep].tolist(), adj.col[keep].tolist()))


def measure(corpus: Composed | Renamed, n: int, cfg: Any, base: dict[str, ModuleType] | None) -> dict[str, Any]:
    terms, entities = corpus.take(n)
    ids = [f"p{i}:0" for i in range(n)]  # as chunk ids are: never an entity name
    row: dict[str, Any] = {"n": n, "load_average_1m": round(os.getloadavg()[0], 1)}
    # Counted first: this hashes every fresh string, so neither timed function pays for it.
    df_e = np.array(list(Counter(x for s in entities for x in s).values()))
    df_t = np.array(list(Counter(x for s in terms for x in s).values()))
    g, row["graph_s"] = _timed(lambda: graph.build_hybrid_graph(
        ids, entities, [], [], shared_entity_threshold=cfg.graph.shared_entity_threshold,
        hub_chunks=cfg.graph.hub_chunks))
    e, row["hyperbolic_s"] = _timed(lambda: hyperbolic.explicit_edges(
        terms, theta=cfg.hyperbolic.theta, max_neighbors=cfg.hyperbolic.max_neighbors, hub_df=cfg.hyperbolic.hub_df))
    init = hyperbolic.init_from_text(np.random.default_rng(0).normal(size=(n, 64)).astype(np.float32),
                                     cfg.hyperbolic.dim, cfg.hyperbolic.seed)
    _, row["training_s"] = _timed(lambda: _train(hyperbolic, init, e, cfg))
    cc, explicit = _cc_edges(g), set(map(tuple, e.tolist()))
    row["graph_edges"], row["hyperbolic_edges"] = len(cc), len(explicit)
    row["max_entity_chunks"], row["max_term_df"] = int(df_e.max()), int(df_t.max())
    row["hub_entities"] = int((df_e > cfg.graph.hub_chunks).sum())
    row["hub_terms"] = int((df_t > cfg.hyperbolic.hub_df).sum())
    if base is not None:
        bg, row["baseline_graph_s"] = _timed(lambda: base["graph"].build_hybrid_graph(
            ids, entities, [], [], shared_entity_threshold=cfg.graph.shared_entity_threshold,
            **_caps(base["graph"].build_hybrid_graph, hub_chunks=cfg.graph.hub_chunks)))
        be, row["baseline_hyperbolic_s"] = _timed(lambda: base["hyperbolic"].explicit_edges(
            terms, theta=cfg.hyperbolic.theta, max_neighbors=cfg.hyperbolic.max_neighbors,
            **_caps(base["hyperbolic"].explicit_edges, hub_df=cfg.hyperbolic.hub_df)))
        _, row["baseline_training_s"] = _timed(lambda: _train(base["hyperbolic"], init, e, cfg))
        bcc, bexplicit = _cc_edges(bg), set(map(tuple, be.tolist()))
        row["baseline_graph_edges"], row["baseline_hyperbolic_edges"] = len(bcc), len(bexplicit)
        row["graph_edges_kept"] = round(len(cc & bcc) / max(len(bcc), 1), 4)
        row["hyperbolic_edges_kept"] = round(len(explicit & bexplicit) / max(len(bexplicit), 1), 4)
    return row


def _exponent(rows: list[dict[str, Any]], key: str, i: int) -> float | None:
    a, b = rows[i - 1], rows[i]
    if key not in a or key not in b:
        return None
    return round(math.log(b[key] / a[key]) / math.log(b["n"] / a["n"]), 2)


def markdown(res: dict[str, Any]) -> str:
    rows = res["rows"]
    lines = [f"{res['date']}, {res['machine']}. Command: `{res['command']}`. Corpus `{res['corpus']}`, hub caps "
             f"{res['hub_chunks']} chunks per entity, {res['hub_df']} passages per key term. CPU seconds of the "
             "process (time.process_time), exponents in brackets.",
             "",
             "| passages | graph CPU s (exp.) | baseline graph CPU s (exp.) | chunk-chunk edges / baseline (kept) "
             "| hyperbolic CPU s (exp.) | baseline hyperbolic CPU s (exp.) | explicit edges / baseline (kept) "
             "| training CPU s (exp.) | baseline training CPU s (exp.) "
             "| hub entities / terms | max entity / term count | load 1m |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(r: dict[str, Any], i: int, key: str) -> str:
        if key not in r:
            return "-"
        e = _exponent(rows, key, i) if i else None
        return f"{r[key]:.2f}" + (f" ({e})" if e is not None else "")

    for i, r in enumerate(rows):
        lines.append(" | ".join([
            f"| {r['n']:,}", cell(r, i, "graph_s"), cell(r, i, "baseline_graph_s"),
            f"{r['graph_edges']:,} / {r.get('baseline_graph_edges', '-')} ({r.get('graph_edges_kept', '-')})",
            cell(r, i, "hyperbolic_s"), cell(r, i, "baseline_hyperbolic_s"),
            f"{r['hyperbolic_edges']:,} / {r.get('baseline_hyperbolic_edges', '-')} "
            f"({r.get('hyperbolic_edges_kept', '-')})",
            cell(r, i, "training_s"), cell(r, i, "baseline_training_s"),
            f"{r['hub_entities']} / {r['hub_terms']}", f"{r['max_entity_chunks']} / {r['max_term_df']}",
            f"{r['load_average_1m']} |"]))
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", choices=["composed", "renamed"], default="composed")
    p.add_argument("--sizes", default="25000,50000,100000,200000")
    p.add_argument("--baseline", help="another checkout whose hygraph/core/{graph,hyperbolic}.py are timed too")
    p.add_argument("--baseline-max", type=int, default=50000, help="largest size the baseline is timed at")
    p.add_argument("--out", default="runs/bench_edges")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)  # as in a 1-CPU Ray worker (OMP_NUM_THREADS=1)
    cfg = load_config(None)
    base = {m: baseline(Path(args.baseline), m) for m in ("graph", "hyperbolic")} if args.baseline else None
    sizes = [int(s) for s in args.sizes.split(",")]
    say(TAG, f"{args.corpus} corpus: key terms and entities")
    corpus = Composed(max(sizes)) if args.corpus == "composed" else Renamed()
    res: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "command": " ".join(["python", *sys.argv]),
                           "machine": f"{os.cpu_count()} CPUs ({platform.machine()}), shared and loaded",
                           "corpus": args.corpus, "hub_chunks": cfg.graph.hub_chunks,
                           "hub_df": cfg.hyperbolic.hub_df, "rows": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        say(TAG, f"{n} passages")
        res["rows"].append(measure(corpus, n, cfg, base if base is not None and n <= args.baseline_max else None))
        say(TAG, json.dumps(res["rows"][-1]))
        out.with_suffix(".json").write_text(json.dumps(res, indent=1))
        out.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
