"""Milvus adapter (pymilvus MilvusClient): the managed local engine, or any Milvus server by URI.

Ids are data, never code. A row's primary key is `pk`, an INT64 derived from its id (the first 8
bytes of BLAKE2b as a signed integer); the id itself is a plain VARCHAR field (`item_id`) that
searches and gets return. Deletes and gets go by integer keys only (pymilvus turns those into
`pk in [<ints>]`), and the only filter this module builds is `layer == <int>`. So no id, however
hostile (quotes, `'] or id not in ['`, newlines, backslashes), is ever parsed as an expression.
Two different ids with the same key in one upsert are refused (StoreError); a fetch checks that
every row it returns carries the id it was asked for.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import grpc
import numpy as np

from hygraph.backends.vectorstore.base import Hit, Metric
from hygraph.backends.vectorstore.milvus_rows import RowWriter
from hygraph.config import VectorStoreConfig
from hygraph.errors import StoreError, StoreUnavailable

# Milvus's largest VARCHAR (max_length counts UTF-8 bytes). Document ids are up to 256 characters
# (1,024 bytes) and chunk ids add `:<ordinal>`, but entity ids are normalized entity names of any
# length; an id over this is refused before anything is sent.
ID_MAX_BYTES = 65535
# Keys per `pk in [...]` get or delete, comfortably under Milvus's query result and message limits.
KEY_BATCH = 1000
# Rows per page where a resumed build lists the ids of a partly written collection (`reopen`); Milvus's
# largest query page.
QUERY_BATCH = 16384
# Reads see every write older than Milvus's graceful time (5 s) without waiting in the normal case;
# `persist` (after writes) and `open` (after a load) wait for a strongly consistent read, so what
# was written before them is visible to every process at once. ("Session" would not do: a reader
# that never wrote reads at "eventually", and right after a server restart that misses rows the
# query node has not yet replayed from its log.)
CONSISTENCY = "Bounded"
# A write request's deadline: generous (a 16 MiB request on a loaded machine), but a wedged server
# fails the write instead of hanging it.
WRITE_TIMEOUT_S = 300.0
# How often `seal` asks whether an existing index has caught up with the rows flushed since it was created.
INDEX_POLL_S = 0.5
FIELDS = ("pk", "item_id", "vec", "kind", "layer", "version")
# pymilvus logs a traceback for every failed call; hygraph maps those errors to its own one-line
# messages, so its logger only speaks for what we do not handle. (Importing pymilvus configures its
# logger, so the level is set after that import.)
import pymilvus  # noqa: E402,F401

for _name in ("pymilvus", "pymilvus.milvus_client", "pymilvus.bulk_writer"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)


def id_key(item_id: str) -> int:
    """The INT64 primary key of an id: BLAKE2b-64 of its UTF-8 bytes, as a signed integer. Stable
    across processes and versions (no per-process hash seed)."""
    try:
        raw = item_id.encode("utf-8")
    except (AttributeError, UnicodeEncodeError):
        raise StoreError(f"vector id {short(item_id)} is not a valid UTF-8 string") from None
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big", signed=True)


def short(value: Any, limit: int = 80) -> str:
    """An id for a message: repr'd (quotes and control characters escaped) and cut to `limit` chars."""
    text = value if isinstance(value, str) else str(value)
    return repr(text[:limit]) + (f"... ({len(text)} chars)" if len(text) > limit else "")


# What makes a failure retryable (StoreUnavailable, 503), by code only: messages quote ids and
# expressions, so their text never decides. gRPC's own statuses, raised as they are (a deadline) or
# as the `code` of the MilvusException pymilvus raises when its retries run out: the server is
# unreachable (a refused or dropped connection, GOAWAY) or did not answer in time.
TRANSIENT_GRPC = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
# pymilvus's CONNECT_FAILED (2: no channel to the server, which is what every call on a connection
# to a dead server raises; it is also Milvus's own "service unavailable") and Milvus's rate limit
# (8). Anything else Milvus marks `retriable` counts too.
TRANSIENT_CODES = frozenset({2, 8})
# Milvus's "collection not loaded".
NOT_LOADED = 101


