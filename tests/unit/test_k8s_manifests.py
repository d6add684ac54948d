"""The Kubernetes deployment (k8s/, configs/k8s.yaml, configs/gpu.yaml) checked without a cluster.

- kustomize renders the base and the three overlays (`kustomize build`, or the kustomize built into
  `kubectl kustomize`; the tests that need it skip, saying so, when neither is on PATH);
- every core object, and every pod template inside the RayService, passes the Kubernetes JSON
  schema (kubernetes-validate, bundled schemas, strict: unknown fields are errors);
- the RayServices have the fields KubeRay's ray.io/v1 API defines, in the shape it needs (the
  KubeRay CRD schema itself is on no package registry, so it is not used here);
- serveConfigV2 is a valid Serve config (ServeDeploySchema), generated from the profiles, and
  its import paths resolve;
- the index Job's command parses with hygraph's CLI; the PodMonitor finds the metrics ports;
- the index is in a bucket, never on a shared volume: every Ray pod and the index Job get its s3:// uri,
  endpoint, region and credentials from one ConfigMap and one Secret, segments are cached on an emptyDir,
  MinIO (self-hosted overlays) and Milvus's storage use the same endpoint and bucket;
- every metric on the Grafana dashboard is one hygraph exports.

Nothing here touches the network.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from packaging.specifiers import SpecifierSet
from ray.serve.schema import ServeDeploySchema

from hygraph.config import HygraphConfig, load_config
from hygraph.errors import ConfigError
from hygraph.serve.app import APP_NAME, IMPORT_PATH, LLM_APP_NAME, LLM_ROUTE, serve_config
from hygraph.serve.http import api_keys
from hygraph.store.objects import is_remote, parse_s3

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
TARGETS = {"base": K8S / "base", "local": K8S / "overlays" / "local", "gpu": K8S / "overlays" / "gpu",
           "cloud": K8S / "overlays" / "cloud"}
PROFILE = {"base": "k8s.yaml", "local": "k8s.yaml", "gpu": "gpu.yaml", "cloud": "k8s.yaml"}
MINIO = ("local", "gpu")  # the self-hosted overlays: MinIO in the cluster
K8S_VERSION = "1.32"  # Kubernetes schema version the core objects are checked against
CONFIG_MOUNT, CACHE_MOUNT = "/etc/hygraph", "/cache"
SECRET, S3_SECRET, STORE_CONFIG = "hygraph-secrets", "hygraph-s3", "hygraph-store"
# the bucket's variables in every Ray pod and the index Job: (ConfigMap key or Secret key, optional)
STORE_ENV = {"AWS_ENDPOINT_URL": ("aws-endpoint-url", True), "AWS_DEFAULT_REGION": ("aws-default-region", False)}
S3_KEYS_ENV = {"AWS_ACCESS_KEY_ID": "access-key-id", "AWS_SECRET_ACCESS_KEY": "secret-access-key"}

# ray.io/v1 fields (KubeRay 1.7, ray-operator/apis/ray/v1): what the API server would prune.
RAYSERVICE_SPEC = {"rayClusterDeletionDelaySeconds", "serviceUnhealthySecondThreshold",
                   "deploymentUnhealthySecondThreshold", "serveService", "upgradeStrategy", "managedBy",
                   "serveConfigV2", "rayClusterConfig", "excludeHeadPodFromServeSvc", "suspend"}
RAYCLUSTER_SPEC = {"upgradeStrategy", "authOptions", "suspend", "managedBy", "autoscalerOptions",
                   "headServiceAnnotations", "enableInTreeAutoscaling", "gcsFaultToleranceOptions",
                   "historyServerOptions", "networkPolicy", "tlsOptions", "headGroupSpec", "rayVersion",
                   "workerGroupSpecs"}
HEAD_GROUP = {"template", "headService", "enableIngress", "resources", "labels", "rayStartParams",
              "serviceType"}
WORKER_GROUP = {"suspend", "groupName", "replicas", "minReplicas", "maxReplicas", "idleTimeoutSeconds",
                "priority", "resources", "labels", "rayStartParams", "template", "scaleStrategy",
                "numOfHosts"}
AUTOSCALER_OPTIONS = {"resources", "image", "imagePullPolicy", "securityContext", "idleTimeoutSeconds",
                      "upscalingMode", "version", "env", "envFrom", "volumeMounts"}
UPGRADE_TYPES = {"NewCluster", "NewClusterWithIncrementalUpgrade", "None"}


# ---------------------------------------------------------------------------------------- helpers

def _kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


@lru_cache(maxsize=None)
def rendered(target: str) -> tuple[dict[str, Any], ...]:
    cmd = _kustomize_command()
    if cmd is None:
        pytest.skip("neither `kustomize` nor `kubectl` (with its built-in kustomize v5) is on PATH, so the "
                    "manifests were not rendered; the python machine image has kubectl from apt")
    out = subprocess.run([*cmd, str(TARGETS[target])], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{' '.join(cmd)} {TARGETS[target]} failed:\n{out.stderr}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def one(target: str, kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in rendered(target) if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{target}: expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def store_config(target: str) -> dict[str, str]:
    """The hygraph-store ConfigMap's data (its name carries kustomize's hash)."""
    [cm] = [d for d in rendered(target) if d["kind"] == "ConfigMap"
            and d["metadata"]["name"].startswith(f"{STORE_CONFIG}-")]
    return cm["data"] | {"name": cm["metadata"]["name"]}


def resolve_env(target: str, env: list[dict[str, Any]]) -> dict[str, str | None]:
    """Container env as values: ConfigMap refs read from the hygraph-store ConfigMap (None for an optional
    key it lacks), Secret refs as `secret:<name>/<key>`."""
    store = store_config(target)
    out: dict[str, str | None] = {}
    for e in env:
        if "value" in e:
            out[e["name"]] = e["value"]
        elif "configMapKeyRef" in e["valueFrom"]:
            ref = e["valueFrom"]["configMapKeyRef"]
            assert ref["name"] == store["name"], e
            assert ref["key"] in store or ref.get("optional"), f"{target}: {ref['key']} is not in {STORE_CONFIG}"
            out[e["name"]] = store.get(ref["key"])
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            out[e["name"]] = f"secret:{ref['name']}/{ref['key']}"
    return out


def _corpus_zip(target: str) -> str:
    """The index Job's corpus zip (CORPUS_ZIP), the job's Ray working_dir."""
    pod = one(target, "CronJob", "hygraph-index")["spec"]["jobTemplate"]["spec"]["template"]
    [container] = pod["spec"]["containers"]
    return next(e["value"] for e in container["env"] if e["name"] == "CORPUS_ZIP")


def profile(target: str) -> HygraphConfig:
    return load_config(ROOT / "configs" / PROFILE[target], env={})


def ray_groups(rs: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    cluster = rs["spec"]["rayClusterConfig"]
    return [("head", cluster["headGroupSpec"])] + [(g["groupName"], g) for g in cluster["workerGroupSpecs"]]


def rayservices(target: str) -> list[dict[str, Any]]:
    return [d for d in rendered(target) if d["kind"] == "RayService"]


def serve_doc(target: str, name: str = "hygraph") -> dict[str, Any]:
    return yaml.safe_load(one(target, "RayService", name)["spec"]["serveConfigV2"])


@lru_cache(maxsize=None)
def generator_module() -> Any:
    spec = importlib.util.spec_from_file_location("k8s_serve_configs", K8S / "serve_configs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------------------------------- profiles

@pytest.mark.parametrize("name", ["k8s.yaml", "gpu.yaml"])
def test_cluster_profiles_load_and_require_api_keys(name):
    cfg = load_config(ROOT / "configs" / name, env={})
    assert cfg.profile not in ("local", "")
    assert cfg.ray.address == "auto" and is_remote(cfg.index_dir)
    parse_s3(cfg.index_dir)
    # the node-local side of the bucket is the pods' `cache` emptyDir
    assert Path(cfg.store.cache_dir).is_relative_to(CACHE_MOUNT) and cfg.store.cache_bytes > 0
    assert cfg.vector_store.backend == "milvus" and cfg.vector_store.uri == "http://milvus:19530"
    assert cfg.serve.host == "0.0.0.0" and cfg.serve.metrics_port == 8080
    assert cfg.serve.api_keys == [] and cfg.serve.api_keys_env == "HYGRAPH_API_KEYS"
    for dep in (cfg.serve.ingress, cfg.serve.embedder, cfg.serve.retriever, cfg.serve.generator):
        assert dep.autoscaling is not None and dep.autoscaling.min_replicas >= 1
        assert dep.autoscaling.max_replicas >= dep.autoscaling.min_replicas
    with pytest.raises(ConfigError, match="serve.api_keys"):
        api_keys(cfg.serve, cfg.profile, {})
    assert api_keys(cfg.serve, cfg.profile, {"HYGRAPH_API_KEYS": "k1,k2"}) == {"k1", "k2"}
    # the Secret's URI reaches the config through the documented override
    moved = load_config(ROOT / "configs" / name, env={"HYGRAPH__VECTOR_STORE__URI": "http://m.milvus:19530"})
    assert moved.vector_store.uri == "http://m.milvus:19530"


def test_gpu_profile_puts_models_and_work_on_gpus():
    cfg = load_config(ROOT / "configs" / "gpu.yaml", env={})
    assert cfg.embedder.model == "/models/bge-m3"
    assert cfg.embedder.num_gpus > 0 and cfg.serve.embedder.num_gpus > 0
    assert cfg.llm.backend == "vllm" and cfg.llm.vllm_model_source == "meta-llama/Llama-3.1-8B-Instruct"
    assert cfg.llm.base_url and cfg.llm.base_url.endswith(f"{LLM_ROUTE}/v1")
    assert cfg.leiden.backend == "cugraph"
    # `auto` becomes cuda in the processes Ray gives a GPU (see configs/gpu.yaml)
    assert {cfg.embedder.device, cfg.cleora.device, cfg.hierarchy.device, cfg.hyperbolic.device} <= {"auto", "cuda"}
    assert cfg.serve.retriever.num_gpus == 0  # retrievers stay on the CPU group


# ---------------------------------------------------------------------------------------- rendering

def test_generated_serve_configs_are_up_to_date():
    mod = generator_module()
    for target, path in mod.TARGETS.items():
        assert path.read_text() == mod.text(target), \
            f"{path.relative_to(ROOT)} is out of date: run `python k8s/serve_configs.py`"


@pytest.mark.parametrize("target", list(TARGETS))
def test_renders_the_expected_objects(target):
    objs = rendered(target)
    kinds = sorted(d["kind"] for d in objs)
    expected = ["ConfigMap", "ConfigMap", "ConfigMap", "CronJob", "Ingress", "Namespace", "PodMonitor",
                "RayService", "Service"]
    if target in MINIO:  # MinIO, its Service and the Job that makes the bucket
        expected += ["StatefulSet", "Service", "Job"]
    if target == "gpu":  # the models volume and vLLM's own RayService
        expected += ["PersistentVolumeClaim", "RayService"]
    if target == "cloud":  # the bucket role's ServiceAccount (IRSA)
        expected += ["ServiceAccount"]
    assert kinds == sorted(expected)
    for d in objs:
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == "hygraph"
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "hygraph"
        # the serve config's carrier ConfigMap is local to kustomize and never applied
        assert d["metadata"]["name"] != "hygraph-serve-config"


@pytest.mark.parametrize("target", list(TARGETS))
def test_core_objects_pass_the_kubernetes_schema(target):
    checked = 0
    for obj in rendered(target):
        if obj["apiVersion"] in ("ray.io/v1", "monitoring.coreos.com/v1"):
            continue
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        checked += 1
    assert checked >= 5
    # the RayServices' pod templates are core PodTemplateSpecs: check them as such
    for rs in rayservices(target):
        for group, spec in ray_groups(rs):
            wrapper = {"apiVersion": "v1", "kind": "PodTemplate",
                       "metadata": {"name": f"{rs['metadata']['name']}-{group}"}, "template": spec["template"]}
            kubernetes_validate.validate(wrapper, K8S_VERSION, strict=True)


def test_the_schema_check_catches_a_typo():
    rs = one("base", "RayService", "hygraph")
    bad = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"},
           "template": copy.deepcopy(rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"])}
    bad["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


# ---------------------------------------------------------------------------------------- RayService

def _dockerfile_ray_version() -> str:
    return re.search(r"^ARG RAY_VERSION=(\S+)$", (K8S / "image" / "Dockerfile").read_text(), re.M).group(1)


@pytest.mark.parametrize("target", list(TARGETS))
def test_rayservices_have_kuberay_v1_shape(target):
    for rs in rayservices(target):
        name = rs["metadata"]["name"]
        assert rs["apiVersion"] == "ray.io/v1"
        spec = rs["spec"]
        assert set(spec) <= RAYSERVICE_SPEC and {"serveConfigV2", "rayClusterConfig"} <= set(spec)
        assert isinstance(spec["serveConfigV2"], str)
        assert spec["upgradeStrategy"]["type"] in UPGRADE_TYPES
        cluster = spec["rayClusterConfig"]
        assert set(cluster) <= RAYCLUSTER_SPEC and "headGroupSpec" in cluster
        assert cluster["enableInTreeAutoscaling"] is True
        assert set(cluster["autoscalerOptions"]) <= AUTOSCALER_OPTIONS
        assert cluster["autoscalerOptions"]["upscalingMode"] in ("Default", "Conservative", "Aggressive")
        assert set(cluster["headGroupSpec"]) <= HEAD_GROUP
        names = [g["groupName"] for g in cluster["workerGroupSpecs"]]
        assert len(names) == len(set(names))
        for g in cluster["workerGroupSpecs"]:
            assert set(g) <= WORKER_GROUP and {"groupName", "rayStartParams", "template"} <= set(g)
            assert 0 <= g["minReplicas"] <= g.get("replicas", g["minReplicas"]) <= g["maxReplicas"]
        for group, g in ray_groups(rs):
            params = g["rayStartParams"]
            assert all(isinstance(v, str) for v in params.values()), f"{name} {group}: rayStartParams must be strings"
            assert params["metrics-export-port"] == "8080"
            [container] = g["template"]["spec"]["containers"]
            assert {"name": "metrics", "containerPort": 8080} in container["ports"]
        # every cluster runs the hygraph image's Ray (the hygraph-llm test checks the ray-llm tag)
        assert cluster["rayVersion"] == _dockerfile_ray_version(), name
    hygraph = one(target, "RayService", "hygraph")["spec"]["rayClusterConfig"]
    assert hygraph["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    # and the package accepts that Ray
    ray_spec = re.search(r'"ray\[[^\]]*\]([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert _dockerfile_ray_version() in SpecifierSet(ray_spec)


@pytest.mark.parametrize("target", list(TARGETS))
def test_worker_groups_per_overlay(target):
    rs = one(target, "RayService", "hygraph")
    groups = {g["groupName"]: g for g in rs["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    tag = "gpu" if target == "gpu" else "cpu"
    for _, g in ray_groups(rs):
        assert g["template"]["spec"]["containers"][0]["image"] == f"hygraph:{tag}"
    assert "nvidia.com/gpu" not in json.dumps(groups["cpu"])
    if target == "local":
        assert set(groups) == {"cpu"}  # no GPU group at all
        return
    gpu = groups["gpu"]
    assert gpu["minReplicas"] == 0
    res = gpu["template"]["spec"]["containers"][0]["resources"]
    assert int(res["limits"]["nvidia.com/gpu"]) >= 1
    assert any(t.get("key") == "nvidia.com/gpu" for t in gpu["template"]["spec"].get("tolerations", []))


@pytest.mark.parametrize("target", list(TARGETS))
def test_ray_pods_get_config_index_and_secrets(target):
    cfg = profile(target)
    store = store_config(target)
    rs = one(target, "RayService", "hygraph")
    cm = one(target, "ConfigMap", next(d["metadata"]["name"] for d in rendered(target)
                                       if d["metadata"]["name"].startswith("hygraph-config-")))
    for name in ("k8s.yaml", "gpu.yaml"):
        assert cm["data"][name] == (ROOT / "configs" / name).read_text()
    for group, g in ray_groups(rs):
        pod = g["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        [container] = pod["containers"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert volumes[mounts[CONFIG_MOUNT]["name"]]["configMap"]["name"] == cm["metadata"]["name"], group
        env = {e["name"]: e for e in container["env"]}
        values = resolve_env(target, container["env"])
        refs = {n: e["valueFrom"]["secretKeyRef"] for n, e in env.items() if "secretKeyRef" in e.get("valueFrom", {})}
        assert set(refs) == {"HYGRAPH__VECTOR_STORE__URI", cfg.vector_store.token_env, cfg.serve.api_keys_env,
                             cfg.serve.admin_keys_env, *S3_KEYS_ENV}
        assert all(r["name"] == SECRET for n, r in refs.items() if n not in S3_KEYS_ENV)
        # the bucket: uri, endpoint and region from the one ConfigMap, keys from the hygraph-s3 Secret
        # (optional: IRSA / workload identity), all read by the profile and boto3 as documented
        assert values["HYGRAPH__INDEX_DIR"] == store["index-uri"], group
        for var, (key, optional) in STORE_ENV.items():
            assert env[var]["valueFrom"]["configMapKeyRef"]["key"] == key
            assert env[var]["valueFrom"]["configMapKeyRef"].get("optional", False) is optional
        for var, key in S3_KEYS_ENV.items():
            assert refs[var] == {"name": S3_SECRET, "key": key, "optional": True}, group
        pod_cfg = load_config(ROOT / "configs" / PROFILE[target],
                              env={k: v for k, v in values.items() if k.startswith("HYGRAPH__STORE__")
                                   or k == "HYGRAPH__INDEX_DIR"})
        assert pod_cfg.index_dir == store["index-uri"] and is_remote(pod_cfg.index_dir)
        # the segment cache: an emptyDir at store.cache_dir, larger than store.cache_bytes (it also holds the
        # derived structures and build checkpoints; a pod whose emptyDir outgrows its sizeLimit is evicted)
        cache = volumes[mounts[CACHE_MOUNT]["name"]]
        assert set(cache) == {"name", "emptyDir"} and "medium" not in cache["emptyDir"], group
        assert Path(pod_cfg.store.cache_dir).is_relative_to(CACHE_MOUNT)
        limit = _quantity(cache["emptyDir"]["sizeLimit"])
        assert pod_cfg.store.cache_bytes * 1.2 <= limit <= pod_cfg.store.cache_bytes * 4, group
        assert not any("persistentVolumeClaim" in v and v["persistentVolumeClaim"]["claimName"] != "hygraph-models"
                       for v in volumes.values()), group
        assert env["HF_HUB_OFFLINE"]["value"] == "1"
        if target == "gpu":
            assert mounts["/models"]["readOnly"] and env["HF_HOME"]["value"].startswith("/models/")
            claim = volumes[mounts["/models"]["name"]]["persistentVolumeClaim"]["claimName"]
            one(target, "PersistentVolumeClaim", claim)
        if target == "cloud":
            assert pod["serviceAccountName"] == one(target, "ServiceAccount")["metadata"]["name"]


def _quantity(q: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    m = re.fullmatch(r"(\d+)([KMGT]i?)?", q)
    assert m, q
    return int(m.group(1)) * units.get(m.group(2) or "", 1)


@pytest.mark.parametrize("target", list(TARGETS))
def test_no_shared_index_volume(target):
    """The index is in the bucket: no hygraph-data claim, and no ReadWriteMany volume but the gpu overlay's
    read-only model weights."""
    objs = rendered(target)
    names = {d["metadata"]["name"] for d in objs}
    assert "hygraph-data" not in names and "hygraph-data" not in json.dumps(objs)
    for d in objs:
        claims = ([d["spec"]] if d["kind"] == "PersistentVolumeClaim" else
                  [c["spec"] for c in d["spec"].get("volumeClaimTemplates", [])] if d["kind"] == "StatefulSet" else [])
        for spec in claims:
            if "ReadWriteMany" in spec["accessModes"]:
                assert (target, d["metadata"]["name"]) == ("gpu", "hygraph-models"), d["metadata"]["name"]
    store = store_config(target)
    bucket, prefix = parse_s3(store["index-uri"])
    corpus_bucket, corpus_key = parse_s3(_corpus_zip(target))
    assert corpus_bucket == bucket and corpus_key.endswith(".zip")  # Ray's working_dir: a remote zip
    assert prefix and not corpus_key.startswith(f"{prefix}/")  # the corpus is not inside the index
    assert ("aws-endpoint-url" in store) is (target != "cloud")  # AWS S3 itself needs none
    if "aws-endpoint-url" in store:
        url = urlsplit(store["aws-endpoint-url"])
        assert url.scheme in ("http", "https") and url.hostname not in ("localhost", "127.0.0.1", "::1")


@pytest.mark.parametrize("target", MINIO)
def test_self_hosted_overlays_run_minio_for_the_bucket(target):
    store = store_config(target)
    endpoint = urlsplit(store["aws-endpoint-url"])
    svc = one(target, "Service", "minio")
    sts = one(target, "StatefulSet", "minio")
    ns = sts["metadata"]["namespace"]
    # the endpoint is the MinIO Service by its cluster DNS name, on the Service's api port
    assert endpoint.hostname in (svc["metadata"]["name"], f"{svc['metadata']['name']}.{ns}.svc",
                                 f"{svc['metadata']['name']}.{ns}.svc.cluster.local")
    api = next(p for p in svc["spec"]["ports"] if p["name"] == "api")
    assert endpoint.port == api["port"] and svc["spec"]["type"] == "ClusterIP"
    pod = sts["spec"]["template"]
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    [container] = pod["spec"]["containers"]
    assert {"name": api["targetPort"], "containerPort": api["port"]} in container["ports"]
    assert container["image"].split(":")[0].endswith("minio/minio")
    # its root credentials are the keys hygraph signs with
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert env == {"MINIO_ROOT_USER": {"name": S3_SECRET, "key": S3_KEYS_ENV["AWS_ACCESS_KEY_ID"]},
                   "MINIO_ROOT_PASSWORD": {"name": S3_SECRET, "key": S3_KEYS_ENV["AWS_SECRET_ACCESS_KEY"]}}
    # one ReadWriteOnce volume, mounted where the server keeps its data
    [claim] = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    data_dir = container["args"][container["args"].index("server") + 1]
    assert {"name": claim["metadata"]["name"], "mountPath": data_dir} in container["volumeMounts"]
    # the bucket Job makes the buckets the ConfigMap names, at the same endpoint with the same keys
    job = one(target, "Job", "minio-buckets")
    [jc] = job["spec"]["template"]["spec"]["containers"]
    values = resolve_env(target, jc["env"])
    assert values["AWS_ENDPOINT_URL"] == store["aws-endpoint-url"]
    assert values["AWS_DEFAULT_REGION"] == store["aws-default-region"]
    assert set(values["BUCKETS"].split()) == {parse_s3(store["index-uri"])[0], parse_s3(_corpus_zip(target))[0]}
    # MinIO's objects can be applied before the rest (`kubectl apply -l`): they need no ConfigMap of the base
    assert not any("configMapKeyRef" in e.get("valueFrom", {}) for e in jc["env"] + container["env"])
    for obj in (svc, sts, job):
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "object-storage"
    assert values["AWS_ACCESS_KEY_ID"] == f"secret:{S3_SECRET}/access-key-id"
    assert "create_bucket" in jc["args"][0] and "BucketAlreadyOwnedByYou" in jc["args"][0]
    compile(jc["args"][0], "minio-buckets", "exec")
    assert job["spec"]["ttlSecondsAfterFinished"] > 0  # re-applying after a change makes a new Job


def test_cloud_overlay_has_no_minio_and_an_irsa_service_account():
    kinds = {d["kind"] for d in rendered("cloud")}
    assert "StatefulSet" not in kinds and "Job" not in kinds
    sa = one("cloud", "ServiceAccount", "hygraph")
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    cj = one("cloud", "CronJob", "hygraph-index")
    assert cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert store_config("cloud")["index-uri"] != store_config("base")["index-uri"]


# ---------------------------------------------------------------------------------------- serveConfigV2

@pytest.mark.parametrize("target", list(TARGETS))
def test_serve_config_v2_is_a_serve_config_for_this_profile(target):
    doc = serve_doc(target)
    schema = ServeDeploySchema.model_validate(doc)
    apps = {a.name: a for a in schema.applications}
    assert APP_NAME in apps
    overrides = {"serve": generator_module().LOCAL_SERVE} if target == "local" else {}
    cfg = load_config(ROOT / "configs" / PROFILE[target], env={}, **overrides)
    want = serve_config(cfg, f"{CONFIG_MOUNT}/{PROFILE[target]}", cfg.index_dir)["applications"][0]
    del want["args"]["index_dir"]  # the pods' HYGRAPH__INDEX_DIR names the bucket (app_builder reads the profile)
    [got] = [a for a in doc["applications"] if a["name"] == APP_NAME]
    assert got == want
    assert doc["http_options"] == {"host": "0.0.0.0", "port": 8000}
    # the app's import path resolves to the builder, its arguments to what the pods mount
    module, attr = got["import_path"].split(":")
    assert got["import_path"] == IMPORT_PATH and callable(getattr(importlib.import_module(module), attr))
    assert got["args"]["config"] == f"{CONFIG_MOUNT}/{PROFILE[target]}"
    assert "index_dir" not in got["args"]
    replicas_cpus = sum(d["ray_actor_options"]["num_cpus"] * d["autoscaling_config"]["min_replicas"]
                        for d in got["deployments"])
    if target == "local":  # the minimum fits the local overlay's one 2-CPU worker
        assert replicas_cpus <= 2
    assert LLM_APP_NAME not in apps  # vLLM has its own RayService (gpu overlay)


def test_gpu_overlay_runs_vllm_in_its_own_rayservice_where_the_profile_points():
    """vLLM (ray[llm]) and cuGraph pin incompatible numba versions, so the gpu overlay serves the
    profile's model from a second RayService on Ray's ray-llm image, at the profile's base_url."""
    cfg = profile("gpu")
    rs = one("gpu", "RayService", "hygraph-llm")
    doc = serve_doc("gpu", "hygraph-llm")
    ServeDeploySchema.model_validate(doc)
    [app] = doc["applications"]
    assert app["name"] == LLM_APP_NAME and app["route_prefix"] == LLM_ROUTE
    # KubeRay names a RayService's Serve Service <name>-serve-svc
    url = urlsplit(cfg.llm.base_url)
    assert (url.hostname, url.port, url.path) == (f"{rs['metadata']['name']}-serve-svc",
                                                  doc["http_options"]["port"], f"{LLM_ROUTE}/v1")
    groups = dict(ray_groups(rs))
    for group, g in groups.items():
        pod = g["template"]["spec"]
        [container] = pod["containers"]
        image, tag = container["image"].rsplit(":", 1)
        assert image == "rayproject/ray-llm"
        assert tag.startswith(f"{rs['spec']['rayClusterConfig']['rayVersion']}-py311-")
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HOME"] == "/models/hf"
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert mounts["/models"]["readOnly"]
        one("gpu", "PersistentVolumeClaim", volumes[mounts["/models"]["name"]]["persistentVolumeClaim"]["claimName"])
    gpu = groups["gpu"]
    assert int(gpu["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    [llm] = app["args"]["llm_configs"]
    assert gpu["maxReplicas"] >= llm["deployment_config"]["autoscaling_config"]["max_replicas"]
    # the index Job's dashboard Service must select hygraph's head, not this cluster's
    svc = one("gpu", "Service", "hygraph-ray-dashboard")
    assert not svc["spec"]["selector"].items() <= groups["head"]["template"]["metadata"]["labels"].items()
    module, attr = app["import_path"].split(":")
    try:
        builder = getattr(importlib.import_module(module), attr)
    except ImportError as exc:  # ray.serve.llm needs vLLM, which only the `llm` extra installs
        assert "vLLM" in str(exc)
        spec = importlib.util.find_spec(module)
        assert spec is not None and f"def {attr}(" in Path(spec.origin).read_text()
        llm_config = None
    else:
        assert callable(builder)
        from ray.serve.llm import LLMConfig as llm_config
    assert llm["model_loading_config"] == {"model_id": cfg.llm.model, "model_source": cfg.llm.vllm_model_source}
    assert llm["engine_kwargs"]["tensor_parallel_size"] == cfg.llm.vllm_tensor_parallel_size
    if llm_config is not None:
        llm_config.model_validate(llm)


# ---------------------------------------------------------------------------------------- index Job

def _job_command(target: str) -> tuple[dict[str, str], list[str]]:
    cj = one(target, "CronJob", "hygraph-index")
    assert cj["spec"]["suspend"] is True  # only ever run as `kubectl create job --from=cronjob/...`
    [container] = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    env = {k: v for k, v in resolve_env(target, container["env"]).items() if v is not None}
    script = container["args"][0]
    submit = script[script.index("exec ray job submit"):]
    words = shlex.split(re.sub(r"\\\n", " ", submit), posix=True)
    words = [re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), m.group(0)), w) for w in words]
    return env, words


