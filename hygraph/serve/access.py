"""Who a request is and what it may do, from its `Authorization` header.

- admin keys (`serve.admin_keys`, `HYGRAPH_ADMIN_KEYS`): every right on every index, and the admin
  routes (create and delete indexes, make and revoke keys);
- service keys (`serve.api_keys`, `HYGRAPH_API_KEYS`): read and write on every index;
- scoped keys (`POST /v1/keys`, stored hashed beside the service's index, `store/keys.py`): the rights they
  list, per index;
- no key: everything while no key of any kind exists (a local service nobody configured), else only
  reads of the default index, unless `serve.require_key_for_reads`.

A key without any right on an index is answered as if the index did not exist (404), so keys cannot
probe other tenants' index names; a key that may see an index but lacks the right asked gets 403.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass, field
from typing import Literal, Mapping

from hygraph.config import ServeConfig
from hygraph.serve.http import ApiError, api_keys
from hygraph.store.keys import KeyStore
from hygraph.store.registry import DEFAULT_INDEX

Kind = Literal["open", "anonymous", "service", "admin", "scoped"]
Need = Literal["read", "write", "status", "admin"]


@dataclass(frozen=True)
class Principal:
    kind: Kind
    rights: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # scoped keys only
    reads_default: bool = False  # anonymous: reads of the default index allowed
    invalid_key: bool = False  # anonymous because the key it sent is not one this service knows

    def knows(self, index: str) -> bool:
        """Whether this caller may learn that `index` exists."""
        if self.kind in ("open", "service", "admin"):
            return True
        if self.kind == "scoped":
            return bool(self.rights.get(index))
        return index == DEFAULT_INDEX and self.reads_default

    def may(self, index: str, need: Need) -> bool:
        if self.kind == "admin":
            return True
        if self.kind in ("open", "service"):
            return need != "admin"
        if self.kind == "scoped":
            held = self.rights.get(index, ())
            if "admin" in held:
                return True
            return need in held or (need == "status" and "read" in held)
        return need == "read" and index == DEFAULT_INDEX and self.reads_default


def _admin_keys(cfg: ServeConfig) -> frozenset[str]:
    env = os.environ.get(cfg.admin_keys_env, "")
    return frozenset(k for k in (*cfg.admin_keys, *(x.strip() for x in env.split(","))) if k)


class Access:
    def __init__(self, cfg: ServeConfig, profile: str, keys: KeyStore) -> None:
        self.service_keys = api_keys(cfg, profile)
        self.admin_keys = _admin_keys(cfg)
        self.store = keys
        self.require_key_for_reads = cfg.require_key_for_reads

    def configured(self) -> bool:
        return bool(self.service_keys or self.admin_keys) or not self.store.empty()

    def principal(self, authorization: str) -> Principal:
        """401 for a header that is not `Bearer <a key this service knows>`."""
        if not authorization:
            if not self.configured():
                return Principal("open")
            return Principal("anonymous", reads_default=not self.require_key_for_reads)
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise ApiError(401, "unauthorized", "authorization: missing `Bearer <key>` header",
                           {"WWW-Authenticate": "Bearer"})
        if _known(token, self.admin_keys):
            return Principal("admin")
        if _known(token, self.service_keys):
            return Principal("service")
        stored = self.store.lookup(token)
        if stored is not None:
            return Principal("scoped", stored.rights)
        if not self.configured():
            return Principal("open")  # no key exists: any header is as good as none
        if not self.require_key_for_reads:
            # Reads of the default index need no key, and clients that must send one send anything (the OpenAI
            # SDK): such a caller reads as one without a key; anything more is refused as an invalid key.
            return Principal("anonymous", reads_default=True, invalid_key=True)
        raise ApiError(401, "unauthorized", "authorization: invalid API key", {"WWW-Authenticate": "Bearer"})

    def require_admin(self, who: Principal) -> None:
        if who.kind == "admin":
            return
        if who.kind in ("anonymous", "open"):
            raise ApiError(401, "unauthorized", "authorization: this route needs an admin key (serve.admin_keys)",
                           {"WWW-Authenticate": "Bearer"})
        raise ApiError(403, "forbidden", "authorization: this route needs an admin key; this key is not one")


def _known(token: str, keys: frozenset[str]) -> bool:
    # Every configured key is compared (constant time each): the time taken does not say which one matched.
    found = False
    for key in keys:
        found |= hmac.compare_digest(token.encode(), key.encode())
    return found


def denied(who: Principal, index: str, need: Need) -> ApiError:
    """The error for a caller that may not do `need` on `index` (see the module's rules)."""
    if who.kind == "anonymous":
        what = "invalid API key" if who.invalid_key else "missing `Bearer <key>` header"
        return ApiError(401, "unauthorized", f"authorization: {what}", {"WWW-Authenticate": "Bearer"})
    if not who.knows(index):
        return not_found(index)
    return ApiError(403, "forbidden", f"authorization: this key may not {need} this index")


def not_found(index: str) -> ApiError:
    if index == DEFAULT_INDEX:
        return ApiError(404, "not_found", "index: not found")
    return ApiError(404, "not_found", "name: no such index")
