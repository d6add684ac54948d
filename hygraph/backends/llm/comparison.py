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
    # ids of its passage's title, with and without a disambiguator ("medici", "medici board game")
    topics: frozenset[str]
    mentions: Callable[[str], bool]  # whether it names (or, by pronoun, refers to) an entity id


def answer(question: str, sentences: Sequence[Sentence],
           entity_id: Callable[[str], str]) -> tuple[str, list[int]] | None:
    """(the winning option as the question writes it, cited item numbers), or None when the context does not
    give a date for both options."""
    cmp = parse(question)
    if cmp is None:
        return None
    found: list[tuple[tuple[int, int, int], list[int]]] = []
    for option in cmp.options:
        dated = _option_date(_option_id(option, entity_id), cmp, sentences, entity_id)
        if dated is None:
            return None
        found.append(dated)
    (a, cite_a), (b, cite_b) = found
    if a == b:
        return None
    first_wins = (a < b) == cmp.earliest
    return cmp.options[0 if first_wins else 1], sorted(set(cite_a + cite_b))


_DISAMBIGUATOR = re.compile(r"\s*\([^()]*\)$")


def _option_id(name: str, entity_id: Callable[[str], str]) -> str:
    """An option's id as titles are matched: without a disambiguator ("Sabotage (1936 Film)" -> "sabotage")."""
    return entity_id(_DISAMBIGUATOR.sub("", name)) or entity_id(name)


def _about(eid: str, sentences: Sequence[Sentence]) -> list[Sentence]:
    """The sentences of the passage titled `eid` first, then others naming it."""
    own = [s for s in sentences if eid in s.topics]
    return own + [s for s in sentences if eid not in s.topics and s.mentions(eid)]


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


_AUX = re.compile(r"(?:are|is|were|was|do|does|did)\b")
_COPULA = re.compile(r"\b(?:is|was|are|were)\b")
# Words of a yes/no question that frame it rather than state the property asked about.
_YES_NO_FRAME = frozenset("are is were was do does did both also same share from the of and have has".split())


def yes_no(question: str, sentences: Sequence[Sentence],
           entity_id: Callable[[str], str]) -> tuple[str, list[int]] | None:
    """"yes" or "no" for a question about two named things ("Are X and Y both board games?", "Do director of film
    X and director of film Y share the same nationality?"), or None when it is not one or the context lacks
    either thing's own passage.

    - "same <property>": the names the first sentence of each thing's passage gives after its verb
      ("... is a 1935 American film") must share a word;
    - otherwise every content word of the property ("board games") must be in each thing's passage.
    A role before the things ("director of film X") is followed to the person, as in comparisons.
    """
    q = question.strip()
    if not _AUX.match(q.casefold()):
        return None
    spans = [s for s in find_spans(q) if s.type == "NAME"]
    pair = next(((a, b) for a, b in zip(spans, spans[1:])
                 if (between := q[a.end:b.start].strip().casefold()) == "and"
                 or (between.startswith("and ") and between[4:].islower())), None)
    if pair is None:
        return None
    a, b = pair
    role = frozenset(stem(w) for w in words(q[:a.start]) + words(q[a.end:b.start])
                     if w not in _FRAME and w not in _YES_NO_FRAME and len(w) > 3)
    rest = words(q[b.end:])
    cited: list[int] = []
    subjects: list[list[Sentence]] = []
    for option in (a, b):
        about = _subject(_option_id(option.name, entity_id), role, sentences, entity_id)
        if not about:
            return None
        subjects.append(about)
        cited.append(about[0].number)
    frame = words(q[:a.start]) + rest
    if "same" in frame:
        after = frame[frame.index("same") + 1:]
        values = [_described_as(about[0], after[0] if after else "") for about in subjects]
        if not all(values):
            return None
        return ("yes" if values[0] & values[1] else "no"), sorted(set(cited))
    wanted = {stem(w) for w in rest + words(q[:a.start]) if w not in _YES_NO_FRAME and w not in _FRAME}
    if not wanted:
        return None
    holds = [wanted <= {stem(w) for s in about for w in words(s.text)} for about in subjects]
    return ("yes" if all(holds) else "no"), sorted(set(cited))


def _subject(eid: str, role: frozenset[str], sentences: Sequence[Sentence],
             entity_id: Callable[[str], str]) -> list[Sentence]:
    """The sentences of the passage about `eid`, or, with a role, about the person its passage names in it."""
    own = [s for s in sentences if eid in s.topics]
    if not role or not own:
        return own
    for s in own:
        for span in s.spans:
            before = {stem(w) for w in words(s.text[max(0, span.start - 40):span.start])[-4:]}
            if span.type == "NAME" and entity_id(span.name) != eid and role & before:
                person = [t for t in sentences if entity_id(span.name) in t.topics]
                if person:
                    return person
    return []


def _described_as(sentence: Sentence, noun: str) -> set[str]:
    """Words of the names a passage's first sentence gives after its verb ("was an Austrian-born French film
    director" -> {"austrian", "born", "french"}), the passage's own name left out; when the sentence uses the
    property's noun ("in Jiangsu province"), only the names within three words of it."""
    verb = _COPULA.search(sentence.text)
    if verb is None:
        return set()
    own = {w for t in sentence.topics for w in words(t)}
    names = [s for s in sentence.spans if s.type == "NAME" and s.start >= verb.end()]
    at = [m.start() for m in re.finditer(rf"\b{re.escape(noun)}\b", sentence.text.casefold())] if noun else []
    if at:
        near = [s for s in names if any(len(words(sentence.text[min(s.end, i):max(s.start, i)])) <= 3 for i in at)]
        names = near or names
    return {w for s in names for w in words(s.name) if w not in own}