@pytest.mark.parametrize("target", list(TARGETS))
def test_index_job_submits_hygraph_index_to_the_cluster(target):
    from hygraph.cli import _parser

    env, words = _job_command(target)
    # the dashboard Service selects the head pod's dashboard port (KubeRay's head-svc only
    # exists once the Serve apps run, which needs an index first)
    svc = one(target, "Service", "hygraph-ray-dashboard")
    assert env["RAY_DASHBOARD"] == f"http://{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}"
    head = one(target, "RayService", "hygraph")["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]
    assert svc["spec"]["selector"].items() <= head["metadata"]["labels"].items()
    port = {"name": svc["spec"]["ports"][0]["targetPort"], "containerPort": 8265}
    assert port in head["spec"]["containers"][0]["ports"]
    workers = one(target, "RayService", "hygraph")["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert all(not svc["spec"]["selector"].items() <= g["template"]["metadata"]["labels"].items() for g in workers)
    assert env["HYGRAPH_CONFIG"] == f"{CONFIG_MOUNT}/{PROFILE[target]}"
    # the index and the corpus from the bucket the hygraph-store ConfigMap names, like the Ray pods'
    store = store_config(target)
    assert env["INDEX_DIR"] == store["index-uri"] and "corpus-uri" not in store  # a new corpus rolls no cluster
    assert env.get("AWS_ENDPOINT_URL") == store.get("aws-endpoint-url")
    assert env["AWS_DEFAULT_REGION"] == store["aws-default-region"]
    for var, key in S3_KEYS_ENV.items():
        assert env[var] == f"secret:{S3_SECRET}/{key}"
    # the corpus zip is the job's working_dir (fetched on every node that runs a task of the job), and
    # the corpus path is relative to it
    assert words[words.index("--working-dir") + 1] == env["CORPUS_ZIP"] == _corpus_zip(target)
    assert not env["CORPUS"].startswith("/") and ".." not in env["CORPUS"]
    # it fails before submitting when the zip is missing; the script is valid bash, its check valid Python
    job_pod = one(target, "CronJob", "hygraph-index")["spec"]["jobTemplate"]["spec"]["template"]
    [container] = job_pod["spec"]["containers"]
    script = container["args"][0]
    assert subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode == 0
    check = re.search(r"<<'PY'\n(.*?)\nPY\n", script, re.S).group(1)
    assert "head_object" in check and "CORPUS_ZIP" in check
    compile(check, "index-job check", "exec")
    assert words[:3] == ["exec", "ray", "job"] and "--entrypoint-num-gpus" in words
    # The driver reserves no GPU: the build's assembler actor asks for its own (indexing.assembler_num_gpus).
    assert words[words.index("--entrypoint-num-gpus") + 1] == "0"
    runtime_env = json.loads(words[words.index("--runtime-env-json") + 1])
    entry = words[words.index("--") + 1:]
    assert entry[0] == "hygraph"
    args = _parser().parse_args(entry[1:])
    assert args.command == "index" and args.config == env["HYGRAPH_CONFIG"]
    assert args.index_dir == store["index-uri"] and args.corpus == env["CORPUS"]
    # the build-only overrides are valid keys of the profile
    load_config(ROOT / "configs" / PROFILE[target], env=runtime_env.get("env_vars", {}))


@pytest.mark.parametrize("target", list(TARGETS))
def test_ingress_reaches_the_serve_proxy_behind_a_header_read_timeout(target):
    """Serve's proxy (uvicorn) never times out a request's headers: the ingress-nginx controller does,
    within the service's own body timeout, and passes what the service would accept."""
    cfg = profile(target)
    ing = one(target, "Ingress", "hygraph")
    backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    rs = one(target, "RayService", "hygraph")["metadata"]["name"]
    assert backend == {"name": f"{rs}-serve-svc", "port": {"number": cfg.serve.port}}  # KubeRay's serve Service
    notes = ing["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-body-size"] == f"{cfg.serve.max_body_bytes // 2**20}m"
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    controller = yaml.safe_load((K8S / "ingress-nginx" / "values.yaml").read_text())["controller"]["config"]
    assert 0 < int(controller["client-header-timeout"]) <= cfg.serve.body_timeout_s
    assert 0 < int(controller["client-body-timeout"]) <= cfg.serve.body_timeout_s
    count, size = controller["large-client-header-buffers"].split()
    assert int(size.removesuffix("k")) * 1024 == cfg.serve.max_header_bytes and int(count) >= 1


# ---------------------------------------------------------------------------------------- monitoring

@pytest.mark.parametrize("target", list(TARGETS))
def test_podmonitor_scrapes_every_ray_pod(target):
    pm = one(target, "PodMonitor", "hygraph-ray")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    selector = pm["spec"]["selector"]["matchLabels"]
    [endpoint] = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    for rs in rayservices(target):
        for group, g in ray_groups(rs):
            labels = g["template"]["metadata"]["labels"]
            assert selector.items() <= labels.items(), (rs["metadata"]["name"], group)
            assert any(p["name"] == endpoint["port"] for p in g["template"]["spec"]["containers"][0]["ports"])


def _exported_metrics() -> tuple[set[str], set[str]]:
    """(all names, histogram names) that the serving and updater metrics create."""
    src = "\n".join((ROOT / "hygraph" / path).read_text() for path in ("serve/metrics.py", "updater/actor.py"))
    names = set(re.findall(r'\.(?:Histogram|Counter|Gauge)\(\s*"(hygraph_\w+)"', src))
    hist = set(re.findall(r'\.Histogram\(\s*"(hygraph_\w+)"', src))
    assert {"hygraph_query_latency_ms", "hygraph_requests_total", "hygraph_ingest_lag_seconds"} <= names
    return names, hist


def test_grafana_dashboard_uses_only_exported_metrics():
    path = K8S / "monitoring" / "grafana-dashboard.json"
    dash = json.loads(path.read_text())
    names, hist = _exported_metrics()
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    used: set[str] = set()
    exprs = []
    for p in panels:
        assert p["targets"], p["title"]
        for t in p["targets"]:
            exprs.append(t["expr"])
            for full in re.findall(r"\bray_(hygraph_\w+)", t["expr"]):
                base = re.sub(r"_(bucket|sum|count)$", "", full)
                if base != full:
                    assert base in hist, f"{p['title']}: {full} but {base} is not a histogram"
                assert base in names, f"{p['title']}: {full} is not exported by hygraph/serve/metrics.py"
                used.add(base)
    assert used >= {"hygraph_query_latency_ms", "hygraph_requests_total", "hygraph_errors_total",
                    "hygraph_ingest_lag_seconds", "hygraph_index_version", "hygraph_updater_steps_total",
                    "hygraph_llm_calls_total", "hygraph_llm_tokens_total", "hygraph_embed_batch_size",
                    "hygraph_online_step_seconds"}
    text = "\n".join(exprs)
    for q in ("0.5", "0.95", "0.99"):
        for by in ("mode", "stage"):
            assert f"histogram_quantile({q}, sum by (le, {by}) (rate(ray_hygraph_query_latency_ms_bucket" in text
    assert "sum by (status" in text and "sum by (kind) (rate(ray_hygraph_updater_steps_total" in text
    assert "sum by (role) (rate(ray_hygraph_llm_calls_total" in text
    assert "sum by (role, direction) (rate(ray_hygraph_llm_tokens_total" in text
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("target", list(TARGETS))
def test_grafana_dashboard_ships_as_a_configmap(target):
    [cm] = [d for d in rendered(target) if d["metadata"]["name"].startswith("hygraph-grafana-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads((K8S / "monitoring" / "grafana-dashboard.json").read_text())
    assert json.loads(cm["data"]["hygraph.json"]) == dashboard


# ---------------------------------------------------------------------------------------- Milvus, image

def test_milvus_values_match_the_profiles_uri():
    standalone = yaml.safe_load((K8S / "milvus" / "values-standalone.yaml").read_text())
    cluster = yaml.safe_load((K8S / "milvus" / "values-cluster.yaml").read_text())
    assert standalone["cluster"]["enabled"] is False and cluster["cluster"]["enabled"] is True
    for name in ("k8s.yaml", "gpu.yaml"):
        uri = load_config(ROOT / "configs" / name, env={}).vector_store.uri
        for values in (standalone, cluster):
            service = values["fullnameOverride"]
            port = values.get("service", {}).get("port", 19530)
            assert uri == f"http://{service}:{port}"
            assert "authorizationEnabled: true" in values["extraConfigFiles"]["user.yaml"]


def _milvus_values(*names: str) -> dict[str, Any]:
    """The chart values of `helm -f a -f b`: later files win, maps merged key by key."""
    def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        out = dict(a)
        for k, v in b.items():
            out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        return out
    values: dict[str, Any] = {}
    for name in names:
        values = merge(values, yaml.safe_load((K8S / "milvus" / name).read_text()))
    return values


@pytest.mark.parametrize("target", ["local", "gpu", "cloud"])
def test_milvus_keeps_its_storage_in_hygraphs_bucket(target):
    """Milvus's segments and binlogs go to the bucket hygraph's index is in (its own prefix), at the same
    endpoint: the in-cluster MinIO for the self-hosted overlays, the cloud bucket with values-cloud.yaml."""
    store = store_config(target)
    bucket, prefix = parse_s3(store["index-uri"])
    corpus_prefix = parse_s3(_corpus_zip(target))[1].split("/")[0]
    for base in ("values-standalone.yaml", "values-cluster.yaml"):
        values = _milvus_values(base, *(["values-cloud.yaml"] if target == "cloud" else []))
        assert values["minio"] == {"enabled": False}  # no second MinIO from the chart
        s3 = values["externalS3"]
        assert s3["enabled"] is True and s3["bucketName"] == bucket
        assert s3["rootPath"] not in (prefix.split("/")[0], corpus_prefix)
        assert s3["region"] == store["aws-default-region"]
        assert "accessKey" not in s3 and "secretKey" not in s3  # keys come from the Secret at install
        if target == "cloud":
            assert "aws-endpoint-url" not in store
            assert s3["useIAM"] is True and s3["useSSL"] is True and int(s3["port"]) == 443
            assert s3["host"] == f"s3.{store['aws-default-region']}.amazonaws.com"
        else:
            endpoint = urlsplit(store["aws-endpoint-url"])
            assert (s3["host"], int(s3["port"])) == (endpoint.hostname, endpoint.port)
            assert s3["useSSL"] is (endpoint.scheme == "https") and s3["useIAM"] is False


def test_image_builds_cpu_and_gpu_variants_offline_at_run_time():
    text = (K8S / "image" / "Dockerfile").read_text()
    assert re.search(r"^FROM rayproject/ray:\$\{RAY_VERSION\}-py311-\$\{BASE_SUFFIX\}$", text, re.M)
    assert re.search(r"^ARG VARIANT=cpu$", text, re.M) and re.search(r"^ARG BASE_SUFFIX=\$\{VARIANT\}$", text, re.M)
    assert "HF_HUB_OFFLINE=1" in text
    torch_pin = re.search(r'"torch==([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert f"ARG TORCH_VERSION={torch_pin}" in text and "download.pytorch.org/whl/cpu" in text
    assert '".[gpu]"' in text and "pip install ." in text
    # the GPU variant must end with faiss-gpu alone, since faiss-cpu writes the same module
    assert "pip uninstall -y faiss-cpu faiss-gpu-cu12" in text and "StandardGpuResources" in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "runs", ".git"} <= set(ignored)
    for copied in re.findall(r"^COPY --chown=\S+ (.+) \S+$", text, re.M):
        for src in copied.split():
            assert (ROOT / src).exists() and src not in ignored, src


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
