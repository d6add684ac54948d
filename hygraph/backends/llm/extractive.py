"""The offline LLM backend: every role by deterministic rules, no model.

Extraction finds named-entity-like spans (lexical.py) and turns each sentence into binary
relations (the words between two entities) and one n-ary hyperedge (the sentence itself,
HyperGraphRAG style). Summaries pick the sentences nearest the group's TF-IDF centroid
(HyGRAG's four parts), answers pick the best-supported sentence and a typed span in it, and
follow one bridge entity when the question is two hops (2WikiMultihopQA's "director of film X").
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Sequence, Union

import numpy as np

from hygraph.backends.llm import comparison
from hygraph.backends.llm.base import Answer, ContextItem, Route, SummaryRequest, Usage
from hygraph.backends.llm.lexical import (STOPWORDS, Span, content_stems, find_spans, split_sentences,
                                          stem, sub_names, words)
from hygraph.model import Chunk, Entity, Extraction, Hyperedge, Relation, normalize_name

# The same names recur across a corpus; caching their ids saves a fifth of extraction time.
_entity_id = functools.lru_cache(maxsize=1 << 16)(normalize_name)

INSUFFICIENT = "Insufficient information"
DESCRIPTION_CHARS = 200
MAX_RELATION_WORDS = 8
MAX_DIRECTIVES = 3
ENTITY_WEIGHT = 3.0  # one matched question entity outweighs a few shared content words

_PRONOUNS = frozenset(("He", "She", "It", "They", "His", "Her", "Its", "Their"))
_PHRASE_JUNK = re.compile(r"[()\[\]{}\"“”]")
_CONJUNCTIONS = frozenset(("and", "or", "but", "nor"))
_PHRASE_EDGE = " ,;:–—-'’"
_DASH = re.compile(r" [–—-] ")
_PAREN_TAIL = re.compile(r"\s*\([^()]*\)$")
_PLACE_PREPS = frozenset(("in", "at", "near", "from"))
_COPULAS = frozenset(("is", "was", "are", "were"))
_GLOBAL_CUES = re.compile(
    r"\b(?:main|major|key|common|recurring|overall|dominant)\s+(?:themes?|topics?|ideas?|trends?|patterns?"
    r"|issues?|points?)\b|\bsummari[sz]e\b|\bsummary\b|\boverall\b|\boverview\b|\bacross\b"
    r"|\bin general\b|\bthe (?:whole|entire) (?:corpus|collection|dataset)\b")


def _clip(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    cut = text[:chars].rsplit(" ", 1)[0]
    return cut + "…"


def _phrase(gap: str, adjacent: bool) -> str:
    """The words between two entities as a relation label, or "" when they are not related.

    Neighbours across a closing parenthesis or a conjunction ("Guy and Lambert") are
    coordinate, not related; for the sentence subject the conjunction is just dropped.
    """
    if adjacent and ")" in gap:
        return ""
    text = _PHRASE_JUNK.sub(" ", gap)
    if text.startswith(("'s", "’s")):
        text = text[2:]
    tokens = text.strip(_PHRASE_EDGE).split()
    if tokens and tokens[0] in _CONJUNCTIONS:
        if adjacent:
            return ""
        tokens = tokens[1:]
    return " ".join(tokens) if 0 < len(tokens) <= MAX_RELATION_WORDS else ""


def _refers_back(sentence: str) -> bool:
    """Whether a sentence opens on its passage's subject: "He ...", "Its ...", "The film ..."."""
    first, _, rest = sentence.partition(" ")
    return first in _PRONOUNS or (first == "The" and rest[:1].islower())


class _ChunkExtraction:
    """Accumulates one chunk's records, deduplicated by id."""

    def __init__(self, chunk_id: str) -> None:
        self.chunk_id = chunk_id
        self.entities: dict[str, Entity] = {}
        self.relations: dict[str, Relation] = {}
        self.hyperedges: dict[str, Hyperedge] = {}

    def entity(self, name: str, kind: str, sentence: str, score: float) -> str:
        eid = _entity_id(name)
        if eid:
            old = self.entities.get(eid)
            if old is None:
                self.entities[eid] = Entity(eid, name, kind, _clip(sentence, DESCRIPTION_CHARS), score)
            elif score > old.score:
                self.entities[eid] = replace(old, score=score)
        return eid

    def relation(self, head: str, phrase: str, tail: str) -> None:
        if phrase and _entity_id(head) != _entity_id(tail):
            score = round(max(0.3, 1.0 - 0.08 * len(phrase.split())), 2)
            rel = Relation.make(head, phrase, tail, score)
            if rel.head and rel.tail:
                self.relations.setdefault(rel.id, rel)

    def result(self) -> Extraction:
        return Extraction(self.chunk_id, list(self.entities.values()), list(self.relations.values()),
                          list(self.hyperedges.values()))


