"""Snapshot version -> the in-memory IndexView that retrieval strategies read."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from hygraph.core.hyperbolic import edge_adjacency
from hygraph.core.retrieval.propagation import walk_for
from hygraph.core.retrieval.view import IndexView
from hygraph.store.graph_io import read_graph
from hygraph.store.lexical_io import has_lexical, read_lexical
from hygraph.store.snapshot import Snapshot


def _invert(owner_ids: list[str], members: list[list[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for oid, ms in zip(owner_ids, members):
        for m in ms:
            out[m].append(oid)
    return dict(out)


def load_view(snap: Snapshot) -> IndexView:
    chunks = snap.table("chunks").select(["id", "doc_id", "text"]).to_pydict()
    docs = snap.table("documents").select(["id", "title"]).to_pydict()
    view = IndexView(version=snap.version, chunk_text=dict(zip(chunks["id"], chunks["text"])),
                     chunk_doc=dict(zip(chunks["id"], chunks["doc_id"])), titles=dict(zip(docs["id"], docs["title"])))
    if has_lexical(snap, "chunks"):
        view.chunk_lexical = read_lexical(snap, "chunks")
    if not snap.has("entities"):
        return view
    if has_lexical(snap, "entities"):
        view.entity_lexical = read_lexical(snap, "entities")
    view.graph = read_graph(snap)
    view.walk = walk_for(view.graph, view.chunk_doc, view.titles)
    ent = snap.table("entities").to_pydict()
    view.entity_name = dict(zip(ent["id"], ent["name"]))
    view.entity_desc = dict(zip(ent["id"], ent["description"]))
    view.entity_score = dict(zip(ent["id"], ent["score"]))
    view.entity_chunks = dict(zip(ent["id"], ent["chunks"]))

    rel = snap.table("relations").to_pydict()
    view.relations = {i: (h, r, t, s) for i, h, r, t, s in
                      zip(rel["id"], rel["head"], rel["relation"], rel["tail"], rel["score"])}
    view.relation_chunks = dict(zip(rel["id"], rel["chunks"]))
    view.entity_relations = _invert(rel["id"], [[h, t] for h, t in zip(rel["head"], rel["tail"])])

    he = snap.table("hyperedges").to_pydict()
    view.hyperedge_text = dict(zip(he["id"], he["text"]))
    view.hyperedge_entities = {i: tuple(e) for i, e in zip(he["id"], he["entities"])}
    view.hyperedge_score = dict(zip(he["id"], he["score"]))
    view.hyperedge_chunks = dict(zip(he["id"], he["chunks"]))
    view.entity_hyperedges = _invert(he["id"], he["entities"])

    if snap.has("summaries"):
        sm = snap.table("summaries").to_pydict()
        view.summary_text = dict(zip(sm["id"], sm["text"]))
        view.summary_layer = dict(zip(sm["id"], sm["layer"]))
        view.summary_children = {i: tuple(c) for i, c in zip(sm["id"], sm["children"])}
        view.summary_leaves = {i: tuple(c) for i, c in zip(sm["id"], sm["leaves"])}

    if snap.has("hyperbolic_points"):
        hyp = snap.manifest["hyperbolic"]
        view.hyper_chunk_ids = chunks["id"]
        view.hyper_row = {cid: i for i, cid in enumerate(chunks["id"])}
        view.hyper_adj_indptr, view.hyper_adj_indices = edge_adjacency(
            np.asarray(snap.array("hyperbolic_edges")), len(chunks["id"]))
        view.hyper_dim, view.hyper_seed = int(hyp["dim"]), int(hyp["seed"])
    return view
