"""Keeping a local Ray on 127.0.0.1 (the `ray.loopback_only` setting of the local profile).

Ray binds a single-machine cluster to loopback when `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` is set
before `ray` is imported (its laptop mode: node address 127.0.0.1, so GCS, raylet, agents,
workers and the metrics exporter listen there). One socket escapes it: Ray Serve 2.60 starts
each replica's inter-deployment gRPC server on `[::]:0` unconditionally (token-authenticated,
but reachable from the network). `bind_replica_grpc_to_loopback` runs in every worker process
(Ray's `worker_process_setup_hook`) and moves that server to the node's loopback address, which
is the address other replicas dial anyway. `tests/integration/test_sockets.py` fails if a Ray
upgrade moves the symbol or opens another public socket.
"""

from __future__ import annotations

import ipaddress
import os

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
SETUP_HOOK = "hygraph.runtime.loopback.bind_replica_grpc_to_loopback"


def request_loopback() -> None:
    """Ask Ray for its loopback node address; effective only before `ray` is first imported."""
    os.environ.update(LOOPBACK_ENV)


def is_loopback(host: str) -> bool:
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost"
    mapped = getattr(addr, "ipv4_mapped", None)
    return addr.is_loopback or bool(mapped and mapped.is_loopback)


def bind_replica_grpc_to_loopback() -> None:
    """Worker setup hook: Serve replicas' gRPC servers listen on 127.0.0.1 instead of every interface."""
    from ray.serve._private import replica

    bind = replica.add_port_to_grpc_server
    if getattr(bind, "__hygraph_loopback__", False):
        return

    def loopback(server, address: str):  # noqa: ANN001, ANN202 - grpc's server type is untyped
        if address.startswith("[::]:"):
            address = "127.0.0.1:" + address.rsplit(":", 1)[1]
        return bind(server, address)

    loopback.__hygraph_loopback__ = True  # type: ignore[attr-defined]
    replica.add_port_to_grpc_server = loopback