def _extract_chunk(chunk: Chunk) -> Extraction:
    out = _ChunkExtraction(chunk.id)
    sentences = split_sentences(chunk.text)
    title = chunk.title.strip()
    if title:
        base = (sub_names(title) or [title])[0].casefold()
        about = next((s for s in sentences if base in s.casefold() and s != title),
                     sentences[0] if sentences else title)
        out.entity(title, "NAME", about, 1.0)
        for sub in sub_names(title):
            out.entity(sub, "NAME", about, 0.8)
    for sentence in sentences:
        spans = find_spans(sentence)
        members = []
        for span in spans:
            members.append(out.entity(span.name, span.type, sentence, span.score))
            if span.type == "NAME":
                members += [out.entity(sub, "NAME", sentence, 0.6) for sub in sub_names(span.name)]
        for prev, span in zip(spans, spans[1:]):
            out.relation(prev.name, _phrase(sentence[prev.end:span.start], True), span.name)
        # Besides neighbours, the sentence's subject relates to every later entity through the
        # phrase just before it: "Teutberga ... by marriage to Lothair II".
        if title and _refers_back(sentence):
            anchor, anchor_end, first = title, len(sentence.split(" ", 1)[0]), 0
            members.append(_entity_id(title))
        elif spans:
            anchor, anchor_end, first = spans[0].name, spans[0].end, 2
        else:
            continue
        for i in range(first, len(spans)):
            prev_end = spans[i - 1].end if i else anchor_end
            out.relation(anchor, _phrase(sentence[prev_end:spans[i].start], False), spans[i].name)
        distinct = sorted({m for m in members if m})
        if len(distinct) >= 2:
            edge = Hyperedge.make(sentence, distinct, score=min(1.0, 0.5 + 0.1 * len(distinct)))
            out.hyperedges.setdefault(edge.id, edge)
    return out.result()


@dataclass
class _Question:
    entities: list[set[str]]  # per named entity: its id and its shorter forms
    ids: set[str]  # all of them
    stems: set[str]  # content stems of the whole question
    asked: set[str]  # content stems outside the names: what is asked about them
    plain: frozenset[str]  # its words without accents: what it already names, however spelled
    noun: tuple[str, ...]  # stems of the noun phrase a "what/which <noun>" question asks for

    @staticmethod
    def parse(question: str) -> "_Question":
        entities: list[set[str]] = []
        outside: list[str] = []
        for sentence in split_sentences(question):
            last = 0
            for span in find_spans(sentence):
                forms = {_entity_id(n) for n in (span.name, *sub_names(span.name))} - {""}
                if forms:
                    entities.append(forms)
                outside.append(sentence[last:span.start])
                last = span.end
            outside.append(sentence[last:])
        ids = set().union(*entities)
        return _Question(entities, ids, content_stems(question), content_stems(" ".join(outside)),
                         _plain_words(question), _asked_noun(question))


@functools.lru_cache(maxsize=1 << 14)
def _plain_words(text: str) -> frozenset[str]:
    """Casefolded words with accents dropped ("Aschenbrödel" -> "aschenbrodel"); cached, as names recur."""
    decomposed = unicodedata.normalize("NFKD", text)
    return frozenset(words("".join(c for c in decomposed if not unicodedata.combining(c))))


def question_entities(question: str) -> set[str]:
    """Ids of the entities a question names, with their shorter forms ("Sabotage (1936 Film)" -> "sabotage")."""
    return _Question.parse(question).ids


_WH = re.compile(r"\b(?:what|which|who|whom|whose|when|where|how)\b")
# A question that opens on its wh-word (after a preposition: "In which country ...") asks with it.
_OPENS_WITH_WH = re.compile(r"(?:(?:in|of|to|for|from|at|by|on|with|during|besides|under|about|after|before|into"
                            r"|through|against|among|between|upon|within|like)\s+)?(?:what|which|who|whom|whose"
                            r"|when|where|how)\b")
