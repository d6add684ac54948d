"""Incremental summary hierarchy over the index state: EraRAG selective re-segmentation (LSH) and HyGRAG
attachment (Leiden), touching only what a batch changed.

A summary whose member set changes is re-summarized under a fresh id (ids are never reused for
other content, so a reader of the previous version cannot mistake a new row for its own); the
replacement is a new member one layer up, so changes travel to the top and stop at the first
layer where nothing changed.

LSH layers are re-partitioned locally: the `LayerIndex` the updater keeps between batches knows
each layer's codes (how many rows carry each, which segments hold them), so the affected
segments of EraRAG Alg. 3 are found without reading the layer; only they and the new rows are
partitioned again (core.lsh.partition), with the rules `repartition_affected` applies to a
whole layer. Members' codes are stored with each summary, so no old vector is hashed again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from hygraph.config import HierarchyConfig
from hygraph.core.hierarchy import build_hierarchy, summary_key
from hygraph.core.lsh import affected_codes, hash_codes, partition
from hygraph.indexing.state import IndexState
from hygraph.model import SummaryNode
from hygraph.store.artifacts import HYPERPLANES, PARENTS, SUMMARIES, HyperplanesRow, ParentsRow, SummaryRow
from hygraph.store.versions import Version

# (members per segment, leaves per segment, texts of the member summaries) -> one text per segment.
Summarize = Callable[[list[list[str]], list[list[str]], Mapping[str, str]], list[str]]
Embed = Callable[[Sequence[str]], np.ndarray]
Features = Callable[[list[str]], np.ndarray]


def _ordinal(sid: str) -> int:
    return int(sid.split(":", 1)[1])


def _child_layer(child: str, layer: int) -> int:
    """The layer of a child of a summary of `layer`: one down, except where attachment (HyGRAG §3.4, Leiden)
    hung a new layer-1 summary under the best summary of a higher layer."""
    return 0 if layer == 1 else SummaryNode.layer_of(child)


@dataclass
class EntityNumbers:
    """Entity ids numbered in order of first sight, so a summary request counts mentions in arrays. A number is
    never given to another id (a deleted entity's stays unused): arrays kept from earlier batches stay valid."""

    number: dict[str, int] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)

    def of(self, entity_ids: Sequence[str]) -> np.ndarray:
        out = np.empty(len(entity_ids), np.int32)
        for i, eid in enumerate(entity_ids):
            n = self.number.get(eid)
            if n is None:
                n = self.number[eid] = len(self.ids)
                self.ids.append(eid)
            out[i] = n
        return out


