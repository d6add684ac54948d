"""Incremental summary hierarchy: EraRAG selective re-segmentation (LSH) and HyGRAG attachment (Leiden).

Both start from the previous version's summaries and touch only what the batch changed:
a summary whose member set changes is re-summarized under a fresh id (ids are never
reused for other content, so a reader of the previous version cannot mistake a new row
for its own), and that replacement is a new node one layer up, so changes travel to the
top and stop at the first layer where nothing changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from hygraph.config import HierarchyConfig
from hygraph.core.hierarchy import build_hierarchy, summary_key
from hygraph.core.lsh import hash_codes, make_hyperplanes, repartition_affected
from hygraph.indexing.hierarchy_build import HierarchyResult
from hygraph.model import SummaryNode

# (members per segment, leaves per segment, texts of the member summaries) -> one summary text per
# segment; one LLM batch per call.
Summarize = Callable[[list[list[str]], list[list[str]], Mapping[str, str]], list[str]]
Embed = Callable[[Sequence[str]], np.ndarray]
Features = Callable[[list[str]], np.ndarray]


@dataclass
class _Node:
    layer: int
    text: str
    children: list[str]
    leaves: list[str]
    key: str
    vector: np.ndarray


@dataclass
class HierarchyDelta:
    result: HierarchyResult
    fresh: list[str] = field(default_factory=list)  # summary ids written by this update
    retired: list[str] = field(default_factory=list)  # summary ids that no longer exist


class _Table:
    """The summaries by id, in layer order, with fresh ordinals per layer."""

    def __init__(self, hier: HierarchyResult) -> None:
        self.partitioner = hier.partitioner
        self.hyperplanes = list(hier.hyperplanes)
        self.nodes: dict[str, _Node] = {
            sid: _Node(layer, text, list(ch), list(lv), key, hier.embeddings[i])
            for i, (sid, layer, text, ch, lv, key) in enumerate(
                zip(hier.ids, hier.layers, hier.texts, hier.children, hier.leaves, hier.keys))}
        self.next_ordinal: dict[int, int] = {}
        for sid, node in self.nodes.items():
            ordinal = int(sid.split(":", 1)[1])
            self.next_ordinal[node.layer] = max(self.next_ordinal.get(node.layer, 0), ordinal + 1)
        self.delta = HierarchyDelta(HierarchyResult(partitioner=hier.partitioner))

    @property
    def top(self) -> int:
        return max((n.layer for n in self.nodes.values()), default=0)

    def layer(self, number: int) -> list[str]:
        return [sid for sid, n in self.nodes.items() if n.layer == number]

    def leaves_of(self, node_id: str) -> list[str]:
        node = self.nodes.get(node_id)
        return node.leaves if node is not None else [node_id]

    def add(self, layer: int, members: list[list[str]], extra_leaves: list[list[str]], summarize: Summarize,
            embed: Embed) -> list[str]:
        if not members:
            return []
        leaves = [sorted({leaf for m in ms for leaf in self.leaves_of(m)} | set(extra))
                  for ms, extra in zip(members, extra_leaves)]
        texts = summarize(members, leaves, {m: self.nodes[m].text for ms in members for m in ms if m in self.nodes})
        vectors = np.asarray(embed(texts), dtype=np.float32)
        ids = []
        for ms, lv, text, vec in zip(members, leaves, texts, vectors):
            sid = SummaryNode.node_id(layer, self.next_ordinal.get(layer, 0))
            self.next_ordinal[layer] = self.next_ordinal.get(layer, 0) + 1
            key = summary_key(lv) if self.partitioner == "leiden" and layer == 1 else summary_key(ms)
            self.nodes[sid] = _Node(layer, text, list(ms), lv, key, vec)
            ids.append(sid)
        self.delta.fresh.extend(ids)
        return ids

    def retire(self, ids: Sequence[str]) -> None:
        for sid in ids:
            del self.nodes[sid]
        gone = set(ids)
        self.delta.fresh = [s for s in self.delta.fresh if s not in gone]
        self.delta.retired.extend(ids)

    def finish(self) -> HierarchyDelta:
        result = self.delta.result
        order = sorted(self.nodes, key=lambda s: (self.nodes[s].layer, int(s.split(":", 1)[1])))
        for sid in order:
            n = self.nodes[sid]
            result.add(sid, n.layer, n.text, n.children, n.leaves, n.key)
        dim = next(iter(self.nodes.values())).vector.shape[0] if self.nodes else 0
        result.embeddings = (np.vstack([self.nodes[s].vector for s in order]).astype(np.float32) if order
                             else np.zeros((0, dim), np.float32))
        result.hyperplanes = self.hyperplanes
        self.delta.retired = [s for s in dict.fromkeys(self.delta.retired) if s not in self.nodes]
        return self.delta


def update_lsh(hier: HierarchyResult, h: HierarchyConfig, features0: Features, added: list[str],
               removed: set[str], summarize: Summarize, embed: Embed, device: str = "cpu") -> HierarchyDelta:
    """EraRAG Alg. 3: re-hash with the stored hyperplanes, re-partition affected buckets layer by layer.

    `added`/`removed` are layer-0 node ids (chunks, entities); `features0` gives layer-0 vectors.
    A layer's rows are its segments' members in segment order, so stored summaries alone
    rebuild the partition. When the top layer still holds at least max(2, min_layer_size)
    nodes after the update and max_layers allows, new layers are built over it (Alg. 3's new
    top layer when a layer outgrows s_max).
    """
    table = _Table(hier)
    first = 2 if hier.partitioner == "leiden" else 1
    adds, rems = list(added), set(removed)
    for number in range(first, table.top + 1):
        if not adds and not rems:
            break
        adds, rems = _update_layer(table, number, first, h, features0, adds, rems, summarize, embed, device)
    _grow(table, h, summarize, embed, device)
    return table.finish()


def _vectors(table: _Table, number: int, first: int, features0: Features, ids: list[str]) -> np.ndarray:
    if number == first and first == 1:
        return features0(ids)
    return np.vstack([table.nodes[i].vector for i in ids]) if ids else np.zeros((0, 1), np.float32)


def _update_layer(table: _Table, number: int, first: int, h: HierarchyConfig, features0: Features,
                  adds: list[str], rems: set[str], summarize: Summarize, embed: Embed,
                  device: str) -> tuple[list[str], set[str]]:
    seg_ids = table.layer(number)
    inputs = [m for sid in seg_ids for m in table.nodes[sid].children]
    bounds = np.cumsum([0] + [len(table.nodes[sid].children) for sid in seg_ids])
    segments = [np.arange(bounds[i], bounds[i + 1]) for i in range(len(seg_ids))]
    planes = table.hyperplanes[number - first]
    removed_rows = np.array([i for i, m in enumerate(inputs) if m in rems], dtype=np.int64)
    # Rows on their way out may already be gone from the table; their codes are never read.
    staying = np.setdiff1d(np.arange(len(inputs)), removed_rows)
    codes = np.zeros(len(inputs), np.int64)
    if staying.size:
        codes[staying] = hash_codes(_vectors(table, number, first, features0, [inputs[i] for i in staying]),
                                    planes, device)
    new_codes = hash_codes(_vectors(table, number, first, features0, adds), planes, device) if adds \
        else np.zeros(0, np.int64)
    rep = repartition_affected(segments, codes, new_codes, h.s_min, h.s_max, removed_rows)
    rows = [m for m in inputs if m not in rems] + adds
    gone = [seg_ids[i] for i in rep.removed]
    fresh_members = [[rows[r] for r in rep.segments[i]] for i in rep.changed]
    table.retire(gone)
    fresh = table.add(number, fresh_members, [[] for _ in fresh_members], summarize, embed)
    return fresh, set(gone)


def _grow(table: _Table, h: HierarchyConfig, summarize: Summarize, embed: Embed, device: str) -> None:
    top = table.top
    ids = table.layer(top)
    if top == 0 or top >= h.max_layers or len(ids) < max(2, h.min_layer_size):
        return
    vectors = np.vstack([table.nodes[i].vector for i in ids])

    def summarize_layer(members: list[list[str]], texts: Mapping[str, str]) -> list[str]:
        leaves = [sorted({leaf for m in ms for leaf in table.leaves_of(m)}) for ms in members]
        return summarize(members, leaves, {**{s: n.text for s, n in table.nodes.items()}, **texts})

    built = build_hierarchy(vectors, ids, summarize_layer, embed, k=h.num_hyperplanes, seed=h.seed,
                            s_min=h.s_min, s_max=h.s_max, max_layers=h.max_layers - top,
                            min_layer_size=h.min_layer_size, first_layer=top + 1, device=device)
    for layer in built.layers:
        table.hyperplanes.append(layer.hyperplanes)
        for sid, ms, text, vec in zip(layer.node_ids, layer.members, layer.texts, layer.embeddings):
            leaves = sorted({leaf for m in ms for leaf in table.leaves_of(m)})
            table.nodes[sid] = _Node(layer.number, text, ms, leaves, summary_key(ms), vec)
            table.delta.fresh.append(sid)
        table.next_ordinal[layer.number] = len(layer.node_ids)


def update_leiden(hier: HierarchyResult, tau_attach: float, new_entities: list[str], new_chunks: list[str],
                  removed: set[str], summarize: Summarize, embed: Embed) -> HierarchyDelta:
    """HyGRAG §3.4 attachment, and deletes, over a Leiden layer 1 with LSH layers above.

    Deletes drop the removed ids from every summary; a summary whose members changed is
    re-summarized (retired when no member is left), then its ancestors. New content (the new
    entities as members, the new chunks as leaves) is summarized once; it joins the most
    similar layer-1 community when that similarity reaches `tau_attach`, otherwise it becomes
    a new layer-1 summary under the most similar summary of the lowest layer above that
    reaches tau_attach (the top layer's best when none does). Only the paths above change.
    """
    table = _Table(hier)
    add_children: dict[str, list[str]] = {}
    add_extra: dict[str, list[str]] = {}
    if new_entities or new_chunks:
        members = new_entities or new_chunks
        [text] = summarize([members], [sorted(set(new_entities) | set(new_chunks))], {})
        vec = np.asarray(embed([text]), dtype=np.float32)[0]
        layer, target = _attach_point(table, vec, tau_attach)
        if target is not None and layer == 1:
            add_children[target], add_extra[target] = list(new_entities), list(new_chunks)
        else:
            extra = [c for c in new_chunks if c not in members]
            [sid] = table.add(1, [members], [extra], summarize, embed)
            if target is not None:
                add_children[target] = [sid]
    _rebuild_paths(table, set(removed), add_children, add_extra, summarize, embed)
    return table.finish()


def _attach_point(table: _Table, vec: np.ndarray, tau: float) -> tuple[int, str | None]:
    """The lowest layer whose most similar summary reaches tau, and that summary (else the top's best)."""
    best: tuple[int, str | None] = (0, None)
    for number in range(1, table.top + 1):
        ids = table.layer(number)
        if not ids:
            continue
        sims = np.vstack([table.nodes[i].vector for i in ids]) @ vec
        j = int(np.argmax(sims))
        best = (number, ids[j])
        if sims[j] >= tau:
            return best
    return best


def _rebuild_paths(table: _Table, removed: set[str], add_children: dict[str, list[str]],
                   add_extra: dict[str, list[str]], summarize: Summarize, embed: Embed) -> None:
    """Re-summarize every touched summary bottom-up under a fresh id and swap it into its parent.

    A summary's leaves are its children's leaves plus its own extra leaves (a Leiden
    community's chunks), so an edit is (children, extra leaves).
    """
    parent = {c: sid for sid, n in table.nodes.items() for c in n.children}

    def current(sid: str) -> tuple[list[str], list[str]]:
        node = table.nodes[sid]
        derived = {leaf for c in node.children for leaf in table.leaves_of(c)}
        return list(node.children), sorted(set(node.leaves) - derived)

    edits: dict[str, tuple[list[str], list[str]]] = {}
    for sid, node in table.nodes.items():
        if removed & set(node.leaves) or removed & set(node.children):
            children, extra = current(sid)
            edits[sid] = ([c for c in children if c not in removed], [e for e in extra if e not in removed])
    for sid in set(add_children) | set(add_extra):
        children, extra = edits.get(sid) or current(sid)
        edits[sid] = (children + add_children.get(sid, []), extra + add_extra.get(sid, []))
    for number in range(1, table.top + 1):
        # Popped: these leave the table below, and the next layer must not look them up.
        layer_edits = {sid: edits.pop(sid) for sid in list(edits) if table.nodes[sid].layer == number}
        here = list(layer_edits)
        if not here:
            continue
        keep = [sid for sid in here if layer_edits[sid][0]]
        swap = dict(zip(keep, table.add(number, [layer_edits[s][0] for s in keep],
                                        [layer_edits[s][1] for s in keep], summarize, embed)))
        for old in here:
            up = parent.get(old)
            if up is not None:
                children, extra = edits.get(up) or current(up)
                edits[up] = ([swap.get(c, c) for c in children if c != old or old in swap], extra)
        table.retire(here)
