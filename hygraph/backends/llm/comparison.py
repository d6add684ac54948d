"""Comparison questions for the extractive answerer: "Which film came out first, X or Y?", "Who was born later,
A or B?", "Which film has the director who died first, X or Y?".

The answer is one of the two options, chosen by comparing a date the context states for each:
the option's own date (release, founding, birth) or, when the question asks about a role
("the director who died first"), the date of the person the option's passage names in that
role ("directed by D"). Without a date for both options there is no answer here (the caller
falls back to a sentence): nothing is guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from hygraph.backends.llm.lexical import Span, find_spans, stem, words

_MONTHS = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july", "august",
                                         "september", "october", "november", "december"), 1)}
_EARLY = frozenset("first earlier earliest older oldest before sooner".split())
_LATE = frozenset("later latest last younger youngest recent newer after".split())
# Words of a comparison question that say how to compare, not what: left out when looking for a role.
_FRAME = _EARLY | _LATE | frozenset(
    "which who whose whom what film movie song album book band person one has have had is was were did does came "
    "come out released born die died death birth first".split())


@dataclass(frozen=True)
class Comparison:
    options: tuple[str, str]  # as the question writes them
    earliest: bool  # the earlier date wins
    event: str  # "born", "died" or "" (the option's first stated date)
    role: frozenset[str]  # stems of the role to follow first ("direct"), empty when none


def parse(question: str) -> Comparison | None:
    """The comparison a question asks for, or None: two options joined by "or" at its end, and a time word."""
    spans = [s for s in find_spans(question) if s.type == "NAME"]
    if len(spans) < 2:
        return None
    first, second = spans[-2], spans[-1]
    between = question[first.end:second.start].strip().casefold()
    if between not in ("or", "or the") or question[second.end:].strip(" ?") != "":
        return None
    head = words(question[:first.start])
    if _EARLY.intersection(head):
        earliest = True
    elif _LATE.intersection(head):
        earliest = False
    else:
        return None
    stems = {stem(w) for w in head}
    event = "born" if "born" in stems else "died" if "die" in stems else ""
    role = frozenset(stem(w) for w in head if w not in _FRAME and len(w) > 3) - {"born", "die"}
    return Comparison((first.name, second.name), earliest, event, role)


def date_key(span: Span) -> tuple[int, int, int] | None:
    """(year, month, day) of a date span ("7 January 1976", "January 7, 1976", "1976"), None without a year."""
    tokens = words(span.name)
    year = next((int(t) for t in tokens if t.isdigit() and len(t) in (3, 4)), None)
    if year is None:
        return None
    month = next((_MONTHS[t] for t in tokens if t in _MONTHS), 0)
    day = next((int(t) for t in tokens if t.isdigit() and len(t) <= 2), 0)
    return (year, month, day)


_DASH = re.compile(r"[–—-]")


def event_date(sentence: str, spans: Sequence[Span], event: str) -> tuple[int, int, int] | None:
    """The date of `event` a sentence states: Wikipedia's "(birth – death)" parenthesis, "born ...", "died ..."; for
    no event, the sentence's first date."""
    dates = [s for s in spans if s.type == "DATE" and date_key(s) is not None]
    if not dates:
        return None
    if event:
        paren = sentence.find("(")
        close = sentence.find(")", paren)
        inside = [d for d in dates if paren >= 0 and paren < d.start and (close < 0 or d.end <= close)]
        dash = _DASH.search(sentence, paren + 1, close if close > 0 else len(sentence)) if paren >= 0 else None
        if inside and dash is not None:
            side = [d for d in inside if (d.start < dash.start()) == (event == "born")]
            if side:
                return date_key(side[0])
        cue = "born" if event == "born" else "die"
        for d in dates:
            before = [stem(w) for w in words(sentence[max(0, d.start - 30):d.start])[-3:]]
            if cue in before:
                return date_key(d)
        if event == "born" and inside and dash is None and "born" in words(sentence[paren:close]):
            return date_key(inside[0])
        return None
    return date_key(dates[0])


@dataclass(frozen=True)
class Sentence:
    """What the comparison reads of one context sentence."""

    number: int  # the context item it comes from (for the citation)
    text: str
    spans: tuple[Span, ...]
    topic: str  # id of its passage's title
    mentions: Callable[[str], bool]  # whether it names (or, by pronoun, refers to) an entity id


def answer(question: str, sentences: Sequence[Sentence], entity_id: Callable[[str], str]) -> tuple[str, list[int]] | None:
    """(the winning option as the question writes it, cited item numbers), or None when the context does not
    give a date for both options."""
    cmp = parse(question)
    if cmp is None:
        return None
    found: list[tuple[tuple[int, int, int], list[int]]] = []
    for option in cmp.options:
        dated = _option_date(entity_id(option), cmp, sentences, entity_id)
        if dated is None:
            return None
        found.append(dated)
    (a, cite_a), (b, cite_b) = found
    if a == b:
        return None
    first_wins = (a < b) == cmp.earliest
    return cmp.options[0 if first_wins else 1], sorted(set(cite_a + cite_b))


def _about(eid: str, sentences: Sequence[Sentence]) -> list[Sentence]:
    """The sentences of the passage titled `eid` first, then others naming it."""
    own = [s for s in sentences if s.topic == eid]
    return own + [s for s in sentences if s.topic != eid and s.mentions(eid)]


def _option_date(eid: str, cmp: Comparison, sentences: Sequence[Sentence],
                 entity_id: Callable[[str], str]) -> tuple[tuple[int, int, int], list[int]] | None:
    about = _about(eid, sentences)
    if not cmp.role:
        return next(((d, [s.number]) for s in about if (d := event_date(s.text, s.spans, cmp.event))), None)
    # Follow the role: the first name after a role word in the option's sentences ("directed by D").
    for s in about:
        for i, span in enumerate(s.spans):
            if span.type != "NAME" or entity_id(span.name) == eid:
                continue
            before = {stem(w) for w in words(s.text[max(0, span.start - 40):span.start])[-4:]}
            if cmp.role & before:
                person = entity_id(span.name)
                dated = next(((d, [s.number, t.number]) for t in _about(person, sentences)
                              if (d := event_date(t.text, t.spans, cmp.event))), None)
                if dated is not None:
                    return dated
    return None
