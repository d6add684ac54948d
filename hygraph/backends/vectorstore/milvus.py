"""Milvus adapter (pymilvus MilvusClient): a server/cluster by URI, or the managed Milvus Lite server."""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Sequence

import numpy as np

from hygraph.backends.vectorstore.base import Hit, Metric
from hygraph.config import VectorStoreConfig
from hygraph.errors import StoreError, StoreUnavailable

_ID_MAX = 512
# pymilvus logs a traceback for every failed call; hygraph maps those errors to its own
# one-line messages, so its logger only speaks for what we do not handle.
logging.getLogger("pymilvus").setLevel(logging.CRITICAL)


class MilvusStore:
    def __init__(self, cfg: VectorStoreConfig, uri: str, on_close: Callable[[], None] | None = None,
                 grpc_options: dict[str, Any] | None = None) -> None:
        from pymilvus import MilvusClient
        from pymilvus.exceptions import MilvusException

        self.cfg = cfg
        self.uri = uri
        self._on_close = on_close
        self._exc = MilvusException
        token = os.environ.get(cfg.token_env, "")
        try:
            self.client = MilvusClient(uri=uri, token=token, timeout=cfg.connect_timeout_s,
                                       grpc_options=grpc_options or {})
        except MilvusException as exc:
            raise StoreUnavailable(f"vector_store.uri {uri}: Milvus unreachable ({exc.message})") from None
        self._metrics: dict[str, str] = {}

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except self._exc as exc:
            # Connection-level failures are retryable (503); anything else is a store bug to surface.
            if "unavailable" in str(exc).lower() or "connect" in str(exc).lower():
                raise StoreUnavailable(f"Milvus at {self.uri} unreachable during {what}") from None
            raise StoreError(f"Milvus {what} failed: {exc}") from None

    def ping(self) -> None:
        self._call("ping", self.client.list_collections, timeout=self.cfg.connect_timeout_s)

    def exists(self, name: str) -> bool:
        return bool(self._call("has_collection", self.client.has_collection, name))

    def create(self, name: str, dim: int, metric: Metric) -> None:
        from pymilvus import DataType, MilvusClient

        if self.exists(name):
            self.drop(name)
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=_ID_MAX)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field("kind", DataType.VARCHAR, max_length=16)
        schema.add_field("layer", DataType.INT64)
        schema.add_field("version", DataType.INT64)
        self._call("create_collection", self.client.create_collection, name, schema=schema)
        self._metrics[name] = metric

    def upsert(self, name: str, ids: Sequence[str], vectors: np.ndarray, version: int,
               layers: Sequence[int] | None = None) -> None:
        kind = name.rsplit("_", 1)[-1]
        vecs = np.asarray(vectors, dtype=np.float32)
        step = self.cfg.insert_batch
        for start in range(0, len(ids), step):
            rows = [{"id": ids[i], "vec": vecs[i].tolist(), "kind": kind,
                     "layer": int(layers[i]) if layers is not None else 0, "version": version}
                    for i in range(start, min(start + step, len(ids)))]
            self._call("upsert", self.client.upsert, name, rows)

    def delete(self, name: str, ids: Sequence[str]) -> None:
        if ids:
            self._call("delete", self.client.delete, name, ids=list(ids))

    def persist(self, name: str) -> None:
        """Nothing to do: Milvus acknowledges an upsert or delete once it is durable and searchable."""

    def seal(self, name: str) -> None:
        self._call("flush", self.client.flush, name)
        metric = self._metrics.get(name) or self._describe_metric(name)
        params = self.client.prepare_index_params()
        if self.cfg.index_type == "HNSW":
            params.add_index(field_name="vec", index_type="HNSW", metric_type=metric,
                             params={"M": self.cfg.hnsw_m, "efConstruction": self.cfg.hnsw_ef_construction})
        else:
            params.add_index(field_name="vec", index_type=self.cfg.index_type, metric_type=metric,
                             params={"nlist": 128} if self.cfg.index_type == "IVF_FLAT" else {})
        self._call("create_index", self.client.create_index, name, params)
        self.open(name)

    def open(self, name: str) -> None:
        if not self.exists(name):
            raise StoreError(f"vector collection {name} is missing from Milvus at {self.uri}")
        self._call("load_collection", self.client.load_collection, name)

    def _describe_metric(self, name: str) -> str:
        for idx in self._call("list_indexes", self.client.list_indexes, name) or []:
            info = self.client.describe_index(name, idx)
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
        res = self._call("search", self.client.search, name,
                         data=np.asarray(queries, dtype=np.float32).tolist(), limit=k,
                         filter=f"layer == {int(layer)}" if layer is not None else "",
                         output_fields=["layer"], search_params=params)
        return [[Hit(h["id"], float(h["distance"]), int(h["entity"].get("layer", 0))) for h in row]
                for row in res]

    def fetch(self, name: str, ids: Sequence[str]) -> np.ndarray:
        rows = self._call("get", self.client.get, name, ids=list(ids), output_fields=["vec"])
        by_id = {r["id"]: r["vec"] for r in rows}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise StoreError(f"{name}: no vector for id {missing[0]!r}")
        return np.asarray([by_id[i] for i in ids], dtype=np.float32)

    def drop(self, name: str) -> None:
        self._metrics.pop(name, None)
        if self.exists(name):
            self._call("drop_collection", self.client.drop_collection, name)

    def close(self) -> None:
        self.client.close()
        if self._on_close is not None:
            self._on_close()
