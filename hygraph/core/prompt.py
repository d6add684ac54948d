"""Prompt assembly (HyGRAG eq. 23, Appendix E): numbered, sectioned context under a token budget.

Sections follow the paper's order, from high-level understanding to detail: community
summaries, entities, key relations, hyperedge facts (HyperGraphRAG), source passages.
Items are numbered globally so an answer can cite them: the prompt's items are the retrieved
ContextItems with their `number` set, the same type the LLM roles read.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, Iterable

from hygraph.core.retrieval.context import ContextItem, LazySources, LazyTextItem

SECTIONS: dict[str, str] = {
    "summary": "Community summaries",
    "entity": "Entities",
    "relation": "Key relations",
    "hyperedge": "Hyperedge facts",
    "chunk": "Source passages",
}

INSUFFICIENT = "Insufficient information"

SYSTEM_PROMPT = (
    "You answer questions using only the numbered context given with each question.\n"
    "Rules:\n"
    "1. Use only facts stated in the context; never add outside knowledge or make anything up.\n"
    "2. Cite the numbers of the context items that support your answer, like [1] or [2][5].\n"
    f'3. If the context does not contain enough information to answer, reply "{INSUFFICIENT}".\n'
    "4. Answer concisely: a name, date, number or short phrase when the question asks for one."
)

_INSTRUCTION = (
    "Answer the question using only the context above and cite the item numbers you used. "
    f'If the context is not sufficient, reply "{INSUFFICIENT}".'
)
# The lazy texts (hypergraph's entities and facts) of the best-scored items are made this many at a time, in one read
# each, while the budget admits items: a couple of hundred fit, of up to a thousand retrieved.
_TEXTS_AT_ONCE = 64
_CONTEXT_HEAD = "Context:"
_NO_CONTEXT = "(no context retrieved)"


@dataclass(frozen=True)
class AssembledPrompt:
    """The two chat messages and the numbered items they contain, for citation lookup."""

    system: str
    user: str
    items: tuple[ContextItem, ...]  # in prompt order, numbers 1..n


def _whitespace_tokens(text: str) -> int:
    return len(text.split())


def _item_line(number: int, score: float, text: str) -> str:
    return f"[{number}] (score {score:.3f}) {text.strip()}"


def _section_header(kind: str) -> str:
    return f"## {SECTIONS[kind]}"


def _question_line(question: str) -> str:
    return f"Question: {question.strip()}"


def _numbered(item: ContextItem, number: int) -> ContextItem:
    """`dataclasses.replace(item, number=number, sources=tuple(item.sources))` at a fraction of its cost (a mode's
    prompt numbers a couple of hundred items): a copy of the same class and attributes, a text not made yet
    (a lazy item's) made on read as the original's would be."""
    copy = object.__new__(type(item))
    copy.__dict__.update(item.__dict__)
    copy.number, copy.sources = number, tuple(item.sources)
    return copy


def render_user(question: str, items: Iterable[ContextItem]) -> str:
    """HyGRAG eq. 23 user message: the numbered sections in order, the question, the instruction."""
    parts = [_CONTEXT_HEAD]
    kind = None
    for n in items:
        if n.kind != kind:
            kind = n.kind
            parts.append(_section_header(kind))
        parts.append(_item_line(n.number, n.score, n.text))
    if len(parts) == 1:
        parts.append(_NO_CONTEXT)
    parts += [_question_line(question), _INSTRUCTION]
    return "\n\n".join(parts)


def _within_budget(question: str, items: list[ContextItem], max_tokens: int | None,
                   count_tokens: Callable[[str], int]) -> list[ContextItem]:
    """Keeps the best-scored items that fit; the best passage is admitted first when it fits alone."""
    if max_tokens is None:
        return items
    # Costs add up piece by piece (exact for whitespace counting, close for a tokenizer), so
    # each piece is counted once. The empty-context line is left out: it only appears when
    # nothing fits, and then the budget cannot be met anyway.
    used = sum(count_tokens(part) for part in (SYSTEM_PROMPT, _CONTEXT_HEAD, _question_line(question),
                                               _INSTRUCTION))
    # Numbers are assigned after trimming; the widest possible one bounds every line's cost.
    widest = len(items)

    def line_cost(it: ContextItem) -> int:
        return count_tokens(_item_line(widest, it.score, it.text))

    ranked = sorted(items, key=attrgetter("score"), reverse=True)
    # Scores of summaries, entities and passages are not comparable, and an answer needs source
    # text: the best passage goes first so higher-scored items of other kinds cannot crowd it out.
    best_chunk = next((it for it in ranked if it.kind == "chunk"), None)
    if best_chunk is not None and (used + count_tokens(_section_header("chunk"))
                                   + line_cost(best_chunk)) <= max_tokens:
        ranked.remove(best_chunk)
        ranked.insert(0, best_chunk)
    kept: list[ContextItem] = []
    sections: set[str] = set()
    for at, item in enumerate(ranked):
        if at % _TEXTS_AT_ONCE == 0:
            LazyTextItem.prepare_texts(ranked[at:at + _TEXTS_AT_ONCE])
        extra = line_cost(item)
        if item.kind not in sections:
            extra += count_tokens(_section_header(item.kind))
        # Stop at the first item that does not fit: trimming is strictly lowest-scored first,
        # so a shorter lower-scored item never survives a longer higher-scored one.
        if used + extra > max_tokens:
            break
        used += extra
        kept.append(item)
        sections.add(item.kind)
    return kept


def assemble_prompt(question: str, items: Iterable[ContextItem], max_tokens: int | None = None,
                    count_tokens: Callable[[str], int] = _whitespace_tokens) -> AssembledPrompt:
    """HyGRAG eq. 23: the structured context prompt P(summaries, entities, relations, facts, passages).

    Items are grouped by kind in the paper's section order, ranked by score within a
    section and numbered globally from 1. With `max_tokens`, the whole prompt (system
    and user, as measured by `count_tokens`, whitespace tokens by default) is kept
    within budget by dropping whole items, lowest-scored first across all sections;
    the best source passage is kept whenever it fits on its own. When even the
    question does not fit, the prompt carries no context and still the instruction.
    """
    items = list(items)
    for it in items:
        if it.kind not in SECTIONS:
            raise ValueError(f"unknown context kind '{it.kind}' (expected one of {', '.join(SECTIONS)})")
    kept = _within_budget(question, items, max_tokens, count_tokens)
    order = list(SECTIONS)
    placed = sorted(kept, key=lambda it: (order.index(it.kind), -it.score))
    # An answer cites these: their texts and sources are made here (a mode may have left them lazy), read together.
    LazyTextItem.prepare_texts(placed)
    LazySources.prepare_all(it.sources for it in placed)
    numbered = tuple(_numbered(it, i) for i, it in enumerate(placed, 1))
    return AssembledPrompt(system=SYSTEM_PROMPT, user=render_user(question, numbered),
                           items=numbered)
