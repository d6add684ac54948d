"""Rule-based text analysis behind the extractive backend: sentences, entity spans, content words.

Everything here is regex and plain Python so that extracting a whole corpus costs seconds,
and the same rules serve passages (capitalised prose) and questions (often Title Case or
lowercase), which keeps question entities and passage entities on the same ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UPPER = "".join(c for c in map(chr, range(0x41, 0x530)) if c.isupper())
_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_MONTH_SET = frozenset(_MONTHS.split("|")) | {
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}

STOPWORDS = frozenset("""
a about above after again against all also am an and any are as at be been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not of off on once only or other our ours out over own same she should so some such
than that the their theirs them themselves then there these they this those through to too under
until up very was we were what when where which while who whom whose why will with would you your
yours one first later earlier many much s t
""".split())

# Capitalised function words and imperatives that open sentences and questions without naming anything.
# Articles are not here: a sentence-initial "The Beatles" or "A Rare Bird" is a name.
_LEAD_STOP = frozenset("""
He She It They We I You His Her Its Their Our My Your In On At By For From With After Before During
This That These Those There Here Who What When Where Which Why How Whose Whom Is Was Are Were Do Does
Did Has Have Had Can Could Will Would Should May Might Both As If Although Though While Since But And
Or However Also Following According Despite Unlike Like Upon Under Over Between Among Into Through
Each Every Some Many Most Other Such Then Thus Later Today Yet So Not No All One Two Three
Summarize Summarise Describe List Compare Explain Give Tell Name Find Identify Show Provide Discuss
""".split())

_ARTICLES = frozenset(("The", "A", "An"))
_CONNECTORS = ("of", "the", "de", "del", "della", "der", "den", "des", "du", "da", "di", "do", "dos",
               "das", "la", "le", "les", "van", "von", "y", "al", "el", "bin", "ibn", "zu", "upon", "&")
# "and" is left out on purpose: in running text "Guy and Lambert" is two people far more often
# than one name; names containing "and" still come through as chunk titles and quoted spans.
_CONN = "|".join(_CONNECTORS)
_NOBLE = ("Earl|Duke|Duchess|Count|Countess|Margrave|Margravine|King|Queen|Prince|Princess|Viscount|"
          "Viscountess|Baron|Baroness|Baronet|Marquess|Marchioness|Lord|Lady|Bishop|Archbishop|Emperor|"
          "Empress|Elector|Electress|Landgrave|Sultan|Khan")
_ORDINAL = r"\d+(?:st|nd|rd|th|St|Nd|Rd|Th)\b"
_CAP = (rf"(?:(?:St|Mt|Ft|Dr|Mr|Mrs|Ms|Jr|Sr)\.|[{_UPPER}]\.(?= ?[{_UPPER}])|{_ORDINAL}"
        rf"|[{_UPPER}][\w'’]*(?:-\w[\w'’]*)*)")
_WORDS = rf"{_CAP}(?:(?: +(?:{_CONN}))* +{_CAP})*"
# Wikipedia title style: "Lambert, Margrave of Tuscany", "John Tuchet, 8Th Earl Of Castlehaven".
_STYLE = rf"(?:, (?:{_ORDINAL} )?(?:{_NOBLE})\b(?:(?: +(?:{_CONN}|Of|The))* +{_CAP})*)"
# Disambiguators written in Title Case or as life years: "(1936 Film)", "(Song)", "(1790–1815)".
_PAREN = (rf"(?: ?\((?:\d{{4}}[–-]\d{{4}}"
          rf"|(?:\d{{4}} )?[{_UPPER}][\w'’]*(?: +(?:of|the|[{_UPPER}][\w'’]*))*)\))")
_NAME_RE = re.compile(rf"({_WORDS}{_STYLE}?)({_PAREN}?)")
_DATE_RE = re.compile(
    rf"\b(?:\d{{1,2}} (?:{_MONTHS})(?: \d{{3,4}})?|(?:{_MONTHS}) \d{{3,4}}(?!\d)"
    rf"|(?:{_MONTHS}) \d{{1,2}}(?:, \d{{3,4}})?(?!\d))\b")
_NUMBER_RE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:s\b)?(?!\w)")
_QUOTE_RE = re.compile(r"[\"“]\s?([^\"“”\n]{1,80}?)\s?[\"”]")
_DATE_PREP = frozenset("in after before since until till from to between and or c circa around about "
                       "by died born".split())
_PREV_WORD = re.compile(r"(\w+)\W*$")
# Lowercase questions carry no capitalisation cue; for them (and only them) fall back to what
# follows a kind of work, and to the options of an "A or B" comparison.
_WORK_RE = re.compile(
    r"\b(?:film|movie|song|album|novel|book|play|series|show|band|painting|poem|opera)\s+(.+?)"
    r"(?=\s+(?:is|was|were|are|born|die|died|dies|come|came|from|released|directed|written|produced|"
    r"located|based|by|and|or)\b|[?,;.!]|$)")
_OPTIONS_RE = re.compile(r",\s*([^,?]+?)\s+or\s+([^,?]+?)\s*\?*$")

_BOUNDARY = re.compile(rf"[.!?][\"”’)]?\s+(?=[\"“(\[]?[{_UPPER}0-9])|\n+")
_ABBREVIATIONS = frozenset("st mr mrs ms dr jr sr mt ft no vs co inc ltd gen col lt sgt capt rev prof "
                           "u.s u.k e.g i.e etc c ca fr".split())
_LAST_TOKEN = re.compile(r"(\S+)$")
_WORD_RE = re.compile(r"\w+")


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`; newlines always split, and abbreviations and initials never do."""
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        if m.group(0)[0] == ".":
            last = _LAST_TOKEN.search(text, max(start, m.start() - 12), m.start())
            token = last.group(1).lstrip("(\"“") if last else ""
            if token.lower() in _ABBREVIATIONS or len(token) == 1:
                continue
        piece = text[start:m.start() + len(m.group(0).rstrip())].strip()
        if piece:
            out.append(piece)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    name: str
    type: str  # "NAME", "DATE" or "NUMBER"
    score: float


