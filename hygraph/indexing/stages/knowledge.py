"""The knowledge stage: per-chunk extractions -> merged entities, relations and hyperedges, with provenance.

Three sources feed the same tables: the LLM `extract` role, precomputed OpenIE triples
mapped onto chunks (`--triples`), and an existing knowledge graph (`--kg`, Adaptive
Context GraphRAG starts from one) whose facts are tied to no chunk.

`Knowledge` holds the merge rules (an entity keeps its highest-scored record and its most
frequent surface form; relations and hyperedges are deduplicated by content id; each keeps
its supporting chunks). The build merges every extraction into one `Knowledge`; an update
loads only the rows the batch touches into a `Knowledge` of their own, applies the same
rules, and writes back the rows that changed.
"""

from __future__ import annotations

from bisect import insort
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Collection, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from hygraph.backends.llm.lexical import split_sentences
from hygraph.errors import InputError
from hygraph.indexing.state import IndexState
from hygraph.model import (Chunk, Entity, Extraction, Hyperedge, Relation, TripleRecord, normalize_name,
                           read_jsonl)
from hygraph.store.artifacts import (CHUNKS, ENTITIES, HYPEREDGES, RELATIONS, ChunkRow, EntityRow, HyperedgeRow,
                                     RelationRow)


@dataclass
class Knowledge:
    """Deduplicated knowledge keyed by content-derived id; `*_chunks` are the supporting chunk ids."""

    entities: dict[str, Entity] = field(default_factory=dict)
    entity_chunks: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    relations: dict[str, Relation] = field(default_factory=dict)
    relation_chunks: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    hyperedges: dict[str, Hyperedge] = field(default_factory=dict)
    hyperedge_chunks: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    surface_forms: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))

    # Each `add_*` method applies one record and says whether it had any effect (stages/knowledge_merge.py tracks
    # the records that did).

    def add_entity(self, ent: Entity, chunk_id: str | None) -> bool:
        if not ent.id:
            return False
        self.surface_forms[ent.id][ent.name] += 1
        old = self.entities.get(ent.id)
        if old is None or ent.score > old.score:
            self.entities[ent.id] = Entity(ent.id, ent.name, ent.type or (old.type if old else ""),
                                           ent.description or (old.description if old else ""),
                                           ent.score)
        if chunk_id is not None:
            self.entity_chunks[ent.id].add(chunk_id)
        return True

    def add(self, ex: Extraction, chunk_id: str | None) -> None:
        for ent in ex.entities:
            self.add_entity(ent, chunk_id)
        for rel in ex.relations:
            if not rel.head or not rel.tail:
                continue  # an end with no letters or digits (OpenIE emits "?" and "-") names no entity
            self.add_end(rel.head, chunk_id)
            self.add_end(rel.tail, chunk_id)
            self.add_relation(rel, chunk_id)
        for he in ex.hyperedges:
            self.add_hyperedge(he, chunk_id)

    def add_end(self, end: str, chunk_id: str | None) -> bool:
        """A relation's end: an entity not seen before is added under its id, supported by this chunk. Whether it
        was seen is a question about this one entity id (stages/knowledge_merge.py relies on that)."""
        return end not in self.entities and self.add_entity(Entity(end, end), chunk_id)

    def add_relation(self, rel: Relation, chunk_id: str | None) -> bool:
        """The relation alone: its ends are `add_end`'s."""
        old = self.relations.get(rel.id)
        if old is None or rel.score > old.score:
            self.relations[rel.id] = rel
        if chunk_id is not None:
            self.relation_chunks[rel.id].add(chunk_id)
        return True

    def add_hyperedge(self, he: Hyperedge, chunk_id: str | None) -> bool:
        if len(he.entities) < 2:
            return False
        old = self.hyperedges.get(he.id)
        if old is None or he.score > old.score:
            self.hyperedges[he.id] = he
        if chunk_id is not None:
            self.hyperedge_chunks[he.id].add(chunk_id)
        return True

    def remove_chunks(self, chunk_ids: Iterable[str],
                      named: Callable[[str], bool] | None = None) -> tuple[set[str], set[str], set[str]]:
        """Withdraw the support of deleted chunks; returns the entity, relation and hyperedge ids left
        with none. An entity stays while a remaining relation or hyperedge still names it (`named`
        answers that for a partial Knowledge; the default looks at every relation and hyperedge
        held here); facts that never had a chunk (`--kg`) are not touched."""
        gone = set(chunk_ids)
        dropped: list[set[str]] = []
        for table, support in ((self.relations, self.relation_chunks), (self.hyperedges, self.hyperedge_chunks),
                               (self.entities, self.entity_chunks)):
            out = set()
            for key in [k for k, cids in support.items() if cids & gone]:
                support[key] -= gone
                if not support[key]:
                    out.add(key)
            dropped.append(out)
        rels, hes, ents = dropped
        for rid in rels:
            del self.relations[rid], self.relation_chunks[rid]
        for hid in hes:
            del self.hyperedges[hid], self.hyperedge_chunks[hid]
        if named is None:
            names = {e for r in self.relations.values() for e in (r.head, r.tail)}
            names.update(e for h in self.hyperedges.values() for e in h.entities)
            named = names.__contains__
        ents = {e for e in ents if not named(e)}
        for eid in ents:
            del self.entities[eid], self.entity_chunks[eid]
            self.surface_forms.pop(eid, None)
        return ents, rels, hes

    def finish(self) -> "Knowledge":
        """Name each entity by its most frequent surface form (ties: the first seen)."""
        for eid, names in self.surface_forms.items():
            best = names.most_common(1)[0][0]
            ent = self.entities[eid]
            if ent.name != best:
                self.entities[eid] = Entity(eid, best, ent.type, ent.description, ent.score)
        return self


