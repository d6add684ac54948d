"""Starting or joining Ray with the project's defaults (loopback only, offline model loading): used by the
Ray Data build, the Serve application and the updater actor alike."""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
import warnings
from typing import Any, Mapping

from hygraph.config import RayConfig
from hygraph.runtime.loopback import LOOPBACK_ENV, SETUP_HOOK, is_loopback, request_loopback
from hygraph.runtime.watch import RAY_LOGS
from hygraph.errors import HygraphError, InputError

log = logging.getLogger("hygraph.runtime")

# A local Ray start waits for its GCS and raylet; on a saturated machine, or right after another local
# Ray stopped, that wait can time out (seen in `make test`: two starts 30 s apart both timed out), so
# it is tried three times with a pause between.
START_ATTEMPTS = 3
START_PAUSE_S = 5.0

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
# Ray Serve's controller, proxy and replicas log to their files under Ray's logs (`serve/`) only: on stderr,
# which a server's Ray forwards to its terminal, they said a line per request and per deployment step.
QUIET_SERVE_ENV = {"RAY_SERVE_LOG_TO_STDERR": "0"}


def init_ray(cfg: RayConfig, metrics_port: int | None = None, log_to_driver: bool = False,
             env: Mapping[str, str] | None = None) -> None:
    """Join `cfg.address` when set, else start a local Ray; no-op when Ray is already up.

    A local Ray listens on 127.0.0.1 only when `cfg.loopback_only` (the local profile);
    `metrics_port` fixes the port of its Prometheus endpoint (serving scrapes it) and must be free.
    Ray's workers log to its session directory, not to this terminal, unless `log_to_driver` (the
    server's log is where an actor's errors belong; Serve's own components log to files in any case); the
    directory is named once on stderr. (It stays
    Ray's own, under its temp dir: Ray's sockets live there too and must fit a 107-byte socket path,
    which a directory under the index cannot promise.) `env`: more variables for this process and Ray's
    workers (Serve's settings are read by its controller and replicas).
    """
    if not cfg.address and cfg.loopback_only:
        request_loopback()
    import ray

    if ray.is_initialized():
        return
    env_vars = {**OFFLINE_ENV, **QUIET_SERVE_ENV, **(env or {})}
    os.environ.update(env_vars)
    runtime_env: dict[str, Any] = {"env_vars": env_vars}
    # A terminal is for hygraph's own lines: Ray's warnings (token authentication, resource hints) go to Ray's
    # log files only.
    kwargs = dict(logging_level=logging.ERROR, configure_logging=True, log_to_driver=log_to_driver)
    if cfg.address:
        context = ray.init(address=cfg.address, runtime_env=runtime_env, **kwargs)
    else:
        host = "127.0.0.1" if cfg.loopback_only else "0.0.0.0"
        if metrics_port is not None:
            ensure_port_free(host, metrics_port, "serve.metrics_port")
            kwargs["_metrics_export_port"] = metrics_port
        if cfg.loopback_only:
            runtime_env["worker_process_setup_hook"] = SETUP_HOOK
        context = _start_local(ray, cfg, {**kwargs, "runtime_env": runtime_env})
        if cfg.loopback_only and not is_loopback(ray.util.get_node_ip_address()):
            ray.shutdown()
            raise HygraphError("ray.loopback_only: Ray was imported before hygraph could keep it on 127.0.0.1 "
                               f"(set {', '.join(f'{k}={v}' for k, v in LOOPBACK_ENV.items())} for this process, "
                               "or set ray.loopback_only: false)")
    session = context.address_info.get("session_dir")
    if session:
        print(f"{RAY_LOGS}{os.path.join(session, 'logs')}", file=sys.stderr, flush=True)
    import ray.data

    if not log_to_driver:
        _quiet_ray_data()
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # hygraph prints its own per-stage progress on stderr
    ctx.execution_options.preserve_order = True  # same corpus, same index
    ctx.print_on_execution_start = False


def _quiet_ray_data() -> None:
    """Ray Data's console lines (dataset started and finished, operator warnings) off the terminal; its
    file log (ray-data.log in Ray's logs) keeps them."""
    for handler in logging.getLogger("ray.data").handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"ray\.")  # tuning hints, every run


def ensure_port_free(host: str, port: int, setting: str, *, reuse_address: bool = True,
                     linger_wait_s: float = 0.0) -> None:
    """Fail at once, naming the setting, when a server listens on `port`: Ray's raylet would otherwise die
    later with an unrelated "GCS overloaded" timeout. `reuse_address`: the port is bound as the server will
    bind it. With SO_REUSEADDR (Serve's proxy, Ray) the connections a dead listener left in TIME_WAIT do not
    count as taken (a restarted `hygraph serve` binds the port its dead proxy had); a server binding without
    it cannot have the port until they time out, which is waited for up to `linger_wait_s` when nothing
    listens on the port."""
    deadline = time.monotonic() + linger_wait_s
    waiting = False
    while True:
        with socket.socket() as s:
            if reuse_address:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
                return
            except OSError as exc:
                error = exc.strerror
        if _listening(host, port) or time.monotonic() >= deadline:
            raise InputError(f"{setting}: port {port} on {host} is in use ({error}); choose another port")
        if not waiting:
            log.warning("%s: port %d on %s still has the connections of its last server closing; waiting up "
                        "to %.0f s for them to time out", setting, port, host, linger_wait_s)
            waiting = True
        time.sleep(0.5)


def probe_host(host: str) -> str:
    """Where this machine reaches a server bound to `host`: loopback for a wildcard address."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def _listening(host: str, port: int) -> bool:
    """Whether a server accepts connections on the port (a refused connection: nobody listens)."""
    try:
        socket.create_connection((probe_host(host), port), timeout=1.0).close()
    except ConnectionRefusedError:
        return False
    except OSError:
        return True  # unreachable or slow to answer: not known to be free
    return True


def _start_local(ray: Any, cfg: RayConfig, kwargs: dict[str, Any]) -> Any:
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return ray.init(num_cpus=cfg.num_cpus, include_dashboard=cfg.include_dashboard,
                            dashboard_host=cfg.dashboard_host, **kwargs)
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception when its node start times out
            ray.shutdown()
            if attempt == START_ATTEMPTS or "time" not in str(exc).lower():
                raise HygraphError(f"could not start a local Ray: {str(exc).splitlines()[0]}") from None
            log.warning("a local Ray did not start in time (try %d of %d); trying again", attempt, START_ATTEMPTS)
            time.sleep(START_PAUSE_S)
