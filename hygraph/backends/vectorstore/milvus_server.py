"""The embedded Milvus standalone server (`vector_store.uri: embedded`, the default) as a managed child.

The `milvus` PyPI package (2.3.5) ships the Milvus standalone binary; its own launcher
(`milvus-server`) starts it on nine fixed ports plus etcd on 127.0.0.1:2379/2380, scans for a free
metrics port from 9091 (so two instances can pick the same one), unpacks 250 MB of binaries into
every data directory, and leaves the binary running when the launcher itself is killed. hygraph
therefore runs the binary directly, under `managed.py`'s lifecycle:

- binaries unpacked once per machine into a cache directory, shared by every index;
- every port chosen free at start: proxy, proxy internal, root/query/data coord, query/index/data
  node, the (unused) index coord address, etcd client and peer, and the metrics/health port;
- etcd (embedded) on 127.0.0.1. Milvus 2.3.5's gRPC servers and its metrics/health HTTP server
  listen on every interface whatever the configuration says (`<component>.ip` only sets the
  advertised address), so authorization is on: `root` gets a generated password and etcd's root
  path (which is also the key of the metrics port's `/expr` endpoint) is generated too; both are
  in `<index>/milvus/standalone/secret.json` (0600) and never logged. The adapter uses them;
- a restart after a crash revokes the dead server's etcd sessions, which would otherwise hold the
  new one back until their 30 s leases expire (about a minute of startup);
- the server's own environment is reduced to the few variables it needs, because Milvus reads any
  variable named like a config key (`ETCD_ENDPOINTS`, `PROXY_PORT`, ...) as an override.
"""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.util
import json
import lzma
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from hygraph.backends.vectorstore.managed import ManagedServer, free_ports, listening, locked
from hygraph.errors import StoreError, StoreUnavailable

import hygraph.backends.vectorstore.milvus  # noqa: E402,F401  (imports pymilvus and quiets its logger)

HOST = "127.0.0.1"
DEFAULT_ROOT_PASSWORD = "Milvus"  # what a fresh 2.3.5 server accepts for `root` until it is changed

# The template's port placeholders (config.yaml.template of the `milvus` package), one per listener.
TEMPLATE_PORTS = ("proxy_port", "proxy_internal_port", "root_coord_port", "query_coord_port",
                  "query_node_port", "index_node_port", "data_coord_port", "data_node_port",
                  "index_coord_port", "etcd_port")
EXTRA_PORTS = ("etcd_peer_port", "metrics_port")
COMPONENTS = ("rootCoord", "proxy", "queryCoord", "queryNode", "indexNode", "dataCoord", "dataNode")
# The environment the server keeps; everything else could be read as a config override.
KEEP_ENV = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR")


def package_dir() -> Path:
    spec = importlib.util.find_spec("milvus")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("vector_store.uri embedded needs the `milvus` package (the embedded Milvus server): "
                         "pip install 'milvus>=2.3.5,<2.4', or set vector_store.uri to lite or a Milvus URI")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def package_version() -> str:
    try:
        return importlib.metadata.version("milvus")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def cache_root(configured: str = "") -> Path:
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hygraph"