def _trim_name(sentence: str, start: int, end: int, at_lead: bool) -> tuple[int, int]:
    """Drop opening function words ("In", "He") at the start of a sentence, and possessive endings."""
    text = sentence[start:end]
    while True:
        head, _, rest = text.partition(" ")
        if not rest or not ((at_lead and head in _LEAD_STOP) or head in _CONNECTORS):
            break
        skip = len(text) - len(rest.lstrip(" "))
        start, text = start + skip, text[skip:]
    for suffix in ("'s", "’s", "'", "’"):
        if text.endswith(suffix):
            end -= len(suffix)
            break
    return start, end


def _name_spans(sentence: str, lead: int) -> list[Span]:
    out: list[Span] = []
    for m in _NAME_RE.finditer(sentence):
        start, end = _trim_name(sentence, m.start(1), m.end(1), m.start(1) == lead)
        name = sentence[start:end]
        tokens = name.split()
        if not tokens:
            continue
        if len(tokens) == 1 and (name in _LEAD_STOP or name in _MONTH_SET or name in _ARTICLES
                                 or len(name) == 1 or name[0].isdigit() or name.endswith(".")):
            continue
        if m.group(2) and end == m.end(1):
            end = m.end(2)
            name = sentence[start:end]
        out.append(Span(start, end, name, "NAME", 0.9 if len(tokens) > 1 else 0.7))
    return out


def _number_spans(sentence: str) -> list[Span]:
    out: list[Span] = []
    for m in _NUMBER_RE.finditer(sentence):
        digits = m.group(0)
        kind = "NUMBER"
        if digits.endswith("s") or (len(digits) == 4 and digits.isdigit() and 1000 <= int(digits) <= 2099):
            kind = "DATE"
        elif digits.isdigit() and len(digits) in (3, 4):
            prev = _PREV_WORD.search(sentence, max(0, m.start() - 12), m.start())
            if prev and prev.group(1).lower() in _DATE_PREP:
                kind = "DATE"
        out.append(Span(m.start(), m.end(), digits, kind, 0.7 if kind == "DATE" else 0.5))
    return out


