"""The embedded Milvus standalone server (`vector_store.uri: embedded`, the default) as a managed child.

The `milvus` PyPI package (2.3.5) ships the Milvus standalone binary; its own launcher
(`milvus-server`) starts it on nine fixed ports plus etcd on 127.0.0.1:2379/2380, scans for a free
metrics port from 9091 (so two instances can pick the same one), unpacks 250 MB of binaries into
every data directory, and leaves the binary running when the launcher itself is killed. hygraph
therefore runs the binary directly, under `managed.py`'s lifecycle:

- binaries unpacked once per machine into a cache directory, shared by every index;
- every port chosen free at start: proxy, proxy internal, root/query/data coord, query/index/data
  node, the (unused) index coord address, etcd client and peer, and the metrics/health port;
- network isolation (`vector_store.isolation`): Milvus 2.3.5's gRPC servers and its
  metrics/health HTTP server listen on every interface whatever the configuration says
  (`<component>.ip` only sets the advertised address), and authorization covers only the proxy.
  So the binary runs in a private network namespace (`netns.py`, `netns_relay.py`) where nothing
  from outside reaches any of its sockets; clients reach the proxy through a socket this process
  binds on 127.0.0.1, and this process reaches etcd and the health port through Unix sockets in a
  private directory. Where user namespaces are unavailable, `auto` falls back to running it
  directly (with a warning naming the exposed ports) and `netns` refuses to start;
- etcd (embedded) on 127.0.0.1, and authorization on in every mode: `root` gets a generated
  password and etcd's root path (which is also the key of the metrics port's `/expr` endpoint) is
  generated too; both are in `<index>/milvus/standalone/secret.json` (0600) and never logged. The
  adapter uses them;
- a restart after a crash revokes the dead server's etcd sessions, which would otherwise hold the
  new one back until their 30 s leases expire (about a minute of startup);
- the server's own environment is reduced to the few variables it needs, because Milvus reads any
  variable named like a config key (`ETCD_ENDPOINTS`, `PROXY_PORT`, ...) as an override.
"""

from __future__ import annotations

import base64
import http.client
import importlib.metadata
import importlib.util
import json
import logging
import lzma
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from hygraph.backends.vectorstore import netns
from hygraph.backends.vectorstore.managed import EXITED_WHILE_STARTING, ManagedServer, free_ports, listening
from hygraph.errors import StoreError, StoreUnavailable
from hygraph.processes import locked, pid_alive

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
# Inside the namespace, the ports this process reaches through the relay's Unix sockets.
CONTROL_PORTS = ("etcd_port", "metrics_port")

log = logging.getLogger(__name__)


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


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket: how this process reaches a port inside the server's namespace."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


# What a failed call to etcd's gateway or the health port raises: connection errors, HTTP errors,
# and bodies that are not what we expect.
HTTP_ERRORS = (OSError, ValueError, http.client.HTTPException)


def http_json(conn: http.client.HTTPConnection, path: str, body: dict[str, Any] | None = None) -> Any:
    """GET (no body: the text) or POST a JSON body (the parsed reply); an HTTP error status raises."""
    try:
        conn.request("POST" if body is not None else "GET", path,
                     body=json.dumps(body).encode() if body is not None else None,
                     headers={"Content-Type": "application/json"} if body is not None else {})
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    if resp.status >= 400:
        raise http.client.HTTPException(f"HTTP {resp.status} from {path}")
    return json.loads(raw) if body is not None else raw.decode("utf-8", "replace")


def _gone(pid: int) -> bool:
    """Exited (a zombie counts: it holds nothing but its pid until its parent collects it)."""
    if not pid_alive(pid):
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return not pid_alive(pid)