def binaries(root: Path) -> Path:
    """The unpacked Milvus binary and its libraries, once per package version (about 4 s, 250 MB)."""
    src = package_dir() / "bin"
    packed = sorted(src.glob("*.lzma"))
    if not packed:
        raise StoreError(f"the `milvus` package at {src.parent.parent} ships no server binary")
    stamp = f"{package_version()}-{sum(p.stat().st_size for p in packed):x}"
    home = root / f"milvus-{stamp}"
    dest = home / "bin"
    if (dest / ".complete").is_file():
        return dest
    with locked(home / ".lock"):
        if (dest / ".complete").is_file():
            return dest
        tmp = Path(tempfile.mkdtemp(prefix="bin.", dir=home))
        try:
            for p in packed:
                out = tmp / p.name[: -len(".lzma")]
                with lzma.open(p) as fin, out.open("wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
                out.chmod(0o755)
            (tmp / ".complete").write_text(stamp)
            tmp.chmod(0o755)
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def render_config(template: str, values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The package's config template with its `{{ name(type): default }}` placeholders filled from
    `values` (or their defaults), then dotted `overrides` set (keys created where missing)."""

    def fill(m: re.Match[str]) -> str:
        text = m.group(1).strip()
        name = text.split(":", 1)[0].split("(", 1)[0].strip()
        if name in values:
            v = values[name]
            return ("true" if v else "false") if isinstance(v, bool) else str(v)
        return text.split(":", 1)[1].strip() if ":" in text else ""

    cfg = yaml.safe_load(re.sub(r"\{\{(.*?)\}\}", fill, template))
    for dotted, value in overrides.items():
        node = cfg
        *parents, leaf = dotted.split(".")
        for key in parents:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[leaf] = value
    return cfg


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _http_json(url: str, body: dict[str, Any] | None = None, timeout: float = 2.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    return json.loads(raw) if body is not None else raw.decode("utf-8", "replace")


class StandaloneServer(ManagedServer):
    """Milvus 2.3.5 standalone for one index: `<data_dir>/standalone/` holds its config, data,
    secret and glog files; `<data_dir>/server.log` its output."""

    engine = "standalone"
    title = "embedded Milvus"

    def __init__(self, data_dir: Any, start_timeout_s: float = 60.0, cache_dir: str = "") -> None:
        super().__init__(data_dir, HOST, start_timeout_s)
        self.cache_dir = cache_dir
        self._secret: dict[str, str] | None = None

    @property
    def home(self) -> Path:
        return self.data_dir / "standalone"

    @property
    def token(self) -> str:
        return f"root:{self.secret()['password']}"

    def secret(self) -> dict[str, str]:
        """The generated root password and etcd root path (created with the data directory)."""
        if self._secret is None:
            path = self.home / "secret.json"
            if not path.is_file():
                self.home.mkdir(parents=True, exist_ok=True)
                self.home.chmod(0o700)
                _write_private(path, json.dumps({"password": secrets.token_urlsafe(24),
                                                 "etcd_root_path": f"hygraph-{secrets.token_hex(12)}"}))
            try:
                self._secret = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise StoreError(f"{path}: unreadable ({exc.__class__.__name__})") from None
        return self._secret

    # ---- launch ----------------------------------------------------------------------------------
    def _spawn(self, previous: dict[str, Any] | None) -> None:
        # A port chosen free can be taken before the server binds it: try again with new ones.
        for attempt in range(3):
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                return super()._spawn(previous)
            except StoreUnavailable:
                if attempt == 2 or "address already in use" not in self._log_since(offset):
                    raise

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(offset)
                return fh.read(1 << 20).decode("utf-8", "replace")
        except OSError:
            return ""

    def config(self, ports: dict[str, int]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The server's `milvus.yaml` and its embedded etcd's config for these ports."""
        home, secret = self.home, self.secret()
        client, peer = f"http://{HOST}:{ports['etcd_port']}", f"http://{HOST}:{ports['etcd_peer_port']}"
        etcd = {"listen-client-urls": client, "advertise-client-urls": client,
                "listen-peer-urls": peer, "initial-advertise-peer-urls": peer,
                "initial-cluster": f"default={peer}", "listen-metrics-urls": "", "log-level": "warn",
                "auto-compaction-mode": "revision", "auto-compaction-retention": "1000"}
        values: dict[str, Any] = {k: ports[k] for k in TEMPLATE_PORTS}
        values.update(etcd_log_path="stdout", etcd_log_level="warn", etcd_data_dir=str(home / "data" / "etcd"),
                      local_storage_dir=str(home / "data"), rocksmq_data_dir=str(home / "data" / "rocksmq"),
                      system_log_path="", authorization_enabled=True)
        overrides: dict[str, Any] = {
            "etcd.endpoints": f"{HOST}:{ports['etcd_port']}",
            "etcd.rootPath": secret["etcd_root_path"],
            "etcd.config.path": str(home / "configs" / "embedEtcd.yaml"),
            "etcd.use.embed": True,
            "indexCoord.bindIndexNodeMode.address": f"{HOST}:{ports['index_coord_port']}",
            "proxy.http.enabled": False,  # the RESTful API: hygraph speaks gRPC only
            "log.level": "warn",
            "log.file.rootPath": "",
            "log.stdout": True,
            # A SIGTERM'd 2.3.5 standalone otherwise waits up to 30 minutes for its query node.
            "common.gracefulStopTimeout": 5,
            "queryNode.gracefulStopTimeout": 2,
            "indexNode.gracefulStopTimeout": 2,
            "grpc.gracefulStopTimeout": 2,
            **{f"{c}.ip": HOST for c in COMPONENTS},  # advertised addresses: internal traffic on loopback
        }
        return render_config((package_dir() / "config.yaml.template").read_text(), values, overrides), etcd

    def _launch(self, log: Any, previous: dict[str, Any] | None) -> tuple[subprocess.Popen, dict[str, Any]]:
        bindir = binaries(cache_root(self.cache_dir))
        home = self.home
        for sub in ("configs", "data", "logs", "run"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        home.chmod(0o700)
        # New ports never reuse the dead server's: its etcd sessions are told apart by address.
        old = (previous or {}).get("ports", {}) if (previous or {}).get("engine") == self.engine else {}
        names = TEMPLATE_PORTS + EXTRA_PORTS
        ports = dict(zip(names, free_ports(len(names), avoid=old.values())))
        pkg = package_dir()
        cfg, etcd = self.config(ports)
        etcd_yaml = home / "configs" / "embedEtcd.yaml"
        etcd_yaml.write_text(yaml.safe_dump(etcd))
        _write_private(home / "configs" / "milvus.yaml", yaml.safe_dump(cfg, sort_keys=False))
        glog = (pkg / "glog.conf").read_text()
        glog = re.sub(r"--minloglevel=\d+", "--minloglevel=2", glog)
        glog = re.sub(r"--log_dir=.*", f"--log_dir={home / 'logs'}", glog)
        (home / "configs" / "glog.conf").write_text(glog)
        env = {k: os.environ[k] for k in KEEP_ENV if k in os.environ}
        env.update(DEPLOY_MODE="STANDALONE", METRICS_PORT=str(ports["metrics_port"]),
                   MILVUSCONF=str(home / "configs") + os.sep, LD_LIBRARY_PATH=str(bindir),
                   MILVUS_RUN_DIR=str(home / "run"))  # its pid file lock; the default /run/milvus is shared
        os.chmod(self.log_path, 0o600)
        proc = subprocess.Popen([str(bindir / "milvus"), "run", "standalone"], cwd=home, env=env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        return proc, {"host": HOST, "port": ports["proxy_port"], "ports": ports, "auth": True,
                      "milvus": package_version()}

    # ---- readiness -------------------------------------------------------------------------------
    def _healthy(self, state: dict[str, Any]) -> bool:
        try:
            return "OK" in _http_json(f"http://{HOST}:{state['ports']['metrics_port']}/healthz", timeout=1.0)
        except (OSError, ValueError):
            return False

    def _wait_ready(self, proc: subprocess.Popen, state: dict[str, Any], deadline: float) -> None:
        ours = set(state["ports"].values())
        while True:
            self._check_alive(proc, deadline)
            self._revoke_stale_sessions(state["ports"]["etcd_port"], ours)
            if self._healthy(state) and listening(HOST, state["port"]):
                break
            time.sleep(0.2)
        self._ensure_password(proc, state, deadline)

    def _revoke_stale_sessions(self, etcd_port: int, ours: set[int]) -> None:
        """Revoke the leases of sessions a dead server left in etcd (their address is not one of ours):
        the new server's coordinators cannot register until they are gone."""
        prefix = f"{self.secret()['etcd_root_path']}/meta/session/".encode()
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        url = f"http://{HOST}:{etcd_port}/v3"
        try:
            found = _http_json(f"{url}/kv/range", {"key": b64(prefix), "range_end": b64(prefix[:-1] + b"0")})
            for kv in found.get("kvs", []):
                lease = kv.get("lease")
                if not lease:
                    continue
                try:
                    port = int(json.loads(base64.b64decode(kv["value"]))["Address"].rsplit(":", 1)[1])
                except (ValueError, KeyError, TypeError, IndexError):
                    continue
                if port not in ours:
                    _http_json(f"{url}/lease/revoke", {"ID": lease})
        except (OSError, ValueError, AttributeError):
            return  # etcd not up yet, or nothing to do

    def _ensure_password(self, proc: subprocess.Popen, state: dict[str, Any], deadline: float) -> None:
        """`root` answers with the generated password; a fresh server's default one is replaced first."""
        from pymilvus import MilvusClient
        from pymilvus.exceptions import MilvusException

        uri, password = f"http://{HOST}:{state['port']}", self.secret()["password"]

        def attempt(token: str, change: bool) -> bool:
            try:
                client = MilvusClient(uri=uri, token=token, timeout=5)
            except MilvusException:
                return False
            try:
                if change:
                    client.update_password("root", DEFAULT_ROOT_PASSWORD, password, timeout=10)
                else:
                    client.list_collections(timeout=10)
                return True
            except MilvusException:
                return False
            finally:
                client.close()

        while not attempt(f"root:{password}", False):
            attempt(f"root:{DEFAULT_ROOT_PASSWORD}", True)
            self._check_alive(proc, deadline)
            time.sleep(0.3)

    def _after_exit(self, state: dict[str, Any]) -> None:
        # Milvus 2.3.5 writes `<tmp>/milvus/server_id_<pid>` and removes it only on a clean exit.
        for tmp in {Path("/tmp"), Path(tempfile.gettempdir())}:
            (tmp / "milvus" / f"server_id_{state['pid']}").unlink(missing_ok=True)
