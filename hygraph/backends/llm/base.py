"""The LLM roles behind one Protocol: extract, summarize, decompose, answer, route."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Literal, Protocol, Sequence, Union, runtime_checkable

from hygraph.core.retrieval.context import ContextItem
from hygraph.model import Chunk, Extraction

ROLES = ("extract", "summarize", "decompose", "answer", "route")
# The question types the `route` role tells apart; `auto` retrieves each with its own mode (core/retrieval/routing.py).
Route = Literal["entity", "bridge", "comparison", "corpus"]
ROUTES: tuple[Route, ...] = ("entity", "bridge", "comparison", "corpus")


@dataclass(frozen=True)
class SummaryRequest:
    """One segment to summarize: its members' texts plus the key entities and relations among them."""

    member_texts: tuple[str, ...]
    entities: tuple[str, ...] = ()
    relations: tuple[str, ...] = ()  # "head relation tail"


@dataclass(frozen=True)
class Answer:
    text: str
    citations: tuple[int, ...] = ()


@dataclass
class RoleUsage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hits: int = 0


@dataclass
class Usage:
    roles: dict[str, RoleUsage] = field(default_factory=lambda: {r: RoleUsage() for r in ROLES})

    def count(self, role: str, calls: int = 1, prompt_tokens: int = 0, completion_tokens: int = 0,
              cache_hits: int = 0) -> None:
        u = self.roles[role]
        u.calls += calls
        u.prompt_tokens += prompt_tokens
        u.completion_tokens += completion_tokens
        u.cache_hits += cache_hits

    def calls(self) -> dict[str, int]:
        """{"extract": 120, ...} for roles that were called: the `llm_calls` of CONTRACT.md."""
        return {r: u.calls for r, u in self.roles.items() if u.calls}

    def merge(self, other: "Usage") -> None:
        for role, u in other.roles.items():
            self.count(role, u.calls, u.prompt_tokens, u.completion_tokens, u.cache_hits)


@runtime_checkable
class LLM(Protocol):
    """Every backend implements all five roles; `usage` counts calls and tokens per role."""

    usage: Usage

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        """Entities, binary relations and n-ary hyperedges per chunk (one Extraction each, same order)."""
        ...

    def summarize(self, requests: Sequence[SummaryRequest]) -> list[str]:
        """HyGRAG four-part summary per segment: themes, entities and roles, relations, context."""
        ...

    def decompose(self, question: str, passages: Sequence[str]) -> list[str]:
        """Follow-up retrieval directives from what a first retrieval round found (HyperRAG §3.1)."""
        ...

    def answer(self, question: str, context: Sequence[ContextItem]) -> Answer:
        """An answer grounded in the numbered context, citing item numbers; "Insufficient information" otherwise."""
        ...

    def answer_stream(self, question: str, context: Sequence[ContextItem]) -> Iterator[Union[str, Answer]]:
        """`answer` as it is produced: text pieces, then the complete Answer (with its citations) last."""
        ...

    def route(self, question: str) -> Route:
        """The question's type: `entity` (about what it names), `bridge` (about an entity it only describes),
        `comparison` (between two things it names) or `corpus` (about the whole collection)."""
        ...
