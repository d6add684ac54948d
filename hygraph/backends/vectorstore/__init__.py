"""The one factory for vector stores."""

from __future__ import annotations

from pathlib import Path

from hygraph.backends import resolve_device
from hygraph.backends.vectorstore.base import KINDS, Hit, VectorStore
from hygraph.config import VectorStoreConfig

__all__ = ["KINDS", "Hit", "VectorStore", "connect", "managed_server"]

# `vector_store.uri` values that name a local engine run as a managed child process; anything
# else is the URI of a Milvus server (standalone or cluster) that runs elsewhere.
EMBEDDED, LITE = "embedded", "lite"


def managed_server(cfg: VectorStoreConfig, index_dir: str | Path):  # -> ManagedServer
    """The (not yet started) managed server of `index_dir`'s `milvus/` directory for `cfg.uri`."""
    data_dir = Path(cfg.server_dir) if cfg.server_dir else Path(index_dir) / "milvus"
    if cfg.uri == LITE:
        from hygraph.backends.vectorstore.lite_server import LiteServer

        return LiteServer(data_dir, cfg.lite_host, cfg.lite_port, cfg.server_start_timeout_s)
    from hygraph.backends.vectorstore.milvus_server import StandaloneServer

    return StandaloneServer(data_dir, cfg.server_start_timeout_s, cfg.server_cache_dir, cfg.isolation)


def _other_engine_hint(cfg: VectorStoreConfig, data_dir: Path) -> str:
    """When only the other local engine has data here, say so where a collection is missing."""
    mine, other, other_uri = ((data_dir / "standalone", data_dir / "data", LITE) if cfg.uri == EMBEDDED
                              else (data_dir / "data", data_dir / "standalone", EMBEDDED))
    if other.is_dir() and not mine.is_dir():
        return (f"; this index's vectors were written by the other local engine ({other}): "
                f"set vector_store.uri: {other_uri}, or rebuild the index")
    return ""


def connect(cfg: VectorStoreConfig, index_dir: str | Path) -> VectorStore:
    """Open the configured store. With `milvus` and uri `embedded` (the default) or `lite`, attach
    to (or start) the index's managed Milvus server; any other uri is a Milvus server's address."""
    if cfg.backend == "faiss":
        from hygraph.backends.vectorstore.faiss_store import FaissStore

        return FaissStore(cfg, Path(index_dir) / "faiss", resolve_device(cfg.device))
    from hygraph.backends.vectorstore.milvus import MilvusStore

    if cfg.uri not in (EMBEDDED, LITE):
        store = MilvusStore(cfg, cfg.uri)
    else:
        from hygraph.backends.vectorstore.managed import CLIENT_GRPC_OPTIONS

        hint = _other_engine_hint(cfg, Path(index_dir) / "milvus")
        server = managed_server(cfg, index_dir).start()
        try:
            if server.spawned:
                from hygraph.backends.vectorstore.watchdog import start_watchdog

                start_watchdog(cfg, index_dir, server.pid)
            token = server.token
        except BaseException:
            server.stop()
            raise
        store = MilvusStore(cfg, server.uri, on_close=server.stop, grpc_options=CLIENT_GRPC_OPTIONS, token=token)
        store.missing_hint = hint
    try:
        store.ping()
    except BaseException:
        store.close()
        raise
    return store