def _lowercase_spans(sentence: str) -> list[Span]:
    out: list[Span] = []
    for m in _WORK_RE.finditer(sentence):
        name = m.group(1).strip("\"“” ")
        if name:
            start = m.start(1) + m.group(1).index(name)
            out.append(Span(start, start + len(name), name, "NAME", 0.6))
    options = _OPTIONS_RE.search(sentence)
    if options:
        out += [Span(options.start(g), options.end(g), options.group(g), "NAME", 0.6) for g in (1, 2)]
    return out


def find_spans(sentence: str) -> list[Span]:
    """Maximal, non-overlapping entity spans of one sentence, in reading order.

    Where candidates overlap the longest wins ("11 November 875" over "November"), then
    quotes, dates, names, numbers in that order.
    """
    lead = next((i for i, c in enumerate(sentence) if c.isalnum()), 0)
    lowercase = sentence.rstrip().endswith("?") and not any(c.isupper() for c in sentence[lead + 1:])
    candidates: list[tuple[int, Span]] = []
    for m in _QUOTE_RE.finditer(sentence):
        text = m.group(1).strip().rstrip(",.;:")
        if text and (text[0].isupper() or text[0].isdigit() or lowercase):
            offset = m.start(1) + m.group(1).index(text)
            candidates.append((0, Span(offset, offset + len(text), text, "NAME", 0.9)))
    candidates += [(1, Span(m.start(), m.end(), m.group(0), "DATE", 0.8)) for m in _DATE_RE.finditer(sentence)]
    candidates += [(2, s) for s in _name_spans(sentence, lead)]
    candidates += [(3, s) for s in _number_spans(sentence)]
    if lowercase:
        candidates += [(2, s) for s in _lowercase_spans(sentence)]
    candidates.sort(key=lambda c: (c[1].start - c[1].end, c[0], c[1].start))
    taken: list[Span] = []
    for _, span in candidates:
        if all(span.end <= t.start or span.start >= t.end for t in taken):
            taken.append(span)
    return sorted(taken, key=lambda s: s.start)


_PAREN_TAIL = re.compile(r" ?\([^()]*\)$")


def sub_names(name: str) -> list[str]:
    """Shorter names a long one contains, so passages link through them.

    "Adalbert II of Tuscany" -> "Adalbert II", "Tuscany"; "Sabotage (1936 Film)" -> "Sabotage";
    "Lambert, Margrave of Tuscany" -> "Lambert", "Tuscany".
    """
    out: list[str] = []
    base = _PAREN_TAIL.sub("", name)
    if base != name and base:
        out.append(base)
    person, comma, _ = base.partition(", ")
    if comma:
        out.append(person)
    head, of, _ = base.partition(" of ")
    if of and not comma and " " in head:
        out.append(head)
    tail = base.rpartition(" of ")[2]
    if tail != base and tail[:1].isupper():
        out.append(tail)
    return out


_ALIASES = {"death": "die", "died": "die", "dies": "die", "dead": "die", "birth": "born",
            "birthplace": "born", "spouse": "marri", "wife": "marri", "husband": "marri",
            "married": "marri", "marriage": "marri", "buried": "burial", "graduated": "graduat",
            "nationality": "national", "citizen": "national"}


def stem(word: str) -> str:
    """A crude stem that makes "director"/"directed" and "death"/"died" meet."""
    alias = _ALIASES.get(word)
    if alias:
        return alias
    for suffix in ("ing", "ed", "es", "er", "or", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[:-len(suffix)]
    return word


def words(text: str) -> list[str]:
    """Casefolded word tokens."""
    return _WORD_RE.findall(text.casefold())


def content_stems(text: str) -> set[str]:
    return {stem(w) for w in words(text) if w not in STOPWORDS}