_PLACE_NOUNS = r"(?:country|city|state|place|town|county|province|region|continent|island|village)"
_QUANTITY_NOUNS = r"(?:population|number|amount|percentage|percent|proportion|count|total)"
_COPULA_THE = re.compile(r"^(what|which) (?:is|was|are|were) the ")


def _asking(question: str) -> str:
    """The casefolded question from the wh-word that asks; "" when there is none.

    That is the opening wh-word, or else the last one: in "The state where X died has how many
    districts?" the "where" opens a clause that describes a bridge, "how many" asks.
    """
    q = question.casefold().strip()
    found = list(_WH.finditer(q))
    if not found:
        return ""
    wh = found[0] if _OPENS_WITH_WH.match(q) else found[-1]
    # "what is the name of ...", "what was the place of birth of ...": the noun says what is asked
    return _COPULA_THE.sub(r"\1 ", q[wh.start():])


def _expected_type(question: str) -> str:
    """What a short answer looks like: DATE, NUMBER, PLACE, NAME, or "" (answer with a sentence).

    Read from the wh-word that asks (see `_asking`): a clause's wh-word describes a bridge ("the
    waterfall in the country where ..." asks for a name, not a place).
    """
    q = question.casefold()
    if re.search(r",[^,]+\bor\b[^,]+\?*$", q) or re.match(r"(?:is|are|was|were|do|does|did|has|have)\b", q):
        return ""  # comparisons and yes/no questions need reasoning an extract cannot do
    head = _asking(question)
    if not head:
        return ""
    if re.match(r"(?:what|which) (?:name|title)\b", head):
        return "NAME"
    if re.match(r"(?:what|which) (?:place|location|birthplace)\b", head):
        return "PLACE"
    if re.match(r"when\b|(?:what|which) (?:year|date)\b", head):
        return "DATE"
    if re.match(rf"how (?:many|much|old|long)\b|(?:what|which) {_QUANTITY_NOUNS}\b", head):
        return "NUMBER"
    if re.match(rf"where\b|(?:what|which) {_PLACE_NOUNS}\b", head):
        return "PLACE"
    if re.match(r"(?:who|whom|whose)\b", head):
        return "NAME"
    if re.match(r"(?:which|what) (?!(?:is|was|are|were|do|does|did|has|have|had|kind|type|sort|part|role)\b)\w",
                head):
        return "NAME"  # "which team", "what company": a named thing; "what was ..." asks for more than a name
    return ""


def _asked_noun(question: str) -> tuple[str, ...]:
    """Stems of the noun phrase a "what/which <noun>" question asks for, in order ("what mountain range" ->
    mountain, range): a candidate whose name ends in one ("Sangre de Cristo Range") is of the asked kind."""
    head = re.sub(r"^(what|which) name of (?:the |an? )?", r"\1 ", _asking(question))  # "the name of the airport"
    m = re.match(r"(?:what|which) ((?:[\w-]+ ){0,2}[\w-]+)", head)
    if m is None:
        return ()
    nouns: list[str] = []
    for w in m.group(1).split():
        if w in STOPWORDS:
            break
        nouns.append(stem(w))
    return tuple(nouns)


@dataclass
class _Row:
    """One sentence of the numbered context."""

    number: int
    text: str
    stems: frozenset[str]
    norm: str  # " normalized text " for whole-word entity matching
    subject: str  # id of the item's first entity: what a pronoun in this sentence refers to
    spans: tuple[Span, ...]
    topics: frozenset[str]  # ids of the item's title line, with and without a disambiguator: what its passage is about

    def mentions(self, eid: str) -> bool:
        return f" {eid} " in self.norm or (eid == self.subject and _refers_back(self.text))

    def stems_outside(self, ids: set[str]) -> set[str]:
        """Content stems of the sentence with the mentions of `ids` cut out."""
        named = [s for s in self.spans if _entity_id(s.name) in ids]
        text, last = [], 0
        for span in named:
            text.append(self.text[last:span.start])
            last = span.end
        text.append(self.text[last:])
        return content_stems(" ".join(text))


def _split_heading(text: str) -> tuple[str, str]:
    """(title line, rest) of "Title\ntext" as chunks are indexed; ("", text) when there is none.

    A title line names the subject but is no statement, so answers and summaries skip it.
    """
    heading, newline, body = text.partition("\n")
    if newline and body.strip() and not heading.rstrip().endswith((".", "!", "?")):
        return heading.strip(), body
    return "", text


