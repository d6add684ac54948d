"""The Milvus adapter without a server: ids become INT64 keys, never expression text.

A fake client records every call, so these check what the adapter would send to Milvus.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from hygraph.backends.vectorstore import milvus as mv
from hygraph.backends.vectorstore.milvus import ID_MAX_BYTES, MilvusStore, id_key, short
from hygraph.backends.vectorstore.milvus_rows import REQUEST_BYTES, RowWriter, batches
from hygraph.config import VectorStoreConfig
from hygraph.errors import StoreError, StoreUnavailable
from tests.hostile import FILTER_BREAKERS

HOSTILE = [
    *FILTER_BREAKERS,
    "id == 1 || true",
    "a" * 256 + ":12",
    "",
    " ",
    "\x00nul",
    "emoji 🦉",
]


def test_key_is_a_stable_signed_int64():
    # Fixed values: a key must not change between processes, runs or releases (it is the stored pk).
    assert id_key("doc-1:0") == 565921166436930056
    assert id_key("zz'] or id not in ['") == -1996016515471089237
    assert id_key("é") == -3811523526868657873
    for s in HOSTILE:
        k = id_key(s)
        assert isinstance(k, int) and -(2 ** 63) <= k < 2 ** 63


def test_key_does_not_depend_on_the_process_hash_seed():
    code = "from hygraph.backends.vectorstore.milvus import id_key; print(id_key('doc-1:0'))"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
            for seed in ("0", "1", "12345")}
    assert outs == {"565921166436930056"}


def test_hostile_ids_get_distinct_keys():
    keys = [id_key(s) for s in HOSTILE]
    assert len(set(keys)) == len(HOSTILE)
    assert len({id_key(f"doc:{i}") for i in range(20000)}) == 20000


def test_messages_cut_ids_to_80_chars():
    text = short("x" * 5000)
    assert len(text) < 120 and "5000 chars" in text
    assert short("a\nb") == "'a\\nb'"


class FakeClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.rows: dict[int, dict] = {}

    def __getattr__(self, name):
        def record(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            if name == "upsert":
                for r in args[1]:
                    self.rows[r["pk"]] = r
            if name == "get":
                return [self.rows[k] for k in kwargs["ids"] if k in self.rows]
            if name == "search":
                return [[]]
            return None
        return record


class FakeStub:
    """The server end of the array-encoded writes: decodes each request back into rows."""

    def __init__(self, client: FakeClient) -> None:
        self.client = client
        self.lock = threading.Lock()

    def _rows(self, request) -> list[dict]:
        cols = {f.field_name: f for f in request.fields_data}
        dim = cols["vec"].vectors.dim
        vecs = np.asarray(cols["vec"].vectors.float_vector.data, np.float32).reshape(-1, dim)
        assert len(vecs) == request.num_rows
        return [{"pk": pk, "item_id": item_id, "vec": vec.tolist(), "kind": kind, "layer": layer, "version": version}
                for pk, item_id, vec, kind, layer, version in zip(
                    cols["pk"].scalars.long_data.data, cols["item_id"].scalars.string_data.data, vecs,
                    cols["kind"].scalars.string_data.data, cols["layer"].scalars.long_data.data,
                    cols["version"].scalars.long_data.data)]

    def _record(self, what: str, request):
        rows = self._rows(request)
        with self.lock:  # the writer sends batches from several threads
            self.client.calls.append((what, (request.collection_name, rows), {}))
            self.client.rows.update((r["pk"], r) for r in rows)
        return milvus_pb2.MutationResult()

    def Upsert(self, request, timeout=None, metadata=None):  # noqa: N802 - the gRPC method's name
        return self._record("upsert", request)

    def Insert(self, request, timeout=None, metadata=None):  # noqa: N802
        return self._record("insert", request)


def _store(insert_batch: int = 2000) -> tuple[MilvusStore, FakeClient]:
    from pymilvus.exceptions import MilvusException

    store = MilvusStore.__new__(MilvusStore)
    store.cfg = VectorStoreConfig(insert_batch=insert_batch)
    store.uri, store._on_close, store._exc = "fake", None, MilvusException
    store._metrics, store._version = {"c": "IP"}, None
    store.missing_hint, store._id_limits = "", {}
    store.client = FakeClient()
    rows = RowWriter.__new__(RowWriter)
    rows._stub, rows._metadata, rows._timeout = FakeStub(store.client), [], 1.0
    store._rows = rows
    return store, store.client


def _sent(client: FakeClient, what: str = "upsert") -> list[list[dict]]:
    """The batches sent, in the order of the rows they carry (they may arrive in any order)."""
    batches = [args[1] for name, args, _ in client.calls if name == what]
    return sorted(batches, key=lambda b: HOSTILE.index(b[0]["item_id"]) if b[0]["item_id"] in HOSTILE else -1)


def test_upsert_sends_int_keys_and_the_id_as_data_in_batches():
    store, client = _store(insert_batch=4)
    vecs = np.eye(len(HOSTILE), 4, dtype=np.float32)
    store.upsert("c", HOSTILE, vecs, version=3, layers=list(range(len(HOSTILE))))
    batches = _sent(client)
    assert [len(b) for b in batches] == [4, 4, 4, 2]
    rows = [r for b in batches for r in b]
    assert [r["item_id"] for r in rows] == HOSTILE
    assert all(r["pk"] == id_key(r["item_id"]) and isinstance(r["pk"], int) for r in rows)
    assert [r["vec"] for r in rows] == vecs.tolist()  # exactly the float32 values written
    assert [r["layer"] for r in rows] == list(range(len(HOSTILE))) and {r["version"] for r in rows} == {3}
    assert {r["kind"] for r in rows} == {"c"}


def test_fill_inserts_what_upsert_would_write():
    store, client = _store(insert_batch=3)
    vecs = np.random.default_rng(0).standard_normal((len(HOSTILE), 5)).astype(np.float32)
    store.fill("c", HOSTILE, vecs, version=1)
    assert not [c for c in client.calls if c[0] == "upsert"]
    rows = {r["item_id"]: r for b in _sent(client, "insert") for r in b}
    assert set(rows) == set(HOSTILE) and all(len(b) <= 3 for b in _sent(client, "insert"))
    assert np.array_equal(np.asarray([rows[i]["vec"] for i in HOSTILE], np.float32), vecs)


def test_batches_end_at_the_row_count_or_the_request_size():
    assert batches([1] * 5, 4, max_rows=2) == [(0, 2), (2, 4), (4, 5)]
    big = REQUEST_BYTES // 2
    assert batches([10, big, big, 10], 4, max_rows=100) == [(0, 2), (2, 4)]
    assert batches([REQUEST_BYTES * 2], 4, max_rows=100) == [(0, 1)]  # one row over the bound still goes
    assert batches([], 4, max_rows=100) == []


def test_a_failed_write_raises_the_servers_status():
    store, client = _store()

    def refuse(request, timeout=None, metadata=None):
        return milvus_pb2.MutationResult(status=common_pb2.Status(code=1100, reason="collection not found"))

    store._rows._stub.Upsert = refuse
    with pytest.raises(StoreError, match="upsert failed: .*collection not found"):
        store.upsert("c", ["a"], np.ones((1, 2), np.float32), version=1)


def test_delete_and_fetch_go_by_integer_keys_only():
    store, client = _store()
    store.upsert("c", HOSTILE, np.ones((len(HOSTILE), 2), np.float32), version=1)
    out = store.fetch("c", list(reversed(HOSTILE)))
    assert out.shape == (len(HOSTILE), 2)
    store.delete("c", HOSTILE)
    for name, args, kwargs in client.calls:
        if name in ("get", "delete"):
            assert all(isinstance(k, int) for k in kwargs["ids"]) and "filter" not in kwargs


def test_the_only_filter_is_layer_equals_an_int():
    store, client = _store()
    store.search("c", np.ones((1, 2), np.float32), 5)
    store.search("c", np.ones((1, 2), np.float32), 5, layer=np.int64(2))
    filters = [kwargs["filter"] for name, _, kwargs in client.calls if name == "search"]
    assert filters == ["", "layer == 2"]


def test_a_key_collision_in_one_upsert_is_refused(monkeypatch):
    store, client = _store()
    monkeypatch.setattr(mv, "id_key", lambda s: 7)
    with pytest.raises(StoreError, match="same key"):
        store.upsert("c", ["a", "b"], np.ones((2, 2), np.float32), version=1)
    assert not [c for c in client.calls if c[0] == "upsert"]


def test_a_key_collision_on_fetch_is_refused(monkeypatch):
    store, client = _store()
    store.upsert("c", ["a"], np.ones((1, 2), np.float32), version=1)
    monkeypatch.setattr(mv, "id_key", lambda s: id_key("a"))
    with pytest.raises(StoreError, match="shares its key"):
        store.fetch("c", ["b"])


def test_a_repeated_id_keeps_its_last_vector():
    store, client = _store()
    store.upsert("c", ["a", "b", "a"], np.asarray([[1, 0], [0, 1], [2, 2]], np.float32), version=1)
    [batch] = _sent(client)
    assert len(batch) == 2 and client.rows[id_key("a")]["vec"] == [2.0, 2.0]


def test_id_length_limit_counts_utf8_bytes():
    store, client = _store()
    assert ID_MAX_BYTES == 65535  # Milvus's largest VARCHAR
    # The longest document id (256 characters of 4 bytes) with a chunk ordinal, a long entity name,
    # and exactly the limit in 2-byte characters are all stored.
    ok = ["🦉" * 256 + ":4095", "entity " * 4000, "é" * (ID_MAX_BYTES // 2) + "x"]
    assert len(ok[2].encode("utf-8")) == ID_MAX_BYTES
    store.upsert("c", ok, np.ones((3, 2), np.float32), version=1)
    assert {r["item_id"] for r in client.rows.values()} == set(ok)
    calls = len(client.calls)
    with pytest.raises(StoreError, match="is 65537 bytes of UTF-8, over the 65535 this collection stores$") as err:
        store.upsert("c", ["ok", ok[2] + "é"], np.ones((2, 2), np.float32), version=1)
    assert len(str(err.value)) < 200 and "éééé" in str(err.value)  # a bounded preview of the id
    assert len(client.calls) == calls  # refused before anything was sent


def test_a_non_string_or_unencodable_id_is_a_store_error():
    store, _ = _store()
    with pytest.raises(StoreError, match="not a string"):
        store.upsert("c", [12], np.ones((1, 2), np.float32), version=1)  # type: ignore[list-item]
    with pytest.raises(StoreError, match="UTF-8"):
        store.upsert("c", ["\ud800"], np.ones((1, 2), np.float32), version=1)


def test_missing_id_message_is_truncated():
    store, _ = _store()
    with pytest.raises(StoreError) as err:
        store.fetch("c", ["q" * 10000])
    assert len(str(err.value)) < 200


def _rpc_error(code):
    """The error grpc raises for a failed call (a deadline, or UNAVAILABLE when pymilvus does not retry it)."""
    import grpc

    class RpcError(grpc.RpcError):
        def code(self):
            return code

        def details(self):
            return "connect closed timeout unavailable"

    return RpcError()


def test_errors_are_classified_by_code_never_by_message_text():
    """What pymilvus 3.0.2 raises against Milvus 2.3.5 (observed): a call to a dead or unreachable
    server is code 2 ("Fail connecting to server ..."); a deadline is grpc's DEADLINE_EXCEEDED as it
    is; retries run out with grpc's status as the code. Messages quote ids and expressions, and a
    word in them never makes a permanent error retryable."""
    import grpc
    from pymilvus.exceptions import MilvusException

    transient = [
        MilvusException(2, "Fail connecting to server on 127.0.0.1:1, illegal connection params or server unavailable"),
        MilvusException(grpc.StatusCode.UNAVAILABLE, "[search] Retry run out of 75 retry times, Socket closed"),
        MilvusException(8, "rate limit exceeded"),
        MilvusException(1, "service not ready", retriable=True),
        _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED),
        _rpc_error(grpc.StatusCode.UNAVAILABLE),
    ]
    words = "connect closed timeout timed out deadline unavailable refused goaway too_many_pings"
    permanent = [
        MilvusException(65535, f"cannot parse expression: {words} ((, error: invalid expression"),
        MilvusException(1100, f"the length (70000) of 0th string exceeds max length: {words}"),
        MilvusException(100, f"collection not found[collection={words}]"),
        MilvusException(1, f"Unexpected error, message=<{words}>"),
        MilvusException(grpc.StatusCode.INVALID_ARGUMENT, words),
        _rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED),  # a message over gRPC's size limit
        _rpc_error(grpc.StatusCode.UNAUTHENTICATED),
    ]
    for exc in transient:
        assert mv._unavailable(exc), exc
    for exc in permanent:
        assert not mv._unavailable(exc), exc


def test_a_permanent_error_quoting_connection_words_is_a_store_error_not_unavailable():
    from pymilvus.exceptions import MilvusException

    store, client = _store()

    def fail(*args, **kwargs):
        raise MilvusException(65535, "invalid id 'connection closed: timeout'")

    store._rows._stub.Upsert = fail
    with pytest.raises(StoreError) as err:
        store.upsert("c", ["connection closed: timeout"], np.ones((1, 2), np.float32), version=1)
    assert not isinstance(err.value, StoreUnavailable)

    def gone(*args, **kwargs):  # what the writes' own channel raises when the server is down
        import grpc

        raise _rpc_error(grpc.StatusCode.UNAVAILABLE)

    store._rows._stub.Upsert = gone
    with pytest.raises(StoreUnavailable):
        store.upsert("c", ["a"], np.ones((1, 2), np.float32), version=1)


def test_persist_skips_a_collection_that_is_not_loaded_by_its_code():
    from pymilvus.exceptions import MilvusException

    store, client = _store()

    def not_loaded(*args, **kwargs):
        raise MilvusException(101, "failed to query: collection not loaded[collection=1]")

    client.get = not_loaded
    store.persist("c")

    def other(*args, **kwargs):
        raise MilvusException(65535, "id 'not loaded' is bad")

    client.get = other
    with pytest.raises(StoreError, match="persist failed"):
        store.persist("c")


def test_a_row_a_bounded_read_misses_is_read_again_strongly():
    store, client = _store()
    store.upsert("c", ["old", "new"], np.eye(2, dtype=np.float32), version=1)
    visible = {id_key("old")}

    def get(name, ids, output_fields, consistency_level):
        client.calls.append(("get", (name,), {"ids": ids, "consistency_level": consistency_level}))
        return [client.rows[k] for k in ids if k in client.rows and (k in visible or consistency_level == "Strong")]

    client.get = get
    assert store.fetch("c", ["new", "old"]).tolist() == [[0.0, 1.0], [1.0, 0.0]]
    reads = [(kw["consistency_level"], len(kw["ids"])) for name, _, kw in client.calls if name == "get"]
    assert reads == [("Bounded", 2), ("Strong", 1)]  # only the missed row is read again
    with pytest.raises(StoreError, match="no vector for id 'gone'"):
        store.fetch("c", ["gone"])
