"""`runtime.ensure_port_free`: a listening server is refused at once; a port held only by the closing
connections of a dead server is free to a server that sets SO_REUSEADDR and waited for by one that does not
(a direct-ingress replica)."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from hygraph.errors import InputError
from hygraph.runtime import ensure_port_free


def test_a_listening_server_is_refused_at_once():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(InputError, match=f"serve.port: port {port} on 127.0.0.1 is in use"):
            ensure_port_free("127.0.0.1", port, "serve.port", reuse_address=False, linger_wait_s=30)
        assert time.monotonic() - started < 5


def _closed_by_the_server(reuse_address: bool) -> int:
    """A port whose server closed an accepted connection first and then stopped listening: the connection
    stays in FIN_WAIT2/TIME_WAIT on the port, as after a killed server with a client connected."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse_address))
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()
    client.close()
    return port


def test_a_dead_servers_closing_connections_are_waited_for_only_by_a_server_without_reuseaddr(caplog):
    # Both sides set SO_REUSEADDR (Serve's proxy, before and after a restart): the port is free.
    ensure_port_free("127.0.0.1", _closed_by_the_server(reuse_address=True), "serve.port")
    # A direct-ingress replica sets none: its last connections keep the port from its successor.
    port = _closed_by_the_server(reuse_address=False)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="hygraph.runtime"), pytest.raises(InputError, match="in use"):
        ensure_port_free("127.0.0.1", port, "serve.port", reuse_address=False, linger_wait_s=1.0)
    assert 1.0 <= time.monotonic() - started < 5
    assert "closing; waiting up to 1 s" in caplog.text
