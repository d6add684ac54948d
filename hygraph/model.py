"""Records with stable content-derived ids (ARCHITECTURE.md §3) and the JSONL loaders.

Ids never depend on processing order, so re-ingesting a document is a no-op and a
journal replay is idempotent.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from array import array
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from hygraph.errors import InputError
from hygraph.input_rules import check_id, check_metadata, check_nonblank_text, check_text, preview


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


_PUNCT = re.compile(r"[^\w\s]")
_SPACE = re.compile(r"\s+")


def normalize_name(name: str) -> str:
    """Entity id: NFKC, casefold, punctuation dropped, whitespace collapsed ("U.S. Army" -> "us army")."""
    text = unicodedata.normalize("NFKC", name).casefold()
    text = _PUNCT.sub("", text)
    return _SPACE.sub(" ", text).strip()


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def make(text: str, id: str | None = None, title: str = "",
             metadata: dict[str, Any] | None = None) -> "Document":
        return Document(id=id or sha1(title + "\n" + text), text=text, title=title,
                        metadata=dict(metadata or {}))

    @property
    def full_text(self) -> str:
        """What is indexed: the title line then the text (shared/data/README.md)."""
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True)
class Chunk:
    id: str  # doc_id:ordinal
    doc_id: str
    ordinal: int
    text: str
    n_tokens: int
    title: str = ""

    @staticmethod
    def chunk_id(doc_id: str, ordinal: int) -> str:
        return f"{doc_id}:{ordinal}"


@dataclass(frozen=True)
class Entity:
    id: str  # normalized name
    name: str
    type: str = ""
    description: str = ""
    score: float = 1.0


@dataclass(frozen=True)
class Relation:
    id: str  # sha1(head|relation|tail) over entity ids
    head: str  # entity id
    relation: str
    tail: str  # entity id
    score: float = 1.0

    @staticmethod
    def make(head: str, relation: str, tail: str, score: float = 1.0) -> "Relation":
        h, t = normalize_name(head), normalize_name(tail)
        return Relation(id=sha1(f"{h}|{relation.strip().lower()}|{t}"), head=h,
                        relation=relation.strip(), tail=t, score=score)

    @property
    def text(self) -> str:
        return f"{self.head} {self.relation} {self.tail}"


@dataclass(frozen=True)
class Hyperedge:
    id: str  # sha1(text)
    text: str  # the n-ary fact in natural language
    entities: tuple[str, ...]  # entity ids
    score: float = 1.0

    @staticmethod
    def make(text: str, entities: list[str], score: float = 1.0) -> "Hyperedge":
        ents = tuple(sorted({normalize_name(e) for e in entities if normalize_name(e)}))
        return Hyperedge(id=sha1(text.strip()), text=text.strip(), entities=ents, score=score)


@dataclass
class Extraction:
    """What the `extract` role returns for one chunk."""

    chunk_id: str
    entities: list[Entity] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    hyperedges: list[Hyperedge] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(row: dict[str, Any]) -> "Extraction":
        return Extraction(
            chunk_id=row["chunk_id"],
            entities=[Entity(**e) for e in row["entities"]],
            relations=[Relation(**r) for r in row["relations"]],
            hyperedges=[Hyperedge(**{**h, "entities": tuple(h["entities"])}) for h in row["hyperedges"]])


@dataclass(frozen=True)
class SummaryNode:
    id: str  # "L{layer}:{ordinal}" within a version
    layer: int  # 1 = summaries over layer-0 nodes (chunks, entities)
    ordinal: int
    text: str
    children: tuple[str, ...]  # node ids one layer down
    key: str = ""  # sha1 of the sorted children: an unchanged member set reuses its summary

    @staticmethod
    def node_id(layer: int, ordinal: int) -> str:
        return f"L{layer}:{ordinal}"

    @staticmethod
    def layer_of(node_id: str) -> int:
        """The layer named in a summary id (only for ids known to be summaries: a chunk id "doc:0" may look alike)."""
        return int(node_id[1:node_id.index(":")])


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answers: tuple[str, ...]
    supporting_ids: tuple[str, ...]


def read_jsonl(path: str | Path, objects_only: bool = True) -> Iterator[tuple[int, Any]]:
    """(line number, parsed row) for each non-blank line; errors name the file and line. Lines end at "\n"
    only (JSON Lines): a line's bytes are its own, so a corpus can be read in byte spans (`scan_corpus`)."""
    for lineno, _, row in _jsonl_rows(path, objects_only):
        yield lineno, row


