"""The Serve config YAML in configs/ is what `hygraph serve-config` generates and what Serve accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from hygraph.config import load_config
from hygraph.errors import ConfigError
from hygraph.serve.app import serve_config
from hygraph.serve.http import api_keys

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_serve_yaml_is_generated_from_the_local_profile():
    cfg = load_config(ROOT / "configs" / "local.yaml", env={})
    on_disk = yaml.safe_load((ROOT / "configs" / "serve.yaml").read_text())
    assert on_disk == serve_config(cfg, "configs/local.yaml", "runs/demo")


def test_generated_config_passes_serves_schema():
    cfg = load_config(ROOT / "configs" / "local.yaml", env={}, serve={
        "retriever": {"autoscaling": {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 8}}})
    doc = serve_config(cfg, "configs/local.yaml", "/data/index")
    schema = ServeDeploySchema.model_validate(doc)
    [app] = schema.applications
    deps = {d.name: d for d in app.deployments}
    # The local profile embeds and answers (extractively) inside the Retriever: two deployments.
    assert set(deps) == {"Ingress", "Retriever"}
    assert deps["Retriever"].autoscaling_config["max_replicas"] == 4
    assert "num_replicas" not in doc["applications"][0]["deployments"][1]


def test_embedder_and_generator_deployments_exist_where_their_steps_run():
    gpu = load_config(ROOT / "configs" / "gpu.yaml", env={"HYGRAPH_API_KEYS": "k"})
    names = [d["name"] for d in serve_config(gpu, "configs/gpu.yaml", "/data/index")["applications"][0]["deployments"]]
    assert names == ["Ingress", "Retriever", "Embedder", "Generator"]


def test_schema_rejects_a_broken_config():
    doc = serve_config(load_config(ROOT / "configs" / "local.yaml", env={}), None, "x")
    doc["applications"][0]["deployments"][0]["max_ongoing_requests"] = "many"
    with pytest.raises(ValueError):
        ServeDeploySchema.model_validate(doc)


def test_api_keys_come_from_config_and_env_and_are_required_outside_local():
    cfg = load_config(ROOT / "configs" / "local.yaml", env={}, serve={"api_keys": ["a"]})
    assert api_keys(cfg.serve, "local", {"HYGRAPH_API_KEYS": "b, c ,"}) == {"a", "b", "c"}
    bare = load_config(ROOT / "configs" / "local.yaml", env={})
    assert api_keys(bare.serve, "local", {}) == frozenset()
    with pytest.raises(ConfigError, match="serve.api_keys"):
        api_keys(bare.serve, "k8s", {})


def test_vllm_generation_is_only_deployed_when_configured():
    from hygraph.serve.app import llm_app

    assert llm_app(load_config(ROOT / "configs" / "local.yaml", env={})) is None
    cfg = load_config(ROOT / "configs" / "local.yaml", env={}, llm={
        "backend": "vllm", "model": "llama-3.1-8b", "base_url": "http://127.0.0.1:8000/llm/v1",
        "vllm_model_source": "/models/Llama-3.1-8B-Instruct"})
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="`llm` extra"):
            llm_app(cfg)
    else:
        assert llm_app(cfg) is not None


def test_direct_ingress_gives_the_ingress_replica_the_serve_port_and_serves_proxy_another():
    from hygraph.serve.runner import http_ingress

    def local(**serve: object) -> object:
        return load_config(ROOT / "configs" / "local.yaml", env={}, serve=serve)

    # The default: direct where it can be (one Ingress replica, a Ray of the service's own).
    direct = {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "1", "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": "8123",
              "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": "8124", "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2.0"}
    proxy_port, env = http_ingress(local(throughput_optimized=False), "127.0.0.1", 8123, joined=False)
    assert proxy_port != 8123 and env == direct
    assert http_ingress(local(), "127.0.0.1", 8123, joined=True) == (8123, {})  # Serve's proxy on the port
    assert http_ingress(local(direct_ingress=False), "127.0.0.1", 8123, joined=False) == (8123, {})
    for serve in ({"ingress": {"num_replicas": 2}}, {"ingress": {"autoscaling": {"max_replicas": 3}}}):
        assert http_ingress(local(**serve), "127.0.0.1", 8123, joined=False) == (8123, {})
        assert http_ingress(local(throughput_optimized=True, **serve), "127.0.0.1", 8123, joined=False) == (
            8123, {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0"})
        with pytest.raises(ConfigError, match="serve.direct_ingress"):
            http_ingress(local(direct_ingress=True, **serve), "127.0.0.1", 8123, joined=False)
    with pytest.raises(ConfigError, match="joined Ray cluster"):
        http_ingress(local(direct_ingress=True), "127.0.0.1", 8123, joined=True)
    with pytest.raises(ConfigError, match="serve.throughput_optimized: a joined Ray cluster"):
        http_ingress(local(throughput_optimized=True), "127.0.0.1", 8123, joined=True)


def test_throughput_optimized_serve_comes_with_direct_ingress_unless_set():
    """Ray's bundle (gRPC handles, user code on the event loop) joins direct ingress by default; either may be
    had without the other, and the bundle never decides direct ingress by itself."""
    from hygraph.serve.runner import http_ingress

    def local(**serve: object) -> object:
        return load_config(ROOT / "configs" / "local.yaml", env={}, serve=serve)

    proxy_port, env = http_ingress(local(), "127.0.0.1", 8123, joined=False)
    assert proxy_port != 8123
    assert env["RAY_SERVE_THROUGHPUT_OPTIMIZED"] == "1" and env["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "1"
    assert env["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"] == "8123"
    assert "RAY_SERVE_THROUGHPUT_OPTIMIZED" not in http_ingress(local(direct_ingress=False), "127.0.0.1", 8123,
                                                                joined=False)[1]
    assert http_ingress(local(direct_ingress=False, throughput_optimized=True), "127.0.0.1", 8123, joined=False) == (
        8123, {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0"})
    assert http_ingress(local(), "127.0.0.1", 8123, joined=True) == (8123, {})
    vllm = {"backend": "vllm", "vllm_model_source": "/models/x"}
    assert http_ingress(load_config(ROOT / "configs" / "local.yaml", env={}, llm=vllm), "127.0.0.1", 8123,
                        joined=False) == (8123, {})
    with pytest.raises(ConfigError, match="vLLM"):
        http_ingress(load_config(ROOT / "configs" / "local.yaml", env={}, serve={"direct_ingress": True}, llm=vllm),
                     "127.0.0.1", 8123, joined=False)