class KnowledgeView(Protocol):
    """What the build's stages after the merge read of the knowledge, by key and in the merge's order: a `Knowledge`,
    or the knowledge shuffle's tables (stages/knowledge_tables.py). A support map's values are chunk ids."""

    @property
    def entities(self) -> Mapping[str, Entity]: ...

    @property
    def entity_chunks(self) -> Mapping[str, Collection[str]]: ...

    @property
    def relations(self) -> Mapping[str, Relation]: ...

    @property
    def relation_chunks(self) -> Mapping[str, Collection[str]]: ...

    @property
    def hyperedges(self) -> Mapping[str, Hyperedge]: ...

    @property
    def hyperedge_chunks(self) -> Mapping[str, Collection[str]]: ...

    @property
    def surface_forms(self) -> Mapping[str, Mapping[str, int]]: ...


def merge_extractions(extractions: Iterable[Extraction]) -> Knowledge:
    kb = Knowledge()
    for ex in extractions:
        kb.add(ex, ex.chunk_id)
    return kb.finish()


def extractions_from_triples(chunks: Sequence[Chunk], records: Sequence[TripleRecord]) -> list[Extraction]:
    """Map precomputed OpenIE triples onto chunks (every record's passage_id must be a corpus id).

    A triple goes to the first chunk of its passage that mentions both ends (else the
    first chunk); entities go to every chunk that mentions them; each sentence naming
    two or more of the passage's entities becomes a hyperedge (HyperGraphRAG's n-ary fact).
    """
    by_doc: dict[str, list[Chunk]] = defaultdict(list)
    for c in chunks:
        by_doc[c.doc_id].append(c)
    out: dict[str, Extraction] = {c.id: Extraction(c.id) for c in chunks}
    for rec in records:
        doc_chunks = by_doc[rec.passage_id]
        lowered = [c.text.lower() for c in doc_chunks]
        names = {normalize_name(n): n for n in (*rec.entities, *(x for t in rec.triples for x in (t[0], t[2])))}
        names.pop("", None)
        for eid, name in names.items():
            for c, low in zip(doc_chunks, lowered):
                if name.lower() in low or len(doc_chunks) == 1:
                    out[c.id].entities.append(Entity(eid, name, "NAME", _sentence_with(c.text, name), 1.0))
        for head, rel, tail in rec.triples:
            target = next((c for c, low in zip(doc_chunks, lowered)
                           if head.lower() in low and tail.lower() in low), doc_chunks[0])
            out[target.id].relations.append(Relation.make(head, rel, tail))
        for c in doc_chunks:
            for sent in split_sentences(c.text):
                low = sent.lower()
                present = [n for n in names.values() if n.lower() in low]
                if len(present) >= 2:
                    out[c.id].hyperedges.append(Hyperedge.make(sent, present))
    return [out[c.id] for c in chunks]


def _sentence_with(text: str, name: str) -> str:
    low = name.lower()
    return next((s for s in split_sentences(text) if low in s.lower()), "")[:200]


