"""Per-index quotas: queries per second, documents and bytes of a named index.

Each named index has the service's default limits (`serve.index_quota`) unless an admin set its own
(`PUT /v1/indexes/{name}/quota`, kept in the index's directory: store/registry.py); every ingress
replica rereads an index's limits at most every LIMITS_TTL_S, so a change holds on all of them within
that. Queries are metered by a token bucket per index in each ingress replica (with N replicas an
index gets up to N times `max_qps`). Documents and bytes are checked when an insert is accepted,
against the index's published version and files (read at most every SIZE_TTL_S), so inserts still
queued can take an index past its limit by what they hold; the next insert after that is refused.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import ValidationError

from hygraph.config import QuotaConfig
from hygraph.errors import StoreError
from hygraph.serve.http import ApiError
from hygraph.store.registry import IndexInfo

SIZE_TTL_S = 5.0
LIMITS_TTL_S = 1.0


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class Quotas:
    default: QuotaConfig
    # index name -> the limits an admin set on it (None: the default applies); read at most every LIMITS_TTL_S
    own: Callable[[str], dict[str, Any] | None] = lambda name: None
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _sizes: dict[str, tuple[float, IndexInfo]] = field(default_factory=dict)
    _limits: dict[str, tuple[float, QuotaConfig]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def limits(self, index: str) -> QuotaConfig:
        """Index `index`'s limits: its own when an admin set them, else the service's default."""
        now = time.monotonic()
        cached = self._limits.get(index)
        if cached is None or now - cached[0] > LIMITS_TTL_S:
            own = self.own(index)
            try:
                limits = QuotaConfig(**own) if own is not None else self.default
            except ValidationError as exc:  # only the admin route writes it, after this same check
                raise StoreError(f"index '{index}': its quota file holds invalid limits ({exc.errors()[0]['msg']})")
            cached = self._limits[index] = (now, limits)
        return cached[1]

    def forget(self, index: str) -> None:
        """Index `index`'s limits changed here: read them again at its next request (other replicas within
        LIMITS_TTL_S), its query bucket refilled at the new rate."""
        with self._lock:
            self._limits.pop(index, None)
            self._buckets.pop(index, None)

    def admit_query(self, index: str) -> None:
        rate = self.limits(index).max_qps
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

    def admit_insert(self, index: str, documents: int, info: Callable[[bool], IndexInfo]) -> None:
        """`info(size)`: the index's documents and version, and with `size` the bytes of its files."""
        limits = self.limits(index)
        if limits.max_documents is None and limits.max_bytes is None:
            return
        now = time.monotonic()
        cached = self._sizes.get(index)
        if cached is None or now - cached[0] > SIZE_TTL_S or (limits.max_bytes is not None and cached[1].bytes is None):
            cached = self._sizes[index] = (now, info(limits.max_bytes is not None))
        held = cached[1]
        if limits.max_documents is not None and held.documents + documents > limits.max_documents:
            raise ApiError(429, "quota_exceeded", f"documents: the index holds {held.documents} documents; "
                           f"{documents} more exceeds its limit of {limits.max_documents}", {"Retry-After": "60"})
        if limits.max_bytes is not None and held.bytes is not None and held.bytes >= limits.max_bytes:
            raise ApiError(429, "quota_exceeded", f"index: {held.bytes} bytes on disk reaches its limit of "
                           f"{limits.max_bytes}", {"Retry-After": "60"})
