"""Context items and the steps that collect them, shared by the modes: HyGRAG's item builders (eq. 20), the
relation selection (eqs. 18-19), the members of retrieved summaries (eq. 17) and the chunks under them, and the
cut at k passages."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Sequence

from hygraph.core.retrieval.context import ContextItem
from hygraph.core.retrieval.view import IndexView


def select_relations(relation_hits: Sequence[tuple[str, float]], is_candidate_end: Callable[[str], bool],
                     fallback_entities: Iterable[str], k: int, view: IndexView) -> list[tuple[str, float]]:
    """HyGRAG eqs. 18-19: the k relations with an end in the entity set, most similar to the query first.

    `relation_hits` is a similarity search over the whole relation collection, deeper than k;
    the candidates among them (head or tail accepted by `is_candidate_end`) keep their
    similarity and come first. This scores exactly the candidates the search reached, without
    scanning the collection. When fewer than k are found, the rest are taken from
    `view.entity_relations` of `fallback_entities`, in that order (it should list the entity set
    by priority), until k are collected. Such a relation is outside the search, so its
    similarity is at most the search's last score (the floor); it is scored floor x its
    extraction score, which ranks it after every searched candidate and orders the fallbacks
    by extraction confidence.
    """
    picked: list[tuple[str, float]] = []
    for rid, score in relation_hits:
        head, _, tail, _ = view.relations[rid]
        if is_candidate_end(head) or is_candidate_end(tail):
            picked.append((rid, score))
            if len(picked) == k:
                return picked
    floor = max(relation_hits[-1][1], 0.0) if relation_hits else 0.0
    searched = {rid for rid, _ in relation_hits}
    extra: list[str] = []
    for eid in fallback_entities:
        for rid in view.entity_relations.get(eid, ()):
            if rid not in searched:
                searched.add(rid)
                extra.append(rid)
        if len(picked) + len(extra) >= k:
            break
    extra.sort(key=lambda rid: -view.relations[rid][3])
    return picked + [(rid, floor * view.relations[rid][3]) for rid in extra[:k - len(picked)]]


def chunk_item(cid: str, score: float, view: IndexView) -> ContextItem:
    """HyGRAG eq. 20 context item: a chunk, sourced to its passage."""
    return ContextItem(cid, "chunk", view.chunk_text[cid], score, (view.chunk_doc[cid],))


def summary_item(sid: str, score: float, view: IndexView) -> ContextItem:
    """HyGRAG eq. 20 context item: a community summary with its layer (no sources, see `hybrid`)."""
    return ContextItem(sid, "summary", view.summary_text[sid], score, (), view.summary_layer[sid])


def entity_item(eid: str, score: float, view: IndexView) -> ContextItem:
    """HyGRAG eq. 20 context item: an entity as "name: description", sourced to the passages mentioning it."""
    name = view.entity_name.get(eid, eid)
    desc = view.entity_desc.get(eid, "")
    return ContextItem(eid, "entity", f"{name}: {desc}" if desc else name, score,
                _docs(view.entity_chunks.get(eid, ()), view))


def relation_item(rid: str, score: float, view: IndexView) -> ContextItem:
    """HyGRAG eq. 20 context item: a triplet in entity names, sourced to the passages stating it."""
    head, phrase, tail, _ = view.relations[rid]
    text = f"{view.entity_name.get(head, head)} {phrase} {view.entity_name.get(tail, tail)}"
    return ContextItem(rid, "relation", text, score, _docs(view.relation_chunks.get(rid, ()), view),
                       links=(head, tail))


def searched_members(summary_ids: Iterable[str], searched: set[str], view: IndexView) -> set[str]:
    """HyGRAG eq. 17 / seed 004 global search: the searched ids that are layer-0 members of the summaries.

    Asks each id of the small searched set for the summaries above it (`node_summaries`) instead of
    testing it against each summary's leaves: one lookup per searched id, not one per (summary, id).
    """
    wanted = set(summary_ids)
    return {x for x in searched if is_member(x, wanted, view)}


def is_member(node_id: str, summary_ids: set[str], view: IndexView) -> bool:
    """Whether the node is a layer-0 member of one of the summaries (one lookup of the summaries above it)."""
    return not summary_ids.isdisjoint(view.node_summaries.get(node_id, ()))


def chunks_under(summary_ids: Sequence[str], chunk_hits: Sequence[tuple[str, float]], members: set[str],
                 view: IndexView) -> Iterator[ContextItem]:
    """EraRAG §III-D / seed 004 global search: chunks under the summaries, searched ones (`members`) first.

    The rest follow in summary order and leaf order; the search did not reach them, so their
    similarity is at most its last score, which they are given. Lazy: take what you need.
    """
    yield from (chunk_item(cid, score, view) for cid, score in chunk_hits if cid in members)
    floor = chunk_hits[-1][1] if chunk_hits else 0.0
    placed = set(members)
    for sid in summary_ids:
        for cid in view.summary_leaves.get(sid, ()):
            if cid in view.chunk_text and cid not in placed:
                placed.add(cid)
                yield chunk_item(cid, floor, view)


def until_k_passages(items: Iterable[ContextItem], k: int) -> list[ContextItem]:
    """CONTRACT `passages` cut: chunk items in order until they cover k passages, so a long walk stops early."""
    out: list[ContextItem] = []
    docs: set[str] = set()
    for item in items:
        out.append(item)
        docs.update(item.sources)
        if len(docs) >= k:
            break
    return out


def _docs(chunk_ids: Iterable[str], view: IndexView) -> tuple[str, ...]:
    return tuple(dict.fromkeys(view.chunk_doc[c] for c in chunk_ids))