def load_kg(path: str | Path) -> Extraction:
    """An existing knowledge graph: one fact per line, `[head, relation, tail]` or {"head","relation","tail"}."""
    ex = Extraction(chunk_id="")
    for lineno, row in read_jsonl(path, objects_only=False):
        where = f"{path}:{lineno}"
        if isinstance(row, list):
            fact = row
        else:
            fact = [row.get("head"), row.get("relation"), row.get("tail")]
        if len(fact) != 3 or not all(isinstance(x, str) and x.strip() for x in fact):
            raise InputError(f"{where}: expected [head, relation, tail] or an object with those three string fields")
        rel = Relation.make(*fact)
        if not rel.head or not rel.tail:
            raise InputError(f"{where}: head and tail must contain letters or digits")
        ex.entities.extend([Entity(rel.head, fact[0], "NAME"), Entity(rel.tail, fact[2], "NAME")])
        ex.relations.append(rel)
    if not ex.relations:
        raise InputError(f"{path}: no facts")
    return ex


# ------------------------------------------------------------------ build: Knowledge -> rows


@dataclass
class ChunkKnowledge:
    """What one chunk contributed: the entities it mentions, the relations and hyperedges it supports."""

    entities: list[str] = field(default_factory=list)
    relations: list[str] = field(default_factory=list)
    hyperedges: list[str] = field(default_factory=list)


def per_chunk(kb: KnowledgeView) -> dict[str, ChunkKnowledge]:
    """Each chunk's entities, relations and hyperedges, in the order of the Knowledge's tables."""
    out: dict[str, ChunkKnowledge] = defaultdict(ChunkKnowledge)
    for eid, cids in kb.entity_chunks.items():
        for cid in cids:
            out[cid].entities.append(eid)
    for rid, cids in kb.relation_chunks.items():
        for cid in cids:
            out[cid].relations.append(rid)
    for hid, cids in kb.hyperedge_chunks.items():
        for cid in cids:
            out[cid].hyperedges.append(hid)
    return out


def entity_relations(kb: KnowledgeView, relation_ids: Iterable[str]) -> dict[str, list[str]]:
    """Entity -> the relations naming it, in relation order (a self-loop is listed once per end)."""
    out: dict[str, list[str]] = defaultdict(list)
    for rid in relation_ids:
        r = kb.relations[rid]
        out[r.head].append(rid)
        out[r.tail].append(rid)
    return out