def _passages(context: Sequence[ContextItem]) -> Sequence[ContextItem]:
    """The source passages of the context when it has any: an extract is quoted from what the corpus says, not
    from a summary's labelled parts or a triplet's bare words; every other item is a fallback."""
    chunks = [item for item in context if item.kind == "chunk"]
    return chunks or context


def _rows(context: Sequence[ContextItem]) -> list[_Row]:
    return [_Row(item.number, *sentence) for item in context for sentence in _parse_item(item.text)]


@functools.lru_cache(maxsize=1 << 13)
def _parse_item(text: str) -> tuple[tuple[str, frozenset[str], str, str, tuple[Span, ...], frozenset[str]], ...]:
    """(sentence, stems, normalized text, subject, spans, topics) per sentence of a context item.

    Cached by text: a served index returns the same chunks and summaries to many questions,
    and parsing them is most of an answer's cost.
    """
    heading, body = _split_heading(text)
    topics = frozenset({_entity_id(heading), _entity_id(_PAREN_TAIL.sub("", heading))} - {""})
    spans = find_spans(heading) if heading else []
    subject = _entity_id(spans[0].name) if spans else ""
    out = []
    for sentence in split_sentences(body):
        spans = find_spans(sentence)
        if not subject and spans:
            subject = _entity_id(spans[0].name)
        out.append((sentence, frozenset(content_stems(sentence)), f" {_entity_id(sentence)} ", subject,
                    tuple(spans), topics))
    return tuple(out)


@functools.lru_cache(maxsize=1 << 11)
def _names_by_sentence(passage: str) -> tuple[tuple[str, frozenset[str], tuple[tuple[Span, str], ...]], ...]:
    """(sentence, its content stems, its NAME spans with their entity ids) per sentence of a passage: what
    `decompose` reads of its passages, cached by text like `_parse_item` (the first round's passages of a
    served index's questions are often the same chunks)."""
    return tuple((sentence, frozenset(content_stems(sentence)),
                  tuple((span, _entity_id(span.name)) for span in find_spans(sentence) if span.type == "NAME"))
                 for sentence in split_sentences(passage))


def _cue(sentence: str, span: Span, stems: set[str]) -> int:
    """How many question stems sit in the four words before a span ("directed by <span>")."""
    return sum(1 for w in _stems_before(sentence, span.start) if w in stems)


@functools.lru_cache(maxsize=1 << 15)
def _stems_before(sentence: str, start: int) -> tuple[str, ...]:
    """The stems of the four words before `start`: a span's cue words, the same for every question (cached)."""
    return tuple(stem(w) for w in words(sentence[max(0, start - 40):start])[-4:])


def _noun_match(name: str, noun: tuple[str, ...]) -> int:
    """How well a name's head word (its last: "Rocky Mountains", "Sangre de Cristo Range") matches the asked
    noun phrase: 0 for none, and more for a later word of the phrase, as English puts a phrase's head last
    ("what mountain range" asks for a range more than for mountains)."""
    tail = words(name)[-1:]
    head = stem(tail[0]) if tail else ""
    return 2 * (1 + noun.index(head)) if head in noun else 0


def _pick_span(row: _Row, kind: str, q: _Question, exclude: set[str], defines: bool = False) -> str:
    """The span of the expected kind in a sentence, ranked by the question words right before it and by the
    noun the question asks for inside it ("what range" -> "Sangre de Cristo Range"); with `defines` (a
    "what <noun>" question), a sentence subject defined as that noun comes first. A span whose every word
    the question already says (another spelling of a name it gives) is no answer."""
    want = "NAME" if kind == "PLACE" else kind
    spans = [s for s in row.spans if s.type == want and _entity_id(s.name) not in exclude
             and not (_plain_words(s.name) - STOPWORDS) <= q.plain]
    dash = _DASH.search(row.text)
    # Wikipedia's "(birth date, place – death date, place)": the side of the dash decides.
    if dash and row.text.find("(") < dash.start() and kind in ("PLACE", "DATE"):
        if "die" in q.asked:
            spans = [s for s in spans if s.start > dash.start()] or spans
        elif "born" in q.asked:
            spans = [s for s in spans if s.end < dash.start()] or spans
    if not spans:
        return ""

    def rank(span: Span) -> tuple[int, int]:
        prev = words(row.text[max(0, span.start - 12):span.start])[-1:]
        prep = int(kind == "PLACE" and bool(prev) and prev[0] in _PLACE_PREPS)
        # "Victoria Falls is a waterfall": the sentence's subject, defined as what the question asks for
        after = words(row.text[span.end:span.end + 40])[:4] if defines and span is row.spans[0] else []
        defined = 2 * int(bool(after) and after[0] in _COPULAS and any(stem(w) in q.asked for w in after[1:]))
        noun = _noun_match(span.name, q.noun)
        return (-(_cue(row.text, span, q.asked) + prep + defined + noun), span.start)

    chosen = min(spans, key=rank)
    if kind == "PLACE":
        # "Rockville, Maryland": a place is named with its region.
        region = next((s for s in row.spans if s.start == chosen.end + 2 and s.type == "NAME"), None)
        if region and row.text[chosen.end:region.start] == ", ":
            return row.text[chosen.start:region.end]
    return chosen.name


