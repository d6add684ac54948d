"""API keys scoped to indexes: `POST /v1/keys` makes one, `DELETE /v1/keys/{key_id}` revokes it.

A key is shown once, when it is made; the service keeps only its SHA-256, its rights per index and a
name, so a copy of the records grants nothing. The records live next to the service's own index, one
object per key (`keys/<sha256>.json`) in the same store as its versions: the index directory, or the
bucket of an `s3://` index. Every ingress replica on every node therefore reads the same keys: a key
made or revoked through one of them holds on a local index at the next request, and on object storage
within `cache_s` (the time a replica trusts what it read, so that a request costs no GET; unknown keys
are remembered as long, so a stream of made-up keys costs one GET each per term, not one per request).

Changes (make, revoke, drop an index's rights) take a short lease of their own (`leases/keys/`) so that
two replicas never rewrite the same record at once, e.g. an index's deletion putting back a key that was
revoked meanwhile. A service that kept its keys in the older `keys.json` file has them moved into
records the first time it starts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, TypeVar

from hygraph.errors import InputError, StoreError
from hygraph.store import lease
from hygraph.store.lease import WriterLease
from hygraph.store.objects import Objects

Right = Literal["read", "write", "admin"]
RIGHTS: tuple[Right, ...] = ("read", "write", "admin")
KEY_PREFIX = "hgk_"
RECORDS = "keys/"
LEASE = "leases/keys/"
LEASE_TERM_S = 15.0  # a change is a few small writes; a holder that died frees the lease after this
REMOTE_CACHE_S = 5.0  # how long a replica of an s3 service trusts a key record (or its absence) it read
_REMEMBERED = 10_000  # key records (and absences) a replica keeps between reads
T = TypeVar("T")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
log = logging.getLogger(__name__)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class StoredKey:
    key_id: str
    name: str
    rights: dict[str, tuple[Right, ...]]  # index name -> rights on it
    created: float


class KeyStore:
    def __init__(self, objects: Objects, cache_s: float = 0.0, legacy_file: Path | None = None) -> None:
        """`objects`: the store of the service's own index; `cache_s`: how long a read record is trusted (0:
        read at every lookup); `legacy_file`: a `keys.json` of an earlier release, moved into records."""
        self.objects, self.cache_s = objects, cache_s
        self._known: OrderedDict[str, tuple[float, StoredKey | None]] = OrderedDict()
        self._any: tuple[float, bool] = (-1e18, False)
        self._lock = threading.Lock()
        if legacy_file is not None and legacy_file.is_file():
            self._migrate(legacy_file)

    def lookup(self, key: str) -> StoredKey | None:
        """The stored key `key` is, if any."""
        d = digest(key)
        now = time.monotonic()
        with self._lock:
            seen = self._known.get(d)
        if seen is not None and now - seen[0] < self.cache_s:
            return seen[1]
        try:
            found = self._read(d)
        except StoreError as exc:
            if seen is None:
                raise
            # The store is out of reach: the record read last answers until it is back (a key revoked
            # meanwhile is refused again at the first read after it).
            log.warning("key records unreadable (%s): the last read answers until the store is back", exc)
            found = seen[1]
        with self._lock:
            self._known[d] = (now, found)
            self._known.move_to_end(d)
            while len(self._known) > _REMEMBERED:
                self._known.popitem(last=False)
        return found

    def empty(self) -> bool:
        now = time.monotonic()
        if now - self._any[0] >= self.cache_s:
            try:
                self._any = (now, bool(self._digests()))
            except StoreError:
                if self._any[0] < 0:  # never read: nothing to answer with
                    raise
                self._any = (now, self._any[1])  # out of reach: the last listing answers until it is back
        return not self._any[1]

    def create(self, rights: Mapping[str, tuple[Right, ...]], name: str = "") -> tuple[str, StoredKey]:
        """A new key with these rights: (the key, shown once; its record)."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        stored = StoredKey("key_" + secrets.token_hex(8), name, {i: tuple(r) for i, r in rights.items()},
                           time.time())
        self._changing(lambda: self._write(digest(key), stored))
        return key, stored

    def delete(self, key_id: str) -> bool:
        def revoke() -> bool:
            for d, stored in self._records():
                if stored.key_id == key_id:
                    self.objects.delete(_record_key(d))
                    self._forget(d)
                    return True
            return False
        return self._changing(revoke)

    def drop_index(self, index: str) -> None:
        """An index is deleted: no key keeps rights on its name (an index made later under it starts with none)."""
        def drop() -> None:
            for d, stored in self._records():
                if index in stored.rights:
                    kept = {i: r for i, r in stored.rights.items() if i != index}
                    self._write(d, StoredKey(stored.key_id, stored.name, kept, stored.created))
        self._changing(drop)

    # -- records --------------------------------------------------------------------------------

    def _changing(self, change: Callable[[], T]) -> T:
        held = WriterLease(self.objects, LEASE_TERM_S, LEASE)
        held.acquire(lambda previous: 0, wait_s=2 * LEASE_TERM_S)
        epoch = held.epoch or 0
        try:
            return change()
        finally:
            held.release()
            for past in lease.epochs(self.objects, LEASE):  # earlier holders' records: only the newest counts
                if past < epoch:
                    self.objects.delete(lease.key(past, LEASE))

    def _digests(self) -> list[str]:
        names = (k[len(RECORDS):].removesuffix(".json") for k in self.objects.list(RECORDS))
        return [d for d in names if _DIGEST.fullmatch(d)]  # anything else under keys/ is not a record

    def _records(self) -> list[tuple[str, StoredKey]]:
        out = []
        for d in self._digests():
            stored = self._read(d)
            if stored is not None:
                out.append((d, stored))
        return out

    def _read(self, d: str) -> StoredKey | None:
        data = self.objects.get(_record_key(d))
        if data is None:
            return None
        try:
            return _parse(json.loads(data))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise StoreError(f"{self.objects.uri}/{_record_key(d)}: not a key record ({type(exc).__name__})") \
                from None

    def _write(self, d: str, stored: StoredKey) -> None:
        record = {"key_id": stored.key_id, "name": stored.name, "created": stored.created,
                  "rights": {i: list(r) for i, r in stored.rights.items()}}
        self.objects.put(_record_key(d), json.dumps(record, sort_keys=True).encode())
        self._forget(d)

    def _forget(self, d: str) -> None:
        with self._lock:
            self._known.pop(d, None)
        self._any = (-1e18, False)

    def _migrate(self, path: Path) -> None:
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: not a key file ({type(exc).__name__})") from None
        if not isinstance(data, dict):
            raise InputError(f"{path}: not a key file (a JSON object of key hashes)")

        def move() -> None:
            if not path.is_file():  # another replica moved them first
                return
            try:
                records = {d: _parse(record) for d, record in data.items()}
            except (TypeError, KeyError, AttributeError) as exc:
                raise InputError(f"{path}: not a key file ({type(exc).__name__})") from None
            for d, stored in records.items():
                if self.objects.get(_record_key(d)) is None:
                    self._write(d, stored)
            path.rename(path.with_name(path.name + ".moved"))
        self._changing(move)


def _record_key(d: str) -> str:
    if not _DIGEST.fullmatch(d):
        raise StoreError(f"key record {d!r}: not a SHA-256 digest")
    return f"{RECORDS}{d}.json"


def _parse(record: Any) -> StoredKey:
    return StoredKey(record["key_id"], record.get("name", ""),
                     {i: tuple(r) for i, r in record.get("rights", {}).items()}, record.get("created", 0.0))