def entity_hyperedges(kb: KnowledgeView, hyperedge_ids: Iterable[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for hid in hyperedge_ids:
        for eid in kb.hyperedges[hid].entities:
            out[eid].append(hid)
    return out


def entity_row(kb: KnowledgeView, eid: str, relations: Sequence[str], hyperedges: Sequence[str],
               embedding: np.ndarray) -> EntityRow:
    ent = kb.entities.get(eid) or Entity(eid, eid)
    forms = kb.surface_forms.get(eid) or Counter({ent.name: 1})
    return EntityRow(eid, ent.name, ent.type, ent.description, float(ent.score),
                     tuple(sorted(kb.entity_chunks.get(eid, ()))), tuple(relations), tuple(hyperedges),
                     tuple(forms), np.fromiter(forms.values(), dtype=np.int64, count=len(forms)),
                     np.asarray(embedding, dtype=np.float32))


def relation_row(kb: KnowledgeView, rid: str) -> RelationRow:
    r = kb.relations[rid]
    return RelationRow(rid, r.head, r.relation, r.tail, float(r.score), tuple(sorted(kb.relation_chunks.get(rid, ()))))


def hyperedge_row(kb: KnowledgeView, hid: str) -> HyperedgeRow:
    h = kb.hyperedges[hid]
    return HyperedgeRow(hid, h.text, tuple(h.entities), float(h.score),
                        tuple(sorted(kb.hyperedge_chunks.get(hid, ()))))


def entity_text(kb: KnowledgeView, eid: str) -> str:
    """What an entity's text vector embeds: its name (questions name entities, not descriptions)."""
    return kb.entities[eid].name


def relation_text(name_of: Callable[[str], str], relation: Relation) -> str:
    """The triplet text HyGRAG filters relations by: surface names, not normalized ids."""
    return f"{name_of(relation.head)} {relation.relation} {name_of(relation.tail)}"


def build_rows(kb: KnowledgeView, entity_ids: Sequence[str], hyperedge_ids: Sequence[str],
               entity_vectors: np.ndarray) -> Iterator[list[EntityRow] | list[RelationRow] | list[HyperedgeRow]]:
    """The entity (graph order), relation (creation order) and hyperedge (graph order) rows of a build, one table's
    rows at a time: a caller that writes each table before asking for the next never holds two."""
    rels = entity_relations(kb, kb.relations)
    hes = entity_hyperedges(kb, hyperedge_ids)
    yield [entity_row(kb, eid, rels.get(eid, ()), hes.get(eid, ()), entity_vectors[i])
           for i, eid in enumerate(entity_ids)]
    del rels, hes
    yield [relation_row(kb, rid) for rid in kb.relations]
    yield [hyperedge_row(kb, hid) for hid in hyperedge_ids]


# ------------------------------------------------------------------ update: the same rules on the touched rows


@dataclass
class KnowledgeChange:
    """What an update changed, for the stages after it."""

    new_entities: list[str] = field(default_factory=list)
    removed_entities: set[str] = field(default_factory=set)
    new_relations: list[str] = field(default_factory=list)
    removed_relations: set[str] = field(default_factory=set)
    new_hyperedges: list[str] = field(default_factory=list)
    removed_hyperedges: set[str] = field(default_factory=set)
    stale_entities: list[str] = field(default_factory=list)  # descriptions cleared: their summaries are redone
    # Named by another surface form now (the most frequent one changed): their text vector embeds the name
    # (`entity_text`), so it is embedded again, as a build from scratch would.
    renamed_entities: list[str] = field(default_factory=list)
    chunks: dict[str, ChunkKnowledge] = field(default_factory=dict)  # the new chunks' contributions


def _load(state: IndexState, entities: Iterable[str], relations: Iterable[str],
          hyperedges: Iterable[str]) -> tuple[Knowledge, dict[str, EntityRow], dict[str, RelationRow],
                                              dict[str, HyperedgeRow]]:
    """A Knowledge holding just these rows, with their supports and surface-form counts."""
    kb = Knowledge()
    ents: dict[str, EntityRow] = {}
    for eid in dict.fromkeys(entities):
        row = state.get(ENTITIES, eid)
        if row is None:
            continue
        ents[eid] = row
        kb.entities[eid] = Entity(eid, row.name, row.type, row.description, row.score)
        kb.entity_chunks[eid] = set(row.chunks)
        kb.surface_forms[eid] = Counter(dict(zip(row.names, row.name_counts.tolist())))
    rels: dict[str, RelationRow] = {}
    for rid in dict.fromkeys(relations):
        row = state.get(RELATIONS, rid)
        if row is not None:
            rels[rid] = row
            kb.relations[rid] = Relation(rid, row.head, row.relation, row.tail, row.score)
            kb.relation_chunks[rid] = set(row.chunks)
    hes: dict[str, HyperedgeRow] = {}
    for hid in dict.fromkeys(hyperedges):
        row = state.get(HYPEREDGES, hid)
        if row is not None:
            hes[hid] = row
            kb.hyperedges[hid] = Hyperedge(hid, row.text, tuple(row.entities), row.score)
            kb.hyperedge_chunks[hid] = set(row.chunks)
    return kb, ents, rels, hes


def update(state: IndexState, removed: Sequence[ChunkRow], extractions: Sequence[Extraction]) -> KnowledgeChange:
    """Withdraw the removed chunks' support, merge the new chunks' extractions, write the rows that changed.

    Deleted entities' rows go when nothing supports or names them; an entity whose description
    quoted a removed chunk loses it. Entity rows keep their relation and hyperedge lists in step.
    """
    removed_ids = [c.id for c in removed]
    kb, ents, rels, hes = _load(
        state,
        [*(e for c in removed for e in c.entities),
         *(x for ex in extractions for x in (*(e.id for e in ex.entities),
                                             *(end for r in ex.relations for end in (r.head, r.tail))))],
        [*(r for c in removed for r in c.relations), *(r.id for ex in extractions for r in ex.relations)],
        [*(h for c in removed for h in c.hyperedges), *(h.id for ex in extractions for h in ex.hyperedges)])

    def still_named(eid: str) -> bool:
        row = ents[eid]
        return any(r in kb.relations or r not in rels for r in row.relations) or \
            any(h in kb.hyperedges or h not in hes for h in row.hyperedges)

    gone = set(removed_ids)
    touched = [e for e, cids in kb.entity_chunks.items() if cids & gone]
    kb.remove_chunks(removed_ids, named=still_named)
    change = KnowledgeChange()
    removed_text = [c.text for c in removed]
    for eid in touched:
        ent = kb.entities.get(eid)
        # Descriptions are sentences of a chunk, cut with an ellipsis when long.
        quote = ent.description.rstrip("…") if ent is not None else ""
        if quote and any(quote in t for t in removed_text) and not _still_quoted(state, quote,
                                                                                   kb.entity_chunks.get(eid, ())):
            kb.entities[eid] = Entity(ent.id, ent.name, ent.type, "", ent.score)
            change.stale_entities.append(eid)
    for ex in extractions:
        kb.add(ex, ex.chunk_id)
    kb.finish()
    new_chunks = {ex.chunk_id for ex in extractions}
    change.chunks = {cid: ck for cid, ck in per_chunk(kb).items() if cid in new_chunks}
    for cid in new_chunks:
        change.chunks.setdefault(cid, ChunkKnowledge())

    change.new_relations = [r for r in kb.relations if r not in rels]
    change.removed_relations = set(rels) - set(kb.relations)
    change.new_hyperedges = sorted(h for h in kb.hyperedges if h not in hes)
    change.removed_hyperedges = set(hes) - set(kb.hyperedges)
    for rid in kb.relations:
        row = relation_row(kb, rid)
        if rels.get(rid) != row:
            state.put(RELATIONS, row)
    state.delete_all(RELATIONS, change.removed_relations)
    for hid in kb.hyperedges:
        row = hyperedge_row(kb, hid)
        if hes.get(hid) != row:
            state.put(HYPEREDGES, row)
    state.delete_all(HYPEREDGES, change.removed_hyperedges)

    # Entity rows: relation and hyperedge lists follow the facts that came and went.
    lists: dict[str, tuple[list[str], list[str]]] = {}

    def lists_of(eid: str) -> tuple[list[str], list[str]]:
        if eid not in lists:
            row = ents.get(eid) or state.get(ENTITIES, eid)
            lists[eid] = (list(row.relations), list(row.hyperedges)) if row is not None else ([], [])
        return lists[eid]

    for rid in change.removed_relations:
        r = rels[rid]
        for end in (r.head, r.tail):
            rel_list = lists_of(end)[0]
            if rid in rel_list:
                rel_list.remove(rid)
    for rid in change.new_relations:
        r = kb.relations[rid]
        lists_of(r.head)[0].append(rid)
        lists_of(r.tail)[0].append(rid)
    for hid in change.removed_hyperedges:
        for eid in hes[hid].entities:
            he_list = lists_of(eid)[1]
            if hid in he_list:
                he_list.remove(hid)
    for hid in change.new_hyperedges:
        for eid in kb.hyperedges[hid].entities:
            insort(lists_of(eid)[1], hid)

    change.removed_entities = {e for e in ents if e not in kb.entities}
    state.delete_all(ENTITIES, change.removed_entities)
    for eid in dict.fromkeys([*kb.entities, *lists]):
        if eid in change.removed_entities:
            continue
        old = ents.get(eid) or state.get(ENTITIES, eid)
        if old is None and eid not in kb.entities:
            continue  # a hyperedge member that is no entity of the index
        rel_list, he_list = lists_of(eid)
        if eid in kb.entities:
            row = entity_row(kb, eid, rel_list, he_list,
                             old.embedding if old is not None else np.zeros(state.dims["text"], np.float32))
        else:  # an entity outside this Knowledge whose relation or hyperedge list changed
            row = replace(old, relations=tuple(rel_list), hyperedges=tuple(he_list))
        if old is None:
            change.new_entities.append(eid)
        elif row.name != old.name:
            change.renamed_entities.append(eid)
        if not _same_entity(old, row):
            state.put(ENTITIES, row)
    return change


def _still_quoted(state: IndexState, quote: str, chunk_ids: Iterable[str]) -> bool:
    """Whether a chunk that still mentions the entity holds the sentence its description quotes. The same
    sentence is often in several documents (a quotation, a boilerplate line, a re-posted passage): deleting one
    of them leaves the description true, and clearing it would re-summarize every summary above the entity."""
    for cid in sorted(chunk_ids):
        row = state.get(CHUNKS, cid)
        if row is not None and quote in row.text:
            return True
    return False


def _same_entity(a: EntityRow | None, b: EntityRow) -> bool:
    if a is None:
        return False
    return (a.name, a.type, a.description, a.score, a.chunks, a.relations, a.hyperedges, a.names) == \
        (b.name, b.type, b.description, b.score, b.chunks, b.relations, b.hyperedges, b.names) and \
        np.array_equal(a.name_counts, b.name_counts)