def _hop(rows: list[_Row], first: _Row, bridges: list[Span], remaining: set[str], q: _Question,
         kind: str, support: Callable[[_Row, set[str]], float]) -> _Row | None:
    """The sentence that best explains `remaining` about one of the bridges; None when none does."""
    cues = {_entity_id(b.name): _cue(first.text, b, q.asked) for b in bridges}
    best: tuple[float, int] | None = None
    for i, row in enumerate(rows):
        if row is first:
            continue
        linked = [cue for eid, cue in cues.items() if row.mentions(eid)]
        if not linked:
            continue
        overlap = support(row, remaining)
        typed = bool(kind) and bool(_pick_span(row, kind, q, q.ids | set(cues)))
        if overlap <= 0 and not typed:
            continue
        score = overlap + 1.0 + max(linked) + 0.5 * typed
        if best is None or score > best[0]:
            best = (score, i)
    return rows[best[1]] if best else None


def _typed_fallback(rows: list[_Row], kind: str, q: _Question, defines: bool,
                    support: Callable[[_Row], float]) -> tuple[_Row, str] | None:
    """(sentence, span) of the expected kind from the best-supported sentence that has one; None when no
    sentence shares an asked word."""
    values = [support(row) for row in rows]
    for i in sorted(range(len(rows)), key=lambda i: (-values[i], i)):
        if values[i] <= 0:
            break
        row = rows[i]
        text = _pick_span(row, kind, q, q.ids, defines)
        if text:
            return row, text
    return None


_OPTIONS_END = re.compile(r",\s*[^,]+\s+or\s+[^,]+\?\s*$")
_YES_NO = re.compile(r"(?:is|are|was|were|do|does|did|has|have|had)\b")
# An entity described instead of named: "the director of", "the association which published",
# "the city where", "X's mother".
_DESCRIBED = re.compile(r"\bthe\s+(?:[\w-]+\s+){0,3}?(?:of|who|whom|which|that|whose|where|when|in which)\b"
                        r"|\w['’]s\s+(?!(?:birth|death|birthday|age|height|name|nationality|population|founding)\b)"
                        r"[a-z]")


def _route(question: str) -> Route:
    """The question's type, by its shape:
    - corpus: about the collection as a whole ("main themes", "summarize") and naming no entity;
    - comparison: two options to choose between ("..., X or Y?") or a yes/no question over two
      things ("Are X and Y both ...?");
    - bridge: it describes an entity instead of naming it ("the director of film X", "the city
      where ...", "X's mother"), so the answer is a hop away from what it names;
    - entity: a question about what it names.
    """
    q = question.casefold().strip()
    if _GLOBAL_CUES.search(q) and not question_entities(question):
        return "corpus"
    if comparison.parse(question) or _OPTIONS_END.search(q) or (_YES_NO.match(q) and re.search(r"\b(?:and|both)\b", q)):
        return "comparison"
    if _DESCRIBED.search(q):
        return "bridge"
    return "entity"