def _jsonl_rows(path: str | Path, objects_only: bool = True) -> Iterator[tuple[int, int, Any]]:
    """(line number, byte offset just past the line, parsed row) for each non-blank line."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: file not found")
    offset = 0
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            offset += len(raw)
            row = parse_jsonl_line(raw, f"{p}:{lineno}", objects_only)
            if row is not None:
                yield lineno, offset, row


def parse_jsonl_line(raw: bytes, where: str, objects_only: bool = True) -> Any:
    """One line of a JSON Lines file: its parsed value, or None when the line is blank."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not valid UTF-8 (byte {exc.start})") from None
    if not line.strip():
        return None
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
    if objects_only and not isinstance(row, dict):
        raise InputError(f"{where}: expected a JSON object")
    return row


def _field(row: dict[str, Any], name: str, kind: type, where: str, required: bool = True) -> Any:
    if name not in row or row[name] is None:
        if required:
            raise InputError(f"{where}: missing field '{name}'")
        return None
    value = row[name]
    if not isinstance(value, kind):
        raise InputError(f"{where}: field '{name}' must be {kind.__name__}")
    return value


def document_from_dict(row: dict[str, Any], where: str) -> Document:
    """One corpus/API record -> Document under the input rules; `where` prefixes every error (file:line
    or field path)."""
    text = check_nonblank_text(_field(row, "text", str, where), f"{where}: field 'text'")
    doc_id = _field(row, "id", str, where, required=False)
    if doc_id is not None:
        check_id(doc_id, f"{where}: field 'id'")
    title = check_text(_field(row, "title", str, where, required=False) or "", f"{where}: field 'title'")
    metadata = check_metadata(_field(row, "metadata", dict, where, required=False) or {},
                              f"{where}: field 'metadata'")
    return Document.make(text=text, id=doc_id, title=title, metadata=metadata)


def load_corpus(path: str | Path) -> list[Document]:
    """Read a whole corpus file; any malformed line fails the load before anything is written."""
    docs = [doc for _, _, doc in _corpus_documents(path)]
    if not docs:
        raise InputError(f"{path}: no documents")
    return docs


def corpus_ids(path: str | Path) -> list[str]:
    """The documents' ids in corpus order: each document is parsed and dropped, only its id is held."""
    return [doc.id for _, _, doc in _corpus_documents(path)]


def _corpus_documents(path: str | Path) -> Iterator[tuple[int, int, Document]]:
    """(line number, byte offset past the line, document) under the input rules, duplicate ids refused."""
    seen: dict[str, int] = {}
    for lineno, end, row in _jsonl_rows(path):
        where = f"{path}:{lineno}"
        doc = document_from_dict(row, where)
        if doc.id in seen:
            raise InputError(f"{where}: duplicate id '{preview(doc.id)}' (first at line {seen[doc.id]})")
        seen[doc.id] = lineno
        yield lineno, end, doc


@dataclass(frozen=True)
class CorpusSpan:
    """A run of whole lines of a corpus file: bytes [start, end), the first of them line `first_line`."""

    start: int
    end: int
    first_line: int


@dataclass(frozen=True)
class CorpusScan:
    """What a build's driver keeps of a corpus file once every line is validated: counts and byte spans for
    sharded reads (`read_span`), never the texts or the ids (4 bytes a document)."""

    path: str
    text_bytes: np.ndarray  # uint32: each document's full text in UTF-8 bytes, in file order
    spans: tuple[CorpusSpan, ...]

    @property
    def documents(self) -> int:
        return len(self.text_bytes)