@dataclass
class LayerIndex:
    """What the updater keeps of the summary layers between batches: per layer its summary ids and, for
    LSH layers, how many rows carry each code and which summaries hold them. Derived from the
    summaries at load; a batch edits it as it publishes (a failed batch drops it, see the updater)."""

    s_min: int = 1
    s_max: int = 1
    ids: dict[int, set[str]] = field(default_factory=dict)
    counts: dict[int, Counter] = field(default_factory=dict)
    buckets: dict[int, dict[int, set[str]]] = field(default_factory=dict)
    irregular: dict[int, set[str]] = field(default_factory=dict)  # LSH segments outside [s_min, s_max]
    next_ordinal: dict[int, int] = field(default_factory=dict)
    planes: dict[int, np.ndarray] = field(default_factory=dict)
    leaves: dict[str, tuple[str, ...]] = field(default_factory=dict)  # summary id -> derived leaves (immutable)
    sizes: dict[str, int] = field(default_factory=dict)  # summary id -> children
    # layer-0 node -> the numbers of the entities it counts for (StateSource.mentions): what summary requests
    # read of each leaf
    mentions: dict[str, np.ndarray] = field(default_factory=dict)
    numbers: EntityNumbers = field(default_factory=EntityNumbers)

    @staticmethod
    def load(version: Version, h: HierarchyConfig) -> "LayerIndex":
        index = LayerIndex(s_min=h.s_min, s_max=h.s_max)
        if version.has(SUMMARIES):
            for batch in version.table(SUMMARIES).batches(["id", "layer", "children", "child_codes"]):
                cols = batch.to_pydict()
                for sid, layer, children, codes in zip(cols["id"], cols["layer"], cols["children"],
                                                       cols["child_codes"]):
                    index._add(sid, layer, len(children), codes)
        if version.has(HYPERPLANES):
            for batch in version.table(HYPERPLANES).batches():
                for row in batch.to_pylist():
                    index.planes[int(row["id"][1:])] = np.asarray(row["planes"], np.float32).reshape(row["k"],
                                                                                                    row["dim"])
        return index

    def _add(self, sid: str, layer: int, size: int, codes: Sequence[int]) -> None:
        self.ids.setdefault(layer, set()).add(sid)
        self.sizes[sid] = size
        self.next_ordinal[layer] = max(self.next_ordinal.get(layer, 0), _ordinal(sid) + 1)
        counts = self.counts.setdefault(layer, Counter())
        buckets = self.buckets.setdefault(layer, {})
        for code in codes:
            counts[int(code)] += 1
            buckets.setdefault(int(code), set()).add(sid)
        if len(codes) and not self.s_min <= len(codes) <= self.s_max:
            self.irregular.setdefault(layer, set()).add(sid)

    def add(self, row: SummaryRow) -> None:
        self._add(row.id, row.layer, len(row.children), row.child_codes.tolist())

    def remove(self, row: SummaryRow) -> None:
        self.ids[row.layer].discard(row.id)
        self.sizes.pop(row.id, None)
        self.leaves.pop(row.id, None)
        self.irregular.get(row.layer, set()).discard(row.id)
        counts, buckets = self.counts[row.layer], self.buckets[row.layer]
        for code in row.child_codes.tolist():
            counts[code] -= 1
            if counts[code] <= 0:
                del counts[code]
            holders = buckets.get(code)
            if holders is not None:
                holders.discard(row.id)
                if not holders:
                    del buckets[code]

    def sizes_of(self, layer: int) -> list[int]:
        return [self.sizes[s] for s in self.ids.get(layer, ())]

    @property
    def top(self) -> int:
        return max((layer for layer, ids in self.ids.items() if ids), default=0)