class ExtractiveLLM:
    """All five roles by rules; `usage` counts one call per chunk, request, question or answer."""

    def __init__(self, summary_max_tokens: int = 300, answer_max_tokens: int = 256) -> None:
        self.summary_max_tokens = summary_max_tokens
        self.answer_max_tokens = answer_max_tokens
        self.usage = Usage()

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        self.usage.count("extract", calls=len(chunks))
        return [_extract_chunk(c) for c in chunks]

    def summarize(self, requests: Sequence[SummaryRequest]) -> list[str]:
        self.usage.count("summarize", calls=len(requests))
        return [_summary(r, self.summary_max_tokens) for r in requests]

    def decompose(self, question: str, passages: Sequence[str]) -> list[str]:
        """Up to three bridge entities' names from the top passages, each a directive of its own.

        A bridge is a name the question does not contain, ranked by the question's own
        relation words just before it ("directed by <bridge>"), then by how much its sentence
        shares with the question, then by passage rank. The name alone, not "<bridge> <question>":
        each directive is embedded for a second retrieval round, and the question repeated in
        each cost seven times the tokens (about 50 words a query against 6-8) for the same
        passages (hyperbolic recall@5 on the three dev sets within 0.5 point: docs/bench/directives.md).
        """
        self.usage.count("decompose")
        q = _Question.parse(question)
        q_norm = f" {_entity_id(question)} "
        found: list[tuple[tuple[int, float, int, float, int], str, str]] = []
        for rank, passage in enumerate(passages[:MAX_DIRECTIVES]):
            for sentence, stems, names in _names_by_sentence(passage):
                support = len(q.stems & stems)
                for span, eid in names:
                    if eid in q.ids or f" {eid} " in q_norm:
                        continue
                    key = (-_cue(sentence, span, q.asked), -support, rank, -span.score, span.start)
                    found.append((key, eid, span.name))
        directives: list[str] = []
        seen: set[str] = set()
        for _, eid, name in sorted(found):
            if eid not in seen and len(directives) < MAX_DIRECTIVES:
                seen.add(eid)
                directives.append(name)
        return directives

    def answer_stream(self, question: str, context: Sequence[ContextItem]) -> Iterator[Union[str, Answer]]:
        """The extracted answer word by word (it exists whole at once), then the Answer."""
        ans = self.answer(question, context)
        yield from re.findall(r"\S+\s*", ans.text)
        yield ans

    def answer(self, question: str, context: Sequence[ContextItem]) -> Answer:
        """The answer; `usage` counts whitespace tokens (the unit of `answer_max_tokens`): the question
        and every context item read, and the answer text."""
        ans = self._answer(question, context)
        read = len(question.split()) + sum(len(item.text.split()) for item in context)
        self.usage.count("answer", prompt_tokens=read, completion_tokens=len(ans.text.split()))
        return ans

    def _answer(self, question: str, context: Sequence[ContextItem]) -> Answer:
        q = _Question.parse(question)
        rows = _rows(_passages(context))
        if not rows or not (q.stems or q.ids):
            return Answer(INSUFFICIENT)
        sentences = [comparison.Sentence(r.number, r.text, r.spans, r.topics, r.mentions) for r in rows]
        picked = (comparison.answer(question, sentences, _entity_id)
                  or comparison.yes_no(question, sentences, _entity_id))
        if picked is not None:
            return Answer(picked[0], tuple(picked[1]))
        df = Counter(w for row in rows for w in row.stems & q.stems)
        idf = {w: math.log(1.0 + len(rows) / n) for w, n in df.items()}

        def support(row: _Row, stems: set[str]) -> float:
            return sum(idf.get(w, 0.0) for w in stems & row.stems)

        def score(row: _Row) -> tuple[bool, float]:
            named = sum(any(row.mentions(e) for e in forms) for forms in q.entities)
            # Words inside a name only count when the name itself is not found whole; a sentence
            # about a named entity comes first, so a second hop starts from the right place.
            inside = ENTITY_WEIGHT * named if named else support(row, q.stems - q.asked)
            return named > 0, support(row, q.asked) + inside

        scores = [score(row) for row in rows]
        best = max(range(len(rows)), key=lambda i: (scores[i], -i))
        if scores[best][1] <= 0:
            return Answer(INSUFFICIENT)
        first = rows[best]
        kind = _expected_type(question)
        answer_row, cited = first, [first.number]
        # Two hops: what the best sentence leaves unexplained ("born", "die") is looked for
        # around an entity it introduces (the director it names). A word matched only inside
        # a name ("Wife" in "The Unholy Wife") explains nothing.
        remaining = q.asked - first.stems_outside(q.ids)
        bridges = [s for s in first.spans if s.type == "NAME" and _entity_id(s.name) not in q.ids]
        if remaining and bridges:
            hop = _hop(rows, first, bridges, remaining, q, kind, support)
            if hop is not None:
                answer_row, cited = hop, sorted({first.number, hop.number})
        text = ""
        if kind:
            # In the sentence the question led to, its subject is what the question named; a second hop's
            # passage is about the entity the question is after ("the waterfall in ..." -> "Victoria Falls").
            exclude = set(q.ids)
            if answer_row is first:
                exclude.add(answer_row.subject)
            else:
                exclude |= {_entity_id(s.name) for s in bridges}
            defines = kind == "NAME" and _asking(question).startswith(("what", "which"))
            text = _pick_span(answer_row, kind, q, exclude, defines)
            if not text:
                # The chain ended on a sentence without an answer of the asked kind: take one from the
                # sentence that best supports what is asked among those that have one.
                fallback = _typed_fallback(rows, kind, q, defines, lambda row: support(row, q.asked))
                if fallback is not None:
                    answer_row, text = fallback
                    cited = sorted({*cited, answer_row.number})
        if not text:
            text = " ".join(answer_row.text.split()[:self.answer_max_tokens])
        return Answer(text, tuple(cited))

    def route(self, question: str) -> Route:
        self.usage.count("route")
        return _route(question)


