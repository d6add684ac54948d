"""What every retrieval strategy returns: scored items with provenance, and ranked source passages."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, Protocol, Sequence, overload

import numpy as np

Kind = Literal["summary", "chunk", "entity", "relation", "hyperedge"]
# Per query row, [(id, score)] best first.
Hits = list[list[tuple[str, float]]]
# (collection kind, query rows, k, layer)
SearchRequest = tuple[str, np.ndarray, int, "int | None"]


# A similarity search deeper than k scores candidates that a top-k search would not reach
# (relations around the entity set, passages seeding the walk). 20 x k keeps one search per
# collection cheap; the cap bounds it for large k.
POOL_FACTOR = 20
MAX_POOL = 1000


def pool_size(k: int) -> int:
    """HyGRAG eq. 19 filter depth: hits fetched to score candidates beyond the top k (20 x k, at most 1000, >= k)."""
    return max(k, min(POOL_FACTOR * k, MAX_POOL))


class Search(Protocol):
    """Similarity search over the collections of one index version."""

    def __call__(self, kind: str, queries: np.ndarray, k: int, layer: int | None) -> Hits: ...

    def many(self, requests: Sequence[SearchRequest]) -> list[Hits]:
        """Independent searches, answered in request order: a remote store answers them side by side, so a
        mode that needs four searches waits for about one."""
        ...

    def start(self, requests: Sequence[SearchRequest]) -> Callable[[], list[Hits]]:
        """`many`, begun now: calling the result waits for the hits, so work that needs none (the question's
        BM25 hits and entities) runs while the store searches."""
        ...


class LazySources(Sequence[str]):
    """An item's passage ids (or a fact's member ids), computed on first read: a mode that returns hundreds of items
    (hypergraph's expansion reaches hub entities with thousands of mentions) pays for the sources of the ones the
    prompt keeps only. Equal to any sequence of the same ids; pickles, and is numbered (core/prompt.py), as a tuple.
    The ids are `compute(*args)`: a shared function and its arguments rather than a closure per item, and no
    instance dict, so that the hundreds of them a query makes are few objects for the garbage collector."""

    __slots__ = ("_compute", "_args", "_ids")

    def __init__(self, compute: Callable[..., Sequence[str]], *args: Any) -> None:
        self._compute: Callable[..., Sequence[str]] | None = compute
        self._args = args
        self._ids: tuple[str, ...] = ()

    @staticmethod
    def prepare_all(sources: Iterable[Sequence[str]]) -> None:
        """Lets the compute functions of the unresolved LazySources among `sources` read what they need together
        before each is resolved: one that has a `prepare` method is given the arguments of all its calls at
        once (hypergraph's passages of chunks: one read of the view for all of a prompt's items)."""
        calls: dict[int, tuple[Any, list[tuple[Any, ...]]]] = {}
        for lazy in sources:
            if isinstance(lazy, LazySources) and hasattr(lazy._compute, "prepare"):
                calls.setdefault(id(lazy._compute), (lazy._compute, []))[1].append(lazy._args)
        for compute, args in calls.values():
            compute.prepare(args)

    def _resolved(self) -> tuple[str, ...]:
        if self._compute is not None:
            self._ids, self._compute, self._args = tuple(self._compute(*self._args)), None, ()
        return self._ids

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return self._resolved()[index]

    def __len__(self) -> int:
        return len(self._resolved())

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolved())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str) and self._resolved() == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._resolved())

    def __reduce__(self) -> tuple[type, tuple[tuple[str, ...]]]:
        return tuple, (self._resolved(),)


@dataclass
class ContextItem:
    """One piece of context, from retrieval through the prompt to the LLM roles; higher score = more relevant."""

    id: str
    kind: Kind
    text: str
    score: float
    sources: Sequence[str] = ()  # corpus passage ids this item derives from (a tuple, or LazySources)
    layer: int = 0
    number: int = 0  # its place in the answer prompt (core/prompt.py), what an answer cites; 0 before
    # The entity ids it connects: a relation's head and tail, a hyperedge's members (what a graph view draws).
    links: Sequence[str] = ()


# Every item class is ContextItem or a subclass that adds no field (a query's response lists hundreds of items).
_ITEM_FIELDS = tuple(f.name for f in fields(ContextItem))


class LazyTextItem(ContextItem):
    """A ContextItem whose text is made on first read: hypergraph's expansion returns hundreds of entities, and
    the prompt budget (core/prompt.py) reads the text of the best-scored ones only. Everything else reads it
    as a ContextItem: it compares equal to the ContextItem of the same fields, copies (`dataclasses.replace`)
    hold the text, and it pickles as a ContextItem. The text is `text_of(id)`: one function for all the items of
    a query, not a closure each."""

    _text: str
    _text_of: Callable[[str], str] | None

    @classmethod
    def deferred(cls, id: str, kind: Kind, text_of: Callable[[str], str], score: float,
                 sources: Sequence[str] = (), links: Sequence[str] = ()) -> "LazyTextItem":
        item = cls(id, kind, "", score, sources, links=links)
        item._text_of = text_of
        return item

    @staticmethod
    def prepare_texts(items: Iterable[ContextItem]) -> None:
        """Makes the texts of the lazy items among `items` not made yet, in one call per text function that has a
        `many` method (ids -> their texts): the prompt reads the texts of a couple of hundred best-scored items
        (hypergraph's entities), and a served view reads many keys in one call for less than a few alone."""
        pending: dict[int, tuple[Any, list[LazyTextItem]]] = {}
        for item in items:
            if isinstance(item, LazyTextItem) and item._text_of is not None and hasattr(item._text_of, "many"):
                pending.setdefault(id(item._text_of), (item._text_of, []))[1].append(item)
        for text_of, todo in pending.values():
            for item, text in zip(todo, text_of.many([it.id for it in todo])):
                item.text = text

    @property  # type: ignore[override]
    def text(self) -> str:
        if self._text_of is not None:
            self._text, self._text_of = self._text_of(self.id), None
        return self._text

    @text.setter
    def text(self, value: str) -> None:
        self._text, self._text_of = value, None

    def __eq__(self, other: object) -> bool:
        # Id and kind first: a list search (`list.remove`) over items of other ids makes no text.
        if not isinstance(other, ContextItem):
            return NotImplemented
        return self.id == other.id and self.kind == other.kind and _item_fields(self) == _item_fields(other)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return ContextItem, _item_fields(self)


def _item_fields(item: ContextItem) -> tuple[Any, ...]:
    return tuple(getattr(item, name) for name in _ITEM_FIELDS)


@dataclass
class Passage:
    id: str
    title: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict)  # its document's metadata (set by the engine)


@dataclass
class Context:
    summaries: list[ContextItem] = field(default_factory=list)
    chunks: list[ContextItem] = field(default_factory=list)
    entities: list[ContextItem] = field(default_factory=list)
    relations: list[ContextItem] = field(default_factory=list)
    hyperedges: list[ContextItem] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)  # e.g. the router's choice

    def items(self) -> list[ContextItem]:
        return [*self.summaries, *self.entities, *self.relations, *self.hyperedges, *self.chunks]

    def numbered(self, items: Sequence[ContextItem]) -> "Context":
        """This context cut to the answer prompt's numbered items (what an answer cites; the token budget bounds
        them), each kind in prompt order, with the same passages and notes, and `notes["retrieved"]`
        counting the items of each kind retrieval found before the budget."""
        kinds = {"summary": "summaries", "chunk": "chunks", "entity": "entities", "relation": "relations",
                 "hyperedge": "hyperedges"}
        by_kind: dict[str, list[ContextItem]] = {field: [] for field in kinds.values()}
        for item in sorted(items, key=lambda it: it.number):
            by_kind[kinds[item.kind]].append(item)
        retrieved = {field: len(getattr(self, field)) for field in kinds.values()}
        return Context(**by_kind, passages=self.passages, notes={**self.notes, "retrieved": retrieved})

    def to_dict(self) -> dict[str, Any]:
        out = {k: [_item_dict(i) for i in getattr(self, k)]
               for k in ("summaries", "chunks", "entities", "relations", "hyperedges")}
        out["notes"] = self.notes
        return out


def _item_dict(item: ContextItem) -> dict[str, Any]:
    out = {name: getattr(item, name) for name in _ITEM_FIELDS}
    out["sources"] = tuple(item.sources)
    out["links"] = tuple(item.links)
    return out


def passages_from_chunks(chunks: Iterable[ContextItem], titles: Mapping[str, str], k: int) -> list[Passage]:
    """Rank passages by their best chunk: first appearance in the chunk ranking, score = best chunk's."""
    out: list[Passage] = []
    seen: set[str] = set()
    for item in chunks:
        for pid in item.sources:
            if pid not in seen:
                seen.add(pid)
                out.append(Passage(pid, titles.get(pid, ""), item.score))
                if len(out) == k:
                    return out
    return out
