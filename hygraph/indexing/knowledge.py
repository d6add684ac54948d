"""Per-chunk extractions -> merged entity, relation and hyperedge tables, with their provenance.

Three sources feed the same tables: the LLM `extract` role, precomputed OpenIE triples
mapped onto chunks (`--triples`), and an existing knowledge graph (`--kg`, Adaptive
Context GraphRAG starts from one) whose facts are tied to no chunk.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from hygraph.backends.llm.lexical import split_sentences
from hygraph.errors import InputError
from hygraph.model import (Chunk, Entity, Extraction, Hyperedge, Relation, TripleRecord, normalize_name,
                           read_jsonl)


@dataclass
class Knowledge:
    """Deduplicated knowledge keyed by content-derived id; `*_chunks` are the supporting chunk ids."""

    entities: dict[str, Entity] = field(default_factory=dict)
    entity_chunks: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    relations: dict[str, Relation] = field(default_factory=dict)
    relation_chunks: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    hyperedges: dict[str, Hyperedge] = field(default_factory=dict)
    hyperedge_chunks: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    _names: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))

    def add_entity(self, ent: Entity, chunk_id: str | None) -> None:
        if not ent.id:
            return
        self._names[ent.id][ent.name] += 1
        old = self.entities.get(ent.id)
        if old is None or ent.score > old.score:
            self.entities[ent.id] = Entity(ent.id, ent.name, ent.type or (old.type if old else ""),
                                           ent.description or (old.description if old else ""),
                                           ent.score)
        if chunk_id is not None:
            self.entity_chunks[ent.id].add(chunk_id)

    def add(self, ex: Extraction, chunk_id: str | None) -> None:
        for ent in ex.entities:
            self.add_entity(ent, chunk_id)
        for rel in ex.relations:
            if not rel.head or not rel.tail:
                continue  # an end with no letters or digits (OpenIE emits "?" and "-") names no entity
            for end in (rel.head, rel.tail):
                if end not in self.entities:
                    self.add_entity(Entity(end, end), chunk_id)
            old = self.relations.get(rel.id)
            if old is None or rel.score > old.score:
                self.relations[rel.id] = rel
            if chunk_id is not None:
                self.relation_chunks[rel.id].add(chunk_id)
        for he in ex.hyperedges:
            if len(he.entities) < 2:
                continue
            old = self.hyperedges.get(he.id)
            if old is None or he.score > old.score:
                self.hyperedges[he.id] = he
            if chunk_id is not None:
                self.hyperedge_chunks[he.id].add(chunk_id)

    def remove_chunks(self, chunk_ids: Iterable[str]) -> tuple[set[str], set[str], set[str]]:
        """Withdraw the support of deleted chunks; returns the entity, relation and hyperedge ids left
        with none. An entity stays while a remaining relation or hyperedge still names it; facts
        that never had a chunk (`--kg`) are not touched."""
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
        named = {e for r in self.relations.values() for e in (r.head, r.tail)}
        named.update(e for h in self.hyperedges.values() for e in h.entities)
        ents -= named
        for eid in ents:
            del self.entities[eid], self.entity_chunks[eid]
            self._names.pop(eid, None)
        return ents, rels, hes

    def finish(self) -> "Knowledge":
        """Name each entity by its most frequent surface form (ties: the first seen)."""
        for eid, names in self._names.items():
            best = names.most_common(1)[0][0]
            ent = self.entities[eid]
            if ent.name != best:
                self.entities[eid] = Entity(eid, best, ent.type, ent.description, ent.score)
        return self


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
