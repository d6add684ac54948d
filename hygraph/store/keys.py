"""API keys scoped to indexes: `POST /v1/keys` makes one, `DELETE /v1/keys/{key_id}` revokes it.

A key is shown once, when it is made; the file (`keys.json` in the service's root) holds only its
SHA-256, its rights per index and a name, so a copy of the file grants nothing. Every ingress
replica reads the same file and reloads it when it changes, so a key made or revoked through one
replica holds on all of them at their next request.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

from hygraph.errors import InputError
from hygraph.processes import locked
from hygraph.store.files import write_atomic

Right = Literal["read", "write", "admin"]
RIGHTS: tuple[Right, ...] = ("read", "write", "admin")
KEY_PREFIX = "hgk_"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class StoredKey:
    key_id: str
    name: str
    rights: dict[str, tuple[Right, ...]]  # index name -> rights on it
    created: float


@dataclass
class KeyStore:
    path: Path
    _stamp: tuple[int, int] = (-1, -1)
    _by_digest: dict[str, StoredKey] = field(default_factory=dict)

    def lookup(self, key: str) -> StoredKey | None:
        """The stored key `key` is, if any (the file is read again when it changed)."""
        self._refresh()
        return self._by_digest.get(digest(key))

    def empty(self) -> bool:
        self._refresh()
        return not self._by_digest

    def create(self, rights: Mapping[str, tuple[Right, ...]], name: str = "") -> tuple[str, StoredKey]:
        """A new key with these rights: (the key, shown once; its record)."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        stored = StoredKey("key_" + secrets.token_hex(8), name, dict(rights), time.time())
        with locked(self.path.with_name(".keys.lock")):
            data = self._read()
            data[digest(key)] = {"key_id": stored.key_id, "name": name, "created": stored.created,
                                 "rights": {k: list(v) for k, v in rights.items()}}
            self._write(data)
        return key, stored

    def delete(self, key_id: str) -> bool:
        with locked(self.path.with_name(".keys.lock")):
            data = self._read()
            kept = {d: rec for d, rec in data.items() if rec.get("key_id") != key_id}
            if len(kept) == len(data):
                return False
            self._write(kept)
        return True

    def drop_index(self, index: str) -> None:
        """An index is deleted: no key keeps rights on its name (an index made later under it starts with none)."""
        with locked(self.path.with_name(".keys.lock")):
            data = self._read()
            changed = False
            for rec in data.values():
                if index in rec.get("rights", {}):
                    del rec["rights"][index]
                    changed = True
            if changed:
                self._write(data)

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
            stamp = (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            stamp = (0, 0)
        if stamp == self._stamp:
            return
        self._by_digest = {d: StoredKey(rec["key_id"], rec.get("name", ""),
                                        {i: tuple(r) for i, r in rec.get("rights", {}).items()},
                                        rec.get("created", 0.0))
                           for d, rec in self._read().items()}
        self._stamp = stamp

    def _read(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise InputError(f"{self.path}: not a key file ({type(exc).__name__})") from None
        if not isinstance(data, dict):
            raise InputError(f"{self.path}: not a key file (a JSON object of key hashes)")
        return data

    def _write(self, data: dict[str, dict]) -> None:
        write_atomic(self.path, json.dumps(data, sort_keys=True).encode())
        os.chmod(self.path, 0o600)
