"""Starting or joining Ray with the project's defaults (loopback dashboard, offline model loading)."""

from __future__ import annotations

import logging
import os
from typing import Any

from hygraph.config import RayConfig
from hygraph.errors import HygraphError

# A local Ray start waits for its GCS; on a saturated machine that wait can time out once.
START_ATTEMPTS = 2

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def init_ray(cfg: RayConfig, metrics_port: int | None = None) -> None:
    """Join `cfg.address` when set, else start a local Ray; no-op when Ray is already up.

    `metrics_port` fixes the port of a local Ray's Prometheus endpoint (serving scrapes it).
    """
    import ray

    if ray.is_initialized():
        return
    os.environ.update(OFFLINE_ENV)
    kwargs = dict(runtime_env={"env_vars": OFFLINE_ENV}, logging_level=logging.WARNING,
                  configure_logging=True, log_to_driver=True)
    if cfg.address:
        ray.init(address=cfg.address, **kwargs)
    else:
        if metrics_port is not None:
            kwargs["_metrics_export_port"] = metrics_port
        _start_local(ray, cfg, kwargs)
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # hygraph prints its own per-stage progress on stderr
    ctx.execution_options.preserve_order = True  # same corpus, same index
    ctx.print_on_execution_start = False


def _start_local(ray: Any, cfg: RayConfig, kwargs: dict[str, Any]) -> None:
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            ray.init(num_cpus=cfg.num_cpus, include_dashboard=cfg.include_dashboard,
                     dashboard_host=cfg.dashboard_host, **kwargs)
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception when its node start times out
            ray.shutdown()
            if attempt == START_ATTEMPTS or "time" not in str(exc).lower():
                raise HygraphError(f"could not start a local Ray: {str(exc).splitlines()[0]}") from None
