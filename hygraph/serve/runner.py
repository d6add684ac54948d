"""`hygraph serve`: Ray (local or joined), the managed Milvus Lite server, the application, a clean exit."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from hygraph.backends import vectorstore
from hygraph.runtime import ensure_port_free, init_ray, probe_host
from hygraph.updater import indexes
from hygraph.updater.actor import start_updater, stop_updater
from hygraph.config import HygraphConfig
from hygraph.errors import ConfigError, HygraphError
from hygraph.serve.app import APP_NAME, LLM_APP_NAME, LLM_ROUTE, build_app, llm_app
from hygraph.serve.http import api_keys
from hygraph.serve.supervisor import say as _say
from hygraph.store.objects import index_uri
from hygraph.store.registry import IndexRegistry


def _key_hint(cfg: HygraphConfig) -> str:
    """How to pass the key in a shell, without printing the secret itself."""
    from_env = [k for k in os.environ.get(cfg.serve.api_keys_env, "").split(",") if k.strip()]
    return f"${cfg.serve.api_keys_env}" if len(from_env) == 1 else "<a key from serve.api_keys>"


def run_server(cfg: HygraphConfig, index_dir: str, host: str, port: int, address: str | None = None,
               stop: threading.Event | None = None) -> dict[str, Any]:
    """Deploy and block until SIGINT/SIGTERM (or `stop`), then take everything down.

    This process holds a lease on the index's Milvus Lite server for the application's
    lifetime, so replicas restarting never stop it, and the server stops when this exits.
    """
    import ray
    from ray import serve

    # Serve's lines in this process ("Started Serve", "Application ... is ready"): the service says its own.
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    stop = stop or threading.Event()
    lost = False
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    ray_cfg = cfg.ray.model_copy(update={"address": address}) if address else cfg.ray
    proxy_port, serve_env = http_ingress(cfg, host, port, joined=bool(ray_cfg.address))
    # Bound as its server will bind it: an Ingress replica serving the port itself (direct ingress) sets no
    # SO_REUSEADDR, so the connections its predecessor left closing (TIME_WAIT, up to a minute after a
    # restart) keep the port from it until they time out.
    direct = proxy_port != port
    ensure_port_free(host, port, "serve.port (--port)", reuse_address=not direct,
                     linger_wait_s=PORT_LINGER_S if direct else 0.0)
    index_dir = index_uri(index_dir)
    registry = IndexRegistry(index_dir, cfg.store.cache_dir)
    # The managed vector store lives in this node's directory for the index (the index itself when local).
    store = vectorstore.connect(cfg.vector_store, registry.root)
    try:
        if not ray_cfg.address:
            _adopt_orphans()
        _say("starting Ray" if not ray_cfg.address else f"joining Ray at {ray_cfg.address}")
        init_ray(ray_cfg, metrics_port=cfg.serve.metrics_port, log_to_driver=True, env=serve_env)
        serve.start(http_options={"host": host, "port": proxy_port,
                                  "request_timeout_s": cfg.serve.request_timeout_s})
        vllm = llm_app(cfg)
        if vllm is not None:
            _say(f"deploying vLLM ({cfg.llm.vllm_model_source}) at {LLM_ROUTE}")
            serve.run(vllm, name=LLM_APP_NAME, route_prefix=LLM_ROUTE)
        _say(f"deploying {APP_NAME} on index {index_dir} (first start loads models: about a minute)")
        serve.run(build_app(cfg, index_dir), name=APP_NAME, route_prefix="/")
        _say("starting the OnlineUpdater (applies journaled inserts and deletes)")
        updater = start_updater(cfg, index_dir)
        ray.get(updater.status.remote())
        named_cfg = cfg.for_named_index(registry.root)
        indexes.resume_removals(named_cfg, registry)
        indexes.start_named_updaters(named_cfg, registry)
        url = f"http://{host}:{port}"
        metrics_host = "127.0.0.1" if ray_cfg.loopback_only and not ray_cfg.address else host
        _say(f"serving at {url}  (API docs: {url}/docs, metrics: http://{metrics_host}:{cfg.serve.metrics_port}/metrics)")
        keys = api_keys(cfg.serve, cfg.profile)
        auth = f" -H \"Authorization: Bearer {_key_hint(cfg)}\"" if keys and cfg.serve.require_key_for_reads else ""
        _say(f"try: curl -s {url}/v1/query{auth} -H 'Content-Type: application/json' "
             "-d '{\"question\": \"Who wrote a song after attending a luau in the Koolauloa District "
             "on the island of Oahu?\"}'")
        if keys:
            _say(f"writes (POST /v1/documents, DELETE /v1/documents/ID) need "
                 f"-H \"Authorization: Bearer {_key_hint(cfg)}\"")
        _say("Ctrl-C stops the service")
        # The proxy's port tells whether the node's Ray lives (an Ingress replica serving `port` itself may
        # restart alone).
        _watch(stop, probe_host(host), proxy_port, cfg.serve.ray_lost_after_s,
               _local_ray_processes())
        _say("stopping")
    except RayLost:
        lost = True
        raise
    except (HygraphError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - Ray/Serve start failures: one line, not a traceback
        raise HygraphError(f"serve: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    finally:
        if lost:
            _shutdown_within(ray.shutdown, RAY_SHUTDOWN_S)  # the controller and updater died with their node
            _kill_ray_orphans()
        elif ray.is_initialized():
            try:
                for path in [index_dir, *(registry.location(name) for name in registry.names()[1:])]:
                    stop_updater(path)
                serve.shutdown()
            finally:
                ray.shutdown()
        store.close()
    return {"stopped": True, "url": f"http://{host}:{port}"}


class RayLost(HygraphError):
    """The service's Ray node is gone (its raylet or GCS died): the process exits for its supervisor to
    start a new one."""


# Ray tears down what this process started in a few seconds; with its node gone it can wait on dead peers.
RAY_SHUTDOWN_S = 20.0
# Linux keeps a closed connection's port in TIME_WAIT for 60 s (and an orphaned FIN_WAIT2 as long).
PORT_LINGER_S = 75.0
PROBE_EVERY_S = 1.0


def http_ingress(cfg: HygraphConfig, host: str, port: int, joined: bool) -> tuple[int, dict[str, str]]:
    """Where Serve's proxy listens, and the environment Serve's controller and replicas need: `port` itself, or,
    with direct ingress (`serve.direct_ingress`), a free port, the Ingress replica being given `port` (the range
    Serve allocates an ingress replica's HTTP port from is that port alone); with `serve.throughput_optimized`,
    Ray's bundle of that name besides. `joined`: Ray is a cluster this process joined, whose Ingress replica may
    run on another node and whose Serve it does not start."""
    proxy_port, env = _ingress(cfg, host, port, joined)
    if _throughput_optimized(cfg, joined, direct=proxy_port != port):
        # The bundle would turn direct ingress on by itself: whether it is on stays http_ingress's decision.
        env = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0", **env}
    return proxy_port, env


def _ingress(cfg: HygraphConfig, host: str, port: int, joined: bool) -> tuple[int, dict[str, str]]:
    wanted = cfg.serve.direct_ingress
    if wanted is False:
        return port, {}
    why_not = _not_direct(cfg, joined)
    if why_not:
        if wanted:
            raise ConfigError(f"serve.direct_ingress: {why_not}; set it to false (or leave it unset: Serve's "
                              "proxy is then used where direct ingress cannot be)")
        return port, {}
    with socket.socket() as s:
        s.bind((host, 0))
        proxy_port = int(s.getsockname()[1])
    return proxy_port, {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "1", "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(port),
                        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(port + 1),
                        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": str(cfg.serve.direct_ingress_drain_s)}


def _throughput_optimized(cfg: HygraphConfig, joined: bool, direct: bool) -> bool:
    wanted = cfg.serve.throughput_optimized
    if wanted is None:
        return direct
    if wanted and joined:
        raise ConfigError("serve.throughput_optimized: a joined Ray cluster (ray.address) runs a Serve this "
                          "process does not start; set RAY_SERVE_THROUGHPUT_OPTIMIZED=1 in its nodes' "
                          "environment instead, and this to false (or leave it unset)")
    return wanted


def _not_direct(cfg: HygraphConfig, joined: bool) -> str:
    """Why the service cannot use direct ingress ("" when it can)."""
    ingress = cfg.serve.ingress
    if ingress.autoscaling is not None or ingress.num_replicas != 1:
        return ("the Ingress replica listens on serve.port itself, so there is one: serve.ingress.num_replicas "
                "must be 1, without autoscaling")
    if cfg.llm.backend == "vllm" and cfg.llm.vllm_model_source:
        return "the vLLM app (llm.vllm_model_source) is reached through Serve's proxy on serve.port"
    if joined:
        return "a joined Ray cluster (ray.address) may place the Ingress replica on another node"
    return ""


def _watch(stop: threading.Event, host: str, port: int, lost_after_s: float, ray: dict[int, str]) -> None:
    """Block until `stop`; raise RayLost when a process of the local Ray this process started (`ray`: pid ->
    name; its raylet and GCS) has died, or once Serve's HTTP proxy has refused connections for
    `lost_after_s` (a joined cluster's node). A dead raylet must be watched itself: its workers, the proxy
    among them, keep answering for a while without it. Only the proxy's TCP handshake is probed: a proxy
    busy with requests still accepts it, so load alone never reads as a lost node."""
    last_ok = time.monotonic()
    while not stop.wait(PROBE_EVERY_S):
        dead = [f"{name} (pid {pid})" for pid, name in ray.items() if not _alive(pid)]
        if dead:
            raise RayLost(f"serve: Ray's {', '.join(dead)} died: this node's Ray is gone")
        try:
            socket.create_connection((host, port), timeout=PROBE_EVERY_S).close()
            last_ok = time.monotonic()
        except OSError:
            if time.monotonic() - last_ok >= lost_after_s:
                raise RayLost(f"serve: Ray's HTTP proxy on {host}:{port} stopped answering {lost_after_s:.0f} s "
                              "ago: this node's Ray is gone") from None


def _local_ray_processes() -> dict[int, str]:
    """The raylet and GCS server this process started (a local Ray), from /proc; empty elsewhere."""
    me, out = os.getpid(), {}
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return out
    for pid in entries:
        stat = _stat(int(pid))
        if stat is not None and stat[1] == me and stat[0] in ("raylet", "gcs_server"):
            out[int(pid)] = stat[0]
    return out


def _stat(pid: int) -> tuple[str, int, str] | None:
    """(name, parent pid, state) of a process, from /proc/<pid>/stat; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
    return name, int(rest[1]), rest[0]


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[2] not in ("Z", "X")  # a killed child stays a zombie until reaped


_PR_SET_CHILD_SUBREAPER = 36


def _adopt_orphans() -> None:
    """Become the subreaper of what this process starts (Linux): when the local raylet dies, its workers
    (Serve's proxy among them, still holding the HTTP port) are re-parented here instead of to init, so
    `_kill_ray_orphans` can end them before the supervisor starts the service again on the same port."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, AttributeError):
        pass  # not Linux: a dead raylet's workers are left to the OS, as before


def _kill_ray_orphans() -> None:
    """SIGKILL this process's children that are Ray's (workers re-parented here after their raylet died)."""
    me = os.getpid()
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if stat is not None and stat[1] == me and (cmdline.startswith(b"ray::") or b"/ray/" in cmdline):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass  # already gone


def _shutdown_within(fn: Callable[[], None], seconds: float) -> None:
    done = threading.Thread(target=fn, name="hygraph-ray-shutdown", daemon=True)
    done.start()
    done.join(seconds)
