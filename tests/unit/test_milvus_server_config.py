"""The embedded Milvus server's generated configuration, without starting it."""

from __future__ import annotations

import json
import stat

import pytest

pytest.importorskip("yaml")
from hygraph.backends.vectorstore import managed  # noqa: E402
from hygraph.backends.vectorstore import milvus_server as ms  # noqa: E402
from hygraph.errors import StoreUnavailable  # noqa: E402

if ms.importlib.util.find_spec("milvus") is None:
    pytest.skip("the milvus package is not installed", allow_module_level=True)

NAMES = ms.TEMPLATE_PORTS + ms.EXTRA_PORTS


def _walk(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    else:
        yield path, node


def test_every_port_is_one_chosen_at_start(tmp_path):
    ports = dict(zip(NAMES, managed.free_ports(len(NAMES))))
    cfg, etcd = ms.StandaloneServer(tmp_path).config(ports)
    ours = set(ports.values())
    # Every value that names a port (`port`, `internalPort`, `host:port` endpoints) is one of ours:
    # none of the template's fixed defaults (19530, 19529, 53100, 2379, ...) survives.
    for path, value in _walk(cfg):
        leaf = path.rsplit(".", 1)[-1]
        if leaf in ("port", "internalPort") and path.split(".")[0] in ms.COMPONENTS:
            assert value in ours, path
    assert cfg["etcd"]["endpoints"] == f"127.0.0.1:{ports['etcd_port']}"
    assert etcd["listen-client-urls"] == f"http://127.0.0.1:{ports['etcd_port']}"
    assert etcd["listen-peer-urls"] == f"http://127.0.0.1:{ports['etcd_peer_port']}"
    assert "2379" not in json.dumps(etcd) and "2380" not in json.dumps(etcd)
    assert {cfg[c]["ip"] for c in ms.COMPONENTS} == {"127.0.0.1"}


def test_authorization_and_a_generated_etcd_root_path(tmp_path):
    server = ms.StandaloneServer(tmp_path)
    ports = dict(zip(NAMES, managed.free_ports(len(NAMES))))
    cfg, _ = server.config(ports)
    secret = server.secret()
    assert cfg["common"]["security"]["authorizationEnabled"] is True
    # etcd's root path is also the key of the metrics port's /expr endpoint: never the default by-dev.
    assert cfg["etcd"]["rootPath"] == secret["etcd_root_path"] != "by-dev"
    assert len(secret["password"]) >= 24 and secret["password"] != ms.DEFAULT_ROOT_PASSWORD
    mode = (server.home / "secret.json").stat().st_mode
    assert stat.S_IMODE(mode) == 0o600 and stat.S_IMODE(server.home.stat().st_mode) == 0o700
    assert ms.StandaloneServer(tmp_path).secret() == secret  # stable for the data directory
    assert cfg["proxy"]["http"]["enabled"] is False


def test_free_ports_are_distinct_and_avoid_the_old_ones():
    old = managed.free_ports(5)
    new = managed.free_ports(20, avoid=old)
    assert len(set(new)) == 20 and not set(new) & set(old)


def test_template_placeholders_are_all_filled():
    text = (ms.package_dir() / "config.yaml.template").read_text()
    cfg = ms.render_config(text, {"proxy_port": 1234}, {"a.b.c": 1, "proxy.ip": "127.0.0.1"})
    assert cfg["proxy"]["port"] == 1234 and cfg["proxy"]["ip"] == "127.0.0.1" and cfg["a"]["b"]["c"] == 1
    assert "{{" not in json.dumps(cfg)


def _ports():
    return dict(zip(NAMES, managed.free_ports(len(NAMES))))


def test_isolation_none_runs_directly_without_probing(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(ms.netns, "unavailable", lambda: pytest.fail("`none` must not probe"))
    assert ms.StandaloneServer(tmp_path, isolation="none")._isolate(_ports()) is False
    assert not caplog.records


def test_isolation_netns_without_user_namespaces_is_one_line_naming_the_setting(tmp_path, monkeypatch):
    monkeypatch.setattr(ms.netns, "unavailable", lambda: "`unshare -rn` failed: Operation not permitted")
    with pytest.raises(ms.StoreError) as err:
        ms.StandaloneServer(tmp_path, isolation="netns")._isolate(_ports())
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("vector_store.isolation: netns") and "Operation not permitted" in msg


def test_isolation_auto_falls_back_with_one_warning_naming_the_exposed_ports(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(ms.netns, "unavailable", lambda: "`unshare` (util-linux) is not installed")
    ports = _ports()
    with caplog.at_level("WARNING", logger=ms.log.name):
        assert ms.StandaloneServer(tmp_path)._isolate(ports) is False
    [record] = caplog.records
    text = record.getMessage()
    assert "\n" not in text and "vector_store.isolation" in text and "not installed" in text
    # The ports that listen on every interface are named; etcd's (loopback) and the unused index
    # coordinator address are not.
    for name, port in ports.items():
        assert (f" {port}" in text) == (name not in ("etcd_port", "etcd_peer_port", "index_coord_port")), name


def test_isolation_auto_and_netns_use_the_namespace_where_it_works(tmp_path, monkeypatch):
    monkeypatch.setattr(ms.netns, "unavailable", lambda: "")
    for isolation in ("auto", "netns"):
        assert ms.StandaloneServer(tmp_path, isolation=isolation)._isolate(_ports()) is True


def test_the_relay_command_runs_the_standard_library_relay_in_a_new_user_and_network_namespace():
    import socket

    with socket.socket() as a, socket.socket() as b:
        argv = ms.netns.relay_command([(a, 1), (b, 2)], ["/bin/milvus", "run", "standalone"])
        fds = a.fileno(), b.fileno()
    assert argv[1:2] == ["-rn"] and argv[3:6] == ["-I", "-S", str(ms.netns.RELAY)]
    assert argv[6:] == [f"--forward={fds[0]}:1", f"--forward={fds[1]}:2", "--", "/bin/milvus", "run", "standalone"]


def test_isolation_netns_does_not_attach_to_a_server_running_without_it(tmp_path):
    running = {"engine": "standalone", "pid": 4242, "host": "127.0.0.1", "port": 1234, "isolation": "none"}
    with pytest.raises(ms.StoreError, match="runs without network isolation") as err:
        ms.StandaloneServer(tmp_path, isolation="netns")._adopt(running)
    assert "\n" not in str(err.value) and "vector_store.isolation" in str(err.value)
    for isolation in ("auto", "none"):
        server = ms.StandaloneServer(tmp_path, isolation=isolation)
        server._adopt(running)
        assert server.port == 1234
    strict = ms.StandaloneServer(tmp_path, isolation="netns")
    strict._adopt({**running, "isolation": "netns"})
    assert strict.pid == 4242


@pytest.mark.parametrize("failures,error,starts,raised", [
    (1, "exited while starting (status 1; see log)", 2, False),  # a crash during start: started again
    (3, "exited while starting (status 1; see log)", 3, True),   # three crashes: given up
    (1, "did not answer within 60 s (see log)", 1, True),        # too slow: not started again
])
def test_a_server_that_exits_while_starting_is_started_again(tmp_path, monkeypatch, failures, error, starts,
                                                             raised):
    calls: list[int] = []

    def spawn(self, previous):  # noqa: ANN001 - ManagedServer._spawn's signature
        calls.append(1)
        if len(calls) <= failures:
            raise StoreUnavailable(f"the Milvus server {error}")

    monkeypatch.setattr(ms.ManagedServer, "_spawn", spawn)
    server = ms.StandaloneServer(tmp_path)
    if raised:
        with pytest.raises(StoreUnavailable):
            server._spawn(None)
    else:
        server._spawn(None)
    assert len(calls) == starts


def test_the_password_check_waits_out_any_refusal_of_a_starting_server(tmp_path, monkeypatch):
    """A server electing its etcd leader refuses with gRPC errors, not only MilvusException: each is "not yet",
    the default password is then replaced, and a server that never accepts ends at the deadline with its answer."""
    import pymilvus

    server = ms.StandaloneServer(tmp_path)
    password = server.secret()["password"]
    changed: list[str] = []
    refusals = iter([ConnectionResetError("reset by peer"), RuntimeError("leader changed")])

    class Client:
        def __init__(self, uri: str, token: str, timeout: float) -> None:
            refusal = next(refusals, None)
            if refusal is not None:
                raise refusal
            self.token = token

        def update_password(self, user, old, new, timeout):  # noqa: ANN001 - MilvusClient's signature
            changed.append(new)

        def list_collections(self, timeout):  # noqa: ANN001
            if self.token != f"root:{password}" or not changed:
                raise RuntimeError("auth failed")
            return []

        def close(self) -> None:
            pass

    class Alive:
        returncode = None

        def poll(self):  # noqa: ANN201
            return None

    monkeypatch.setattr(pymilvus, "MilvusClient", Client)
    monkeypatch.setattr(ms.time, "sleep", lambda s: None)
    server._ensure_password(Alive(), {"port": 1}, ms.time.monotonic() + 60)
    assert changed == [password]

    refusals = iter(lambda: RuntimeError("still electing"), None)
    with pytest.raises(StoreUnavailable, match="did not answer within .*still electing"):
        server._ensure_password(Alive(), {"port": 1}, ms.time.monotonic() - 1)
