"""A bounded cache of query results for repeated questions, keyed by the index version they came from.

A result depends only on the index version it read, the mode, `k`, the filter and the question.
The key carries all of them (and the index's uid, so an index deleted and created again under its
name never hits the old one's entries), so a new version invalidates by construction: its requests
build keys that no stored entry has, and the old entries age out of the LRU.

The question is normalized only where retrieval cannot tell the difference: Unicode NFC and runs
of whitespace. Case is kept: the question's entities are found by their capitalization
(`core/retrieval/`), so "who is jack owens" and "Who is Jack Owens" may retrieve differently.
"""

from __future__ import annotations

import json
import re
import threading
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Hashable, Mapping

_SPACE = re.compile(r"\s+")


def normalize_question(question: str) -> str:
    return _SPACE.sub(" ", unicodedata.normalize("NFC", question)).strip()


@dataclass(frozen=True)
class CacheKey:
    index: str
    uid: str
    version: int
    mode: str
    k: int
    filter: str  # canonical JSON; "" for none
    question: str

    @classmethod
    def of(cls, index: str, uid: str | None, version: int, mode: str, k: int,
           filter: Mapping[str, Any] | None, question: str) -> "CacheKey":  # noqa: A002 - the API's field
        canonical = json.dumps(filter, sort_keys=True, separators=(",", ":")) if filter else ""
        return cls(index, uid or "", version, mode, k, canonical, normalize_question(question))


class AnswerCache:
    """Least recently used out, at most `entries` results; thread-safe (Retriever queries run in
    worker threads). `entries` 0 stores nothing."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: CacheKey) -> Any | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return found

    def put(self, key: CacheKey, value: Any) -> None:
        if self.entries == 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.entries:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