def scan_corpus(path: str | Path, span_documents: int = 256, ids: set[str] | None = None) -> CorpusScan:
    """Validate a corpus file in one streaming pass (the checks of `load_corpus`) and cut it into spans of
    about `span_documents` documents; `ids`, when given, receives every document id.

    Duplicate ids are found without holding the ids: each id's 64-bit hash is kept (8 bytes a document,
    dropped on return), and only when two hashes are equal does a second pass compare those ids."""
    sizes, hashes = array("I"), array("Q")
    spans: list[CorpusSpan] = []
    start, first, count = 0, 1, 0
    for lineno, end, row in _jsonl_rows(path):
        doc = document_from_dict(row, f"{path}:{lineno}")
        size = len(doc.full_text.encode())
        if size > _MAX_SCANNED_BYTES:
            raise InputError(f"{path}:{lineno}: a document of {size:,} bytes; at most {_MAX_SCANNED_BYTES:,}")
        sizes.append(size)
        hashes.append(_id_hash(doc.id))
        if ids is not None:
            ids.add(doc.id)
        count += 1
        if count == span_documents:
            spans.append(CorpusSpan(start, end, first))
            start, first, count = end, lineno + 1, 0
    if count:
        spans.append(CorpusSpan(start, Path(path).stat().st_size, first))
    if not sizes:
        raise InputError(f"{path}: no documents")
    ordered = np.sort(np.frombuffer(hashes, dtype=np.uint64))
    del hashes
    clashes = ordered[1:][ordered[1:] == ordered[:-1]]
    del ordered
    if len(clashes):
        _refuse_duplicate_ids(path, {int(h) for h in clashes})
    return CorpusScan(str(path), np.frombuffer(sizes, dtype=np.uint32), tuple(spans))


_MAX_SCANNED_BYTES = 2**32 - 1  # the scan keeps document sizes as uint32


def _id_hash(doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def _refuse_duplicate_ids(path: str | Path, clashing: set[int]) -> None:
    """Second pass over the documents whose id hashes clash: the first id seen twice is an InputError naming
    both lines (hashes of different ids may clash too; those pass)."""
    seen: dict[str, int] = {}
    for lineno, _, row in _jsonl_rows(path):
        doc = document_from_dict(row, f"{path}:{lineno}")
        if _id_hash(doc.id) not in clashing:
            continue
        if doc.id in seen:
            raise InputError(f"{path}:{lineno}: duplicate id '{preview(doc.id)}' (first at line {seen[doc.id]})")
        seen[doc.id] = lineno


def read_span(path: str | Path, span: CorpusSpan) -> list[Document]:
    """The documents of one span of a corpus file `scan_corpus` validated."""
    with Path(path).open("rb") as fh:
        fh.seek(span.start)
        data = fh.read(span.end - span.start)
    docs = []
    for i, raw in enumerate(data.split(b"\n")):
        where = f"{path}:{span.first_line + i}"
        row = parse_jsonl_line(raw, where)
        if row is not None:
            docs.append(document_from_dict(row, where))
    return docs


def load_questions(path: str | Path) -> list[Question]:
    out: list[Question] = []
    for lineno, row in read_jsonl(path):
        where = f"{path}:{lineno}"
        q = _field(row, "question", str, where)
        if not q.strip():
            raise InputError(f"{where}: field 'question' is empty")
        answers = _field(row, "answers", list, where)
        supporting = _field(row, "supporting_ids", list, where, required=False) or []
        if not answers or not all(isinstance(a, str) and a.strip() for a in answers):
            raise InputError(f"{where}: field 'answers' must be a non-empty list of non-empty strings")
        out.append(Question(id=str(row.get("id", lineno)), question=q, answers=tuple(answers),
                            supporting_ids=tuple(str(s) for s in supporting)))
    if not out:
        raise InputError(f"{path}: no questions")
    return out


@dataclass(frozen=True)
class TripleRecord:
    passage_id: str
    triples: tuple[tuple[str, str, str], ...]
    entities: tuple[str, ...]


def load_triples(path: str | Path) -> list[TripleRecord]:
    """Precomputed OpenIE output: {"passage_id", "triples": [[h, r, t], ...], "entities": [...]}."""
    return list(iter_triples(path))


def iter_triples(path: str | Path) -> Iterator[TripleRecord]:
    """`load_triples` one record at a time (each line validated as it is read)."""
    for lineno, row in read_jsonl(path):
        where = f"{path}:{lineno}"
        pid = _field(row, "passage_id", str, where)
        triples = _field(row, "triples", list, where)
        ents = _field(row, "entities", list, where, required=False) or []
        clean: list[tuple[str, str, str]] = []
        for i, t in enumerate(triples):
            # OpenIE output has occasional 2- or 4-element rows; only well-formed triples are kept.
            if isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) and x.strip() for x in t):
                clean.append((t[0], t[1], t[2]))
            elif not isinstance(t, list):
                raise InputError(f"{where}: triples[{i}] must be a list")
        yield TripleRecord(pid, tuple(clean), tuple(str(e) for e in ents if str(e).strip()))