def _summary(request: SummaryRequest, max_tokens: int) -> str:
    """HyGRAG's four parts within `max_tokens` whitespace tokens; the context part gets what is left."""
    bodies = (_split_heading(t)[1] for t in request.member_texts)
    sentences = list(dict.fromkeys(s for body in bodies for s in split_sentences(body)))
    vectors, vocab = _tfidf(sentences)
    order: list[int] = []
    themes: list[str] = []
    if vectors.size:
        centroid = vectors.mean(axis=0)
        closeness = vectors @ centroid
        order = sorted(range(len(sentences)), key=lambda i: (-closeness[i], i))
        top_terms = np.argsort(-centroid, kind="stable")[:6]
        themes = [vocab[j] for j in top_terms if centroid[j] > 0]
    entities = list(request.entities) or _key_entities(sentences)
    parts = [("Themes:", ", ".join(themes), max_tokens // 10),
             ("Entities and roles:", "; ".join(entities), max_tokens // 5),
             ("Relations:", "; ".join(request.relations), max_tokens // 4)]
    lines: list[str] = []
    used = 0
    for label, body, budget in parts:
        if body:
            line = f"{label} {' '.join(body.split()[:max(budget, 1)]).rstrip(',;')}"
            lines.append(line)
            used += len(line.split())
    room = max_tokens - used - 1
    chosen: list[int] = []
    for i in order:
        n = len(sentences[i].split())
        if n <= room:
            chosen.append(i)
            room -= n
    context = " ".join(sentences[i] for i in sorted(chosen))
    if not context and order and room > 0:
        context = " ".join(sentences[order[0]].split()[:room])
    if context:
        lines.append(f"Context: {context}")
    return "\n".join(lines)


def _tfidf(sentences: list[str]) -> tuple[np.ndarray, list[str]]:
    """Row-normalized TF-IDF over the group's own content words (a per-group vocabulary keeps it exact)."""
    tokenized = [[w for w in words(s) if w not in STOPWORDS and len(w) > 2 and not w.isdigit()]
                 for s in sentences]
    vocab = sorted({w for toks in tokenized for w in toks})
    if not vocab:
        return np.zeros((0, 0)), []
    index = {w: j for j, w in enumerate(vocab)}
    tf = np.zeros((len(sentences), len(vocab)))
    for i, toks in enumerate(tokenized):
        for w, n in Counter(toks).items():
            tf[i, index[w]] = n
    df = (tf > 0).sum(axis=0)
    weights = tf * np.log(1.0 + len(sentences) / df)
    norms = np.linalg.norm(weights, axis=1, keepdims=True)
    return weights / np.where(norms > 0, norms, 1.0), vocab


def _key_entities(sentences: list[str], limit: int = 10) -> list[str]:
    """Names mentioned in the most sentences, when the caller gave none."""
    counts: Counter[str] = Counter()
    surface: dict[str, str] = {}
    for s in sentences:
        for span in find_spans(s):
            if span.type == "NAME":
                eid = _entity_id(span.name)
                surface.setdefault(eid, span.name)
                counts[eid] += 1
    # sorted() is stable and Counter keeps first-mention order, so ties stay in reading order.
    return [surface[e] for e in sorted(counts, key=lambda e: -counts[e])[:limit]]
