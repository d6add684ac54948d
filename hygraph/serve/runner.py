"""`hygraph serve`: Ray (local or joined), the managed Milvus Lite server, the application, a clean exit."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

from hygraph.backends import vectorstore
from hygraph.cluster.runtime import init_ray
from hygraph.cluster.updater import start_updater, stop_updater
from hygraph.config import HygraphConfig
from hygraph.errors import HygraphError
from hygraph.indexing.build import ensure_demo_index
from hygraph.serve.app import APP_NAME, LLM_APP_NAME, LLM_ROUTE, build_app, llm_app


def _say(message: str) -> None:
    print(f"[hygraph] {message}", file=sys.stderr, flush=True)


def run_server(cfg: HygraphConfig, index_dir: Path, host: str, port: int, address: str | None = None,
               stop: threading.Event | None = None) -> dict[str, Any]:
    """Deploy and block until SIGINT/SIGTERM (or `stop`), then take everything down.

    This process holds a lease on the index's Milvus Lite server for the application's
    lifetime, so replicas restarting never stop it, and the server stops when this exits.
    """
    import ray
    from ray import serve

    stop = stop or threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    ray_cfg = cfg.ray.model_copy(update={"address": address}) if address else cfg.ray
    store = vectorstore.connect(cfg.vector_store, index_dir)
    try:
        _say("starting Ray" if not ray_cfg.address else f"joining Ray at {ray_cfg.address}")
        init_ray(ray_cfg, metrics_port=cfg.serve.metrics_port)
        ensure_demo_index(cfg, index_dir)
        serve.start(http_options={"host": host, "port": port})
        vllm = llm_app(cfg)
        if vllm is not None:
            _say(f"deploying vLLM ({cfg.llm.vllm_model_source}) at {LLM_ROUTE}")
            serve.run(vllm, name=LLM_APP_NAME, route_prefix=LLM_ROUTE)
        _say(f"deploying {APP_NAME} on index {index_dir} (first start loads models: about a minute)")
        serve.run(build_app(cfg, index_dir), name=APP_NAME, route_prefix="/")
        _say("starting the OnlineUpdater (applies journaled inserts and deletes)")
        updater = start_updater(cfg, index_dir)
        ray.get(updater.status.remote())
        url = f"http://{host}:{port}"
        _say(f"serving at {url}  (OpenAPI: {url}/docs, metrics: http://127.0.0.1:{cfg.serve.metrics_port}/metrics)")
        _say(f"try: curl -s {url}/v1/query -H 'Content-Type: application/json' "
             "-d '{\"question\": \"Who wrote a song after attending a luau in the Koolauloa District on the island of Oahu?\"}'")
        _say("Ctrl-C stops the service")
        stop.wait()
        _say("stopping")
    except (HygraphError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - Ray/Serve start failures: one line, not a traceback
        raise HygraphError(f"serve: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    finally:
        if ray.is_initialized():
            try:
                stop_updater(index_dir)
                serve.shutdown()
            finally:
                ray.shutdown()
        store.close()
    return {"stopped": True, "url": f"http://{host}:{port}"}
