"""Milvus insert and upsert requests encoded from arrays, sent on a gRPC channel of their own.

pymilvus's MilvusClient turns every row into a dict and every field value into a protobuf value
in Python: ~1 ms a row of a 384-float vector, 85% of an upsert's time (cProfile,
docs/bench/vector_writes.md). Here each field is one protobuf array: the vectors are the float32
bytes of the whole batch, parsed by protobuf's C runtime (a packed `repeated float` is exactly
those little-endian bytes), so the client spends a tenth of the CPU time. The requests are the
InsertRequest/UpsertRequest messages of pymilvus's generated protocol, which every Milvus server
of 2.3 and later answers; several are in flight at once, since the server handles them in
parallel.
"""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence
from urllib.parse import urlparse

import grpc
import numpy as np
from pymilvus.exceptions import MilvusException
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc, schema_pb2

# Requests in flight at once per write: the server decodes and applies them side by side while this
# process encodes the next.
STREAMS = 4
# A request's size bound (the server accepts up to 64 MiB by default); a batch also ends at the
# configured row count.
REQUEST_BYTES = 16 << 20
ROW_OVERHEAD = 64  # key, kind, layer, version and protobuf framing per row, roughly


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def float_vectors(vecs: np.ndarray) -> schema_pb2.VectorField:
    """A FLOAT_VECTOR field of `vecs` (rows × dim): field 1 of FloatArray, packed, is the raw bytes."""
    raw = np.ascontiguousarray(vecs, dtype="<f4").tobytes()
    data = schema_pb2.FloatArray.FromString(b"\x0a" + _varint(len(raw)) + raw)
    return schema_pb2.VectorField(dim=int(vecs.shape[1]), float_vector=data)


def batches(id_bytes: Sequence[int], dim: int, max_rows: int) -> list[tuple[int, int]]:
    """[start, end) ranges of at most `max_rows` rows and about REQUEST_BYTES each (one row at least)."""
    out, start, size = [], 0, 0
    for i, n in enumerate(id_bytes):
        row = 4 * dim + n + ROW_OVERHEAD
        if i > start and (i - start >= max_rows or size + row > REQUEST_BYTES):
            out.append((start, i))
            start, size = i, 0
        size += row
    if start < len(id_bytes):
        out.append((start, len(id_bytes)))
    return out


class RowWriter:
    """Encodes rows of (pk, item_id, vec, kind, layer, version) and sends them to one server."""

    def __init__(self, uri: str, token: str, options: dict[str, Any], timeout: float) -> None:
        parsed = urlparse(uri if "://" in uri else f"http://{uri}")
        target = f"{parsed.hostname}:{parsed.port or 19530}"
        opts = list(options.items())
        self._channel = (grpc.secure_channel(target, grpc.ssl_channel_credentials(), opts)
                         if parsed.scheme == "https" else grpc.insecure_channel(target, opts))
        self._stub = milvus_pb2_grpc.MilvusServiceStub(self._channel)
        self._metadata = [("authorization", base64.b64encode(token.encode()).decode())] if token else []
        self._timeout = timeout

    def write(self, name: str, keys: Sequence[int], ids: Sequence[str], vecs: np.ndarray, kind: str,
              layers: Sequence[int], version: int, max_rows: int, insert: bool) -> None:
        """Send every row: inserts into a collection that holds none of these keys, else upserts."""
        ranges = batches([len(i.encode("utf-8")) for i in ids], int(vecs.shape[1]), max_rows)

        def send(bounds: tuple[int, int]) -> None:
            a, b = bounds
            self._send(name, keys[a:b], ids[a:b], vecs[a:b], kind, layers[a:b], version, insert)

        if len(ranges) == 1:
            send(ranges[0])
            return
        with ThreadPoolExecutor(max_workers=min(STREAMS, len(ranges)), thread_name_prefix="milvus-rows") as pool:
            for done in [pool.submit(send, r) for r in ranges]:
                done.result()

    def _send(self, name: str, keys: Sequence[int], ids: Sequence[str], vecs: np.ndarray, kind: str,
              layers: Sequence[int], version: int, insert: bool) -> None:
        n = len(keys)

        def longs(field: str, values: Sequence[int]) -> schema_pb2.FieldData:
            return schema_pb2.FieldData(type=schema_pb2.Int64, field_name=field, scalars=schema_pb2.ScalarField(
                long_data=schema_pb2.LongArray(data=values)))

        def strings(field: str, values: Sequence[str]) -> schema_pb2.FieldData:
            return schema_pb2.FieldData(type=schema_pb2.VarChar, field_name=field, scalars=schema_pb2.ScalarField(
                string_data=schema_pb2.StringArray(data=values)))

        fields = [longs("pk", keys), strings("item_id", ids),
                  schema_pb2.FieldData(type=schema_pb2.FloatVector, field_name="vec", vectors=float_vectors(vecs)),
                  strings("kind", [kind] * n), longs("layer", layers), longs("version", [version] * n)]
        if insert:
            reply = self._stub.Insert(milvus_pb2.InsertRequest(collection_name=name, fields_data=fields, num_rows=n),
                                      timeout=self._timeout, metadata=self._metadata)
        else:
            reply = self._stub.Upsert(milvus_pb2.UpsertRequest(collection_name=name, fields_data=fields, num_rows=n),
                                      timeout=self._timeout, metadata=self._metadata)
        status = reply.status
        if status.error_code or status.code:
            raise MilvusException(code=status.code or status.error_code, message=status.reason,
                                  retriable=status.retriable)

    def close(self) -> None:
        self._channel.close()
