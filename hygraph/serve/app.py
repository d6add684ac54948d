"""Composing the application: Ingress -> (Embedder, Retriever, Generator), options from the config.

`build_app` is what `hygraph serve` runs; `app_builder` is the import path a Serve config
YAML names (`serve run` / `serve deploy`, KubeRay's serveConfigV2); `serve_config` writes
that YAML from a hygraph config so the two never drift (a test checks it against Serve's
schema).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.serve import Application

from hygraph.runtime import OFFLINE_ENV
from hygraph.config import DeploymentConfig, HygraphConfig, load_config
from hygraph.errors import ConfigError
from hygraph.serve.deployments import Embedder, Generator, Retriever, answers_here
from hygraph.serve.http import api_keys
from hygraph.serve.ingress import Ingress
from hygraph.store.objects import index_uri

APP_NAME = "hygraph"
LLM_APP_NAME, LLM_ROUTE = "llm", "/llm"
IMPORT_PATH = "hygraph.serve.app:app_builder"


def deployment_options(d: DeploymentConfig) -> dict[str, Any]:
    """Serve deployment options: replicas (fixed or autoscaled), concurrency, actor resources."""
    opts: dict[str, Any] = {"max_ongoing_requests": d.max_ongoing_requests,
                            "max_queued_requests": d.max_queued_requests,
                            "ray_actor_options": {"num_cpus": d.num_cpus, "num_gpus": d.num_gpus}}
    if d.autoscaling is not None:
        opts["autoscaling_config"] = d.autoscaling.model_dump()
    else:
        opts["num_replicas"] = d.num_replicas
    return opts


def _sections(cfg: HygraphConfig) -> dict[str, DeploymentConfig]:
    """The deployments this config runs: an Embedder and a Generator only where a step is placed there."""
    s = cfg.serve
    out = {"Ingress": s.ingress, "Retriever": s.retriever}
    if s.embedding == "deployment":
        out["Embedder"] = s.embedder
    if not answers_here(cfg):
        out["Generator"] = s.generator
    return out


def build_app(cfg: HygraphConfig, index_dir: str | Path) -> Application:
    api_keys(cfg.serve, cfg.profile)  # fail before deploying when keys are required and missing
    tree = cfg.model_dump(mode="json")
    index_dir = index_uri(index_dir)
    opts = {name: deployment_options(d) for name, d in _sections(cfg).items()}
    embedder = Embedder.options(**opts["Embedder"]).bind(tree) if "Embedder" in opts else None
    generator = Generator.options(**opts["Generator"]).bind(tree, index_dir) if "Generator" in opts else None
    retriever = Retriever.options(**opts["Retriever"]).bind(tree, index_dir)
    return Ingress.options(**opts["Ingress"]).bind(retriever, embedder, generator, tree, index_dir)


def llm_app(cfg: HygraphConfig) -> Application | None:
    """vLLM behind ray.serve.llm's OpenAI-compatible app (route `/llm`), when `llm.backend` is
    vllm with a `vllm_model_source`; the answer role reaches it at `llm.base_url`
    (http://<host>:<port>/llm/v1), so streaming passes through unchanged."""
    if cfg.llm.backend != "vllm" or not cfg.llm.vllm_model_source:
        return None
    try:
        from ray.serve.llm import LLMConfig, build_openai_app
    except ImportError:
        raise ConfigError("llm.backend: vllm needs vLLM (install the package's `llm` extra)") from None
    return build_openai_app({"llm_configs": [LLMConfig(
        model_loading_config={"model_id": cfg.llm.model, "model_source": cfg.llm.vllm_model_source},
        engine_kwargs={"tensor_parallel_size": cfg.llm.vllm_tensor_parallel_size})]})


def app_builder(args: dict[str, Any]) -> Application:
    """Serve's application builder: `args` = {"config": YAML path or null, "index_dir": path}."""
    from hygraph.updater import indexes
    from hygraph.updater.actor import start_updater
    from hygraph.store.registry import IndexRegistry

    cfg = load_config(args.get("config"))
    index_dir = args.get("index_dir") or cfg.index_dir
    start_updater(cfg, index_dir)  # detached: it outlives this build task, one per index
    registry = IndexRegistry(index_dir, cfg.store.cache_dir)
    indexes.resume_removals(cfg.for_named_index(registry.root), registry)
    indexes.start_named_updaters(cfg.for_named_index(registry.root), registry)
    return build_app(cfg, index_dir)


def serve_config(cfg: HygraphConfig, config_path: str | None, index_dir: str) -> dict[str, Any]:
    """A Serve config (ServeDeploySchema) that deploys this application with `cfg`'s options."""
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": cfg.serve.host, "port": cfg.serve.port},
        "applications": [{
            "name": APP_NAME, "route_prefix": "/", "import_path": IMPORT_PATH,
            "args": {"config": config_path, "index_dir": index_dir},
            "runtime_env": {"env_vars": dict(OFFLINE_ENV)},
            "deployments": [{"name": name, **deployment_options(d)} for name, d in _sections(cfg).items()],
        }],
    }
