"""Per-index quotas (`serve.index_quota`): queries per second, documents and bytes of a named index.

Queries are metered by a token bucket per index in each ingress replica (with N replicas an index
gets up to N times `max_qps`). Documents and bytes are checked when an insert is accepted, against
the index's published version and files (read at most every SIZE_TTL_S), so inserts still queued can
take an index past its limit by what they hold; the next insert after that is refused.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from hygraph.config import QuotaConfig
from hygraph.serve.http import ApiError
from hygraph.store.registry import IndexInfo

SIZE_TTL_S = 5.0


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class Quotas:
    cfg: QuotaConfig
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _sizes: dict[str, tuple[float, IndexInfo]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit_query(self, index: str) -> None:
        rate = self.cfg.max_qps
        if rate is None:
            return
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.setdefault(index, _Bucket(max(1.0, rate), now))
            bucket.tokens = min(max(1.0, rate), bucket.tokens + (now - bucket.at) * rate)
            bucket.at = now
            if bucket.tokens < 1.0:
                wait = math.ceil((1.0 - bucket.tokens) / rate)
                raise ApiError(429, "quota_exceeded", f"index: over its {rate:g} queries per second",
                               {"Retry-After": str(max(1, wait))})
            bucket.tokens -= 1.0

    def admit_insert(self, index: str, documents: int, info: Callable[[], IndexInfo]) -> None:
        if self.cfg.max_documents is None and self.cfg.max_bytes is None:
            return
        now = time.monotonic()
        cached = self._sizes.get(index)
        if cached is None or now - cached[0] > SIZE_TTL_S:
            cached = self._sizes[index] = (now, info())
        held = cached[1]
        if self.cfg.max_documents is not None and held.documents + documents > self.cfg.max_documents:
            raise ApiError(429, "quota_exceeded", f"documents: the index holds {held.documents} documents; "
                           f"{documents} more exceeds its limit of {self.cfg.max_documents}", {"Retry-After": "60"})
        if self.cfg.max_bytes is not None and held.bytes is not None and held.bytes >= self.cfg.max_bytes:
            raise ApiError(429, "quota_exceeded", f"index: {held.bytes} bytes on disk reaches its limit of "
                           f"{self.cfg.max_bytes}", {"Retry-After": "60"})