def _code(exc: Exception) -> Any:
    code = getattr(exc, "code", None)
    return code() if isinstance(exc, grpc.RpcError) and callable(code) else code


def _unavailable(exc: Exception) -> bool:
    code = _code(exc)
    if isinstance(code, grpc.StatusCode):
        return code in TRANSIENT_GRPC
    return code in TRANSIENT_CODES or getattr(exc, "retriable", False) is True


class MilvusStore:
    def __init__(self, cfg: VectorStoreConfig, uri: str, on_close: Callable[[], None] | None = None,
                 grpc_options: dict[str, Any] | None = None, token: str | None = None) -> None:
        from pymilvus import MilvusClient
        from pymilvus.exceptions import MilvusException

        self.cfg = cfg
        self.uri = uri
        self._on_close = on_close
        self._exc = MilvusException
        if token is None:
            token = os.environ.get(cfg.token_env, "")
        self._metrics: dict[str, str] = {}
        self._id_limits: dict[str, int] = {}  # item_id's max_length per collection, once created or opened
        self._opened: set[str] = set()  # collections this client has loaded
        self._version: str | None = None
        self._token, self._grpc_options = token, dict(grpc_options or {})
        self._rows: RowWriter | None = None  # the array-encoded writes' own channel, opened at the first write
        self.missing_hint = ""  # appended where a collection is missing (set by `connect`)
        try:
            self.client = MilvusClient(uri=uri, token=token, timeout=cfg.connect_timeout_s,
                                       grpc_options=grpc_options or {})
        except MilvusException as exc:
            self._close_server()
            raise StoreUnavailable(f"vector_store.uri {uri}: Milvus unreachable ({str(exc.message)[:200]})") from None

    def _mapped(self, what: str, exc: Exception) -> StoreError:
        # Connection-level failures are retryable (503); anything else is a store error to surface.
        if _unavailable(exc):
            return StoreUnavailable(f"Milvus at {self.uri} unreachable during {what}")
        return StoreError(f"Milvus {what} failed: {str(exc)[:300]}")

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (self._exc, grpc.RpcError) as exc:
            raise self._mapped(what, exc) from None

    def ping(self) -> None:
        self._call("ping", self.client.list_collections, timeout=self.cfg.connect_timeout_s)

    def server_version(self) -> str:
        """The server's version string (e.g. `v2.3.5-lite`, `v2.5.4`); see the README on what newer servers add."""
        if self._version is None:
            self._version = str(self._call("get_server_version", self.client.get_server_version))
        return self._version

    def exists(self, name: str) -> bool:
        return bool(self._call("has_collection", self.client.has_collection, name))

    def create(self, name: str, dim: int, metric: Metric) -> None:
        from pymilvus import DataType, MilvusClient

        if self.exists(name):
            self.drop(name)
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("pk", DataType.INT64, is_primary=True)
        schema.add_field("item_id", DataType.VARCHAR, max_length=ID_MAX_BYTES)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field("kind", DataType.VARCHAR, max_length=16)
        schema.add_field("layer", DataType.INT64)
        schema.add_field("version", DataType.INT64)
        self._call("create_collection", self.client.create_collection, name, schema=schema,
                   consistency_level=CONSISTENCY)
        self._metrics[name] = metric
        self._id_limits[name] = ID_MAX_BYTES

    def upsert(self, name: str, ids: Sequence[str], vectors: np.ndarray, version: int,
               layers: Sequence[int] | None = None) -> None:
        self._write(name, ids, vectors, version, layers, insert=False)

    def fill(self, name: str, ids: Sequence[str], vectors: np.ndarray, version: int,
             layers: Sequence[int] | None = None) -> None:
        """Insert into a collection `create` just made: no upsert's delete of an older row per key."""
        self._write(name, ids, vectors, version, layers, insert=True)

    def _write(self, name: str, ids: Sequence[str], vectors: np.ndarray, version: int,
               layers: Sequence[int] | None, insert: bool) -> None:
        kind = name.rsplit("_", 1)[-1][:16]
        vecs = np.asarray(vectors, dtype=np.float32)
        if len(vecs) != len(ids) or (layers is not None and len(layers) != len(ids)):
            raise StoreError(f"{name}: {len(ids)} ids for {len(vecs)} vectors")
        # One row per key: a repeated id keeps its last vector; two ids sharing a key are refused.
        rows: dict[int, int] = {}
        limit = self._id_limits.get(name, ID_MAX_BYTES)
        for i, item_id in enumerate(ids):
            if not isinstance(item_id, str):
                raise StoreError(f"{name}: vector id {short(item_id)} is not a string")
            key = id_key(item_id)
            size = len(item_id.encode("utf-8"))
            if size > limit:
                older = "" if limit >= ID_MAX_BYTES else " (an older hygraph's limit: rebuild the index)"
                raise StoreError(f"{name}: vector id {short(item_id)} is {size} bytes of UTF-8, over the "
                                 f"{limit} this collection stores{older}")
            j = rows.get(key)
            if j is not None and ids[j] != item_id:
                raise StoreError(f"{name}: ids {short(ids[j])} and {short(item_id)} have the same key {key}")
            rows[key] = i
        if not rows:
            return
        keys = list(rows)
        picked = np.fromiter(rows.values(), dtype=np.int64, count=len(rows))
        if self._rows is None:
            self._rows = RowWriter(self.uri, self._token, self._grpc_options, WRITE_TIMEOUT_S)
        # Every row kept, in order (a build's collections): the caller's vectors as they are, not a copy of a
        # whole kind's (the relations' are 300 MB at 20k passages).
        whole = len(picked) == len(vecs) and bool(np.all(picked == np.arange(len(vecs))))
        self._call("insert" if insert else "upsert", self._rows.write, name, keys,
                   list(ids) if whole else [ids[i] for i in picked], vecs if whole else vecs[picked], kind,
                   [int(layers[i]) for i in picked] if layers is not None else [0] * len(keys),
                   int(version), self.cfg.insert_batch, insert)

    def delete(self, name: str, ids: Sequence[str]) -> None:
        keys = sorted({id_key(i) for i in ids})
        for start in range(0, len(keys), KEY_BATCH):
            self._call("delete", self.client.delete, name, ids=keys[start:start + KEY_BATCH])

    def persist(self, *names: str) -> None:
        """Milvus acknowledges a write once it is durable; a strongly consistent read then waits until
        every write so far is visible, so every process's searches and gets see them. That wait is one or
        two time ticks (the managed server ticks every 50 ms, Milvus's default is 200 ms), so the
        collections are waited for side by side, not one after another."""
        if len(names) <= 1:
            for name in names:
                self._strong_read(name)
            return
        with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="milvus-persist") as pool:
            for done in [pool.submit(self._strong_read, name) for name in names]:
                done.result()

    def _strong_read(self, name: str) -> None:
        try:
            self.client.get(name, ids=[0], output_fields=["pk"], consistency_level="Strong")
        except (self._exc, grpc.RpcError) as exc:
            # Not loaded: nothing reads it until `open` loads it, with everything written so far.
            if _code(exc) != NOT_LOADED:
                raise self._mapped("persist", exc) from None

    def seal(self, name: str) -> None:
        """Flush, then build the index; `create_index` returns once every flushed segment is indexed. Not
        loaded: a build's collections are searched by the readers of its version, which load them (`open`),
        and loading each here to release it again cost the 200k-passage build a minute."""
        self._call("flush", self.client.flush, name)
        if not self._index(name):
            self._await_index(name)

    def _index(self, name: str) -> bool:
        """Create the vector index unless it exists (the server builds it per flushed segment, once each); True
        where it was created, which waits until the segments flushed so far are indexed."""
        if self._call("list_indexes", self.client.list_indexes, name, field_name="vec"):
            return False
        metric = self._metrics.get(name) or self._describe_metric(name)
        params = self.client.prepare_index_params()
        if self.cfg.index_type == "HNSW":
            params.add_index(field_name="vec", index_type="HNSW", metric_type=metric,
                             params={"M": self.cfg.hnsw_m, "efConstruction": self.cfg.hnsw_ef_construction})
        else:
            params.add_index(field_name="vec", index_type=self.cfg.index_type, metric_type=metric,
                             params={"nlist": 128} if self.cfg.index_type == "IVF_FLAT" else {})
        self._call("create_index", self.client.create_index, name, params)
        return True

    def _await_index(self, name: str) -> None:
        """Wait until the index an earlier `_index` created covers every flushed row (a resumed build's collection:
        the rows `fill` added since are indexed as their segments seal)."""
        for index_name in self._call("list_indexes", self.client.list_indexes, name, field_name="vec") or []:
            while True:
                info = self._call("describe_index", self.client.describe_index, name, index_name)
                if info.get("state") == "Failed":
                    raise StoreError(f"Milvus could not index {name}: {str(info.get('index_state_fail_reason'))[:300]}")
                pending = int(info.get("pending_index_rows", 0))
                if info.get("state") == "Finished" or \
                        (pending == 0 and int(info.get("indexed_rows", 0)) >= int(info.get("total_rows", 0))):
                    break
                time.sleep(INDEX_POLL_S)

    def reopen(self, name: str, dim: int, metric: Metric) -> set[str] | None:
        """The ids a collection holds that `create` made and a killed writer partly filled, so that a resumed
        build `fill`s only the rest; None where it is not the collection `create(name, dim, metric)` makes.

        A query needs the collection loaded, and loading needs its index: what the writer had flushed is
        indexed now, once, as `seal` would have, and the rows `fill` adds later are indexed as their own
        segments are flushed. The read is strongly consistent: it sees every insert the server accepted
        before it, those of the killed writer's last requests too (a request it accepted is applied whole)."""
        if not self.exists(name):
            return None
        info = self._call("describe_collection", self.client.describe_collection, name)
        fields = {f.get("name"): f for f in info.get("fields", [])}
        vec = fields.get("vec", {})
        if not (fields.get("pk", {}).get("is_primary") and "item_id" in fields
                and int(vec.get("params", {}).get("dim", -1)) == dim):
            return None
        if self._call("list_indexes", self.client.list_indexes, name, field_name="vec") and \
                self._describe_metric(name) != metric:
            return None
        self._metrics[name] = metric
        self._call("flush", self.client.flush, name)
        self._index(name)
        self.open(name)
        found: set[str] = set()
        rows = self._call("query_iterator", self.client.query_iterator, name, batch_size=QUERY_BATCH,
                          output_fields=["item_id"], consistency_level="Strong")
        try:
            while batch := self._call("query_iterator", rows.next):
                found.update(str(r["item_id"]) for r in batch)
        finally:
            rows.close()
        return found

    def open(self, name: str) -> None:
        """Load `name` for search; a collection this client loaded before costs one state query while the
        server still holds it loaded (every version swap of a Retriever opens its collections again, and
        a full load with its catch-up read takes ~0.4 s each, so a swap took seconds; a restarted server
        has released it, and it is loaded again)."""
        if name in self._opened and self._loaded(name):
            return
        if not self.exists(name):
            raise StoreError(f"vector collection {name} is missing from Milvus at {self.uri}{self.missing_hint}")
        info = self._call("describe_collection", self.client.describe_collection, name)
        fields = {f.get("name"): f for f in info.get("fields", [])}
        if not (fields.get("pk", {}).get("is_primary") and "item_id" in fields):
            raise StoreError(f"vector collection {name} has the schema of an older hygraph (string primary "
                             f"key); rebuild the index (`hygraph index`)")
        self._id_limits[name] = int(fields["item_id"].get("params", {}).get("max_length", ID_MAX_BYTES))
        self._call("load_collection", self.client.load_collection, name)
        self.persist(name)  # a fresh load may still be replaying the log: wait until it caught up
        self._opened.add(name)

    def release(self, name: str) -> None:
        self._call("release_collection", self.client.release_collection, name)
        self._opened.discard(name)

    def _loaded(self, name: str) -> bool:
        from pymilvus.client.types import LoadState

        return self._call("get_load_state", self.client.get_load_state, name).get("state") == LoadState.Loaded

    def _describe_metric(self, name: str) -> str:
        for idx in self._call("list_indexes", self.client.list_indexes, name) or []:
            info = self._call("describe_index", self.client.describe_index, name, idx)
            if info.get("metric_type"):
                return str(info["metric_type"])
        return "IP"

    def search(self, name: str, queries: np.ndarray, k: int, layer: int | None = None) -> list[list[Hit]]:
        metric = self._metrics.get(name)
        if metric is None:
            metric = self._metrics[name] = self._describe_metric(name)
        params: dict[str, Any] = {"metric_type": metric}
        if self.cfg.index_type == "HNSW":
            params["params"] = {"ef": max(self.cfg.hnsw_ef_search, k)}
        elif self.cfg.index_type == "IVF_FLAT":
            params["params"] = {"nprobe": 16}
        res = self._call("search", self.client.search, name,
                         data=np.asarray(queries, dtype=np.float32).tolist(), limit=k,
                         filter=f"layer == {int(layer)}" if layer is not None else "",
                         output_fields=["item_id", "layer"], search_params=params, consistency_level=CONSISTENCY)
        return [[Hit(str(h["entity"]["item_id"]), float(h["distance"]), int(h["entity"].get("layer", 0)))
                 for h in row] for row in res]

    def fetch(self, name: str, ids: Sequence[str], fresh: bool = False) -> np.ndarray:
        found = self._get(name, ids, "Strong" if fresh else CONSISTENCY)
        missing = [i for i in ids if i not in found]
        if missing:
            # A version can name rows written less than the graceful time ago that this reader's bounded
            # read does not see yet (a collection it loaded before they were written): a strongly
            # consistent read of just those waits until they are visible.
            found.update(self._get(name, missing, "Strong"))
            missing = [i for i in missing if i not in found]
        if missing:
            raise StoreError(f"{name}: no vector for id {short(missing[0])}")
        return np.asarray([found[i] for i in ids], dtype=np.float32)

    def _get(self, name: str, ids: Sequence[str], consistency: str) -> dict[str, Any]:
        wanted = {id_key(i): i for i in ids}
        keys = list(wanted)
        found: dict[str, Any] = {}
        for start in range(0, len(keys), KEY_BATCH):
            rows = self._call("get", self.client.get, name, ids=keys[start:start + KEY_BATCH],
                              output_fields=["pk", "item_id", "vec"], consistency_level=consistency)
            for r in rows:
                item_id = wanted.get(int(r["pk"]))
                if item_id is not None and r["item_id"] != item_id:
                    raise StoreError(f"{name}: id {short(item_id)} shares its key with stored id {short(r['item_id'])}")
                # As float32 at once: a list of Python floats costs ~8x its vector (20,452 relations read at
                # a reader's load: 151 MiB of peak RSS as lists).
                found[str(r["item_id"])] = np.asarray(r["vec"], dtype=np.float32)
        return found

    def drop(self, name: str) -> None:
        self._opened.discard(name)
        self._metrics.pop(name, None)
        self._id_limits.pop(name, None)
        if self.exists(name):
            self._call("drop_collection", self.client.drop_collection, name)

    def _close_server(self) -> None:
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close()

    def close(self) -> None:
        try:
            if self._rows is not None:
                self._rows.close()
            self.client.close()
        finally:
            self._close_server()