class StandaloneServer(ManagedServer):
    """Milvus 2.3.5 standalone for one index: `<data_dir>/standalone/` holds its config, data,
    secret and glog files; `<data_dir>/server.log` its output."""

    engine = "standalone"
    title = "embedded Milvus"

    def __init__(self, data_dir: Any, start_timeout_s: float = 60.0, cache_dir: str = "",
                 isolation: str = "auto") -> None:
        super().__init__(data_dir, HOST, start_timeout_s)
        self.cache_dir = cache_dir
        self.isolation = isolation
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
        """Up to three starts: a port chosen free can be taken before the server binds it, and 2.3.5 can exit
        during its start on a loaded node (its embedded etcd's "leader changed"); each try takes new ports.
        A server that did not answer in time is not started again (that would only double the wait)."""
        for attempt in range(3):
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                return super()._spawn(previous)
            except StoreUnavailable as exc:
                exited = EXITED_WHILE_STARTING in str(exc) or "address already in use" in self._log_since(offset)
                if attempt == 2 or not exited:
                    raise
                log.warning("the Milvus server exited while starting (try %d of 3); starting it again (see %s)",
                            attempt + 1, self.log_path)

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
            # A write is visible once its channel's time tick passes it, and every published version waits
            # for that (a strongly consistent read): at the default 200 ms a single-document insert took
            # 0.20 s, at 50 ms 0.10-0.16 s (docs/bench/scale.md). The price is the idle server's CPU: with an
            # index's 6 collections loaded, 41 ms a second at 200 ms, 61 at 100, 102 at 50 (milvus_idle in
            # docs/bench/serve_musique_s56.md); rootCoord.dmlChannelNum changes nothing of it.
            "proxy.timeTickInterval": 50,
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
        # (Isolated, they are the namespace's own and only that matters; free on the host as well,
        # they are the same ports whichever way the server runs.)
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
        command = [str(bindir / "milvus"), "run", "standalone"]
        fields: dict[str, Any] = {"host": HOST, "ports": ports, "auth": True, "milvus": package_version()}
        if not self._isolate(ports):
            proc = subprocess.Popen(command, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            return proc, {**fields, "port": ports["proxy_port"], "isolation": "none"}
        # The proxy is relayed from a port bound here, on 127.0.0.1, so it cannot be taken meanwhile;
        # etcd and the health port from Unix sockets in a directory only this user can enter.
        control = Path(tempfile.mkdtemp(prefix="hygraph-milvus-"))
        listeners: list[socket.socket] = []
        try:
            listeners.append(netns.loopback_listener())
            listeners += [netns.unix_listener(control / f"{name}.sock") for name in CONTROL_PORTS]
            forwards = list(zip(listeners, [ports["proxy_port"], *(ports[name] for name in CONTROL_PORTS)]))
            proc = subprocess.Popen(netns.relay_command(forwards, command), cwd=home, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                    pass_fds=[s.fileno() for s in listeners])
            port = listeners[0].getsockname()[1]
        except BaseException:
            shutil.rmtree(control, ignore_errors=True)
            raise
        finally:
            # The relay holds them now; closed here, so they close for good when the relay dies.
            for sock in listeners:
                sock.close()
        return proc, {**fields, "port": port, "isolation": "netns", "control": str(control)}

    def _adopt(self, state: dict[str, Any]) -> None:
        if self.isolation == "netns" and state.get("isolation") != "netns":
            raise StoreError(f"vector_store.isolation: netns, but the embedded Milvus server of {self.data_dir} "
                             f"(pid {state['pid']}) runs without network isolation; stop the processes that use "
                             f"it, or set vector_store.isolation to auto or none")
        super()._adopt(state)

    def _isolate(self, ports: dict[str, int]) -> bool:
        """Whether to run the server in a private network namespace (`vector_store.isolation`)."""
        if self.isolation == "none":
            return False
        why = netns.unavailable()
        if not why:
            return True
        if self.isolation == "netns":
            raise StoreError(f"vector_store.isolation: netns needs unprivileged user namespaces, and {why}; "
                             f"set vector_store.isolation to auto or none to run the embedded Milvus server "
                             f"without network isolation")
        exposed = ", ".join(f"{name.removesuffix('_port')} {port}" for name, port in ports.items()
                            if name not in ("etcd_port", "etcd_peer_port", "index_coord_port"))
        log.warning("the embedded Milvus server runs without network isolation (%s): its ports %s listen on "
                    "every interface, and only the proxy's needs a password; vector_store.isolation: none "
                    "accepts this without a warning, netns refuses to start", why, exposed)
        return False

    # ---- readiness -------------------------------------------------------------------------------
    @staticmethod
    def endpoint(state: dict[str, Any], name: str, timeout: float = 2.0) -> http.client.HTTPConnection:
        """An HTTP connection to the server's etcd (`etcd_port`) or health port (`metrics_port`):
        through the relay's Unix socket when it runs in its own namespace."""
        if state.get("control"):
            return UnixHTTPConnection(str(Path(state["control"]) / f"{name}.sock"), timeout)
        return http.client.HTTPConnection(HOST, state["ports"][name], timeout=timeout)

    def _healthy(self, state: dict[str, Any]) -> bool:
        try:
            return "OK" in http_json(self.endpoint(state, "metrics_port", 1.0), "/healthz")
        except HTTP_ERRORS:
            return False

    def _wait_ready(self, proc: subprocess.Popen, state: dict[str, Any], deadline: float) -> None:
        while True:
            self._check_alive(proc, deadline)
            if state.get("control") and not state.get("milvus_pid"):
                self._note_relayed_pid(proc, state)
            self._revoke_stale_sessions(state)
            # Isolated, the proxy's host side accepts from the start: the password check below is
            # what shows the proxy answers.
            if self._healthy(state) and (state.get("control") or listening(HOST, state["port"])):
                break
            time.sleep(0.2)
        self._ensure_password(proc, state, deadline)

    def _note_relayed_pid(self, relay: subprocess.Popen, state: dict[str, Any]) -> None:
        """Record the Milvus process, the relay's only child, once it runs: whoever stops the server
        waits for it to be gone, and removes what it leaves behind by its pid."""
        try:
            children = Path(f"/proc/{relay.pid}/task/{relay.pid}/children").read_text().split()
        except OSError:
            return  # the relay just exited: the next `_check_alive` says so
        if children:
            state["milvus_pid"] = int(children[0])
            self._write_state(state)

    def _revoke_stale_sessions(self, state: dict[str, Any]) -> None:
        """Revoke the leases of sessions a dead server left in etcd (their address is not one of ours):
        the new server's coordinators cannot register until they are gone."""
        ours = set(state["ports"].values())
        prefix = f"{self.secret()['etcd_root_path']}/meta/session/".encode()
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        try:
            found = http_json(self.endpoint(state, "etcd_port"), "/v3/kv/range",
                              {"key": b64(prefix), "range_end": b64(prefix[:-1] + b"0")})
            for kv in found.get("kvs", []):
                lease = kv.get("lease")
                if not lease:
                    continue
                try:
                    port = int(json.loads(base64.b64decode(kv["value"]))["Address"].rsplit(":", 1)[1])
                except (ValueError, KeyError, TypeError, IndexError):
                    continue
                if port not in ours:
                    http_json(self.endpoint(state, "etcd_port"), "/v3/lease/revoke", {"ID": lease})
        except (*HTTP_ERRORS, AttributeError):
            return  # etcd not up yet, or nothing to do

    def _ensure_password(self, proc: subprocess.Popen, state: dict[str, Any], deadline: float) -> None:
        """`root` answers with the generated password; a fresh server's default one is replaced first."""
        # Imported here, not at the top: the watchdog, which only stops servers, stays without pymilvus.
        import hygraph.backends.vectorstore.milvus  # noqa: F401  (imports pymilvus and quiets its logger)
        from pymilvus import MilvusClient

        uri, password = f"http://{HOST}:{state['port']}", self.secret()["password"]

        def attempt(token: str, change: bool) -> str | None:
            """None once the call succeeded, else what the server said. A starting server refuses in more ways
            than MilvusException (gRPC errors while etcd elects a leader, connection resets): each is a "not
            yet" until the deadline, never a reason to kill a server that is still coming up."""
            try:
                client = MilvusClient(uri=uri, token=token, timeout=5)
            except Exception as exc:  # noqa: BLE001 (see above; bounded by the deadline)
                return f"{type(exc).__name__}: {exc}"
            try:
                if change:
                    client.update_password("root", DEFAULT_ROOT_PASSWORD, password, timeout=10)
                else:
                    client.list_collections(timeout=10)
                return None
            except Exception as exc:  # noqa: BLE001
                return f"{type(exc).__name__}: {exc}"
            finally:
                client.close()

        while (refused := attempt(f"root:{password}", False)) is not None:
            attempt(f"root:{DEFAULT_ROOT_PASSWORD}", True)
            try:
                self._check_alive(proc, deadline)
            except StoreUnavailable as exc:
                raise StoreUnavailable(f"{exc}; its last answer to the password check: {refused[:300]}") from None
            time.sleep(0.3)

    def _after_exit(self, state: dict[str, Any]) -> None:
        milvus = int(state.get("milvus_pid") or state["pid"])
        if milvus != state["pid"]:
            # The relay is gone. A SIGKILL'd relay's Milvus gets SIGKILL too (PR_SET_PDEATHSIG); it
            # must have exited before a new server opens the same data.
            for sig in (None, signal.SIGKILL):
                if sig is not None and not _gone(milvus) and self._is_server(milvus):
                    try:
                        os.kill(milvus, sig)
                    except ProcessLookupError:
                        pass
                deadline = time.monotonic() + 10
                while not _gone(milvus) and self._is_server(milvus) and time.monotonic() < deadline:
                    time.sleep(0.05)
        # Milvus 2.3.5 writes `<tmp>/milvus/server_id_<pid>` and removes it only on a clean exit.
        for tmp in {Path("/tmp"), Path(tempfile.gettempdir())}:
            (tmp / "milvus" / f"server_id_{milvus}").unlink(missing_ok=True)
        control = Path(state.get("control") or "")
        if control.name.startswith("hygraph-milvus-") and control.parent == Path(tempfile.gettempdir()):
            shutil.rmtree(control, ignore_errors=True)
