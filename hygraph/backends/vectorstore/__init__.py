"""The one factory for vector stores."""

from __future__ import annotations

from pathlib import Path

from hygraph.backends import resolve_device
from hygraph.backends.vectorstore.base import KINDS, Hit, VectorStore
from hygraph.config import VectorStoreConfig

__all__ = ["KINDS", "Hit", "VectorStore", "connect"]


def connect(cfg: VectorStoreConfig, index_dir: str | Path) -> VectorStore:
    """Open the configured store; `milvus` with uri `lite` attaches to (or starts) the index's Lite server."""
    if cfg.backend == "faiss":
        from hygraph.backends.vectorstore.faiss_store import FaissStore

        return FaissStore(cfg, Path(index_dir) / "faiss", resolve_device(cfg.device))
    from hygraph.backends.vectorstore.milvus import MilvusStore

    if cfg.uri != "lite":
        store = MilvusStore(cfg, cfg.uri)
    else:
        from hygraph.backends.vectorstore.lite_server import CLIENT_GRPC_OPTIONS, LiteServer

        server = LiteServer(Path(index_dir) / "milvus", cfg.lite_host, cfg.lite_port).start()
        store = MilvusStore(cfg, server.uri, on_close=server.stop, grpc_options=CLIENT_GRPC_OPTIONS)
    store.ping()
    return store