class HierarchyEdit:
    """One batch's edits of the summary layers, through the state and the updater's LayerIndex."""

    def __init__(self, state: IndexState, index: LayerIndex, h: HierarchyConfig, partitioner: str,
                 summarize: Summarize, embed: Embed, device: str = "cpu") -> None:
        self.state, self.index, self.h, self.partitioner = state, index, h, partitioner
        self.summarize, self.embed, self.device = summarize, embed, device
        self.fresh: list[str] = []
        self.retired: list[str] = []

    # -- reading -----------------------------------------------------------------------------

    def summary(self, sid: str) -> SummaryRow:
        return self.state.require(SUMMARIES, sid)

    def parents(self, node: str, layer: int) -> list[str]:
        """Summaries of `layer` that list `node` (a node of layer - 1) as a child or extra leaf."""
        row = self.state.get(PARENTS, node)
        prefix = f"L{layer}:"
        return [s for s in row.summaries if s.startswith(prefix)] if row is not None else []

    def parents_above(self, node: str, layer: int) -> list[str]:
        """Summaries above `layer` that list `node` (a summary of `layer`)."""
        row = self.state.get(PARENTS, node)
        return [s for s in row.summaries if SummaryNode.layer_of(s) > layer] if row is not None else []

    def leaves(self, node: str, layer: int) -> tuple[str, ...]:
        """Sorted layer-0 leaves of a node of `layer` (a layer-0 node is its own leaf)."""
        if layer == 0:
            return (node,)
        got = self.index.leaves.get(node)
        if got is None:
            row = self.summary(node)
            out = set(row.extra_leaves)
            for child in row.children:
                out.update(self.leaves(child, _child_layer(child, layer)))
            got = self.index.leaves[node] = tuple(sorted(out))
        return got

    # -- writing -----------------------------------------------------------------------------

    def _set_parent(self, node: str, sid: str, add: bool) -> None:
        row = self.state.get(PARENTS, node)
        current = list(row.summaries) if row is not None else []
        if add and sid not in current:
            current.append(sid)
        elif not add and sid in current:
            current.remove(sid)
        if current:
            self.state.put(PARENTS, ParentsRow(node, tuple(current)))
        elif row is not None:
            self.state.delete(PARENTS, node)

    def add(self, layer: int, members: list[list[str]], extra: list[list[str]],
            codes: list[np.ndarray] | None = None) -> list[str]:
        """Summarize and embed new segments of `layer` under fresh ids."""
        if not members:
            return []
        leaves = [sorted({leaf for m in ms for leaf in self.leaves(m, _child_layer(m, layer))} | set(ex))
                  for ms, ex in zip(members, extra)]
        known = {m: self.summary(m).text for ms in members for m in ms if layer > 1}
        texts = self.summarize(members, leaves, known)
        vectors = np.asarray(self.embed(texts), dtype=np.float32)
        if codes is None:
            codes = [self._codes(layer, ms) for ms in members]
        ids = []
        for ms, ex, lv, text, vec, cd in zip(members, extra, leaves, texts, vectors, codes):
            sid = SummaryNode.node_id(layer, self.index.next_ordinal.get(layer, 0))
            key = summary_key(lv) if self.partitioner == "leiden" and layer == 1 else summary_key(ms)
            row = SummaryRow(sid, layer, text, tuple(ms), tuple(ex), key, np.asarray(cd, np.int64), vec)
            self.state.put(SUMMARIES, row)
            self.index.add(row)
            self.index.leaves[sid] = tuple(lv)
            for node in (*ms, *ex):
                self._set_parent(node, sid, True)
            ids.append(sid)
        self.fresh.extend(ids)
        return ids

    def _codes(self, layer: int, members: Sequence[str]) -> np.ndarray:
        """Members' codes under the layer's hyperplanes (none for a Leiden layer 1)."""
        planes = self.index.planes.get(layer)
        if planes is None or layer == 1:
            return np.zeros(0, np.int64)
        return hash_codes(np.vstack([self.summary(m).embedding for m in members]), planes, self.device)

    def retire(self, ids: Sequence[str]) -> None:
        for sid in ids:
            row = self.summary(sid)
            self.index.remove(row)
            for node in (*row.children, *row.extra_leaves):
                self._set_parent(node, sid, False)
            self.state.delete(SUMMARIES, sid)
        gone = set(ids)
        self.fresh = [s for s in self.fresh if s not in gone]
        self.retired.extend(s for s in ids)

    # -- EraRAG Alg. 3 -----------------------------------------------------------------------

    def update_lsh(self, features0: Features, added: list[str], removed: set[str]) -> None:
        """Re-hash new layer-0 nodes with the stored hyperplanes and re-partition the affected segments,
        layer by layer; then grow new layers over the top when it outgrew them."""
        adds, rems = list(added), set(removed)
        add_vecs = features0(adds) if adds else np.zeros((0, 1), np.float32)
        for number in range(1, self.index.top + 1):
            if not adds and not rems:
                break
            codes = hash_codes(add_vecs, self.index.planes[number], self.device) if adds else np.zeros(0, np.int64)
            fresh, gone = self._update_layer(number, adds, codes, rems)
            adds, rems = fresh, gone
            add_vecs = np.vstack([self.summary(s).embedding for s in adds]) if adds else np.zeros((0, 1))
        self._grow()

    def _update_layer(self, number: int, adds: list[str], add_codes: np.ndarray,
                      rems: set[str]) -> tuple[list[str], set[str]]:
        h = self.h
        shrunk = {sid for node in rems for sid in self.parents(node, number)}
        kept: dict[str, tuple[list[str], list[int]]] = {}
        counts = Counter(self.index.counts.get(number, Counter()))
        for sid in shrunk:
            row = self.summary(sid)
            pairs = [(c, int(code)) for c, code in zip(row.children, row.child_codes.tolist())]
            for c, code in pairs:
                if c in rems:
                    counts[code] -= 1
            kept[sid] = ([c for c, _ in pairs if c not in rems], [code for c, code in pairs if c not in rems])
        old = sorted(code for code, n in counts.items() if n > 0)
        small = [code for sid in shrunk for code in kept[sid][1] if 0 < len(kept[sid][0]) < h.s_min]
        hit = affected_codes(np.asarray(old, np.int64), np.asarray([counts[c] for c in old], np.int64),
                             add_codes, np.asarray(small, np.int64), h.s_min)
        buckets = self.index.buckets.get(number, {})
        affected = set(shrunk) | {sid for code in hit.tolist() for sid in buckets.get(code, ())}
        affected |= self.index.irregular.get(number, set())
        order = sorted(affected, key=_ordinal)
        pool_ids: list[str] = []
        pool_codes: list[int] = []
        for sid in order:
            children, codes = kept[sid] if sid in kept else (list(self.summary(sid).children),
                                                           self.summary(sid).child_codes.tolist())
            pool_ids.extend(children)
            pool_codes.extend(codes)
        pool_ids.extend(adds)
        pool_codes.extend(add_codes.tolist())
        parts = partition(np.asarray(pool_codes, np.int64), h.s_min, h.s_max) if pool_ids else []
        part_sets = {frozenset(pool_ids[i] for i in p) for p in parts}
        reproduced = {sid for sid in order if sid not in shrunk and frozenset(self.summary(sid).children) in part_sets}
        kept_sets = {frozenset(self.summary(sid).children) for sid in reproduced}
        fresh_parts = [p for p in parts if frozenset(pool_ids[i] for i in p) not in kept_sets]
        gone = [sid for sid in order if sid not in reproduced]
        self.retire(gone)
        fresh = self.add(number, [[pool_ids[i] for i in p] for p in fresh_parts], [[] for _ in fresh_parts],
                         [np.asarray([pool_codes[i] for i in p], np.int64) for p in fresh_parts])
        return fresh, set(gone)

    def _grow(self) -> None:
        top = self.index.top
        ids = sorted(self.index.ids.get(top, ()), key=_ordinal)
        h = self.h
        if top == 0 or top >= h.max_layers or len(ids) < max(2, h.min_layer_size):
            return
        rows = {s: self.summary(s) for s in ids}
        vectors = np.vstack([rows[s].embedding for s in ids])
        texts: dict[str, str] = {s: r.text for s, r in rows.items()}
        layer_of = {s: top for s in ids}

        def summarize_layer(members: list[list[str]], built: Mapping[str, str]) -> list[str]:
            leaves = [sorted({leaf for m in ms for leaf in self.leaves(m, layer_of[m])}) for ms in members]
            return self.summarize(members, leaves, {**texts, **built})

        built = build_hierarchy(vectors, ids, summarize_layer, self.embed, k=h.num_hyperplanes, seed=h.seed,
                                s_min=h.s_min, s_max=h.s_max, max_layers=h.max_layers - top,
                                min_layer_size=h.min_layer_size, first_layer=top + 1, device=self.device)
        for layer in built.layers:
            self.index.planes[layer.number] = layer.hyperplanes
            self.state.put(HYPERPLANES, HyperplanesRow(f"L{layer.number}", layer.hyperplanes.ravel(),
                                                       layer.hyperplanes.shape[0], layer.hyperplanes.shape[1]))
            for sid, seg, text, vec in zip(layer.node_ids, layer.segments, layer.texts, layer.embeddings):
                ms = [layer.input_ids[i] for i in seg]
                leaves = tuple(sorted({leaf for m in ms for leaf in self.leaves(m, layer.number - 1)}))
                row = SummaryRow(sid, layer.number, text, tuple(ms), (), summary_key(ms), layer.codes[seg], vec)
                self.state.put(SUMMARIES, row)
                self.index.add(row)
                self.index.leaves[sid] = leaves
                for m in ms:
                    self._set_parent(m, sid, True)
                self.fresh.append(sid)
                texts[sid] = text
                layer_of[sid] = layer.number

    # -- HyGRAG §3.4 -------------------------------------------------------------------------

    def update_leiden(self, tau_attach: float, new_entities: list[str], new_chunks: list[str],
                      removed: set[str]) -> None:
        """Attachment and deletes over a Leiden layer 1 with LSH layers above.

        Deletes drop the removed ids from every summary listing them; a summary whose members
        changed is re-summarized (retired when no member is left), then its ancestors. New
        content (the new entities as members, the new chunks as leaves) is summarized once; it
        joins the most similar layer-1 community when that similarity reaches `tau_attach`,
        otherwise it becomes a new layer-1 summary under the most similar summary of the lowest
        layer above that reaches tau_attach (the top layer's best when none does).
        """
        add_children: dict[str, list[str]] = {}
        add_extra: dict[str, list[str]] = {}
        if new_entities or new_chunks:
            members = new_entities or new_chunks
            [text] = self.summarize([members], [sorted(set(new_entities) | set(new_chunks))], {})
            vec = np.asarray(self.embed([text]), dtype=np.float32)[0]
            layer, target = self._attach_point(vec, tau_attach)
            if target is not None and layer == 1:
                add_children[target], add_extra[target] = list(new_entities), list(new_chunks)
            else:
                extra = [c for c in new_chunks if c not in members]
                [sid] = self.add(1, [members], [extra])
                if target is not None:
                    add_children[target] = [sid]
        self._rebuild_paths(removed, add_children, add_extra)

    def _attach_point(self, vec: np.ndarray, tau: float) -> tuple[int, str | None]:
        best: tuple[int, str | None] = (0, None)
        for number in range(1, self.index.top + 1):
            ids = sorted(self.index.ids.get(number, ()), key=_ordinal)
            if not ids:
                continue
            sims = np.vstack([self.summary(i).embedding for i in ids]) @ vec
            j = int(np.argmax(sims))
            best = (number, ids[j])
            if sims[j] >= tau:
                return best
        return best

    def _rebuild_paths(self, removed: set[str], add_children: dict[str, list[str]],
                       add_extra: dict[str, list[str]]) -> None:
        """Re-summarize every touched summary bottom-up under a fresh id and swap it into its parent."""

        def current(sid: str) -> tuple[list[str], list[str]]:
            row = self.summary(sid)
            return list(row.children), list(row.extra_leaves)

        edits: dict[str, tuple[list[str], list[str]]] = {}
        for node in removed:
            for sid in self.parents(node, 1):
                children, extra = edits.get(sid) or current(sid)
                edits[sid] = ([c for c in children if c not in removed], [e for e in extra if e not in removed])
        for sid in set(add_children) | set(add_extra):
            children, extra = edits.get(sid) or current(sid)
            edits[sid] = (children + add_children.get(sid, []), extra + add_extra.get(sid, []))
        for number in range(1, self.index.top + 1):
            here = sorted((sid for sid in edits if self.summary(sid).layer == number), key=_ordinal)
            if not here:
                continue
            layer_edits = {sid: edits.pop(sid) for sid in here}
            keep = [sid for sid in here if layer_edits[sid][0]]
            swap = dict(zip(keep, self.add(number, [layer_edits[s][0] for s in keep],
                                           [layer_edits[s][1] for s in keep])))
            for old in here:
                for up in self.parents_above(old, number):
                    children, extra = edits.get(up) or current(up)
                    edits[up] = ([swap.get(c, c) for c in children if c != old or old in swap], extra)
            self.retire(here)

